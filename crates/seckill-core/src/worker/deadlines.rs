//! The worker's second queue per sale: payment deadlines.
//!
//! The orders a batch confirms share their deadline (`pay_by`, the
//! transaction's `now()` plus the window), and get one delayed job for
//! them all on their sale's deadline queue (the article's delay queue),
//! due when that moment passes: a [`DeadlineJob`], named by the moment. It
//! is queued after the commit that confirms the orders and before the
//! order jobs' ack, so a crash in between redelivers the order jobs, whose
//! (no-op) write queues the deadline again; queueing by id keeps one job.
//! One job a batch, not one an order: the deadlines were the largest part
//! of what Redis spent on each order drained.
//!
//! When a deadline comes due, [`Worker::try_process_deadlines`] cancels
//! every order of its moment still unpaid, in one statement, and gives
//! their units back: see `payment.rs`, and `store/orders.rs` for how a
//! deadline and a payment race. PostgreSQL's clock alone says whether the
//! window has closed; a job that comes early (the queue runs on Redis'
//! clock) waits again for the time left.
//!
//! The deadlines live only in Redis, and a Redis that restarts without
//! persistence loses them: the orders would stay confirmed, unpayable and
//! never cancelled, their units never back on sale. So the sweep
//! (`sweep.rs`) puts back the deadline of every moment that still has
//! confirmed orders. Queueing by id makes that a no-op for every deadline
//! Redis still has.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;

use chrono::{DateTime, Utc};

use super::{Batch, BatchReport, FAILED_JOB_DELAY, Worker};
use crate::domain::{DeadlineJob, OrderJob};
use crate::failure;
use crate::keys::SaleKeys;
use crate::payment;
use crate::queue::{Attempt, Queue};
use crate::redis_pool::RedisConn;
use crate::store::{Deadline, Written};

/// Deadline jobs one step reserves. One: a job gives back the unit of
/// every cancelled order of its moment, up to a batch of them (a unit
/// return each), and a step must end well inside its lease, which counts
/// an attempt when it runs out. A batch of such jobs could not.
const DEADLINES_PER_STEP: usize = 1;

/// Deadlines (a sale and a moment) the sweep reads at a time.
const SWEEP_PAGE: i64 = 1_000;

impl Worker {
    /// Queue the payment deadline of the orders of this write that are
    /// confirmed in PostgreSQL: one job for the orders it confirmed, due
    /// when `pay_by` passes, and one for each moment of the redelivered
    /// ones. Queueing by id keeps one job a moment, and a redelivered
    /// order keeps the deadline it was given first.
    ///
    /// The orders this write confirmed (`written`) have `pay_by` one
    /// payment window after its transaction began, so their deadline is
    /// queued one window from now: a little after `pay_by` (by the time
    /// the write and commit took), unless Redis' clock is behind
    /// PostgreSQL's, and then a job that comes early waits again for the
    /// time left (see `try_process_deadlines`). Only the redelivered
    /// orders' deadlines are read from PostgreSQL; a moment with a
    /// redelivered order found cancelled is due at once, which makes sure
    /// its unit came back (`Store::payment_deadlines` says why).
    pub(super) async fn schedule_deadlines(
        &self,
        conn: &mut RedisConn,
        sale_id: i64,
        pay_by: DateTime<Utc>,
        orders: &[OrderJob],
        written: &[Written],
    ) -> anyhow::Result<u64> {
        let redelivered: Vec<_> = orders
            .iter()
            .zip(written)
            .filter(|(_, written)| **written == Written::AlreadyThere)
            .map(|(order, _)| order.order_id)
            .collect();
        let mut deadlines = match redelivered.is_empty() {
            true => Vec::new(),
            false => self
                .store
                .payment_deadlines(&redelivered)
                .await
                .context("reading payment deadlines")?,
        };
        if written.contains(&Written::Confirmed) {
            deadlines.push((pay_by, self.settings.payment_window()));
        }
        let deadlines = deadlines
            .into_iter()
            .map(|(pay_by, left)| (DeadlineJob::new(sale_id, pay_by), left));
        let (added, queued) = enqueue_deadlines(conn, self.store.prefix(), deadlines).await;
        queued.map(|()| added)
    }

    /// One step on one sale's deadline queue: take its next due deadline,
    /// cancel its moment's unpaid orders in PostgreSQL, give their units
    /// back in Redis, and only then ack. The race with a payment is decided
    /// in `store/orders.rs`; the units' return is `payment.rs`.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_deadlines(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let Batch {
            keys,
            queue,
            mut conn,
            mut report,
            jobs,
            reserved,
            ..
        } = self
            .reserve(
                sale_id,
                |keys| &keys.deadlines,
                DEADLINES_PER_STEP,
                (Due::from_payload, |_| 1),
                crate::config::RedisDurability::Local,
            )
            .await?;
        let Some(due) = jobs.first() else {
            return Ok(report);
        };
        let max_attempts = self.settings.max_attempts;
        let returns = match self.cancel_due(due).await {
            Ok(Deadline::Passed { cancelled, returns }) => {
                report.passed += 1;
                report.cancelled += cancelled;
                returns
            }
            Ok(Deadline::NotDue { left }) => {
                // Early, by PostgreSQL's clock: back on the queue for the
                // time left, uncharged (and not acked: the retry set its
                // attempt back, so an ack could delete it from under the
                // worker that reserves it next).
                report.not_due += 1;
                queue
                    .retry(&mut conn, &reserved, left, Attempt::NotTried, max_attempts)
                    .await
                    .context("putting back a deadline that came early")?;
                return Ok(report);
            }
            Err(error) => {
                // Back for a later try, charged only if PostgreSQL itself
                // was not the trouble.
                let attempt = match failure::transient_postgres(&error) {
                    true => Attempt::NotTried,
                    false => Attempt::Failed,
                };
                queue
                    .retry(
                        &mut conn,
                        &reserved,
                        FAILED_JOB_DELAY,
                        attempt,
                        max_attempts,
                    )
                    .await
                    .context("giving back a deadline after a failed cancel")?;
                return Err(error).context("cancelling unpaid orders");
            }
        };
        // A Redis failure here leaves the job unacknowledged: it is
        // delivered again when the lease runs out, and the returns then
        // happen (once each).
        for order in &returns {
            let returned = payment::give_unit_back(&self.store, &mut conn, &keys, order).await?;
            tracing::info!(order_id = %order.order_id, ?returned, "deadline passed unpaid");
        }
        queue
            .ack(&mut conn, &reserved)
            .await
            .context("acknowledging the deadline")?;
        Ok(report)
    }

    /// Cancel what `due` names: its moment's unpaid orders, or those of
    /// the moment of the one order an earlier version's job names (none,
    /// for an order that has no deadline). Such a job runs as its moment's
    /// would, returns included: the first of a moment's jobs cancels all
    /// of its orders, and another of them may have been lost meanwhile
    /// (the sweep no longer finds a cancelled order). Each later one finds
    /// every unit back (a look each, `lua/unit_return.lua`): a cost paid
    /// once, on the jobs queued before the upgrade.
    async fn cancel_due(&self, due: &Due) -> Result<Deadline, sqlx::Error> {
        let deadline = match due {
            Due::Moment(deadline) => Some(*deadline),
            Due::Order(order) => self
                .store
                .payment_deadlines(&[order.order_id])
                .await?
                .first()
                .map(|(pay_by, _)| DeadlineJob::new(order.sale_id, *pay_by)),
        };
        match deadline {
            Some(deadline) => {
                self.store
                    .cancel_unpaid(deadline.sale_id, deadline.pay_by())
                    .await
            }
            None => Ok(Deadline::Passed {
                cancelled: 0,
                returns: Vec::new(),
            }),
        }
    }

    /// Put the payment deadline of every moment that still has confirmed
    /// orders back in its sale's queue (part of the sweep, `sweep.rs`).
    /// Returns how many deadlines were missing and are queued again.
    pub(super) async fn requeue_lost_deadlines(&self, conn: &mut RedisConn) -> anyhow::Result<u64> {
        // A page at a time: the sweep's memory and each query's cost stay
        // those of one page, however many deadlines are pending.
        // A sale whose shard does not answer keeps the others' deadlines
        // from nobody: every page is swept, and the first failure returned
        // after them (the sweep stays due, and puts that sale's back later).
        let (mut swept, mut after, mut failed) = (0, None, None);
        loop {
            let page = self.store.unpaid_deadlines(after, SWEEP_PAGE).await?;
            let last = page.last().map(|(job, _)| (job.sale_id, job.pay_by()));
            let full = page.len() as i64 == SWEEP_PAGE;
            let (added, queued) =
                enqueue_deadlines(conn, self.store.prefix(), page.into_iter()).await;
            swept += added;
            if let Err(error) = queued {
                failed.get_or_insert(error);
            }
            match last {
                Some(last) if full => after = Some(last),
                _ => break,
            }
        }
        if swept > 0 {
            tracing::warn!(
                count = swept,
                "payment deadlines Redis had lost are queued again"
            );
        }
        failed.map_or(Ok(swept), Err)
    }
}

/// A job on a deadline queue: a moment's, or one order's, as queued by a
/// version of seckill before one job a moment, which a Redis that keeps its
/// data may still hold after the upgrade (its payload is the order's).
enum Due {
    Moment(DeadlineJob),
    Order(OrderJob),
}

impl Due {
    fn from_payload(payload: &str) -> Result<Self, serde_json::Error> {
        DeadlineJob::from_payload(payload)
            .map(Self::Moment)
            .or_else(|_| OrderJob::from_payload(payload).map(Self::Order))
    }
}

/// Queue deadline jobs, each on its sale's deadline queue, due after its
/// delay. Returns how many jobs were new to their queue, and whether every
/// sale's were queued: one sale whose queue failed (its shard down) does
/// not keep the others' from theirs; its first failure is returned, the
/// others logged.
async fn enqueue_deadlines(
    conn: &mut RedisConn,
    prefix: &str,
    deadlines: impl Iterator<Item = (DeadlineJob, Duration)>,
) -> (u64, anyhow::Result<()>) {
    let mut grouped: BTreeMap<(i64, Duration), Vec<(String, String)>> = BTreeMap::new();
    for (deadline, left) in deadlines {
        grouped
            .entry((deadline.sale_id, left))
            .or_default()
            .push((deadline.id(), deadline.to_payload()));
    }
    let (mut added, mut failed) = (0, None);
    for ((sale_id, left), jobs) in grouped {
        let jobs: Vec<(&str, &str)> = jobs
            .iter()
            .map(|(id, payload)| (id.as_str(), payload.as_str()))
            .collect();
        let queued = Queue::new(SaleKeys::new(prefix, sale_id).deadlines)
            .enqueue(conn, &jobs, left)
            .await;
        match queued {
            Ok(new) => added += new,
            Err(error) if failed.is_some() => tracing::warn!(
                sale_id,
                %error,
                "a sale's payment deadlines could not be queued"
            ),
            Err(error) => {
                failed = Some(
                    anyhow::Error::from(error)
                        .context(format!("queueing payment deadlines of sale {sale_id}")),
                );
            }
        }
    }
    (added, failed.map_or(Ok(()), Err))
}
