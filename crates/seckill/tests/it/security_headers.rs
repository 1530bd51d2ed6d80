//! The headers every response carries, whatever answered it: the security
//! headers (`security.rs`: a page's, and a JSON answer's under `/api/`),
//! the instance that answered and the request id.
//! `pages.rs` checks them on GETs; here on the posts, the
//! refusals (`4xx`, `429`, `503`) and the event streams.

use reqwest::header::HeaderMap;
use serde_json::json;

use crate::helpers::{ADMIN_TOKEN, Options, spawn_app_with};

/// The headers `docs/storefront.md` promises on every response: a page's
/// security headers outside `/api/`, a JSON answer's fewer under it.
pub fn assert_carries_the_headers(headers: &HeaderMap, path: &str, what: &str) {
    let header = |name: &str| {
        headers
            .get(name)
            .unwrap_or_else(|| panic!("{what}: no {name}"))
            .to_str()
            .expect("ASCII")
    };
    let csp = header("content-security-policy");
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(header("x-content-type-options"), "nosniff", "{what}");
    assert_eq!(header("x-frame-options"), "DENY", "{what}");
    assert_eq!(header("x-seckill-instance"), "test", "{what}");
    assert_eq!(header("x-request-id").len(), 36, "{what}");
    if path.starts_with("/api/") {
        assert_eq!(csp, "default-src 'none'; frame-ancestors 'none'", "{what}");
        for page_only in [
            "referrer-policy",
            "permissions-policy",
            "cross-origin-opener-policy",
        ] {
            assert!(headers.get(page_only).is_none(), "{what}: {page_only}");
        }
        return;
    }
    for directive in [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "frame-ancestors 'none'",
    ] {
        assert!(
            csp.contains(directive),
            "{what}: {directive} missing from {csp}"
        );
    }
    assert_eq!(header("referrer-policy"), "same-origin", "{what}");
    assert_eq!(
        header("cross-origin-opener-policy"),
        "same-origin",
        "{what}"
    );
    assert!(header("permissions-policy").contains("camera=()"), "{what}");
}

#[tokio::test]
async fn posts_refusals_and_event_streams_carry_the_security_and_instance_headers() {
    // Two event streams at a time, so that a third is refused (`503`).
    let app = spawn_app_with(Options {
        max_event_streams: 2,
        ..Options::default()
    })
    .await;
    let mut answers = Vec::new();
    let mut note = |what: &str, response: &reqwest::Response, status: u16| {
        assert_eq!(response.status(), status, "{what}");
        let path = response.url().path().to_owned();
        answers.push((what.to_owned(), path, response.headers().clone()));
    };

    let created = app
        .post_sale(&json!({"name": "Phone", "stock": 1, "price_cents": 100}))
        .send()
        .await
        .expect("POST");
    note("a sale created", &created, 201);
    let sale = created.json::<serde_json::Value>().await.expect("JSON")["id"]
        .as_i64()
        .expect("an id");
    let bought = app.purchase(sale, "ann").await;
    note("a purchase accepted", &bought, 202);
    let order = bought.json::<serde_json::Value>().await.expect("JSON")["order_id"]
        .as_str()
        .expect("an order id")
        .to_owned();
    note("sold out", &app.purchase(sale, "bob").await, 409);
    let post = |path: String| app.client.post(app.url(&path));
    let pending = post(format!("/api/orders/{order}/pay")).send().await;
    note("paying a pending order", &pending.expect("POST"), 409);
    let malformed = post(format!("/api/sales/{sale}/purchase"))
        .body("{")
        .send()
        .await;
    note("a malformed purchase", &malformed.expect("POST"), 400);
    let missing = post("/api/sales/424242/purchase".into())
        .json(&json!({"user_id": "ann"}))
        .send()
        .await;
    note("an unknown sale", &missing.expect("POST"), 404);
    let no_token = post("/api/sales".into())
        .json(&json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send()
        .await;
    note("no admin token", &no_token.expect("POST"), 401);
    let forged = post(format!("/sales/{sale}/buy"))
        .header("origin", "https://evil.example")
        .form(&[("user_id", "cy")])
        .send()
        .await;
    note("a cross-site form post", &forged.expect("POST"), 403);
    let huge = app
        .client
        .get(app.url("/healthz"))
        .header("x-padding", "p".repeat(17 * 1024))
        .send()
        .await;
    note("headers too large", &huge.expect("GET"), 431);

    let stream = |path: String| app.client.get(app.url(&path)).send();
    let events = stream(format!("/api/sales/{sale}/events")).await;
    note("an event stream", events.as_ref().expect("GET"), 200);
    let live = stream(format!("/api/sales/{sale}/live")).await;
    note("a live stream", live.as_ref().expect("GET"), 200);
    let refused = stream(format!("/api/sales/{sale}/events")).await;
    note("a stream beyond the cap", &refused.expect("GET"), 503);

    // The lock-out last: it refuses this address every admin call after.
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let login = |token: &'static str| {
        no_redirects
            .post(app.url("/admin/login"))
            .form(&[("token", token)])
            .send()
    };
    note("a login", &login(ADMIN_TOKEN).await.expect("POST"), 303);
    for _ in 0..5 {
        note("a wrong token", &login("guess").await.expect("POST"), 401);
    }
    note(
        "a locked-out login",
        &login(ADMIN_TOKEN).await.expect("POST"),
        429,
    );
    let locked_api = app
        .post_sale(&json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send()
        .await;
    note("a locked-out admin call", &locked_api.expect("POST"), 429);
    // Both kinds were seen.
    assert!(answers.iter().any(|(_, path, _)| path.starts_with("/api/")));
    assert!(
        answers
            .iter()
            .any(|(_, path, _)| !path.starts_with("/api/"))
    );
    for (what, path, headers) in &answers {
        assert_carries_the_headers(headers, path, what);
    }
}
