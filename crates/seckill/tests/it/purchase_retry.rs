//! A buyer whose `202` was lost on its way (a client that timed out, a
//! phone that lost its connection) asks again: the answer names the order
//! they won, through the API, the form without JavaScript and the waiting
//! room's door, so that the winner can pay before the window closes,
//! and after the sale has sold out too: by then it usually has.

use std::time::Duration;

use seckill_core::config::Strategy;
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{
    Options, TestApp, spawn_app_on_private_redis_with, spawn_app_with, start_instance,
};
use crate::payment::make_deadlines_due;

/// The app with purchases run by `strategy`.
async fn app_with(strategy: Strategy) -> TestApp {
    let mut options = Options::default();
    options.purchase.strategy = strategy;
    spawn_app_with(options).await
}

/// A purchase's status, error code and the order id it names.
async fn answer(app: &TestApp, sale: i64, buyer: &str) -> (u16, Option<String>, Option<Uuid>) {
    let response = app.purchase(sale, buyer).await;
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("a JSON body");
    (
        status,
        body["error"].as_str().map(str::to_owned),
        body["order_id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok()),
    )
}

async fn a_retry_of_a_won_purchase_names_its_order(strategy: Strategy) {
    let app = app_with(strategy).await;
    let sale = app.create_sale(5).await;
    let won = app.buy(sale, "ann").await;
    let again = (409, Some("already_purchased".to_owned()), Some(won));
    assert_eq!(
        answer(&app, sale, "ann").await,
        again,
        "{strategy:?}, pending"
    );
    // Still the same order once the worker has confirmed it.
    app.drain().await;
    assert_eq!(
        answer(&app, sale, "ann").await,
        again,
        "{strategy:?}, confirmed"
    );

    // Two requests of one buyer at once (a double click, a retry sent
    // while the first was on its way): one wins, the other names its order
    // (under `lock` both may be decided in one pass).
    let (first, second) = tokio::join!(answer(&app, sale, "bob"), answer(&app, sale, "bob"));
    let (won, told) = if first.0 == 202 {
        (first, second)
    } else {
        (second, first)
    };
    assert_eq!(won.0, 202, "{strategy:?}: {won:?} {told:?}");
    assert_eq!(
        told,
        (409, Some("already_purchased".to_owned()), won.2),
        "{strategy:?}"
    );

    // The form without JavaScript links to the order.
    let page = app
        .buy_by_form(sale, "ann")
        .await
        .text()
        .await
        .expect("a page");
    assert!(page.contains("You already have one of these."), "{page}");
    assert!(
        page.contains(&format!("href=\"/orders/{}\"", again.2.expect("an id"))),
        "{strategy:?}: {page}"
    );

    // The sale sells out, and the instance then answers "sold out" from
    // memory: to everyone but its holders, before and after it has
    // listed them (`strategy/sold_out.rs`).
    let last = app.create_sale(1).await;
    let won = app.buy(last, "ann").await;
    let sold_out = (409, Some("sold_out".to_owned()), None);
    let again = (409, Some("already_purchased".to_owned()), Some(won));
    assert_eq!(answer(&app, last, "carl").await, sold_out);
    assert_eq!(answer(&app, last, "ann").await, again, "{strategy:?}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(answer(&app, last, "carl").await, sold_out);
    assert_eq!(
        answer(&app, last, "ann").await,
        again,
        "{strategy:?}, the holders listed"
    );
}

#[tokio::test]
async fn with_lock_a_retry_of_a_won_purchase_names_its_order() {
    a_retry_of_a_won_purchase_names_its_order(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_a_retry_of_a_won_purchase_names_its_order() {
    a_retry_of_a_won_purchase_names_its_order(Strategy::Lua).await;
}

/// A sold-out sale gains a holder when a unit comes back unpaid and is
/// taken again, maybe on another instance: an instance that listed the
/// holders before lists them again at its flag's next refresh, so the new
/// holder asking there learns their order.
#[tokio::test]
async fn a_returned_unit_taken_on_another_instance_is_named_to_its_buyer_after_a_refresh() {
    let mut options = Options::default();
    options.purchase.sold_out_refresh_ms = 300;
    let app = spawn_app_with(options.clone()).await;
    let sale = app.create_sale(1).await;
    let ann = app.buy(sale, "ann").await;
    let sold_out = (409, Some("sold_out".to_owned()), None);
    assert_eq!(answer(&app, sale, "carl").await, sold_out);
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Listed by now: ann, and carl is answered from memory.
    assert_eq!(answer(&app, sale, "carl").await, sold_out);

    // Ann does not pay; her unit comes back, and dan takes it on another
    // instance, before this one's flag is due for a refresh.
    app.drain().await;
    make_deadlines_due(&app, sale, &[ann]).await;
    let cancelled = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(cancelled.cancelled, 1);
    let other = start_instance(&app.scratch, &options, "instance-b").await;
    let dan = app
        .client
        .post(format!("{other}/api/sales/{sale}/purchase"))
        .json(&serde_json::json!({ "user_id": "dan" }))
        .send()
        .await
        .expect("dan's purchase");
    assert_eq!(dan.status(), 202);
    let body: Value = dan.json().await.expect("JSON");
    let dan = Uuid::parse_str(body["order_id"].as_str().expect("an id")).expect("a UUID");

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(
        answer(&app, sale, "dan").await,
        (409, Some("already_purchased".to_owned()), Some(dan)),
        "dan, asking the instance that listed the holders before his take"
    );
    assert_eq!(answer(&app, sale, "carl").await, sold_out);
}

/// Redis is down, and a winner whose `202` was lost asks again: the order
/// is in PostgreSQL, which has the last word, so they are told
/// `409 already_purchased` with it, not `503` ("try again": their order
/// happened). A buyer who holds nothing is told `503` with `Retry-After`.
/// (Before, both were told `503`.) `lua`'s lost answer names an order of
/// its own attempt in doubt (`503 unconfirmed` with its id), which stays:
/// that order may yet land.
#[tokio::test]
async fn with_redis_down_a_holder_is_told_their_order_from_postgres() {
    let (mut redis, app) = spawn_app_on_private_redis_with(Options::default()).await;
    let sale = app.create_sale(5).await;
    let won = app.buy(sale, "ann").await;
    app.drain().await;

    redis.kill();
    assert_eq!(
        answer(&app, sale, "ann").await,
        (409, Some("already_purchased".to_owned()), Some(won))
    );
    let bob = app.purchase(sale, "bob").await;
    assert_eq!(bob.status(), 503, "bob holds nothing");
    assert!(bob.headers().contains_key("retry-after"));
}

/// A holder whose payment window closed while Redis was down (its
/// deadline job waits there) holds nothing PostgreSQL would let them pay
/// for: told `503`, not their order. Paid, they are told their order.
#[tokio::test]
async fn with_redis_down_an_order_past_its_window_is_not_named_and_a_paid_one_is() {
    let mut options = Options::default();
    options.worker.payment_window_secs = 1;
    let (mut redis, app) = spawn_app_on_private_redis_with(options).await;
    let sale = app.create_sale(5).await;
    let late = app.buy(sale, "ann").await;
    let paid = app.buy(sale, "bob").await;
    app.drain().await;
    let pay = app
        .client
        .post(app.url(&format!("/api/orders/{paid}/pay")))
        .send()
        .await
        .expect("POST pay");
    assert_eq!(pay.status(), 200);
    tokio::time::sleep(Duration::from_millis(1_100)).await;

    redis.kill();
    let ann = answer(&app, sale, "ann").await;
    assert_eq!(
        (ann.0, ann.1.as_deref()),
        (503, Some("unavailable")),
        "{late}"
    );
    assert_eq!(
        answer(&app, sale, "bob").await,
        (409, Some("already_purchased".to_owned()), Some(paid))
    );
}

/// What the listing is for: once an instance has listed a sold-out sale's
/// holders, it answers everyone else without Redis (here, while Redis is
/// down), and never a holder: with Redis down, the holder is told to come
/// back (`503`), not "sold out".
#[tokio::test]
async fn once_the_holders_are_listed_only_a_holder_needs_redis_to_be_answered() {
    let mut options = Options::default();
    options.purchase.sold_out_refresh_ms = 60_000;
    let (mut redis, app) = spawn_app_on_private_redis_with(options).await;
    let sale = app.create_sale(1).await;
    app.buy(sale, "ann").await;
    let sold_out = (409, Some("sold_out".to_owned()), None);
    assert_eq!(answer(&app, sale, "carl").await, sold_out);
    tokio::time::sleep(Duration::from_millis(100)).await;

    redis.kill();
    assert_eq!(answer(&app, sale, "carl").await, sold_out);
    assert_eq!(answer(&app, sale, "dan").await, sold_out);
    let ann = app.purchase(sale, "ann").await;
    assert_eq!(ann.status(), 503, "ann holds the unit: not sold out to her");
    assert!(ann.headers().contains_key("retry-after"));
}
