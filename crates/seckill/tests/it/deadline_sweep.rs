//! The sweep that puts back the payment deadlines Redis lost
//! (`worker/sweep.rs`): on a worker's first pass, not on every pass, one
//! worker at a time; and the orders it leaves alone, those confirmed before
//! payment windows existed (no `pay_by`), which are never paid nor
//! cancelled. (That the first pass's sweep puts a lost deadline back and
//! the order is then cancelled is in `payment_deadline.rs`.)

use std::time::Duration;

use seckill_core::config::WorkerSettings;
use seckill_core::lock::RedisLock;
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::worker::Worker;
use uuid::Uuid;

use crate::helpers::{TestApp, drain, spawn_app};
use crate::payment::confirmed_order;

/// Forget the sale's payment deadlines, as a Redis restarted without
/// persistence has.
async fn lose_deadlines(app: &TestApp, sale: i64) {
    let deadlines = app.keys(sale).deadlines;
    let _: i64 = redis::cmd("DEL")
        .arg(&deadlines.all()[..])
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("DEL");
}

fn new_worker(app: &TestApp) -> Worker {
    Worker::new(app.store.clone(), WorkerSettings::default())
}

#[tokio::test]
async fn a_worker_sweeps_on_its_first_pass_not_on_the_next_and_not_while_another_sweeps() {
    let app = spawn_app().await;
    let (sale, _ann) = confirmed_order(&app, 2, "ann").await;
    lose_deadlines(&app, sale).await;

    // Another worker is sweeping right now: it holds the sweep lock
    // (`keys::sweep_lock`). A worker starting meanwhile skips its turn.
    let prefix = &app.scratch.prefix;
    let sweep_lock = RedisLock::new(
        format!("{prefix}:{{sweep}}:lock"),
        format!("{prefix}:{{sweep}}:fence"),
        Duration::from_secs(30),
    );
    let mut conn = app.redis_conn().await;
    let sweeping = sweep_lock
        .try_acquire(&mut conn)
        .await
        .expect("try")
        .expect("the sweep lock is free");
    let skipped = new_worker(&app);
    assert_eq!(skipped.run_once().await.expect("a pass").swept, 0);
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
    sweeping.release(&mut conn).await.expect("release");

    // A worker that finds it free sweeps on its first pass.
    let sweeper = new_worker(&app);
    assert_eq!(sweeper.run_once().await.expect("a pass").swept, 1);
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);

    // Lost again at once: neither worker sweeps on its next pass (the
    // next sweep is a minute away, `worker::SWEEP_EVERY`), not even the
    // one that skipped its turn.
    lose_deadlines(&app, sale).await;
    for worker in [&sweeper, &skipped] {
        assert_eq!(worker.run_once().await.expect("a pass").swept, 0);
    }
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

#[tokio::test]
async fn an_order_without_a_payment_deadline_cannot_be_paid_and_is_never_cancelled() {
    let app = spawn_app().await;
    let (sale, ann) = confirmed_order(&app, 2, "ann").await;
    // As an order confirmed before the payment-window migration: no
    // `pay_by`, and no deadline job.
    sqlx::query("UPDATE orders SET pay_by = NULL WHERE id = $1")
        .bind(ann)
        .execute(&app.pg)
        .await
        .expect("clear pay_by");
    lose_deadlines(&app, sale).await;

    let order = app.order(ann).await;
    assert_eq!(order["status"], "confirmed");
    assert!(order["pay_by"].is_null(), "{order}");
    let paid = app.pay(ann).await;
    assert_eq!(paid.status(), 409);
    let body: serde_json::Value = paid.json().await.expect("a JSON error");
    assert_eq!(body["error"], "payment_window_closed");

    // A sweep queues no deadline for it.
    let report = drain(&new_worker(&app)).await;
    assert_eq!((report.swept, report.cancelled), (0, 0));
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
    // A deadline job for it all the same (one queued before the
    // migration) cancels nothing, and is done with.
    queue_deadline_now(&app, sale, ann).await;
    let report = app
        .worker
        .try_process_deadlines(sale)
        .await
        .expect("a step");
    assert_eq!(report.cancelled, 0);
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());

    assert_eq!(app.order(ann).await["status"], "confirmed");
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}

/// Queue `order`'s deadline job, due now.
async fn queue_deadline_now(app: &TestApp, sale: i64, order: Uuid) {
    let job = seckill_core::domain::OrderJob {
        order_id: order,
        sale_id: sale,
        user_id: "ann".into(),
    };
    let added = Queue::new(app.keys(sale).deadlines)
        .enqueue(
            &mut app.redis_conn().await,
            &[(&order.to_string(), &job.to_payload())],
            Duration::ZERO,
        )
        .await
        .expect("enqueue");
    assert_eq!(added, 1);
}
