//! The Redis task queue against a real Redis: nothing is lost, nothing doubled.
//! Dead letters and re-drive are in `queue_dead.rs`; taking a waiting job
//! back, in `queue_dequeue.rs`.

use std::time::Duration;

use seckill_core::keys::QueueKeys;
use seckill_core::queue::{Queue, QueueStats};

use crate::helpers::{Scratch, spawn_this_test};

pub const LEASE: Duration = Duration::from_secs(30);
pub const MAX_ATTEMPTS: u32 = 3;

pub async fn setup() -> (Scratch, Queue, redis::aio::MultiplexedConnection) {
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
pub async fn enqueue_now(
    queue: &Queue,
    conn: &mut redis::aio::MultiplexedConnection,
    jobs: &[(&str, &str)],
) -> u64 {
    queue
        .enqueue(conn, jobs, Duration::ZERO)
        .await
        .expect("enqueue")
}

pub fn stats(waiting: u64, in_flight: u64, dead: u64) -> QueueStats {
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

/// Redis' clock, in ms: the queue's due times are on it.
async fn redis_now_ms(conn: &mut redis::aio::MultiplexedConnection) -> f64 {
    let (secs, micros): (u64, u64) = redis::cmd("TIME").query_async(conn).await.expect("TIME");
    (secs * 1_000 + micros / 1_000) as f64
}

#[tokio::test]
async fn a_delayed_job_is_not_due_before_its_time() {
    let (scratch, queue, mut conn) = setup().await;
    // A minute ahead: nothing this test does takes that long, so "not due
    // yet" cannot have become false by the time it is checked.
    let before = redis_now_ms(&mut conn).await;
    queue
        .enqueue(&mut conn, &[("later", "p")], Duration::from_secs(60))
        .await
        .expect("enqueue");
    let after = redis_now_ms(&mut conn).await;
    assert!(queue.top(&mut conn, 10).await.expect("top").is_empty());
    let early = queue
        .reserve(&mut conn, 10, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert!(
        early.jobs.is_empty(),
        "a job was handed out before it was due"
    );
    // Due a minute after it was queued, on Redis' clock.
    let due: f64 = redis::cmd("ZSCORE")
        .arg(QueueKeys::new(&format!("{}:{{q}}", scratch.prefix)).due)
        .arg("later")
        .query_async(&mut conn)
        .await
        .expect("ZSCORE");
    assert!(
        (before + 60_000.0..=after + 60_000.0).contains(&due),
        "due at {due}, queued between {before} and {after}"
    );
    // A job a moment ahead becomes due by itself, the other still not.
    queue
        .enqueue(&mut conn, &[("soon", "p")], Duration::from_millis(300))
        .await
        .expect("enqueue");
    crate::helpers::eventually(Duration::from_secs(10), "the job due soon", || async {
        !queue
            .top(&mut conn.clone(), 10)
            .await
            .expect("top")
            .is_empty()
    })
    .await;
    let due = queue.top(&mut conn, 10).await.expect("top");
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].0, "soon");
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

/// A job counts its deliveries only past the first: jobs reserved once
/// write nothing to the attempts hash (two writes a job fewer on every
/// order the worker drains), and a job whose lease ran out is counted
/// then, and delivered as its second attempt, then its third, until it
/// is given up on.
#[tokio::test]
async fn a_job_that_runs_once_never_writes_its_attempts() {
    let (scratch, queue, mut conn) = setup().await;
    let attempts = format!("{}:{{q}}:q:attempts", scratch.prefix);
    let counted = async |conn: &mut redis::aio::MultiplexedConnection| -> Option<String> {
        redis::cmd("HGET")
            .arg(&attempts)
            .arg("late")
            .query_async(conn)
            .await
            .expect("HGET")
    };
    enqueue_now(&queue, &mut conn, &[("once", "p"), ("late", "p")]).await;
    let short = Duration::from_millis(50);
    let first = queue
        .reserve(&mut conn, 2, short, 3)
        .await
        .expect("reserve");
    assert_eq!(first.jobs.len(), 2);
    let written: i64 = redis::cmd("EXISTS")
        .arg(&attempts)
        .query_async(&mut conn)
        .await
        .expect("EXISTS");
    assert_eq!(
        written, 0,
        "two jobs on their first delivery wrote their attempts"
    );
    let once: Vec<_> = first
        .jobs
        .iter()
        .filter(|job| job.id == "once")
        .cloned()
        .collect();
    assert_eq!(queue.ack(&mut conn, &once).await.expect("ack"), 1);
    for attempt in [2, 3] {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let again = queue
            .reserve(&mut conn, 1, short, 3)
            .await
            .expect("reserve");
        assert_eq!(again.reclaimed, 1);
        assert_eq!(again.jobs[0].attempt, attempt);
        assert_eq!(counted(&mut conn).await, Some(attempt.to_string()));
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let last = queue
        .reserve(&mut conn, 1, short, 3)
        .await
        .expect("reserve");
    assert_eq!((last.reclaimed, last.dead_lettered), (0, 1));
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 1));
}

/// A count of 0 is what the scripts before the rule above left for a job
/// whose first delivery was given back uncounted (PostgreSQL down): such
/// a job, reserved again, is attempt 1, and its ack counts.
#[tokio::test]
async fn a_count_of_zero_left_by_earlier_scripts_does_not_refuse_the_ack() {
    let (scratch, queue, mut conn) = setup().await;
    enqueue_now(&queue, &mut conn, &[("job", "p")]).await;
    let _: i64 = redis::cmd("HSET")
        .arg(format!("{}:{{q}}:q:attempts", scratch.prefix))
        .arg("job")
        .arg(0)
        .query_async(&mut conn)
        .await
        .expect("HSET");
    let reserved = queue
        .reserve(&mut conn, 1, LEASE, MAX_ATTEMPTS)
        .await
        .expect("reserve");
    assert_eq!(reserved.jobs[0].attempt, 1);
    assert_eq!(queue.ack(&mut conn, &reserved.jobs).await.expect("ack"), 1);
    assert_eq!(queue.stats(&mut conn).await.expect("stats"), stats(0, 0, 0));
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
