//! What a replica holds before an answer is given (`--redis-durability`).
//!
//! Redis replicates asynchronously: the primary answers a write before any
//! replica has it. If the primary dies then, the replica promoted in its
//! place (by Sentinel, or by a cluster's failover) lacks those writes: a
//! stock decrement, a buyer, a queued order. A `202` given on them is taken
//! back without a trace, and the unit is sold again.
//!
//! `WAIT numreplicas timeout` blocks until the replicas have acknowledged
//! every write this connection sent before it, and says how many did.
//! Replication is in order, so a replica that has the last write has all
//! the writes before it, this connection's and everyone else's: after a
//! pass through the sale lock (its `SET NX`, its fenced commit), one `WAIT`
//! covers what the pass read and what it wrote, for every buyer it
//! decided. The worker waits the same way before it writes a batch to
//! PostgreSQL, so that PostgreSQL never holds an order a failover could
//! take out of Redis.
//!
//! Where it goes: to the primary of the sale's slot only. A cluster client
//! sends a bare `WAIT` to every primary and answers the smallest count
//! (redis 1.8: `RouteBy::AllPrimaries`, `AggregateOp::Min`), so one
//! stalled shard, or one shard without a live replica, failed the wait of
//! every sale. Here it goes in a pipeline behind a read of one of the
//! sale's keys, and a cluster client sends a pipeline whole to the node of
//! its first key (`route_for_pipeline`): the sale's primary, whose
//! connection made the pass's writes. On one server or under Sentinel the
//! read costs nothing more than the round trip the `WAIT` makes anyway.
//!
//! What it does not give: `WAIT` does not make Redis strongly consistent (a
//! replica that acknowledged can still lose the election to one that did
//! not, when there are several; Redis documents this). With one replica,
//! or sentinels that promote the most up-to-date one, it closes the window
//! a failover opens.

use std::time::Duration;

use redis::aio::ConnectionLike;

use crate::config::RedisDurability;

/// Whether the writes this connection sent so far to the primary of
/// `sale_key`'s slot (any key of the sale) are held as `durability` asks:
/// always for `Local`; for `Replica`, when at least one replica of that
/// primary acknowledged them within its wait.
pub async fn confirmed<C: ConnectionLike + Send>(
    conn: &mut C,
    durability: RedisDurability,
    sale_key: &str,
) -> redis::RedisResult<bool> {
    let RedisDurability::Replica { wait } = durability else {
        return Ok(true);
    };
    // The read only names the slot; its answer is ignored.
    let (replicas,): (i64,) = redis::pipe()
        .exists(sale_key)
        .ignore()
        .cmd("WAIT")
        .arg(1)
        .arg(millis(wait))
        .query_async(conn)
        .await?;
    Ok(replicas >= 1)
}

/// `WAIT`'s timeout: milliseconds, at least 1 (0 would wait forever).
fn millis(wait: Duration) -> u64 {
    u64::try_from(wait.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_of_zero_is_never_sent_as_forever() {
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(300)), 1);
        assert_eq!(millis(Duration::from_millis(250)), 250);
    }
}
