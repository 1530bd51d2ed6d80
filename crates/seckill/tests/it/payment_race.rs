//! Paying and cancelling racing on the same order: fifty at once behind a
//! barrier, and the race made certain by holding the order's row. Each
//! order ends paid or cancelled, never both, and the pay answer, `sold`
//! and Redis' stock agree with it.

use std::sync::Arc;
use std::time::Duration;

use seckill_core::config::WorkerSettings;
use seckill_core::queue::QueueStats;
use seckill_core::worker::Worker;
use tokio::sync::Barrier;

use crate::helpers::{TestApp, eventually};
use crate::payment::{
    app_with_window, close_windows_in, confirmed_order, error_code, make_deadlines_due, status_of,
};

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
