//! `Queue::dequeue`, taking a waiting job back: only while its due time is
//! the one the caller read, and never a job in flight or dead.

use std::time::Duration;

use seckill_core::queue::Attempt;

use crate::queue::{LEASE, MAX_ATTEMPTS, enqueue_now, setup, stats};

#[tokio::test]
async fn dequeue_removes_a_waiting_job_whose_due_time_still_matches() {
    let (_scratch, queue, mut conn) = setup().await;
    queue
        .enqueue(&mut conn, &[("job", "p")], Duration::from_secs(60))
        .await
        .expect("enqueue");
    // Not due yet, so top does not show it; due_at reads its score anyway.
    assert!(queue.top(&mut conn, 10).await.expect("top").is_empty());
    let due_ms = queue
        .due_at(&mut conn, "job")
        .await
        .expect("ZSCORE")
        .expect("the job is waiting");

    assert!(
        queue
            .dequeue(&mut conn, "job", due_ms)
            .await
            .expect("dequeue")
    );
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
    assert_eq!(
        queue.payload(&mut conn, "job").await.expect("payload"),
        None
    );
    assert_eq!(queue.due_at(&mut conn, "job").await.expect("ZSCORE"), None);
    // Nothing of the job is left behind to make enqueue skip its id.
    assert_eq!(enqueue_now(&queue, &mut conn, &[("job", "again")]).await, 1);
}

#[tokio::test]
async fn dequeue_refuses_a_job_whose_due_time_changed_since_it_was_read() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("job", "p")]).await;
    let seen = queue.top(&mut conn, 1).await.expect("top");
    let (id, seen_ms) = seen.first().cloned().expect("the job is due");
    // Meanwhile a worker takes the job, fails, and puts it back for later.
    let reserved = queue
        .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    queue
        .retry(
            &mut conn,
            &reserved.jobs,
            Duration::from_secs(60),
            Attempt::Failed,
            MAX_ATTEMPTS,
        )
        .await
        .expect("retry");

    assert!(
        !queue
            .dequeue(&mut conn, &id, seen_ms)
            .await
            .expect("dequeue"),
        "a decision about the job as it was removed the job as it is"
    );
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(1, 0, 0));
    assert_eq!(
        queue
            .payload(&mut conn, &id)
            .await
            .expect("payload")
            .as_deref(),
        Some("p")
    );
    let now_ms = queue
        .due_at(&mut conn, &id)
        .await
        .expect("ZSCORE")
        .expect("still waiting");
    assert!(now_ms >= seen_ms + 60_000, "{now_ms} after {seen_ms}");
    assert!(
        queue
            .dequeue(&mut conn, &id, now_ms)
            .await
            .expect("dequeue")
    );
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
}

#[tokio::test]
async fn dequeue_leaves_in_flight_and_dead_jobs_alone() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("held", "p"), ("dead", "p")]).await;
    let scores = queue.top(&mut conn, 10).await.expect("top");
    assert_eq!(scores.len(), 2);
    let reserved = queue
        .reserve(&mut conn, 10, LEASE, 1)
        .await
        .expect("reserve");
    let (held, dead): (Vec<_>, Vec<_>) =
        reserved.jobs.into_iter().partition(|job| job.id == "held");
    // "dead" fails its only attempt; "held" stays with its worker.
    queue
        .retry(&mut conn, &dead, Duration::ZERO, Attempt::Failed, 1)
        .await
        .expect("retry");
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 1, 1));

    for (id, seen_ms) in &scores {
        assert!(
            !queue
                .dequeue(&mut conn, id, *seen_ms)
                .await
                .expect("dequeue"),
            "{id} was removed"
        );
    }
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 1, 1));
    // The worker still holds its job, and its ack still counts.
    assert_eq!(queue.ack(&mut conn, &held).await.expect("ack"), 1);
    assert_eq!(
        queue
            .redrive(&mut conn, Duration::ZERO)
            .await
            .expect("redrive"),
        1
    );
}
