//! One field of Redis' `INFO`, as the bench rows read Redis' own counts
//! (its CPU, its memory, the commands it ran).

use std::str::FromStr;

use anyhow::Context;
use seckill_core::redis_pool::RedisConn;

/// The field `name` of `INFO section` on `conn`'s server.
pub(super) async fn info_field<T: FromStr>(
    conn: &mut RedisConn,
    section: &str,
    name: &str,
) -> anyhow::Result<T> {
    let info: String = redis::cmd("INFO")
        .arg(section)
        .query_async(conn)
        .await
        .with_context(|| format!("INFO {section}"))?;
    info.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(':'))
        .and_then(|value| value.trim().parse().ok())
        .with_context(|| format!("no {name} in INFO {section}"))
}
