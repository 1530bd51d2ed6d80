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
    app_with_window, close_windows_in, confirmed_order, error_code, lock_waiters,
    make_deadlines_due, status_of,
};

/// One round of the race: `orders` confirmed orders sharing one deadline,
/// each paid over HTTP at the moment that deadline cancels the unpaid ones
/// in one statement (two workers watching for it, a step at a time).
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
    close_windows_in(
        app,
        sale,
        &ids,
        Duration::from_millis(30),
        Some(Duration::ZERO),
    )
    .await;

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
    // The workers ask for the deadline until one of them has run it: it
    // comes before the window closes, goes back for the time left, and
    // runs as soon as it is due, while the payments are on their way.
    let ran = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let worker = Worker::new(
            app.store.clone(),
            WorkerSettings {
                batch_size: 1,
                ..WorkerSettings::default()
            },
        );
        let (barrier, ran) = (barrier.clone(), ran.clone());
        workers.push(tokio::spawn(async move {
            barrier.wait().await;
            let give_up = tokio::time::Instant::now() + Duration::from_secs(20);
            while !ran.load(std::sync::atomic::Ordering::SeqCst)
                && tokio::time::Instant::now() < give_up
            {
                let step = worker.try_process_deadlines(sale).await;
                if step.expect("a deadline step").passed > 0 {
                    ran.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
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
async fn a_payment_and_a_deadline_queued_on_the_same_row_end_with_the_first_one_winning() {
    // The race made to happen every time: the test holds the order's row
    // lock, lets the payment and the deadline queue up behind it in a
    // chosen order, then lets go. The first in line wins; the second finds
    // the status changed (or the window closed), updates nothing, and does
    // nothing.
    let app = app_with_window(600, 100).await;
    for pay_first in [true, false] {
        // A payment queues first only if it starts before the window
        // closes: a round whose payment came later (a slow machine) is
        // played again, with a window twice as long.
        let mut window = Duration::from_millis(500);
        while !queued_on_a_held_row(&app, pay_first, window).await {
            window *= 2;
            assert!(
                window <= Duration::from_secs(60),
                "no payment reached the row within {window:?}"
            );
        }
    }
}

/// One round: an order whose window closes `window` from now (or has
/// closed, for a deadline first), its row held by the test while the
/// payment and the deadline queue behind it in the chosen order; then let
/// go, and the first one's outcome checked. False if the payment came too
/// late to queue in time (nothing is checked then).
async fn queued_on_a_held_row(app: &TestApp, pay_first: bool, window: Duration) -> bool {
    // PostgreSQL's clock decides the window (`pay_by`), so for both to be
    // in time the payment starts before the window closes and the deadline
    // after; the lock queue's order then decides. A deadline that queues
    // first has started after the close, and so has any payment behind it.
    let (sale, order) = confirmed_order(app, 1, "ann").await;
    make_deadlines_due(app, sale, &[order]).await;
    if pay_first {
        close_windows_in(app, sale, &[order], window, Some(Duration::ZERO)).await;
    }
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
        // It waits for the row only if its window was still open when it
        // started (`pay_by > now()`); one that came too late is refused at
        // once, without waiting.
        eventually(
            Duration::from_secs(20),
            "the payment to wait or end",
            || async { lock_waiters(app).await == 1 || pay.is_finished() },
        )
        .await;
        if lock_waiters(app).await == 0 {
            holder.rollback().await.expect("let go of the row");
            assert_eq!(pay.await.expect("pay"), 409, "a late payment");
            return false;
        }
        // The deadline starts once the window has closed, on PostgreSQL's clock.
        eventually(Duration::from_secs(120), "the window to close", || async {
            sqlx::query_scalar::<_, bool>("SELECT pay_by <= now() FROM orders WHERE id = $1")
                .bind(order)
                .fetch_one(&app.pg)
                .await
                .expect("pay_by")
        })
        .await;
        let cancel = tokio::spawn(cancel);
        eventually(Duration::from_secs(20), "both to wait", || async {
            lock_waiters(app).await == 2
        })
        .await;
        (pay, cancel)
    } else {
        let cancel = tokio::spawn(cancel);
        eventually(Duration::from_secs(20), "the deadline to wait", || async {
            lock_waiters(app).await == 1
        })
        .await;
        let pay = tokio::spawn(pay);
        // A payment after the close does not even wait for the row: its
        // WHERE clause (`pay_by > now()`) matches nothing.
        eventually(
            Duration::from_secs(20),
            "a late payment to be refused without waiting for the row",
            || async { pay.is_finished() },
        )
        .await;
        assert_eq!(lock_waiters(app).await, 1, "the deadline still waits");
        (pay, cancel)
    };
    holder.rollback().await.expect("let go of the row");

    let (pay, cancel) = (pay.await.expect("pay"), cancel.await.expect("cancel"));
    if pay_first {
        assert_eq!((pay, cancel.cancelled, cancel.passed), (200, 0, 1));
        assert_eq!(status_of(app, order).await, "paid");
        assert_eq!(app.sold(sale).await, 1);
        assert_eq!(app.redis_stock(sale).await, Some(0));
    } else {
        assert_eq!((pay, cancel.cancelled), (409, 1));
        assert_eq!(status_of(app, order).await, "cancelled");
        assert_eq!(app.sold(sale).await, 0);
        assert_eq!(app.redis_stock(sale).await, Some(1));
    }
    true
}
