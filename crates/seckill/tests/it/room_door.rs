//! The waiting room's door is one atomic step: with `lock` and `lua`, an
//! admission's spent check and mark are in the purchase's own commit, so
//! an admission buys once whatever dies when; and a roomed purchase sends
//! Redis no command more than another.

use std::time::Duration;

use seckill_core::config::{PurchaseSettings, Strategy};
use seckill_core::domain::UserId;
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::strategy::Shop;
use seckill_core::waiting_room;

use crate::helpers::TestApp;
use crate::payment::{app_with_window, confirmed_order, make_deadlines_due, run_deadlines_until};
use crate::waiting_room::{admitted, fifo, joined, sale_with_room, ticket};

/// A purchaser as an instance named `name` with `strategy` runs it.
fn instance(app: &TestApp, strategy: Strategy, name: &str) -> Purchaser {
    Purchaser::new(Shop::new(
        app.store.clone(),
        PurchaseSettings {
            strategy,
            ..Default::default()
        },
        name,
        Duration::from_secs(600),
        LockReleases::default(),
    ))
}

/// An admitted buyer buys with `strategy` through the purchase alone, as
/// an instance that died after its commit, before any step of the door
/// after it, leaves things; the order goes unpaid and its unit comes
/// back. The same buyer (the same admission) buys nothing more.
async fn an_admission_buys_once_though_the_instance_dies_after_the_commit(strategy: Strategy) {
    let app = app_with_window(600, 100).await;
    let sale = sale_with_room(&app, 1, 0, fifo(10, 10)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    admitted(&app, sale, &ann).await;
    let instance = |name: &str| instance(&app, strategy, name);
    let purchaser = instance("dies");
    let stored = app.store.sale(sale).await.expect("read").expect("a sale");
    let buyer = UserId::parse("ann").expect("a buyer");
    let Outcome::Accepted { order_id } = purchaser
        .purchase(&stored, &buyer)
        .await
        .expect("a purchase")
    else {
        panic!("ann's purchase was refused");
    };
    // Spent in the commit itself: ann bought (she holds a unit), and she
    // is no longer among the admitted.
    let still_admitted: Option<f64> = redis::cmd("ZSCORE")
        .arg(&app.keys(sale).room.admitted)
        .arg("ann")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("the room");
    let spent = waiting_room::has_bought(&app.store, sale, &buyer).await;
    let spent = spent.expect("the room");
    assert_eq!((spent, still_admitted), (true, None), "{strategy:?}");

    // Ann does not pay: her unit comes back, and she holds none.
    app.drain().await;
    make_deadlines_due(&app, sale, &[order_id]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.redis_stock(sale).await, Some(1));
    // Her unit came back, and her admission stays spent.
    let spent = waiting_room::has_bought(&app.store, sale, &buyer).await;
    assert!(spent.expect("the room"), "{strategy:?}");
    // Her admission is spent: it buys nothing more, on another instance
    // (the first knows the sale sold out a moment ago).
    assert_eq!(
        instance("another")
            .purchase(&stored, &buyer)
            .await
            .expect("an answer"),
        Outcome::AlreadyPurchased { order_id: None },
        "{strategy:?}"
    );
    assert_eq!(app.redis_stock(sale).await, Some(1));
}

#[tokio::test]
async fn with_lock_an_admission_is_spent_in_the_purchase_commit() {
    an_admission_buys_once_though_the_instance_dies_after_the_commit(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_an_admission_is_spent_in_the_purchase_script() {
    an_admission_buys_once_though_the_instance_dies_after_the_commit(Strategy::Lua).await;
}

/// An admission refused because no unit was left is not spent: when a
/// unit comes back (an unpaid order cancelled), the same admission buys
/// it. (`lua` spends the admission with the one `SADD` that checks it,
/// and only once it has seen a unit left.)
async fn an_admission_refused_as_sold_out_buys_once_a_unit_comes_back(strategy: Strategy) {
    let app = app_with_window(600, 100).await;
    let sale = sale_with_room(&app, 1, 0, fifo(10, 10)).await;
    for buyer in ["ann", "bob"] {
        let ticket = ticket(&joined(&app, sale, buyer).await);
        admitted(&app, sale, &ticket).await;
    }
    // Each purchase on an instance of its own: none knows the sale sold
    // out, so every one asks Redis.
    let instance = |name: &str| instance(&app, strategy, name);
    let stored = app.store.sale(sale).await.expect("read").expect("a sale");
    let [ann, bob] = ["ann", "bob"].map(|name| UserId::parse(name).expect("a buyer"));
    let Outcome::Accepted { order_id } = instance("a").purchase(&stored, &ann).await.expect("ann")
    else {
        panic!("ann's purchase was refused");
    };
    let refused = instance("b").purchase(&stored, &bob).await.expect("bob");
    assert_eq!(refused, Outcome::SoldOut, "{strategy:?}");
    let spent = waiting_room::has_bought(&app.store, sale, &bob).await;
    assert!(
        !spent.expect("the room"),
        "a refused admission was spent ({strategy:?})"
    );

    app.drain().await;
    make_deadlines_due(&app, sale, &[order_id]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    let bought = instance("c")
        .purchase(&stored, &bob)
        .await
        .expect("bob again");
    assert!(
        matches!(bought, Outcome::Accepted { .. }),
        "{bought:?} ({strategy:?})"
    );
}

#[tokio::test]
async fn with_lock_an_admission_refused_as_sold_out_is_not_spent() {
    an_admission_refused_as_sold_out_buys_once_a_unit_comes_back(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_an_admission_refused_as_sold_out_is_not_spent() {
    an_admission_refused_as_sold_out_buys_once_a_unit_comes_back(Strategy::Lua).await;
}

/// With `postgres`, which writes the sale's holds and spends admissions
/// in two steps around the purchase (`lua/room_bought.lua`), a buyer who
/// bought is counted once among the room's bought, and the admission is
/// spent; once the unpaid order is cancelled, still once, still spent.
#[tokio::test]
async fn with_postgres_a_buyer_is_counted_once_among_the_rooms_bought() {
    let app = app_with_window(600, 100).await;
    let sale = sale_with_room(&app, 2, 0, fifo(10, 10)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    admitted(&app, sale, &ann).await;
    let stored = app.store.sale(sale).await.expect("read").expect("a sale");
    let buyer = UserId::parse("ann").expect("a buyer");
    let Outcome::Accepted { order_id } = instance(&app, Strategy::Postgres, "pg")
        .purchase(&stored, &buyer)
        .await
        .expect("a purchase")
    else {
        panic!("ann's purchase was refused");
    };
    // The door's second step, as the storefront takes it after a `202`.
    waiting_room::bought(&app.store, sale, &buyer)
        .await
        .expect("spent");
    let bought = || async {
        let figures = waiting_room::figures(&app.store, sale).await;
        let spent = waiting_room::has_bought(&app.store, sale, &buyer).await;
        (figures.expect("figures").bought, spent.expect("the room"))
    };
    assert_eq!(bought().await, (1, true));

    make_deadlines_due(&app, sale, &[order_id]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(bought().await, (1, true));
}

/// A sale without a room: the return of an unpaid order's unit writes
/// none of a room's keys (a bought set there would have no room to end
/// with, and would stay in Redis for good).
#[tokio::test]
async fn the_return_of_a_unit_on_a_sale_without_a_room_writes_no_room_key() {
    let app = app_with_window(600, 100).await;
    let (sale, order) = confirmed_order(&app, 1, "ann").await;
    make_deadlines_due(&app, sale, &[order]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert_eq!(app.redis_stock(sale).await, Some(1));
    let keys = app.keys(sale);
    let written: i64 = redis::cmd("EXISTS")
        .arg(keys.room.all().to_vec())
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("EXISTS");
    assert_eq!(written, 0);
}
