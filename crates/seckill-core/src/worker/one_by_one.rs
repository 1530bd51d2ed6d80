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
    /// PostgreSQL goes away meanwhile, the rest are given back uncharged;
    /// a job that has already shown an order at fault is charged all the
    /// same, or a job whose bad order is followed by one that meets an
    /// outage would come back uncharged each time and never be
    /// dead-lettered.
    pub(super) async fn confirm_one_by_one(
        &self,
        conn: &mut RedisConn,
        under: Under<'_>,
        queue: &Queue,
        mut report: BatchReport,
        batch: Carried<'_>,
    ) -> anyhow::Result<BatchReport> {
        let mut orders = batch.orders;
        for (i, (carries, job)) in batch.carries.iter().zip(batch.reserved).enumerate() {
            let (its, rest) = orders.split_at(*carries);
            orders = rest;
            let mut failed = false;
            for (k, order) in its.iter().enumerate() {
                let one = std::slice::from_ref(order);
                match self.confirm(one, under.epoch).await {
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
                        let uncharged = if failed {
                            self.charge(conn, queue, job).await?;
                            &batch.reserved[i + 1..]
                        } else {
                            &batch.reserved[i..]
                        };
                        return self
                            .give_back_uncharged(conn, queue, uncharged, error)
                            .await;
                    }
                    Err(error) => {
                        tracing::error!(order_id = %order.order_id, error = %error, "an order failed by itself");
                        report.failed += 1;
                        failed = true;
                    }
                }
            }
            if failed {
                self.charge(conn, queue, job).await?;
            } else {
                queue.ack(conn, std::slice::from_ref(job)).await?;
            }
        }
        Ok(report)
    }

    /// Give `job` back charged an attempt: it carries an order at fault.
    async fn charge(
        &self,
        conn: &mut RedisConn,
        queue: &Queue,
        job: &Reserved,
    ) -> anyhow::Result<()> {
        let job = std::slice::from_ref(job);
        queue
            .retry(
                conn,
                job,
                FAILED_JOB_DELAY,
                Attempt::Failed,
                self.settings.max_attempts,
            )
            .await
            .context("giving back a failed job")?;
        Ok(())
    }
}
