//! The storefront pages without a browser: what they render, the headers
//! they send, the cross-site posts they refuse, and the index paging
//! through every sale. The live event stream is in `pages_events.rs`.

use std::time::Duration;

use reqwest::header::{COOKIE, SET_COOKIE};

use crate::helpers::{TestApp, spawn_app};

async fn get_html(app: &TestApp, path: &str) -> (reqwest::StatusCode, String) {
    let response = app.client.get(app.url(path)).send().await.expect("GET");
    (response.status(), response.text().await.expect("a body"))
}

#[tokio::test]
async fn every_response_carries_the_security_headers() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    for path in [
        "/".to_owned(),
        format!("/sales/{sale}"),
        format!("/api/sales/{sale}"),
        "/admin".to_owned(),
        "/static/sale.js".to_owned(),
        "/no/such/page".to_owned(),
    ] {
        let response = app.client.get(app.url(&path)).send().await.expect("GET");
        crate::security_headers::assert_carries_the_headers(response.headers(), &path, &path);
    }
}

#[tokio::test]
async fn the_pages_run_no_inline_script_or_style_so_the_policy_can_forbid_them() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    let order = app.buy(sale, "ann").await;
    for path in [
        "/".to_owned(),
        format!("/sales/{sale}"),
        format!("/orders/{order}"),
        "/admin".to_owned(),
    ] {
        let (status, html) = get_html(&app, &path).await;
        assert!(status.is_success() || status == 401, "{path}: {status}");
        for inline in ["<script>", "style=", "onclick", "<style"] {
            assert!(!html.contains(inline), "{path} has {inline}: {html}");
        }
    }
}

#[tokio::test]
async fn a_cross_site_form_post_is_refused_and_writes_nothing() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    let own_origin = app.address.clone();
    let buy = |headers: Vec<(&'static str, String)>| {
        let mut request = app
            .client
            .post(app.url(&format!("/sales/{sale}/buy")))
            .form(&[("user_id", "victim")]);
        for (name, value) in headers {
            request = request.header(name, value);
        }
        request.send()
    };
    for forged in [
        vec![("origin", "https://evil.example".to_owned())],
        vec![("origin", "null".to_owned())],
        vec![("sec-fetch-site", "cross-site".to_owned())],
        vec![
            ("sec-fetch-site", "same-site".to_owned()),
            ("origin", own_origin.clone()),
        ],
        vec![("referer", "https://evil.example/trap.html".to_owned())],
    ] {
        let response = buy(forged.clone()).await.expect("POST");
        crate::cross_site::refused_as_cross_site(response, &format!("{forged:?}")).await;
    }
    let login = app
        .client
        .post(app.url("/admin/login"))
        .header("origin", "https://evil.example")
        .form(&[("token", crate::helpers::ADMIN_TOKEN)])
        .send()
        .await
        .expect("POST");
    assert_eq!(login.status(), 403, "a forged admin login");
    assert!(
        app.redis_buyers(sale).await.is_empty(),
        "a forged post bought"
    );

    // The same post from the app's own pages goes through.
    let own = buy(vec![
        ("origin", own_origin.clone()),
        ("sec-fetch-site", "same-origin".to_owned()),
    ])
    .await
    .expect("POST");
    assert_eq!(own.status(), 200);
    assert_eq!(app.redis_buyers(sale).await, ["victim"]);
}

#[tokio::test]
async fn the_sale_page_renders_its_figures_and_gives_a_new_browser_a_buyer_cookie() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    let response = app
        .client
        .get(app.url(&format!("/sales/{sale}")))
        .send()
        .await
        .expect("GET");
    let cookie = response.headers()[SET_COOKIE]
        .to_str()
        .expect("ASCII")
        .to_owned();
    assert!(cookie.starts_with("seckill_buyer=buyer-"), "{cookie}");
    assert!(cookie.contains("SameSite=Lax") && cookie.contains("HttpOnly"));
    let html = response.text().await.expect("HTML");
    for expected in [
        r#"<strong id="stock-left" class="big">4</strong> of 5 left"#,
        r#"<span id="sold">1</span> sold"#,
        r#"<script src="/static/sale.js" defer></script>"#,
        r#"<label for="user_id">"#,
        // The price with its currency.
        r#"<p class="price">$999.00</p>"#,
    ] {
        assert!(html.contains(expected), "{expected} missing from {html}");
    }
    assert!(
        !html.contains(r#"id="buy" disabled"#),
        "a live sale's button is enabled"
    );
}

/// The buy form's buyer comes back from their cookie as they typed it.
/// Before, the cookie was written raw and read percent-decoded: a buyer
/// who bought as `50%41 off; zoë` came back as `50A off` (the browser cuts
/// the value at the `;`, and `%41` is `A`), a buyer of their own, and the
/// `ë` made the header more than ASCII.
#[tokio::test]
async fn a_buyer_id_comes_back_from_its_cookie_as_it_was_typed() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    let typed = "50%41 off; zoë, x";
    let bought = app
        .client
        .post(app.url(&format!("/sales/{sale}/buy")))
        .form(&[("user_id", typed)])
        .send()
        .await
        .expect("POST buy");
    assert_eq!(bought.status(), 200);
    let set = bought.headers()[SET_COOKIE]
        .to_str()
        .expect("a cookie in ASCII")
        .to_owned();
    // What a browser sends back: the pair before the first `;`.
    let pair = set.split(';').next().expect("a name and value");
    let page = app
        .client
        .get(app.url(&format!("/sales/{sale}")))
        .header(COOKIE, pair)
        .send()
        .await
        .expect("GET")
        .text()
        .await
        .expect("HTML");
    assert!(
        page.contains(&format!(r#"id="user_id" name="user_id" value="{typed}""#)),
        "{set} came back as another buyer: {page}"
    );
    assert_eq!(app.redis_buyers(sale).await, [typed]);
}

#[tokio::test]
async fn an_upcoming_sale_disables_its_buy_button_and_the_server_refuses_early_buyers() {
    let app = spawn_app().await;
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(3600);
    let sale = app
        .create_sale_with(serde_json::json!({
            "name": "Later", "stock": 3, "price_cents": 100, "starts_at": starts_at,
        }))
        .await;
    let (_, html) = get_html(&app, &format!("/sales/{sale}")).await;
    assert!(html.contains(r#"id="buy" disabled"#), "{html}");
    assert!(html.contains("The sale has not started yet."), "{html}");
    let (_, index) = get_html(&app, "/").await;
    assert!(
        index.contains("Upcoming") && index.contains("Later"),
        "{index}"
    );
    // The form posted anyway, as a page without the script would.
    let early = app
        .client
        .post(app.url(&format!("/sales/{sale}/buy")))
        .form(&[("user_id", "eager")])
        .send()
        .await
        .expect("POST");
    assert!(
        early
            .text()
            .await
            .expect("HTML")
            .contains("The sale has not started yet.")
    );
    assert!(app.redis_buyers(sale).await.is_empty());
}

#[tokio::test]
async fn the_order_page_follows_the_order_from_pending_to_paid_with_the_pay_form() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    let order = app.buy(sale, "ann").await;
    let path = format!("/orders/{order}");
    let (status, html) = get_html(&app, &path).await;
    assert_eq!(status, 200);
    assert!(
        html.contains(r#"<strong id="status">pending</strong>"#),
        "{html}"
    );

    app.drain().await;
    let (_, html) = get_html(&app, &path).await;
    assert!(
        html.contains(r#"<strong id="status">confirmed</strong>"#),
        "{html}"
    );
    assert!(html.contains("seconds left to pay."), "{html}");
    // One sentence, the status said once.
    assert!(
        html.contains(
            r#"Status: <strong id="status">confirmed</strong>. <span id="headline">The unit is yours once you pay.</span>"#
        ),
        "{html}"
    );
    assert!(
        html.contains(&format!(r#"action="/orders/{order}/pay""#)),
        "{html}"
    );

    // Pay with the form, as a browser without the script would.
    let paid = app
        .client
        .post(app.url(&format!("/orders/{order}/pay")))
        .send()
        .await
        .expect("POST pay");
    assert_eq!(paid.status(), 200, "the redirect leads back to the order");
    let html = paid.text().await.expect("HTML");
    assert!(
        html.contains(r#"<strong id="status">paid</strong>"#),
        "{html}"
    );

    let (status, _) = get_html(&app, &format!("/orders/{}", uuid::Uuid::now_v7())).await;
    assert_eq!(status, 404);
}

/// The index is built once per quarter second and served to every request
/// in between: a purchase shows on it within that time, and a sale created
/// on this instance shows at once.
#[tokio::test]
async fn the_index_shows_a_purchase_within_a_quarter_second_and_a_new_sale_at_once() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    // The index is built no earlier than this request is sent.
    let asked = std::time::Instant::now();
    let (_, before) = get_html(&app, "/").await;
    assert!(before.contains("10 of 10 left"), "{before}");
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let (_, cached) = get_html(&app, "/").await;
    // Served from the build above if it came within its quarter second;
    // later (a slow machine), it may be either.
    if asked.elapsed() < Duration::from_millis(250) {
        assert!(cached.contains("10 of 10 left"), "not cached: {cached}");
    } else {
        assert!(
            cached.contains("10 of 10 left") || cached.contains("9 of 10 left"),
            "{cached}"
        );
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (_, after) = get_html(&app, "/").await;
    assert!(after.contains("9 of 10 left"), "{after}");
    app.create_sale_with(serde_json::json!({"name": "Tablet", "stock": 3, "price_cents": 100}))
        .await;
    let (_, listed) = get_html(&app, "/").await;
    assert!(listed.contains("Tablet"), "{listed}");
}

/// The index lists 20 sales a page, live ones first (newest first), then
/// upcoming, and every sale is one "Older" link away; a page past the last,
/// or a page number that is not one, is a clear error.
#[tokio::test]
async fn the_index_pages_through_every_sale_live_ones_first() {
    let app = spawn_app().await;
    let mut live = Vec::new();
    for n in 0..21 {
        live.push(
            app.create_sale_with(
                serde_json::json!({"name": format!("Sale {n}"), "stock": 1, "price_cents": 100}),
            )
            .await,
        );
    }
    // The newest sale of all, but upcoming: it is listed after every live one.
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(3600);
    let later = app
        .create_sale_with(serde_json::json!({
            "name": "Later", "stock": 3, "price_cents": 100, "starts_at": starts_at,
        }))
        .await;
    let listed = |html: &str| -> Vec<i64> {
        html.split("<a href=\"/sales/")
            .skip(1)
            .map(|rest| rest.split('"').next().unwrap().parse().unwrap())
            .collect()
    };

    let (status, first) = get_html(&app, "/").await;
    assert_eq!(status, 200);
    let newest_live: Vec<i64> = live.iter().rev().take(20).copied().collect();
    assert_eq!(listed(&first), newest_live, "{first}");
    assert!(first.contains("Page 1 of 2 · 22 sales"), "{first}");
    assert!(first.contains(r#"href="/?page=2">Older"#), "{first}");
    assert!(!first.contains("Newer"), "{first}");
    assert!(!first.contains("Upcoming"), "{first}");

    let (status, second) = get_html(&app, "/?page=2").await;
    assert_eq!(status, 200);
    assert_eq!(listed(&second), vec![live[0], later], "{second}");
    let live_heading = second.find("Live now").expect("a live heading");
    let upcoming_heading = second.find("Upcoming").expect("an upcoming heading");
    assert!(live_heading < upcoming_heading, "{second}");
    assert!(second.contains(r#"href="/?page=1">Newer"#), "{second}");
    assert!(!second.contains("Older"), "{second}");

    let (status, past) = get_html(&app, "/?page=3").await;
    assert_eq!(status, 404, "{past}");
    for bad in ["/?page=0", "/?page=two", "/?page=-1", "/?page=1&page=2"] {
        let (status, body) = get_html(&app, bad).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert!(
            body.contains(r#"data-error="invalid_request""#)
                && body.to_lowercase().contains("page"),
            "{bad}: {body}"
        );
    }
}

/// Pages after the first are built for each request, two at a time per
/// instance: a client asking for `/?page=2` in a loop cannot take every
/// PostgreSQL connection of the instance. Here every read of `sales` is
/// held back by a table lock; of six requests for page 2, two wait in
/// PostgreSQL, and all six are answered once the lock goes.
#[tokio::test]
async fn pages_after_the_first_are_built_two_at_a_time() {
    let app = spawn_app().await;
    for n in 0..21 {
        app.create_sale_with(
            serde_json::json!({"name": format!("Sale {n}"), "stock": 1, "price_cents": 100}),
        )
        .await;
    }
    let mut blocker = app.pg.begin().await.expect("begin");
    sqlx::query("LOCK TABLE sales IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("lock the sales");
    let requests: Vec<_> = (0..6)
        .map(|_| tokio::spawn(app.client.get(app.url("/?page=2")).send()))
        .collect();
    let pg = app.pg.clone();
    let waiting = move || {
        let pg = pg.clone();
        async move {
            sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FROM pg_stat_activity
                  WHERE datname = current_database() AND wait_event_type = 'Lock'
                    AND query LIKE '%count(*) OVER ()%'",
            )
            .fetch_one(&pg)
            .await
            .expect("pg_stat_activity")
        }
    };
    crate::helpers::eventually(Duration::from_secs(5), "two page builds waiting", || {
        let waiting = waiting.clone();
        async move { waiting().await >= 2 }
    })
    .await;
    // Time for any further build to reach PostgreSQL, had it been let go.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(waiting().await, 2, "page builds waiting in PostgreSQL");
    blocker.rollback().await.expect("release the sales");
    for request in requests {
        let response = request.await.expect("a task").expect("GET /?page=2");
        assert_eq!(response.status(), 200);
    }
}

/// A page asked for as a page never answers raw JSON: a missing sale or
/// order, a page past the last, a malformed query and a refused buy form
/// get the storefront's layout, the message in words and a link back,
/// with the status the API gives the same mistake; the API keeps its JSON.
#[tokio::test]
async fn pages_answer_their_errors_as_pages_with_the_status_kept_and_the_api_as_json() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    let cases = [
        ("GET", "/sales/999999".to_owned(), "", 404, "No such sale"),
        ("GET", "/sales/abc".to_owned(), "", 404, "No such sale"),
        (
            "GET",
            "/orders/garbage".to_owned(),
            "",
            404,
            "No such order",
        ),
        ("GET", "/?page=99".to_owned(), "", 404, "No such page"),
        (
            "GET",
            "/?page=abc".to_owned(),
            "",
            400,
            "must be a whole number",
        ),
        ("GET", "/no/such/page".to_owned(), "", 404, "No such page"),
        (
            "GET",
            "/sales/999999/live".to_owned(),
            "",
            404,
            "No such sale",
        ),
        (
            "POST",
            format!("/sales/{sale}/buy"),
            "user_id=+++",
            400,
            "must not be empty",
        ),
        (
            "POST",
            format!("/sales/{sale}/buy"),
            "nobody=1",
            400,
            "user_id is missing",
        ),
        (
            "POST",
            "/sales/999999/buy".to_owned(),
            "user_id=ann",
            404,
            "No such sale",
        ),
    ];
    for (method, path, form, status, words) in cases {
        let request = match method {
            "GET" => app.client.get(app.url(&path)),
            _ => app
                .client
                .post(app.url(&path))
                .header("content-type", "application/x-www-form-urlencoded")
                .header("origin", app.address.clone())
                .body(form),
        };
        let response = request.send().await.expect("a request");
        assert_eq!(response.status().as_u16(), status, "{method} {path}");
        let content_type = response.headers()["content-type"]
            .to_str()
            .expect("ASCII")
            .to_owned();
        let body = response.text().await.expect("a body");
        assert!(
            content_type.starts_with("text/html"),
            "{method} {path}: {content_type}: {body}"
        );
        assert!(
            body.contains("<h1") && body.contains(words) && body.contains("id=\"back\""),
            "{method} {path}: {body}"
        );
        assert!(!body.contains("\"error\":"), "{method} {path}: {body}");
    }
    // The buy form, refused, links back to its sale.
    let (_, refused) = {
        let response = app
            .client
            .post(app.url(&format!("/sales/{sale}/buy")))
            .header("origin", app.address.clone())
            .form(&[("user_id", " ")])
            .send()
            .await
            .expect("POST");
        (response.status(), response.text().await.expect("a body"))
    };
    assert!(
        refused.contains(&format!("href=\"/sales/{sale}\"")),
        "{refused}"
    );
    for (path, code) in [
        ("/api/sales/999999", "sale_not_found"),
        ("/api/orders/garbage", "order_not_found"),
        ("/api/nope", "not_found"),
    ] {
        let response = app.client.get(app.url(path)).send().await.expect("GET");
        assert_eq!(response.status(), 404, "{path}");
        let error: serde_json::Value = response.json().await.expect("JSON");
        assert_eq!(error["error"], code, "{path}");
    }
}

/// What the live page's HTML says in each `<td id="…">`, before any
/// script runs.
fn live_cells(html: &str) -> Vec<(String, String)> {
    html.split(r#"<td id=""#)
        .skip(1)
        .map(|cell| {
            let (id, rest) = cell.split_once(r#"">"#).expect("an id");
            let figure = rest.split_once("</td>").expect("a closed cell").0;
            (id.to_owned(), figure.to_owned())
        })
        .collect()
}

/// The live page's first paint has the sale's figures: a projector that
/// shows the page before its stream's first snapshot (or with no
/// JavaScript) reads numbers, not dashes. Its HTML is read here as
/// served, with no script run.
#[tokio::test]
async fn the_live_page_is_served_with_the_sales_figures_before_any_script_runs() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    app.buy(sale, "ann").await;
    app.drain().await;
    let (status, html) = get_html(&app, &format!("/sales/{sale}/live")).await;
    assert_eq!(status, 200);
    let cells = live_cells(&html);
    assert!(cells.len() >= 18, "{cells:?}");
    for (id, figure) in &cells {
        assert_ne!(figure, "—", "#{id} shows a dash: {html}");
    }
    for (id, figure) in [
        ("stock", "9"),
        ("buyers", "1"),
        ("waiting", "0"),
        ("pg-confirmed", "1"),
        ("pg-sold", "1"),
    ] {
        assert!(
            cells.contains(&(id.to_owned(), figure.to_owned())),
            "#{id} is not {figure}: {cells:?}"
        );
    }
    // The lock was taken once, and let go: the holder's words, the fence
    // counter and both servers' status, as the stream would put them.
    for shown in [
        r#"<span id="holder">free</span>"#,
        r#"<strong id="fence">1</strong>"#,
        r#"<span id="redis-status" class="status-live">Redis ok</span>"#,
        r#"<span id="pg-status" class="status-live">ok</span>"#,
    ] {
        assert!(html.contains(shown), "{shown} missing: {html}");
    }

    // A sale with a waiting room: its figures too (the admission rate
    // needs a second of readings, on the page as in the stream).
    let roomed =
        crate::waiting_room::sale_with_room(&app, 10, 0, crate::waiting_room::fifo(10, 4)).await;
    let (_, html) = get_html(&app, &format!("/sales/{roomed}/live")).await;
    let cells = live_cells(&html);
    for (id, figure) in cells.iter().filter(|(id, _)| id != "room-rate") {
        assert_ne!(figure, "—", "#{id} shows a dash: {html}");
    }
    assert!(
        cells.contains(&("room-waiting".to_owned(), "0".to_owned())),
        "{cells:?}"
    );
    assert!(html.contains(r#"<span id="room-closed" class="small">open</span>"#));
}
