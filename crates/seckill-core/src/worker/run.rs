//! The worker's two loops, run side by side: a full pass over every sale
//! at each poll, and the sale whose stock just changed (a purchase queued
//! an order there), written at once. Side by side, because a full pass
//! lists every sale in PostgreSQL and asks each of its queues: with many
//! sales it takes longer than a poll, and a purchase must not wait for it.
//!
//! Both loops may take a batch of the same sale at the same moment: the
//! queue leases each job to one reserve (`lua/queue_reserve.lua`), so they
//! never write the same order twice.

use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use super::{BatchReport, IN_PLAY_AFTER_WINDOW, Worker};
use crate::backoff;
use crate::events::StockChange;
use crate::metrics::metrics;

impl Worker {
    /// Drain the queues until `shutdown` is cancelled. A batch in progress
    /// when it is cancelled is finished first.
    pub async fn run(self, shutdown: CancellationToken) {
        self.run_woken(shutdown, None).await;
    }

    /// [`Worker::run`], woken by the sales' stock changes (`events.rs`):
    /// every purchase publishes one after its order is on the queue, so an
    /// idle worker writes a sale's new order at once instead of at its next
    /// poll. The poll stays: a message can be lost (pub/sub forgets while
    /// its connection is down), and deadlines come due without any.
    pub async fn run_woken(
        self,
        shutdown: CancellationToken,
        wake: Option<broadcast::Receiver<StockChange>>,
    ) {
        tracing::info!(batch_size = self.settings.batch_size, "worker started");
        tokio::join!(self.poll(&shutdown), self.on_wake(&shutdown, wake));
        tracing::info!("worker stopped");
    }

    /// Every sale in play, at every poll; the sales a pass found work on
    /// are then drained, and the next pass waits for the poll as an idle
    /// one does (new orders wake the worker anyway). Not a whole pass again
    /// at once: with thousands of sales in play, passes back to back while
    /// orders flowed made three round trips per sale for every batch
    /// written, and slowed the purchases of the one live sale by a fifth.
    async fn poll(&self, shutdown: &CancellationToken) {
        let mut failures: u32 = 0;
        while !shutdown.is_cancelled() {
            let pause = match self.pass().await {
                Ok((report, busy)) if !busy.is_empty() => {
                    failures = 0;
                    tracing::debug!(?report, "batch done");
                    for sale_id in busy {
                        self.drain_woken(sale_id).await;
                        self.drain_deadlines(sale_id).await;
                    }
                    self.settings.poll()
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
    }

    /// The sale of each stock change, drained at once. Changes missed (the
    /// receiver lagged) are left to the poll; with no receiver, or once it
    /// is closed, this loop ends and the poll alone remains.
    async fn on_wake(
        &self,
        shutdown: &CancellationToken,
        wake: Option<broadcast::Receiver<StockChange>>,
    ) {
        let Some(mut changes) = wake else { return };
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => change,
            };
            match change {
                Ok(change) => self.drain_woken(change.sale_id).await,
                Err(broadcast::error::RecvError::Lagged(_)) => {}
                Err(broadcast::error::RecvError::Closed) => return,
            }
        }
    }

    /// Write a woken sale's queue until it is empty. A failure is left to
    /// the poll, which backs off.
    async fn drain_woken(&self, sale_id: i64) {
        if let Err(error) = self.drain(sale_id).await {
            tracing::warn!(error = format!("{error:#}"), sale_id, "woken batch failed");
        }
    }

    /// Process a sale's due payment deadlines until none is left. A
    /// failure is left to the poll, which backs off.
    async fn drain_deadlines(&self, sale_id: i64) {
        loop {
            match self.try_process_deadlines(sale_id).await {
                Ok(report) if report.reserved > 0 => {}
                Ok(_) => return,
                Err(error) => {
                    tracing::warn!(error = format!("{error:#}"), sale_id, "deadlines failed");
                    return;
                }
            }
        }
    }

    /// Write a sale's order queue until it is empty, [`BATCHES_IN_FLIGHT`]
    /// batches at a time: while one writes in PostgreSQL, the others write
    /// too, or queue their payment deadlines, ack, and reserve the next
    /// batch in Redis.
    ///
    /// Several batches of one sale at once are safe: the queue leases each
    /// job to one reserve, so no order is in two; each transaction starts
    /// by taking the sale's row with a share lock that holds loads off
    /// (`Store::confirm_orders`), and their raises of `sold` take turns on
    /// the row's update lock, each re-checked against the stock on the row
    /// the one before committed (the same as several workers on one sale).
    pub async fn drain(&self, sale_id: i64) -> anyhow::Result<BatchReport> {
        let lane = || async {
            let mut total = BatchReport::default();
            loop {
                let report = self.try_process_batch(sale_id).await?;
                if report.reserved == 0 {
                    return anyhow::Ok(total);
                }
                total.add(report);
            }
        };
        let lanes = futures_util::future::join_all((0..BATCHES_IN_FLIGHT).map(|_| lane())).await;
        let mut total = BatchReport::default();
        for lane in lanes {
            total.add(lane?);
        }
        Ok(total)
    }
}

/// Batches of one sale a worker writes at once (see [`Worker::drain`]):
/// enough that PostgreSQL and Redis each have one to work on while the
/// others wait for the other server. Measured with `seckill bench --only
/// drain` (docs/bench.md, "The sale checked once per statement"): four
/// drain faster than three since a batch costs PostgreSQL less, with the
/// default batch size ([`crate::config::WorkerSettings`]).
const BATCHES_IN_FLIGHT: usize = 4;

impl Worker {
    /// One pass over the order queue and deadline queue of every sale in
    /// play (every sale, on a full pass). Returns what it did in total.
    pub async fn run_once(&self) -> anyhow::Result<BatchReport> {
        Ok(self.pass().await?.0)
    }

    /// [`Worker::run_once`], and the sales whose queues had work.
    pub(crate) async fn pass(&self) -> anyhow::Result<(BatchReport, Vec<i64>)> {
        let mut total = BatchReport::default();
        let mut busy = Vec::new();
        let started = std::time::Instant::now();
        // A sale that ended has work only until its last deadline (one
        // payment window after its end) and whatever an outage delayed:
        // most passes visit the sales still in play, so that an idle pass
        // costs the live sales, not every sale ever made (with 10,000
        // ended sales, it cost purchases a fifth of their speed: the
        // bench's `ended` rows). A full pass, on a worker's first and every
        // ten minutes, visits every sale, so nothing left on an old sale's
        // queue is stranded.
        let full = self.full_pass.due();
        let sales = if full {
            self.store.sale_ids().await?
        } else {
            self.store
                .sales_in_play(self.settings.payment_window() + IN_PLAY_AFTER_WINDOW)
                .await?
        };
        // The sales first: without PostgreSQL there is nothing to do, and
        // the pass fails at once (the sweep reads PostgreSQL too).
        //
        // One sale's failure (its shard down, its replica not confirming)
        // stops neither the other sales of this pass nor the next full
        // pass: the others are visited, and a full pass counts as done
        // only when every sale was. Nor does the sweep's: its lock lives
        // on one shard, and a sweep that failed there ended the pass before
        // any sale was visited, every pass until the shard was back, so no
        // sale cancelled its unpaid orders. It stays due, and is tried
        // again on the next pass. The first failure is the pass's; the
        // others are logged.
        let mut failed: Option<anyhow::Error> = None;
        if self.sweep.due() {
            match self.sweep().await {
                Ok(swept) => {
                    total.swept = swept;
                    self.sweep.done(started);
                }
                Err(error) => failed = Some(error.context("the sweep")),
            }
        }
        for sale_id in sales {
            let visited = async {
                let orders = self.try_process_batch(sale_id).await?;
                let deadlines = self.try_process_deadlines(sale_id).await?;
                anyhow::Ok((orders, deadlines))
            };
            match visited.await {
                Ok((orders, deadlines)) => {
                    if orders.reserved + deadlines.reserved > 0 {
                        busy.push(sale_id);
                    }
                    total.add(orders);
                    total.add(deadlines);
                }
                Err(error) if failed.is_some() => {
                    tracing::warn!(
                        sale_id,
                        error = format!("{error:#}"),
                        "a sale's batch failed"
                    );
                }
                Err(error) => failed = Some(error.context(format!("sale {sale_id}"))),
            }
        }
        // Confirmed and rejected are counted per batch, above: the loop
        // woken by a purchase writes batches without this pass.
        metrics().orders("cancelled", total.cancelled);
        if let Some(error) = failed {
            return Err(error);
        }
        if full {
            self.full_pass.done(started);
        }
        Ok((total, busy))
    }
}
