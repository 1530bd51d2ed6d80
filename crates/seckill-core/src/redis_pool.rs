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

mod recycle_check;
mod sharing;
mod timeouts;

use std::time::Duration;

use anyhow::Context;
use deadpool::managed::{Object, Pool, PoolConfig, Timeouts};
use deadpool_redis::Runtime;
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisFuture, RedisResult, Value};

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

/// Where seckill's Redis data lives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedisAt {
    /// One server, by its URL (`SECKILL_REDIS_URL`).
    Server(String),
    /// A Redis Cluster, by the URLs of some of its masters
    /// (`SECKILL_REDIS_CLUSTER_NODES`); the client learns the rest, and
    /// which node owns which slot, from any one that answers.
    Cluster(Vec<String>),
    /// A primary and its replicas watched by Redis Sentinel, by the
    /// sentinels' URLs (`SECKILL_REDIS_SENTINELS`) and the name they watch
    /// the primary under (`SECKILL_REDIS_MASTER_NAME`). The redis crate
    /// asks the sentinels for the primary's address each time it connects,
    /// and checks that the server it reaches says it is a primary.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

/// The environment variable naming one Redis server.
pub(crate) const SERVER_ENV: &str = "SECKILL_REDIS_URL";
/// The environment variable naming a Redis Cluster's nodes.
pub(crate) const CLUSTER_ENV: &str = "SECKILL_REDIS_CLUSTER_NODES";
/// The environment variable naming the sentinels.
pub(crate) const SENTINELS_ENV: &str = "SECKILL_REDIS_SENTINELS";
/// The environment variable naming the primary the sentinels watch.
pub(crate) const MASTER_NAME_ENV: &str = "SECKILL_REDIS_MASTER_NAME";
/// Every environment variable that says where Redis is.
pub const LOCATION_ENV: [&str; 4] = [SERVER_ENV, CLUSTER_ENV, SENTINELS_ENV, MASTER_NAME_ENV];

impl RedisAt {
    /// Where Redis is, fit for logs: each node's URL with its password
    /// hidden ([`crate::urls::redact`]).
    pub fn redacted(&self) -> String {
        let urls: Vec<String> = self
            .node_urls()
            .iter()
            .map(|url| crate::urls::redact(url))
            .collect();
        match self {
            Self::Server(_) => urls.join(","),
            Self::Cluster(_) => format!("the cluster of {}", urls.join(",")),
            Self::Sentinel { master, .. } => {
                format!("{master:?} as the sentinels {} name it", urls.join(","))
            }
        }
    }

    /// A cluster from a comma-separated list of node URLs
    /// (`redis://127.0.0.1:7000,redis://127.0.0.1:7001`).
    pub fn cluster(list: &str) -> anyhow::Result<Self> {
        Ok(Self::Cluster(url_list(list, "Redis Cluster node")?))
    }

    /// A primary under Sentinel, from a comma-separated list of the
    /// sentinels' URLs and the name they watch it under.
    pub fn sentinel(list: &str, master: &str) -> anyhow::Result<Self> {
        let master = master.trim();
        anyhow::ensure!(
            !master.is_empty(),
            "the sentinels need the name they watch the primary under: \
             set SECKILL_REDIS_MASTER_NAME (or --redis-master-name), e.g. mymaster"
        );
        Ok(Self::Sentinel {
            sentinels: url_list(list, "Redis Sentinel")?,
            master: master.to_owned(),
        })
    }

    /// The URLs of the server, of the cluster nodes or of the sentinels
    /// given.
    pub(crate) fn node_urls(&self) -> &[String] {
        match self {
            Self::Server(url) => std::slice::from_ref(url),
            Self::Cluster(nodes) => nodes,
            Self::Sentinel { sentinels, .. } => sentinels,
        }
    }

    /// A client of a server to subscribe on, for the `attempt`-th try:
    /// the server; one cluster node after another (a `PUBLISH` reaches
    /// every node); the primary the sentinels name now (a `PUBLISH` on it
    /// reaches its subscribers, and after a failover the next try finds
    /// the new one).
    pub(crate) async fn subscriber(&self, attempt: usize) -> redis::RedisResult<redis::Client> {
        match self {
            Self::Server(url) => redis::Client::open(url.as_str()),
            Self::Cluster(nodes) => redis::Client::open(nodes[attempt % nodes.len()].as_str()),
            Self::Sentinel { sentinels, master } => {
                redis::sentinel::Sentinel::build(sentinels.clone())?
                    .async_master_for(master, None)
                    .await
            }
        }
    }

    /// Where to connect to reach the one server that holds `key`: the
    /// server itself, or the cluster master that owns the key's slot, as the
    /// cluster says (`CLUSTER KEYSLOT`, then `CLUSTER SLOTS`, asked of the
    /// first node given, on a plain connection, so that no client's routing
    /// is taken on trust). For the commands a cluster connection cannot
    /// route, such as `MONITOR`. The first node's credentials and database
    /// are kept; only its address is replaced.
    pub async fn node_of(&self, key: &str) -> anyhow::Result<redis::ConnectionInfo> {
        if let Self::Sentinel { .. } = self {
            return Ok(self.subscriber(0).await?.get_connection_info().clone());
        }
        let seed = redis::IntoConnectionInfo::into_connection_info(self.node_urls()[0].as_str())?;
        let Self::Cluster(_) = self else {
            return Ok(seed);
        };
        let client = redis::Client::open(seed.clone())?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query_async(&mut conn)
            .await?;
        // Each range: [first slot, last slot, [host, port, id, ...], replicas...].
        let ranges: Vec<Vec<Value>> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query_async(&mut conn)
            .await?;
        for range in &ranges {
            let [first, last, master, ..] = range.as_slice() else {
                anyhow::bail!("CLUSTER SLOTS answered {range:?}");
            };
            let (first, last): (u16, u16) = (
                redis::from_redis_value_ref(first)?,
                redis::from_redis_value_ref(last)?,
            );
            let master: Vec<Value> = redis::from_redis_value_ref(master)?;
            let [host, port, ..] = master.as_slice() else {
                anyhow::bail!("CLUSTER SLOTS named a master as {master:?}");
            };
            if (first..=last).contains(&slot) {
                // A node that does not know its own address says NULL, ""
                // or "?" (Redis 7): it is on the host asked.
                let host = redis::from_redis_value_ref::<String>(host)
                    .ok()
                    .filter(|host| !host.is_empty() && host != "?")
                    .or_else(|| match seed.addr() {
                        redis::ConnectionAddr::Tcp(host, _)
                        | redis::ConnectionAddr::TcpTls { host, .. } => Some(host.clone()),
                        _ => None,
                    })
                    .context("CLUSTER SLOTS named no host for the master")?;
                let port: u16 = redis::from_redis_value_ref(port)?;
                return Ok(seed.set_addr(redis::ConnectionAddr::Tcp(host, port)));
            }
        }
        anyhow::bail!("no master owns slot {slot}")
    }

    /// The environment variables and values that point a child process
    /// here (one of [`LOCATION_ENV`], or two).
    pub fn env(&self) -> Vec<(&'static str, String)> {
        match self {
            Self::Server(url) => vec![(SERVER_ENV, url.clone())],
            Self::Cluster(nodes) => vec![(CLUSTER_ENV, nodes.join(","))],
            Self::Sentinel { sentinels, master } => vec![
                (SENTINELS_ENV, sentinels.join(",")),
                (MASTER_NAME_ENV, master.clone()),
            ],
        }
    }
}

/// A comma-separated list of Redis URLs, none of them malformed, at least
/// one; `what` names them in the error.
fn url_list(list: &str, what: &str) -> anyhow::Result<Vec<String>> {
    let urls: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|url| !url.is_empty())
        .map(str::to_owned)
        .collect();
    anyhow::ensure!(
        !urls.is_empty(),
        "the {what} list is empty; give at least one, e.g. redis://127.0.0.1:7000"
    );
    for url in &urls {
        redis::Client::open(url.as_str()).with_context(|| format!("{url:?} is not a Redis URL"))?;
    }
    Ok(urls)
}

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

    /// A connection, waiting at most the pool's `wait`.
    pub async fn get(&self) -> Result<RedisConn, deadpool_redis::PoolError> {
        Ok(match self {
            Self::Server(pool) => RedisConn::Server(pool.get().await?),
            Self::Cluster(pool) => RedisConn::Cluster(pool.get().await?),
            Self::Sentinel(pool) => RedisConn::Sentinel(pool.get().await?),
        })
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
            let mut conn: redis::cluster_async::ClusterConnection = conn.conn.clone();
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
mod tests;
