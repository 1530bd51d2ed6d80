//! The admin lock-out's length: five wrong tokens from one address lock it
//! out of the login form and the admin API for 15 minutes from the first,
//! each refusal says how long is left (`Retry-After`), and the lock-out
//! ends with its window. (`admin.rs` checks that it happens at all.)
//!
//! "From the first" is told apart from "from the last" without waiting 15
//! minutes: after the first wrong token the window is shortened in Redis to
//! what it would be 5 minutes later, and the next four wrong tokens must
//! leave it so (Redis' TTL is the witness). A window that each wrong token
//! started afresh would be back at 15 minutes.

use std::time::Duration;

use crate::helpers::{ADMIN_TOKEN, TestApp, eventually, spawn_app};

const FIFTEEN_MINUTES: u64 = 15 * 60;
/// What is left of the window 5 minutes after the first wrong token.
const TEN_MINUTES: u64 = 10 * 60;

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
/// minutes that began 5 minutes (as the test makes it) and at most a minute
/// more (the test's own duration) ago.
fn seconds_left(response: &reqwest::Response, what: &str) -> u64 {
    assert_eq!(response.status(), 429, "{what}");
    let secs: u64 = response.headers()["retry-after"]
        .to_str()
        .expect("ASCII")
        .parse()
        .expect("whole seconds");
    assert!(
        (TEN_MINUTES - 60..=TEN_MINUTES).contains(&secs),
        "{what}: Retry-After {secs} s, not what is left of 15 minutes that began 5 minutes ago"
    );
    secs
}

/// The milliseconds the failure counter of this test's one address has
/// left, and its key.
async fn window_left(app: &TestApp) -> (String, u64) {
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
    (counters[0].clone(), ttl_ms)
}

#[tokio::test]
async fn the_admin_lock_out_lasts_15_minutes_from_the_first_wrong_token_says_so_and_ends_with_its_window()
 {
    let app = spawn_app().await;
    // The first wrong token opens the window: 15 minutes, counted in Redis
    // (every instance shares it).
    assert_eq!(log_in_with(&app, "guess").await.status(), 401);
    let (counter, ttl_ms) = window_left(&app).await;
    assert!(
        ((FIFTEEN_MINUTES - 60) * 1_000..=FIFTEEN_MINUTES * 1_000).contains(&ttl_ms),
        "the first wrong token opens a window of {ttl_ms} ms"
    );
    // As if 5 minutes had passed since: 10 minutes are left.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&counter)
        .arg(TEN_MINUTES * 1_000)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("PEXPIRE");
    // Four more wrong tokens: each is counted in the same window, which
    // none of them makes longer.
    for _ in 0..4 {
        assert_eq!(log_in_with(&app, "guess").await.status(), 401);
        let (_, ttl_ms) = window_left(&app).await;
        assert!(
            ((TEN_MINUTES - 60) * 1_000..=TEN_MINUTES * 1_000).contains(&ttl_ms),
            "a later wrong token moved the window's end: {ttl_ms} ms left, \
             not what is left of 15 minutes from the first"
        );
    }
    let form = log_in_with(&app, ADMIN_TOKEN).await;
    let said = seconds_left(&form, "the login form");
    // Rounded up: one who waits as long as told finds the window over.
    let (_, ttl_ms) = window_left(&app).await;
    assert!(
        said * 1_000 >= ttl_ms,
        "the login form said {said} s with {ttl_ms} ms left"
    );
    let page = form.text().await.expect("HTML");
    assert!(page.contains("try again in 10 minutes"), "{page}");
    let api = app
        .post_sale(&serde_json::json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send()
        .await
        .expect("POST /api/sales");
    seconds_left(&api, "the admin API");
    let (_, ttl_ms) = window_left(&app).await;
    assert!(
        ((TEN_MINUTES - 60) * 1_000..=TEN_MINUTES * 1_000).contains(&ttl_ms),
        "the refused attempts moved the window's end: {ttl_ms} ms left"
    );
    let mut conn = app.redis_conn().await;

    // As if the 15 minutes had passed: the window ends, and so does the
    // lock-out; the right token is let in again.
    let _: i64 = redis::cmd("PEXPIRE")
        .arg(&counter)
        .arg(1)
        .query_async(&mut conn)
        .await
        .expect("PEXPIRE");
    eventually(Duration::from_secs(10), "the lock-out to end", || async {
        log_in_with(&app, ADMIN_TOKEN).await.status() == 303
    })
    .await;
}
