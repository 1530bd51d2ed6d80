//! How long seckill waits for Redis: one policy for one server, Sentinel
//! and a cluster, and the two connection managers that apply it where
//! deadpool-redis' own managers cannot.
//!
//! What the clients do by themselves (redis 1.8, deadpool-redis 0.23, read
//! in their sources):
//!
//! - A connection to one server (`Client::get_multiplexed_async_connection`)
//!   gives up connecting after 1 s and waiting for a reply after 500 ms
//!   (`DEFAULT_CONNECTION_TIMEOUT`, `DEFAULT_RESPONSE_TIMEOUT` in
//!   `redis/src/client.rs`). So does Sentinel's
//!   (`SentinelClient::get_async_connection` uses the same defaults).
//! - A cluster connection (`ClusterClientBuilder`) connects within 1 s but
//!   waits for a reply **forever** unless given a response timeout: a node
//!   stopped by its host (SIGSTOP) held every request sent to it until it
//!   came back. deadpool-redis' cluster `Manager::new` takes no builder, so
//!   [`ClusterManager`] builds its own client.
//! - A response timeout cuts a `WAIT` short: a `WAIT 1 800` sent with the
//!   500 ms default ends as a client error at 500 ms, before Redis' own
//!   answer. So the response timeout here follows from the replica wait
//!   ([`RedisTimeouts::for_replica_wait`]).
//! - The cluster client **re-sends a command** after most failures, up to
//!   16 times (`RetryParams::default` in `redis/src/cluster_handling/
//!   client.rs`): on a dropped connection it reconnects and sends it again
//!   (`RetryMethod::Reconnect`), after a reply that timed out at once
//!   (`RetryImmediately`). For a write that is wrong: a purchase script
//!   whose answer was lost may have run, and run again it answers "lock
//!   lost" or "already purchased" to the buyer who just won; a `WAIT`
//!   re-sent on a fresh connection covers no write at all and answers at
//!   once with every replica, a `202` with nothing behind it.
//!   [`ClusterManager`] turns the retries off (`retries(0)`), so a lost
//!   answer reaches the caller as it does from one server, and the
//!   purchase's lost-answer path runs (`strategy/mod.rs`). One server's and
//!   Sentinel's connections never re-send. The price: a `MOVED` or `ASK`
//!   (a slot that moved, a failover) is not followed within the request
//!   either; the client still refreshes its slot map, the buyer is told
//!   `503` with `Retry-After` (`failure.rs`), and the next request goes to
//!   the right node.
//! - deadpool-redis checks a cluster connection with a `PING`, which the
//!   cluster client sends to **every** primary (`RouteBy::AllPrimaries`):
//!   one stalled shard failed every check and so every connection of the
//!   pool. And it makes each pooled connection a cluster connection of its
//!   own, which connects to every node and asks for the slot map: while one
//!   node is stalled, each new one took two seconds, and the pool made them
//!   just when a stall had it hand out more. The pool hands out clones of
//!   one cluster connection (`sharing.rs`: it is multiplexed, one
//!   connection per node shared by every caller, as the crate intends),
//!   and [`ClusterManager`] checks nothing of the nodes: the cluster client
//!   replaces a node's connection itself after a failure on it.
//! - The cluster client asks for the slot map again only on an answer
//!   (`MOVED`, `READONLY`) or a dropped connection, never on a reply that
//!   did not come: a primary stopped or cut off without a reset kept its
//!   slots in the map after its replica was promoted, and its sales
//!   answered `503` until it came back. The pool's connection is made
//!   anew when a node goes unanswered (`followed.rs`).
//!
//! What it bounds: a request that meets a node that does not answer is
//! told `503` with `Retry-After` one response timeout after each round
//! trip it sends there, and a purchase sends a few (the lock, its
//! commit; a lock attempt whose answer was lost is followed by its
//! abandon, whose answer is not waited for, `lock.rs`);
//! `tests/it/cluster.rs` holds every buyer to 2 s while one shard's
//! primary is stopped. Not bounded by it: waiting for the sale lock
//! (`--lock-wait-ms`), a wait for other buyers; and a commit whose answer
//! was lost, which makes sure it cannot land late and looks for its order
//! before it answers (`strategy/under_lock.rs`: seconds, not minutes).

use std::time::Duration;

use deadpool::managed::{self, Metrics, RecycleResult};
use redis::aio::MultiplexedConnection;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::sentinel::{SentinelClient, SentinelServerType};
use redis::{AsyncConnectionConfig, RedisError};

use super::followed::FollowedCluster;

/// How long any Redis connection waits, whatever the topology.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RedisTimeouts {
    /// To open a connection (a cluster: to each node).
    pub connect: Duration,
    /// For each reply. Past it the command fails as a timeout, which the
    /// purchase treats as a lost answer and the API as `503`.
    pub response: Duration,
    /// Whether a `WAIT` is sent on these connections: then each caller of
    /// one server has a connection of its own, since a `WAIT` holds up
    /// what is pipelined behind it (`sharing.rs`; Sentinel's never share).
    pub sends_wait: bool,
}

impl RedisTimeouts {
    /// The redis crate's own defaults for one server, now for all three.
    pub(crate) const DEFAULT: Self = Self {
        connect: Duration::from_secs(1),
        response: Duration::from_millis(500),
        sends_wait: false,
    };

    /// What the reply to a `WAIT` may take beyond its own timeout: the
    /// round trip and the server's turn to answer.
    const WAIT_MARGIN: Duration = Duration::from_millis(500);

    /// The timeouts for a `WAIT` of at most `wait` (`None`: no `WAIT`,
    /// `--redis-durability local`): the response timeout is the wait plus
    /// [`Self::WAIT_MARGIN`] (at least the default), so that a `WAIT` is
    /// answered by Redis, never cut short by its own client.
    /// `RedisDurability::timeouts` gives them for a durability setting.
    pub(crate) fn for_replica_wait(wait: Option<Duration>) -> Self {
        match wait {
            None => Self::DEFAULT,
            Some(wait) => Self {
                response: Self::DEFAULT.response.max(wait + Self::WAIT_MARGIN),
                sends_wait: true,
                ..Self::DEFAULT
            },
        }
    }

    /// As the redis crate takes them for one server or Sentinel.
    pub(crate) fn config(&self) -> AsyncConnectionConfig {
        AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect))
            .set_response_timeout(Some(self.response))
    }
}

impl Default for RedisTimeouts {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Cluster connections with [`RedisTimeouts`] (see the module's notes for
/// why each choice); the pool shares one (`sharing.rs`).
pub struct ClusterManager {
    client: ClusterClient,
}

impl ClusterManager {
    pub(crate) fn new(nodes: &[String], timeouts: RedisTimeouts) -> redis::RedisResult<Self> {
        let client = ClusterClientBuilder::new(nodes.iter().map(String::as_str))
            .connection_timeout(timeouts.connect)
            .response_timeout(timeouts.response)
            // No command is re-sent behind the caller's back: a lost
            // answer is the caller's to judge (module notes). With the
            // crate's 16 retries, `cluster.rs`'s `..._a_commit_whose_answer_
            // was_lost_is_never_sent_again` sees the commit run twice.
            .retries(0)
            .build()?;
        Ok(Self { client })
    }
}

impl managed::Manager for ClusterManager {
    type Type = FollowedCluster;
    type Error = RedisError;

    async fn create(&self) -> Result<FollowedCluster, RedisError> {
        FollowedCluster::connect(self.client.clone()).await
    }

    /// Nothing to check: a `PING` would go to every primary (module
    /// notes); the client reconnects a failed node by itself, and a node
    /// that stops answering makes the connection anew (`followed.rs`).
    async fn recycle(&self, _: &mut FollowedCluster, _: &Metrics) -> RecycleResult<RedisError> {
        Ok(())
    }
}

/// Connections to the primary the sentinels name, with [`RedisTimeouts`]
/// (deadpool-redis' Sentinel manager takes no connection settings).
pub struct SentinelManager {
    /// A tokio Mutex: the client asks the sentinels, an await, while held
    /// (it remembers which sentinel answered last).
    client: tokio::sync::Mutex<SentinelClient>,
    config: AsyncConnectionConfig,
}

impl SentinelManager {
    pub(crate) fn new(
        sentinels: &[String],
        master: &str,
        timeouts: RedisTimeouts,
    ) -> redis::RedisResult<Self> {
        let client = SentinelClient::build(
            sentinels.iter().map(String::as_str).collect(),
            master.to_owned(),
            None,
            SentinelServerType::Master,
        )?;
        Ok(Self {
            client: tokio::sync::Mutex::new(client),
            config: timeouts.config(),
        })
    }
}

impl managed::Manager for SentinelManager {
    type Type = MultiplexedConnection;
    type Error = RedisError;

    async fn create(&self) -> Result<MultiplexedConnection, RedisError> {
        let mut client = self.client.lock().await;
        client.get_async_connection_with_config(&self.config).await
    }

    /// A `PING` on the primary's connection, as deadpool-redis checks.
    async fn recycle(
        &self,
        conn: &mut MultiplexedConnection,
        _: &Metrics,
    ) -> RecycleResult<RedisError> {
        let _: String = redis::cmd("PING").query_async(conn).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_never_cut_short_by_its_own_client() {
        assert_eq!(
            RedisTimeouts::for_replica_wait(None),
            RedisTimeouts::DEFAULT
        );
        let short = Some(Duration::from_millis(250));
        assert_eq!(
            RedisTimeouts::for_replica_wait(short).response,
            Duration::from_millis(750)
        );
        let long = Some(Duration::from_secs(2));
        assert_eq!(
            RedisTimeouts::for_replica_wait(long).response,
            Duration::from_millis(2_500)
        );
    }
}
