//! The purchase API and its outcomes, one instance, real Redis and PostgreSQL.
//! How a purchase goes through the sale's lock is in `purchase_lock.rs`.

use seckill_core::config::Strategy;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::helpers::{ADMIN_TOKEN, Options, spawn_app, spawn_app_with};

pub async fn error_code(response: reqwest::Response) -> String {
    let body: Value = response.json().await.expect("a JSON error body");
    assert!(
        body["message"].as_str().is_some_and(|m| !m.is_empty()),
        "no message in {body}"
    );
    body["error"].as_str().expect("an error code").to_owned()
}

#[tokio::test]
async fn a_purchase_is_accepted_pending_then_confirmed_by_the_worker() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;

    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["status"], "pending");
    let order_id = body["order_id"].as_str().expect("an order id").to_owned();

    let order = app.get_json(&format!("/api/orders/{order_id}")).await;
    assert_eq!(order["status"], "pending");
    assert_eq!(order["user_id"], "ann");
    assert_eq!(order["sale_id"], sale);

    let report = app.drain().await;
    assert_eq!(report.confirmed, 1);
    let order = app.get_json(&format!("/api/orders/{order_id}")).await;
    assert_eq!(order["status"], "confirmed");
    assert_eq!(app.orders(sale).await.len(), 1);
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(9));

    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 9);
    assert_eq!(view["stock_total"], 10);
    assert_eq!(view["status"], "live");
}

#[tokio::test]
async fn purchase_returns_409_sold_out_when_no_unit_is_left() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let response = app.purchase(sale, "bob").await;
    assert_eq!(response.status(), 409);
    assert_eq!(error_code(response).await, "sold_out");
    app.drain().await;
    assert_eq!(app.orders(sale).await.len(), 1);
    assert_eq!(app.redis_stock(sale).await, Some(0));
}

#[tokio::test]
async fn purchase_returns_409_already_purchased_for_a_repeat_buyer() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 409);
    assert_eq!(error_code(response).await, "already_purchased");
    assert_eq!(
        app.redis_stock(sale).await,
        Some(4),
        "the repeat took no unit"
    );
    app.drain().await;
    assert_eq!(app.orders(sale).await.len(), 1);
}

#[tokio::test]
async fn purchase_returns_409_not_started_before_the_sale_opens() {
    let app = spawn_app().await;
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let sale = app
        .create_sale_with(
            json!({"name": "Later", "stock": 3, "price_cents": 100, "starts_at": starts_at}),
        )
        .await;
    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 409);
    assert_eq!(error_code(response).await, "not_started");
    assert_eq!(app.redis_stock(sale).await, Some(3));
}

#[tokio::test]
async fn purchase_returns_409_ended_after_the_sale_closes() {
    let app = spawn_app().await;
    // The API refuses to create a sale that has already ended; insert one.
    let sale: i64 = sqlx::query_scalar(
        "INSERT INTO sales (name, price_cents, stock_total, starts_at, ends_at)
         VALUES ('Past', 100, 3, now() - interval '2 hours', now() - interval '1 hour') RETURNING id",
    )
    .fetch_one(&app.pg)
    .await
    .expect("insert a past sale");
    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 409);
    assert_eq!(error_code(response).await, "ended");
    // Nothing was taken: no buyer, no order queued, no unit gone.
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(
        app.queue_stats(sale).await,
        seckill_core::queue::QueueStats::default()
    );
    let stock = app.redis_stock(sale).await;
    assert!(matches!(stock, None | Some(3)), "stock {stock:?}");
    assert!(app.orders(sale).await.is_empty());
}

#[tokio::test]
async fn purchase_returns_404_for_a_sale_that_does_not_exist() {
    let app = spawn_app().await;
    for id in ["999999", "not-a-number", "-1"] {
        let response = app
            .client
            .post(app.url(&format!("/api/sales/{id}/purchase")))
            .json(&json!({"user_id": "ann"}))
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 404, "sale {id}");
        assert_eq!(error_code(response).await, "sale_not_found");
    }
}

/// Redis lost a sale (a restart without persistence): the next purchase
/// loads it from PostgreSQL, its buyers with it, and goes on. `lua` finds
/// the sale missing in its one script (`not_loaded`), `lock` in its
/// pass's read.
async fn a_sale_missing_from_redis_is_reloaded_from_postgres_with_its_buyers(strategy: Strategy) {
    let app = spawn_app_with(Options::with_strategy(strategy)).await;
    let sale = app.create_sale(3).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    app.drain().await;
    // Redis restarted without persistence: the sale's keys are gone.
    app.wipe_sale_from_redis(sale).await;

    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 409, "PostgreSQL remembers ann's unit");
    assert_eq!(error_code(response).await, "already_purchased");
    assert_eq!(app.purchase(sale, "bob").await.status(), 202);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    app.drain().await;
    assert_eq!(app.sold(sale).await, 2);
}

#[tokio::test]
async fn with_lock_a_sale_missing_from_redis_is_reloaded_with_its_buyers() {
    a_sale_missing_from_redis_is_reloaded_from_postgres_with_its_buyers(Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_a_sale_missing_from_redis_is_reloaded_with_its_buyers() {
    a_sale_missing_from_redis_is_reloaded_from_postgres_with_its_buyers(Strategy::Lua).await;
}

#[tokio::test]
async fn get_order_returns_404_for_unknown_or_malformed_ids() {
    let app = spawn_app().await;
    app.create_sale(1).await;
    for id in [Uuid::now_v7().to_string(), "nope".to_owned()] {
        let response = app
            .client
            .get(app.url(&format!("/api/orders/{id}")))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 404);
        assert_eq!(error_code(response).await, "order_not_found");
    }
}

#[tokio::test]
async fn create_sale_requires_the_admin_token() {
    let app = spawn_app().await;
    let body = json!({"name": "Phone", "stock": 10, "price_cents": 100});
    let no_token = app
        .client
        .post(app.url("/api/sales"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(no_token.status(), 401);
    assert_eq!(error_code(no_token).await, "unauthorized");
    let wrong = app
        .client
        .post(app.url("/api/sales"))
        .bearer_auth(format!("{ADMIN_TOKEN}x"))
        .json(&body)
        .send()
        .await
        .expect("POST");
    assert_eq!(wrong.status(), 401);
    assert_eq!(app.sale_count().await, 0, "a sale was stored");
}

/// The scheme of `Authorization` is case-insensitive (RFC 7235): the
/// admin's token after `bearer` or `BEARER` is the admin's too.
#[tokio::test]
async fn the_admin_api_takes_the_bearer_scheme_in_any_case() {
    let app = spawn_app().await;
    for scheme in ["bearer", "BEARER"] {
        let response = app
            .client
            .post(app.url("/api/sales"))
            .header("Authorization", format!("{scheme} {ADMIN_TOKEN}"))
            .json(&json!({"name": "Phone", "stock": 10, "price_cents": 100}))
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 201, "{scheme}");
    }
}

#[tokio::test]
async fn the_admin_api_is_refused_when_no_token_is_configured() {
    let app = spawn_app_with(Options {
        admin_token: None,
        ..Options::default()
    })
    .await;
    for token in ["", "anything"] {
        let response = app
            .client
            .post(app.url("/api/sales"))
            .bearer_auth(token)
            .json(&json!({"name": "Phone", "stock": 10, "price_cents": 100}))
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 401);
        let body: Value = response.json().await.expect("JSON");
        assert!(
            body["message"]
                .as_str()
                .unwrap_or_default()
                .contains("SECKILL_ADMIN_TOKEN")
        );
    }
}

#[tokio::test]
async fn create_sale_returns_400_for_an_invalid_sale_and_stores_nothing() {
    let app = spawn_app().await;
    let past = chrono::Utc::now() - chrono::Duration::hours(1);
    let cases = [
        json!({"name": "", "stock": 10, "price_cents": 1}),
        json!({"name": "x".repeat(101), "stock": 10, "price_cents": 1}),
        json!({"name": "Phone", "stock": 0, "price_cents": 1}),
        json!({"name": "Phone", "stock": -5, "price_cents": 1}),
        json!({"name": "Phone", "stock": 10_000_000, "price_cents": 1}),
        json!({"name": "Phone", "stock": 10, "price_cents": -1}),
        json!({"name": "Phone", "stock": 10, "price_cents": 1, "ends_at": past}),
        json!({"name": "Phone", "stock": "ten", "price_cents": 1}),
        json!({"name": "Phone", "stock": 10}),
        json!({"name": "Phone", "stock": 10, "price_cents": 1, "colour": "red"}),
    ];
    for body in cases {
        let response = app
            .client
            .post(app.url("/api/sales"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 400, "{body}");
        assert_eq!(error_code(response).await, "invalid_request");
    }
    assert_eq!(app.sale_count().await, 0, "a sale was stored");
}

#[tokio::test]
async fn healthz_answers_200_when_redis_and_postgres_answer() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-seckill-instance"], "test");
    let request_id = response.headers()["x-request-id"].to_str().expect("ASCII");
    assert!(Uuid::parse_str(request_id).is_ok(), "{request_id}");
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body, json!({"redis": "ok", "postgres": "ok"}));
}

#[tokio::test]
async fn the_pages_show_the_sale_and_the_buy_form_sells_a_unit() {
    let app = spawn_app().await;
    let sale = app.create_sale(4).await;
    let index = app.client.get(app.url("/")).send().await.expect("GET /");
    assert_eq!(index.status(), 200);
    let index = index.text().await.expect("HTML");
    assert!(
        index.contains("Phone") && index.contains("4 of 4 left"),
        "{index}"
    );

    let page = app
        .client
        .get(app.url(&format!("/sales/{sale}")))
        .send()
        .await
        .expect("GET sale");
    assert_eq!(page.status(), 200);
    let page = page.text().await.expect("HTML");
    assert!(
        page.contains(&format!("action=\"/sales/{sale}/buy\"")),
        "{page}"
    );
    assert!(
        page.contains(" UTC."),
        "the opening time is shown for people: {page}"
    );

    let buy = || {
        app.client
            .post(app.url(&format!("/sales/{sale}/buy")))
            .form(&[("user_id", "ann")])
            .send()
    };
    let bought = buy().await.expect("POST buy");
    assert_eq!(bought.status(), 200);
    assert!(
        bought.headers()["set-cookie"]
            .to_str()
            .expect("ASCII")
            .contains("seckill_buyer=ann")
    );
    let html = bought.text().await.expect("HTML");
    assert!(
        html.contains("You got one!") && html.contains("3 of 4"),
        "{html}"
    );

    let again = buy().await.expect("POST buy");
    assert!(
        again
            .text()
            .await
            .expect("HTML")
            .contains("You already have one")
    );

    let missing = app
        .client
        .get(app.url("/sales/424242"))
        .send()
        .await
        .expect("GET");
    assert_eq!(missing.status(), 404);
}
