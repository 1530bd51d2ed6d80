//! A private Redis Cluster: a few masters started from the installed
//! `redis-server`, their slots shared out by `redis-cli --cluster create`.
//! For the tests and the bench that show seckill on a cluster; nobody runs
//! production on one machine's cluster.

use std::time::Duration;

use anyhow::Context;
use futures_util::future::try_join_all;

use super::redis_server::PrivateRedis;
use super::supervise::{find_on_path, wait_until};
use seckill_core::redis_pool::RedisAt;

/// Masters of our own, no replicas, keeping nothing on disk; they stop when
/// this value is dropped.
#[derive(Debug)]
pub struct PrivateRedisCluster {
    masters: Vec<PrivateRedis>,
}

impl PrivateRedisCluster {
    /// Start `masters` nodes, share the 16,384 slots among them, and wait
    /// until every node says the cluster is whole (`cluster_state:ok`).
    pub async fn start(masters: usize) -> anyhow::Result<Self> {
        anyhow::ensure!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        let cli = find_on_path("redis-cli").context("redis-cli is not installed")?;
        let masters =
            try_join_all((0..masters).map(|_| PrivateRedis::start_cluster_node())).await?;
        let nodes: Vec<String> = masters
            .iter()
            .map(|node| format!("127.0.0.1:{}", node.port()))
            .collect();
        let created = tokio::process::Command::new(cli)
            .args(["--cluster", "create"])
            .args(&nodes)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .await
            .context("running redis-cli --cluster create")?;
        anyhow::ensure!(
            created.status.success(),
            "redis-cli --cluster create failed: {}{}",
            String::from_utf8_lossy(&created.stdout),
            String::from_utf8_lossy(&created.stderr)
        );
        let cluster = Self { masters };
        for url in cluster.urls() {
            wait_until(|| cluster_ok(&url))
                .await
                .with_context(|| format!("the cluster node {url} never said cluster_state:ok"))?;
        }
        Ok(cluster)
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

/// Whether the node at `url` serves its slots: the cluster has all 16,384
/// assigned and every node agrees.
async fn cluster_ok(url: &str) -> bool {
    seckill_core::probe::within(Duration::from_secs(1), async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        let info: String = redis::cmd("CLUSTER")
            .arg("INFO")
            .query_async(&mut conn)
            .await?;
        if info.contains("cluster_state:ok") {
            Ok(())
        } else {
            Err(redis::RedisError::from((
                redis::ErrorKind::Client,
                "not ok yet",
            )))
        }
    })
    .await
}
