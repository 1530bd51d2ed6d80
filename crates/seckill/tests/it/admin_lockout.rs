//! The admin lock-out's length: five wrong tokens from one address lock it
//! out of the login form and the admin API for 15 minutes from the first,
//! each refusal says how long is left (`Retry-After`), and the lock-out
//! ends with its window. (`admin.rs` checks that it happens at all.)

use std::time::Duration;

use crate::helpers::{ADMIN_TOKEN, TestApp, eventually, spawn_app};

const FIFTEEN_MINUTES: u64 = 15 * 60;

async fn log_in_with(app: &TestApp, token: &str) -> reqwest::Response {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client")
        .post(app.url("/admin/login"))
        .form(&[("token", token)])
        .send()
        .await
        .expect("POST /admin/login")
}

/// The seconds a `429` says to wait; they must be what is left of 15
/// minutes that began at most a minute ago (the test's own duration).
fn seconds_left(response: &reqwest::Response, what: &str) -> u64 {
    assert_eq!(response.status(), 429, "{what}");
    let secs: u64 = response.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds");
    assert!(
        (FIFTEEN_MINUTES - 60..=FIFTEEN_MINUTES).contains(&secs),
        "{what}: Retry-After {secs} s, not what is left of 15 minutes"
    );
    secs
}

#[tokio::test]
async fn the_admin_lock_out_lasts_15_minutes_says_so_and_ends_with_its_window() {
    let app = spawn_app().await;
    for _ in 0..5 {
        assert_eq!(log_in_with(&app, "guess").await.status(), 401);
    }
    let form = log_in_with(&app, ADMIN_TOKEN).await;
    seconds_left(&form, "the login form");
    let page = form.text().await.expect("HTML");
    assert!(page.contains("try again in 15 minutes"), "{page}");
    let api = app
        .post_sale(&serde_json::json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send()
        .await
        .expect("POST /api/sales");
    seconds_left(&api, "the admin API");

    // The count lives in Redis (every instance shares it), with the
    // window's length: 15 minutes from the first wrong token.
    let mut conn = app.redis_conn().await;
    let counters: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{}:admin:failures:*", app.scratch.prefix))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    assert_eq!(counters.len(), 1, "{counters:?}");
    let ttl_ms: u64 = redis::cmd("PTTL")
        .arg(&counters[0])
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(
        ((FIFTEEN_MINUTES - 60) * 1_000..=FIFTEEN_MINUTES * 1_000).contains(&ttl_ms),
        "the lock-out lasts {ttl_ms} ms"
    );

    // As if the 15 minutes had passed: the window ends, and so does the
    // lock-out; the right token is let in again.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&counters[0])
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    eventually(Duration::from_secs(10), "the lock-out to end", || async {
        log_in_with(&app, ADMIN_TOKEN).await.status() == 303
    })
    .await;
}
