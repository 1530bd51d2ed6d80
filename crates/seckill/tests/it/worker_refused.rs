//! What the worker cannot write, and what becomes of it: orders PostgreSQL
//! refuses (beyond the stock, a second for one buyer) are stored rejected;
//! a job that cannot be decoded, or that PostgreSQL refuses for a reason of
//! its own, is dead-lettered alone; a database that refuses writes for a
//! while, or holds a row past the lease, costs no job an attempt.

use std::collections::HashSet;
use std::time::Duration;

use seckill_core::queue::{Queue, QueueStats};
use uuid::Uuid;

use crate::helpers::{Options, TestApp, eventually, spawn_app, spawn_app_with};
use crate::worker::{confirmed, enqueue_orders, users};

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

/// A write stuck behind a row lock must not outlive its lease: past the
/// lease the queue hands the jobs to another worker, and two writers then
/// race on the same jobs. With a 2 s lease, each statement gets 500 ms and
/// the write 1 s; the row stays locked until the write has given up. The
/// worker gives the batch back uncharged, before its lease ran out (the
/// test watches the lease on Redis' clock meanwhile), and confirms it once
/// the row is free.
#[tokio::test]
async fn a_write_stuck_behind_a_lock_gives_its_batch_back_within_its_lease() {
    let app = spawn_app_with(Options {
        worker: seckill_core::config::WorkerSettings {
            lease_ms: 2_000,
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

    // While the write is stuck: a job still in flight past its lease's
    // end is a job another worker may be writing too.
    let inflight = app.keys(sale).queue.inflight;
    let mut conn = app.redis_conn().await;
    let lease_watch = async {
        loop {
            let (leases, (secs, micros)): (Vec<(String, f64)>, (u64, u64)) = redis::pipe()
                .atomic()
                .cmd("ZRANGE")
                .arg(&inflight)
                .arg(0)
                .arg(-1)
                .arg("WITHSCORES")
                .cmd("TIME")
                .query_async(&mut conn)
                .await
                .expect("ZRANGE and TIME");
            let now_ms = (secs * 1_000 + micros / 1_000) as f64;
            if let Some((job, ends)) = leases.iter().find(|(_, ends)| *ends <= now_ms) {
                panic!(
                    "job {job} is still in flight {} ms past its lease",
                    now_ms - ends
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    let stuck = tokio::select! {
        stuck = tokio::time::timeout(Duration::from_secs(30), app.worker.try_process_batch(sale)) => {
            stuck.expect("the write waited for the row as long as it was held")
        }
        () = lease_watch => unreachable!("the watch ends only by panicking"),
    };
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

    blocker.rollback().await.expect("release the row");
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.failed), (1, 0));
    assert_eq!(app.sold(sale).await, 1);
}
