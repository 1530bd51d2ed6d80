//! A waiting room ends: its keys go the room grace after its sale ends
//! (`--room-grace-secs`, an hour by default), set by the scripts that
//! write them, so an ended room costs Redis nothing.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{Options, TestApp, eventually, spawn_app, spawn_app_with};
use crate::payment::{make_deadlines_due, run_deadlines_until};
use crate::waiting_room::{admission, admitted, buy, fifo, joined, standing, ticket};
use seckill_core::config::DEFAULT_ROOM_GRACE_SECS;
use seckill_core::domain::{Sale, UserId};
use seckill_core::waiting_room;

/// Each key of sale's room, and when it expires (ms; -1: never, -2: gone).
async fn expiries(app: &TestApp, sale: i64) -> Vec<(String, i64)> {
    let mut redis = app.redis_conn().await;
    let mut found = Vec::new();
    for key in app.keys(sale).room.all() {
        let at: i64 = redis::cmd("PEXPIRETIME")
            .arg(key)
            .query_async(&mut redis)
            .await
            .expect("PEXPIRETIME");
        found.push((key.to_owned(), at));
    }
    found
}

/// A sale of 5 units with a `fifo` room of one active buyer, ending
/// `ends_in` from now: its id, and the sale as stored.
async fn roomed_sale(app: &TestApp, ends_in: chrono::Duration) -> (i64, Sale) {
    let sale = app
        .create_sale_with(json!({
            "name": "Roomed", "stock": 5, "price_cents": 100,
            "ends_at": chrono::Utc::now() + ends_in, "waiting_room": fifo(100, 1),
        }))
        .await;
    let stored = app.store.sale(sale).await.expect("the sale");
    (sale, (*stored.expect("a sale")).clone())
}

/// ann, bob and carl join sale's room (a `fifo` of one active buyer);
/// ann is admitted and buys, and does not pay: her unit comes back, and
/// her admission goes into the room's bought (`lua/unit_return.lua`).
/// Returns bob's and carl's tickets.
async fn ann_buys_and_does_not_pay(app: &TestApp, sale: i64) -> [String; 2] {
    let ann = ticket(&joined(app, sale, "ann").await);
    let bob = ticket(&joined(app, sale, "bob").await);
    let carl = ticket(&joined(app, sale, "carl").await);
    let ann = admitted(app, sale, &ann).await;
    let bought = buy(app, sale, "ann", Some(admission(&ann))).await;
    assert_eq!(bought.status(), 202);
    let body: serde_json::Value = bought.json().await.expect("an order");
    let order = body["order_id"].as_str().expect("an order id");
    app.drain().await;
    make_deadlines_due(app, sale, &[order.parse().expect("a uuid")]).await;
    run_deadlines_until(app, sale, |report| report.cancelled == 1).await;
    [bob, carl]
}

/// After [`ann_buys_and_does_not_pay`]: bob is admitted, carl waits, so every key of the
/// room is there (the line and who was seen, the admitted and the state,
/// the bought).
async fn bob_admitted_carl_waits(app: &TestApp, sale: i64, [bob, carl]: &[String; 2]) {
    admitted(app, sale, bob).await;
    standing(app, sale, carl).await;
}

#[tokio::test]
async fn a_rooms_keys_expire_a_grace_after_its_sale_ends_and_go_once_it_has_passed() {
    let app = spawn_app().await;
    let (sale, stored) = roomed_sale(&app, chrono::Duration::hours(2)).await;
    let ends_ms = stored.ends_at.expect("an end").timestamp_millis();
    let grace_ms = i64::try_from(DEFAULT_ROOM_GRACE_SECS * 1000).expect("an hour");
    // Every key the room writes: the line and who was seen (bob waits),
    // the admitted and the state (ann is admitted), the bought (ann's
    // unit comes back: the last write, with no visit after it).
    let waiting = ann_buys_and_does_not_pay(&app, sale).await;
    // The bought set, made by the return, expires with the room at once.
    let bought = &app.keys(sale).room.bought;
    let at = expiries(&app, sale).await;
    assert!(at.contains(&(bought.clone(), ends_ms + grace_ms)), "{at:?}");
    bob_admitted_carl_waits(&app, sale, &waiting).await;
    for (key, at) in expiries(&app, sale).await {
        assert_eq!(at, ends_ms + grace_ms, "{key} expires then");
    }

    // Once the end and the grace have passed, the next visit finds the
    // room gone, and leaves nothing behind.
    let long_ended = Sale {
        ends_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
        ..stored
    };
    let room = long_ended.waiting_room.expect("a room");
    let carl = UserId::parse("carl").expect("a buyer");
    let seen = waiting_room::visit(&app.store, &long_ended, &room, &carl, true)
        .await
        .expect("a visit");
    assert_eq!(seen.place, waiting_room::Place::Outside);
    tokio::time::sleep(Duration::from_millis(50)).await;
    for (key, at) in expiries(&app, sale).await {
        assert_eq!(at, -2, "{key} is still there");
    }
}

/// `--room-grace-secs 1`: an instance so started gives every key of a room
/// the expiry of its sale's end and one second, and they are gone once
/// that has passed, with no visit to the room after the end.
#[tokio::test]
async fn an_instance_with_a_one_second_grace_lets_a_room_go_a_second_after_its_sale_ends() {
    let app = spawn_app_with(Options {
        room_grace: Duration::from_secs(1),
        ..Options::default()
    })
    .await;
    // Time enough for the joins, an admission, a purchase and its
    // cancellation before the end, on a loaded machine.
    let (sale, stored) = roomed_sale(&app, chrono::Duration::seconds(10)).await;
    let ends_ms = stored.ends_at.expect("an end").timestamp_millis();
    let waiting = ann_buys_and_does_not_pay(&app, sale).await;
    bob_admitted_carl_waits(&app, sale, &waiting).await;
    for (key, at) in expiries(&app, sale).await {
        assert_eq!(at, ends_ms + 1000, "{key} expires a second after the end");
    }
    eventually(Duration::from_secs(20), "the room's keys gone", || async {
        expiries(&app, sale).await.iter().all(|(_, at)| *at == -2)
    })
    .await;
}
