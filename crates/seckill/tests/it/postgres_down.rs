//! PostgreSQL stopped under a running instance (a private server the test
//! may stop): what needs PostgreSQL answers `503 unavailable` with
//! `Retry-After`, never `500`; `/healthz` says which server is down;
//! `/metrics` and the live page go on; and a sale the instance has read
//! goes on selling, its orders waiting in Redis until PostgreSQL is back.
//! (Redis stopped under an instance is in `faults.rs`.)

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{eventually, spawn_app_on_private_postgres};

/// A request on its way.
type Pending = std::pin::Pin<Box<dyn Future<Output = reqwest::Result<reqwest::Response>>>>;

/// `response` is the honest refusal of a request that needs a server that
/// is down: `503`, told when to try again, from a named instance.
async fn unavailable(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), 503, "{what}");
    let headers = response.headers();
    assert_eq!(headers["retry-after"], "1", "{what}");
    assert_eq!(headers["x-seckill-instance"], "test", "{what}");
    let html = headers["content-type"]
        .to_str()
        .is_ok_and(|kind| kind.starts_with("text/html"));
    let body = response.text().await.expect("a body");
    if html {
        // A page asked for as a page says it in a page (`pages.rs`).
        assert!(
            body.contains(r#"data-error="unavailable""#),
            "{what}: {body}"
        );
    } else {
        let body: Value = serde_json::from_str(&body).expect("a JSON error");
        assert_eq!(body["error"], "unavailable", "{what}: {body}");
    }
}

/// Read `GET /api/sales/{id}/live` until a snapshot satisfies `wanted`;
/// panic after 20 s with the last one seen.
async fn live_until(stream: &mut reqwest::Response, what: &str, wanted: impl Fn(&Value) -> bool) {
    let (mut buffer, mut last) = (String::new(), Value::Null);
    let found = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            while let Some(end) = buffer.find("\n\n") {
                let event: String = buffer.drain(..end + 2).collect();
                if let Some(data) = event.strip_prefix("event: snapshot\ndata: ") {
                    last = serde_json::from_str(data.trim_end()).expect("a JSON snapshot");
                    if wanted(&last) {
                        return;
                    }
                }
            }
            let chunk = stream.chunk().await.expect("a chunk").expect("more");
            buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(found.is_ok(), "no snapshot showed {what}; the last: {last}");
}

#[tokio::test]
async fn while_postgres_is_down_what_needs_it_answers_503_and_a_known_sale_goes_on_selling() {
    let (mut postgres, app) = spawn_app_on_private_postgres().await;
    let sale = app.create_sale(10).await;
    let order = app.buy(sale, "ann").await;
    app.drain().await;
    // A sale this instance has never read: finding it needs PostgreSQL.
    let new = seckill_core::domain::NewSale::builder("Unseen", 5)
        .build(chrono::Utc::now())
        .expect("a sale");
    let unseen = app.store.create_sale(&new).await.expect("a sale").id;
    let cookie = app.log_in().await;
    let mut live = app
        .client
        .get(app.url(&format!("/api/sales/{sale}/live")))
        .send()
        .await
        .expect("GET live");
    assert_eq!(live.status(), 200);
    live_until(&mut live, "both servers ok", |board| {
        board["redis"]["status"] == "ok" && board["postgres"]["status"] == "ok"
    })
    .await;

    postgres.stop();
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("GET");
    assert_eq!(health.status(), 503);
    let body: Value = health.json().await.expect("JSON");
    assert_eq!(body, json!({"redis": "ok", "postgres": "down"}));
    let metrics = app
        .client
        .get(app.url("/metrics"))
        .send()
        .await
        .expect("GET");
    assert_eq!(metrics.status(), 200);
    assert!(
        metrics.text().await.expect("text").contains("seckill_"),
        "the figures are still served"
    );
    live_until(&mut live, "PostgreSQL unavailable, Redis ok", |board| {
        board["postgres"]["status"] == "unavailable" && board["redis"]["status"] == "ok"
    })
    .await;

    // Sent at once: each waits up to the pool's 3 s for a connection.
    let get = |path: String| app.client.get(app.url(&path)).send();
    let post = |path: String| app.client.post(app.url(&path)).send();
    let form = app
        .client
        .post(app.url("/admin/sales"))
        .header("cookie", &cookie)
        .form(&[
            ("name", "Lamp"),
            ("stock", "1"),
            ("price_cents", "1"),
            ("starts_in_secs", "0"),
            ("duration_secs", ""),
        ])
        .send();
    let created = app
        .post_sale(&json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send();
    let needing_postgres = [
        ("the index", Box::pin(get("/".into())) as Pending),
        ("the order page", Box::pin(get(format!("/orders/{order}")))),
        ("the order", Box::pin(get(format!("/api/orders/{order}")))),
        ("paying", Box::pin(post(format!("/api/orders/{order}/pay")))),
        (
            "paying by form",
            Box::pin(post(format!("/orders/{order}/pay"))),
        ),
        (
            "an unseen sale",
            Box::pin(get(format!("/api/sales/{unseen}"))),
        ),
        ("its page", Box::pin(get(format!("/sales/{unseen}")))),
        (
            "its events",
            Box::pin(get(format!("/api/sales/{unseen}/events"))),
        ),
        (
            "its live stream",
            Box::pin(get(format!("/api/sales/{unseen}/live"))),
        ),
        ("creating a sale", Box::pin(created)),
        ("creating a sale by form", Box::pin(form)),
    ];
    let (names, requests): (Vec<_>, Vec<_>) = needing_postgres.into_iter().unzip();
    let answers = futures::future::join_all(requests).await;
    for (what, answer) in names.into_iter().zip(answers) {
        unavailable(answer.expect("an answer"), what).await;
    }

    // The sale this instance knows needs only Redis: shown, streamed, sold.
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(
        (view["status"].clone(), view["stock_left"].clone()),
        (json!("live"), json!(9))
    );
    assert_eq!(
        get(format!("/sales/{sale}")).await.expect("GET").status(),
        200
    );
    let events = app.open_event_stream(sale).await;
    drop(events);
    let bob = app.buy(sale, "bob").await;

    postgres.restart().await.expect("PostgreSQL comes back");
    eventually(
        Duration::from_secs(30),
        "bob's order is written",
        || async {
            let _ = app.worker.try_process_batch(sale).await;
            app.order(bob).await["status"] == "confirmed"
        },
    )
    .await;
    live_until(
        &mut live,
        "PostgreSQL ok again, with both orders",
        |board| board["postgres"]["status"] == "ok" && board["postgres"]["confirmed"] == 2,
    )
    .await;
    assert_eq!(
        app.pay(order).await.status(),
        200,
        "ann pays once it is back"
    );
}

/// An instance that has sold nothing yet sells while PostgreSQL is down:
/// the database's key, which names the orders of every pass, is read as
/// the instance starts, not at its first purchase. (Read then, the
/// purchase was `503 unavailable` until PostgreSQL came back.)
#[tokio::test]
async fn an_instance_that_has_sold_nothing_yet_sells_while_postgres_is_down() {
    let (mut postgres, app) = spawn_app_on_private_postgres().await;
    let sale = app.create_sale(10).await;
    // The instance reads the sale, which it keeps, and buys nothing.
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 10, "{view}");

    postgres.stop();
    let told = app.purchase(sale, "ann").await;
    assert_eq!(told.status(), 202, "{:?}", told.text().await);
    postgres.restart().await.expect("PostgreSQL back");
    assert_eq!(app.drain().await.confirmed, 1);
    assert_eq!(app.sold(sale).await, 1);
}
