//! Orders: confirmed from the queue, paid, cancelled, found, listed.
//!
//! An order's life, as `migrations/` draws it:
//!
//! ```text
//! (pending, on the Redis queue) -> confirmed -> paid
//!                                            \-> cancelled   (the deadline passed unpaid)
//!                               -> rejected                  (PostgreSQL refused it)
//! ```
//!
//! The writes that take a unit (the worker's confirmation, the `postgres`
//! strategy's purchase) are in `confirm.rs`.
//!
//! [`Store::pay`] and [`Store::cancel_unpaid`] race: the buyer presses Pay
//! at the very moment the deadline job runs. If each read the status first
//! and then wrote, both could read `confirmed`, and the order would end paid
//! *and* its unit back on sale: the sale oversells, and a paying customer
//! gets nothing. So neither reads first. Each is one conditional
//! `UPDATE ... WHERE status = 'confirmed'`, and PostgreSQL decides: the
//! second UPDATE waits for the first one's row lock, then re-checks its
//! WHERE clause against the row the first one committed, finds the status
//! changed, and updates nothing. Whoever updated no row lost.

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use uuid::Uuid;

use super::Store;
use crate::domain::{
    DeadlineJob, Order, OrderJob, OrderStatus, RejectReason, carried, carriers, sale_of,
};
use crate::keys::SaleKeys;
use crate::queue::Queue;

/// How a payment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PayOutcome {
    /// This call paid the order.
    Paid,
    /// The order had been paid before: nothing changed.
    AlreadyPaid,
    /// Too late: the order was cancelled, or its deadline has passed.
    WindowClosed,
    /// PostgreSQL refused the order; it holds no unit to pay for.
    Rejected,
    /// PostgreSQL has no such order (it may still be pending in Redis).
    NotFound,
}

/// What a deadline found in PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Deadline {
    /// Its moment has passed on PostgreSQL's clock: every order of the
    /// sale still unpaid at it is cancelled, `cancelled` of them by this
    /// call. `returns` are all of the moment's cancelled orders, this
    /// call's and an earlier delivery's: each one's unit must be back in
    /// Redis (the return is made once per order, `lua/unit_return.lua`,
    /// so a unit that came back is not given back twice).
    Passed {
        cancelled: usize,
        returns: Vec<OrderJob>,
    },
    /// Not passed on PostgreSQL's clock: the job came early (the queue
    /// runs on Redis' clock), and must run again once `left` has passed.
    NotDue { left: Duration },
}

/// One row of the orders table on a sale's admin page.
#[derive(Debug, sqlx::FromRow)]
pub struct OrderRow {
    pub id: Uuid,
    pub user_id: String,
    pub status: OrderStatus,
    pub reason: Option<RejectReason>,
    pub pay_by: Option<DateTime<Utc>>,
    pub created_at: DateTime<Utc>,
}

/// A sale's orders in PostgreSQL by status, and its `sold` counter.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub(crate) struct OrderCounts {
    pub(crate) sold: i32,
    pub(crate) confirmed: i64,
    pub(crate) paid: i64,
    /// Orders PostgreSQL refused (the unit was not there to give).
    pub(crate) rejected: i64,
    pub(crate) cancelled: i64,
}

impl Store {
    /// The payment deadlines of these orders, each moment once: its
    /// `pay_by` and the time left until it on PostgreSQL's clock (zero
    /// once it has passed), or zero for a moment that has any of these
    /// orders cancelled.
    ///
    /// Why the cancelled ones: a failover can lose both a cancellation's
    /// unit return in Redis and the ack of the order's job, written before
    /// it. The order job comes again and finds its order cancelled; with
    /// no deadline queued, nothing would ever give the unit back, and the
    /// sale would stay one unit short for good. The deadline, due at once,
    /// makes sure: its return is made once per order (`lua/unit_return.lua`),
    /// so a unit that did come back is not given back twice.
    pub(crate) async fn payment_deadlines(
        &self,
        order_ids: &[Uuid],
    ) -> Result<Vec<(DateTime<Utc>, Duration)>, sqlx::Error> {
        let due: Vec<(DateTime<Utc>, i64)> = sqlx::query_as(
            "SELECT pay_by,
                    CASE WHEN bool_or(status = 'cancelled') THEN 0
                         ELSE GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint) END
               FROM orders
              WHERE id = ANY($1) AND pay_by IS NOT NULL AND status IN ('cancelled', 'confirmed')
              GROUP BY pay_by",
        )
        .bind(order_ids)
        .fetch_all(&self.pg)
        .await?;
        Ok(due
            .into_iter()
            .map(|(pay_by, ms)| (pay_by, millis(ms)))
            .collect())
    }

    /// Pay for an order, if its payment window is still open.
    pub(crate) async fn pay(&self, order_id: Uuid) -> anyhow::Result<PayOutcome> {
        // The race with cancel_unpaid is decided here: see the module comment.
        let paid = sqlx::query(
            "UPDATE orders SET status = 'paid', paid_at = now(), updated_at = now()
              WHERE id = $1 AND status = 'confirmed' AND pay_by > now()",
        )
        .bind(order_id)
        .execute(&self.pg)
        .await
        .context("paying an order")?;
        if paid.rows_affected() == 1 {
            tracing::info!(%order_id, "order paid");
            return Ok(PayOutcome::Paid);
        }
        // We lost, or there was nothing to win: say why, without changing anything.
        Ok(match self.status(order_id).await? {
            None => PayOutcome::NotFound,
            Some(OrderStatus::Paid) => PayOutcome::AlreadyPaid,
            Some(OrderStatus::Rejected) => PayOutcome::Rejected,
            // Cancelled, or confirmed with its deadline passed and the deadline
            // job not run yet: either way the window is closed.
            Some(_) => PayOutcome::WindowClosed,
        })
    }

    /// The PostgreSQL half of a deadline: cancel every order of `sale_id`
    /// to be paid by `pay_by` and still unpaid, and take their units out of
    /// `sales.sold`, in one transaction, once `pay_by` has passed. Tests
    /// call it to play a worker that dies right after it.
    pub async fn cancel_unpaid(
        &self,
        sale_id: i64,
        pay_by: DateTime<Utc>,
    ) -> Result<Deadline, sqlx::Error> {
        let mut tx = self.pg.begin().await?;
        // PostgreSQL's clock alone says whether the window has closed, the
        // same clock `pay` asks; every statement below runs on this one
        // `now()` (a transaction's `now()` is its start), so a window that
        // closed in between cannot look open here and closed below.
        // (The time left rounded up: a job that came a fraction of a
        // millisecond early must not be told to come again at once.)
        let (passed, left_ms): (bool, i64) = sqlx::query_as(
            "SELECT $1::timestamptz <= now(),
                    ceil(EXTRACT(EPOCH FROM $1::timestamptz - now()) * 1000)::bigint",
        )
        .bind(pay_by)
        .fetch_one(&mut *tx)
        .await?;
        if !passed {
            tx.rollback().await?;
            return Ok(Deadline::NotDue {
                left: millis(left_ms.max(1)),
            });
        }
        // The race with pay is decided here, an order at a time: see the
        // module comment. `sold` loses the cancelled units in the same
        // statement: it can never count a cancelled order.
        let cancelled: i64 = sqlx::query_scalar(
            "WITH cancelled AS (
                 UPDATE orders SET status = 'cancelled', cancelled_at = now(), updated_at = now()
                  WHERE sale_id = $1 AND pay_by = $2 AND status = 'confirmed' AND pay_by <= now()
                  RETURNING id
             ), returned AS (
                 UPDATE sales SET sold = sold - (SELECT count(*) FROM cancelled)
                  WHERE id = $1 AND EXISTS (SELECT 1 FROM cancelled)
             )
             SELECT count(*) FROM cancelled",
        )
        .bind(sale_id)
        .bind(pay_by)
        .fetch_one(&mut *tx)
        .await?;
        // This statement sees the one above's cancellations (a later
        // statement of the same transaction), and an earlier delivery's.
        let returns: Vec<(Uuid, String)> = sqlx::query_as(
            "SELECT id, user_id FROM orders
              WHERE sale_id = $1 AND pay_by = $2 AND status = 'cancelled'",
        )
        .bind(sale_id)
        .bind(pay_by)
        .fetch_all(&mut *tx)
        .await?;
        tx.commit().await?;
        if cancelled > 0 {
            tracing::info!(sale_id, %pay_by, cancelled, "unpaid orders cancelled");
        }
        Ok(Deadline::Passed {
            cancelled: usize::try_from(cancelled).unwrap_or(0),
            returns: returns
                .into_iter()
                .map(|(order_id, user_id)| OrderJob {
                    order_id,
                    sale_id,
                    user_id,
                })
                .collect(),
        })
    }

    /// Up to `page` payment deadlines that still have unpaid orders, each
    /// a sale and its orders' `pay_by`, the first after `after` in that
    /// order (from the start with `None`), each with the time left until
    /// it (zero once it has passed), on PostgreSQL's clock: what the
    /// sales' deadline queues must hold. The worker's sweep re-queues them
    /// a page at a time, for deadlines Redis lost (index `orders_unpaid`).
    pub async fn unpaid_deadlines(
        &self,
        after: Option<(i64, DateTime<Utc>)>,
        page: i64,
    ) -> anyhow::Result<Vec<(DeadlineJob, Duration)>> {
        let (after_sale, after_pay_by) = after.unzip();
        let rows: Vec<(i64, DateTime<Utc>, i64)> = sqlx::query_as(
            "SELECT sale_id, pay_by,
                    GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint)
               FROM orders
              WHERE status = 'confirmed' AND pay_by IS NOT NULL
                AND ($1::bigint IS NULL OR (sale_id, pay_by) > ($1, $2))
              GROUP BY sale_id, pay_by
              ORDER BY sale_id, pay_by
              LIMIT $3",
        )
        .bind(after_sale)
        .bind(after_pay_by)
        .bind(page)
        .fetch_all(&self.pg)
        .await
        .context("reading the unpaid orders' deadlines")?;
        Ok(rows
            .into_iter()
            .map(|(sale_id, pay_by, left_ms)| (DeadlineJob::new(sale_id, pay_by), millis(left_ms)))
            .collect())
    }

    /// Which of `order_ids` PostgreSQL holds, in any status.
    pub(crate) async fn stored_among(&self, order_ids: &[Uuid]) -> anyhow::Result<Vec<Uuid>> {
        sqlx::query_scalar("SELECT id FROM orders WHERE id = ANY($1)")
            .bind(order_ids)
            .fetch_all(&self.pg)
            .await
            .context("looking for orders")
    }

    /// The order that holds `user_id`'s unit of sale `sale_id` in
    /// PostgreSQL, if any: paid, or confirmed with its payment window still
    /// open on PostgreSQL's clock (one whose window closed is cancelled by
    /// its deadline job, which may wait in a Redis that does not answer).
    /// At most one, by the index `orders_one_per_buyer`, which this reads.
    pub(crate) async fn held_order(
        &self,
        sale_id: i64,
        user_id: &str,
    ) -> anyhow::Result<Option<Uuid>> {
        sqlx::query_scalar(
            "SELECT id FROM orders \
             WHERE sale_id = $1 AND user_id = $2 \
               AND (status = 'paid' OR (status = 'confirmed' AND pay_by > now()))",
        )
        .bind(sale_id)
        .bind(user_id)
        .fetch_optional(&self.pg)
        .await
        .context("looking for the order a buyer holds")
    }

    /// One order as stored in PostgreSQL.
    pub async fn stored_order(&self, order_id: Uuid) -> anyhow::Result<Option<Order>> {
        let row: Option<(i64, String, OrderStatus, Option<DateTime<Utc>>)> =
            sqlx::query_as("SELECT sale_id, user_id, status, pay_by FROM orders WHERE id = $1")
                .bind(order_id)
                .fetch_optional(&self.pg)
                .await
                .context("reading an order")?;
        Ok(row.map(|(sale_id, user_id, status, pay_by)| Order {
            order_id,
            sale_id,
            user_id,
            status,
            pay_by: pay_by.filter(|_| status == OrderStatus::Confirmed),
        }))
    }

    /// An order wherever it is: PostgreSQL, then the queues, then
    /// PostgreSQL again (the worker may move the order from the queue to
    /// PostgreSQL between the first two looks).
    pub async fn find_order(&self, order_id: Uuid) -> anyhow::Result<Option<Order>> {
        if let Some(order) = self.stored_order(order_id).await? {
            return Ok(Some(order));
        }
        if let Some(job) = self.queued_order(order_id).await? {
            return Ok(Some(Order::pending(&job)));
        }
        self.stored_order(order_id).await
    }

    /// An order still on its sale's queue, the sale read from the order's
    /// id (`domain::order_id_for`): one read, on the sale's shard. An id
    /// that names no sale is found once the worker has written it.
    async fn queued_order(&self, order_id: Uuid) -> anyhow::Result<Option<OrderJob>> {
        let Some(sale_id) = sale_of(&order_id) else {
            return Ok(None);
        };
        let mut conn = self.redis().await?;
        self.queued_on(&mut conn, sale_id, order_id).await
    }

    /// An order on a given sale's queue: in a job of its own, or in its
    /// pass's job (`domain::carriers`), both read in one `HMGET`.
    pub(crate) async fn queued_on<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        sale_id: i64,
        order_id: Uuid,
    ) -> anyhow::Result<Option<OrderJob>> {
        let key = self.pass_key().await?;
        let ids = carriers(&order_id, key).map(|id| id.to_string());
        let payloads = Queue::new(SaleKeys::new(&self.prefix, sale_id).queue)
            .payloads(conn, &ids)
            .await
            .context("looking for a queued order")?;
        for payload in payloads.iter().flatten() {
            let orders = carried(payload).context("decoding a queued order")?;
            if let Some(order) = orders.into_iter().find(|o| o.order_id == order_id) {
                return Ok(Some(order));
            }
        }
        Ok(None)
    }

    /// A sale's newest orders, at most `limit`, for its admin page.
    pub async fn orders_of_sale(&self, sale_id: i64, limit: i64) -> anyhow::Result<Vec<OrderRow>> {
        sqlx::query_as(
            "SELECT id, user_id, status, reason, pay_by, created_at FROM orders
              WHERE sale_id = $1 ORDER BY created_at DESC, id DESC LIMIT $2",
        )
        .bind(sale_id)
        .bind(limit)
        .fetch_all(&self.pg)
        .await
        .context("reading a sale's orders")
    }

    /// How many of a sale's orders PostgreSQL holds in each status, and
    /// its `sold`, for the live page. One statement, so the figures are of
    /// one moment: `sold` is the confirmed and paid ones. `None` if there
    /// is no such sale.
    pub(crate) async fn order_counts(&self, sale_id: i64) -> anyhow::Result<Option<OrderCounts>> {
        sqlx::query_as(
            "SELECT s.sold,
                    count(o.id) FILTER (WHERE o.status = 'confirmed') AS confirmed,
                    count(o.id) FILTER (WHERE o.status = 'paid') AS paid,
                    count(o.id) FILTER (WHERE o.status = 'rejected') AS rejected,
                    count(o.id) FILTER (WHERE o.status = 'cancelled') AS cancelled
               FROM sales s LEFT JOIN orders o ON o.sale_id = s.id
              WHERE s.id = $1
              GROUP BY s.id, s.sold",
        )
        .bind(sale_id)
        .fetch_optional(&self.pg)
        .await
        .context("counting a sale's orders")
    }

    async fn status(&self, order_id: Uuid) -> Result<Option<OrderStatus>, sqlx::Error> {
        sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_optional(&self.pg)
            .await
    }
}

/// Milliseconds PostgreSQL counted, as a duration (none if negative).
fn millis(ms: i64) -> Duration {
    Duration::from_millis(u64::try_from(ms).unwrap_or(0))
}
