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
//! the writes before it, this connection's and everyone else's. So every
//! `WAIT` here comes right behind a write of its own, on the same
//! connection, in the same pipeline: the sale's `waited` key
//! (`keys.rs`), set with a short TTL. The race it closes: a step that
//! wrote nothing (a `lua` purchase answered "sold out" or "already
//! purchased", a room's look at a closed room, a pass in which nobody
//! bought) read data that may be on no replica yet, and from Redis 7.2 on
//! a `WAIT` covers only its connection's last command that was replicated
//! (Redis 7.0 moved that offset at every command, reads too): on a
//! connection that last wrote before the replica fell behind, or never
//! wrote, it answered at once with every replica, and the refusal read
//! from unreplicated data was told as final (and taken back by the
//! failover). Behind the write, one
//! `WAIT` covers what the step read and what it wrote, for every buyer
//! it decided. The worker waits the same way before it writes a batch to
//! PostgreSQL, so that PostgreSQL never holds an order a failover could
//! take out of Redis.
//!
//! Where it goes: to the primary of the sale's slot only. A cluster client
//! sends a bare `WAIT` to every primary and answers the smallest count
//! (redis 1.8: `RouteBy::AllPrimaries`, `AggregateOp::Min`), so one
//! stalled shard, or one shard without a live replica, failed the wait of
//! every sale. Here it goes in a pipeline behind the write of the sale's
//! `waited` key, and a cluster client sends a pipeline whole to the node
//! of its first key (`route_for_pipeline`): the sale's primary.
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
use redis::{FromRedisValue, RedisResult, Script, ScriptInvocation, Value};

use crate::config::RedisDurability;
use crate::scripts;

/// Under `replica`, the write of `waited` and the `WAIT` behind it, added
/// to `pipe` (built with `ignore_errors`): two answers, read by
/// [`confirmed_by`]. Nothing under `local`.
fn wait_behind_a_write(pipe: &mut redis::Pipeline, durability: RedisDurability, waited: &str) {
    if let RedisDurability::Replica { wait, replicas } = durability {
        pipe.cmd("SET").arg(waited).arg(1).arg("PX").arg(WAITED_MS);
        pipe.cmd("WAIT").arg(replicas).arg(millis(wait));
    }
}

/// How long the `waited` key outlives its last write: it is only ever
/// written, never read, so any short time does.
const WAITED_MS: u64 = 1_000;

/// Whether the answers of [`wait_behind_a_write`]'s commands confirm: the
/// write went through and enough replicas acknowledged it. A failed
/// write or `WAIT` confirms nothing.
fn confirmed_by(
    mut answers: impl Iterator<Item = RedisResult<Value>>,
    durability: RedisDurability,
) -> bool {
    let RedisDurability::Replica { replicas, .. } = durability else {
        return true;
    };
    let written = answers.next().is_some_and(|written| written.is_ok());
    let acknowledged = answers
        .next()
        .and_then(|count| count.ok())
        .and_then(|count| i64::from_redis_value(count).ok());
    written && acknowledged.is_some_and(|count| count >= i64::from(replicas))
}

/// Run a script and, under `replica`, the write of `waited` and a `WAIT`
/// behind it, as one pipeline on one connection: the
/// script's answer, and whether enough replicas of its primary
/// acknowledged everything up to it (always `true` under `local`).
///
/// The race it closes: a `WAIT` sent on its own after the script can go out
/// on another connection than the script's (the cluster client replaces a
/// node's connection after a failure), and a `WAIT` there covers nothing
/// of the script: a `202` with nothing behind it. In one pipeline all go
/// out on one connection, to the primary of the script's first key (a
/// cluster client sends a pipeline whole there), and when that connection
/// fails no answer comes back: the caller's lost-answer path runs. A
/// script the node does not know (a replica just promoted has no script
/// cache) is loaded in the same pipeline, on that node, where a `SCRIPT
/// LOAD` alone would go to every primary.
pub(crate) async fn run_and_confirm<C, T>(
    conn: &mut C,
    script: &Script,
    invocation: &ScriptInvocation<'_>,
    durability: RedisDurability,
    waited: &str,
) -> RedisResult<(T, bool)>
where
    C: ConnectionLike + Send,
    T: FromRedisValue,
{
    let mut load = false;
    loop {
        let pipe = scripts::call(script, invocation, load);
        let (ran, confirmed) = sent_and_confirmed(conn, pipe, durability, waited).await?;
        match ran {
            Err(error) if !load && scripts::lacks_script(&error) => load = true,
            ran => return Ok((T::from_redis_value(ran?)?, confirmed)),
        }
    }
}

/// `pipe` (built with `ignore_errors`, one command whose answer counts)
/// sent with [`wait_behind_a_write`]'s commands behind it: that
/// command's answer, and whether it is confirmed ([`confirmed_by`]).
async fn sent_and_confirmed<C: ConnectionLike + Send>(
    conn: &mut C,
    pipe: redis::Pipeline,
    durability: RedisDurability,
    waited: &str,
) -> RedisResult<(RedisResult<Value>, bool)> {
    let (answers, confirmed) = all_and_confirmed(conn, pipe, 1, durability, waited).await?;
    let first = answers.into_iter().next().unwrap_or_else(|| {
        Err(redis::RedisError::from(std::io::Error::other(
            "no answer to the command before the WAIT",
        )))
    });
    Ok((first, confirmed))
}

/// `pipe` (built with `ignore_errors`, `count` commands whose answers
/// count) sent with [`wait_behind_a_write`]'s commands behind it, as one
/// pipeline: those commands' answers, and whether a replica holds
/// everything up to them ([`confirmed_by`]). For reads that decide an
/// answer (the room's door, `waiting_room/door.rs`): in one pipeline they
/// and the `WAIT` reach one node, re-sent whole after a `MOVED`, where a
/// `WAIT` sent after them goes where the cluster connection's slot map
/// says then.
pub(crate) async fn all_and_confirmed<C: ConnectionLike + Send>(
    conn: &mut C,
    mut pipe: redis::Pipeline,
    count: usize,
    durability: RedisDurability,
    waited: &str,
) -> RedisResult<(Vec<RedisResult<Value>>, bool)> {
    wait_behind_a_write(&mut pipe, durability, waited);
    let mut answers: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
    let behind = answers.split_off(count.min(answers.len()));
    Ok((answers, confirmed_by(behind.into_iter(), durability)))
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
