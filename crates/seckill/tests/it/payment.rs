//! The payment window: an unpaid order is cancelled at its deadline and its
//! unit goes back on sale; paying and cancelling race and exactly one wins;
//! a deadline delivered twice, or again after a crash, gives one unit back.

use std::sync::Arc;
use std::time::Duration;

use seckill_core::config::WorkerSettings;
use seckill_core::domain::OrderJob;
use seckill_core::payment::{self, UnitReturn};
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::store::Deadline;
use seckill_core::worker::{BatchReport, Worker};
use serde_json::Value;
use tokio::sync::Barrier;
use uuid::Uuid;

use crate::helpers::{Options, TestApp, eventually, spawn_app_with};

/// An app whose worker gives `window_secs` to pay, and takes `batch_size` jobs at a time.
async fn app_with_window(window_secs: u64, batch_size: u32) -> TestApp {
    spawn_app_with(Options {
        worker: WorkerSettings {
            payment_window_secs: window_secs,
            batch_size,
            ..WorkerSettings::default()
        },
        ..Options::default()
    })
    .await
}

/// A new sale of `stock` units, and `user`'s confirmed order for one.
async fn confirmed_order(app: &TestApp, stock: i64, user: &str) -> (i64, Uuid) {
    let sale = app.create_sale(stock).await;
    let order = app.buy(sale, user).await;
    app.drain().await;
    (sale, order)
}

/// Make the deadlines of `orders` due now, as if their windows had closed:
/// on PostgreSQL's clock (`pay_by`, which decides) and on the queue's.
async fn make_deadlines_due(app: &TestApp, sale: i64, orders: &[Uuid]) {
    close_windows_in(app, orders, Duration::ZERO).await;
    let mut zadd = redis::cmd("ZADD");
    zadd.arg(&app.keys(sale).deadlines.due).arg("XX");
    for order in orders {
        zadd.arg(0).arg(order.to_string());
    }
    let () = zadd
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("ZADD");
}

/// Set the payment windows of `orders` to close `after` from now, on
/// PostgreSQL's clock (the queue's due times are left as they are).
async fn close_windows_in(app: &TestApp, orders: &[Uuid], after: Duration) {
    sqlx::query("UPDATE orders SET pay_by = now() + make_interval(secs => $2) WHERE id = ANY($1)")
        .bind(orders)
        .bind(after.as_secs_f64())
        .execute(&app.pg)
        .await
        .expect("set pay_by");
}

/// The order's payload as its deadline job carries it.
async fn deadline_job(app: &TestApp, order: Uuid) -> OrderJob {
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

/// Put `order`'s deadline on the queue again, due now: a duplicate delivery.
async fn enqueue_deadline_again(app: &TestApp, sale: i64, order: Uuid) -> u64 {
    let job = deadline_job(app, order).await;
    Queue::new(app.keys(sale).deadlines)
        .enqueue(
            &mut app.redis_conn().await,
            &[(&order.to_string(), &job.to_payload())],
            Duration::ZERO,
        )
        .await
        .expect("enqueue")
}

/// Run the sale's due deadlines until a step's report satisfies `done`
/// (the deadline has passed and was handled).
async fn run_deadlines_until(app: &TestApp, sale: i64, done: fn(&BatchReport) -> bool) {
    eventually(Duration::from_secs(20), "the deadline to pass", || async {
        let report = app.worker.try_process_deadlines(sale).await.expect("step");
        done(&report)
    })
    .await;
}

/// Buy a unit that has just come back on sale. The app instance trusts its
/// own "sold out" flag for a moment (SECKILL_SOLD_OUT_REFRESH_MS), so the
/// first tries may still be told "sold out".
async fn buy_once_back_on_sale(app: &TestApp, sale: i64, user: &str) -> Uuid {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let response = app.purchase(sale, user).await;
        if response.status() == 202 {
            let body: Value = response.json().await.expect("JSON");
            return Uuid::parse_str(body["order_id"].as_str().expect("an id")).expect("a UUID");
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the returned unit never went back on sale"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status_of(app: &TestApp, order: Uuid) -> String {
    app.order(order).await["status"]
        .as_str()
        .expect("a status")
        .to_owned()
}

async fn error_code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn an_unpaid_order_is_cancelled_at_its_deadline_and_the_buyer_can_buy_again() {
    let app = app_with_window(1, 100).await;
    let (sale, order) = confirmed_order(&app, 1, "ann").await;

    let confirmed = app.order(order).await;
    assert_eq!(confirmed["status"], "confirmed");
    assert!(confirmed["pay_by"].is_string(), "{confirmed}");
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);
    assert_eq!(app.purchase(sale, "bob").await.status(), 409, "sold out");

    let early = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(early.reserved, 0, "the deadline is not due yet");
    assert_eq!(status_of(&app, order).await, "confirmed");

    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    let cancelled = app.order(order).await;
    assert_eq!(cancelled["status"], "cancelled");
    assert!(cancelled.get("pay_by").is_none(), "{cancelled}");
    assert_eq!(app.sold(sale).await, 0, "PostgreSQL took the unit back");
    assert_eq!(app.redis_stock(sale).await, Some(1), "Redis took it back");
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
    assert_eq!(
        error_code(app.pay(order).await).await,
        (409, "payment_window_closed".to_owned())
    );

    // The unit is on sale again, and ann may buy it again.
    let again = buy_once_back_on_sale(&app, sale, "ann").await;
    app.drain().await;
    assert_eq!(status_of(&app, again).await, "confirmed");
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(0));
}

#[tokio::test]
async fn a_paid_order_keeps_its_unit_when_its_deadline_comes() {
    let app = app_with_window(1, 100).await;
    let (sale, order) = confirmed_order(&app, 2, "ann").await;

    let paid = app.pay(order).await;
    assert_eq!(paid.status(), 200);
    let paid: Value = paid.json().await.expect("JSON");
    assert_eq!(paid["status"], "paid");
    assert!(paid.get("pay_by").is_none(), "{paid}");
    let again = app.pay(order).await;
    assert_eq!(again.status(), 200, "paying twice changes nothing");

    run_deadlines_until(&app, sale, |report| report.paid_in_time == 1).await;
    assert_eq!(status_of(&app, order).await, "paid");
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

#[tokio::test]
async fn pay_answers_each_state_an_order_can_be_in() {
    let app = app_with_window(1, 100).await;
    let sale = app.create_sale(1).await;
    for unknown in [Uuid::now_v7().to_string(), "not-a-uuid".to_owned()] {
        let response = app
            .client
            .post(app.url(&format!("/api/orders/{unknown}/pay")))
            .send()
            .await
            .expect("POST");
        assert_eq!(
            error_code(response).await,
            (404, "order_not_found".to_owned())
        );
    }

    let order = app.buy(sale, "ann").await;
    assert_eq!(
        error_code(app.pay(order).await).await,
        (409, "order_pending".to_owned()),
        "not confirmed yet"
    );
    app.drain().await;

    // The window closes on PostgreSQL's clock even before the worker runs
    // the deadline: the order is still confirmed, and can no longer be paid.
    eventually(Duration::from_secs(20), "the window to close", || async {
        sqlx::query_scalar::<_, bool>("SELECT pay_by <= now() FROM orders WHERE id = $1")
            .bind(order)
            .fetch_one(&app.pg)
            .await
            .expect("pay_by")
    })
    .await;
    assert_eq!(
        error_code(app.pay(order).await).await,
        (409, "payment_window_closed".to_owned())
    );
    assert_eq!(status_of(&app, order).await, "confirmed");

    // A rejected order: queued past the stock, behind the purchase path's back.
    let extra = OrderJob {
        order_id: Uuid::now_v7(),
        sale_id: sale,
        user_id: "bob".into(),
    };
    Queue::new(app.keys(sale).queue)
        .enqueue(
            &mut app.redis_conn().await,
            &[(&extra.order_id.to_string(), &extra.to_payload())],
            Duration::ZERO,
        )
        .await
        .expect("enqueue");
    app.drain().await;
    assert_eq!(status_of(&app, extra.order_id).await, "rejected");
    assert_eq!(
        error_code(app.pay(extra.order_id).await).await,
        (409, "order_rejected".to_owned())
    );
}

/// One round of the race: `orders` confirmed orders, each paid over HTTP
/// at the moment two workers (taking one deadline at a time) cancel them.
async fn race_once(app: &TestApp, orders: usize) {
    let sale = app.create_sale(orders as i64).await;
    let mut ids = Vec::with_capacity(orders);
    for i in 0..orders {
        ids.push(app.buy(sale, &format!("racer-{i}")).await);
    }
    app.drain().await;
    // Due now on the queue's clock; on PostgreSQL's, which decides, the
    // windows close a moment after the race starts, so that payments and
    // deadlines meet at the boundary.
    make_deadlines_due(app, sale, &ids).await;
    close_windows_in(app, &ids, Duration::from_millis(30)).await;

    const WORKERS: usize = 2;
    let barrier = Arc::new(Barrier::new(orders + WORKERS));
    let mut payments = Vec::new();
    for &order in &ids {
        let (barrier, client, url) = (
            barrier.clone(),
            app.client.clone(),
            app.url(&format!("/api/orders/{order}/pay")),
        );
        payments.push(tokio::spawn(async move {
            barrier.wait().await;
            let response = client.post(url).send().await.expect("POST pay");
            (order, error_code_or_ok(response).await)
        }));
    }
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let worker = Worker::new(
            app.store.clone(),
            WorkerSettings {
                batch_size: 1,
                ..WorkerSettings::default()
            },
        );
        let barrier = barrier.clone();
        workers.push(tokio::spawn(async move {
            barrier.wait().await;
            while worker
                .try_process_deadlines(sale)
                .await
                .expect("a deadline step")
                .reserved
                > 0
            {}
        }));
    }
    let mut answers = std::collections::HashMap::new();
    for payment in payments {
        let (order, answer) = payment.await.expect("a payment task");
        answers.insert(order, answer);
    }
    for worker in workers {
        worker.await.expect("a worker task");
    }
    // Deadlines that came before their window closed went back on the
    // queue for the time left: run them until none is left.
    eventually(
        Duration::from_secs(20),
        "every deadline handled",
        || async {
            app.drain().await;
            app.deadline_stats(sale).await == QueueStats::default()
        },
    )
    .await;

    let mut paid_users = Vec::new();
    for (i, order) in ids.iter().enumerate() {
        let status = status_of(app, *order).await;
        let answer = &answers[order];
        match status.as_str() {
            "paid" => {
                assert_eq!(answer, "ok", "{order} is paid, but its payment was refused");
                paid_users.push(format!("racer-{i}"));
            }
            "cancelled" => assert_eq!(
                answer, "payment_window_closed",
                "{order} is cancelled, but its payment got {answer}"
            ),
            other => panic!("{order} ended {other}: neither paid nor cancelled"),
        }
    }
    let paid = paid_users.len();
    println!("race: {paid} paid, {} cancelled of {orders}", orders - paid);
    let sold = app.sold(sale).await;
    assert_eq!(sold as usize, paid, "sold counts exactly the paid orders");
    assert_eq!(
        app.redis_stock(sale).await,
        Some((orders - paid) as i64),
        "Redis stock = stock_total - sold"
    );
    let mut buyers = app.redis_buyers(sale).await;
    buyers.sort();
    paid_users.sort();
    assert_eq!(
        buyers, paid_users,
        "only the payers still hold a unit in Redis"
    );
    assert_eq!(app.deadline_stats(sale).await, QueueStats::default());
}

async fn error_code_or_ok(response: reqwest::Response) -> String {
    if response.status() == 200 {
        return "ok".to_owned();
    }
    match error_code(response).await {
        (409, code) => code,
        (status, code) => format!("{code} ({status})"),
    }
}

#[tokio::test]
async fn pay_and_cancel_racing_always_end_with_one_winner_and_consistent_stock() {
    // A long window: the payments are on time, and the deadlines are made
    // due by hand, so each order is a true race between the two.
    let app = app_with_window(600, 100).await;
    for _ in 0..3 {
        race_once(&app, 50).await;
    }
}

#[tokio::test]
async fn a_deadline_delivered_twice_gives_the_unit_back_once() {
    let app = app_with_window(600, 100).await;
    let sale = app.create_sale(2).await;
    let ann = app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    app.drain().await;
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
    make_deadlines_due(&app, sale, &[ann]).await;

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
    assert_eq!(
        app.store.cancel_unpaid(ann).await.expect("cancel"),
        Deadline::Cancelled
    );
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

/// How many sessions of this test's database wait for a lock.
async fn lock_waiters(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(&app.pg)
    .await
    .expect("pg_stat_activity")
}

#[tokio::test]
async fn a_payment_and_a_deadline_queued_on_the_same_row_end_with_the_first_one_winning() {
    // The race made to happen every time: the test holds the order's row
    // lock, lets the payment and the deadline queue up behind it in a
    // chosen order, then lets go. The first in line wins; the second finds
    // the status changed (or the window closed), updates nothing, and does
    // nothing.
    //
    // PostgreSQL's clock decides the window (`pay_by`), so for both to be
    // in time the payment starts before the window closes and the deadline
    // after; the lock queue's order then decides. A deadline that queues
    // first has started after the close, and so has any payment behind it.
    let app = app_with_window(600, 100).await;
    for pay_first in [true, false] {
        let (sale, order) = confirmed_order(&app, 1, "ann").await;
        make_deadlines_due(&app, sale, &[order]).await;
        let window = Duration::from_millis(1_500);
        close_windows_in(&app, &[order], window).await;
        let closes = tokio::time::Instant::now() + window;
        let mut holder = app.pg.begin().await.expect("begin");
        sqlx::query("SELECT 1 FROM orders WHERE id = $1 FOR UPDATE")
            .bind(order)
            .execute(&mut *holder)
            .await
            .expect("lock the row");

        let pay = {
            let request = app
                .client
                .post(app.url(&format!("/api/orders/{order}/pay")));
            async move { request.send().await.expect("POST pay").status().as_u16() }
        };
        let worker = Worker::new(app.store.clone(), WorkerSettings::default());
        let cancel = async move { worker.try_process_deadlines(sale).await.expect("a step") };
        let (pay, cancel) = if pay_first {
            let pay = tokio::spawn(pay);
            eventually(Duration::from_secs(20), "the payment to wait", || async {
                lock_waiters(&app).await == 1
            })
            .await;
            assert!(
                tokio::time::Instant::now() < closes,
                "the payment came too late"
            );
            tokio::time::sleep_until(closes + Duration::from_millis(50)).await;
            (pay, tokio::spawn(cancel))
        } else {
            tokio::time::sleep_until(closes + Duration::from_millis(50)).await;
            let cancel = tokio::spawn(cancel);
            eventually(Duration::from_secs(20), "the deadline to wait", || async {
                lock_waiters(&app).await == 1
            })
            .await;
            (tokio::spawn(pay), cancel)
        };
        if pay_first {
            eventually(Duration::from_secs(20), "both to wait", || async {
                lock_waiters(&app).await == 2
            })
            .await;
        } else {
            // A payment after the close does not even wait for the row: its
            // WHERE clause (`pay_by > now()`) matches nothing.
            tokio::time::timeout(Duration::from_secs(5), async {
                while !pay.is_finished() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("a late payment is refused without waiting for the row");
            assert_eq!(lock_waiters(&app).await, 1, "the deadline still waits");
        }
        holder.rollback().await.expect("let go of the row");

        let (pay, cancel) = (pay.await.expect("pay"), cancel.await.expect("cancel"));
        if pay_first {
            assert_eq!((pay, cancel.cancelled, cancel.paid_in_time), (200, 0, 1));
            assert_eq!(status_of(&app, order).await, "paid");
            assert_eq!(app.sold(sale).await, 1);
            assert_eq!(app.redis_stock(sale).await, Some(0));
        } else {
            assert_eq!((pay, cancel.cancelled), (409, 1));
            assert_eq!(status_of(&app, order).await, "cancelled");
            assert_eq!(app.sold(sale).await, 0);
            assert_eq!(app.redis_stock(sale).await, Some(1));
        }
    }
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
    let job = deadline_job(&app, ann).await;
    let returned = payment::return_unit(&mut conn, &keys, &job)
        .await
        .expect("return");
    assert_eq!(returned, UnitReturn::Returned { stock_left: -2 });
    assert!(app.redis_buyers(sale).await.is_empty());
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
    tokio::time::sleep(Duration::from_millis(200)).await;
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
    close_windows_in(&app, &[ann], Duration::ZERO).await;

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
    make_deadlines_due(&app, sale, &[ann]).await;
    close_windows_in(&app, &[ann], Duration::from_secs(1)).await;
    let early = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!((early.not_due, early.cancelled), (1, 0));
    assert_eq!(status_of(&app, ann).await, "confirmed");
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    assert_eq!(status_of(&app, ann).await, "cancelled");
    assert_eq!(app.redis_stock(sale).await, Some(1));
}
