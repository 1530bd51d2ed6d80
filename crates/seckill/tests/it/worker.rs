//! The worker: every accepted order reaches PostgreSQL exactly once, however
//! the worker dies, and however many of its batches are written at once.
//! What it cannot write is in `worker_refused.rs`; a sale reloaded under
//! it, in `worker_reload.rs`.

use std::collections::HashSet;
use std::time::Duration;

use seckill_core::domain::OrderJob;
use seckill_core::queue::{Queue, QueueStats, Reservation};
use uuid::Uuid;

use crate::helpers::{Options, TestApp, cluster, eventually, spawn_app, spawn_app_with};

/// Put order jobs straight on a sale's queue, as if the purchase path had
/// accepted them (and without its checks). Returns their ids.
pub async fn enqueue_orders(app: &TestApp, sale: i64, users: &[String]) -> Vec<Uuid> {
    let jobs: Vec<OrderJob> = users
        .iter()
        .map(|user| OrderJob {
            order_id: Uuid::now_v7(),
            sale_id: sale,
            user_id: user.clone(),
        })
        .collect();
    let encoded: Vec<(String, String)> = jobs
        .iter()
        .map(|j| (j.order_id.to_string(), j.to_payload()))
        .collect();
    let refs: Vec<(&str, &str)> = encoded
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    let queue = Queue::new(app.keys(sale).queue);
    for chunk in refs.chunks(500) {
        queue
            .enqueue(&mut app.redis_conn().await, chunk, Duration::ZERO)
            .await
            .expect("enqueue");
    }
    jobs.iter().map(|job| job.order_id).collect()
}

pub fn users(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("user-{i}")).collect()
}

/// A sale with three accepted orders, reserved by a worker with a 20 ms
/// lease that will never acknowledge them.
async fn three_orders_reserved_by_a_dying_worker(app: &TestApp) -> (i64, Reservation) {
    let sale = app.create_sale(10).await;
    for user in ["a", "b", "c"] {
        assert_eq!(app.purchase(sale, user).await.status(), 202);
    }
    let taken = app.reserve_as_a_dying_worker(app.keys(sale).queue).await;
    assert_eq!(taken.jobs.len(), 3);
    (sale, taken)
}

#[tokio::test]
async fn a_worker_that_died_after_reserving_has_its_orders_written_by_the_next() {
    let app = spawn_app().await;
    // The dying worker reserves three orders, then never writes them.
    let (sale, _taken) = three_orders_reserved_by_a_dying_worker(&app).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let report = app.drain().await;
    assert_eq!(report.confirmed, 3);
    assert_eq!(app.orders(sale).await.len(), 3);
    assert_eq!(app.sold(sale).await, 3);
}

#[tokio::test]
async fn a_worker_that_died_after_commit_before_ack_causes_no_second_order() {
    let app = spawn_app().await;
    let (sale, taken) = three_orders_reserved_by_a_dying_worker(&app).await;
    // It commits the orders, then dies before acknowledging them.
    app.commit_as_a_dying_worker(&taken).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let report = app.drain().await;
    assert_eq!(report.redelivered, 3, "the jobs were delivered again");
    assert_eq!(report.confirmed, 0, "and were no-ops");
    assert_eq!(app.orders(sale).await.len(), 3);
    assert_eq!(app.sold(sale).await, 3);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// A redelivered batch that holds new orders beside stored ones (a worker
/// that wrote some of its jobs in a batch of their own, then died): the
/// primary key refuses the batch's statement, and the batch is written
/// again skipping the stored ones. Each order once, each unit counted once.
#[tokio::test]
async fn a_redelivered_batch_with_new_orders_among_stored_ones_writes_only_the_new() {
    let app = spawn_app().await;
    let (sale, mut taken) = three_orders_reserved_by_a_dying_worker(&app).await;
    taken.jobs.truncate(2);
    app.commit_as_a_dying_worker(&taken).await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let report = app.drain().await;
    assert_eq!((report.redelivered, report.confirmed), (2, 1));
    assert_eq!(app.orders(sale).await.len(), 3);
    assert_eq!(app.sold(sale).await, 3);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// `Worker::drain` writes two batches of a sale at once; PostgreSQL's lock
/// on the sale's row must make them take turns: every order written once,
/// `sold` counted once per unit, and the excess refused, even when both
/// batches are refused and written one order at a time side by side.
#[tokio::test]
async fn draining_two_batches_at_a_time_writes_each_order_once_and_refuses_the_excess() {
    let app = spawn_app_with(Options {
        worker: seckill_core::config::WorkerSettings {
            batch_size: 50,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let sale = app.create_sale(925).await;
    enqueue_orders(&app, sale, &users(1_000)).await;
    let report = app.worker.drain(sale).await.expect("drained");
    assert_eq!((report.confirmed, report.rejected), (925, 75));
    // Each batch's deadline, named by the moment its orders are to be paid
    // by; with 925 units, one batch is written order by order and
    // confirms 25.
    let (queued, due) = app.deadlines_queued_and_due(sale).await;
    assert_eq!(queued, due);
    assert_eq!(confirmed(&app, sale).await, 925);
    assert_eq!(app.sold(sale).await, 925);
    let rows: i64 = sqlx::query_scalar("SELECT count(DISTINCT id) FROM orders WHERE sale_id = $1")
        .bind(sale)
        .fetch_one(&app.pg)
        .await
        .expect("count");
    assert_eq!(rows, 1_000);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// How many confirmed orders a sale has.
pub async fn confirmed(app: &TestApp, sale: i64) -> i64 {
    sqlx::query_scalar("SELECT count(*) FROM orders WHERE sale_id = $1 AND status = 'confirmed'")
        .bind(sale)
        .fetch_one(&app.pg)
        .await
        .expect("count")
}

/// In-flight jobs whose lease has not run out yet (by the Redis clock): the
/// jobs a worker holds right now.
async fn live_leases(app: &TestApp, sale: i64) -> u64 {
    let mut conn = app.redis_conn().await;
    let (seconds, micros): (u64, u64) = redis::cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("TIME");
    let now_ms = seconds * 1000 + micros / 1000;
    redis::cmd("ZCOUNT")
        .arg(&app.keys(sale).queue.inflight)
        .arg(now_ms)
        .arg("+inf")
        .query_async(&mut conn)
        .await
        .expect("ZCOUNT")
}

#[tokio::test]
async fn a_worker_process_killed_mid_batch_and_restarted_confirms_every_order_exactly_once() {
    const ORDERS: usize = 2_000;
    let app = spawn_app().await;
    let sale = app.create_sale(ORDERS as i64).await;
    let ids: HashSet<Uuid> = enqueue_orders(&app, sale, &users(ORDERS))
        .await
        .into_iter()
        .collect();
    let env = [("SECKILL_BATCH_SIZE", "20"), ("SECKILL_LEASE_MS", "300")];

    // Kill the worker with SIGKILL while it holds a batch, a few times over.
    let mut workers = cluster(&app.scratch, &env);
    let mut kills_mid_batch = 0;
    for _ in 0..10 {
        let before = confirmed(&app, sale).await;
        workers
            .start_worker("doomed", &[])
            .await
            .expect("a worker starts");
        eventually(
            Duration::from_secs(60),
            "the worker confirms more orders",
            || async { confirmed(&app, sale).await > before },
        )
        .await;
        workers.kill("doomed").await.expect("SIGKILL the worker");
        if live_leases(&app, sale).await > 0 {
            kills_mid_batch += 1;
        }
        // Let the dead worker's leases run out, so that the next round's
        // live leases can only be the next worker's.
        tokio::time::sleep(Duration::from_millis(400)).await;
        if kills_mid_batch >= 2 || confirmed(&app, sale).await as usize == ORDERS {
            break;
        }
    }
    assert!(
        kills_mid_batch >= 1,
        "no kill hit the worker while it held a batch"
    );
    assert!(
        (confirmed(&app, sale).await as usize) < ORDERS,
        "the worker finished before it was killed"
    );

    // A fresh worker picks up what the dead ones held once their leases run out.
    workers
        .start_worker("fresh", &[])
        .await
        .expect("a worker starts");
    eventually(
        Duration::from_secs(120),
        "every order is confirmed",
        || async { app.queue_stats(sale).await == QueueStats::default() },
    )
    .await;
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), ORDERS, "an order was lost or doubled");
    let stored: HashSet<Uuid> = orders.iter().map(|(id, _, _)| *id).collect();
    assert_eq!(stored, ids, "the stored orders are not the accepted ones");
    assert!(orders.iter().all(|(_, _, status)| status == "confirmed"));
    assert_eq!(app.sold(sale).await as usize, ORDERS);
}

/// One sale the worker cannot serve (its queue's key holds a string, so
/// every reserve is refused `WRONGTYPE`) stops neither the other sales of
/// the pass nor the report of its failure: a later sale's order is
/// confirmed in the same pass. (Before, the first sale's error ended the
/// pass; under `replica` one sale's unconfirmed wait held back every other
/// sale's orders until the next pass.)
#[tokio::test]
async fn one_sale_that_fails_does_not_stop_the_other_sales_of_a_pass() {
    let app = spawn_app().await;
    let broken = app.create_sale(5).await;
    let sale = app.create_sale(5).await;
    assert!(broken < sale, "the pass visits sales in id order");
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let () = redis::cmd("SET")
        .arg(&app.keys(broken).queue.due)
        .arg("not a queue")
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("SET");

    let pass = app.worker.run_once().await;
    assert!(pass.is_err(), "the broken sale's failure is reported");
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(orders[0].2, "confirmed", "{orders:?}");
}

/// A worker process that cannot start is reported when it is started,
/// with what it said, not later as orders that are never written: the
/// chaos run, the lab and the tests wait for its ready line
/// (`Fleet::start_worker`).
#[tokio::test]
async fn a_worker_process_that_cannot_start_fails_its_start() {
    let app = spawn_app().await;
    let mut workers = cluster(&app.scratch, &[]);
    // Its refusal of the flag is printed with the test's output: the
    // fleet passes its members' errors through, as a user would see them.
    let error = workers
        .start_worker("refused", &["--batch-size", "0"])
        .await
        .expect_err("a worker with a batch of 0 started");
    assert!(
        format!("{error:#}").contains("refused exited before it was ready"),
        "{error:#}"
    );
    // A worker that can start is ready when its start returns, and
    // confirms what is queued.
    let sale = app.create_sale(1).await;
    enqueue_orders(&app, sale, &users(1)).await;
    workers
        .start_worker("able", &[])
        .await
        .expect("a worker starts");
    eventually(
        Duration::from_secs(30),
        "the order is confirmed",
        || async { app.sold(sale).await == 1 },
    )
    .await;
}
