//! A sale page's live event stream without a browser: the units left as
//! buyers buy, quick changes sent as one, and the Redis pub/sub that
//! carries a purchase to the pages and to the lock's waiters.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use seckill_core::events::SaleEvents;
use tokio_util::sync::CancellationToken;

use crate::helpers::spawn_app;

/// Read the event stream until `want` appears in it.
pub(crate) async fn read_until(stream: &mut reqwest::Response, seen: &mut String, want: &str) {
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        while !seen.contains(want) {
            let chunk = stream
                .chunk()
                .await
                .expect("a chunk")
                .expect("the stream goes on");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(found.is_ok(), "{want} never came; the stream said: {seen}");
}

#[tokio::test]
async fn the_event_stream_sends_the_units_left_as_buyers_buy() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    let mut stream = app
        .client
        .get(app.url(&format!("/api/sales/{sale}/events")))
        .send()
        .await
        .expect("GET events");
    assert_eq!(stream.status(), 200);
    assert_eq!(stream.headers()[CONTENT_TYPE], "text/event-stream");
    let mut seen = String::new();
    read_until(
        &mut stream,
        &mut seen,
        "event: stock\ndata: {\"stock_left\":5}",
    )
    .await;
    // ann buys, and Redis is put back to 5 at once: the snapshots the
    // stream reads every few seconds say 5 from here on, so only the
    // change the purchase pushed can bring 4 to the page. (A snapshot
    // read in the moment between the two would bring it too: rare, and it
    // could only let the test pass, never fail.)
    app.buy(sale, "ann").await;
    let () = redis::cmd("SET")
        .arg(app.keys(sale).stock)
        .arg(5)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET");
    read_until(&mut stream, &mut seen, "data: {\"stock_left\":4}").await;

    let missing = app
        .client
        .get(app.url("/api/sales/424242/events"))
        .send()
        .await
        .expect("GET");
    assert_eq!(missing.status(), 404);
}

/// Ten thousand open pages of a sale must not cost a burst's buyers a
/// hundred thousand writes: changes that come in quick succession reach a
/// page as one event, the latest figure, a pace (a second) later.
#[tokio::test]
async fn changes_in_quick_succession_reach_a_page_as_one_event_with_the_latest_figure() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let mut stream = app.open_event_stream(sale).await;
    // The figure it shows (10), until the instance's pub/sub connection (made
    // in the background) hears it; then five units sold within a
    // millisecond, as the purchase scripts of a burst publish them (one
    // pipeline: back to back on the channel). Redis still says 10, so the
    // snapshots the stream reads say 10: only the pushed changes can
    // bring anything else to the page.
    let keys = seckill_core::keys::SaleKeys::new(&app.scratch.prefix, sale);
    let channel = keys.events;
    let mut redis = app.redis.get().await.expect("Redis");
    let subscribed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            let heard_by: i64 = redis::cmd("PUBLISH")
                .arg(&channel)
                .arg(10)
                .query_async(&mut redis)
                .await
                .expect("PUBLISH");
            if heard_by > 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(subscribed.is_ok(), "the instance never subscribed");
    let mut publish = redis::pipe();
    for left in (5..10).rev() {
        publish.cmd("PUBLISH").arg(&channel).arg(left).ignore();
    }
    let () = publish.query_async(&mut redis).await.expect("PUBLISH");
    // What the page hears until a pace after the change arrived.
    let mut heard = String::new();
    read_until(&mut stream, &mut heard, "data: {\"stock_left\":5}").await;
    let _ = tokio::time::timeout(seckill_web::PACE, async {
        while let Ok(Some(chunk)) = stream.chunk().await {
            heard.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    // The latest figure only (sent change by change: 9, 8, 7, 6, 5), and
    // once. The snapshots' 10 (and the subscription probe's) aside.
    let changes: Vec<&str> = heard
        .split("\n\n")
        .filter(|event| event.starts_with("event: stock"))
        .filter(|event| !event.ends_with("{\"stock_left\":10}"))
        .collect();
    assert_eq!(
        changes,
        ["event: stock\ndata: {\"stock_left\":5}"],
        "{heard}"
    );
}

/// A purchase's script publishes the new units left and announces the
/// release of the sale's lock; the instance's one listener turns the first
/// into a stock change for the pages and the second into a wake-up of the
/// waiters for that sale's lock (`lock.rs`), who would otherwise find out
/// at their next back-off attempt. The fan-out on its own, without the
/// periodic snapshots of the stream: only pub/sub can deliver these.
#[tokio::test]
async fn a_purchase_reaches_the_pages_and_the_lock_waiters_through_redis_pub_sub() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let shutdown = CancellationToken::new();
    let (events, task) =
        SaleEvents::start(&app.scratch.redis, &app.scratch.prefix, shutdown.clone())
            .expect("start");
    let mut changes = events.subscribe();
    // The subscription is made in the background: until it is, a waiter
    // is given nothing to listen on (and asks for no place in line).
    let releases = events.lock_releases();
    // (This test's runtime has one thread: the listener has not run yet.)
    assert!(
        releases.of(sale).is_none(),
        "a release heard before subscribing"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while releases.of(sale).is_none() {
        assert!(tokio::time::Instant::now() < deadline, "never subscribed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (released, elsewhere) = (
        releases.of(sale).expect("subscribed"),
        releases.of(sale + 1).expect("subscribed"),
    );
    for user in ["ann", "bob", "cat"] {
        let woken = released.notified();
        let woken_elsewhere = elsewhere.notified();
        tokio::pin!(woken, woken_elsewhere);
        woken.as_mut().enable();
        woken_elsewhere.as_mut().enable();
        app.buy(sale, user).await;
        let Ok(Ok(change)) = tokio::time::timeout(Duration::from_secs(5), changes.recv()).await
        else {
            continue;
        };
        assert_eq!(change.sale_id, sale);
        assert!(change.stock_left < 3, "{change:?}");
        // Published after the change, by the same script.
        tokio::time::timeout(Duration::from_secs(5), woken)
            .await
            .expect("the sale lock's waiters were woken");
        assert!(
            tokio::time::timeout(Duration::from_millis(100), woken_elsewhere)
                .await
                .is_err(),
            "another sale's waiters were woken"
        );
        shutdown.cancel();
        task.await.expect("the listener stops on shutdown");
        return;
    }
    panic!("no stock change arrived over pub/sub");
}
