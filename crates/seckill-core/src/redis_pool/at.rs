//! Where seckill's Redis data lives ([`RedisAt`]): one server, a primary
//! under Sentinel, or a cluster, as the settings and the environment name
//! it.

use anyhow::Context;
use redis::Value;

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

#[cfg(test)]
mod tests;
