//! The live page for the projector: its stream of snapshots, what they
//! count, the one reading task a sale's viewers share, and a Redis outage.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use seckill_core::scoreboard::Scoreboard;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use crate::helpers::{Options, TestApp, spawn_app, spawn_app_on_private_redis, spawn_app_with};

/// An open `GET /api/sales/{id}/live`, read event by event.
pub(crate) struct LiveStream {
    response: reqwest::Response,
    /// Bytes received and not yet split into events.
    buffer: String,
    /// The newest snapshot seen, to say what the stream showed on failure.
    last: Value,
}

impl LiveStream {
    pub(crate) async fn open(app: &TestApp, sale: i64) -> Self {
        let response = app
            .client
            .get(app.url(&format!("/api/sales/{sale}/live")))
            .send()
            .await
            .expect("GET live");
        assert_eq!(response.status(), 200);
        assert_eq!(response.headers()[CONTENT_TYPE], "text/event-stream");
        Self {
            response,
            buffer: String::new(),
            last: Value::Null,
        }
    }

    /// Read snapshots until one satisfies `wanted`, and return it; panic
    /// after 20 s with the last one seen.
    pub(crate) async fn until(&mut self, what: &str, wanted: impl Fn(&Value) -> bool) -> Value {
        let found = tokio::time::timeout(Duration::from_secs(20), async {
            loop {
                while let Some(end) = self.buffer.find("\n\n") {
                    let event: String = self.buffer.drain(..end + 2).collect();
                    let Some(data) = event
                        .strip_prefix("event: snapshot\n")
                        .and_then(|rest| rest.strip_prefix("data: "))
                    else {
                        continue;
                    };
                    self.last = serde_json::from_str(data.trim_end()).expect("a JSON snapshot");
                    if wanted(&self.last) {
                        return self.last.clone();
                    }
                }
                let chunk = self
                    .response
                    .chunk()
                    .await
                    .expect("a chunk")
                    .expect("the stream goes on");
                self.buffer.push_str(&String::from_utf8_lossy(&chunk));
            }
        })
        .await;
        found.unwrap_or_else(|_| panic!("no snapshot showed {what}; the last said: {}", self.last))
    }
}

fn answers(board: &Value) -> &Value {
    &board["redis"]["answers"]
}

#[tokio::test]
async fn the_live_stream_counts_accepted_and_refused_purchases_and_postgres_orders() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let mut stream = LiveStream::open(&app, sale).await;
    let first = stream.until("a first snapshot", |_| true).await;
    assert_eq!(first["sale_id"], sale);
    assert_eq!(first["redis"]["status"], "ok", "{first}");
    assert_eq!(answers(&first)["accepted"], 0, "{first}");
    assert_eq!(first["redis"]["lock"], Value::Null, "{first}");

    app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 409);
    app.buy(sale, "cat").await;
    for user in ["dan", "eve"] {
        assert_eq!(app.purchase(sale, user).await.status(), 409);
    }
    let board = stream
        .until("3 accepted, 1 duplicate, 2 sold out", |board| {
            let answers = answers(board);
            answers["accepted"] == 3
                && answers["already_purchased"] == 1
                && answers["sold_out"] == 2
        })
        .await;
    assert_eq!(answers(&board)["busy"], 0, "{board}");
    assert_eq!(answers(&board)["lock_lost"], 0, "{board}");
    assert_eq!(board["redis"]["stock"], 0, "{board}");
    assert_eq!(board["redis"]["buyers"], 3, "{board}");
    // Each accepted purchase took the lock once at least (a pass may take
    // several buyers, so not exactly once each).
    assert!(board["redis"]["fence"].as_u64() >= Some(1), "{board}");
    assert_eq!(board["redis"]["fenced"], 0, "{board}");

    app.drain().await;
    let board = stream
        .until("PostgreSQL's 3 confirmed orders", |board| {
            board["postgres"]["status"] == "ok" && board["postgres"]["confirmed"] == 3
        })
        .await;
    assert_eq!(board["postgres"]["sold"], 3, "{board}");
    assert_eq!(board["postgres"]["rejected"], 0, "{board}");
    assert_eq!(board["postgres"]["cancelled"], 0, "{board}");
    assert_eq!(board["redis"]["queue"]["waiting"], 0, "{board}");
    assert_eq!(board["redis"]["queue"]["in_flight"], 0, "{board}");
}

#[tokio::test]
async fn the_live_stream_names_the_lock_holder_and_its_fence_while_the_lock_is_held() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let keys = app.keys(sale);
    let mut stream = LiveStream::open(&app, sale).await;
    // A holder in the lock's own format, `<fence>:<holder>:<nonce>`, with
    // an instance name that has colons in it, as an address does.
    let () = redis::pipe()
        .set(&keys.fence, 41)
        .cmd("SET")
        .arg(&keys.lock)
        .arg("41:10.0.0.7:8080:3f9a")
        .arg("PX")
        .arg(10_000)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET the lock");
    let board = stream
        .until("the holder", |board| board["redis"]["lock"].is_object())
        .await;
    let lock = &board["redis"]["lock"];
    assert_eq!(lock["instance"], "10.0.0.7:8080", "{board}");
    assert_eq!(lock["fence"], 41, "{board}");
    let pttl = lock["pttl_ms"].as_i64().expect("a PTTL");
    assert!(0 < pttl && pttl <= 10_000, "{board}");
    assert_eq!(board["redis"]["fence"], 41, "{board}");

    let () = redis::cmd("DEL")
        .arg(&keys.lock)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("DEL the lock");
    stream
        .until("a free lock", |board| board["redis"]["lock"].is_null())
        .await;

    // The article's lock holds a time, not an owner: held, by nobody named.
    let () = redis::cmd("SET")
        .arg(&keys.lock)
        .arg("1795000000")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET the article's lock");
    let board = stream
        .until("the article's lock", |board| {
            board["redis"]["lock"].is_object()
        })
        .await;
    let lock = &board["redis"]["lock"];
    assert_eq!(
        lock["instance"], "nobody named (the lock's value is 1795000000)",
        "{board}"
    );
    assert_eq!(lock["fence"], 0, "{board}");
    assert_eq!(lock["pttl_ms"], -1, "{board}");
}

#[tokio::test]
async fn a_hundred_viewers_of_a_sale_cost_no_more_redis_reads_than_one() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let shutdown = CancellationToken::new();
    let scoreboard = Scoreboard::new(app.store.clone(), shutdown.clone());
    let window = Duration::from_secs(2);

    let mut one = scoreboard.watch(sale);
    one.changed().await.expect("a first snapshot");
    let before = scoreboard.redis_reads();
    tokio::time::sleep(window).await;
    let reads_for_one = scoreboard.redis_reads() - before;

    let mut many: Vec<_> = (0..99).map(|_| scoreboard.watch(sale)).collect();
    for viewer in &mut many {
        viewer.changed().await.expect("every viewer gets snapshots");
    }
    assert_eq!(scoreboard.watched(), 1, "one reading task for the sale");
    let before = scoreboard.redis_reads();
    tokio::time::sleep(window).await;
    let reads_for_hundred = scoreboard.redis_reads() - before;
    // About 20 either way (one per 100 ms tick); a reader per viewer would
    // make about 2,000. The slack is for a test machine under load.
    assert!(reads_for_one >= 5, "{reads_for_one} reads in {window:?}");
    assert!(
        reads_for_hundred <= reads_for_one * 2 + 5,
        "100 viewers: {reads_for_hundred} reads; one viewer: {reads_for_one}"
    );

    // The last viewer leaving stops the reads.
    drop(one);
    drop(many);
    crate::helpers::eventually(Duration::from_secs(5), "the reading task stops", || async {
        scoreboard.watched() == 0
    })
    .await;
    let stopped = scoreboard.redis_reads();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        scoreboard.redis_reads(),
        stopped,
        "reads go on with no viewer"
    );

    // A viewer after that starts it again, and shutdown ends it.
    let mut again = scoreboard.watch(sale);
    again.changed().await.expect("snapshots again");
    shutdown.cancel();
    tokio::time::timeout(Duration::from_secs(5), async {
        while again.changed().await.is_ok() {}
    })
    .await
    .expect("the channel closes on shutdown");
}

#[tokio::test]
async fn the_live_routes_answer_404_for_an_unknown_or_malformed_sale_and_503_beyond_the_stream_limit()
 {
    let app = spawn_app_with(Options {
        max_event_streams: 1,
        ..Options::default()
    })
    .await;
    for id in ["424242", "not-a-number", "-1"] {
        let path = format!("/api/sales/{id}/live");
        let response = app.client.get(app.url(&path)).send().await.expect("GET");
        assert_eq!(response.status(), 404, "{path}");
        let body: Value = response.json().await.expect("a JSON error");
        assert_eq!(body["error"], "sale_not_found", "{path}");
        // The page, asked for by a person, answers in a page (`pages.rs`).
        let path = format!("/sales/{id}/live");
        let response = app.client.get(app.url(&path)).send().await.expect("GET");
        assert_eq!(response.status(), 404, "{path}");
    }
    let sale = app.create_sale(1).await;
    let page = app
        .client
        .get(app.url(&format!("/sales/{sale}/live")))
        .send()
        .await
        .expect("GET the page");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("HTML");
    assert!(html.contains("/static/live.js"), "{html}");
    assert!(html.contains(r#"id="accepted""#), "{html}");

    // Live streams share the instance's stream slots.
    let _open = LiveStream::open(&app, sale).await;
    let refused = app
        .client
        .get(app.url(&format!("/api/sales/{sale}/live")))
        .send()
        .await
        .expect("GET");
    assert_eq!(refused.status(), 503);
    let body: Value = refused.json().await.expect("a JSON error");
    assert_eq!(body["error"], "too_many_streams");
}

#[tokio::test]
async fn the_live_stream_outlives_a_redis_outage_and_the_tally_loses_no_counts_meanwhile() {
    let (mut redis, app) = spawn_app_on_private_redis().await;
    // Not open yet: a purchase is answered `not_started` by the instance
    // alone, without Redis, so buyers get answers while Redis is down.
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    let sale = app
        .create_sale_with(json!({
            "name": "Later", "stock": 3, "price_cents": 100, "starts_at": starts_at,
        }))
        .await;
    let mut stream = LiveStream::open(&app, sale).await;
    stream
        .until("Redis ok", |board| board["redis"]["status"] == "ok")
        .await;

    redis.kill();
    stream
        .until("Redis unavailable", |board| {
            board["redis"]["status"] == "unavailable"
        })
        .await;
    for user in ["ann", "bob", "cat"] {
        assert_eq!(app.purchase(sale, user).await.status(), 409);
    }
    // Several flushes fail meanwhile.
    tokio::time::sleep(Duration::from_millis(500)).await;

    redis.restart().await.expect("Redis comes back");
    // Empty (it kept nothing on disk): every count it holds now was kept
    // by the instance through the outage.
    stream
        .until("the three answers given during the outage", |board| {
            board["redis"]["status"] == "ok" && answers(board)["not_started"] == 3
        })
        .await;
}
