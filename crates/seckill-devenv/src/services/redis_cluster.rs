//! A private Redis Cluster: a few masters started from the installed
//! `redis-server`, their slots shared out by `redis-cli --cluster create`,
//! with replicas if asked for. For the tests, the bench and the chaos run
//! that show seckill on a cluster; nobody runs production on one machine's
//! cluster.
//!
//! A master that fails (killed, or stopped past the node timeout) is
//! replaced by one of its replicas, so which node is a master changes
//! while the cluster runs: the questions below ask the nodes each time
//! (`CLUSTER SLOTS`, `INFO replication`) rather than remember.

use std::ops::RangeInclusive;
use std::time::Duration;

use anyhow::Context;
use futures_util::future::try_join_all;

use super::probes::{answer_says, ask, replica_in_step};
use super::redis_server::PrivateRedis;
use super::supervise::{find_on_path, wait_until};
use seckill_core::redis_pool::RedisAt;

/// Redis' own `cluster-node-timeout` default: how long a node may not
/// answer before the others call it failing.
const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_secs(5);

/// Nodes of our own (masters, and replicas if asked for), keeping nothing
/// on disk; they stop when this value is dropped.
#[derive(Debug)]
pub struct PrivateRedisCluster {
    /// The nodes `redis-cli` made masters; a failover may have made one a
    /// replica since.
    masters: Vec<PrivateRedis>,
    /// The nodes it made replicas; a failover may have promoted one.
    replicas: Vec<PrivateRedis>,
}

impl PrivateRedisCluster {
    /// Start `masters` nodes, share the 16,384 slots among them, and wait
    /// until every node says the cluster is whole (`cluster_state:ok`).
    pub async fn start(masters: usize) -> anyhow::Result<Self> {
        Self::start_with_replicas(masters, 0).await
    }

    /// The same, with `replicas` replicas of each master
    /// (`--cluster-replicas`); waits until every replica is in step.
    pub async fn start_with_replicas(masters: usize, replicas: usize) -> anyhow::Result<Self> {
        Self::start_with(masters, replicas, DEFAULT_NODE_TIMEOUT).await
    }

    /// The same, each node calling another failing after `node_timeout`
    /// without an answer (`--cluster-node-timeout`): a master so called is
    /// failed over to one of its replicas.
    pub async fn start_with(
        masters: usize,
        replicas: usize,
        node_timeout: Duration,
    ) -> anyhow::Result<Self> {
        anyhow::ensure!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let cli = find_on_path("redis-cli").context("redis-cli is not installed")?;
        let all = try_join_all(
            (0..masters * (1 + replicas)).map(|_| PrivateRedis::start_cluster_node(node_timeout)),
        )
        .await?;
        let nodes: Vec<String> = all
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let created = tokio::process::Command::new(cli)
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .output()
            .await
            .context("running redis-cli --cluster create")?;
        anyhow::ensure!(
            created.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        );
        for node in &all {
            let url = node.url();
            wait_until(|| cluster_ok(&url))
                .await
                .with_context(|| format!("the cluster node {url} never said cluster_state:ok"))?;
        }
        // Which node `redis-cli` made a replica: the ones that say so.
        let (mut masters, mut replicas) = (Vec::new(), Vec::new());
        for node in all {
            if is_replica(&node.url()).await {
                replicas.push(node);
            } else {
                masters.push(node);
            }
        }
        for replica in &replicas {
            let url = replica.url();
            wait_until(|| replica_in_step(&url))
                .await
                .with_context(|| format!("the cluster replica {url} never came in step"))?;
        }
        Ok(Self { masters, replicas })
    }

    /// The node (master or replica) at `url`, to stop, freeze or resume
    /// one shard's servers only.
    pub fn node(&self, url: &str) -> Option<&PrivateRedis> {
        self.all().find(|node| node.url() == url)
    }

    /// The node at `url`, to kill and restart. Restarted, it finds its
    /// place in the cluster again from the file it keeps (`nodes.conf`);
    /// a master that was failed over meanwhile comes back as a replica of
    /// the master that took its slots, and copies its data.
    pub fn node_mut(&mut self, url: &str) -> Option<&mut PrivateRedis> {
        self.masters
            .iter_mut()
            .chain(&mut self.replicas)
            .find(|node| node.url() == url)
    }

    /// The URLs of the replicas of the master at `master`, as each node
    /// says (`INFO replication`): a node stopped or killed says nothing,
    /// and is not among them.
    pub async fn replicas_of(&self, master: &str) -> Vec<String> {
        let Some(port) = self.node(master).map(PrivateRedis::port) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for replica in self.all() {
            let url = replica.url();
            if answer_says(
                &url,
                redis::cmd("INFO").arg("replication"),
                &[&format!("master_port:{port}\r\n")],
            )
            .await
            {
                found.push(url);
            }
        }
        found
    }

    /// Every master's URL, as `redis-cli` made them (see [`Self::masters`]
    /// for the masters now).
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(PrivateRedis::url).collect()
    }

    /// The slot `key` lives in, as the first node that answers says
    /// (`CLUSTER KEYSLOT`).
    pub async fn slot_of(&self, key: &str) -> anyhow::Result<u16> {
        for node in self.all() {
            if let Ok(slot) = ask(&node.url(), redis::cmd("CLUSTER").arg("KEYSLOT").arg(key)).await
            {
                return Ok(slot);
            }
        }
        anyhow::bail!("no node of the cluster answered CLUSTER KEYSLOT")
    }

    /// The URL of the master that serves `key`'s slot now.
    pub async fn master_of(&self, key: &str) -> anyhow::Result<String> {
        self.master_of_slot(self.slot_of(key).await?).await
    }

    /// The URL of the master that serves `slot` now.
    pub async fn master_of_slot(&self, slot: u16) -> anyhow::Result<String> {
        self.slot_map()
            .await?
            .into_iter()
            .find(|(slots, _)| slots.contains(&slot))
            .map(|(_, master)| master)
            .with_context(|| format!("no master serves slot {slot}"))
    }

    /// The URLs of the masters now.
    pub async fn masters(&self) -> anyhow::Result<Vec<String>> {
        let mut masters: Vec<String> = Vec::new();
        for (_, url) in self.slot_map().await? {
            if !masters.contains(&url) {
                masters.push(url);
            }
        }
        Ok(masters)
    }

    /// Each range of slots and the URL of its master, as the first node
    /// that answers says (`CLUSTER SLOTS`; a stopped node is passed over
    /// after a second).
    async fn slot_map(&self) -> anyhow::Result<Vec<(RangeInclusive<u16>, String)>> {
        for node in self.all() {
            let Ok(ranges) =
                ask::<Vec<Vec<redis::Value>>>(&node.url(), redis::cmd("CLUSTER").arg("SLOTS"))
                    .await
            else {
                continue;
            };
            // Each range: [first slot, last slot, [host, port, id, ...], replicas...].
            let mut map = Vec::new();
            for range in &ranges {
                let [first, last, redis::Value::Array(master), ..] = range.as_slice() else {
                    anyhow::bail!("CLUSTER SLOTS answered {range:?}");
                };
                let (first, last): (u16, u16) = (
                    redis::from_redis_value_ref(first)?,
                    redis::from_redis_value_ref(last)?,
                );
                let [host, port, ..] = master.as_slice() else {
                    anyhow::bail!("CLUSTER SLOTS named a master as {master:?}");
                };
                let (host, port): (String, u16) = (
                    redis::from_redis_value_ref(host)?,
                    redis::from_redis_value_ref(port)?,
                );
                map.push((first..=last, format!("redis://{host}:{port}")));
            }
            return Ok(map);
        }
        anyhow::bail!("no node of the cluster answered CLUSTER SLOTS")
    }

    /// Every node, as started: masters first.
    fn all(&self) -> impl Iterator<Item = &PrivateRedis> {
        self.masters.iter().chain(&self.replicas)
    }

    /// Wait until a node other than `old` serves `slot` as its master, and
    /// says so itself (`role:master`): the cluster failed `old` over.
    /// Returns the new master's URL.
    pub async fn wait_for_failover(&self, old: &str, slot: u16) -> anyhow::Result<String> {
        wait_until(|| async {
            match self.master_of_slot(slot).await {
                Ok(now) => now != old && is_master(&now).await,
                Err(_) => false,
            }
        })
        .await
        .with_context(|| format!("the cluster did not fail {old} over"))?;
        self.master_of_slot(slot).await
    }

    /// Wait until the cluster is whole again after a failover: as many
    /// masters as it was made with, each saying it is one, every other
    /// node a replica in step, and every node saying `cluster_state:ok`.
    /// (A master resumed after the cluster replaced it still thinks it is
    /// one for a moment; the map is asked again until the nodes agree.)
    pub async fn wait_whole(&self) -> anyhow::Result<()> {
        wait_until(|| async {
            let Ok(masters) = self.masters().await else {
                return false;
            };
            if masters.len() != self.masters.len() {
                return false;
            }
            for node in self.all() {
                let url = node.url();
                let in_place = if masters.contains(&url) {
                    is_master(&url).await
                } else {
                    replica_in_step(&url).await
                };
                if !in_place || !cluster_ok(&url).await {
                    return false;
                }
            }
            true
        })
        .await
        .context("the cluster did not come whole again")
    }

    /// A slot the master at `url` serves now.
    pub async fn slot_of_master(&self, url: &str) -> anyhow::Result<u16> {
        self.slot_map()
            .await?
            .into_iter()
            .find(|(_, master)| master == url)
            .map(|(slots, _)| *slots.start())
            .with_context(|| format!("{url} serves no slot"))
    }

    /// Where seckill finds it.
    pub fn at(&self) -> RedisAt {
        RedisAt::Cluster(self.urls())
    }
}

/// Whether the node at `url` says it is a master.
async fn is_master(url: &str) -> bool {
    answer_says(url, redis::cmd("INFO").arg("replication"), &["role:master"]).await
}

/// Whether the node at `url` says it is a replica.
async fn is_replica(url: &str) -> bool {
    answer_says(url, redis::cmd("INFO").arg("replication"), &["role:slave"]).await
}

/// Whether the node at `url` serves its slots: the cluster has all 16,384
/// assigned and every node agrees.
async fn cluster_ok(url: &str) -> bool {
    answer_says(
        url,
        redis::cmd("CLUSTER").arg("INFO"),
        &["cluster_state:ok"],
    )
    .await
}
