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
//! [`Store::confirm_orders`] is the worker's write: one transaction per
//! batch, a savepoint per order, so that an order PostgreSQL refuses rolls
//! back alone and is stored as `rejected`. The order id is the primary key,
//! so a redelivered job is a no-op (`ON CONFLICT (id) DO NOTHING`).
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
use sqlx::{Acquire, Postgres, Transaction};
use uuid::Uuid;

use super::{Store, schema};
use crate::config::WorkerSettings;
use crate::domain::{Order, OrderJob, OrderStatus, RejectReason};
use crate::keys::{self, SaleKeys};
use crate::queue::Queue;

/// How long a pending order's sale is remembered: far longer than an order
/// waits on its queue.
const PENDING_INDEX_SECS: u64 = 24 * 3600;

/// What became of one order job in PostgreSQL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Inserted as confirmed; it took a unit.
    Confirmed,
    /// PostgreSQL refused it (sale full, or buyer already holds a unit);
    /// stored as rejected.
    Rejected,
    /// This order id was already stored: a redelivery, and a no-op.
    AlreadyThere,
}

/// What a batch's write did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Confirmation {
    /// Written: what became of each order, in order.
    Written(Vec<Written>),
    /// Nothing written: the sale was loaded into Redis again after the
    /// batch was reserved, so the batch's orders belong to a Redis that
    /// lost them (a wipe), and the new one sells their units again.
    Superseded,
}

/// What the `postgres` strategy's transaction decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Taken {
    /// The unit is taken and the order stored as confirmed.
    Confirmed,
    /// No unit was left.
    SoldOut,
    /// The buyer already holds a unit of this sale.
    AlreadyPurchased,
}

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
    pub fn returns_unit(self) -> bool {
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

impl Store {
    /// Write a batch of orders of one sale in one transaction, each with its
    /// payment deadline from now on PostgreSQL's clock, unless the sale was
    /// loaded into Redis again since the batch was reserved: `epoch` is the
    /// sale's load epoch the worker read from Redis before it reserved (see
    /// `migrations/20261124000001_load_epoch.sql`). Returns what became of
    /// each order, in order, or [`Confirmation::Superseded`] with nothing
    /// written. Tests call it to play a worker that dies between this
    /// commit and the ack.
    pub async fn confirm_orders(
        &self,
        orders: &[OrderJob],
        settings: &WorkerSettings,
        epoch: Option<&str>,
    ) -> Result<Confirmation, sqlx::Error> {
        let Some(first) = orders.first() else {
            return Ok(Confirmation::Written(Vec::new()));
        };
        let mut tx = self.pg.begin().await?;
        // Each statement ends well inside the batch's lease (see
        // `WorkerSettings::statement_timeout`); `true`: for this
        // transaction only, like SET LOCAL.
        let limit = format!("{}ms", settings.statement_timeout().as_millis());
        sqlx::query("SELECT set_config('statement_timeout', $1, true)")
            .bind(limit)
            .execute(&mut *tx)
            .await?;
        // The load's fence: the sale's row, locked until the commit, so no
        // load can read between this check and the writes.
        let recorded: Option<String> =
            sqlx::query_scalar("SELECT load_epoch FROM sales WHERE id = $1 FOR UPDATE")
                .bind(first.sale_id)
                .fetch_one(&mut *tx)
                .await?;
        if recorded.is_some() && recorded.as_deref() != epoch {
            return Ok(Confirmation::Superseded);
        }
        let window_secs = settings.payment_window().as_secs_f64();
        let mut written = Vec::with_capacity(orders.len());
        for order in orders {
            written.push(confirm_order(&mut tx, order, window_secs).await?);
        }
        tx.commit().await?;
        Ok(Confirmation::Written(written))
    }

    /// The `postgres` strategy's whole purchase, in one transaction: take a
    /// unit with one conditional UPDATE (the row lock serialises buyers of
    /// the sale: the database as the lock), and store the order confirmed,
    /// with its payment deadline `window` from now. A buyer who already
    /// holds a unit is refused by the unique index, and the unit goes back
    /// with the rollback.
    pub async fn take_in_postgres(
        &self,
        order: &OrderJob,
        window: Duration,
    ) -> Result<Taken, sqlx::Error> {
        let mut tx = self.pg.begin().await?;
        let taken =
            sqlx::query("UPDATE sales SET sold = sold + 1 WHERE id = $1 AND sold < stock_total")
                .bind(order.sale_id)
                .execute(&mut *tx)
                .await?;
        if taken.rows_affected() == 0 {
            return Ok(Taken::SoldOut);
        }
        let stored = sqlx::query(
            "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
             VALUES ($1, $2, $3, 'confirmed', now() + make_interval(secs => $4))",
        )
        .bind(order.order_id)
        .bind(order.sale_id)
        .bind(&order.user_id)
        .bind(window.as_secs_f64())
        .execute(&mut *tx)
        .await;
        match stored {
            Ok(_) => {
                tx.commit().await?;
                Ok(Taken::Confirmed)
            }
            Err(error) if schema::violates(&error, schema::ONE_ORDER_PER_BUYER) => {
                Ok(Taken::AlreadyPurchased)
            }
            Err(error) => Err(error),
        }
    }

    /// Time left until the payment deadline of each of these orders that is
    /// confirmed, on PostgreSQL's clock (zero once it has passed).
    pub async fn payment_deadlines(
        &self,
        order_ids: &[Uuid],
    ) -> anyhow::Result<HashMap<Uuid, Duration>> {
        let due: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT id, GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint)
               FROM orders
              WHERE id = ANY($1) AND status = 'confirmed' AND pay_by IS NOT NULL",
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
    pub async fn pay(&self, order_id: Uuid) -> anyhow::Result<PayOutcome> {
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

    /// Every confirmed order that has a payment deadline, with the time left
    /// until it (zero once it has passed), on PostgreSQL's clock: what the
    /// sales' deadline queues must hold. The worker's sweep re-queues them,
    /// for deadlines Redis lost.
    pub async fn unpaid_orders(&self) -> anyhow::Result<Vec<(OrderJob, Duration)>> {
        let rows: Vec<(Uuid, i64, String, i64)> = sqlx::query_as(
            "SELECT id, sale_id, user_id,
                    GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint)
               FROM orders
              WHERE status = 'confirmed' AND pay_by IS NOT NULL",
        )
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

    /// Remember which sale each just-accepted order belongs to, for
    /// [`Store::find_order`] while the order is pending. One round trip.
    pub async fn note_pending<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        jobs: &[OrderJob],
    ) -> anyhow::Result<()> {
        let mut pipe = redis::pipe();
        for job in jobs {
            pipe.cmd("SET")
                .arg(keys::order_sale(&self.prefix, &job.order_id))
                .arg(job.sale_id)
                .arg("EX")
                .arg(PENDING_INDEX_SECS)
                .ignore();
        }
        pipe.query_async::<()>(conn)
            .await
            .context("remembering pending orders' sale")
    }

    /// An order still on its sale's queue: one read for its sale, one for
    /// the job. An order whose sale was not noted (its instance died right
    /// after the commit) is found once the worker has written it.
    async fn queued_order(&self, order_id: Uuid) -> anyhow::Result<Option<OrderJob>> {
        let mut conn = self.redis().await?;
        let sale_id: Option<i64> = redis::cmd("GET")
            .arg(keys::order_sale(&self.prefix, &order_id))
            .query_async(&mut conn)
            .await
            .context("looking up a pending order's sale")?;
        let Some(sale_id) = sale_id else {
            return Ok(None);
        };
        self.queued_on(&mut conn, sale_id, order_id).await
    }

    /// An order on a given sale's queue.
    pub async fn queued_on<C: ConnectionLike + Send>(
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

    async fn status(&self, order_id: Uuid) -> Result<Option<OrderStatus>, sqlx::Error> {
        sqlx::query_scalar("SELECT status FROM orders WHERE id = $1")
            .bind(order_id)
            .fetch_optional(&self.pg)
            .await
    }
}

/// Insert one order, with its payment deadline `window_secs` from now on
/// PostgreSQL's clock. Each order gets a savepoint, so that a refused order
/// rolls back only itself, and is then stored as rejected.
async fn confirm_order(
    tx: &mut Transaction<'_, Postgres>,
    order: &OrderJob,
    window_secs: f64,
) -> Result<Written, sqlx::Error> {
    let mut savepoint = tx.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
         VALUES ($1, $2, $3, 'confirmed', now() + make_interval(secs => $4))
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.sale_id)
    .bind(&order.user_id)
    .bind(window_secs)
    .execute(&mut *savepoint)
    .await;
    let refused = match inserted {
        Ok(done) if done.rows_affected() == 0 => {
            // Redelivered: this order id is already stored.
            savepoint.commit().await?;
            return Ok(Written::AlreadyThere);
        }
        Ok(_) => {
            // Only a newly inserted order takes a unit. The CHECK
            // (sold <= stock_total) refuses the unit if none is left.
            let taken = sqlx::query("UPDATE sales SET sold = sold + 1 WHERE id = $1")
                .bind(order.sale_id)
                .execute(&mut *savepoint)
                .await;
            match taken {
                Ok(_) => {
                    savepoint.commit().await?;
                    return Ok(Written::Confirmed);
                }
                Err(error) if schema::violates(&error, schema::SOLD_WITHIN_STOCK) => {
                    RejectReason::SoldOut
                }
                Err(error) => return Err(error),
            }
        }
        Err(error) if schema::violates(&error, schema::ONE_ORDER_PER_BUYER) => {
            RejectReason::DuplicateBuyer
        }
        Err(error) => return Err(error),
    };
    savepoint.rollback().await?;
    tracing::warn!(
        order_id = %order.order_id,
        sale_id = order.sale_id,
        user_id = %order.user_id,
        reason = refused.as_str(),
        "oversell attempt refused by PostgreSQL"
    );
    sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, reason) VALUES ($1, $2, $3, 'rejected', $4)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.sale_id)
    .bind(&order.user_id)
    .bind(refused)
    .execute(&mut **tx)
    .await?;
    Ok(Written::Rejected)
}
