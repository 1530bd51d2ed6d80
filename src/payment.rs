//! The payment window: a confirmed order is paid in time, or cancelled.
//!
//! When the worker confirms an order it sets the order's deadline, `pay_by`,
//! on PostgreSQL's clock, and puts a delayed job on the sale's deadline
//! queue (the seeds' delay queue: the same [`Queue`](crate::queue::Queue),
//! other keys), due when the window closes. The buyer pays with
//! [`pay`]; when the deadline job comes due, the worker calls
//! [`cancel_unpaid`], and if the order was still unpaid, gives the unit back
//! in Redis with [`return_unit`].
//!
//! The race: the buyer presses Pay at the very moment the deadline job runs.
//! If each read the status first and then wrote, both could read
//! `confirmed`, and the order would end paid *and* its unit back on sale: the
//! sale oversells, and a paying customer gets nothing. So neither reads
//! first. Each is one conditional `UPDATE ... WHERE status = 'confirmed'`,
//! and PostgreSQL decides: the second UPDATE waits for the first one's row
//! lock, then re-checks its WHERE clause against the row the first one
//! committed, finds the status changed, and updates nothing. Whoever updated
//! no row lost, and does nothing else: a payment that lost is answered
//! `409 payment_window_closed`; a cancellation that lost gives nothing back.
//!
//! "The window is open" is judged on one clock, PostgreSQL's: a payment is
//! accepted only while `now() < pay_by`. The deadline job is timed by Redis'
//! clock (queue due times always are); on one machine the two agree, and
//! where they do not, the conditional updates still let only one side win.
//!
//! Giving the unit back touches PostgreSQL (the order, `sales.sold`) and
//! Redis (the stock, the buyers set), which share no transaction. PostgreSQL
//! goes first; the job is acknowledged only after both. A worker that dies
//! between the two steps leaves the job to be delivered again; the second
//! delivery finds the order already cancelled and still runs the Redis step,
//! which is idempotent (`lua/unit_return.lua`).

use std::sync::LazyLock;

use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::Script;
use redis::aio::ConnectionLike;
use sqlx::PgPool;
use uuid::Uuid;

use crate::domain::{OrderJob, OrderStatus};
use crate::keys::SaleKeys;

static UNIT_RETURN: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/unit_return.lua")));

/// How a payment ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PayOutcome {
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

/// Pay for an order, if its payment window is still open.
pub async fn pay(pg: &PgPool, order_id: Uuid) -> anyhow::Result<PayOutcome> {
    // The race with cancel_unpaid is decided here: see the module comment.
    let paid = sqlx::query(
        "UPDATE orders SET status = 'paid', paid_at = now(), updated_at = now()
          WHERE id = $1 AND status = 'confirmed' AND pay_by > now()",
    )
    .bind(order_id)
    .execute(pg)
    .await
    .context("paying an order")?;
    if paid.rows_affected() == 1 {
        tracing::info!(%order_id, "order paid");
        return Ok(PayOutcome::Paid);
    }
    // We lost, or there was nothing to win: say why, without changing anything.
    Ok(match stored_status(pg, order_id).await? {
        None => PayOutcome::NotFound,
        Some(OrderStatus::Paid) => PayOutcome::AlreadyPaid,
        Some(OrderStatus::Rejected) => PayOutcome::Rejected,
        // Cancelled, or confirmed with its deadline passed and the deadline
        // job not run yet: either way the window is closed.
        Some(_) => PayOutcome::WindowClosed,
    })
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
}

impl Deadline {
    /// Whether the unit must be given back in Redis. True for a redelivery
    /// too: the worker that cancelled may have died before the Redis step.
    pub fn returns_unit(self) -> bool {
        matches!(self, Self::Cancelled | Self::AlreadyCancelled)
    }
}

/// The PostgreSQL half of a deadline: cancel the order if it is still
/// unpaid, and take its unit out of `sales.sold`, in one transaction.
/// Public so that tests can play a worker that dies right after it.
pub async fn cancel_unpaid(pg: &PgPool, order_id: Uuid) -> Result<Deadline, sqlx::Error> {
    let mut tx = pg.begin().await?;
    // The race with pay is decided here: see the module comment.
    let cancelled: Option<i64> = sqlx::query_scalar(
        "UPDATE orders SET status = 'cancelled', cancelled_at = now(), updated_at = now()
          WHERE id = $1 AND status = 'confirmed'
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
    tx.rollback().await?;
    Ok(match stored_status(pg, order_id).await? {
        Some(OrderStatus::Cancelled) => Deadline::AlreadyCancelled,
        Some(OrderStatus::Paid) => Deadline::Paid,
        _ => Deadline::Nothing,
    })
}

/// What the Redis half of a deadline did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnitReturn {
    /// The unit is back on sale; this many units are left now.
    Returned { stock_left: i64 },
    /// Nothing to give back: this order's unit was returned before.
    AlreadyReturned,
    /// The sale is not loaded in Redis; loading it from PostgreSQL will
    /// count the cancellation.
    SaleNotLoaded,
}

/// The Redis half of a deadline: give a cancelled order's unit back to the
/// stock, let its buyer buy again, and publish the new units left. Safe to
/// call any number of times for one order (see `lua/unit_return.lua`).
pub async fn return_unit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    order: &OrderJob,
) -> redis::RedisResult<UnitReturn> {
    let left: i64 = UNIT_RETURN
        .key(&keys.stock)
        .key(&keys.buyers)
        .key(&keys.returned)
        .arg(order.order_id.to_string())
        .arg(&order.user_id)
        .arg(&keys.events)
        .invoke_async(conn)
        .await?;
    Ok(match left {
        -2 => UnitReturn::SaleNotLoaded,
        left if left < 0 => UnitReturn::AlreadyReturned,
        stock_left => UnitReturn::Returned { stock_left },
    })
}

/// An order as stored in PostgreSQL.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StoredOrder {
    pub order_id: Uuid,
    pub sale_id: i64,
    pub user_id: String,
    pub status: OrderStatus,
    /// The end of the payment window, for confirmed orders.
    pub pay_by: Option<DateTime<Utc>>,
}

/// Read one order from PostgreSQL.
pub async fn stored_order(pg: &PgPool, order_id: Uuid) -> anyhow::Result<Option<StoredOrder>> {
    let row: Option<(i64, String, String, Option<DateTime<Utc>>)> =
        sqlx::query_as("SELECT sale_id, user_id, status, pay_by FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_optional(pg)
            .await
            .context("reading an order")?;
    row.map(|(sale_id, user_id, status, pay_by)| {
        let status = OrderStatus::parse_db(&status)
            .with_context(|| format!("unknown order status {status:?}"))?;
        Ok(StoredOrder {
            order_id,
            sale_id,
            user_id,
            status,
            pay_by: pay_by.filter(|_| status == OrderStatus::Confirmed),
        })
    })
    .transpose()
}

async fn stored_status(pg: &PgPool, order_id: Uuid) -> Result<Option<OrderStatus>, sqlx::Error> {
    let status: Option<String> = sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
        .bind(order_id)
        .fetch_optional(pg)
        .await?;
    Ok(status.as_deref().and_then(OrderStatus::parse_db))
}
