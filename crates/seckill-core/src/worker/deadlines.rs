//! The worker's second queue per sale: payment deadlines.
//!
//! Each confirmed order gets a delayed job on its sale's deadline queue (the
//! article's delay queue), due when its payment window closes. It is queued
//! after the commit that confirms the order and before the order job's ack,
//! so a crash in between redelivers the order job, whose (no-op) write
//! queues the deadline again; queueing by id keeps one job.
//!
//! When a deadline comes due, [`Worker::try_process_deadlines`] cancels the
//! order if it is still unpaid and gives its unit back: see `payment.rs`,
//! and `store/orders.rs` for how a deadline and a payment race. PostgreSQL's
//! clock alone says whether the window has closed; a job that comes early
//! (the queue runs on Redis' clock) waits again for the time left.
//!
//! The deadlines live only in Redis, and a Redis that restarts without
//! persistence loses them: the orders would stay confirmed, unpayable and
//! never cancelled, their units never back on sale. So the sweep
//! (`sweep.rs`) puts the deadline of every confirmed order back in its
//! queue. Queueing by id makes that a no-op for every deadline Redis still
//! has.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context;

use super::{Batch, BatchReport, FAILED_JOB_DELAY, Worker};
use crate::domain::OrderJob;
use crate::failure;
use crate::keys::SaleKeys;
use crate::payment;
use crate::queue::{Attempt, Queue, Reserved};
use crate::redis_pool::RedisConn;
use crate::store::{Deadline, Written};

/// Unpaid orders the sweep reads at a time.
const SWEEP_PAGE: i64 = 1_000;

impl Worker {
    /// Queue the payment deadline of every order of the batch that is
    /// confirmed in PostgreSQL, due when its `pay_by` passes. Orders just
    /// confirmed and redelivered ones alike: queueing by id keeps one job,
    /// and a redelivered order keeps the deadline it was given first.
    ///
    /// An order this batch confirmed (`written`) has `pay_by` one payment
    /// window after its transaction began, so its deadline is queued one
    /// window from now, with no read: a little after `pay_by` (by the
    /// time the write and commit took), unless Redis' clock is behind
    /// PostgreSQL's, and then a job that comes early waits again for the
    /// time left (see `try_process_deadlines`). Only a redelivered order's
    /// deadline is read from PostgreSQL; a redelivered order found
    /// cancelled gets one due at once, which makes sure its unit came
    /// back (`Store::payment_deadlines` says why).
    pub(super) async fn schedule_deadlines(
        &self,
        conn: &mut RedisConn,
        orders: &[OrderJob],
        written: &[Written],
    ) -> anyhow::Result<u64> {
        let redelivered: Vec<_> = orders
            .iter()
            .zip(written)
            .filter(|(_, written)| **written == Written::AlreadyThere)
            .map(|(order, _)| order.order_id)
            .collect();
        let read = match redelivered.is_empty() {
            true => Default::default(),
            false => self.store.payment_deadlines(&redelivered).await?,
        };
        let window = self.settings.payment_window();
        let deadlines = orders
            .iter()
            .zip(written)
            .filter_map(|(order, written)| match written {
                Written::Confirmed => Some((order, window)),
                Written::AlreadyThere => Some((order, *read.get(&order.order_id)?)),
                Written::Rejected => None,
            });
        enqueue_deadlines(conn, self.store.prefix(), deadlines).await
    }

    /// One step on one sale's deadline queue: for each due deadline, cancel
    /// the order in PostgreSQL if it is still unpaid, give its unit back in
    /// Redis, and only then ack. The race with a payment is decided in
    /// `store/orders.rs`; the unit's return is `payment.rs`.
    #[tracing::instrument(skip(self), fields(reserved))]
    pub async fn try_process_deadlines(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let Batch {
            keys,
            queue,
            mut conn,
            mut report,
            orders,
            reserved,
            ..
        } = self.reserve(sale_id, |keys| &keys.deadlines).await?;
        // Jobs given back because they came early. They must be left out of
        // the acks below: a retry that charges no attempt sets the job's
        // attempt back, so once another worker has reserved it again, an
        // ack from this batch would match its attempt and delete the job
        // from under it.
        let mut given_back = vec![false; reserved.len()];
        let still_held = |until: usize, given_back: &[bool]| -> Vec<Reserved> {
            reserved[..until]
                .iter()
                .zip(given_back)
                .filter(|(_, back)| !**back)
                .map(|(job, _)| job.clone())
                .collect()
        };
        for (done, order) in orders.iter().enumerate() {
            let deadline = match self.store.cancel_unpaid(order.order_id).await {
                Ok(deadline) => deadline,
                Err(error) => {
                    // Acknowledge what is done; give this job and the rest
                    // back; stop.
                    let finished = still_held(done, &given_back);
                    self.give_back(&mut conn, &queue, &finished, &reserved[done..], &error)
                        .await?;
                    return Err(error).context("cancelling an unpaid order");
                }
            };
            match deadline {
                Deadline::Cancelled => report.cancelled += 1,
                Deadline::Paid => report.paid_in_time += 1,
                Deadline::AlreadyCancelled | Deadline::Nothing => report.redelivered += 1,
                Deadline::NotDue { left } => {
                    // Early, by PostgreSQL's clock: back on the queue for the
                    // time left, uncharged, and left out of this batch's ack.
                    report.not_due += 1;
                    given_back[done] = true;
                    queue
                        .retry(
                            &mut conn,
                            &reserved[done..=done],
                            left,
                            Attempt::NotTried,
                            self.settings.max_attempts,
                        )
                        .await
                        .context("putting back a deadline that came early")?;
                }
            }
            if deadline.returns_unit() {
                // A Redis failure here leaves this job (and the rest of the
                // batch) unacknowledged: they are delivered again when the
                // lease runs out, and the return then happens.
                let returned =
                    payment::give_unit_back(&self.store, &mut conn, &keys, order).await?;
                tracing::info!(order_id = %order.order_id, ?returned, "deadline passed unpaid");
            }
        }
        queue
            .ack(&mut conn, &still_held(reserved.len(), &given_back))
            .await
            .context("acknowledging deadlines")?;
        Ok(report)
    }

    /// After a failed cancellation: ack the deadlines done, and give the
    /// rest back, without charging an attempt while PostgreSQL is
    /// unreachable.
    async fn give_back(
        &self,
        conn: &mut RedisConn,
        queue: &Queue,
        finished: &[Reserved],
        rest: &[Reserved],
        error: &sqlx::Error,
    ) -> anyhow::Result<()> {
        let attempt = if failure::transient_postgres(error) {
            Attempt::NotTried
        } else {
            Attempt::Failed
        };
        queue
            .ack(conn, finished)
            .await
            .context("acknowledging deadlines")?;
        queue
            .retry(
                conn,
                rest,
                FAILED_JOB_DELAY,
                attempt,
                self.settings.max_attempts,
            )
            .await
            .context("giving back deadlines after a failed cancel")?;
        Ok(())
    }

    /// Put the payment deadline of every confirmed order back in its sale's
    /// queue (part of the sweep, `sweep.rs`). Returns how many deadlines
    /// were missing and are queued again.
    pub(super) async fn requeue_lost_deadlines(&self, conn: &mut RedisConn) -> anyhow::Result<u64> {
        // A page at a time: the sweep's memory and each query's cost stay
        // those of one page, however many orders are unpaid.
        let (mut swept, mut after) = (0, None);
        loop {
            let unpaid = self.store.unpaid_orders(after, SWEEP_PAGE).await?;
            let deadlines = unpaid.iter().map(|(order, left)| (order, *left));
            swept += enqueue_deadlines(conn, self.store.prefix(), deadlines).await?;
            match unpaid.last() {
                Some((last, _)) if unpaid.len() as i64 == SWEEP_PAGE => after = Some(last.order_id),
                _ => break,
            }
        }
        if swept > 0 {
            tracing::warn!(
                count = swept,
                "payment deadlines Redis had lost are queued again"
            );
        }
        Ok(swept)
    }
}

/// Queue deadline jobs, each on its sale's deadline queue, due after its
/// delay. Orders confirmed together share their deadline, so this is usually
/// one enqueue per sale. Returns how many jobs were new to their queue.
async fn enqueue_deadlines<'a>(
    conn: &mut RedisConn,
    prefix: &str,
    deadlines: impl Iterator<Item = (&'a OrderJob, Duration)>,
) -> anyhow::Result<u64> {
    let mut grouped: BTreeMap<(i64, Duration), Vec<(String, String)>> = BTreeMap::new();
    for (order, left) in deadlines {
        grouped
            .entry((order.sale_id, left))
            .or_default()
            .push((order.order_id.to_string(), order.to_payload()));
    }
    let mut added = 0;
    for ((sale_id, left), jobs) in grouped {
        let jobs: Vec<(&str, &str)> = jobs
            .iter()
            .map(|(id, payload)| (id.as_str(), payload.as_str()))
            .collect();
        added += Queue::new(SaleKeys::new(prefix, sale_id).deadlines)
            .enqueue(conn, &jobs, left)
            .await
            .context("queueing payment deadlines")?;
    }
    Ok(added)
}
