//! The worker: every accepted order reaches PostgreSQL exactly once, however
//! the worker dies, and PostgreSQL refuses what would oversell.

use std::collections::HashSet;
use std::time::Duration;

use seckill_core::domain::OrderJob;
use seckill_core::queue::{Queue, QueueStats, Reservation};
use uuid::Uuid;

use crate::helpers::{Options, TestApp, cluster, eventually, spawn_app, spawn_app_with};

/// Put order jobs straight on a sale's queue, as if the purchase path had
/// accepted them (and without its checks). Returns their ids.
async fn enqueue_orders(app: &TestApp, sale: i64, users: &[String]) -> Vec<Uuid> {
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

fn users(n: usize) -> Vec<String> {
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

#[tokio::test]
async fn postgres_refuses_orders_beyond_the_stock_and_stores_them_as_rejected() {
    let app = spawn_app().await;
    let sale = app.create_sale(2).await;
    // Three orders for two units: only a broken purchase path would do this.
    let ids = enqueue_orders(&app, sale, &users(3)).await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (2, 1));
    assert_eq!(app.sold(sale).await, 2);
    let rejected: Vec<(Uuid, Option<String>)> =
        sqlx::query_as("SELECT id, reason FROM orders WHERE sale_id = $1 AND status = 'rejected'")
            .bind(sale)
            .fetch_all(&app.pg)
            .await
            .expect("rejected orders");
    assert_eq!(rejected.len(), 1);
    assert_eq!(
        rejected[0].0, ids[2],
        "the last order in queue order is the one refused"
    );
    assert_eq!(rejected[0].1.as_deref(), Some("sold_out"));

    let order = app.get_json(&format!("/api/orders/{}", ids[2])).await;
    assert_eq!(order["status"], "rejected");
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
    let sale = app.create_sale(900).await;
    enqueue_orders(&app, sale, &users(1_000)).await;
    let report = app.worker.drain(sale).await.expect("drained");
    assert_eq!((report.confirmed, report.rejected), (900, 100));
    assert_eq!(confirmed(&app, sale).await, 900);
    assert_eq!(app.sold(sale).await, 900);
    let rows: i64 = sqlx::query_scalar("SELECT count(DISTINCT id) FROM orders WHERE sale_id = $1")
        .bind(sale)
        .fetch_one(&app.pg)
        .await
        .expect("count");
    assert_eq!(rows, 1_000);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

#[tokio::test]
async fn postgres_refuses_a_second_order_for_the_same_buyer() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    enqueue_orders(&app, sale, &["ann".to_owned(), "ann".to_owned()]).await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (1, 1));
    let reasons: Vec<Option<String>> =
        sqlx::query_scalar("SELECT reason FROM orders WHERE sale_id = $1 ORDER BY status")
            .bind(sale)
            .fetch_all(&app.pg)
            .await
            .expect("orders");
    assert_eq!(reasons, [None, Some("duplicate_buyer".to_owned())]);
    assert_eq!(app.sold(sale).await, 1);
}

#[tokio::test]
async fn an_undecodable_job_ends_in_the_dead_letter_set_and_the_rest_are_written() {
    let mut options = Options::default();
    options.worker.max_attempts = 1;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(5).await;
    let queue = Queue::new(app.keys(sale).queue);
    queue
        .enqueue(
            &mut app.redis_conn().await,
            &[("garbage", "{not an order")],
            Duration::ZERO,
        )
        .await
        .expect("enqueue");
    enqueue_orders(&app, sale, &users(2)).await;
    let report = app.drain().await;
    assert_eq!(report.confirmed, 2);
    assert_eq!(
        app.queue_stats(sale).await,
        QueueStats {
            waiting: 0,
            in_flight: 0,
            dead: 1
        }
    );
}

/// How many confirmed orders a sale has.
async fn confirmed(app: &TestApp, sale: i64) -> i64 {
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
    workers.start_worker("fresh", &[]).expect("a worker starts");
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

/// One job PostgreSQL refuses for a reason of its own (here a buyer id the
/// table's CHECK forbids, as a corrupted job would carry) must not take its
/// batch-mates down with it: they are confirmed, and only it is charged.
#[tokio::test]
async fn a_poison_job_is_charged_alone_and_its_batch_mates_are_confirmed() {
    let mut options = Options::default();
    options.worker.max_attempts = 1;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(5).await;
    let mut buyers = users(3);
    buyers.insert(1, "x".repeat(100));
    enqueue_orders(&app, sale, &buyers).await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.failed), (3, 1));
    assert_eq!(confirmed(&app, sale).await, 3);
    assert_eq!(
        app.queue_stats(sale).await,
        QueueStats {
            waiting: 0,
            in_flight: 0,
            dead: 1
        }
    );
}

/// Make the scratch database read-only for new sessions (as a failover to
/// a standby does), or writable again, and cut the sessions it has so that
/// every pool reconnects and sees it.
async fn set_read_only(app: &TestApp, read_only: bool) {
    use sqlx::Connection;
    let url =
        seckill_core::urls::with_database(&app.scratch.database_url, "postgres").expect("URL");
    let mut admin = sqlx::PgConnection::connect(&url)
        .await
        .expect("admin connection");
    let name = app
        .scratch
        .database_url
        .rsplit('/')
        .next()
        .expect("a database name")
        .to_owned();
    let setting = if read_only { "on" } else { "off" };
    sqlx::query(&format!(
        r#"ALTER DATABASE "{name}" SET default_transaction_read_only = {setting}"#
    ))
    .execute(&mut admin)
    .await
    .expect("ALTER DATABASE");
    sqlx::query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1")
        .bind(&name)
        .execute(&mut admin)
        .await
        .expect("cut the sessions");
}

/// A database that refuses writes for a while (read-only during a
/// failover) is not the jobs' fault: however many passes fail meanwhile,
/// nothing is dead-lettered, and everything is confirmed once it is writable.
#[tokio::test]
async fn a_read_only_database_dead_letters_nothing_and_all_is_confirmed_after() {
    let mut options = Options::default();
    options.worker.max_attempts = 2;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(20).await;
    let ids: HashSet<Uuid> = enqueue_orders(&app, sale, &users(20))
        .await
        .into_iter()
        .collect();
    set_read_only(&app, true).await;
    // More failed passes than two attempts would allow, a second apart
    // (the delay a charged job waits before it is due again).
    for _ in 0..4 {
        assert!(app.worker.run_once().await.is_err(), "a write went through");
        tokio::time::sleep(Duration::from_millis(1_100)).await;
    }
    assert_eq!(
        app.queue_stats(sale).await.dead,
        0,
        "healthy orders were dead-lettered"
    );
    set_read_only(&app, false).await;
    eventually(
        Duration::from_secs(30),
        "every order is confirmed",
        || async {
            let _ = app.worker.run_once().await;
            app.queue_stats(sale).await == QueueStats::default()
        },
    )
    .await;
    let stored: HashSet<Uuid> = app
        .orders(sale)
        .await
        .iter()
        .map(|(id, _, _)| *id)
        .collect();
    assert_eq!(stored, ids);
    assert_eq!(confirmed(&app, sale).await, 20);
}

/// A 5-unit sale whose two orders (ann's, bob's) a worker has reserved
/// when Redis restarts empty: the sale's figures and its queues are gone.
async fn a_batch_held_through_a_wipe() -> (TestApp, i64, seckill_core::worker::Batch) {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    let held = app.worker.reserve_orders(sale).await.expect("reserve");
    app.wipe_all_of_sale(sale).await;
    (app, sale, held)
}

/// Redis' buyers of a sale, sorted.
async fn buyers(app: &TestApp, sale: i64) -> Vec<String> {
    let mut buyers = app.redis_buyers(sale).await;
    buyers.sort();
    buyers
}

/// After a batch held through a wipe was refused: PostgreSQL has none of
/// its orders, Redis sells all 5 units again, and ann (whose order went
/// with the wipe) can buy again. Had the batch been written, Redis would
/// promise 5 units while PostgreSQL grants 3: later 202s would end
/// rejected.
async fn assert_the_batch_went_with_the_wipe(app: &TestApp, sale: i64) {
    assert_eq!(app.orders(sale).await.len(), 0, "the batch was written");
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(app.redis_stock(sale).await, Some(5));
    assert!(buyers(app, sale).await.is_empty());
    app.buy(sale, "ann").await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (1, 0));
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(4));
}

/// The exact interleaving: a worker holds a reserved batch when Redis is
/// wiped; a page loads the sale from PostgreSQL, where the batch is not
/// committed yet, so the new Redis sells the batch's units again; then the
/// worker tries to commit. PostgreSQL must refuse the batch (the load
/// epoch moved), so that Redis and PostgreSQL agree.
#[tokio::test]
async fn a_batch_reserved_before_a_load_is_not_written() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    // A page loads the sale from PostgreSQL, which has no order yet.
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 5);

    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!((report.confirmed, report.superseded), (0, 2));
    assert_the_batch_went_with_the_wipe(&app, sale).await;
}

/// The same, with the load under way when the worker commits: the load
/// holds the sale's row from its read until its write to Redis is done, so
/// the worker's commit waits for it, then finds the new epoch.
#[tokio::test]
async fn a_commit_waits_for_a_load_under_way_and_then_writes_nothing() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    let loading = app.begin_load(sale).await;
    assert_eq!(loading.loadable.stock_left, 5);
    let worker = seckill_core::worker::Worker::new(app.store.clone(), app.worker_settings.clone());
    let commit = tokio::spawn(async move { worker.write_batch(held).await });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !commit.is_finished(),
        "the commit did not wait for the load"
    );
    assert!(app.finish_load(loading).await);
    let report = commit.await.expect("join").expect("write");
    assert_eq!((report.confirmed, report.superseded), (0, 2));
    assert_the_batch_went_with_the_wipe(&app, sale).await;
}

/// The other order: the worker commits before any load, and the load that
/// follows reads the batch from PostgreSQL. Nothing is lost, and Redis
/// counts ann and bob.
#[tokio::test]
async fn a_batch_committed_before_the_load_is_counted_by_it() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!((report.confirmed, report.superseded), (2, 0));
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 3);
    assert_eq!(buyers(&app, sale).await, ["ann", "bob"]);
    assert_eq!(
        app.purchase(sale, "ann").await.status(),
        409,
        "ann bought twice"
    );
}

/// A load that wrote Redis and then failed to record its epoch leaves
/// PostgreSQL behind. The worker finds Redis' epoch unchanged since it
/// reserved, records it, and writes the batch on its next delivery: the
/// orders are not lost, and the queue does not stall.
#[tokio::test]
async fn a_load_epoch_postgres_missed_is_recorded_and_the_batch_written() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    sqlx::query("UPDATE sales SET load_epoch = 'from-a-failed-load' WHERE id = $1")
        .bind(sale)
        .execute(&app.pg)
        .await
        .expect("UPDATE");
    let first = app.worker.try_process_batch(sale).await.expect("step");
    assert_eq!((first.confirmed, first.superseded), (0, 0));
    let report = app.drain().await;
    assert_eq!(report.confirmed, 1);
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// A write stuck behind a row lock must not outlive its lease: past the
/// lease the queue hands the jobs to another worker, and two writers then
/// race on the same jobs. With a 400 ms lease, each statement gets 100 ms
/// and the write 200 ms; the row stays locked for 1.5 s. The worker gives
/// the batch back uncharged, and confirms it once the row is free.
#[tokio::test]
async fn a_write_stuck_behind_a_lock_gives_its_batch_back_within_its_lease() {
    let app = spawn_app_with(Options {
        worker: seckill_core::config::WorkerSettings {
            lease_ms: 400,
            ..Default::default()
        },
        ..Default::default()
    })
    .await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;

    let mut blocker = app.pg.begin().await.expect("begin");
    sqlx::query("SELECT 1 FROM sales WHERE id = $1 FOR UPDATE")
        .bind(sale)
        .execute(&mut *blocker)
        .await
        .expect("lock the sale's row");
    let release = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1_500)).await;
        blocker.rollback().await.expect("release the row");
    });

    let stuck = app.worker.try_process_batch(sale).await;
    assert!(
        stuck.is_err(),
        "the write waited for the row past its lease: {stuck:?}"
    );
    assert_eq!(
        app.queue_stats(sale).await,
        QueueStats {
            waiting: 1,
            in_flight: 0,
            dead: 0
        },
        "the batch is not back on the queue"
    );

    release.await.expect("release");
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.failed), (1, 0));
    assert_eq!(app.sold(sale).await, 1);
}
