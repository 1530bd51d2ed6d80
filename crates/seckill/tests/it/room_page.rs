//! A sale's waiting room on its page, without a browser: the Buy form
//! needs the admission the API needs, the "Join the line" form keeps a
//! place, the page shows it (reloading itself while its buyer waits, not
//! once admitted), a closed room says so, and the standing's stream. In
//! Chromium: `browser_room.rs`.

use reqwest::header::{CONTENT_TYPE, LOCATION, SET_COOKIE};
use seckill_core::queue::QueueStats;
use serde_json::json;

use crate::helpers::{Options, TestApp, eventually, no_redirects, spawn_app};
use crate::helpers::{spawn_app_on_private_redis, spawn_app_with};
use crate::pages_events::read_until;
use crate::waiting_room::{admission, admitted, buy, fifo, joined, line_length, sale_with_room};
use crate::waiting_room::{standing, ticket};

/// What a page without JavaScript reloads itself with while its buyer waits.
const REFRESH: &str = r#"<noscript><meta http-equiv="refresh" content="1"></noscript>"#;

/// The sale page as `cookie` (a `name=value`, or none) sees it.
pub(crate) async fn page(app: &TestApp, sale: i64, cookie: Option<&str>) -> String {
    let mut request = app.client.get(app.url(&format!("/sales/{sale}")));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    let response = request.send().await.expect("GET the sale page");
    assert_eq!(response.status(), 200);
    response.text().await.expect("HTML")
}

/// Whether the element of `id` is on the page and shown (no `hidden`).
fn shown(html: &str, id: &str) -> bool {
    let Some(at) = html.find(&format!(r#"id="{id}""#)) else {
        return false;
    };
    let tag_end = at + html[at..].find('>').expect("a whole tag");
    !html[at..tag_end].contains(" hidden")
}

/// The text of the element of `id` (up to its first tag).
pub(crate) fn text_of<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html.find(&format!(r#"id="{id}""#)).expect("the element");
    let start = at + html[at..].find('>').expect("a whole tag") + 1;
    let end = start + html[start..].find('<').expect("a closing tag");
    &html[start..end]
}

/// The `value` of the input of `id`.
fn value_of<'a>(html: &'a str, id: &str) -> &'a str {
    let at = html.find(&format!(r#"id="{id}""#)).expect("the input");
    let start = at + html[at..].find(r#"value=""#).expect("a value") + 7;
    let end = start + html[start..].find('"').expect("the value's end");
    &html[start..end]
}

/// Post the sale page's "Join the line" form as `buyer`.
async fn join_form(app: &TestApp, sale: i64, buyer: &str) -> reqwest::Response {
    no_redirects()
        .post(app.url(&format!("/sales/{sale}/queue")))
        .form(&[("user_id", buyer)])
        .send()
        .await
        .expect("POST the join form")
}

/// Join by the form as `buyer`; the ticket cookie's `name=value`.
async fn join_by_form(app: &TestApp, sale: i64, buyer: &str) -> String {
    let answer = join_form(app, sale, buyer).await;
    assert_eq!(answer.status(), 303, "{buyer} joins by the form");
    assert_eq!(answer.headers()[LOCATION], format!("/sales/{sale}"));
    let name = format!("seckill_ticket_{sale}=");
    let cookie = answer
        .headers()
        .get_all(SET_COOKIE)
        .iter()
        .map(|value| value.to_str().expect("ASCII"))
        .find(|value| value.starts_with(&name))
        .expect("the ticket cookie");
    assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"));
    cookie.split(';').next().expect("name=value").to_owned()
}

/// Post the sale page's Buy form as `buyer`, with `admission` if given.
pub(crate) async fn buy_form(
    app: &TestApp,
    sale: i64,
    buyer: &str,
    admission: Option<&str>,
) -> (u16, String) {
    let mut form = vec![("user_id", buyer)];
    if let Some(admission) = admission {
        form.push(("admission", admission));
    }
    let answer = app
        .client
        .post(app.url(&format!("/sales/{sale}/buy")))
        .form(&form)
        .send()
        .await
        .expect("POST the Buy form");
    let status = answer.status().as_u16();
    (status, answer.text().await.expect("HTML"))
}

#[tokio::test]
async fn the_buy_form_without_a_good_admission_is_403_and_writes_nothing() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(1_000, 10)).await;
    let bob_ticket = ticket(&joined(&app, sale, "bob").await);
    let bobs = admission(&admitted(&app, sale, &bob_ticket).await).to_owned();
    for (admission, says) in [
        (None, "join the line"),
        (Some(""), "join the line"),
        (Some("a1.forged"), "not a turn the waiting room gave out"),
        (Some(bobs.as_str()), "another buyer"),
    ] {
        let (status, html) = buy_form(&app, sale, "ann", admission).await;
        assert_eq!(status, 403, "{admission:?}: {html}");
        assert!(
            html.contains(says),
            "{admission:?}: {says:?} missing: {html}"
        );
    }
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.redis_stock(sale).await, Some(5));
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
    assert!(app.orders(sale).await.is_empty());

    // bob's admission buys for bob, once; his place among the active is freed.
    let (status, html) = buy_form(&app, sale, "bob", Some(&bobs)).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("You got one!"), "{html}");
    let link = html
        .split(r#"href="/orders/"#)
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .expect("a link to bob's order")
        .to_owned();
    // Again (his answer lost on its way): no second unit, and a link to
    // the order he holds.
    let (status, html) = buy_form(&app, sale, "bob", Some(&bobs)).await;
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("You already have one of these."), "{html}");
    assert!(
        html.contains(&format!(r#"href="/orders/{link}""#)),
        "{html}"
    );
    assert_eq!(app.redis_buyers(sale).await, ["bob"]);
    let bob = standing(&app, sale, &bob_ticket).await;
    assert_eq!(bob["bought"], true, "{bob}");
}

#[tokio::test]
async fn the_join_form_sets_the_ticket_cookie_and_the_page_shows_the_place_reloading_itself() {
    let app = spawn_app().await;
    // Opens in an hour: nobody is admitted while the test looks.
    let sale = sale_with_room(&app, 5, 3_600, fifo(1, 10)).await;
    for early in ["early-0", "early-1"] {
        joined(&app, sale, early).await;
    }
    let newcomer = page(&app, sale, None).await;
    assert!(shown(&newcomer, "join-form"), "{newcomer}");
    assert!(
        !shown(&newcomer, "buy-form"),
        "Buy offered outside the line"
    );
    assert!(!newcomer.contains(REFRESH), "{newcomer}");

    let ticket = join_by_form(&app, sale, "ann").await;
    let waiting = page(&app, sale, Some(&ticket)).await;
    assert!(shown(&waiting, "room-waiting"), "{waiting}");
    assert_eq!(text_of(&waiting, "room-position"), "3");
    assert_eq!(text_of(&waiting, "room-ahead"), "2");
    assert_eq!(text_of(&waiting, "room-count"), "3");
    assert!(text_of(&waiting, "room-eta").starts_with("about"));
    assert!(waiting.contains(REFRESH), "no reload while waiting");
    assert!(!shown(&waiting, "join-form") && !shown(&waiting, "buy-form"));
    assert_eq!(value_of(&waiting, "user_id"), "ann");
    // Joining again (a second tab) keeps the place.
    join_by_form(&app, sale, "ann").await;
    let again = page(&app, sale, Some(&ticket)).await;
    assert_eq!(text_of(&again, "room-position"), "3");
    assert_eq!(line_length(&app, sale).await, 3);
}

#[tokio::test]
async fn once_admitted_the_reload_stops_and_the_buy_form_carries_the_admission() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(1_000, 10)).await;
    let ticket = join_by_form(&app, sale, "ann").await;
    eventually(
        std::time::Duration::from_secs(10),
        "ann's turn on the page",
        || async { shown(&page(&app, sale, Some(&ticket)).await, "room-admitted") },
    )
    .await;
    let html = page(&app, sale, Some(&ticket)).await;
    assert!(!html.contains(REFRESH), "still reloading once admitted");
    assert!(shown(&html, "buy-form") && !shown(&html, "room-waiting"));
    let left = text_of(&html, "room-admission-left").parse::<u64>();
    assert!(left.is_ok_and(|secs| secs > 50), "{html}");
    let admission = value_of(&html, "admission").to_owned();
    assert!(admission.starts_with("a1."), "{admission}");

    let (status, bought) = buy_form(&app, sale, "ann", Some(&admission)).await;
    assert_eq!(status, 200, "{bought}");
    assert!(bought.contains("You got one!"), "{bought}");
    let after = page(&app, sale, Some(&ticket)).await;
    assert!(shown(&after, "room-bought"), "{after}");
    assert!(!shown(&after, "buy-form") && !after.contains(REFRESH));
}

#[tokio::test]
async fn a_closed_room_says_so_to_a_waiting_buyer_and_to_a_newcomer() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 1, 0, fifo(1, 1)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let bob = join_by_form(&app, sale, "bob").await;
    let admission = admitted(&app, sale, &ann).await["admission"].clone();
    assert_eq!(
        buy(&app, sale, "ann", admission.as_str()).await.status(),
        202
    );

    let waiting = page(&app, sale, Some(&bob)).await;
    assert!(shown(&waiting, "room-closed"), "{waiting}");
    assert!(text_of(&waiting, "room-closed-why").contains("every unit is taken"));
    assert!(!shown(&waiting, "room-waiting") && !waiting.contains(REFRESH));
    let newcomer = page(&app, sale, None).await;
    assert!(shown(&newcomer, "room-closed"), "{newcomer}");
    assert!(!shown(&newcomer, "join-form") && !shown(&newcomer, "buy-form"));
    // The form posted anyway: a page saying why, and nobody joins.
    let late = join_form(&app, sale, "cid").await;
    assert_eq!(late.status(), 409);
    let late = late.text().await.expect("HTML");
    assert!(late.contains("The room is closed"), "{late}");
    assert_eq!(line_length(&app, sale).await, 1, "only bob waits");

    // A sale that ends closes its room for good, and says that.
    let ends_at = chrono::Utc::now() + chrono::Duration::seconds(2);
    let ending = app
        .create_sale_with(json!({
            "name": "Ending", "stock": 5, "price_cents": 100, "ends_at": ends_at,
            "waiting_room": fifo(1, 1),
        }))
        .await;
    let cid = join_by_form(&app, ending, "cid").await;
    eventually(
        std::time::Duration::from_secs(10),
        "the room to close at the end",
        || async { shown(&page(&app, ending, Some(&cid)).await, "room-closed") },
    )
    .await;
    let ended = page(&app, ending, Some(&cid)).await;
    assert_eq!(text_of(&ended, "room-closed-why"), "the sale has ended.");
}

/// The standing stream of the buyer `cookie` names.
async fn standing_stream(app: &TestApp, sale: i64, cookie: Option<&str>) -> reqwest::Response {
    let mut request = app
        .client
        .get(app.url(&format!("/sales/{sale}/queue/events")));
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.expect("GET the standing stream")
}

#[tokio::test]
async fn the_standing_stream_sends_the_apis_answer_and_says_when_the_room_closes() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 1, 0, fifo(1, 1)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let admission = admitted(&app, sale, &ann).await["admission"].clone();
    let bob = join_by_form(&app, sale, "bob").await;
    let mut stream = standing_stream(&app, sale, Some(&bob)).await;
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()[CONTENT_TYPE], "text/event-stream");
    assert!(stream.headers().contains_key("content-security-policy"));
    assert_eq!(stream.headers()["x-seckill-instance"], "test");
    let mut seen = String::new();
    // The API's status answer: bob waits first in line behind ann.
    read_until(
        &mut stream,
        &mut seen,
        "event: standing\ndata: {\"ticket\":",
    )
    .await;
    read_until(&mut stream, &mut seen, "\"position\":1,").await;
    assert!(seen.contains("\"closed\":false"), "{seen}");
    assert_eq!(
        buy(&app, sale, "ann", admission.as_str()).await.status(),
        202
    );
    read_until(&mut stream, &mut seen, "\"closed\":true").await;

    let no_ticket = standing_stream(&app, sale, None).await;
    assert_eq!(no_ticket.status(), 400);
    let body: serde_json::Value = no_ticket.json().await.expect("an error");
    assert_eq!(body["error"], "invalid_ticket");
    let plain = app.create_sale(1).await;
    assert_eq!(standing_stream(&app, plain, None).await.status(), 404);
}

#[tokio::test]
async fn while_redis_is_down_an_open_standing_stream_says_so_and_a_new_one_is_503() {
    let (mut redis, app) = spawn_app_on_private_redis().await;
    let sale = sale_with_room(&app, 1, 3_600, fifo(1, 1)).await;
    let ann = join_by_form(&app, sale, "ann").await;
    // The page finds the sale and the ticket's key in its caches; only
    // the room needs Redis.
    page(&app, sale, Some(&ann)).await;
    let mut open = standing_stream(&app, sale, Some(&ann)).await;
    let mut seen = String::new();
    read_until(&mut open, &mut seen, "event: standing").await;

    redis.kill();
    read_until(&mut open, &mut seen, ": redis unavailable").await;
    let refused = standing_stream(&app, sale, Some(&ann)).await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert!(refused.headers().contains_key("content-security-policy"));
    assert!(refused.headers().contains_key("x-request-id"));
}

/// The room's stream slots are the instance's: one more than it serves is
/// refused, as the units-left stream's are.
#[tokio::test]
async fn a_standing_stream_beyond_the_instances_cap_is_refused() {
    let app = spawn_app_with(Options {
        max_event_streams: 1,
        ..Options::default()
    })
    .await;
    let sale = sale_with_room(&app, 1, 3_600, fifo(1, 1)).await;
    let ann = join_by_form(&app, sale, "ann").await;
    let _first = app.open_event_stream(sale).await;
    let refused = standing_stream(&app, sale, Some(&ann)).await;
    assert_eq!(refused.status(), 503);
    let body: serde_json::Value = refused.json().await.expect("an error");
    assert_eq!(body["error"], "too_many_streams");
}

/// A room full of admitted buyers who have not bought: the line does not
/// move, and the page says why and until when at the latest, in words; the
/// estimate counts it, where it used to shrink while nothing moved.
#[tokio::test]
async fn a_room_full_of_admitted_buyers_says_why_the_line_waits_and_until_when() {
    let app = spawn_app().await;
    // One buyer at a time may buy; the holder's turn lasts 60 s.
    let sale = sale_with_room(&app, 5, 0, fifo(1_000, 1)).await;
    let holder = ticket(&joined(&app, sale, "holder").await);
    admitted(&app, sale, &holder).await;
    let ann = join_by_form(&app, sale, "ann").await;

    let html = page(&app, sale, Some(&ann)).await;
    assert!(shown(&html, "room-waiting"), "{html}");
    assert_eq!(text_of(&html, "room-position"), "1");
    assert!(shown(&html, "room-full"), "nothing says why: {html}");
    let note = text_of(&html, "room-full");
    assert!(
        note.starts_with("1 buyer may buy now, as many as the room lets in at once")
            && note.contains("when they buy or their turn runs out"),
        "{note}"
    );
    let latest: f64 = note
        .rsplit_once("at the latest in ")
        .and_then(|(_, rest)| rest.strip_suffix(" s."))
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("no time in {note}"));
    assert!((50.0..=60.0).contains(&latest), "{note}");
    // The wait counts the holder's turn, not only ann's place.
    let eta = text_of(&html, "room-eta");
    let eta_secs: f64 = eta
        .strip_prefix("about ")
        .and_then(|rest| rest.strip_suffix(" s"))
        .and_then(|secs| secs.parse().ok())
        .unwrap_or_else(|| panic!("not a wait in seconds: {eta}"));
    assert!(
        eta_secs >= latest,
        "{eta} though nothing moves for {latest} s"
    );

    // The API says the same.
    let ticket_value = ann.split_once('=').expect("name=value").1;
    let view = standing(&app, sale, ticket_value).await;
    assert_eq!(
        (view["active"].as_u64(), view["max_active"].as_u64()),
        (Some(1), Some(1))
    );
    let full_for = view["full_for_secs"].as_f64().expect("full for");
    assert!((50.0..=60.0).contains(&full_for), "{view}");
    assert!(view["eta_secs"].as_f64() >= Some(full_for), "{view}");

    // The holder buys: the place goes to ann, and the note with it.
    let holder_now = standing(&app, sale, &holder).await;
    assert_eq!(
        buy(&app, sale, "holder", Some(admission(&holder_now)))
            .await
            .status(),
        202
    );
    eventually(std::time::Duration::from_secs(10), "ann's turn", || async {
        shown(&page(&app, sale, Some(&ann)).await, "room-admitted")
    })
    .await;
    assert!(!shown(&page(&app, sale, Some(&ann)).await, "room-full"));
}

/// The "Join the line" form refused: a page in the site's layout, with
/// the API's status and a link back to the sale; never raw JSON.
#[tokio::test]
async fn the_join_form_answers_its_refusals_as_pages() {
    let app = spawn_app().await;
    let room = json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 1,
                      "admission_secs": 60, "max_line": 1});
    let sale = sale_with_room(&app, 5, 3_600, room).await;
    joined(&app, sale, "first").await;
    for (buyer, status) in [("ann", 409), ("", 400), (&*"x".repeat(65), 400)] {
        let refused = join_form(&app, sale, buyer).await;
        assert_eq!(refused.status(), status, "{buyer:?}");
        let kind = refused.headers()[CONTENT_TYPE]
            .to_str()
            .expect("ASCII")
            .to_owned();
        let html = refused.text().await.expect("a page");
        assert!(kind.starts_with("text/html"), "{buyer:?}: {kind} {html}");
        assert!(
            html.contains(&format!(r#"href="/sales/{sale}""#)) && html.contains("Back to the sale"),
            "{buyer:?}: {html}"
        );
        assert!(!html.trim_start().starts_with('{'), "{html}");
    }
}
