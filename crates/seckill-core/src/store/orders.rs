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

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use uuid::Uuid;

use super::Store;
use crate::domain::{Order, OrderJob, OrderStatus, RejectReason, sale_of};
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deadline {
    /// This call cancelled the unpaid order and took its unit back from `sold`.
    Cancelled,
    /// The order was cancelled before (a redelivered deadline job).
    AlreadyCancelled,
    /// The buyer paid in time: nothing to do.
    Paid,
    /// The order is rejected, or unknown: nothing to do.
    Nothing,
    /// The order is confirmed but its deadline has not passed on
    /// PostgreSQL's clock: the job came early (the queue runs on Redis'
    /// clock), and must run again once `left` has passed.
    NotDue { left: Duration },
}

impl Deadline {
    /// Whether the unit must be given back in Redis. True for a redelivery
    /// too: the worker that cancelled may have died before the Redis step.
    pub(crate) fn returns_unit(self) -> bool {
        matches!(self, Self::Cancelled | Self::AlreadyCancelled)
    }
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
    /// Time left until the payment deadline of each of these orders that is
    /// confirmed, on PostgreSQL's clock (zero once it has passed), and zero
    /// for each that is cancelled.
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
    ) -> anyhow::Result<HashMap<Uuid, Duration>> {
        let due: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT id, CASE WHEN status = 'cancelled' THEN 0
                        ELSE GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint) END
               FROM orders
              WHERE id = ANY($1)
                AND (status = 'cancelled' OR (status = 'confirmed' AND pay_by IS NOT NULL))",
        )
        .bind(order_ids)
        .fetch_all(&self.pg)
        .await
        .context("reading payment deadlines")?;
        Ok(due
            .into_iter()
            .map(|(id, ms)| (id, Duration::from_millis(u64::try_from(ms).unwrap_or(0))))
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

    /// The PostgreSQL half of a deadline: cancel the order if it is still
    /// unpaid, and take its unit out of `sales.sold`, in one transaction.
    /// Tests call it to play a worker that dies right after it.
    pub async fn cancel_unpaid(&self, order_id: Uuid) -> Result<Deadline, sqlx::Error> {
        let mut tx = self.pg.begin().await?;
        // The race with pay is decided here: see the module comment.
        // `pay_by <= now()`: PostgreSQL's clock alone says whether the window
        // has closed, the same clock `pay` asks.
        let cancelled: Option<i64> = sqlx::query_scalar(
            "UPDATE orders SET status = 'cancelled', cancelled_at = now(), updated_at = now()
              WHERE id = $1 AND status = 'confirmed' AND pay_by <= now()
              RETURNING sale_id",
        )
        .bind(order_id)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(sale_id) = cancelled {
            // Same transaction: `sold` can never count a cancelled order.
            sqlx::query("UPDATE sales SET sold = sold - 1 WHERE id = $1")
                .bind(sale_id)
                .execute(&mut *tx)
                .await?;
            tx.commit().await?;
            tracing::info!(%order_id, sale_id, "unpaid order cancelled");
            return Ok(Deadline::Cancelled);
        }
        // Why not: asked in the same transaction, so on the same `now()` as
        // the UPDATE (a transaction's `now()` is its start): a window that
        // closed in between cannot look closed here and open above.
        let found: Option<(OrderStatus, Option<i64>)> = sqlx::query_as(
            "SELECT status, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint
               FROM orders WHERE id = $1",
        )
        .bind(order_id)
        .fetch_optional(&mut *tx)
        .await?;
        tx.rollback().await?;
        Ok(match found {
            Some((OrderStatus::Cancelled, _)) => Deadline::AlreadyCancelled,
            Some((OrderStatus::Paid, _)) => Deadline::Paid,
            Some((OrderStatus::Confirmed, Some(left_ms))) => Deadline::NotDue {
                left: Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
            },
            _ => Deadline::Nothing,
        })
    }

    /// Up to `page` confirmed orders that have a payment deadline, the
    /// first after the order `after` in id order (from the start with
    /// `None`), each with the time left until its deadline (zero once it has
    /// passed), on PostgreSQL's clock: what the sales' deadline queues must
    /// hold. The worker's sweep re-queues them a page at a time, for
    /// deadlines Redis lost (index `orders_unpaid`).
    pub async fn unpaid_orders(
        &self,
        after: Option<Uuid>,
        page: i64,
    ) -> anyhow::Result<Vec<(OrderJob, Duration)>> {
        let rows: Vec<(Uuid, i64, String, i64)> = sqlx::query_as(
            "SELECT id, sale_id, user_id,
                    GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint)
               FROM orders
              WHERE status = 'confirmed' AND pay_by IS NOT NULL
                AND ($1::uuid IS NULL OR id > $1)
              ORDER BY id
              LIMIT $2",
        )
        .bind(after)
        .bind(page)
        .fetch_all(&self.pg)
        .await
        .context("reading the unpaid orders")?;
        Ok(rows
            .into_iter()
            .map(|(order_id, sale_id, user_id, left_ms)| {
                let job = OrderJob {
                    order_id,
                    sale_id,
                    user_id,
                };
                (
                    job,
                    Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
                )
            })
            .collect())
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

    /// An order on a given sale's queue.
    pub(crate) async fn queued_on<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        sale_id: i64,
        order_id: Uuid,
    ) -> anyhow::Result<Option<OrderJob>> {
        Queue::new(SaleKeys::new(&self.prefix, sale_id).queue)
            .payload(conn, &order_id.to_string())
            .await
            .context("looking for a queued order")?
            .map(|payload| OrderJob::from_payload(&payload).context("decoding a queued order"))
            .transpose()
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
