//! Two promises of `docs/the-article.md`'s table that its other tests do
//! not reach: a lock waiter stops waiting as soon as its `give_up` check
//! says so (the purchase path asks whether the sale sold out meanwhile),
//! and an id in the dead-letter set keeps its first job when it is
//! enqueued again.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use seckill_core::lock::Acquire;
use seckill_core::queue::Attempt;

use crate::helpers::{Scratch, eventually};
use crate::lock::{lock, redis, take_free};
use crate::queue::{enqueue_now, setup, stats};

/// Who is next in line for the test's lock (`keys::lock_line`), if anybody.
async fn next_in_line(scratch: &Scratch) -> Option<String> {
    let line = seckill_core::keys::lock_line(&format!("{}:lock", scratch.prefix));
    redis::cmd("GET")
        .arg(line)
        .query_async(&mut redis(scratch).await)
        .await
        .expect("GET")
}

/// A waiter in line for a held lock, with a minute to wait, is told half
/// way through that waiting is pointless: it stops at once (well within
/// its minute, with the lock still held), and gives its place back.
#[tokio::test]
async fn a_waiter_stops_waiting_as_soon_as_its_give_up_check_says_so() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(60));
    let held = take_free(&lock, &mut conn).await;
    let sold_out = Arc::new(AtomicBool::new(false));
    let waiter = tokio::spawn({
        let (lock, mut conn) = (lock.clone(), redis(&scratch).await);
        let sold_out = Arc::clone(&sold_out);
        async move {
            let listening = tokio::sync::Notify::new();
            lock.acquire(&mut conn, Duration::from_secs(60), Some(&listening), || {
                sold_out.load(Ordering::SeqCst)
            })
            .await
            .expect("acquire")
        }
    });
    // In line: it has asked once whether to go on (before the attempt
    // that took the place), and waits.
    eventually(
        Duration::from_secs(10),
        "the waiter to wait in line",
        || async { next_in_line(&scratch).await.is_some() },
    )
    .await;

    sold_out.store(true, Ordering::SeqCst);
    let gave_up = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter kept waiting after its check said to stop")
        .expect("the waiter's task");
    assert!(matches!(gave_up, Acquire::GaveUp), "got {gave_up:?}");
    assert!(
        held.is_held(&mut conn).await.expect("GET"),
        "the lock was let go"
    );
    assert_eq!(next_in_line(&scratch).await, None, "its place was kept");
}

/// A job whose id is dead-lettered stays the one job of that id: enqueued
/// again, the id is not added, the dead job keeps its payload, and a
/// re-drive brings back the first job.
#[tokio::test]
async fn an_id_in_the_dead_letter_set_keeps_its_first_job() {
    let (_scratch, queue, mut conn) = setup().await;
    assert_eq!(enqueue_now(&queue, &mut conn, &[("a", "first")]).await, 1);
    // One attempt allowed: a failure dead-letters it.
    let lease = Duration::from_secs(30);
    let reserved = queue
        .reserve(&mut conn, 1, lease, 1)
        .await
        .expect("reserve");
    queue
        .retry(
            &mut conn,
            &reserved.jobs,
            Duration::ZERO,
            Attempt::Failed,
            1,
        )
        .await
        .expect("retry");
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 1));

    assert_eq!(enqueue_now(&queue, &mut conn, &[("a", "second")]).await, 0);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 1));
    let payload = queue.payload(&mut conn, "a").await.expect("payload");
    assert_eq!(payload.as_deref(), Some("first"));

    assert_eq!(
        queue
            .redrive(&mut conn, Duration::ZERO)
            .await
            .expect("redrive"),
        1
    );
    let again = queue
        .reserve(&mut conn, 10, lease, 1)
        .await
        .expect("reserve");
    let jobs: Vec<(&str, &str)> = again
        .jobs
        .iter()
        .map(|job| (job.id.as_str(), job.payload.as_str()))
        .collect();
    assert_eq!(jobs, [("a", "first")]);
}
