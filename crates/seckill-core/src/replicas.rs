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
//! How many replicas (`--redis-wait-replicas`, `WAIT <n>`, 1 by default):
//! what each choice survives is in docs/operations.md. In short: with one
//! replica and `WAIT 1`, a failover leaves a primary with no replica, and
//! every purchase is refused until one is back; with two and `WAIT 1`, the
//! shop sells on after a failover, and Sentinel (or the cluster) promotes
//! the replica with the most data, which has every acknowledged write
//! unless that replica is the one lost; with two and `WAIT 2`, any
//! promotion keeps them, but one replica down refuses every purchase.
//!
//! What it does not give: `WAIT` does not make Redis strongly consistent (a
//! replica that acknowledged can still lose the election to one that did
//! not; Redis documents this).

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{
    ErrorKind, FromRedisValue, RedisResult, Script, ScriptInvocation, ServerErrorKind, Value,
};

use crate::config::RedisDurability;

/// Whether the writes this connection sent so far to the primary of
/// `sale_key`'s slot (any key of the sale) are held as `durability` asks:
/// always for `Local`; for `Replica`, when as many replicas of that
/// primary as it names acknowledged them within its wait.
pub async fn confirmed<C: ConnectionLike + Send>(
    conn: &mut C,
    durability: RedisDurability,
    sale_key: &str,
) -> redis::RedisResult<bool> {
    let RedisDurability::Replica { wait, replicas } = durability else {
        return Ok(true);
    };
    // The read only names the slot; its answer is ignored.
    let (acknowledged,): (i64,) = redis::pipe()
        .exists(sale_key)
        .ignore()
        .cmd("WAIT")
        .arg(replicas)
        .arg(millis(wait))
        .query_async(conn)
        .await?;
    Ok(acknowledged >= i64::from(replicas))
}

/// Run a script and, under `replica`, a `WAIT` behind it, as one pipeline
/// on one connection: the script's answer, and whether enough replicas of
/// its primary acknowledged its writes (always `true` under `local`).
///
/// The race it closes: a `WAIT` sent on its own after the script can go out
/// on another connection than the script's (the cluster client replaces a
/// node's connection after a failure), and a `WAIT` on a connection that
/// wrote nothing answers at once with every replica: a `202` with nothing
/// behind it. In one pipeline both go out on one connection, to the
/// primary of the script's first key (a cluster client sends a pipeline
/// whole there), and when that connection fails neither answer comes back:
/// the caller's lost-answer path runs. A script the node does not know (a
/// replica just promoted has no script cache) is loaded in the same
/// pipeline, on that node, where a `SCRIPT LOAD` alone would go to every
/// primary.
pub(crate) async fn run_and_confirm<C, T>(
    conn: &mut C,
    script: &Script,
    invocation: &ScriptInvocation<'_>,
    durability: RedisDurability,
) -> RedisResult<(T, bool)>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    let needed = match durability {
        RedisDurability::Local => 0,
        RedisDurability::Replica { replicas, .. } => i64::from(replicas),
    };
    let mut load = false;
    loop {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        if load {
            pipe.load_script(script).ignore();
        }
        pipe.invoke_script(invocation);
        if let RedisDurability::Replica { wait, replicas } = durability {
            pipe.cmd("WAIT").arg(replicas).arg(millis(wait));
        }
        let answers: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
        let mut answers = answers.into_iter();
        let ran = match answers.next() {
            Some(Err(error))
                if !load && error.kind() == ErrorKind::Server(ServerErrorKind::NoScript) =>
            {
                load = true;
                continue;
            }
            Some(ran) => ran?,
            None => {
                return Err(redis::RedisError::from(std::io::Error::other(
                    "no answer to the script",
                )));
            }
        };
        // A `WAIT` that failed confirms nothing; the script's answer stands.
        let confirmed = match answers.next() {
            None => true,
            Some(count) => count
                .ok()
                .and_then(|count| i64::from_redis_value(count).ok())
                .is_some_and(|count| count >= needed),
        };
        return Ok((T::from_redis_value(ran)?, confirmed));
    }
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
