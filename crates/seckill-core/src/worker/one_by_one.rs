//! A failed batch, written order by order, to find the order at fault.

use anyhow::Context;

use super::{BatchReport, FAILED_JOB_DELAY, Under, Worker};
use crate::domain::OrderJob;
use crate::failure;
use crate::queue::{Attempt, Queue, Reserved};
use crate::redis_pool::RedisConn;
use crate::store::Confirmation;

/// A batch's orders, in one list, beside the jobs that carry them: job
/// `k` carries the next `carries[k]` orders.
#[derive(Clone, Copy)]
pub(super) struct Carried<'a> {
    pub(super) orders: &'a [OrderJob],
    pub(super) carries: &'a [usize],
    pub(super) reserved: &'a [Reserved],
}

impl Worker {
    /// Write a failed batch's orders one transaction each: a job whose
    /// orders all commit is acknowledged; one carrying an order that fails
    /// by itself is charged an attempt and tried again later (its orders
    /// that committed are skipped then: the order id is the key). If
    /// PostgreSQL goes away meanwhile, the rest are given back uncharged,
    /// the job whose order failed among them: its orders after the outage
    /// were never tried, and charged on its last attempt it would take
    /// them, each a buyer's `202`, to the dead-letter set. It is charged
    /// on a delivery that tries every one of its orders (`failure.rs`: an
    /// outage does not dead-letter healthy orders).
    pub(super) async fn confirm_one_by_one(
        &self,
        conn: &mut RedisConn,
        under: Under<'_>,
        queue: &Queue,
        mut report: BatchReport,
        batch: Carried<'_>,
    ) -> anyhow::Result<BatchReport> {
        let max_attempts = self.settings.max_attempts;
        // All of them within the write time limit too, as one batch's
        // write is (the batch's own write, failed, took at most the other
        // half of the lease): the race it bounds is the same, the lease
        // running out while this worker still writes, its jobs handed to
        // another worker and charged an attempt each, healthy ones too. A
        // write cut off here goes as one PostgreSQL refused for a while:
        // the jobs not yet done are given back uncharged (their orders
        // that committed are skipped on the next delivery).
        let until = tokio::time::Instant::now() + self.settings.write_time_limit();
        let mut orders = batch.orders;
        for (i, (carries, job)) in batch.carries.iter().zip(batch.reserved).enumerate() {
            let (its, rest) = orders.split_at(*carries);
            orders = rest;
            let mut failed = false;
            for (k, order) in its.iter().enumerate() {
                let one = std::slice::from_ref(order);
                let confirmed = tokio::time::timeout_at(until, self.confirm(one, under.epoch))
                    .await
                    .unwrap_or_else(|_| {
                        Err(sqlx::Error::Io(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "a failed batch's orders, written one by one, took half the lease",
                        )))
                    });
                match confirmed {
                    Ok(Confirmation::Written { written, pay_by }) => {
                        report.count(&written);
                        self.schedule_deadlines(conn, under.sale_id, pay_by, one, &written)
                            .await?;
                    }
                    Ok(Confirmation::Superseded { recorded }) => {
                        return self
                            .superseded(
                                conn,
                                under,
                                recorded,
                                queue,
                                report,
                                (&batch.reserved[i..], its.len() - k + orders.len()),
                            )
                            .await;
                    }
                    Err(error) if failure::transient_postgres(&error) => {
                        return self
                            .give_back_uncharged(conn, queue, &batch.reserved[i..], error)
                            .await;
                    }
                    Err(error) => {
                        tracing::error!(order_id = %order.order_id, error = %error, "an order failed by itself");
                        report.failed += 1;
                        failed = true;
                    }
                }
            }
            let job = std::slice::from_ref(job);
            if failed {
                queue
                    .retry(conn, job, FAILED_JOB_DELAY, Attempt::Failed, max_attempts)
                    .await
                    .context("giving back a failed job")?;
            } else {
                queue.ack(conn, job).await?;
            }
        }
        Ok(report)
    }
}
