//! Every malformed purchase is answered `400 invalid_request` with a reason,
//! and nothing is written anywhere.

use serde_json::{Value, json};

use crate::helpers::spawn_app;

#[tokio::test]
async fn malformed_purchases_are_answered_400_and_nothing_is_written() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let oversized_body = json!({"user_id": "ann", "padding": "x".repeat(8 * 1024)}).to_string();
    // What the body is, the body, and a part of the reason the answer gives.
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "empty body",
            String::new(),
            "the body is empty: it must be a JSON object",
        ),
        (
            "not JSON",
            "{not json".into(),
            "the body is not valid JSON (line 1, column 2)",
        ),
        (
            "a JSON array",
            "[\"ann\"]".into(),
            "the body must be a JSON object, not an array",
        ),
        ("missing user_id", "{}".into(), "user_id is missing"),
        (
            "empty user_id",
            json!({"user_id": ""}).to_string(),
            "must not be empty",
        ),
        (
            "blank user_id",
            json!({"user_id": "   "}).to_string(),
            "must not be empty",
        ),
        (
            "user_id over 64 characters",
            json!({"user_id": "u".repeat(65)}).to_string(),
            "at most 64 characters",
        ),
        (
            "user_id with a control character",
            json!({"user_id": "a\u{0}b"}).to_string(),
            "control or invisible",
        ),
        (
            "user_id with a right-to-left override",
            json!({"user_id": "ann\u{202E}nimda"}).to_string(),
            "control or invisible",
        ),
        (
            "user_id with a zero-width space",
            json!({"user_id": "an\u{200B}n"}).to_string(),
            "control or invisible",
        ),
        (
            "a key given twice",
            r#"{"user_id": "ann", "user_id": "bob"}"#.into(),
            "user_id is given twice",
        ),
        (
            "user_id of the wrong type",
            json!({"user_id": 42}).to_string(),
            "user_id must be a string of 1 to 64 characters",
        ),
        (
            "user_id null",
            json!({"user_id": null}).to_string(),
            "user_id must be a string of 1 to 64 characters",
        ),
        (
            "user_id a number too large for an integer",
            "{\"user_id\": 12345678901234567890123}".into(),
            "user_id must be a string of 1 to 64 characters",
        ),
        (
            "admission of the wrong type",
            json!({"user_id": "ann", "admission": 7}).to_string(),
            "admission must be the string the waiting room gave",
        ),
        (
            "an unknown field",
            json!({"user_id": "ann", "quantity": 5}).to_string(),
            "quantity is not a field this request takes",
        ),
        (
            "a body over the size limit",
            oversized_body,
            "larger than 4096 bytes",
        ),
    ];
    for (what, body, reason) in cases {
        let response = app
            .client
            .post(app.url(&format!("/api/sales/{sale}/purchase")))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 400, "{what}");
        let error: Value = response.json().await.expect("a JSON error");
        assert_eq!(error["error"], "invalid_request", "{what}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(message.contains(reason), "{what}: {message:?}");
        // In our words: none of the parser's.
        for theirs in [
            "invalid type",
            "expected",
            "EOF",
            "deserialize",
            " at line ",
        ] {
            assert!(!message.contains(theirs), "{what}: {message:?}");
        }
    }
    assert_eq!(app.redis_stock(sale).await, Some(10));
    assert!(app.redis_buyers(sale).await.is_empty());
    let queue = app.queue_stats(sale).await;
    assert_eq!((queue.waiting, queue.in_flight, queue.dead), (0, 0, 0));
    app.drain().await;
    assert!(app.orders(sale).await.is_empty());
    assert_eq!(app.sold(sale).await, 0);
}

#[tokio::test]
async fn a_user_id_of_exactly_64_characters_is_accepted() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    let user = "秒".repeat(64);
    assert_eq!(app.purchase(sale, &user).await.status(), 202);
    app.drain().await;
    assert_eq!(app.orders(sale).await[0].1, user);
}

#[tokio::test]
async fn unknown_paths_are_answered_404_in_json() {
    let app = spawn_app().await;
    let response = app
        .client
        .get(app.url("/api/nope"))
        .send()
        .await
        .expect("GET");
    assert_eq!(response.status(), 404);
    let error: Value = response.json().await.expect("JSON");
    assert_eq!(error["error"], "not_found");
}

/// A path that is there, asked with a method it does not take, is
/// answered `405` with `Allow`, as JSON under `/api/` and as a page
/// elsewhere. Before, it was `404`, as if the path did not exist: a
/// `curl` of the purchase without `-d` (a GET) was told "no such page or
/// endpoint", and so was a reload of the page a Buy form posted to.
#[tokio::test]
async fn a_method_a_path_does_not_take_is_answered_405_with_allow() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    for (method, path, allow) in [
        (
            reqwest::Method::GET,
            format!("/api/sales/{sale}/purchase"),
            "POST",
        ),
        (
            reqwest::Method::DELETE,
            format!("/api/sales/{sale}/queue"),
            "GET, POST",
        ),
        (reqwest::Method::PUT, format!("/api/sales/{sale}"), "GET"),
    ] {
        let response = app
            .client
            .request(method.clone(), app.url(&path))
            .send()
            .await
            .expect("a request");
        assert_eq!(response.status(), 405, "{method} {path}");
        assert_eq!(response.headers()["allow"], allow, "{method} {path}");
        let error: Value = response.json().await.expect("JSON");
        assert_eq!(error["error"], "method_not_allowed", "{method} {path}");
        assert_eq!(error["message"], format!("this address takes {allow} only"));
    }
    let page = app
        .client
        .get(app.url(&format!("/sales/{sale}/buy")))
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), 405);
    assert_eq!(page.headers()["allow"], "POST");
    let html = page.text().await.expect("a page");
    assert!(html.starts_with("<!doctype html>"), "{html}");
    assert!(html.contains("method_not_allowed"), "{html}");
    // Nothing was bought by any of them.
    assert!(app.redis_buyers(sale).await.is_empty());
}

/// One parse of a buyer id for the form and the API: the spaces around an
/// id are not part of it, so `" ann"` through the API and `"ann "` through
/// the form are one buyer, who gets one unit.
#[tokio::test]
async fn a_buyer_id_with_spaces_around_it_is_the_same_buyer_through_the_api_and_the_form() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let first = app.purchase(sale, " ann").await;
    assert_eq!(first.status(), 202, "{:?}", first.text().await);
    let again = app.purchase(sale, "ann\t").await;
    assert_eq!(
        again.status(),
        409,
        "the API took \"ann\\t\" for another buyer"
    );
    let by_form = app
        .client
        .post(app.url(&format!("/sales/{sale}/buy")))
        .form(&[("user_id", "ann ")])
        .send()
        .await
        .expect("POST the buy form");
    let page = by_form.text().await.expect("HTML");
    assert!(page.contains("You already have one of these."), "{page}");
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}

/// A sale created with a value of the wrong type is told what the field
/// must be, in our words, with the stable code.
#[tokio::test]
async fn a_sale_of_the_wrong_types_is_refused_in_our_words() {
    let app = spawn_app().await;
    for (body, reason) in [
        (
            json!({"name": 5, "stock": 1, "price_cents": 1}),
            "name must be a string",
        ),
        (
            json!({"name": "Lamp", "stock": "ten", "price_cents": 1}),
            "stock must be a whole number of units",
        ),
        (
            json!({"name": "Lamp", "stock": 1, "price_cents": 9.99}),
            "price_cents must be a whole number of cents",
        ),
        (
            json!({"name": "Lamp", "stock": 1, "price_cents": 1, "starts_at": "noon"}),
            "starts_at must be a time such as",
        ),
        (
            // A time chrono reads and PostgreSQL keeps none of (before
            // 4713 BC): it failed the insert, a `500`.
            json!({"name": "Lamp", "stock": 1, "price_cents": 1, "starts_at": "-5000-01-01T00:00:00Z"}),
            "starts_at must not be before 1970-01-01T00:00:00Z",
        ),
        (json!({"stock": 1, "price_cents": 1}), "name is missing"),
    ] {
        let response = app.post_sale(&body).send().await.expect("POST");
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("a JSON error");
        assert_eq!(error["error"], "invalid_request", "{body}");
        assert_eq!(error["message"], reason_in(&error, reason), "{body}");
    }
    assert_eq!(app.sale_count().await, 0);
}

/// The message when it holds `reason`, so that a mismatch shows it whole.
fn reason_in(error: &Value, reason: &str) -> Value {
    let message = error["message"].as_str().unwrap_or_default();
    if message.contains(reason) {
        error["message"].clone()
    } else {
        json!(reason)
    }
}

/// A join of a waiting room reads its buyer as a purchase does. Before,
/// a `user_id` of the wrong type was told "the body must be a string, not
/// a number", naming no field.
#[tokio::test]
async fn a_join_with_a_user_id_of_the_wrong_type_is_told_which_field() {
    let app = spawn_app().await;
    let sale = app
        .create_sale_with(json!({
            "name": "Phone", "stock": 5, "price_cents": 99_900,
            "waiting_room": {"mode": "fifo", "admit_per_sec": 50, "max_active": 5,
                             "admission_secs": 60},
        }))
        .await;
    for body in [json!({"user_id": 42}), json!({"user_id": null})] {
        let response = app
            .client
            .post(app.url(&format!("/api/sales/{sale}/queue")))
            .json(&body)
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 400, "{body}");
        let error: Value = response.json().await.expect("a JSON error");
        assert_eq!(error["error"], "invalid_request", "{body}");
        let message = error["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("user_id must be a string of 1 to 64 characters"),
            "{body}: {message:?}"
        );
    }
}
