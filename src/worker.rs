//! The worker: drains the sales' order queues into PostgreSQL.
//!
//! One step ([`Worker::try_process_batch`]) reserves a batch of order jobs
//! from one sale's queue, writes them in one PostgreSQL transaction, commits,
//! and only then acknowledges them in Redis. The order matters:
//!
//! - crash after reserve, before commit: nothing was written; the lease runs
//!   out and the jobs are delivered again;
//! - crash after commit, before ack: the orders are written; the jobs are
//!   delivered again and the second write is a no-op, because the order id is
//!   the primary key (`ON CONFLICT (id) DO NOTHING`).
//!
//! So every accepted order reaches PostgreSQL exactly once, however the
//! worker dies. Several workers may run at once: reserve hands each job to
//! one of them at a time.
//!
//! PostgreSQL has the last word on every order. An order that would push the
//! sale's `sold` past `stock_total` violates a CHECK constraint; one for a
//! buyer who already holds a unit violates a unique index. Such orders are
//! stored as `rejected` with the reason, logged as an oversell attempt, and
//! counted. Under the `lock` strategy that never happens; under `naive` it
//! does, which is how the demo shows the database catching what Redis let
//! through.
//!
//! While PostgreSQL is down, reserved jobs go back to the queue without using
//! up an attempt, and the worker backs off (up to a few seconds) until it
//! answers again.
//!
//! The worker drains a second queue per sale: the payment deadlines. Each
//! confirmed order gets a delayed job there, due when its payment window
//! closes; it is queued after the commit that confirms the order and before
//! the order job's ack, so a crash in between redelivers the order job, whose
//! (no-op) write queues the deadline again; queueing by id keeps one job.
//! [`Worker::try_process_deadlines`] runs the due deadlines: see
//! `payment.rs` for how a deadline and a payment race.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::Context;
use deadpool_redis::Pool as RedisPool;
use sqlx::{PgPool, Postgres, Transaction};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::config::WorkerSettings;
use crate::domain::{OrderJob, RejectReason};
use crate::keys::SaleKeys;
use crate::payment::{self, Deadline};
use crate::queue::{Attempt, Queue, Reserved};

/// Longest pause between tries while PostgreSQL or Redis is failing.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// Delay before a job that failed by itself (not because PostgreSQL was down) runs again.
const FAILED_JOB_DELAY: Duration = Duration::from_secs(1);

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// Jobs reserved from the queue.
    pub reserved: usize,
    /// Orders written as confirmed.
    pub confirmed: usize,
    /// Orders PostgreSQL refused (stored as rejected).
    pub rejected: usize,
    /// Jobs whose order was already in PostgreSQL (a redelivery): no-ops.
    pub redelivered: usize,
    /// Jobs of crashed workers put back on the queue by this reserve.
    pub reclaimed: u64,
    /// Jobs that ran out of attempts and were dead-lettered by this reserve.
    pub dead_lettered: u64,
    /// Unpaid orders cancelled at their deadline (their unit is back on sale).
    pub cancelled: usize,
    /// Deadlines that found the order paid: nothing to do.
    pub paid_in_time: usize,
}

impl BatchReport {
    /// Add another report's counts to this one.
    pub fn add(&mut self, other: BatchReport) {
        self.reserved += other.reserved;
        self.confirmed += other.confirmed;
        self.rejected += other.rejected;
        self.redelivered += other.redelivered;
        self.reclaimed += other.reclaimed;
        self.dead_lettered += other.dead_lettered;
        self.cancelled += other.cancelled;
        self.paid_in_time += other.paid_in_time;
    }
}

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

pub struct Worker {
    pg: PgPool,
    redis: RedisPool,
    prefix: String,
    settings: WorkerSettings,
}

impl Worker {
    pub fn new(pg: PgPool, redis: RedisPool, prefix: String, settings: WorkerSettings) -> Self {
        Self {
            pg,
            redis,
            prefix,
            settings,
        }
    }

    /// One step on one sale's queue: reserve, write, commit, queue the
    /// payment deadlines, ack.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_batch(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let keys = SaleKeys::new(&self.prefix, sale_id);
        let queue = Queue::new(keys.queue.clone());
        let (mut conn, mut report, orders, reserved) = self.reserve(&queue).await?;
        if reserved.is_empty() {
            return Ok(report);
        }

        match self.write_orders(&orders).await {
            Ok(written) => {
                for outcome in written {
                    match outcome {
                        Written::Confirmed => report.confirmed += 1,
                        Written::Rejected => report.rejected += 1,
                        Written::AlreadyThere => report.redelivered += 1,
                    }
                }
                // After the commit, before the ack: a crash in between
                // redelivers the order jobs, and this runs again.
                self.schedule_deadlines(&mut conn, &keys, &orders)
                    .await
                    .context("queueing payment deadlines")?;
                // Only now, after the commit, may the jobs leave the queue.
                queue
                    .ack(&mut conn, &reserved)
                    .await
                    .context("acknowledging jobs")?;
                Ok(report)
            }
            Err(error) => {
                // PostgreSQL being unreachable is not the jobs' fault: give
                // them back without using up an attempt. Any other failure
                // counts, so a job that always fails ends up dead-lettered.
                let (attempt, delay) = if is_unavailable(&error) {
                    (Attempt::NotTried, Duration::ZERO)
                } else {
                    (Attempt::Failed, FAILED_JOB_DELAY)
                };
                queue
                    .retry(
                        &mut conn,
                        &reserved,
                        delay,
                        attempt,
                        self.settings.max_attempts,
                    )
                    .await
                    .context("giving back jobs after a failed write")?;
                Err(error).context("writing orders to PostgreSQL")
            }
        }
    }

    /// Reserve a batch from `queue` and decode it. Returns the connection
    /// it used, the report so far, the decoded jobs and their reservations,
    /// in the same order. A payload that does not decode can never succeed:
    /// its attempt counts, so it ends in the dead-letter set, and the rest
    /// carry on.
    async fn reserve(
        &self,
        queue: &Queue,
    ) -> anyhow::Result<(
        deadpool_redis::Connection,
        BatchReport,
        Vec<OrderJob>,
        Vec<Reserved>,
    )> {
        let mut conn = self
            .redis
            .get()
            .await
            .context("getting a Redis connection")?;
        let reservation = queue
            .reserve(
                &mut conn,
                self.settings.batch_size as usize,
                self.settings.lease(),
                self.settings.max_attempts,
            )
            .await
            .context("reserving jobs")?;
        let report = BatchReport {
            reserved: reservation.jobs.len(),
            reclaimed: reservation.reclaimed,
            dead_lettered: reservation.dead_lettered,
            ..BatchReport::default()
        };
        if reservation.reclaimed > 0 {
            tracing::warn!(
                count = reservation.reclaimed,
                "redelivering jobs whose worker died"
            );
        }
        if reservation.dead_lettered > 0 {
            tracing::error!(
                count = reservation.dead_lettered,
                "jobs dead-lettered after too many attempts"
            );
        }
        if !reservation.jobs.is_empty() {
            tracing::Span::current().record("reserved", reservation.jobs.len());
        }
        let (jobs, broken): (Vec<_>, Vec<_>) = reservation
            .jobs
            .into_iter()
            .map(|job| (OrderJob::from_payload(&job.payload).ok(), job))
            .partition(|(order, _)| order.is_some());
        if !broken.is_empty() {
            let broken: Vec<Reserved> = broken.into_iter().map(|(_, job)| job).collect();
            tracing::error!(ids = ?broken.iter().map(|j| &j.id).collect::<Vec<_>>(), "undecodable jobs");
            queue
                .retry(
                    &mut conn,
                    &broken,
                    FAILED_JOB_DELAY,
                    Attempt::Failed,
                    self.settings.max_attempts,
                )
                .await
                .context("giving back undecodable jobs")?;
        }
        let (orders, reserved) = jobs
            .into_iter()
            .map(|(order, job)| (order.expect("partitioned on is_some"), job))
            .unzip();
        Ok((conn, report, orders, reserved))
    }

    /// Queue the payment deadline of every order of the batch that is
    /// confirmed in PostgreSQL, due when its `pay_by` passes. Orders just
    /// confirmed and redelivered ones alike: queueing by id keeps one job,
    /// and a redelivered order keeps the deadline it was given first.
    async fn schedule_deadlines(
        &self,
        conn: &mut deadpool_redis::Connection,
        keys: &SaleKeys,
        orders: &[OrderJob],
    ) -> anyhow::Result<()> {
        let ids: Vec<Uuid> = orders.iter().map(|order| order.order_id).collect();
        // Milliseconds left until each deadline, on PostgreSQL's clock.
        let due: Vec<(Uuid, i64)> = sqlx::query_as(
            "SELECT id, GREATEST(0, (EXTRACT(EPOCH FROM pay_by - now()) * 1000)::bigint)
               FROM orders
              WHERE id = ANY($1) AND status = 'confirmed' AND pay_by IS NOT NULL",
        )
        .bind(&ids)
        .fetch_all(&self.pg)
        .await
        .context("reading payment deadlines")?;
        // Orders confirmed in one transaction share their deadline, so
        // this is usually one enqueue per batch.
        let mut by_delay: BTreeMap<i64, Vec<(String, String)>> = BTreeMap::new();
        let due: HashMap<Uuid, i64> = due.into_iter().collect();
        for order in orders {
            if let Some(left_ms) = due.get(&order.order_id) {
                by_delay
                    .entry(*left_ms)
                    .or_default()
                    .push((order.order_id.to_string(), order.to_payload()));
            }
        }
        let queue = Queue::new(keys.deadlines.clone());
        for (left_ms, jobs) in by_delay {
            let jobs: Vec<(&str, &str)> = jobs
                .iter()
                .map(|(id, payload)| (id.as_str(), payload.as_str()))
                .collect();
            queue
                .enqueue(
                    conn,
                    &jobs,
                    Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
                )
                .await
                .context("queueing payment deadlines")?;
        }
        Ok(())
    }

    /// One step on one sale's deadline queue: for each due deadline, cancel
    /// the order in PostgreSQL if it is still unpaid, give its unit back in
    /// Redis, and only then ack. See `payment.rs`.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_deadlines(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let keys = SaleKeys::new(&self.prefix, sale_id);
        let queue = Queue::new(keys.deadlines.clone());
        let (mut conn, mut report, orders, reserved) = self.reserve(&queue).await?;
        for (done, order) in orders.iter().enumerate() {
            let deadline = match payment::cancel_unpaid(&self.pg, order.order_id).await {
                Ok(deadline) => deadline,
                Err(error) => {
                    // Acknowledge what is done; give this job and the rest
                    // back (not counting the attempt while PostgreSQL is
                    // unreachable); stop.
                    let attempt = if is_unavailable(&error) {
                        Attempt::NotTried
                    } else {
                        Attempt::Failed
                    };
                    let (finished, rest) = reserved.split_at(done);
                    queue
                        .ack(&mut conn, finished)
                        .await
                        .context("acknowledging deadlines")?;
                    queue
                        .retry(
                            &mut conn,
                            rest,
                            FAILED_JOB_DELAY,
                            attempt,
                            self.settings.max_attempts,
                        )
                        .await
                        .context("giving back deadlines after a failed cancel")?;
                    return Err(error).context("cancelling an unpaid order");
                }
            };
            match deadline {
                Deadline::Cancelled => report.cancelled += 1,
                Deadline::Paid => report.paid_in_time += 1,
                Deadline::AlreadyCancelled | Deadline::Nothing => report.redelivered += 1,
            }
            if deadline.returns_unit() {
                // A Redis failure here leaves this job (and the rest of the
                // batch) unacknowledged: they are delivered again when the
                // lease runs out, and the return then happens.
                let returned = payment::return_unit(&mut conn, &keys, order)
                    .await
                    .context("giving a unit back in Redis")?;
                tracing::info!(order_id = %order.order_id, ?returned, "deadline passed unpaid");
            }
        }
        queue
            .ack(&mut conn, &reserved)
            .await
            .context("acknowledging deadlines")?;
        Ok(report)
    }

    /// Write a batch of orders in one transaction. Public so that tests can
    /// play a worker that dies between this commit and the ack.
    pub async fn write_orders(&self, orders: &[OrderJob]) -> Result<Vec<Written>, sqlx::Error> {
        let mut tx = self.pg.begin().await?;
        let mut written = Vec::with_capacity(orders.len());
        let window = self.settings.payment_window().as_secs_f64();
        for order in orders {
            written.push(write_order(&mut tx, order, window).await?);
        }
        tx.commit().await?;
        Ok(written)
    }

    /// Every sale id; the worker visits each sale's queue in turn. (A system
    /// with thousands of sales would keep a set of non-empty queues instead.)
    async fn sale_ids(&self) -> anyhow::Result<Vec<i64>> {
        sqlx::query_scalar("SELECT id FROM sales ORDER BY id")
            .fetch_all(&self.pg)
            .await
            .context("listing sales")
    }

    /// One pass over every sale's order queue and deadline queue. Returns
    /// what it did in total.
    pub async fn run_once(&self) -> anyhow::Result<BatchReport> {
        let mut total = BatchReport::default();
        for sale_id in self.sale_ids().await? {
            total.add(self.try_process_batch(sale_id).await?);
            total.add(self.try_process_deadlines(sale_id).await?);
        }
        Ok(total)
    }

    /// Drain the queues until `shutdown` is cancelled. A batch in progress
    /// when it is cancelled is finished first.
    pub async fn run(self, shutdown: CancellationToken) {
        tracing::info!(batch_size = self.settings.batch_size, "worker started");
        let mut failures: u32 = 0;
        while !shutdown.is_cancelled() {
            let pause = match self.run_once().await {
                Ok(report) if report.reserved > 0 => {
                    failures = 0;
                    tracing::debug!(?report, "batch done");
                    continue;
                }
                Ok(_) => {
                    failures = 0;
                    self.settings.poll()
                }
                Err(error) => {
                    failures = failures.saturating_add(1);
                    let pause = failure_backoff(failures);
                    tracing::warn!(
                        error = format!("{error:#}"),
                        ?pause,
                        "worker step failed; backing off"
                    );
                    pause
                }
            };
            tokio::select! {
                () = shutdown.cancelled() => break,
                () = tokio::time::sleep(pause) => {}
            }
        }
        tracing::info!("worker stopped");
    }
}

/// Insert one order, with its payment deadline `window_secs` from now on
/// PostgreSQL's clock. Each order gets a savepoint, so that a refused order
/// rolls back only itself, and is then stored as rejected.
async fn write_order(
    tx: &mut Transaction<'_, Postgres>,
    order: &OrderJob,
    window_secs: f64,
) -> Result<Written, sqlx::Error> {
    use sqlx::Acquire;
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
                Err(error) if is_constraint(&error, "sold_within_stock") => RejectReason::SoldOut,
                Err(error) => return Err(error),
            }
        }
        Err(error) if is_constraint(&error, "orders_one_per_buyer") => RejectReason::DuplicateBuyer,
        Err(error) => return Err(error),
    };
    savepoint.rollback().await?;
    tracing::warn!(
        order_id = %order.order_id,
        sale_id = order.sale_id,
        user_id = %order.user_id,
        reason = refused.as_db(),
        "oversell attempt refused by PostgreSQL"
    );
    sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, reason) VALUES ($1, $2, $3, 'rejected', $4)
         ON CONFLICT (id) DO NOTHING",
    )
    .bind(order.order_id)
    .bind(order.sale_id)
    .bind(&order.user_id)
    .bind(refused.as_db())
    .execute(&mut **tx)
    .await?;
    Ok(Written::Rejected)
}

/// Whether `error` is the violation of the named constraint or unique index.
fn is_constraint(error: &sqlx::Error, name: &str) -> bool {
    error
        .as_database_error()
        .and_then(|db| db.constraint())
        .is_some_and(|constraint| constraint == name)
}

/// Whether the failure means "PostgreSQL is not reachable", as opposed to a
/// problem with the jobs themselves.
fn is_unavailable(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        // 57P01 admin_shutdown, 57P02 crash_shutdown, 57P03 cannot_connect_now,
        // and class 08: connection exceptions.
        sqlx::Error::Database(db) => db
            .code()
            .is_some_and(|code| code.starts_with("08") || code.starts_with("57P")),
        _ => false,
    }
}

/// Exponential back-off after `failures` failures in a row: 100 ms, 200 ms, ... up to 5 s.
pub(crate) fn failure_backoff(failures: u32) -> Duration {
    Duration::from_millis(100)
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_backoff_doubles_up_to_the_cap() {
        assert_eq!(failure_backoff(1), Duration::from_millis(100));
        assert_eq!(failure_backoff(2), Duration::from_millis(200));
        assert_eq!(failure_backoff(4), Duration::from_millis(800));
        assert_eq!(failure_backoff(30), MAX_BACKOFF);
    }

    #[test]
    fn a_pool_timeout_means_postgres_is_unavailable() {
        assert!(is_unavailable(&sqlx::Error::PoolTimedOut));
        assert!(!is_unavailable(&sqlx::Error::RowNotFound));
    }
}
