//! A sale's waiting room: joined once per buyer, admitted in order at its
//! pace and within its bound, and the only way to buy; closed at the
//! sell-out. Every refusal is a clear 4xx that writes nothing.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{TestApp, client, spawn_app};

/// A sale of `stock` units with a room, opening `opens_in` seconds from
/// now (0: at once).
pub(crate) async fn sale_with_room(app: &TestApp, stock: i64, opens_in: i64, room: Value) -> i64 {
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(opens_in);
    app.create_sale_with(json!({
        "name": "Roomed", "stock": stock, "price_cents": 100,
        "starts_at": starts_at, "waiting_room": room,
    }))
    .await
}

pub(crate) fn fifo(admit_per_sec: u32, max_active: u32) -> Value {
    json!({"mode": "fifo", "admit_per_sec": admit_per_sec, "max_active": max_active, "admission_secs": 60})
}

/// `POST /api/sales/{sale}/queue` as `buyer`, on the instance at `url`
/// (a test's app, or a `seckill serve` process).
async fn join_at(url: &str, sale: i64, buyer: &str) -> reqwest::Response {
    client()
        .post(format!("{url}/api/sales/{sale}/queue"))
        .json(&json!({ "user_id": buyer }))
        .send()
        .await
        .expect("POST queue")
}

pub(crate) async fn join(app: &TestApp, sale: i64, buyer: &str) -> reqwest::Response {
    join_at(&app.address, sale, buyer).await
}

/// `buyer` joins sale's room on the instance at `url`: their standing.
pub(crate) async fn joined_at(url: &str, sale: i64, buyer: &str) -> Value {
    let answer = join_at(url, sale, buyer).await;
    assert_eq!(answer.status(), 200, "{buyer} joins");
    answer.json().await.expect("a standing")
}

pub(crate) async fn joined(app: &TestApp, sale: i64, buyer: &str) -> Value {
    joined_at(&app.address, sale, buyer).await
}

/// The ticket of a standing.
pub(crate) fn ticket(standing: &Value) -> String {
    standing["ticket"].as_str().expect("a ticket").to_owned()
}

/// The admission of a standing.
pub(crate) fn admission(standing: &Value) -> &str {
    standing["admission"].as_str().expect("an admission")
}

/// `count` buyers named `{name}-0`, `{name}-1`... join in that order;
/// their tickets, in the same order.
async fn all_join(app: &TestApp, sale: i64, name: &str, count: usize) -> Vec<String> {
    let mut tickets = Vec::new();
    for n in 0..count {
        let first = joined(app, sale, &format!("{name}-{n}")).await;
        assert_eq!(
            first["position"],
            n + 1,
            "arrival order before the open: {first}"
        );
        tickets.push(ticket(&first));
    }
    tickets
}

/// Buyers in sale's line, read from Redis.
pub(crate) async fn line_length(app: &TestApp, sale: i64) -> u64 {
    let mut redis = app.redis_conn().await;
    redis::cmd("ZCARD")
        .arg(&app.keys(sale).room.line)
        .query_async(&mut redis)
        .await
        .expect("the line")
}

/// `GET /api/sales/{sale}/queue` with `ticket`, on the instance at `url`.
pub(crate) async fn status_at(url: &str, sale: i64, ticket: &str) -> reqwest::Response {
    client()
        .get(format!("{url}/api/sales/{sale}/queue"))
        .header("Seckill-Ticket", ticket)
        .send()
        .await
        .expect("GET queue")
}

/// Where the buyer of `ticket` stands, asked of the instance at `url`.
pub(crate) async fn standing_at(url: &str, sale: i64, ticket: &str) -> Value {
    let answer = status_at(url, sale, ticket).await;
    assert_eq!(answer.status(), 200);
    answer.json().await.expect("a standing")
}

pub(crate) async fn standing(app: &TestApp, sale: i64, ticket: &str) -> Value {
    standing_at(&app.address, sale, ticket).await
}

/// `POST /api/sales/{sale}/purchase` as `buyer`, with `admission` if
/// given, on the instance at `url`.
pub(crate) async fn buy_at(
    url: &str,
    sale: i64,
    buyer: &str,
    admission: Option<&str>,
) -> reqwest::Response {
    let mut body = json!({ "user_id": buyer });
    if let Some(admission) = admission {
        body["admission"] = json!(admission);
    }
    client()
        .post(format!("{url}/api/sales/{sale}/purchase"))
        .json(&body)
        .send()
        .await
        .expect("POST purchase")
}

pub(crate) async fn buy(
    app: &TestApp,
    sale: i64,
    buyer: &str,
    admission: Option<&str>,
) -> reqwest::Response {
    buy_at(&app.address, sale, buyer, admission).await
}

/// The refusal's `reason`, after checking it is `403 not_admitted`.
pub(crate) async fn not_admitted(answer: reqwest::Response) -> String {
    assert_eq!(answer.status(), 403);
    let body: Value = answer.json().await.expect("an error");
    assert_eq!(body["error"], "not_admitted", "{body}");
    body["reason"].as_str().expect("a reason").to_owned()
}

/// How many of `tickets`' buyers are admitted now.
async fn admitted_now(app: &TestApp, sale: i64, tickets: &[String]) -> u64 {
    let mut count = 0;
    for ticket in tickets {
        count += u64::from(standing(app, sale, ticket).await["admitted"] == true);
    }
    count
}

/// The buyer's standing on the instance at `url` once the room has
/// admitted them (within `limit`).
pub(crate) async fn admitted_at(url: &str, sale: i64, ticket: &str, limit: Duration) -> Value {
    let deadline = std::time::Instant::now() + limit;
    loop {
        let now = standing_at(url, sale, ticket).await;
        if now["admitted"] == true {
            return now;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never admitted: {now}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The buyer's standing once the room has admitted them (within 10 s).
pub(crate) async fn admitted(app: &TestApp, sale: i64, ticket: &str) -> Value {
    admitted_at(&app.address, sale, ticket, Duration::from_secs(10)).await
}

#[tokio::test]
async fn buyers_are_admitted_in_arrival_order_and_only_an_admission_buys_once() {
    let app = spawn_app().await;
    // Opens in 2 s: everyone joins before the room admits anybody.
    let sale = sale_with_room(&app, 10, 2, fifo(2, 1)).await;
    let mut tickets = Vec::new();
    for (n, buyer) in ["ann", "bob", "cid"].iter().enumerate() {
        let first = joined(&app, sale, buyer).await;
        assert_eq!(first["position"], n + 1, "{first}");
        assert_eq!(first["ahead"], n, "{first}");
        assert_eq!(first["admitted"], false);
        assert_eq!(first["closed"], false);
        assert!(first["eta_secs"].as_f64() > Some(0.0), "{first}");
        // Joining again (a refresh, a second tab) keeps the place.
        let again = joined(&app, sale, buyer).await;
        assert_eq!(again["position"], n + 1, "{again}");
        tickets.push(ticket(&first));
    }
    // Nobody may buy without an admission, not even once the sale opens.
    assert_eq!(
        not_admitted(buy(&app, sale, "ann", None).await).await,
        "missing"
    );

    // ann first; max_active 1 keeps bob waiting while ann has not bought.
    let ann = admitted(&app, sale, &tickets[0]).await;
    let admission = admission(&ann);
    assert!(
        ann["admission_expires_in_secs"].as_f64() > Some(50.0),
        "{ann}"
    );
    tokio::time::sleep(Duration::from_millis(600)).await;
    let bob = standing(&app, sale, &tickets[1]).await;
    assert_eq!(
        (bob["admitted"].clone(), bob["position"].clone()),
        (json!(false), json!(1)),
        "{bob}"
    );

    // ann's admission is ann's, and buys once.
    assert_eq!(
        not_admitted(buy(&app, sale, "bob", Some(admission)).await).await,
        "other_buyer"
    );
    assert_eq!(
        not_admitted(buy(&app, sale, "ann", Some("a1.forged")).await).await,
        "forged"
    );
    let bought = buy(&app, sale, "ann", Some(admission)).await;
    assert_eq!(bought.status(), 202);
    let order: Value = bought.json().await.expect("an order");
    // Again with the same admission (her answer lost on its way): no
    // second unit, and the answer names the order she holds.
    let again = buy(&app, sale, "ann", Some(admission)).await;
    assert_eq!(again.status(), 409);
    let again: Value = again.json().await.expect("an error");
    assert_eq!(
        (&again["error"], &again["order_id"]),
        (&json!("already_purchased"), &order["order_id"]),
        "{again}"
    );
    assert_eq!(standing(&app, sale, &tickets[0]).await["bought"], true);
    // Her place among the active goes to bob, then cid waits behind him.
    let bob = admitted(&app, sale, &tickets[1]).await;
    assert_eq!(bob["position"], Value::Null);
    let cid = standing(&app, sale, &tickets[2]).await;
    assert_eq!(cid["position"], 1, "{cid}");
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}

#[tokio::test]
async fn the_room_admits_no_more_than_max_active_at_once() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 100, 1, fifo(1_000, 3)).await;
    let tickets = all_join(&app, sale, "buyer", 8).await;
    // Once open: three admitted, however often anyone asks.
    admitted(&app, sale, &tickets[2]).await;
    for _ in 0..5 {
        assert_eq!(admitted_now(&app, sale, &tickets).await, 3);
    }
    // Each purchase frees a place for the next in line.
    let admission = standing(&app, sale, &tickets[0]).await["admission"].clone();
    assert_eq!(
        buy(&app, sale, "buyer-0", admission.as_str())
            .await
            .status(),
        202
    );
    admitted(&app, sale, &tickets[3]).await;
    assert_eq!(admitted_now(&app, sale, &tickets).await, 3);
    assert_eq!(standing(&app, sale, &tickets[4]).await["position"], 1);
}

#[tokio::test]
async fn the_room_admits_no_faster_than_its_rate() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 100, 1, fifo(2, 100)).await;
    let tickets = all_join(&app, sale, "buyer", 12).await;
    let opens: Value = app.get_json(&format!("/api/sales/{sale}")).await;
    let opens_ms =
        chrono::DateTime::parse_from_rfc3339(opens["starts_at"].as_str().expect("a date"))
            .expect("a date")
            .timestamp_millis();
    admitted(&app, sale, &tickets[0]).await;
    // Everyone asks, again and again, for two seconds.
    let asking = std::time::Instant::now();
    while asking.elapsed() < Duration::from_secs(2) {
        for ticket in &tickets {
            standing(&app, sale, ticket).await;
        }
    }
    let mut redis = app.redis_conn().await;
    let total: i64 = redis::cmd("HGET")
        .arg(&app.keys(sale).room.state)
        .arg("admitted")
        .query_async(&mut redis)
        .await
        .expect("the room's state");
    let now_ms = chrono::Utc::now().timestamp_millis();
    // Two a second since the open, and a second's worth at most at once:
    // all twelve at once would be the room not pacing at all.
    let allowed = 2 * (now_ms - opens_ms) / 1000 + 2;
    assert!(
        (4..=allowed).contains(&total),
        "{total} admitted, {allowed} allowed"
    );
    assert!(total < 12, "everyone admitted at once");
}

#[tokio::test]
async fn the_room_closes_at_the_sell_out_and_tells_whoever_waits() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 1, 1, fifo(1, 1)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let bob = ticket(&joined(&app, sale, "bob").await);
    let admission = admitted(&app, sale, &ann).await["admission"].clone();
    assert_eq!(
        buy(&app, sale, "ann", admission.as_str()).await.status(),
        202
    );
    let waiting = standing(&app, sale, &bob).await;
    assert_eq!(waiting["closed"], true, "{waiting}");
    assert_eq!(waiting["admitted"], false, "{waiting}");
    // A join after the close is refused, and nobody joins.
    let late = join(&app, sale, "cid").await;
    assert_eq!(late.status(), 409);
    let body: Value = late.json().await.expect("an error");
    assert_eq!(body["error"], "room_closed");
    assert_eq!(line_length(&app, sale).await, 1, "only bob waits");
}

#[tokio::test]
async fn a_lottery_draws_the_order_of_those_who_came_before_the_open() {
    let app = spawn_app().await;
    let room =
        json!({"mode": "lottery", "admit_per_sec": 1, "max_active": 1, "admission_secs": 60});
    let sale = sale_with_room(&app, 10, 2, room).await;
    let mut tickets = Vec::new();
    for n in 0..12 {
        tickets.push(ticket(&joined(&app, sale, &format!("early-{n}")).await));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    // After the open: every early buyer has a drawn place (the admitted
    // first), 1 to 12 once each; and the draw is not the arrival order.
    let mut places = Vec::new();
    for ticket in &tickets {
        let now = standing(&app, sale, ticket).await;
        places.push(now["position"].as_u64().unwrap_or(0));
    }
    let admitted = places.iter().filter(|p| **p == 0).count() as u64;
    let mut sorted: Vec<u64> = places.iter().copied().filter(|p| *p > 0).collect();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (1..=12 - admitted).collect::<Vec<u64>>(),
        "{places:?}"
    );
    // In arrival order, the first `admitted` would be admitted (0) and
    // the rest at places 1, 2, ... in turn.
    let arrival: Vec<u64> = (0..12u64)
        .map(|n| if n < admitted { 0 } else { n - admitted + 1 })
        .collect();
    assert_ne!(places, arrival, "drawn in arrival order");
    // A latecomer queues behind every early one.
    let late = joined(&app, sale, "late").await;
    let before_late = late["ahead"].as_u64().expect("ahead");
    assert_eq!(
        before_late,
        12 - admitted_now(&app, sale, &tickets).await,
        "{late}"
    );
}

#[tokio::test]
async fn bad_room_input_is_a_clear_4xx_and_changes_nothing() {
    let app = spawn_app().await;
    for room in [
        json!({"mode": "fifo", "admit_per_sec": 0, "max_active": 1, "admission_secs": 60}),
        json!({"mode": "fifo", "admit_per_sec": 1_000_000, "max_active": 1, "admission_secs": 60}),
        json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 0, "admission_secs": 60}),
        json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 1, "admission_secs": 1}),
        json!({"mode": "random", "admit_per_sec": 1, "max_active": 1, "admission_secs": 60}),
        json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 1}),
    ] {
        let answer = app
            .post_sale(&json!({"name": "R", "stock": 1, "price_cents": 1, "waiting_room": room}))
            .send()
            .await
            .expect("POST /api/sales");
        assert_eq!(answer.status(), 400, "{room}");
    }
    assert_eq!(app.sale_count().await, 0);

    let plain = app.create_sale(5).await;
    let answer = join(&app, plain, "ann").await;
    assert_eq!(answer.status(), 404);
    let body: Value = answer.json().await.expect("an error");
    assert_eq!(body["error"], "no_waiting_room");
    assert_eq!(join(&app, 9_999, "ann").await.status(), 404);

    let sale = sale_with_room(&app, 5, 0, fifo(1, 1)).await;
    let other = sale_with_room(&app, 5, 0, fifo(1, 1)).await;
    let others = ticket(&joined(&app, other, "ann").await);
    for (ticket, reason) in [
        ("", "forged"),
        ("t1.garbage", "forged"),
        (others.as_str(), "other_sale"),
    ] {
        let answer = status_at(&app.address, sale, ticket).await;
        assert_eq!(answer.status(), 400, "{ticket}");
        let body: Value = answer.json().await.expect("an error");
        assert_eq!(
            (body["error"].as_str(), body["reason"].as_str()),
            (Some("invalid_ticket"), Some(reason))
        );
    }
    let missing = app
        .client
        .get(app.url(&format!("/api/sales/{sale}/queue")))
        .send()
        .await
        .expect("GET queue");
    assert_eq!(missing.status(), 400);
    // Nothing of sale's room was written by any of it.
    assert_eq!(line_length(&app, sale).await, 0);
}

/// Sale's line as Redis holds it: each buyer and their place, in order.
async fn line_places(app: &TestApp, sale: i64) -> Vec<(String, u64)> {
    let mut redis = app.redis_conn().await;
    redis::cmd("ZRANGE")
        .arg(&app.keys(sale).room.line)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut redis)
        .await
        .expect("the line")
}

#[tokio::test]
async fn a_lottery_draws_each_place_at_the_join_so_the_open_passes_over_nobody() {
    let app = spawn_app().await;
    let room =
        json!({"mode": "lottery", "admit_per_sec": 1, "max_active": 1, "admission_secs": 60});
    let sale = sale_with_room(&app, 10, 2, room).await;
    let arrival: Vec<String> = (0..12).map(|n| format!("early-{n}")).collect();
    for buyer in &arrival {
        joined(&app, sale, buyer).await;
    }
    // Drawn as they joined: before the open the line is already in the
    // draw's order, not the arrival's.
    let before = line_places(&app, sale).await;
    let order: Vec<&str> = before.iter().map(|(who, _)| who.as_str()).collect();
    assert_eq!(order.len(), 12);
    assert_ne!(
        order, arrival,
        "the line is in arrival order before the open"
    );
    // After the open, every early buyer still in line keeps the place
    // they drew: the open rewrote nothing (a draw at the open would be
    // one script over the whole line).
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let late = joined(&app, sale, "late").await;
    let after = line_places(&app, sale).await;
    for (who, place) in &after {
        if who.starts_with("early") {
            let drawn = before.iter().find(|(b, _)| b == who).expect("drawn");
            assert_eq!(*place, drawn.1, "{who}'s place changed at the open");
        }
    }
    // A latecomer queues behind every drawn buyer, by arrival.
    let number = late["number"].as_u64().expect("a number");
    assert!(number > seckill_core::waiting_room::LOTTERY_LATE, "{late}");
    assert_eq!(after.last().map(|(who, _)| who.as_str()), Some("late"));
}

/// An app whose rooms drop a buyer not seen for `abandon`.
async fn app_abandoning_after(abandon: Duration) -> TestApp {
    crate::helpers::spawn_app_with(crate::helpers::Options {
        room_abandon: abandon,
        ..Default::default()
    })
    .await
}

/// Buyers `sale`'s room dropped as gone.
async fn abandoned(app: &TestApp, sale: i64) -> i64 {
    let mut redis = app.redis_conn().await;
    redis::cmd("HGET")
        .arg(&app.keys(sale).room.state)
        .arg("abandoned")
        .query_async(&mut redis)
        .await
        .expect("the room's state")
}

#[tokio::test]
async fn a_visit_drops_at_most_200_gone_buyers_and_a_dropped_one_rejoins_at_the_back() {
    let app = app_abandoning_after(Duration::from_secs(1)).await;
    let sale = sale_with_room(&app, 10, 4, fifo(1_000, 1)).await;
    // 250 join before the open and never ask again.
    for n in 0..250 {
        joined(&app, sale, &format!("gone-{n}")).await;
    }
    let opens = tokio::time::Instant::now() + Duration::from_secs(5);
    tokio::time::sleep_until(opens).await;
    // The first visit after the open: the head is gone, and so are the
    // next 199; that many and no more are dropped in this one visit.
    let late = joined(&app, sale, "late").await;
    let abandoned = abandoned(&app, sale).await;
    assert_eq!(abandoned, 200, "{late}");
    assert_eq!(line_length(&app, sale).await, 51);
    // A dropped buyer who asks again joins at the back, behind late.
    let again = joined(&app, sale, "gone-0").await;
    assert!(
        again["number"].as_u64() > late["number"].as_u64(),
        "{again} {late}"
    );
    let waiting = again["waiting"].as_u64().expect("waiting");
    assert_eq!(again["ahead"].as_u64(), Some(waiting - 1), "{again}");
}

/// A visit that admits several takes the line's head a chunk at a time:
/// the gone among them dropped, the others admitted in line order, and
/// no more admitted than the room has places for.
#[tokio::test]
async fn the_gone_in_the_head_are_dropped_and_the_rest_admitted_in_order_up_to_the_places() {
    let app = app_abandoning_after(Duration::from_secs(2)).await;
    let sale = sale_with_room(&app, 10, 4, fifo(10_000, 3)).await;
    let opens = tokio::time::Instant::now() + Duration::from_secs(4);
    let mut tickets = Vec::new();
    for buyer in ["gone-0", "here-1", "gone-2", "here-3", "here-4", "here-5"] {
        tickets.push((buyer, ticket(&joined(&app, sale, buyer).await)));
    }
    // The present ask again a moment before the open; the gone never do.
    tokio::time::sleep_until(opens - Duration::from_millis(1_500)).await;
    for (buyer, ticket) in &tickets {
        if buyer.starts_with("here") {
            standing(&app, sale, ticket).await;
        }
    }
    tokio::time::sleep_until(opens + Duration::from_millis(300)).await;
    joined(&app, sale, "late").await;
    let mut redis = app.redis_conn().await;
    let mut admitted: Vec<String> = redis::cmd("ZRANGE")
        .arg(&app.keys(sale).room.admitted)
        .arg(0)
        .arg(-1)
        .query_async(&mut redis)
        .await
        .expect("the admitted");
    admitted.sort();
    assert_eq!(admitted, ["here-1", "here-3", "here-4"]);
    let line: Vec<String> = line_places(&app, sale)
        .await
        .into_iter()
        .map(|(who, _)| who)
        .collect();
    assert_eq!(line, ["here-5", "late"]);
    let abandoned = abandoned(&app, sale).await;
    assert_eq!(abandoned, 2);
}

/// Redis loses `sale`'s room (a flush, a failover that lost it).
pub(crate) async fn lose_the_room(app: &TestApp, sale: i64) {
    let mut redis = app.redis_conn().await;
    for key in app.keys(sale).room.all() {
        let () = redis::cmd("DEL")
            .arg(key)
            .query_async(&mut redis)
            .await
            .expect("DEL");
    }
}

/// A buyer far back in line is answered from the instance's look, by
/// their ticket's number. Redis losing their place but not the line (a
/// failover under `local` loses the line's tail and keeps its
/// generation): the next look, which notes them seen, finds them out of
/// line, and they are told at once that they are not in it, not
/// "waiting" by their number until the head comes near.
#[tokio::test]
async fn a_far_back_ticket_whose_place_redis_lost_is_told_so_at_the_next_look() {
    let app = spawn_app().await;
    let (sale, ann) = ann_eleventh_in_line(&app).await;
    let before = standing(&app, sale, &ann).await;
    assert_eq!(before["position"], 11, "{before}");
    let keys = app.keys(sale);
    let mut redis = app.redis_conn().await;
    let () = redis::pipe()
        .zrem(&keys.room.line, "ann")
        .ignore()
        .hdel(&keys.room.seen, "ann")
        .ignore()
        .query_async(&mut redis)
        .await
        .expect("ann's place lost");
    // Past the look's freshness: the next question looks again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_not_in_line(&standing(&app, sale, &ann).await, 10);
}

/// A room that opens in a minute and admits one a second, ten buyers in
/// line, then ann: the sale, and ann's ticket (number 11, far back for a
/// look to answer by number alone).
async fn ann_eleventh_in_line(app: &TestApp) -> (i64, String) {
    let sale = sale_with_room(app, 10, 60, fifo(1, 1)).await;
    for n in 0..10 {
        joined(app, sale, &format!("ahead-{n}")).await;
    }
    (sale, ticket(&joined(app, sale, "ann").await))
}

/// A standing that says its buyer is not in the room, which has
/// `waiting` in line.
fn assert_not_in_line(now: &Value, waiting: u64) {
    assert_eq!(now["position"], Value::Null, "{now}");
    assert_eq!(now["admitted"], false, "{now}");
    assert_eq!(now["waiting"], waiting, "{now}");
}

/// A ticket of a line Redis lost is no place in the line begun since:
/// ann's number (11) would be far back in the new one, which the look
/// answers by number alone; its generation is not the new line's, so
/// Redis is asked, and she is not in it.
#[tokio::test]
async fn a_ticket_of_a_room_redis_lost_answers_position_null() {
    let app = spawn_app().await;
    let (sale, ann) = ann_eleventh_in_line(&app).await;
    lose_the_room(&app, sale).await;
    // A new line, with a generation of its own (milliseconds apart).
    tokio::time::sleep(Duration::from_millis(5)).await;
    for n in 0..3 {
        joined(&app, sale, &format!("after-{n}")).await;
    }
    assert_not_in_line(&standing(&app, sale, &ann).await, 3);
}
