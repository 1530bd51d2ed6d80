//! Payment deadlines as they really come: twice, again after a worker died
//! half-way, before PostgreSQL's window has closed, during a reload, or
//! swept back after Redis lost them. Each gives back one unit at most (to
//! an oversold stock too), never a unit bought again; and an order
//! redelivered after its commit still gets its deadline.

use std::time::Duration;

use seckill_core::config::WorkerSettings;
use seckill_core::domain::{DeadlineJob, OrderJob};
use seckill_core::keys::QueueKeys;
use seckill_core::payment::{self, UnitReturn};
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::store::Deadline;
use seckill_core::worker::Worker;
use uuid::Uuid;

use crate::helpers::{TestApp, eventually};
use crate::payment::{
    app_with_window, buy_once_back_on_sale, close_windows_in, confirmed_order, lock_waiters,
    make_deadlines_due, run_deadlines_until, status_of,
};

/// The order's payload as its order job carries it.
async fn order_job(app: &TestApp, order: Uuid) -> OrderJob {
    let stored = app
        .store
        .stored_order(order)
        .await
        .expect("read")
        .expect("a stored order");
    OrderJob {
        order_id: order,
        sale_id: stored.sale_id,
        user_id: stored.user_id,
    }
}

/// Put the deadline of `order`'s moment on the queue again, due now: a
/// duplicate delivery.
async fn enqueue_deadline_again(app: &TestApp, sale: i64, order: Uuid) -> u64 {
    let pay_by = sqlx::query_scalar("SELECT pay_by FROM orders WHERE id = $1")
        .bind(order)
        .fetch_one(&app.pg)
        .await
        .expect("the order's deadline");
    let deadline = DeadlineJob::new(sale, pay_by);
    enqueue(
        app,
        app.keys(sale).deadlines,
        &deadline.id(),
        &deadline.to_payload(),
    )
    .await
}

/// Put `order`'s job on its sale's order queue again, due now, as a
/// redelivery brings it.
async fn enqueue_order_again(app: &TestApp, sale: i64, order: Uuid) -> u64 {
    let job = order_job(app, order).await;
    enqueue(
        app,
        app.keys(sale).queue,
        &order.to_string(),
        &job.to_payload(),
    )
    .await
}

async fn enqueue(app: &TestApp, queue: QueueKeys, id: &str, payload: &str) -> u64 {
    Queue::new(queue)
        .enqueue(
            &mut app.redis_conn().await,
            &[(id, payload)],
            Duration::ZERO,
        )
        .await
        .expect("enqueue")
}

#[tokio::test]
async fn a_deadline_delivered_twice_gives_the_unit_back_once() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(2).await;
    let ann = app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    app.drain().await;
    // (bob's order keeps the deadline they shared: his stays in its window.)
    make_deadlines_due(&app, sale, &[ann]).await;

    let first = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(first.cancelled, 1);
    assert_eq!(app.redis_stock(sale).await, Some(1));

    // The same deadline again, as a duplicate delivery would bring it.
    assert_eq!(enqueue_deadline_again(&app, sale, ann).await, 1);
    let second = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!((second.reserved, second.cancelled), (1, 0));
    assert_eq!(
        app.redis_stock(sale).await,
        Some(1),
        "one unit back, not two"
    );
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_buyers(sale).await, ["bob"]);
}

#[tokio::test]
async fn a_worker_that_died_between_the_cancel_and_the_unit_return_returns_it_on_redelivery() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(1).await;
    let ann = app.buy(sale, "ann").await;
    app.drain().await;
    let deadline = make_deadlines_due(&app, sale, &[ann]).await;

    // The dying worker reserves the deadline with a short lease, commits
    // the cancellation in PostgreSQL, and dies before the Redis half.
    let deadlines = Queue::new(app.keys(sale).deadlines);
    let taken = deadlines
        .reserve(
            &mut app.redis_conn().await,
            10,
            Duration::from_millis(20),
            5,
        )
        .await
        .expect("reserve");
    assert_eq!(taken.jobs.len(), 1);
    assert!(matches!(
        app.store
            .cancel_unpaid(sale, deadline.pay_by())
            .await
            .expect("cancel"),
        Deadline::Passed { cancelled: 1, .. }
    ));
    assert_eq!(app.redis_stock(sale).await, Some(0), "not returned yet");
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The next worker gets the job again: PostgreSQL has nothing left to
    // change, and the unit still comes back in Redis.
    let report = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!((report.reserved, report.cancelled), (1, 0));
    assert_eq!(report.reclaimed, 1);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());

    // ann buys again; a late duplicate of the old deadline must not take
    // her new unit away.
    let again = buy_once_back_on_sale(&app, sale, "ann").await;
    enqueue_deadline_again(&app, sale, ann).await;
    app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(app.redis_stock(sale).await, Some(0));
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
    app.drain().await;
    assert_eq!(status_of(&app, again).await, "confirmed");
    assert_eq!(app.sold(sale).await, 1);
}

#[tokio::test]
async fn an_order_redelivered_after_its_commit_still_gets_its_payment_deadline() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(1).await;
    app.buy(sale, "ann").await;
    // A worker reserves the order, commits it, and dies before queueing
    // its deadline (and before the ack).
    let taken = app.reserve_as_a_dying_worker(app.keys(sale).queue).await;
    app.commit_as_a_dying_worker(&taken).await;
    assert_eq!(app.deadline_stats(sale).await.waiting, 0);
    tokio::time::sleep(Duration::from_millis(50)).await;

    let report = app.drain().await;
    assert_eq!(report.redelivered, 1);
    assert_eq!(
        app.deadline_stats(sale).await.waiting,
        1,
        "the deadline is queued"
    );
    // Due when the window closes, not now.
    let early = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(early.reserved, 0);
}

/// A failover can lose, with the last writes before it, a cancellation's
/// unit return and the ack of the order's job. The job comes again, finds
/// its order cancelled, and makes sure the unit came back: once, however
/// often the job comes.
#[tokio::test]
async fn an_order_job_redelivered_after_its_cancellation_makes_sure_the_unit_came_back_once() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(1).await;
    let ann = app.buy(sale, "ann").await;
    // A worker commits the order and its ack is lost.
    let taken = app.reserve_as_a_dying_worker(app.keys(sale).queue).await;
    app.commit_as_a_dying_worker(&taken).await;
    // The window closes and the order is cancelled in PostgreSQL; the
    // unit's return in Redis is lost with the failover.
    let deadline = close_windows_in(&app, sale, &[ann], Duration::ZERO, None).await;
    assert!(matches!(
        app.store
            .cancel_unpaid(sale, deadline.pay_by())
            .await
            .expect("cancel"),
        Deadline::Passed { cancelled: 1, .. }
    ));
    assert_eq!(app.redis_stock(sale).await, Some(0), "the return was lost");
    tokio::time::sleep(Duration::from_millis(50)).await;

    // The order job again: its order is cancelled, and a deadline due
    // at once gives the unit back (the drain runs it).
    app.drain().await;
    eventually(
        Duration::from_secs(20),
        "the unit back in Redis",
        || async {
            app.worker.try_process_deadlines(sale).await.expect("step");
            app.redis_stock(sale).await == Some(1)
        },
    )
    .await;
    assert!(app.redis_buyers(sale).await.is_empty());

    // The order's job once more: nothing more comes back.
    enqueue_order_again(&app, sale, ann).await;
    app.drain().await;
    for _ in 0..3 {
        app.worker.try_process_deadlines(sale).await.expect("step");
    }
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
    assert_eq!(
        app.redis_stock(sale).await,
        Some(1),
        "one unit back, not two"
    );
    assert_eq!(app.sold(sale).await, 0);
}

/// A unit given back to a sale whose Redis stock is below zero (oversold
/// by the `naive` strategy) is a unit given back, not "sale not loaded".
#[tokio::test]
async fn a_unit_given_back_to_an_oversold_stock_is_counted_as_returned() {
    let app = app_with_window(900, 10).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let () = redis::cmd("SET")
        .arg(&keys.stock)
        .arg(-3)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let job = order_job(&app, ann).await;
    let returned = payment::return_unit(&mut conn, &keys, &job)
        .await
        .expect("return");
    assert_eq!(returned, UnitReturn::Returned { stock_left: -2 });
    assert!(app.redis_buyers(sale).await.is_empty());
}

/// The lab's broken strategies hold a buyer without naming an order (an
/// empty entry: their buyer's two requests can both win, and either
/// order may be the one PostgreSQL keeps). The return of the cancelled
/// one gives the unit back, once; a hold naming another order keeps it.
#[tokio::test]
async fn a_hold_that_names_no_order_is_given_back_by_the_cancelled_one() {
    let app = app_with_window(900, 10).await;
    let (sale, ann) = confirmed_order(&app, 2, "ann").await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let job = order_job(&app, ann).await;
    // ann's hold names `held`, then her order's unit is given back.
    let mut return_held_as = async |held: String| {
        let () = redis::cmd("HSET")
            .arg(&keys.holds)
            .arg("ann")
            .arg(held)
            .query_async(&mut conn)
            .await
            .expect("HSET");
        payment::return_unit(&mut conn, &keys, &job)
            .await
            .expect("return")
    };
    assert_eq!(
        return_held_as(Uuid::now_v7().to_string()).await,
        UnitReturn::AlreadyReturned,
        "another order's hold"
    );
    assert_eq!(
        return_held_as(String::new()).await,
        UnitReturn::Returned { stock_left: 2 }
    );
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(
        return_held_as(String::new()).await,
        UnitReturn::AlreadyReturned,
        "once"
    );
}

/// The interleaving of a reload and a cancellation: a page is loading the
/// sale from PostgreSQL (it read ann's order confirmed) when the deadline
/// comes to cancel it. The load holds the sale's row until its write to
/// Redis is done, so the cancellation waits, and then gives the unit back
/// in the Redis the load wrote. Redis must end with PostgreSQL's figures:
/// the unit back, ann free to buy.
#[tokio::test]
async fn a_cancellation_during_a_reload_does_not_lose_the_unit() {
    let app = app_with_window(900, 10).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    // Redis restarted without persistence: the sale's figures are gone.
    app.wipe_sale_from_redis(sale).await;
    // A page starts loading the sale: it reads PostgreSQL now...
    let loading = app.begin_load(sale).await;
    assert_eq!(
        (loading.loadable.stock_left, loading.loadable.buyers.clone()),
        (0, vec!["ann".to_owned()])
    );
    // ...the deadline passes and a worker comes to cancel ann's order...
    make_deadlines_due(&app, sale, &[ann]).await;
    let worker = Worker::new(app.store.clone(), app.worker_settings.clone());
    let cancel = tokio::spawn(async move { worker.try_process_deadlines(sale).await });
    // It waits for the sale's row, which the load holds (a cancellation
    // that did not wait would end without ever waiting here).
    eventually(
        Duration::from_secs(20),
        "the cancellation to wait for the load's row",
        || async { lock_waiters(&app).await == 1 },
    )
    .await;
    assert!(
        !cancel.is_finished(),
        "the cancellation did not wait for the load"
    );
    // ...and the page's write lands first.
    assert!(app.finish_load(loading).await);
    let report = cancel.await.expect("join").expect("step");
    assert_eq!(report.cancelled, 1);
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(
        app.redis_stock(sale).await,
        Some(1),
        "the returned unit was lost"
    );
    assert!(
        app.redis_buyers(sale).await.is_empty(),
        "ann is still a buyer in Redis"
    );
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

/// Redis lost the payment deadlines (a restart without persistence): the
/// sweep a worker runs on its first pass puts them back, and the unpaid
/// order is cancelled, its unit back on sale.
#[tokio::test]
async fn deadlines_redis_lost_are_swept_back_and_the_unpaid_order_is_cancelled() {
    let app = app_with_window(900, 10).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);
    let deadlines = app.keys(sale).deadlines;
    let () = redis::cmd("DEL")
        .arg(&deadlines.all()[..])
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("DEL");
    close_windows_in(&app, sale, &[ann], Duration::ZERO, None).await;

    // A worker starts: its first pass sweeps.
    let worker = Worker::new(app.store.clone(), WorkerSettings::default());
    let report = crate::helpers::drain(&worker).await;
    assert_eq!((report.swept, report.cancelled), (1, 1));
    assert_eq!(status_of(&app, ann).await, "cancelled");
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert!(app.redis_buyers(sale).await.is_empty());
}

/// PostgreSQL's clock alone says when a window closes: a deadline job that
/// the queue (on Redis' clock) hands out early cancels nothing, and runs
/// again once the window has closed.
#[tokio::test]
async fn a_deadline_that_comes_before_the_window_closes_waits_for_it() {
    let app = app_with_window(900, 10).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    // Due on the queue's clock; ten minutes left on PostgreSQL's.
    make_deadlines_due(&app, sale, &[ann]).await;
    let left = Duration::from_secs(600);
    let deadline = close_windows_in(&app, sale, &[ann], left, Some(Duration::ZERO)).await;
    let early = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!((early.not_due, early.cancelled), (1, 0));
    assert_eq!(status_of(&app, ann).await, "confirmed");
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);
    // Back on the queue, due when the window closes: about ten minutes
    // from now on Redis' clock (less the moments this test took).
    let mut conn = app.redis_conn().await;
    let (due, (secs, micros)): (f64, (u64, u64)) = redis::pipe()
        .atomic()
        .cmd("ZSCORE")
        .arg(&app.keys(sale).deadlines.due)
        .arg(deadline.id())
        .cmd("TIME")
        .query_async(&mut conn)
        .await
        .expect("ZSCORE and TIME");
    let due_in = due - (secs * 1_000 + micros / 1_000) as f64;
    let left_ms = left.as_millis() as f64;
    assert!(
        due_in > left_ms - 60_000.0 && due_in <= left_ms,
        "due in {due_in} ms, for a window that closes in {left_ms} ms"
    );
    // The window closes (by hand): the deadline runs, and cancels.
    make_deadlines_due(&app, sale, &[ann]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert_eq!(status_of(&app, ann).await, "cancelled");
    assert_eq!(app.redis_stock(sale).await, Some(1));
}

/// ann's order is cancelled and its unit given back; Redis then loses the
/// sale (its record of returned orders with it); ann buys again; and a late
/// copy of the old order's deadline arrives (a sweep that read the order
/// before it was cancelled, a redelivery). The returned-orders record no
/// longer stops it; ann's entry must: it names her new order, so the old
/// order's return removes nothing and gives nothing back.
#[tokio::test]
async fn a_late_deadline_after_a_wipe_does_not_give_back_a_unit_bought_again() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(2).await;
    let first = app.buy(sale, "ann").await;
    app.drain().await;
    make_deadlines_due(&app, sale, &[first]).await;
    let cancelled = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(cancelled.cancelled, 1);

    app.wipe_all_of_sale(sale).await;
    let again = buy_once_back_on_sale(&app, sale, "ann").await;
    assert_ne!(again, first);
    assert_eq!(app.redis_stock(sale).await, Some(1));

    let late = order_job(&app, first).await;
    let returned = payment::return_unit(&mut app.redis_conn().await, &app.keys(sale), &late)
        .await
        .expect("the late return");
    assert_eq!(returned, UnitReturn::AlreadyReturned);
    assert_eq!(
        app.redis_stock(sale).await,
        Some(1),
        "a unit given back twice"
    );
    assert_eq!(
        app.redis_buyers(sale).await,
        ["ann"],
        "ann's new order lost its buyer"
    );
}

/// The orders one write confirms share their deadline: one job on the
/// queue for all of them, named by their `pay_by`, and when it passes it
/// cancels every one still unpaid and leaves the paid one alone.
#[tokio::test]
async fn the_orders_of_one_batch_share_one_deadline_job_that_cancels_the_unpaid_ones() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(3).await;
    let mut orders = Vec::new();
    for user in ["ann", "bob", "cid"] {
        orders.push(app.buy(sale, user).await);
    }
    assert_eq!(app.drain().await.confirmed, 3);
    let mut moments = Vec::new();
    for order in &orders {
        let stored = app.store.stored_order(*order).await.expect("read");
        moments.push(stored.and_then(|order| order.pay_by).expect("a deadline"));
    }
    moments.dedup();
    assert_eq!(moments.len(), 1, "one transaction, one moment: {moments:?}");
    let (queued, _) = app.deadlines_queued_and_due(sale).await;
    assert_eq!(queued, [DeadlineJob::new(sale, moments[0]).id()]);

    assert_eq!(app.pay(orders[1]).await.status(), 200);
    make_deadlines_due(&app, sale, &orders).await;
    let report = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(
        (report.reserved, report.passed, report.cancelled),
        (1, 1, 2)
    );
    let statuses = [
        status_of(&app, orders[0]).await,
        status_of(&app, orders[1]).await,
        status_of(&app, orders[2]).await,
    ];
    assert_eq!(statuses, ["cancelled", "paid", "cancelled"]);
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(2));
    assert_eq!(app.redis_buyers(sale).await, ["bob"]);
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

/// A deadline job as a version before one job a moment queued it, one per
/// order with the order's payload, still on a Redis that kept its data
/// across the upgrade: it cancels its order's moment once it has passed,
/// and gives the unit back.
#[tokio::test]
async fn a_deadline_job_of_one_order_queued_before_the_upgrade_still_cancels_it() {
    let app = app_with_window(600, 100).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    // The job the worker queued, gone; the one an earlier version queued
    // in its place, due now, for a window closed on PostgreSQL's clock.
    close_windows_in(&app, sale, &[ann], Duration::ZERO, None).await;
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
    let job = order_job(&app, ann).await;
    enqueue(
        &app,
        app.keys(sale).deadlines,
        &ann.to_string(),
        &job.to_payload(),
    )
    .await;

    let report = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!((report.reserved, report.cancelled), (1, 1));
    assert_eq!(status_of(&app, ann).await, "cancelled");
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

/// A step runs one deadline job: a job gives back the unit of every
/// cancelled order of its moment, a batch's worth, and a step must end
/// well inside its lease.
#[tokio::test]
async fn a_deadline_step_runs_one_moment() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(2).await;
    let ann = app.buy(sale, "ann").await;
    let bob = app.buy(sale, "bob").await;
    app.drain().await;
    make_deadlines_due(&app, sale, &[ann]).await;
    make_deadlines_due(&app, sale, &[bob]).await;
    for left in [1, 0] {
        let step = app.worker.try_process_deadlines(sale).await.expect("step");
        assert_eq!((step.reserved, step.cancelled), (1, 1));
        assert_eq!(app.deadline_stats(sale).await.waiting, left);
    }
    assert_eq!(app.redis_stock(sale).await, Some(2));
}

/// A deadline whose cancellation fails in PostgreSQL is not lost: the step
/// fails, the job goes back on the queue with nothing cancelled, and a
/// later step, once PostgreSQL takes it, cancels the order and gives its
/// unit back.
#[tokio::test]
async fn a_deadline_whose_cancellation_fails_goes_back_and_runs_later() {
    let app = app_with_window(600, 100).await;
    let (sale, ann) = confirmed_order(&app, 1, "ann").await;
    make_deadlines_due(&app, sale, &[ann]).await;
    let rename = |from: &str, to: &str| format!("ALTER TABLE {from} RENAME TO {to}");
    sqlx::query(&rename("orders", "orders_away"))
        .execute(&app.pg)
        .await
        .expect("hide the orders");
    let failed = app.worker.try_process_deadlines(sale).await;
    sqlx::query(&rename("orders_away", "orders"))
        .execute(&app.pg)
        .await
        .expect("put the orders back");
    assert!(failed.is_err(), "{failed:?}");
    let stats = app.deadline_stats(sale).await;
    assert_eq!((stats.waiting, stats.in_flight, stats.dead), (1, 0, 0));
    assert_eq!(status_of(&app, ann).await, "confirmed");

    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert_eq!(status_of(&app, ann).await, "cancelled");
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}
