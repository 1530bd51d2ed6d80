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

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::backoff;
use crate::config::WorkerSettings;
use crate::domain::OrderJob;
use crate::keys::{QueueKeys, SaleKeys};
use crate::payment;
use crate::queue::{Attempt, Queue, Reserved};
use crate::store::{self, Deadline, Store, Written};

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

/// Drains the queues of every sale. Several may run at once, in one process
/// or many: the queue hands each job to one of them at a time.
pub struct Worker {
    /// PostgreSQL, Redis and the key prefix; shared with the web handlers
    /// when the worker runs inside `seckill serve`.
    store: Store,
    /// Batch size, lease, attempts, poll and payment window; fixed at start.
    settings: WorkerSettings,
}

/// A batch reserved from one queue, its payloads decoded.
struct Batch {
    /// The sale's keys, and the queue the batch came from.
    keys: SaleKeys,
    queue: Queue,
    /// The connection the reserve used; the ack goes through it too.
    conn: deadpool_redis::Connection,
    /// What the reserve did (reserved, reclaimed, dead-lettered).
    report: BatchReport,
    /// The decoded jobs, and their reservations in the same order.
    orders: Vec<OrderJob>,
    reserved: Vec<Reserved>,
}

impl Worker {
    pub fn new(store: Store, settings: WorkerSettings) -> Self {
        Self { store, settings }
    }

    /// One step on one sale's queue: reserve, write, commit, queue the
    /// payment deadlines, ack.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_batch(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let Batch {
            keys,
            queue,
            mut conn,
            mut report,
            orders,
            reserved,
        } = self.reserve(sale_id, |keys| &keys.queue).await?;
        if reserved.is_empty() {
            return Ok(report);
        }

        let window = self.settings.payment_window();
        match self.store.confirm_orders(&orders, window).await {
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
                let (attempt, delay) = if store::is_unavailable(&error) {
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

    /// Reserve a batch from one of the sale's queues (`which` picks it from
    /// the sale's keys) and decode it. A payload that does not decode can
    /// never succeed: its attempt counts, so it ends in the dead-letter set,
    /// and the rest carry on.
    async fn reserve(
        &self,
        sale_id: i64,
        which: fn(&SaleKeys) -> &QueueKeys,
    ) -> anyhow::Result<Batch> {
        let keys = SaleKeys::new(&self.store.prefix, sale_id);
        let queue = Queue::new(which(&keys).clone());
        let mut conn = self.store.redis().await?;
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
        log_reservation(&report);
        let (mut orders, mut reserved, mut broken) = (Vec::new(), Vec::new(), Vec::new());
        for job in reservation.jobs {
            match OrderJob::from_payload(&job.payload) {
                Ok(order) => {
                    orders.push(order);
                    reserved.push(job);
                }
                Err(_) => broken.push(job),
            }
        }
        if !broken.is_empty() {
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
        Ok(Batch {
            keys,
            queue,
            conn,
            report,
            orders,
            reserved,
        })
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
        let ids: Vec<_> = orders.iter().map(|order| order.order_id).collect();
        let due = self.store.payment_deadlines(&ids).await?;
        // Orders confirmed in one transaction share their deadline, so
        // this is usually one enqueue per batch.
        let mut by_delay: BTreeMap<Duration, Vec<(String, String)>> = BTreeMap::new();
        for order in orders {
            if let Some(left) = due.get(&order.order_id) {
                by_delay
                    .entry(*left)
                    .or_default()
                    .push((order.order_id.to_string(), order.to_payload()));
            }
        }
        let queue = Queue::new(keys.deadlines.clone());
        for (left, jobs) in by_delay {
            let jobs: Vec<(&str, &str)> = jobs
                .iter()
                .map(|(id, payload)| (id.as_str(), payload.as_str()))
                .collect();
            queue
                .enqueue(conn, &jobs, left)
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
        let Batch {
            keys,
            queue,
            mut conn,
            mut report,
            orders,
            reserved,
        } = self.reserve(sale_id, |keys| &keys.deadlines).await?;
        for (done, order) in orders.iter().enumerate() {
            let deadline = match self.store.cancel_unpaid(order.order_id).await {
                Ok(deadline) => deadline,
                Err(error) => {
                    // Acknowledge what is done; give this job and the rest
                    // back (not counting the attempt while PostgreSQL is
                    // unreachable); stop.
                    let attempt = if store::is_unavailable(&error) {
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

    /// One pass over every sale's order queue and deadline queue. Returns
    /// what it did in total.
    pub async fn run_once(&self) -> anyhow::Result<BatchReport> {
        let mut total = BatchReport::default();
        // Every sale's queues in turn. (A system with thousands of sales
        // would keep a set of non-empty queues instead.)
        for sale_id in self.store.sale_ids().await? {
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
                    let pause = backoff::after(failures);
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

/// Say what a reserve found besides work: jobs of dead workers, and jobs
/// out of attempts.
fn log_reservation(report: &BatchReport) {
    if report.reclaimed > 0 {
        tracing::warn!(
            count = report.reclaimed,
            "redelivering jobs whose worker died"
        );
    }
    if report.dead_lettered > 0 {
        tracing::error!(
            count = report.dead_lettered,
            "jobs dead-lettered after too many attempts"
        );
    }
    if report.reserved > 0 {
        tracing::Span::current().record("reserved", report.reserved);
    }
}
