//! The admin pages: refused to everyone without the admin cookie; with it,
//! a sale can be created, inspected and its dead-lettered jobs re-driven.

use std::time::Duration;

use reqwest::header::{COOKIE, LOCATION, SET_COOKIE};
use seckill_core::queue::Queue;

use crate::helpers::{ADMIN_TOKEN, Options, TestApp, no_redirects, spawn_app, spawn_app_with};

/// Post the re-drive form for `queue` of `sale`, signed in with `cookie`.
async fn redrive(app: &TestApp, cookie: &str, sale: i64, queue: &str) -> reqwest::Response {
    let path = format!("/admin/sales/{sale}/redrive");
    app.post_admin_form(&path, cookie, &[("queue", queue)], &[])
        .await
}

/// Park one undecodable job in the sale's order queue's dead-letter set.
async fn dead_letter_a_job(app: &TestApp, sale: i64) {
    let queue = Queue::new(app.keys(sale).queue);
    let mut conn = app.redis_conn().await;
    queue
        .enqueue(&mut conn, &[("broken", "{not json")], Duration::ZERO)
        .await
        .expect("enqueue");
    // One attempt allowed, and a lease that runs out at once.
    queue
        .reserve(&mut conn, 1, Duration::from_millis(1), 1)
        .await
        .expect("reserve");
    tokio::time::sleep(Duration::from_millis(20)).await;
    let reclaimed = queue
        .reserve(&mut conn, 1, Duration::from_millis(1), 1)
        .await
        .expect("reserve");
    assert_eq!(reclaimed.dead_lettered, 1);
}

#[tokio::test]
async fn every_admin_page_and_form_refuses_a_visitor_without_the_admin_cookie() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    dead_letter_a_job(&app, sale).await;
    let sales_before = app.sale_count().await;
    let wrong_cookies = [
        None,
        Some("seckill_admin=".to_owned()),
        Some("seckill_admin=nonsense".to_owned()),
        // The raw token is not the cookie's value.
        Some(format!("seckill_admin={ADMIN_TOKEN}")),
        Some(format!("seckill_admin={}", "0".repeat(64))),
    ];
    for cookie in &wrong_cookies {
        for path in ["/admin".to_owned(), format!("/admin/sales/{sale}")] {
            let mut request = no_redirects().get(app.url(&path));
            if let Some(cookie) = cookie {
                request = request.header(COOKIE, cookie);
            }
            let response = request.send().await.expect("GET");
            assert_eq!(response.status(), 401, "GET {path} with {cookie:?}");
            let html = response.text().await.expect("HTML");
            assert!(
                html.contains("action=\"/admin/login\"") && !html.contains("Dead-lettered"),
                "GET {path} with {cookie:?} showed more than the login form: {html}"
            );
        }
        let posts = [
            (
                "/admin/sales".to_owned(),
                vec![
                    ("name", "Stolen"),
                    ("stock", "5"),
                    ("price_cents", "100"),
                    ("starts_in_secs", "0"),
                ],
            ),
            (
                format!("/admin/sales/{sale}/redrive"),
                vec![("queue", "orders")],
            ),
        ];
        for (path, form) in posts {
            let response = app
                .post_admin_form(&path, cookie.as_deref().unwrap_or(""), &form, &[])
                .await;
            assert_eq!(response.status(), 401, "POST {path} with {cookie:?}");
        }
    }
    assert_eq!(app.sale_count().await, sales_before, "a sale was created");
    assert_eq!(app.queue_stats(sale).await.dead, 1, "a job was re-driven");
}

#[tokio::test]
async fn the_admin_login_refuses_a_wrong_token_and_sets_a_cookie_that_is_not_the_token() {
    let app = spawn_app().await;
    let wrong = no_redirects()
        .post(app.url("/admin/login"))
        .form(&[("token", "guess")])
        .send()
        .await
        .expect("POST");
    assert_eq!(wrong.status(), 401);
    assert!(wrong.headers().get(SET_COOKIE).is_none());

    let right = no_redirects()
        .post(app.url("/admin/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .expect("POST");
    assert_eq!(right.status(), 303);
    assert_eq!(right.headers()[LOCATION], "/admin");
    let cookie = right.headers()[SET_COOKIE].to_str().expect("ASCII");
    assert!(cookie.starts_with("seckill_admin="), "{cookie}");
    for attribute in ["HttpOnly", "Secure", "SameSite=Strict", "Path=/admin"] {
        assert!(cookie.contains(attribute), "{attribute} missing: {cookie}");
    }
    assert!(
        !cookie.contains(ADMIN_TOKEN),
        "the cookie holds the token: {cookie}"
    );
}

#[tokio::test]
async fn the_admin_pages_refuse_every_login_while_no_token_is_configured() {
    let app = spawn_app_with(Options {
        admin_token: None,
        ..Options::default()
    })
    .await;
    for token in ["", "anything", ADMIN_TOKEN] {
        let response = app
            .client
            .post(app.url("/admin/login"))
            .form(&[("token", token)])
            .send()
            .await
            .expect("POST");
        assert_eq!(response.status(), 401, "token {token:?}");
        assert!(response.headers().get(SET_COOKIE).is_none());
    }
}

#[tokio::test]
async fn an_admin_creates_a_sale_sees_its_orders_and_stock_and_redrives_dead_jobs() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    let index = no_redirects()
        .get(app.url("/admin"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("GET /admin");
    assert_eq!(index.status(), 200);
    assert!(index.text().await.expect("HTML").contains("Create a sale"));

    let form = [
        ("name", "Workshop mug"),
        ("stock", "4"),
        ("price_cents", "1250"),
        ("starts_in_secs", "0"),
        ("duration_secs", ""),
    ];
    let created = app
        .post_admin_form("/admin/sales", &cookie, &form, &[])
        .await;
    assert_eq!(created.status(), 303);
    let location = created.headers()[LOCATION]
        .to_str()
        .expect("ASCII")
        .to_owned();
    let sale: i64 = location
        .strip_prefix("/admin/sales/")
        .and_then(|id| id.parse().ok())
        .unwrap_or_else(|| panic!("unexpected location {location}"));

    app.buy(sale, "ann").await;
    app.drain().await;
    dead_letter_a_job(&app, sale).await;
    let page = |cookie: String| {
        let (client, url) = (no_redirects(), app.url(&location));
        async move {
            let response = client
                .get(url)
                .header(COOKIE, cookie)
                .send()
                .await
                .expect("GET sale");
            assert_eq!(response.status(), 200);
            response.text().await.expect("HTML")
        }
    };
    let html = page(cookie.clone()).await;
    for expected in [
        "Workshop mug",
        "<td>ann</td>",
        "confirmed",
        r#"<td id="redis-stock">3</td>"#,
        r#"<td id="pg-stock">3</td>"#,
        "Redis and PostgreSQL agree.",
        r#"<td id="orders-dead">1</td>"#,
        r#"<td id="deadlines-waiting">1</td>"#,
    ] {
        assert!(html.contains(expected), "{expected} missing from {html}");
    }

    // A queue the sale does not have: a clear 400, nothing re-driven.
    let unknown = redrive(&app, &cookie, sale, "everything").await;
    assert_eq!(unknown.status(), 400);
    let refused = unknown.text().await.expect("a page");
    assert!(
        refused.contains(r#"data-error="invalid_request""#),
        "{refused}"
    );
    assert_eq!(app.queue_stats(sale).await.dead, 1);

    let redrive = redrive(&app, &cookie, sale, "orders").await;
    assert_eq!(redrive.status(), 303);
    let stats = app.queue_stats(sale).await;
    assert_eq!((stats.dead, stats.waiting), (0, 1));
    assert!(
        page(cookie)
            .await
            .contains(r#"<td id="orders-dead">0</td>"#)
    );
}

#[tokio::test]
async fn logging_out_ends_the_session_on_the_server_for_every_copy_of_the_cookie() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    assert_eq!(app.admin_status(&cookie).await, 200);
    let out = no_redirects()
        .post(app.url("/admin/logout"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("POST /admin/logout");
    assert_eq!(out.status(), 303);
    // A copy kept from before (a stolen cookie, another tab) no longer opens anything.
    assert_eq!(app.admin_status(&cookie).await, 401);
    // Logging in again opens a new session.
    let again = app.log_in().await;
    assert_ne!(again, cookie);
    assert_eq!(app.admin_status(&again).await, 200);
}

/// Seconds since the epoch on this machine's clock, the one the app
/// judges a session's expiry by.
fn now_secs() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970");
    i64::try_from(since.as_secs()).expect("a date")
}

#[tokio::test]
async fn a_session_expires_by_itself_and_its_expiry_cannot_be_moved() {
    let app = spawn_app_with(Options {
        admin_session: Duration::from_secs(2),
        ..Options::default()
    })
    .await;
    let cookie = app.log_in().await;
    // The cookie says when it expires, in whole seconds: a session of 2 s
    // lasts more than one and at most two. An answer that came before
    // that second must be 200 (a slow machine may come after).
    let (payload, mac) = cookie.rsplit_once('.').expect("a signed value");
    let (head, expires) = payload.rsplit_once('.').expect("an expiry");
    let expires: i64 = expires.parse().expect("an expiry in seconds");
    let status = app.admin_status(&cookie).await;
    if now_secs() < expires {
        assert_eq!(status, 200, "the session ended before its expiry");
    }
    // The same session, its expiry pushed far ahead by hand: the signature
    // no longer matches.
    let forged = format!("{head}.99999999999.{mac}");
    assert_eq!(app.admin_status(&forged).await, 401);
    // Once the clock has reached the expiry, the session is over.
    while now_secs() < expires {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        app.admin_status(&cookie).await,
        401,
        "the session outlived its expiry"
    );
}

#[tokio::test]
async fn five_wrong_tokens_lock_the_address_out_even_for_the_right_token() {
    let app = spawn_app().await;
    for _ in 0..5 {
        let wrong = no_redirects()
            .post(app.url("/admin/login"))
            .form(&[("token", "guess")])
            .send()
            .await
            .expect("POST");
        assert_eq!(wrong.status(), 401);
    }
    let locked = no_redirects()
        .post(app.url("/admin/login"))
        .form(&[("token", ADMIN_TOKEN)])
        .send()
        .await
        .expect("POST");
    assert_eq!(locked.status(), 429);
    assert!(locked.headers().contains_key("retry-after"));
    assert!(locked.headers().get(SET_COOKIE).is_none());
    // The admin API shares the count.
    let api = app
        .post_sale(&serde_json::json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .send()
        .await
        .expect("POST /api/sales");
    assert_eq!(api.status(), 429);
    let error: serde_json::Value = api.json().await.expect("a JSON error");
    assert_eq!(error["error"], "rate_limited");
}

/// Guesses sent all at once are each counted before any is compared: no
/// more than five of them are even looked at.
#[tokio::test]
async fn guesses_sent_all_at_once_cannot_slip_past_the_lock_out() {
    let app = spawn_app().await;
    let guesses: Vec<_> = (0..20)
        .map(|i| {
            let request = no_redirects()
                .post(app.url("/admin/login"))
                .form(&[("token", format!("guess-{i}"))]);
            tokio::spawn(async move { request.send().await.expect("POST").status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for guess in guesses {
        statuses.push(guess.await.expect("a task"));
    }
    let compared = statuses.iter().filter(|s| **s == 401).count();
    let refused = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((compared, refused), (5, 15), "{statuses:?}");
}

/// `/admin` lists the sales a page at a time, newest first, with a link to
/// the older ones: its cost is a page's, however many sales there are.
#[tokio::test]
async fn the_admin_page_lists_sales_a_page_at_a_time() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    let mut ids = Vec::new();
    for n in 0..55 {
        let new = seckill_core::domain::NewSale::builder(format!("Sale {n}"), 3)
            .build(chrono::Utc::now())
            .expect("a sale");
        ids.push(app.store.create_sale(&new).await.expect("created").id);
    }
    let page = |path: String| {
        let (app, cookie) = (&app, &cookie);
        async move {
            let response = app
                .client
                .get(app.url(&path))
                .header(COOKIE, cookie)
                .send()
                .await
                .expect("GET /admin");
            assert_eq!(response.status(), 200, "{path}");
            response.text().await.expect("the page")
        }
    };
    let first = page("/admin".to_owned()).await;
    let listed = |html: &str| {
        ids.iter()
            .filter(|id| html.contains(&format!("href=\"/admin/sales/{id}\"")))
            .copied()
            .collect::<Vec<i64>>()
    };
    assert_eq!(listed(&first), ids[5..].to_vec(), "the 50 newest");
    let older = format!("/admin?before={}", ids[5]);
    assert!(
        first.contains(&format!("href=\"{older}\"")),
        "no link to the older sales"
    );
    let second = page(older).await;
    assert_eq!(listed(&second), ids[..5].to_vec(), "the 5 oldest");
    assert!(!second.contains("Older sales"), "a link past the last page");
}

/// A refused create-a-sale form comes back as typed, the field at fault
/// marked and the reason above the form, which is the page's first part.
#[tokio::test]
async fn a_refused_sale_form_keeps_what_was_typed_and_marks_the_field() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    for (stock, price, field, reason) in [
        ("0", "1250", "stock", "Units must be between 1 and"),
        ("three", "1250", "stock", "Units must be a whole number"),
        (
            "3",
            "-5",
            "price_cents",
            "Price in cents must be between 0 and",
        ),
    ] {
        let form = [
            ("name", "Kettle <blue>"),
            ("stock", stock),
            ("price_cents", price),
            ("starts_in_secs", "45"),
            ("duration_secs", "600"),
            ("waiting_room", "lottery"),
            ("admit_per_sec", "7"),
            ("max_active", "8"),
            ("admission_secs", "90"),
        ];
        let refused = app
            .post_admin_form("/admin/sales", &cookie, &form, &[])
            .await;
        assert_eq!(refused.status(), 400, "{field}");
        let page = refused.text().await.expect("HTML");
        for (name, value) in form {
            if name == "waiting_room" {
                assert!(
                    page.contains(r#"<option value="lottery" selected>"#),
                    "{page}"
                );
                continue;
            }
            let escaped = value.replace('<', "&#60;").replace('>', "&#62;");
            assert!(
                page.contains(&format!(r#"name="{name}" value="{escaped}""#)),
                "{name} lost its {value:?}: {page}"
            );
        }
        let marked = format!(r#"id="{field}" name="{field}""#);
        let input = page
            .lines()
            .find(|line| line.contains(&marked))
            .expect("the field");
        assert!(input.contains(r#"aria-invalid="true""#), "{input}");
        assert_eq!(page.matches(r#"aria-invalid="true""#).count(), 1, "{page}");
        assert!(page.contains(reason), "{reason}: {page}");
        let form_at = page.find(r#"id="create-form""#).expect("the form");
        let sales_at = page.find("<h2>Sales</h2>").expect("the sales");
        assert!(form_at < sales_at, "the form comes first: {page}");
    }
    assert_eq!(app.sale_count().await, 0);
}

/// The words beside the field `name` on the admin page: its label.
fn label_of(page: &str, name: &str) -> String {
    let start = page
        .find(&format!(r#"<label for="{name}">"#))
        .unwrap_or_else(|| panic!("no label for {name}: {page}"));
    let label = &page[start..];
    let text = &label[label.find('>').expect("the tag ends") + 1..];
    text[..text.find("</label>").expect("the label ends")].to_owned()
}

/// A refused form names the field at fault as the form labels it
/// ("Units", not the API's `stock`): the admin reads the page. The API
/// keeps its code and its names.
#[tokio::test]
async fn a_refused_sale_form_names_the_field_by_its_label() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    for (field, value, rule) in [
        ("stock", "0", "must be between 1 and 1000000"),
        ("stock", "three", "must be a whole number"),
        ("price_cents", "-5", "must be between 0 and"),
        ("starts_in_secs", "99999999999", "must be between 0 and"),
        ("duration_secs", "0", "must be between 1 and"),
        ("admit_per_sec", "0", "must be between 1 and 10000"),
        ("max_active", "0", "must be between 1 and 1000000"),
        ("admission_secs", "5", "must be between 10 and 3600"),
        ("waiting_room", "queue", "must be none, fifo or lottery"),
    ] {
        let mut form = vec![
            ("name", "Kettle"),
            ("stock", "3"),
            ("price_cents", "1250"),
            ("starts_in_secs", "45"),
            ("duration_secs", "600"),
            ("waiting_room", "fifo"),
            ("admit_per_sec", "7"),
            ("max_active", "8"),
            ("admission_secs", "90"),
        ];
        for pair in &mut form {
            if pair.0 == field {
                pair.1 = value;
            }
        }
        let refused = app
            .post_admin_form("/admin/sales", &cookie, &form, &[])
            .await;
        assert_eq!(refused.status(), 400, "{field}");
        let page = refused.text().await.expect("HTML");
        let said = format!("Not created: {} {rule}", label_of(&page, field));
        assert!(page.contains(&said), "{field}: {said:?} missing: {page}");
    }
    let blank = app
        .client
        .get(app.url("/admin"))
        .header(COOKIE, &cookie)
        .send()
        .await
        .expect("GET /admin")
        .text()
        .await
        .expect("the page");
    assert_eq!(label_of(&blank, "stock"), "Units");
    assert_eq!(app.sale_count().await, 0);

    let api = app
        .post_sale(&serde_json::json!({"name": "Kettle", "stock": 0, "price_cents": 1}))
        .send()
        .await
        .expect("POST /api/sales");
    assert_eq!(api.status(), 400);
    let body: serde_json::Value = api.json().await.expect("JSON");
    assert_eq!(body["error"], "invalid_request");
    assert_eq!(body["message"], "stock must be between 1 and 1000000");
}
