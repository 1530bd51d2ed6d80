//! The worker: drains the sales' order queues into PostgreSQL.
//!
//! One step ([`Worker::try_process_batch`]) reserves a batch of order jobs
//! from one sale's queue (a job carries one order, or a whole pass's:
//! `domain/pass_job.rs`), writes their orders in one PostgreSQL
//! transaction, commits, and only then acknowledges them in Redis. The
//! order matters:
//!
//! - crash after reserve, before commit: nothing was written; the lease runs
//!   out and the jobs are delivered again;
//! - crash after commit, before ack: the orders are written; the jobs are
//!   delivered again and the second write skips them, because the order id
//!   is the primary key (`store/confirm.rs`).
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
//! While PostgreSQL is down, or refuses work for a reason of its own state
//! (out of connections, read-only during a failover, a deadlock: see
//! [`failure::transient_postgres`]), reserved jobs go back to the queue without
//! using up an attempt, and the worker backs off (up to a few seconds) until
//! it answers again. When a batch fails for a reason of its own, the worker
//! writes its orders one by one, so that only the job carrying the order at
//! fault is charged, and the other orders of that job are written.
//!
//! The worker drains a second queue per sale, the payment deadlines: see
//! `deadlines.rs`. Now and then it sweeps (`sweep.rs`), putting back the
//! deadlines a Redis that lost data forgot.
//!
//! A batch is written only if the sale was not loaded into Redis again
//! since the batch was reserved (the load epoch, checked under the sale's
//! row lock: `Store::confirm_orders`). A load means Redis lost the sale,
//! and with it this batch's jobs; the new Redis sells their units again.

mod deadlines;
mod now;
mod one_by_one;
mod report;
mod run;
mod sweep;
mod unanswered;

use now::Now;
use one_by_one::Carried;
pub use report::BatchReport;
use report::log_reservation;
use unanswered::Unanswered;

use std::time::Duration;

use anyhow::Context;

use crate::config::{RedisDurability, WorkerSettings};
use crate::domain::{OrderJob, carried};
use crate::failure;
use crate::keys::{QueueKeys, SaleKeys};
use crate::metrics::metrics;
use crate::queue::{Attempt, Queue, Reserved};
use crate::redis_pool::RedisConn;
use crate::store::{Confirmation, Store, load};

/// Delay before a job that failed by itself (not because PostgreSQL was down) runs again.
const FAILED_JOB_DELAY: Duration = Duration::from_secs(1);
/// How often a worker sweeps the payment deadlines back into their queues
/// (see `deadlines.rs`); the first pass of every worker sweeps too.
const SWEEP_EVERY: Duration = Duration::from_secs(60);

/// How long after its payment window could last end a sale stays in play
/// for every pass of the worker: room for the redelivery of its last jobs
/// (a lease) many times over. After it, only a full pass visits it.
const IN_PLAY_AFTER_WINDOW: Duration = Duration::from_secs(3600);
/// How often a worker's pass visits every sale ever made, not only those
/// in play; its first pass does too.
const FULL_PASS_EVERY: Duration = Duration::from_secs(600);

/// Drains the queues of every sale. Several may run at once, in one process
/// or many: the queue hands each job to one of them at a time.
pub struct Worker {
    /// PostgreSQL, Redis and the key prefix; shared with the web handlers
    /// when the worker runs inside `seckill serve`. Never replaced.
    store: Store,
    /// Batch size, lease, attempts, poll and payment window; fixed at start.
    settings: WorkerSettings,
    /// When this worker sweeps the payment deadlines next. Only
    /// `run_once` asks.
    sweep: Now,
    /// When this worker's pass visits every sale next. Only `run_once`
    /// asks.
    full_pass: Now,
    /// The tokens of reserves whose answer was lost, by queue.
    unanswered: Unanswered,
}

/// A batch reserved from one queue, its payloads decoded: the orders each
/// job carries, or payment deadlines (`deadlines.rs`). Owned by the one
/// step that reserved it.
pub struct Batch<J = Vec<OrderJob>> {
    /// The sale the queue belongs to.
    sale_id: i64,
    /// The sale's keys.
    keys: SaleKeys,
    /// For the order queue, the sale's load epoch read just before the
    /// reserve (see `lua/sale_load.lua`): if PostgreSQL's record differs at
    /// the commit, a load came in between and the batch writes nothing.
    epoch: Option<String>,
    /// The queue the batch came from: acks and retries go back to it.
    queue: Queue,
    /// The connection the reserve used; the ack goes through it too.
    conn: RedisConn,
    /// What the reserve did (reserved, reclaimed, dead-lettered).
    report: BatchReport,
    /// The decoded jobs.
    jobs: Vec<J>,
    /// Their reservations, in the same order: what ack and retry take.
    reserved: Vec<Reserved>,
    /// With `--redis-durability replica`, whether enough replicas held
    /// the reserve (and so the jobs it took) when it was answered: its
    /// `WAIT` rode in the reserve's pipeline (`Queue::reserve_as`).
    /// Always `true` under `local`.
    confirmed: bool,
}

/// How a queue's payloads decode, and how much work each decoded job is.
type Decoding<J> = (fn(&str) -> Result<J, serde_json::Error>, fn(&J) -> usize);

/// Which sale a batch is of, and the load epoch it was reserved under.
#[derive(Debug, Clone, Copy)]
struct Under<'a> {
    sale_id: i64,
    keys: &'a SaleKeys,
    epoch: Option<&'a str>,
}

impl Worker {
    pub fn new(store: Store, settings: WorkerSettings) -> Self {
        Self {
            store,
            settings,
            sweep: Now::every(SWEEP_EVERY),
            full_pass: Now::every(FULL_PASS_EVERY),
            unanswered: Unanswered::default(),
        }
    }

    /// One step on one sale's queue: reserve, write, commit, queue the
    /// payment deadlines, ack.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_batch(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let batch = self.reserve_orders(sale_id).await?;
        let report = self.write_batch(batch).await?;
        let metrics = metrics();
        metrics.orders("confirmed", report.confirmed);
        metrics.orders("rejected", report.rejected);
        Ok(report)
    }

    /// The first half of [`Worker::try_process_batch`]: reserve a batch of
    /// the sale's order jobs. Public, with [`Worker::write_batch`], so that
    /// tests can play what happens to Redis while a worker holds a batch.
    pub async fn reserve_orders(&self, sale_id: i64) -> anyhow::Result<Batch> {
        // The load epoch, read before the reserve: a load after this read
        // and before the commit makes the commit refuse the batch (see
        // `Store::confirm_orders`). Only the order queue needs it; the
        // deadlines take no unit.
        let epoch = load::epoch(
            &mut self.store.redis().await?,
            &SaleKeys::new(self.store.prefix(), sale_id),
        )
        .await?;
        let mut batch = self
            .reserve(
                sale_id,
                |keys| &keys.queue,
                self.settings.batch_size as usize,
                (carried, Vec::len),
                self.store.durability(),
            )
            .await?;
        batch.epoch = epoch;
        Ok(batch)
    }

    /// The second half: write the batch to PostgreSQL, commit, queue the
    /// payment deadlines, and ack.
    pub async fn write_batch(&self, batch: Batch) -> anyhow::Result<BatchReport> {
        let Batch {
            sale_id,
            keys,
            epoch,
            queue,
            mut conn,
            mut report,
            jobs,
            reserved,
            confirmed,
        } = batch;
        if reserved.is_empty() {
            return Ok(report);
        }
        // The jobs' orders in one list, in order, and how many each job
        // carries: the write takes the list, the acks the jobs.
        let carries: Vec<usize> = jobs.iter().map(Vec::len).collect();
        let orders: Vec<OrderJob> = jobs.into_iter().flatten().collect();

        // With `--redis-durability replica`: PostgreSQL gets only orders a
        // replica holds. The reserve was written after the orders it
        // reserved, so a replica that has it has them; its `WAIT` went in
        // the reserve's own pipeline, to the node that ran it. The race
        // this closes: the worker commits an order the primary never
        // replicated; a failover then gives its unit back in Redis, sells
        // it again, and PostgreSQL refuses a later `202` as an oversell.
        // (A `WAIT` sent on its own, after the reserve, could reach another
        // node, once the connection had learnt of a failover in between,
        // whose replicas confirm nothing of the reserve.)
        if !confirmed {
            metrics().unreplicated_passes.inc();
            self.give_back_now(&mut conn, &queue, &reserved)
                .await
                .context("giving back jobs no replica confirmed")?;
            anyhow::bail!(
                "{} jobs given back: no replica confirmed them in time",
                reserved.len()
            );
        }
        metrics().batch_size.observe(orders.len() as f64);
        let committing = std::time::Instant::now();
        let confirmed = self.confirm(&orders, epoch.as_deref()).await;
        metrics()
            .commit_seconds
            .observe(committing.elapsed().as_secs_f64());
        let (written, pay_by) = match confirmed {
            Ok(Confirmation::Written { written, pay_by }) => (written, pay_by),
            Ok(Confirmation::Superseded { recorded }) => {
                let under = Under {
                    sale_id,
                    keys: &keys,
                    epoch: epoch.as_deref(),
                };
                let unwritten = (&reserved[..], orders.len());
                return self
                    .superseded(&mut conn, under, recorded, &queue, report, unwritten)
                    .await;
            }
            // PostgreSQL down, or refusing work for a while, is not the
            // jobs' fault: give them back without using up an attempt.
            Err(error) if failure::transient_postgres(&error) => {
                return self
                    .give_back_uncharged(&mut conn, &queue, &reserved, error)
                    .await;
            }
            // A failure of the batch's own: one job is at fault, and only
            // it may be charged, or a poison job would drag its batch-mates
            // into the dead-letter set with it.
            Err(error) => {
                tracing::warn!(
                    error = %error,
                    "a batch failed; writing its orders one by one to find the job at fault"
                );
                let under = Under {
                    sale_id,
                    keys: &keys,
                    epoch: epoch.as_deref(),
                };
                let batch = Carried {
                    orders: &orders,
                    carries: &carries,
                    reserved: &reserved,
                };
                return self
                    .confirm_one_by_one(&mut conn, under, &queue, report, batch)
                    .await;
            }
        };
        report.count(&written);
        // After the commit, before the ack: a crash in between redelivers
        // the order jobs, and this runs again.
        self.schedule_deadlines(&mut conn, sale_id, pay_by, &orders, &written)
            .await
            .context("queueing payment deadlines")?;
        // Only now, after the commit, may the jobs leave the queue.
        queue
            .ack(&mut conn, &reserved)
            .await
            .context("acknowledging jobs")?;
        Ok(report)
    }

    /// Write orders to PostgreSQL in one transaction, within the write time
    /// limit (see `WorkerSettings::write_time_limit`). A write cut off by
    /// the limit fails as a timed-out I/O, which counts as "PostgreSQL
    /// refusing work for a while": its jobs go back uncharged.
    async fn confirm(
        &self,
        orders: &[OrderJob],
        epoch: Option<&str>,
    ) -> Result<Confirmation, sqlx::Error> {
        let limit = self.settings.write_time_limit();
        let write = self.store.confirm_orders(orders, &self.settings, epoch);
        tokio::time::timeout(limit, write)
            .await
            .unwrap_or_else(|_| {
                Err(sqlx::Error::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    format!("the write took longer than {limit:?}, half its lease"),
                )))
            })
    }

    /// PostgreSQL refused the batch: the sale was loaded into Redis again
    /// after the batch was reserved. Usually Redis was wiped: the batch's
    /// jobs went with it, and the new Redis sells their units again, so the
    /// orders are lost with the Redis that accepted them (a wipe's known
    /// cost, see docs/operations.md, "Limits"). Give the jobs back anyway, uncharged:
    /// if any are still on the queue, they are written on their next
    /// delivery, under the new epoch.
    ///
    /// One case is PostgreSQL's record that is behind: a load wrote Redis
    /// and then failed to record its epoch. Then Redis' epoch is still the
    /// batch's; record it, and the batch is written on its next delivery.
    /// `(jobs, orders)`: the jobs given back, and how many orders of
    /// theirs were not written.
    async fn superseded(
        &self,
        conn: &mut RedisConn,
        under: Under<'_>,
        recorded: Option<String>,
        queue: &Queue,
        mut report: BatchReport,
        (jobs, orders): (&[Reserved], usize),
    ) -> anyhow::Result<BatchReport> {
        let now = load::epoch(conn, under.keys).await?;
        match now.as_deref() {
            Some(now) if Some(now) == under.epoch => {
                tracing::warn!("PostgreSQL missed the sale's last load epoch; recording it");
                self.store
                    .record_load_epoch(under.sale_id, now, recorded.as_deref())
                    .await?;
            }
            _ => {
                tracing::warn!(
                    orders,
                    "the sale was loaded into Redis again after this batch was reserved; its orders are not written"
                );
                report.superseded += orders;
            }
        }
        self.give_back_now(conn, queue, jobs)
            .await
            .context("giving back a superseded batch")?;
        Ok(report)
    }

    /// Give `jobs` back to `queue`, due at once, without charging an attempt.
    async fn give_back_now(
        &self,
        conn: &mut RedisConn,
        queue: &Queue,
        jobs: &[Reserved],
    ) -> redis::RedisResult<(u64, u64)> {
        queue
            .retry(
                conn,
                jobs,
                Duration::ZERO,
                Attempt::NotTried,
                self.settings.max_attempts,
            )
            .await
    }

    /// PostgreSQL is down, or refusing work for a while: not the jobs'
    /// fault. Give `jobs` back, due at once, without charging an attempt,
    /// and fail the step (the worker loop backs off).
    async fn give_back_uncharged(
        &self,
        conn: &mut RedisConn,
        queue: &Queue,
        jobs: &[Reserved],
        error: sqlx::Error,
    ) -> anyhow::Result<BatchReport> {
        self.give_back_now(conn, queue, jobs)
            .await
            .context("giving back jobs after a failed write")?;
        Err(error).context("writing orders to PostgreSQL")
    }

    /// Reserve a batch from one of the sale's queues (`which` picks it from
    /// the sale's keys), up to `limit` of weight (`Queue::reserve_as`), and
    /// decode it with `decode`. Under `durability` a `WAIT` rides in the
    /// reserve's pipeline and says the batch's `confirmed` (the order
    /// queue's; the deadlines pass `local`: nothing waits on their
    /// replication). The report counts the work reserved as
    /// `weigh` weighs each job (a pass's job, its orders). A payload that
    /// does not decode can never succeed: its attempt counts, so it ends
    /// in the dead-letter set, and the rest carry on.
    async fn reserve<J>(
        &self,
        sale_id: i64,
        which: fn(&SaleKeys) -> &QueueKeys,
        limit: usize,
        (decode, weigh): Decoding<J>,
        durability: RedisDurability,
    ) -> anyhow::Result<Batch<J>> {
        let keys = SaleKeys::new(self.store.prefix(), sale_id);
        let queue = Queue::new(which(&keys).clone());
        let mut conn = self.store.redis().await?;
        // A reserve whose answer was lost took jobs nobody runs: its token
        // is kept, and the next reserve of this queue asks again with it,
        // for those jobs, uncharged (`lua/queue_reserve.lua`).
        let asked = which(&keys).due.clone();
        let token = self.unanswered.take(&asked);
        let reserved = queue
            .reserve_as(
                &mut conn,
                (limit, self.settings.lease(), self.settings.max_attempts),
                &token,
                (durability, &keys.waited),
            )
            .await;
        let (reservation, confirmed) = match reserved {
            Ok(reserved) => reserved,
            Err(error) => {
                if failure::answer_lost(&error) {
                    self.unanswered.keep(asked, token);
                }
                return Err(error).context("reserving jobs");
            }
        };
        let mut report = BatchReport {
            reclaimed: reservation.reclaimed,
            dead_lettered: reservation.dead_lettered,
            ..BatchReport::default()
        };
        let (mut jobs, mut reserved, mut broken) = (Vec::new(), Vec::new(), Vec::new());
        for job in reservation.jobs {
            match decode(&job.payload) {
                Ok(decoded) => {
                    report.reserved += weigh(&decoded);
                    jobs.push(decoded);
                    reserved.push(job);
                }
                // Counted too (as one each): a reserve that found work,
                // if only broken, is not an empty queue to the drain.
                Err(_) => {
                    report.reserved += 1;
                    broken.push(job);
                }
            }
        }
        log_reservation(&report);
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
            sale_id,
            keys,
            epoch: None,
            queue,
            conn,
            report,
            jobs,
            reserved,
            confirmed,
        })
    }
}
