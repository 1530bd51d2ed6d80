//! The Redis task queue against a real Redis: nothing is lost, nothing doubled.

use std::time::Duration;

use seckill_core::keys::QueueKeys;
use seckill_core::queue::{Attempt, Queue, QueueStats};

use crate::helpers::{Scratch, spawn_this_test};

const LEASE: Duration = Duration::from_secs(30);
const MAX_ATTEMPTS: u32 = 3;

async fn setup() -> (Scratch, Queue, redis::aio::MultiplexedConnection) {
    let scratch = Scratch::new().await;
    let conn = redis::Client::open(scratch.redis_url())
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a Redis connection");
    let queue = Queue::new(QueueKeys::new(&format!("{}:{{q}}", scratch.prefix)));
    (scratch, queue, conn)
}

/// Enqueue jobs due now; returns how many were added.
async fn enqueue_now(
    queue: &Queue,
    conn: &mut redis::aio::MultiplexedConnection,
    jobs: &[(&str, &str)],
) -> u64 {
    queue
        .enqueue(conn, jobs, Duration::ZERO)
        .await
        .expect("enqueue")
}

fn stats(waiting: u64, in_flight: u64, dead: u64) -> QueueStats {
    QueueStats {
        waiting,
        in_flight,
        dead,
    }
}

#[tokio::test]
async fn enqueueing_an_id_twice_keeps_one_job() {
    let (_scratch, queue, mut conn) = setup().await;
    let added = enqueue_now(&queue, &mut conn, &[("a", "first"), ("b", "b")]).await;
    assert_eq!(added, 2);
    let again = enqueue_now(&queue, &mut conn, &[("a", "second")]).await;
    assert_eq!(again, 0);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(2, 0, 0));
    let reserved = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    let a = reserved
        .jobs
        .iter()
        .find(|job| job.id == "a")
        .expect("job a");
    assert_eq!(
        a.payload, "first",
        "the second enqueue must not overwrite the job"
    );
    // Still in flight: enqueueing it again now must not duplicate it either.
    assert_eq!(enqueue_now(&queue, &mut conn, &[("a", "x")]).await, 0);
}

/// The scripts handle a batch in a few calls of many values each, a few
/// hundred values a call (Lua's unpack takes at most 8,000): a batch of
/// 5,000 (10,000 values for HSET and ZADD) crosses many of those chunks,
/// every job keeps its own payload and attempt across them, an id given
/// twice in one call counts once, and nothing is lost or doubled.
#[tokio::test]
async fn batches_larger_than_one_call_and_ids_given_twice_are_counted_once() {
    const JOBS: usize = 5_000;
    let (_scratch, queue, mut conn) = setup().await;
    let jobs: Vec<(String, String)> = (0..JOBS)
        .map(|i| (format!("j{i}"), format!("p{i}")))
        .collect();
    let mut refs: Vec<(&str, &str)> = jobs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    refs.push(("j7", "again"));
    assert_eq!(enqueue_now(&queue, &mut conn, &refs).await, JOBS as u64);
    assert_eq!(
        queue.stats(&mut conn).await.expect("stats"),
        stats(JOBS as u64, 0, 0)
    );

    let reserved = queue
        .reserve(&mut conn, JOBS, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(reserved.jobs.len(), JOBS);
    for job in &reserved.jobs {
        let n = job.id.strip_prefix('j').expect("a job id");
        assert_eq!(job.payload, format!("p{n}"), "{job:?}");
        assert_eq!(job.attempt, 1, "{job:?}");
    }
    assert_eq!(
        queue.stats(&mut conn).await.expect("stats"),
        stats(0, JOBS as u64, 0)
    );

    let mut acks = reserved.jobs.clone();
    acks.push(acks[7].clone());
    assert_eq!(queue.ack(&mut conn, &acks).await.expect("ack"), JOBS as u64);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
    let last = format!("j{}", JOBS - 1);
    assert_eq!(
        queue.payload(&mut conn, &last).await.expect("payload"),
        None
    );
}

#[tokio::test]
async fn a_delayed_job_is_not_due_before_its_time() {
    let (_scratch, queue, mut conn) = setup().await;
    queue
        .enqueue(&mut conn, &[("later", "p")], Duration::from_millis(300))
        .await
        .expect("enqueue");
    assert!(queue.top(&mut conn, 10).await.expect("top").is_empty());
    let early = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert!(
        early.jobs.is_empty(),
        "a job was handed out before it was due"
    );
    tokio::time::sleep(Duration::from_millis(400)).await;
    let due = queue.top(&mut conn, 10).await.expect("top");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, "later");
}

#[tokio::test]
async fn top_peeks_without_taking_and_reserve_takes_the_oldest_first() {
    let (_scratch, queue, mut conn) = setup().await;
    for id in ["1", "2", "3"] {
        enqueue_now(&queue, &mut conn, &[(id, id)]).await;
        // Distinct due times (the server clock has millisecond resolution here).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let peeked = queue.top(&mut conn, 2).await.expect("top");
    assert_eq!(
        peeked.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["1", "2"]
    );
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(3, 0, 0));
    let reserved = queue
        .reserve(&mut conn, 2, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    let ids: Vec<_> = reserved.jobs.iter().map(|job| job.id.as_str()).collect();
    assert_eq!(ids, ["1", "2"]);
    assert!(reserved.jobs.iter().all(|job| job.attempt == 1));
}

#[tokio::test]
async fn reserved_jobs_are_in_flight_until_acked_then_gone() {
    let (_scratch, queue, mut conn) = setup().await;
    let jobs: Vec<(String, String)> = (0..5).map(|i| (format!("j{i}"), format!("p{i}"))).collect();
    let refs: Vec<(&str, &str)> = jobs.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    enqueue_now(&queue, &mut conn, &refs).await;
    let reserved = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(reserved.jobs.len(), 5);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 5, 0));
    // A second consumer gets nothing: the jobs are leased.
    let other = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert!(other.jobs.is_empty());
    assert_eq!(queue.ack(&mut conn, &reserved.jobs).await.expect("ack"), 5);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
    assert_eq!(queue.payload(&mut conn, "j0").await.expect("payload"), None);
}

#[tokio::test]
async fn a_job_whose_lease_ran_out_is_delivered_again_and_the_late_ack_is_ignored() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("job", "p")]).await;
    let first = queue
        .reserve(&mut conn, 1, Duration::from_millis(50), MAX_ATTEMPTS)
        .await
        .expect("reserve");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let second = queue
        .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(second.reclaimed, 1);
    assert_eq!(second.jobs.len(), 1);
    assert_eq!(second.jobs[0].attempt, 2);
    // The stalled first consumer wakes up and acks: that must not remove the
    // job from under the second.
    assert_eq!(queue.ack(&mut conn, &first.jobs).await.expect("ack"), 0);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 1, 0));
    assert_eq!(queue.ack(&mut conn, &second.jobs).await.expect("ack"), 1);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
}

#[tokio::test]
async fn a_job_that_keeps_failing_is_dead_lettered_and_can_be_redriven() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("poison", "p")]).await;
    for attempt in 1..=MAX_ATTEMPTS {
        let reserved = queue
            .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
            .await
            .expect("reserve");
        assert_eq!(reserved.jobs.len(), 1, "attempt {attempt}");
        assert_eq!(reserved.jobs[0].attempt, attempt);
        queue
            .retry(
                &mut conn,
                &reserved.jobs,
                Duration::ZERO,
                Attempt::Failed,
                MAX_ATTEMPTS,
            )
            .await
            .expect("retry");
    }
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 1));
    assert!(
        queue
            .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
            .await
            .expect("reserve")
            .jobs
            .is_empty()
    );
    assert_eq!(
        queue
            .payload(&mut conn, "poison")
            .await
            .expect("payload")
            .as_deref(),
        Some("p")
    );

    assert_eq!(
        queue
            .redrive(&mut conn, Duration::ZERO)
            .await
            .expect("redrive"),
        1
    );
    let again = queue
        .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(again.jobs[0].attempt, 1, "redrive resets the attempts");
}

#[tokio::test]
async fn a_job_whose_worker_died_on_its_last_attempt_is_dead_lettered() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("job", "p")]).await;
    for _ in 0..2 {
        queue
            .reserve(&mut conn, 1, Duration::from_millis(10), 2)
            .await
            .expect("reserve");
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let last = queue
        .reserve(&mut conn, 1, LEASE, 2)
        .await
        .expect("reserve");
    assert_eq!(last.dead_lettered, 1);
    assert!(last.jobs.is_empty());
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 1));
}

/// A worker that died holding 600 jobs, more than one of the scripts'
/// calls takes (500), some on their last attempt and some not, their ids
/// interleaved: the next reserve dead-letters exactly the first, and puts
/// back (and delivers again) exactly the others.
#[tokio::test]
async fn a_dead_workers_jobs_are_put_back_or_dead_lettered_each_by_its_own_attempts() {
    let (_scratch, queue, mut conn) = setup().await;
    let named = |numbers: Vec<u32>| -> Vec<String> {
        numbers.into_iter().map(|i| format!("job-{i:03}")).collect()
    };
    let as_jobs = |ids: &[String]| -> Vec<(String, String)> {
        ids.iter().map(|id| (id.clone(), "p".to_owned())).collect()
    };
    // Every third id is tried twice, the others once: sorted by id, as the
    // reserve reads them, the two kinds alternate, across the 500 boundary
    // too, and neither a shift by one nor a reversal maps a kind onto itself.
    let (twice, once): (Vec<u32>, Vec<u32>) = (0..600).partition(|i| i % 3 == 0);
    let (twice, once) = (named(twice), named(once));
    let short = Duration::from_millis(10);
    let enqueue = async |conn: &mut redis::aio::MultiplexedConnection, ids: &[String]| {
        let jobs = as_jobs(ids);
        let jobs: Vec<(&str, &str)> = jobs.iter().map(|(i, p)| (i.as_str(), p.as_str())).collect();
        enqueue_now(&queue, conn, &jobs).await
    };
    assert_eq!(enqueue(&mut conn, &twice).await, twice.len() as u64);
    let first = queue
        .reserve(&mut conn, 600, short, 2)
        .await
        .expect("reserve");
    assert_eq!(first.jobs.len(), twice.len());
    tokio::time::sleep(Duration::from_millis(30)).await;
    // `twice` comes back and is taken again (attempt 2), `once` for the
    // first time: all 600 in flight, all their leases ending together.
    assert_eq!(enqueue(&mut conn, &once).await, once.len() as u64);
    let all = queue
        .reserve(&mut conn, 600, short, 2)
        .await
        .expect("reserve");
    assert_eq!(all.reclaimed, twice.len() as u64);
    assert_eq!(all.jobs.len(), 600);
    tokio::time::sleep(Duration::from_millis(30)).await;

    let last = queue
        .reserve(&mut conn, 600, LEASE, 2)
        .await
        .expect("reserve");
    assert_eq!(last.dead_lettered, twice.len() as u64);
    assert_eq!(last.reclaimed, once.len() as u64);
    let mut delivered: Vec<String> = last.jobs.iter().map(|job| job.id.clone()).collect();
    delivered.sort();
    assert_eq!(delivered, once);
    assert!(last.jobs.iter().all(|job| job.attempt == 2));
    assert_eq!(
        queue.stats(&mut conn).await.expect("stats"),
        stats(0, once.len() as u64, twice.len() as u64)
    );
}

#[tokio::test]
async fn a_retry_that_was_not_tried_does_not_use_up_an_attempt() {
    let (_scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("job", "p")]).await;
    for _ in 0..(MAX_ATTEMPTS * 2) {
        let reserved = queue
            .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
            .await
            .expect("reserve");
        assert_eq!(reserved.jobs[0].attempt, 1);
        queue
            .retry(
                &mut conn,
                &reserved.jobs,
                Duration::ZERO,
                Attempt::NotTried,
                MAX_ATTEMPTS,
            )
            .await
            .expect("retry");
    }
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(1, 0, 0));
}

const CHILD_QUEUE: &str = "SECKILL_TEST_QUEUE_CHILD_PREFIX";

#[tokio::test]
async fn a_consumer_killed_between_reserve_and_ack_has_its_job_delivered_again_and_processed_once()
{
    // In the child process: reserve the job, say so, then hang until killed.
    if let Ok(prefix) = std::env::var(CHILD_QUEUE) {
        let url = std::env::var("SECKILL_REDIS_URL").expect("the parent passes the URL");
        let mut conn = redis::Client::open(url.as_str())
            .expect("URL")
            .get_multiplexed_async_connection()
            .await
            .expect("connection");
        let queue = Queue::new(QueueKeys::new(&format!("{prefix}:{{q}}")));
        let reserved = queue
            .reserve(&mut conn, 10, Duration::from_millis(500), MAX_ATTEMPTS)
            .await
            .expect("reserve");
        assert_eq!(reserved.jobs.len(), 1);
        println!("reserved");
        tokio::time::sleep(Duration::from_secs(600)).await;
        return;
    }

    let (scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("order-1", "p")]).await;
    let mut child = spawn_this_test(
        "queue::a_consumer_killed_between_reserve_and_ack_has_its_job_delivered_again_and_processed_once",
        &[
            (CHILD_QUEUE, &scratch.prefix),
            ("SECKILL_REDIS_URL", scratch.redis_url()),
        ],
    );
    let stdout = child.stdout.take().expect("piped");
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stdout));
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the consumer reserved in time")
            .expect("reading its output")
            .expect("the consumer said it reserved");
        if line.contains("reserved") {
            break;
        }
    }
    child.kill().await.expect("SIGKILL the consumer");
    assert_eq!(
        queue.stats(&mut conn).await.expect("stats"),
        stats(0, 1, 0),
        "the job is held by the dead consumer"
    );

    // Our consumer "processes" a job by incrementing a counter, then acks.
    let processed = format!("{}:processed", scratch.prefix);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while queue.stats(&mut conn).await.expect("stats") != stats(0, 0, 0) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the job was never delivered again"
        );
        let reserved = queue
            .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
            .await
            .expect("reserve");
        for job in &reserved.jobs {
            assert_eq!(job.id, "order-1");
            assert_eq!(job.attempt, 2);
            redis::cmd("INCR")
                .arg(&processed)
                .query_async::<i64>(&mut conn)
                .await
                .expect("INCR");
        }
        queue.ack(&mut conn, &reserved.jobs).await.expect("ack");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let count: i64 = redis::cmd("GET")
        .arg(&processed)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(count, 1);
}

/// Jobs that died together (batch-mates of a poison job) come back one
/// after another, not as the same batch again.
#[tokio::test]
async fn redriven_jobs_come_due_one_after_another() {
    let (_scratch, queue, mut conn) = setup().await;
    let ids = ["a", "b", "c"];
    let jobs: Vec<(&str, &str)> = ids.iter().map(|id| (*id, "p")).collect();
    enqueue_now(&queue, &mut conn, &jobs).await;
    for _ in 1..=MAX_ATTEMPTS {
        let batch = queue
            .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
            .await
            .expect("reserve");
        assert_eq!(batch.jobs.len(), 3, "they fail as one batch");
        queue
            .retry(
                &mut conn,
                &batch.jobs,
                Duration::ZERO,
                Attempt::Failed,
                MAX_ATTEMPTS,
            )
            .await
            .expect("retry");
    }
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 3));

    let spacing = Duration::from_secs(60);
    assert_eq!(queue.redrive(&mut conn, spacing).await.expect("redrive"), 3);
    let first = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(first.jobs.len(), 1, "the old batch came back whole");
    assert_eq!(first.jobs[0].attempt, 1, "redrive resets the attempts");
    let due: Vec<(String, u64)> = redis::cmd("ZRANGE")
        .arg(&queue.keys().due)
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    assert_eq!(due.len(), 2);
    assert_eq!(due[1].1 - due[0].1, 60_000, "not spaced: {due:?}");
}

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
