//! Where the Redis data lives: one server, a primary with replicas under
//! Redis Sentinel, or a Redis Cluster.
//!
//! Everything above this file asks for a connection and sends commands; it
//! does not know which it talks to. [`RedisPool`] hands out a
//! [`RedisConn`], which is either a connection to one server (under
//! Sentinel: to the primary the sentinels name when it is made, so a pool
//! follows a failover as its connections to the old primary fail and are
//! replaced; `redis_pool/recycle_check.rs`) or a cluster
//! connection (the `redis` crate's, pooled by `deadpool` with
//! `deadpool-redis`' managers, `redis_pool/recycle_check.rs`). A
//! cluster's, and one server's unless a `WAIT` is sent on them, are
//! handles on one multiplexed connection, every caller's commands
//! pipelined on it (`redis_pool/sharing.rs`). A cluster connection sends
//! each command to the master owning its key's slot, follows `MOVED` and
//! `ASK` when slots move, and splits multi-key reads (`KEYS`, `DEL` of keys
//! in several slots) across the masters.
//!
//! What makes a cluster work unchanged is in `keys.rs`: every key of one
//! sale carries the hash tag `{sale:ID}`, so a script, a `MULTI` or a
//! pipeline that touches one sale touches one slot, on one master, and stays
//! atomic. Two things cannot stay that way, and have one way each here:
//!
//! - A pipeline over keys of **different** sales (the answer counts of
//!   several sales, flushed together) would be refused by a cluster
//!   (`CROSSSLOT`). [`RedisConn::send_apart`] sends such independent writes
//!   as one pipeline to a single server and as concurrent commands to a
//!   cluster.
//! - Pub/sub is not a key: a subscriber connects to one node. Plain
//!   `PUBLISH` in a cluster is carried to every node, so `events.rs`
//!   subscribes on any one of [`RedisAt::node_urls`] and moves to the next
//!   when it fails.
//!
//! Nothing scans Redis across sales: the list of sales comes from
//! PostgreSQL, and each sale's keys are named from its id.

mod at;
mod followed;
mod recycle_check;
mod sharing;
mod timeouts;

use std::time::Duration;

use anyhow::Context;
use deadpool::managed::{Object, Pool, PoolConfig, Timeouts};
use deadpool_redis::Runtime;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

pub use at::{LOCATION_ENV, RedisAt};
pub use followed::FollowedCluster;
pub use recycle_check::TRUSTED_FOR;
use recycle_check::Trusting;
use sharing::Sharing;
pub use timeouts::{ClusterManager, RedisTimeouts, SentinelManager};

/// Redis connections per process: handles on one multiplexed connection
/// for one server (unless a `WAIT` is sent) and for a cluster
/// (`redis_pool/sharing.rs`), connections of their own otherwise. Each
/// purchase holds one while it waits for the sale lock,
/// so this bounds how many purchases wait at once; the rest queue for a
/// connection (up to the lock wait, then 503 busy).
pub(crate) const POOL_SIZE: usize = 64;

/// A pool of connections to wherever the data is. Cheap to clone.
/// deadpool-redis' connections, without its check of every connection
/// taken (`redis_pool/recycle_check.rs`).
#[derive(Clone)]
pub enum RedisPool {
    Server(Pool<Trusting<Sharing<deadpool_redis::Manager>>>),
    Cluster(Pool<Trusting<Sharing<ClusterManager>>>),
    Sentinel(Pool<Trusting<SentinelManager>>),
}

impl RedisPool {
    /// A pool for `at` with the default [`RedisTimeouts`]; `wait` bounds
    /// how long a caller queues for a connection. Connects lazily, on the
    /// current runtime whoever asks (`recycle_check.rs`; panics outside a
    /// runtime): see `redis_pool::connect_redis` for the check at start-up.
    pub fn new(at: &RedisAt, wait: Duration) -> anyhow::Result<Self> {
        Self::with_timeouts(at, wait, RedisTimeouts::DEFAULT)
    }

    /// The same, with `timeouts` on every connection, whatever the
    /// topology (`redis_pool/timeouts.rs`).
    fn with_timeouts(
        at: &RedisAt,
        wait: Duration,
        timeouts: RedisTimeouts,
    ) -> anyhow::Result<Self> {
        // Making a connection is bounded by its connect and first reply
        // (Sentinel: the sentinels' answer, then the primary's), checking
        // one by its reply: neither waits longer than the connection would.
        let config = PoolConfig {
            max_size: POOL_SIZE,
            timeouts: Timeouts {
                wait: Some(wait),
                create: Some(timeouts.connect * 2 + timeouts.response),
                recycle: Some(timeouts.response),
            },
            ..PoolConfig::default()
        };
        fn pool<M>(manager: Trusting<M>, config: PoolConfig) -> anyhow::Result<Pool<Trusting<M>>>
        where
            Trusting<M>: deadpool::managed::Manager,
        {
            Ok(Pool::builder(manager)
                .config(config)
                .runtime(Runtime::Tokio1)
                .build()?)
        }
        let place = at.node_urls().join(",");
        Ok(match at {
            RedisAt::Server(url) => Self::Server(pool(
                Trusting::new(
                    {
                        let manager = deadpool_redis::Manager::new_with_config(
                            url.as_str(),
                            timeouts.config(),
                        )?;
                        if timeouts.sends_wait {
                            Sharing::each_its_own(manager)
                        } else {
                            Sharing::one(manager)
                        }
                    },
                    &place,
                ),
                config,
            )?),
            RedisAt::Cluster(nodes) => Self::Cluster(pool(
                Trusting::new(Sharing::one(ClusterManager::new(nodes, timeouts)?), &place),
                config,
            )?),
            RedisAt::Sentinel { sentinels, master } => Self::Sentinel(pool(
                Trusting::new(SentinelManager::new(sentinels, master, timeouts)?, &place)
                    .primary_only(),
                config,
            )?),
        })
    }

    /// Delete every key under `prefix` (`prefix:*`): what the bench or a
    /// test wrote under a prefix of its own. `KEYS` walks the whole
    /// keyspace in one step; on a cluster it goes to every master and
    /// `UNLINK` to each key's (the cluster connection splits both). The
    /// prefix is matched as written: a `*` in it matches a `*` only.
    /// `UNLINK`, not `DEL`: a key of a million entries (a room's line)
    /// takes `DEL` about a second to free, with Redis serving nobody
    /// meanwhile, and the caller timed out at its 500 ms though the keys
    /// went (the bench after a room of 1,000,000). `UNLINK` takes the
    /// keys out at once and frees them on another thread.
    pub async fn delete_under(&self, prefix: &str) -> anyhow::Result<()> {
        self.delete_matching(&format!("{}:*", crate::keys::glob_literal(prefix)))
            .await
    }

    /// Delete every key `pattern` (a `KEYS` glob) matches, as
    /// [`RedisPool::delete_under`] does.
    pub async fn delete_matching(&self, pattern: &str) -> anyhow::Result<()> {
        let mut conn = self.get().await?;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await?;
        if !keys.is_empty() {
            let () = redis::cmd("UNLINK")
                .arg(keys)
                .query_async(&mut conn)
                .await?;
        }
        Ok(())
    }

    /// A connection, waiting at most the pool's `wait`. A
    /// `Timeout` error is "busy" only when [`all_in_use`] says so
    /// ([`RedisPool::get_or_busy`]).
    pub async fn get(&self) -> Result<RedisConn, deadpool_redis::PoolError> {
        Ok(match self {
            Self::Server(pool) => RedisConn::Server(pool.get().await?),
            Self::Cluster(pool) => {
                let mut conn = pool.get().await?;
                // One connection for all the caller sends, a step and its
                // `WAIT` alike (`redis_pool/followed.rs`).
                conn.conn.pin();
                RedisConn::Cluster(conn)
            }
            Self::Sentinel(pool) => RedisConn::Sentinel(pool.get().await?),
        })
    }
}

/// Whether the pool's `get` failed because every connection was in use
/// by other callers past its `wait`: too many buyers at once, `503 busy`.
/// Its timeout making a new connection (`create`) means that Redis does
/// not answer: a stalled server holds the shared connection's check and
/// the connect behind it (`sharing.rs`), and its buyers are told `503
/// unavailable`, not that there are too many of them. (A check of an idle
/// handle that times out is not returned: deadpool drops the handle and
/// takes the next.)
pub fn all_in_use(error: &deadpool_redis::PoolError) -> bool {
    matches!(
        error,
        deadpool_redis::PoolError::Timeout(deadpool::managed::TimeoutType::Wait)
    )
}

impl RedisPool {
    /// A connection for a purchase, or `None` when every connection is in
    /// use by other buyers past the pool's wait ([`all_in_use`]: the
    /// caller answers "busy"); any other failure, a Redis that does not
    /// answer among them, is an error.
    pub(crate) async fn get_or_busy(&self) -> anyhow::Result<Option<RedisConn>> {
        match self.get().await {
            Ok(conn) => Ok(Some(conn)),
            Err(error) if all_in_use(&error) => Ok(None),
            Err(error) => Err(error).context("getting a Redis connection"),
        }
    }
}

/// One pooled connection, to a server or to a cluster.
pub enum RedisConn {
    Server(Object<Trusting<Sharing<deadpool_redis::Manager>>>),
    Cluster(Object<Trusting<Sharing<ClusterManager>>>),
    Sentinel(Object<Trusting<SentinelManager>>),
}

impl RedisConn {
    /// Send independent commands whose keys may live in different slots
    /// (several sales' keys, or keys of no sale), and wait for all of them.
    /// One server takes them as one pipeline, one round trip; a cluster
    /// would refuse such a pipeline (`CROSSSLOT`), so each goes on its own,
    /// all at once, over the one multiplexed cluster connection. Not
    /// atomic either way: use it only for writes that stand alone.
    pub(crate) async fn send_apart(&mut self, commands: Vec<Cmd>) -> RedisResult<()> {
        let conn = match self {
            Self::Server(conn) => return one_pipeline(commands).query_async(&mut **conn).await,
            Self::Sentinel(conn) => return one_pipeline(commands).query_async(&mut **conn).await,
            Self::Cluster(conn) => conn,
        };
        let sent = std::time::Instant::now();
        let each = commands.into_iter().map(|command| {
            let mut conn = conn.conn.clone();
            async move { command.query_async::<Value>(&mut conn).await }
        });
        let outcome = futures_util::future::try_join_all(each).await.map(drop);
        conn.note(sent, &outcome);
        outcome
    }
}

/// `commands` as one pipeline whose replies are ignored.
fn one_pipeline(commands: Vec<Cmd>) -> Pipeline {
    let mut pipe = redis::pipe();
    for command in commands {
        pipe.add_command(command).ignore();
    }
    pipe
}

/// How often a command answered `MOVED` is sent again, and the pause
/// before each try (times the try's number).
const MOVED_TRIES: u32 = 3;
const MOVED_PAUSE: Duration = Duration::from_millis(20);

/// Whether the cluster answered that the command's slot lives on another
/// node (`MOVED`), for a command or any command of a transaction: nothing
/// of it ran.
fn moved(error: &redis::RedisError) -> bool {
    let is_moved = |kind| kind == redis::ErrorKind::Server(redis::ServerErrorKind::Moved);
    is_moved(error.kind())
        || error.clone().into_server_errors().is_some_and(|errors| {
            errors
                .iter()
                .any(|(_, error)| error.kind() == Some(redis::ServerErrorKind::Moved))
        })
}

impl ConnectionLike for RedisConn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Server(conn) => (**conn).req_packed_command(cmd),
            // The one re-send kept from the cluster client's own, which are
            // off (`redis_pool/timeouts.rs`): a `MOVED` answer ran nothing,
            // and the client refreshes its slot map on it, so the command
            // is sent again, a few times, once the map may be new. Never a
            // command whose answer was lost: that one may have run.
            Self::Cluster(conn) => Box::pin(async move {
                let mut tries = 0;
                loop {
                    match (**conn).req_packed_command(cmd).await {
                        Err(error) if moved(&error) && tries < MOVED_TRIES => {
                            tries += 1;
                            tokio::time::sleep(MOVED_PAUSE * tries).await;
                        }
                        outcome => return outcome,
                    }
                }
            }),
            Self::Sentinel(conn) => (**conn).req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Server(conn) => (**conn).req_packed_commands(pipeline, offset, count),
            // As for one command, above.
            Self::Cluster(conn) => Box::pin(async move {
                let mut tries = 0;
                loop {
                    match (**conn).req_packed_commands(pipeline, offset, count).await {
                        Err(error) if moved(&error) && tries < MOVED_TRIES => {
                            tries += 1;
                            tokio::time::sleep(MOVED_PAUSE * tries).await;
                        }
                        outcome => return outcome,
                    }
                }
            }),
            Self::Sentinel(conn) => (**conn).req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Server(conn) => conn.get_db(),
            Self::Cluster(conn) => conn.get_db(),
            Self::Sentinel(conn) => conn.get_db(),
        }
    }
}

/// A pool of Redis connections to wherever the data is, with the default
/// [`RedisTimeouts`]; `wait` bounds how long a caller queues for one.
pub async fn connect_redis(at: &RedisAt, wait: Duration) -> anyhow::Result<RedisPool> {
    connect_redis_with(at, wait, RedisTimeouts::DEFAULT).await
}

/// The same, with `timeouts` (the purchase's and the worker's pools take
/// them from `--redis-durability`: `RedisDurability::timeouts`).
pub async fn connect_redis_with(
    at: &RedisAt,
    wait: Duration,
    timeouts: RedisTimeouts,
) -> anyhow::Result<RedisPool> {
    let pool = RedisPool::with_timeouts(at, wait, timeouts).context("building the Redis pool")?;
    // Fail at start-up, not on the first request, when Redis is unreachable.
    let mut conn = pool
        .get()
        .await
        .with_context(|| format!("connecting to Redis at {}", at.redacted()))?;
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .context("pinging Redis")?;
    Ok(pool)
}

#[cfg(test)]
mod tests {
    use deadpool::managed::TimeoutType;
    use deadpool_redis::PoolError;

    use super::all_in_use;

    /// Only the pool's wait running out is a crowd (`503 busy`); a timeout
    /// making a connection is Redis not answering (`tests/it/stall.rs`).
    #[test]
    fn only_the_wait_running_out_is_busy() {
        assert!(all_in_use(&PoolError::Timeout(TimeoutType::Wait)));
        assert!(!all_in_use(&PoolError::Timeout(TimeoutType::Create)));
        assert!(!all_in_use(&PoolError::Timeout(TimeoutType::Recycle)));
        assert!(!all_in_use(&PoolError::Closed));
    }
}
