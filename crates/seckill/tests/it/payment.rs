//! The payment window: an unpaid order is cancelled at its deadline and its
//! unit goes back on sale, a paid order keeps its unit, and the pay API
//! answers each state an order can be in. Paying and cancelling racing is
//! in `payment_race.rs`; deadlines that come twice, early, or after a
//! crash, in `payment_deadline.rs`.

use std::time::Duration;

use chrono::{DateTime, Utc};
use seckill_core::config::WorkerSettings;
use seckill_core::domain::{DeadlineJob, OrderJob};
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::worker::BatchReport;
use serde_json::Value;
use uuid::Uuid;

use crate::helpers::{Options, TestApp, eventually, spawn_app_with};

/// An app whose worker gives `window_secs` to pay, and takes `batch_size` jobs at a time.
pub async fn app_with_window(window_secs: u64, batch_size: u32) -> TestApp {
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
pub async fn confirmed_order(app: &TestApp, stock: i64, user: &str) -> (i64, Uuid) {
    let sale = app.create_sale(stock).await;
    let order = app.buy(sale, user).await;
    app.drain().await;
    (sale, order)
}

/// Make the deadline of `orders` (all of sale `sale`) due now, as if
/// their window had closed: on PostgreSQL's clock (`pay_by`, which
/// decides) and on the queue's (see [`close_windows_in`]).
pub async fn make_deadlines_due(app: &TestApp, sale: i64, orders: &[Uuid]) -> DeadlineJob {
    close_windows_in(app, sale, orders, Duration::ZERO, Some(Duration::ZERO)).await
}

/// Set the payment window of `orders` (all of sale `sale`) to close
/// `after` from now, on PostgreSQL's clock: they get a moment of their own,
/// whose deadline job is queued `due` from now on the queue's clock (not
/// at all with `None`: as if Redis lost it). The job of a moment they
/// leave with no order is taken off the queue, as if the worker had queued
/// theirs at the new moment in the first place. Returns the new deadline.
pub async fn close_windows_in(
    app: &TestApp,
    sale: i64,
    orders: &[Uuid],
    after: Duration,
    due: Option<Duration>,
) -> DeadlineJob {
    let left: Vec<DateTime<Utc>> = sqlx::query_scalar(
        "SELECT DISTINCT pay_by FROM orders WHERE id = ANY($1) AND pay_by IS NOT NULL",
    )
    .bind(orders)
    .fetch_all(&app.pg)
    .await
    .expect("the orders' deadlines");
    let pay_by: DateTime<Utc> = sqlx::query_scalar(
        "UPDATE orders SET pay_by = now() + make_interval(secs => $2) WHERE id = ANY($1)
         RETURNING pay_by",
    )
    .bind(orders)
    .bind(after.as_secs_f64())
    .fetch_one(&app.pg)
    .await
    .expect("set pay_by");
    let queue = Queue::new(app.keys(sale).deadlines);
    let mut conn = app.redis_conn().await;
    for moment in left {
        let others: i64 =
            sqlx::query_scalar("SELECT count(*) FROM orders WHERE sale_id = $1 AND pay_by = $2")
                .bind(sale)
                .bind(moment)
                .fetch_one(&app.pg)
                .await
                .expect("count the moment's orders");
        let id = DeadlineJob::new(sale, moment).id();
        if others == 0
            && let Some(due_ms) = queue.due_at(&mut conn, &id).await.expect("ZSCORE")
        {
            queue
                .dequeue(&mut conn, &id, due_ms)
                .await
                .expect("dequeue");
        }
    }
    let deadline = DeadlineJob::new(sale, pay_by);
    if let Some(due) = due {
        let job = (deadline.id(), deadline.to_payload());
        queue
            .enqueue(&mut conn, &[(&job.0, &job.1)], due)
            .await
            .expect("enqueue the deadline");
    }
    deadline
}

/// Run the sale's due deadlines until a step's report satisfies `done`
/// (the deadline has passed and was handled).
pub async fn run_deadlines_until(app: &TestApp, sale: i64, done: fn(&BatchReport) -> bool) {
    eventually(Duration::from_secs(20), "the deadline to pass", || async {
        let report = app.worker.try_process_deadlines(sale).await.expect("step");
        done(&report)
    })
    .await;
}

/// Buy a unit that has just come back on sale. The app instance trusts its
/// own "sold out" flag for a moment (SECKILL_SOLD_OUT_REFRESH_MS), so the
/// first tries may still be told "sold out".
pub async fn buy_once_back_on_sale(app: &TestApp, sale: i64, user: &str) -> Uuid {
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

/// How many sessions of this test's database wait for a lock (a row
/// another transaction holds): a step known to be stuck behind it, not
/// merely not there yet.
pub async fn lock_waiters(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock'",
    )
    .fetch_one(&app.pg)
    .await
    .expect("pg_stat_activity")
}

pub async fn status_of(app: &TestApp, order: Uuid) -> String {
    app.order(order).await["status"]
        .as_str()
        .expect("a status")
        .to_owned()
}

pub async fn error_code(response: reqwest::Response) -> (u16, String) {
    let status = response.status().as_u16();
    let body: Value = response.json().await.expect("JSON");
    (
        status,
        body["error"].as_str().unwrap_or_default().to_owned(),
    )
}

#[tokio::test]
async fn an_unpaid_order_is_cancelled_at_its_deadline_and_the_buyer_can_buy_again() {
    // A window far longer than the test, closed by hand below: the checks
    // made while it is open cannot be overtaken by its close.
    let app = app_with_window(600, 100).await;
    let (sale, order) = confirmed_order(&app, 1, "ann").await;

    let confirmed = app.order(order).await;
    assert_eq!(confirmed["status"], "confirmed");
    assert!(confirmed["pay_by"].is_string(), "{confirmed}");
    assert_eq!(app.deadline_stats(sale).await.waiting, 1);
    assert_eq!(app.purchase(sale, "bob").await.status(), 409, "sold out");

    let early = app.worker.try_process_deadlines(sale).await.expect("step");
    assert_eq!(early.reserved, 0, "the deadline is not due yet");
    assert_eq!(status_of(&app, order).await, "confirmed");

    make_deadlines_due(&app, sale, &[order]).await;
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
    // Paid well inside a long window, which is then closed by hand.
    let app = app_with_window(600, 100).await;
    let (sale, order) = confirmed_order(&app, 2, "ann").await;

    let paid = app.pay(order).await;
    assert_eq!(paid.status(), 200);
    let paid: Value = paid.json().await.expect("JSON");
    assert_eq!(paid["status"], "paid");
    assert!(paid.get("pay_by").is_none(), "{paid}");
    let again = app.pay(order).await;
    assert_eq!(again.status(), 200, "paying twice changes nothing");
    let again: Value = again.json().await.expect("JSON");
    assert_eq!(again, paid, "paying twice changes nothing");
    assert_eq!(app.sold(sale).await, 1);

    make_deadlines_due(&app, sale, &[order]).await;
    run_deadlines_until(&app, sale, |report| report.passed == 1).await;
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
