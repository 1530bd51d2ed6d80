//! A sale page's event stream sends a snapshot of the units left every
//! [`seckill_web::SNAPSHOT_EVERY`] (5 s), so a page that missed a change
//! (pub/sub drops the messages published while a subscription is down)
//! catches up by itself. Changes pushed as they happen are in
//! `pages_events.rs`.

use std::time::Duration;

use crate::helpers::spawn_app;

#[tokio::test]
async fn a_page_that_missed_a_change_catches_up_with_the_next_snapshot() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    let mut stream = app.open_event_stream(sale).await;

    // Two units go, and the message that says so is lost: the figure
    // changes in Redis and nothing is published. Only a snapshot can
    // bring it to the page.
    let () = redis::cmd("SET")
        .arg(&app.keys(sale).stock)
        .arg(3)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET");
    // The promised period (`docs/storefront.md`: every 5 s), plus the
    // second a snapshot is shared for, plus slack for a loaded machine;
    // without snapshots the page would wait for ever.
    let limit = Duration::from_secs(3 * 5);
    let mut seen = String::new();
    let caught_up = tokio::time::timeout(limit, async {
        while !seen.contains("data: {\"stock_left\":3}") {
            let chunk = stream.chunk().await.expect("a chunk").expect("more");
            seen.push_str(&String::from_utf8_lossy(&chunk));
        }
    })
    .await;
    assert!(
        caught_up.is_ok(),
        "no snapshot brought the page the units left within {limit:?}; it heard: {seen}"
    );
}
