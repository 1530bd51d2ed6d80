//! A waiting room ends: its keys go `ROOM_GRACE` after its sale ends, set
//! by the scripts that write them, so an ended room costs Redis nothing.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{TestApp, spawn_app};
use crate::waiting_room::{admission, admitted, buy, fifo, joined, standing, ticket};
use seckill_core::domain::UserId;
use seckill_core::waiting_room::{self, ROOM_GRACE};

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

#[tokio::test]
async fn a_rooms_keys_expire_a_grace_after_its_sale_ends_and_go_once_it_has_passed() {
    let app = spawn_app().await;
    let ends = chrono::Utc::now() + chrono::Duration::hours(2);
    let sale = app
        .create_sale_with(json!({
            "name": "Roomed", "stock": 5, "price_cents": 100,
            "ends_at": ends, "waiting_room": fifo(100, 1),
        }))
        .await;
    let stored = app
        .store
        .sale(sale)
        .await
        .expect("the sale")
        .expect("a sale");
    let ends_ms = stored.ends_at.expect("an end").timestamp_millis();
    let grace_ms = ROOM_GRACE.as_millis() as i64;
    // Every key the room writes: the line and who was seen (bob waits),
    // the admitted and the state (ann is admitted), the bought (ann buys:
    // the last write, with no visit after it).
    let ann = ticket(&joined(&app, sale, "ann").await);
    let bob = ticket(&joined(&app, sale, "bob").await);
    let carl = ticket(&joined(&app, sale, "carl").await);
    let ann = admitted(&app, sale, &ann).await;
    assert_eq!(
        buy(&app, sale, "ann", Some(admission(&ann))).await.status(),
        202
    );
    // The bought set, made by the purchase, expires with the room at once.
    let bought = &app.keys(sale).room.bought;
    let at = expiries(&app, sale).await;
    assert!(at.contains(&(bought.clone(), ends_ms + grace_ms)), "{at:?}");
    // bob admitted, carl waiting: every key of the room is there.
    admitted(&app, sale, &bob).await;
    standing(&app, sale, &carl).await;
    for (key, at) in expiries(&app, sale).await {
        assert_eq!(at, ends_ms + grace_ms, "{key} expires then");
    }

    // Once the end and the grace have passed, the next visit finds the
    // room gone, and leaves nothing behind.
    let long_ended = seckill_core::domain::Sale {
        ends_at: Some(chrono::Utc::now() - chrono::Duration::hours(2)),
        ..(*stored).clone()
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
