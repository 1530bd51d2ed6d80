//! A private Redis Cluster: a few masters started from the installed
//! `redis-server`, their slots shared out by `redis-cli --cluster create`.
//! For the tests and the bench that show seckill on a cluster; nobody runs
//! production on one machine's cluster.

use anyhow::Context;
use futures_util::future::try_join_all;

use super::probes::{answer_says, replica_in_step};
use super::redis_server::PrivateRedis;
use super::supervise::{find_on_path, wait_until};
use seckill_core::redis_pool::RedisAt;

/// Nodes of our own (masters, and replicas if asked for), keeping nothing
/// on disk; they stop when this value is dropped.
#[derive(Debug)]
pub struct PrivateRedisCluster {
    masters: Vec<PrivateRedis>,
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
        anyhow::ensure!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let cli = find_on_path("redis-cli").context("redis-cli is not installed")?;
        let all =
            try_join_all((0..masters * (1 + replicas)).map(|_| PrivateRedis::start_cluster_node()))
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

    /// Freeze every replica (SIGSTOP): none acknowledges a write.
    pub fn pause_replicas(&self) {
        self.replicas.iter().for_each(PrivateRedis::pause);
    }

    /// Let the replicas go on (SIGCONT).
    pub fn resume_replicas(&self) {
        self.replicas.iter().for_each(PrivateRedis::resume);
    }

    /// The node (master or replica) at `url`, to stop, freeze or resume
    /// one shard's servers only.
    pub fn node(&self, url: &str) -> Option<&PrivateRedis> {
        self.masters
            .iter()
            .chain(&self.replicas)
            .find(|node| node.url() == url)
    }

    /// The URLs of the replicas of the master at `master` (a URL of
    /// [`Self::urls`]), as each replica says (`INFO replication`).
    pub async fn replicas_of(&self, master: &str) -> Vec<String> {
        let Some(port) = self.node(master).map(PrivateRedis::port) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        for replica in &self.replicas {
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

    /// Every master's URL.
    pub fn urls(&self) -> Vec<String> {
        self.masters.iter().map(PrivateRedis::url).collect()
    }

    /// The URL of the master that owns `key`'s slot (`RedisAt::node_of`).
    pub async fn master_of(&self, key: &str) -> anyhow::Result<String> {
        Ok(format!("redis://{}", self.at().node_of(key).await?.addr()))
    }

    /// Where seckill finds it.
    pub fn at(&self) -> RedisAt {
        RedisAt::Cluster(self.urls())
    }
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
