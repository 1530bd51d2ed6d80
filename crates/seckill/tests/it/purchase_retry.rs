//! A buyer whose `202` was lost on its way (a client that timed out, a
//! phone that lost its connection) asks again: the answer names the order
//! they won, through the API, the form without JavaScript and the waiting
//! room's door, so that the winner can pay before the window closes.

use seckill_core::config::Strategy;
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{Options, TestApp, spawn_app_with};

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
}

#[tokio::test]
async fn with_lock_a_retry_of_a_won_purchase_names_its_order() {
    a_retry_of_a_won_purchase_names_its_order(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_a_retry_of_a_won_purchase_names_its_order() {
    a_retry_of_a_won_purchase_names_its_order(Strategy::Lua).await;
}
