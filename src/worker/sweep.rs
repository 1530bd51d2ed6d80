//! The sweep: every worker, on its first pass and every [`SWEEP_EVERY`]
//! after, repairs what a Redis that lost data (a restart without
//! persistence, a wipe) cannot repair by itself. Under a lock, so one worker
//! at a time; a worker that finds the lock taken skips its turn. Both parts
//! only add what is missing, so a sweep that runs twice changes nothing.
//!
//! 1. Payment deadlines (`deadlines.rs`): every confirmed order's deadline
//!    is queued again; queueing by id keeps one job.
//! 2. Units (this file's reconcile): every order PostgreSQL holds a unit
//!    for is counted in its sale's Redis figures. The race it closes: a
//!    worker reserves a batch, Redis is wiped (the jobs with it), a page
//!    loads the sale before the batch commits, the worker commits and dies
//!    before its own correction (`Worker::count_in_redis`). No job is left
//!    to redeliver, and Redis promises those units again: later 202s end
//!    rejected, and those buyers can buy twice. Until the next sweep, that
//!    is; `lua/orders_apply.lua` says how it stays right while deadlines
//!    give units back.

use std::time::{Duration, Instant};

use anyhow::Context;

use super::{SWEEP_EVERY, Worker};
use crate::keys::{self, SaleKeys};
use crate::lock::RedisLock;
use crate::store::sales;

/// How long the sweep lock lives: longer than a sweep takes, short enough
/// that a worker that died mid-sweep does not hold the others up for long.
const SWEEP_LOCK_TTL: Duration = Duration::from_secs(30);

/// Orders per call of `orders_apply.lua`: bounds how long one call blocks
/// Redis.
const RECONCILE_CHUNK: usize = 500;

/// What a sweep repaired.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Swept {
    /// Payment deadlines queued again (Redis had lost them).
    pub deadlines: u64,
    /// Orders PostgreSQL holds a unit for that Redis had not counted.
    pub units: u64,
}

impl Worker {
    /// Whether this worker's next pass should sweep (and, if so, note that it does).
    pub(super) fn sweep_is_due(&self) -> bool {
        let mut last = self.last_sweep.lock().expect("sweep clock poisoned");
        let due = last.is_none_or(|at| at.elapsed() >= SWEEP_EVERY);
        if due {
            *last = Some(Instant::now());
        }
        due
    }

    /// Sweep now, unless another worker is sweeping right now (then
    /// nothing is done and nothing is reported).
    pub async fn sweep(&self) -> anyhow::Result<Swept> {
        let mut conn = self.store.redis().await?;
        let (lock_key, fence_key) = keys::sweep_lock(&self.store.prefix);
        let lock = RedisLock::new(lock_key, fence_key, SWEEP_LOCK_TTL);
        // The race this lock prevents is only waste (both parts are
        // idempotent), so a worker that finds it taken simply skips.
        let Some(guard) = lock
            .try_acquire(&mut conn)
            .await
            .context("taking the sweep lock")?
        else {
            return Ok(Swept::default());
        };
        let swept = async {
            Ok::<_, anyhow::Error>(Swept {
                deadlines: self.requeue_lost_deadlines(&mut conn).await?,
                units: self.reconcile(&mut conn).await?,
            })
        }
        .await;
        // Not fatal if it fails: the lock expires with its TTL.
        let _ = guard.release(&mut conn).await;
        swept
    }

    /// Count in Redis every order PostgreSQL holds a unit for, in every
    /// sale loaded in Redis (a sale not loaded is read whole from
    /// PostgreSQL by its next load). Returns how many were missing.
    async fn reconcile(&self, conn: &mut deadpool_redis::Connection) -> anyhow::Result<u64> {
        let mut counted = 0;
        for sale_id in self.store.sale_ids().await? {
            let keys = SaleKeys::new(&self.store.prefix, sale_id);
            if sales::epoch(conn, &keys).await?.is_none() {
                continue;
            }
            let holding = self.store.orders_holding_units(sale_id).await?;
            let holding: Vec<_> = holding.iter().collect();
            let mut missing = 0;
            for chunk in holding.chunks(RECONCILE_CHUNK) {
                missing += sales::apply_confirmed(conn, &keys, chunk)
                    .await?
                    .unwrap_or(0);
            }
            if missing > 0 {
                tracing::warn!(
                    sale_id,
                    missing,
                    "Redis had not counted orders PostgreSQL holds units for; counted them"
                );
            }
            counted += missing;
        }
        Ok(counted)
    }
}
