//! A sale page's event stream sends a snapshot of the units left every
//! [`seckill_web::SNAPSHOT_EVERY`] (5 s), so a page that missed a change
//! (pub/sub drops the messages published while a subscription is down)
//! catches up by itself. Changes pushed as they happen are in
//! `pages_events.rs`.

use std::time::{Duration, Instant};

use seckill_web::SNAPSHOT_EVERY;

use crate::helpers::{repo_root, spawn_app};

/// What a loaded machine may add to the period before the snapshot is
/// read (a tick that waits for a busy thread, a Redis read behind other
/// tests' commands). A period longer than the promise by more than this is
/// a period that broke the promise, not a slow machine.
const SLACK: Duration = Duration::from_secs(4);

/// The next whole event of `stream` (up to its blank line), and when it
/// came; `buffer` keeps what was read past it.
async fn next_event(stream: &mut reqwest::Response, buffer: &mut String) -> (String, Instant) {
    loop {
        if let Some(end) = buffer.find("\n\n") {
            let event: String = buffer.drain(..end + 2).collect();
            return (event, Instant::now());
        }
        let chunk = stream.chunk().await.expect("a chunk").expect("more");
        buffer.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// The next `event: stock` of `stream`, and when it came.
async fn next_stock(stream: &mut reqwest::Response, buffer: &mut String) -> (String, Instant) {
    loop {
        let (event, at) = next_event(stream, buffer).await;
        if let Some(data) = event.strip_prefix("event: stock\ndata: ") {
            return (data.trim_end().to_owned(), at);
        }
    }
}

#[tokio::test]
async fn a_page_that_missed_a_change_catches_up_with_the_next_snapshot() {
    // The period the code uses is the one the page promises readers.
    let page = std::fs::read_to_string(repo_root().join("docs/storefront.md")).expect("the page");
    let promise = format!("and every {} s", SNAPSHOT_EVERY.as_secs());
    assert!(
        page.contains(&promise),
        "docs/storefront.md does not say the events stream sends a snapshot {promise}"
    );

    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    let mut stream = app
        .client
        .get(app.url(&format!("/api/sales/{sale}/events")))
        .send()
        .await
        .expect("GET events");
    assert_eq!(stream.status(), 200);
    let mut buffer = String::new();
    let (opening, opened) = next_stock(&mut stream, &mut buffer).await;
    assert_eq!(opening, r#"{"stock_left":5}"#);

    // Two units go, and the message that says so is lost: the figure
    // changes in Redis and nothing is published. Only a snapshot can
    // bring it to the page.
    let () = redis::cmd("SET")
        .arg(&app.keys(sale).stock)
        .arg(3)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET");
    // The very next snapshot brings it (it is read afresh: the opening
    // read is shared for a second only). Waited for by event, not by
    // clock; the limit only keeps a stream that sends nothing from
    // hanging the test.
    let (caught_up, at) =
        tokio::time::timeout(3 * SNAPSHOT_EVERY, next_stock(&mut stream, &mut buffer))
            .await
            .unwrap_or_else(|_| panic!("no snapshot at all within {:?}", 3 * SNAPSHOT_EVERY));
    assert_eq!(
        caught_up, r#"{"stock_left":3}"#,
        "the first snapshot after the opening one did not bring the units left"
    );
    // And it came one period after the opening one: not early (it is the
    // periodic one, not a change), not a period or more late.
    let period = at - opened;
    assert!(
        period >= SNAPSHOT_EVERY - Duration::from_secs(1) && period <= SNAPSHOT_EVERY + SLACK,
        "the next snapshot came {period:?} after the opening one; the promise is every {SNAPSHOT_EVERY:?}"
    );
}
