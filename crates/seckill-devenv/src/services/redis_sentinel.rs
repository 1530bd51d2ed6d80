//! A private Redis under Sentinel: a primary, one replica and three
//! sentinels, started from the installed `redis-server` (the sentinels in
//! `--sentinel` mode). For the tests and the chaos run that fail the
//! primary over; nobody runs production on one machine's sentinels.

use anyhow::Context;
use futures_util::future::try_join_all;

use super::probes::{ask, replica_in_step, writes_acknowledged};
pub(super) use super::redis_server::MASTER_NAME;
use super::redis_server::{PrivateRedis, Role};
use super::supervise::wait_until;
use seckill_core::redis_pool::RedisAt;

/// Two data servers (one primary, one replica, each with an append-only
/// file fsync'ed on every write) and three sentinels, all of our own;
/// they stop when this value is dropped.
#[derive(Debug)]
pub struct PrivateRedisSentinel {
    /// The data servers; which one is the primary changes with a failover
    /// ([`PrivateRedisSentinel::primary`]).
    nodes: [PrivateRedis; 2],
    sentinels: Vec<PrivateRedis>,
}

impl PrivateRedisSentinel {
    /// Start the primary, its replica and the sentinels, and wait until the
    /// replica is in step and every sentinel knows the replica and the
    /// other sentinels (`SENTINEL CKQUORUM`): until a failover can happen.
    pub async fn start() -> anyhow::Result<Self> {
        let primary = PrivateRedis::start_as(true, Role::Alone).await?;
        let replica = PrivateRedis::start_as(true, Role::ReplicaOf(primary.port())).await?;
        let sentinels = try_join_all((0..3).map(|_| {
            PrivateRedis::start_as(
                false,
                Role::Sentinel {
                    primary: primary.port(),
                },
            )
        }))
        .await?;
        let set = Self {
            nodes: [primary, replica],
            sentinels,
        };
        set.wait_ready().await?;
        Ok(set)
    }

    /// Where seckill finds it: the sentinels, and the primary's name.
    pub fn at(&self) -> RedisAt {
        RedisAt::Sentinel {
            sentinels: self.sentinels.iter().map(PrivateRedis::url).collect(),
            master: MASTER_NAME.to_owned(),
        }
    }

    /// Which data server (0 or 1) the sentinels name as the primary now.
    pub async fn primary(&self) -> anyhow::Result<usize> {
        let addr = self.at().node_of("").await?.addr().to_string();
        self.nodes
            .iter()
            .position(|node| addr.ends_with(&format!(":{}", node.port())))
            .with_context(|| format!("the sentinels name {addr}, which is none of ours"))
    }

    /// The URL of data server `index` (0 or 1).
    pub fn node_url(&self, index: usize) -> String {
        self.nodes[index].url()
    }

    /// Kill data server `index` at once (SIGKILL), as a crash would.
    pub fn kill(&mut self, index: usize) {
        self.nodes[index].kill();
    }

    /// Freeze data server `index` (SIGSTOP): a replica so frozen
    /// acknowledges nothing, and falls behind its primary.
    pub fn pause(&self, index: usize) {
        self.nodes[index].pause();
    }

    /// Let data server `index` go on (SIGCONT).
    pub fn resume(&self, index: usize) {
        self.nodes[index].resume();
    }

    /// Start data server `index` again after a kill, with what its
    /// append-only file kept, as a replica of the primary the sentinels
    /// name now (so that it never serves as a second primary meanwhile);
    /// waits until it is in step.
    pub async fn restart(&mut self, index: usize) -> anyhow::Result<()> {
        let primary = self.primary().await?;
        anyhow::ensure!(primary != index, "data server {index} is still the primary");
        let port = self.nodes[primary].port();
        self.nodes[index].set_role(Role::ReplicaOf(port));
        self.nodes[index].restart().await?;
        self.wait_in_step(index, primary).await
    }

    /// Wait until data server `index`, a replica of data server
    /// `primary`, has its link up (its first sync done) and acknowledges
    /// the primary's writes within 300 ms, as the app's `WAIT` asks: the
    /// link alone is not enough on a loaded machine, where a replica just
    /// linked acknowledged its first write after the app's `WAIT` had
    /// given up, and the buyer was told `503 unconfirmed`.
    pub async fn wait_in_step(&self, index: usize, primary: usize) -> anyhow::Result<()> {
        let url = self.node_url(index);
        wait_until(|| replica_in_step(&url))
            .await
            .with_context(|| format!("the replica {url} never came in step"))?;
        let primary = self.node_url(primary);
        wait_until(|| writes_acknowledged(&primary, 1))
            .await
            .with_context(|| format!("the replica {url} never acknowledged a write"))
    }

    /// Wait until the sentinels name another primary than data server
    /// `old`, and it answers as one; returns its index.
    pub async fn wait_for_failover(&self, old: usize) -> anyhow::Result<usize> {
        wait_until(|| async {
            match self.primary().await {
                Ok(now) => now != old && role_is(&self.node_url(now), "master").await,
                Err(_) => false,
            }
        })
        .await
        .context("the sentinels did not fail the primary over")?;
        self.primary().await
    }

    /// Wait until every data server but the primary is a replica in step
    /// with it, and every sentinel can fail it over.
    pub(crate) async fn wait_ready(&self) -> anyhow::Result<()> {
        let primary = self.primary().await.unwrap_or(0);
        for (index, node) in self.nodes.iter().enumerate() {
            if index != primary {
                let url = node.url();
                wait_until(|| replica_in_step(&url))
                    .await
                    .with_context(|| format!("the replica {url} never came in step"))?;
            }
        }
        let url = self.node_url(primary);
        wait_until(|| writes_acknowledged(&url, self.nodes.len() - 1))
            .await
            .with_context(|| format!("no replica of {url} acknowledged a write"))?;
        for sentinel in &self.sentinels {
            let url = sentinel.url();
            wait_until(|| sentinel_ready(&url)).await.with_context(|| {
                format!("the sentinel {url} never knew the replica and its peers")
            })?;
        }
        Ok(())
    }
}

/// Whether the server at `url` says `ROLE` is `role`.
async fn role_is(url: &str, role: &str) -> bool {
    ask::<Vec<redis::Value>>(url, &redis::cmd("ROLE"))
        .await
        .is_ok_and(|answer| answer.first() == Some(&redis::Value::BulkString(role.into())))
}

/// Whether the sentinel at `url` knows a replica and two other sentinels,
/// and has the quorum and majority a failover needs.
async fn sentinel_ready(url: &str) -> bool {
    let quorum: redis::RedisResult<String> =
        ask(url, redis::cmd("SENTINEL").arg("CKQUORUM").arg(MASTER_NAME)).await;
    let replicas: Vec<redis::Value> =
        ask(url, redis::cmd("SENTINEL").arg("REPLICAS").arg(MASTER_NAME))
            .await
            .unwrap_or_default();
    let peers: Vec<redis::Value> = ask(
        url,
        redis::cmd("SENTINEL").arg("SENTINELS").arg(MASTER_NAME),
    )
    .await
    .unwrap_or_default();
    quorum.is_ok() && !replicas.is_empty() && peers.len() >= 2
}
