//! Rate limits that hold across every instance: one Redis script per check
//! (`lua/rate_limit.lua`, GCRA), keyed by client IP or buyer id.
//!
//! Off unless configured (`SECKILL_RATE_LIMIT_PER_IP`,
//! `SECKILL_RATE_LIMIT_PER_BUYER`): the load test and the demo fire
//! thousands of buyers from one address, and a workshop's laptop is one
//! client. A refused request is answered `429 rate_limited` with
//! `Retry-After`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionLike;

use crate::config::RateLimit;
use crate::queue::queue_script;
use crate::scripts;

static CHECK: LazyLock<Script> = queue_script!("lua/rate_limit.lua");

/// Whether a request may go through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Allowance {
    Allowed,
    /// Not before this much time has passed.
    Wait(Duration),
}

/// Ask whether one more request under `key` may go through now.
pub async fn check<C: ConnectionLike + Send>(
    conn: &mut C,
    key: &str,
    limit: RateLimit,
) -> redis::RedisResult<Allowance> {
    let interval_us = (1_000_000 / u64::from(limit.per_second.max(1))).max(1);
    let (allowed, wait_us): (i64, i64) = scripts::run(
        conn,
        &CHECK,
        CHECK.key(key).arg(interval_us).arg(limit.burst),
    )
    .await?;
    Ok(if allowed == 1 {
        Allowance::Allowed
    } else {
        Allowance::Wait(Duration::from_micros(u64::try_from(wait_us).unwrap_or(0)))
    })
}
