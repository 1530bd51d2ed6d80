//! The waiting room's door is one atomic step: with `lock` and `lua`, an
//! admission's spent check and mark are in the purchase's own commit, so
//! an admission buys once whatever dies when; and a roomed purchase sends
//! Redis no command more than another. An admission is honoured only
//! while the room holds it, with every strategy.

use std::time::Duration;

use seckill_core::config::{PurchaseSettings, Strategy};
use seckill_core::domain::UserId;
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::strategy::Shop;
use seckill_core::waiting_room::{self, AtTheDoor};

use crate::helpers::{TestApp, spawn_app};
use crate::payment::{app_with_window, confirmed_order, make_deadlines_due, run_deadlines_until};
use crate::room_page::buy_form;
use crate::waiting_room::{
    admission, admitted, admitted_at, buy, fifo, joined, lose_the_room, not_admitted,
    sale_with_room, ticket,
};

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

/// Where `buyer`'s admission to `sale`'s room stands in Redis.
async fn at_the_door(app: &TestApp, sale: i64, buyer: &str) -> AtTheDoor {
    waiting_room::at_the_door(&app.store, sale, buyer)
        .await
        .expect("the room")
        .0
}

/// A second ago on Redis' clock, in ms: an admission's end (its score
/// among the room's admitted) that has passed there.
pub(crate) async fn a_second_ago_on_redis_clock(app: &TestApp) -> i64 {
    let (secs, _): (i64, i64) = redis::cmd("TIME")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("TIME");
    (secs - 1) * 1000
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
    let spent = at_the_door(&app, sale, "ann").await;
    assert_eq!(
        (spent, still_admitted),
        (AtTheDoor::Spent, None),
        "{strategy:?}"
    );

    // Ann does not pay: her unit comes back, and she holds none.
    app.drain().await;
    make_deadlines_due(&app, sale, &[order_id]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.redis_stock(sale).await, Some(1));
    // Her unit came back, and her admission stays spent.
    let spent = at_the_door(&app, sale, "ann").await;
    assert_eq!(spent, AtTheDoor::Spent, "{strategy:?}");
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
    let spent = at_the_door(&app, sale, "bob").await;
    assert_eq!(
        spent,
        AtTheDoor::MayBuy,
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
        let spent = at_the_door(&app, sale, "ann").await;
        (figures.expect("figures").bought, spent)
    };
    assert_eq!(bought().await, (1, AtTheDoor::Spent));

    make_deadlines_due(&app, sale, &[order_id]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(bought().await, (1, AtTheDoor::Spent));
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

/// An admission is honoured only while the room holds it. A room of one
/// active buyer admits ann; then Redis loses the room (a wipe, a failover
/// under `local`, or an instance that admitted ann from an old primary
/// cut off from the others), and bob, joining the room as it is now, is
/// its one active buyer. Ann's admission is still signed and not run out
/// by the instance's clock: honoured, two buyers would buy at once where
/// the room allows one. It is refused, `403 not_admitted` `withdrawn`,
/// and nothing is written; ann joins again, and buys in her turn.
async fn an_admission_the_room_lost_buys_nothing(strategy: Strategy) {
    let app =
        crate::helpers::spawn_app_with(crate::helpers::Options::with_strategy(strategy)).await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 1)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let anns = admission(&admitted(&app, sale, &ann).await).to_owned();
    lose_the_room(&app, sale).await;
    let bob = ticket(&joined(&app, sale, "bob").await);
    let bobs = admission(&admitted(&app, sale, &bob).await).to_owned();

    let refused = not_admitted(buy(&app, sale, "ann", Some(&anns)).await).await;
    assert_eq!(refused, "withdrawn", "{strategy:?}");
    assert!(app.redis_buyers(sale).await.is_empty(), "{strategy:?}");
    assert_eq!(app.redis_stock(sale).await, Some(5), "{strategy:?}");
    // The room's one active buyer buys.
    assert_eq!(buy(&app, sale, "bob", Some(&bobs)).await.status(), 202);
    app.drain().await;
    let buyers: Vec<String> = app.orders(sale).await.into_iter().map(|o| o.1).collect();
    assert_eq!(buyers, ["bob"], "{strategy:?}");
    // Ann is outside the room: she joins again, and buys in her turn.
    let again = joined(&app, sale, "ann").await;
    let anns = admission(&admitted(&app, sale, &ticket(&again)).await).to_owned();
    assert_eq!(buy(&app, sale, "ann", Some(&anns)).await.status(), 202);
}

#[tokio::test]
async fn with_lock_an_admission_the_room_lost_buys_nothing() {
    an_admission_the_room_lost_buys_nothing(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_an_admission_the_room_lost_buys_nothing() {
    an_admission_the_room_lost_buys_nothing(Strategy::Lua).await;
}

/// `postgres` spends admissions in two steps around the purchase; its
/// door reads the room first, and refuses the same admission the same way.
#[tokio::test]
async fn with_postgres_an_admission_the_room_lost_buys_nothing() {
    an_admission_the_room_lost_buys_nothing(Strategy::Postgres).await;
}

/// An admission whose end has passed on Redis' clock buys nothing, though
/// no visit has swept it out of the room's admitted yet and the
/// instance's clock, running behind Redis', still calls it valid. The
/// room keeps the end as the buyer's score among the admitted; the test
/// moves it a second into the past, as a Redis clock ahead of the
/// instance's by more than the time left leaves it. Honoured, it would
/// buy past its turn, its place counted against `max_active` meanwhile.
/// It is refused, `403 not_admitted` `withdrawn`, and nothing is written;
/// and as that answer says, ann joins again at once (the room's join
/// judges her admission by the same clock, swept out or not), is admitted
/// anew, and buys.
async fn an_admission_past_its_end_on_redis_clock_buys_nothing(strategy: Strategy) {
    let app =
        crate::helpers::spawn_app_with(crate::helpers::Options::with_strategy(strategy)).await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 10)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let anns = admission(&admitted(&app, sale, &ann).await).to_owned();
    let ended = a_second_ago_on_redis_clock(&app).await;
    let changed: i64 = redis::cmd("ZADD")
        .arg(&app.keys(sale).room.admitted)
        .arg("XX")
        .arg("CH")
        .arg(ended)
        .arg("ann")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("ZADD");
    assert_eq!(changed, 1, "ann was not among the admitted");

    let refused = not_admitted(buy(&app, sale, "ann", Some(&anns)).await).await;
    assert_eq!(refused, "withdrawn", "{strategy:?}");
    assert!(app.redis_buyers(sale).await.is_empty(), "{strategy:?}");
    assert_eq!(app.redis_stock(sale).await, Some(5), "{strategy:?}");
    app.drain().await;
    assert!(app.orders(sale).await.is_empty(), "{strategy:?}");

    let again = joined(&app, sale, "ann").await;
    let anns = admission(&admitted(&app, sale, &ticket(&again)).await).to_owned();
    assert_eq!(buy(&app, sale, "ann", Some(&anns)).await.status(), 202);
    app.drain().await;
    let buyers: Vec<String> = app.orders(sale).await.into_iter().map(|o| o.1).collect();
    assert_eq!(buyers, ["ann"], "{strategy:?}");
}

#[tokio::test]
async fn with_lock_an_admission_past_its_end_on_redis_clock_buys_nothing() {
    an_admission_past_its_end_on_redis_clock_buys_nothing(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_an_admission_past_its_end_on_redis_clock_buys_nothing() {
    an_admission_past_its_end_on_redis_clock_buys_nothing(Strategy::Lua).await;
}

#[tokio::test]
async fn with_postgres_an_admission_past_its_end_on_redis_clock_buys_nothing() {
    an_admission_past_its_end_on_redis_clock_buys_nothing(Strategy::Postgres).await;
}

/// Admissions that ran out do not keep the line from moving, however many
/// ran out at once. A visit sweeps at most 1,000 of them; the rest wait in
/// the room's admitted set for the next visits, and counted as active
/// they would hold the line until then. Here 100,000 ran out (seated with
/// an end a second in Redis' past), a hundred visits' worth: ann, first
/// in line of a room of 10 active that admits 10 a second, is admitted
/// within 2 s all the same (without the fix: once a hundred visits swept
/// them out, more than 5 s at one visit per 50 ms poll).
#[tokio::test]
async fn a_crowd_of_run_out_admissions_does_not_hold_the_line() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 10)).await;
    let gone: Vec<String> = (0..100_000).map(|n| format!("gone-{n}")).collect();
    waiting_room::seat(
        &app.store,
        sale,
        &gone,
        a_second_ago_on_redis_clock(&app).await,
    )
    .await
    .expect("run-out admissions");

    let ann = ticket(&joined(&app, sale, "ann").await);
    let now = admitted_at(&app.address, sale, &ann, Duration::from_secs(2)).await;
    assert_eq!(now["active"], 1, "{now}");
}

/// The Buy form with an admission the room no longer holds (taken off
/// its admitted, as a failover under `local` that lost it leaves it):
/// `403`, a page that says to join again, and nothing written.
#[tokio::test]
async fn the_buy_form_with_an_admission_the_room_no_longer_holds_says_to_join_again() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 10)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let anns = admission(&admitted(&app, sale, &ann).await).to_owned();
    let _: i64 = redis::cmd("ZREM")
        .arg(&app.keys(sale).room.admitted)
        .arg("ann")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("ZREM");
    let (status, html) = buy_form(&app, sale, "ann", Some(&anns)).await;
    assert_eq!(status, 403, "{html}");
    assert!(html.contains("no longer holds your turn"), "{html}");
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.redis_stock(sale).await, Some(5));
}
