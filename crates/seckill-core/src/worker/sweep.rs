//! The sweep: every worker, on its first pass and every `SWEEP_EVERY`
//! after, puts back the payment deadlines a Redis that lost data (a restart
//! without persistence, a wipe) forgot: every confirmed order's deadline is
//! queued again (`deadlines.rs`), and queueing by id keeps one job, so a
//! sweep that runs twice changes nothing. Under a lock, so one worker at a
//! time; a worker that finds the lock taken skips its turn.

use std::time::Duration;

use anyhow::Context;

use super::Worker;
use crate::keys;
use crate::lock::RedisLock;

/// How long the sweep lock lives: longer than a sweep takes, short enough
/// that a worker that died mid-sweep does not hold the others up for long.
const SWEEP_LOCK_TTL: Duration = Duration::from_secs(30);

impl Worker {
    /// Sweep now, unless another worker is sweeping right now. Returns how
    /// many deadlines were missing and are queued again.
    pub(crate) async fn sweep(&self) -> anyhow::Result<u64> {
        let mut conn = self.store.redis().await?;
        let (lock_key, fence_key) = keys::sweep_lock(self.store.prefix());
        let lock = RedisLock::new(lock_key, fence_key, SWEEP_LOCK_TTL)
            .abandons_through(self.store.redis_pool());
        // The race this lock prevents is only waste (the sweep is
        // idempotent), so a worker that finds it taken simply skips.
        let Some(guard) = lock
            .try_acquire(&mut conn)
            .await
            .context("taking the sweep lock")?
        else {
            return Ok(0);
        };
        let swept = self.requeue_lost_deadlines(&mut conn).await;
        // Not fatal if it fails: the lock expires with its TTL.
        let _ = guard.release(&mut conn).await;
        swept
    }
}
