//! The queue's dead letters: a job that keeps failing, or whose workers
//! keep dying, is set aside once its attempts are used up, each job by its
//! own count; a retry that was not tried uses none; re-driven jobs come
//! back one after another; a reserve whose answer was lost hands its jobs
//! out again, uncharged.

use std::time::Duration;

use seckill_core::config::WorkerSettings;
use seckill_core::queue::{Attempt, Queue};
use seckill_core::redis_pool::{RedisAt, connect_redis};
use seckill_core::store::Store;
use seckill_core::worker::Worker;

use crate::proxy::{LoseOneAnswer, upstream_of};
use crate::queue::{LEASE, MAX_ATTEMPTS, enqueue_now, setup, stats};

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

/// A worker's reserve ran in Redis and its answer was lost: it took ann's
/// order's job, and nobody runs it. The worker's next pass asks again
/// with the same reserve's token and gets the same job, uncharged, and
/// ann's order, told `202`, is written. (Before, the next reserve found
/// the job in flight and took nothing; when the lease ran out the job came
/// back charged the attempt it never had, and with one attempt allowed,
/// as after five such losses with the default, it went to the
/// dead-letter set with ann's order.)
#[tokio::test]
async fn a_reserve_whose_answer_was_lost_hands_out_its_jobs_again_uncharged() {
    let app = crate::helpers::spawn_app().await;
    let sale = app.create_sale(3).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let (proxy, worker) = a_worker_behind(&app, LoseOneAnswer::start).await;

    let lost = worker.try_process_batch(sale).await;
    assert_eq!(proxy.answers_lost(), 1, "the reserve's answer was not lost");
    assert!(lost.is_err(), "{lost:?}");
    let again = worker.try_process_batch(sale).await.expect("a batch");
    assert_eq!((again.reserved, again.confirmed), (1, 1), "{again:?}");
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(
        (orders[0].1.as_str(), orders[0].2.as_str()),
        ("ann", "confirmed")
    );

    // Past the lease, nothing comes back and nothing is dead.
    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let after = worker.try_process_batch(sale).await.expect("a batch");
    assert_eq!(after.reserved, 0, "{after:?}");
    let left = Queue::new(app.keys(sale).queue)
        .stats(&mut app.redis_conn().await)
        .await
        .expect("stats");
    assert_eq!(left, stats(0, 0, 0));
}

/// A worker with one attempt a job and a 2 s lease, reaching Redis
/// through a proxy that `start` makes, given the scratch Redis and what
/// the reserve looks like on the wire (its hash, loaded past the proxy).
async fn a_worker_behind<Started>(
    app: &crate::helpers::TestApp,
    start: impl FnOnce(String, Vec<Vec<u8>>) -> Started,
) -> (LoseOneAnswer, Worker)
where
    Started: Future<Output = LoseOneAnswer>,
{
    let reserve = redis::Script::new(concat!(
        include_str!("../../../seckill-core/src/lua/queue_lib.lua"),
        include_str!("../../../seckill-core/src/lua/queue_reserve.lua")
    ));
    crate::faults::load_straight(&app.scratch, &reserve).await;
    let needle = reserve.get_hash().as_bytes().to_vec();
    let proxy = start(upstream_of(app.scratch.redis_url()), vec![needle]).await;
    let through_proxy = connect_redis(&RedisAt::Server(proxy.url.clone()), Duration::from_secs(5))
        .await
        .expect("Redis through the proxy");
    let store = Store::new(app.pg.clone(), through_proxy, app.scratch.prefix.clone());
    let settings = WorkerSettings {
        max_attempts: 1,
        lease_ms: 2_000,
        ..WorkerSettings::default()
    };
    (proxy, Worker::new(store, settings))
}

/// The reserve asked again can run before the first one does: the first
/// was still on its way when its connection broke, and lands a second
/// later. Asked again with nothing due, the reserve records that it took
/// nothing; ann then buys; the first reserve lands, finds the record, and
/// takes nothing either, so ann's job stays due and the next pass writes
/// it. (Before, only a reserve that took something left a record: the
/// late first one took ann's job, and its answer went to nobody; the job
/// came back charged when the lease ran out, and with one attempt
/// allowed went to the dead-letter set.)
#[tokio::test]
async fn a_reserve_that_lands_after_it_was_asked_again_takes_nothing() {
    let app = crate::helpers::spawn_app().await;
    let sale = app.create_sale(3).await;
    let late = Duration::from_millis(1_000);
    let (proxy, worker) = a_worker_behind(&app, |upstream, needles| {
        LoseOneAnswer::delaying(upstream, needles, late)
    })
    .await;

    let cut = worker.try_process_batch(sale).await;
    assert!(cut.is_err(), "{cut:?}");
    let again = worker.try_process_batch(sale).await.expect("a batch");
    assert_eq!(again.reserved, 0, "{again:?}");
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    // The first reserve lands now.
    tokio::time::sleep(late + Duration::from_millis(300)).await;
    assert_eq!(proxy.answers_lost(), 1, "the reserve was not held");

    let next = worker.try_process_batch(sale).await.expect("a batch");
    assert_eq!((next.reserved, next.confirmed), (1, 1), "{next:?}");
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(
        (orders[0].1.as_str(), orders[0].2.as_str()),
        ("ann", "confirmed")
    );
}
