//! The faults of a run on a Redis Cluster (`seckill chaos --cluster`):
//! three shards, each a primary and two replicas, the sale on one of them.
//!
//! Two of the faults fail a primary over and one stalls the sale's shard,
//! so which node is the sale's primary changes during the run: each fault
//! asks the cluster where the sale's slot is served now
//! (`PrivateRedisCluster::master_of_slot`) rather than remember it. Each
//! returns once the cluster is whole again (every slot served, every
//! replica in step), so that the next fault starts from a healthy cluster.

use std::time::{Duration, Instant};

use anyhow::Context;
use seckill_devenv::services::{PrivateRedisCluster, cut_replicas_off, drop_clients};

use super::faults::CUT_OFF;
use super::{Rig, RigRedis};

/// The cluster's `--cluster-node-timeout`: how long a node may not answer
/// before the others call it failing and, if it is a primary, promote one
/// of its replicas. Production runs 15 s; a chaos run would rather not
/// wait that long.
pub(super) const NODE_TIMEOUT: Duration = Duration::from_millis(1_500);
/// How long the connection drops last.
pub(super) const DROPS_FOR: Duration = Duration::from_secs(2);
/// How often the sale's primary drops its client connections meanwhile.
const DROP_EVERY: Duration = Duration::from_millis(3);
/// How long a stalled primary stays stopped at least: past the bound every
/// request must be answered within, so that a request that waits for the
/// node instead of giving up on it (a connection without a response
/// timeout) is seen. Most stalls are failed over well before.
pub(super) const STALL_FOR: Duration =
    super::judge::ANSWER_BOUND.saturating_add(Duration::from_secs(1));

impl Rig {
    /// The cluster of a `--cluster` run.
    fn cluster(&mut self) -> anyhow::Result<&mut PrivateRedisCluster> {
        match &mut self.redis {
            RigRedis::Cluster(cluster) => Ok(cluster),
            RigRedis::One(_) | RigRedis::Replicated(_) => {
                anyhow::bail!("the cluster's faults need a cluster: run with --cluster")
            }
        }
    }

    /// The sale's slot, and the URL of the primary that serves it now.
    async fn sale_shard(&mut self) -> anyhow::Result<(u16, String)> {
        let stock = self.keys.stock.clone();
        let cluster = self.cluster()?;
        let slot = cluster.slot_of(&stock).await?;
        Ok((slot, cluster.master_of_slot(slot).await?))
    }

    /// The failover of the sale's shard, while orders flow: its replicas
    /// are frozen (SIGSTOP) and their links cut (`CLIENT KILL TYPE
    /// replica` on the primary), so that they fall [`CUT_OFF`] behind;
    /// then the primary is killed (SIGKILL), the replicas go on, and the
    /// cluster promotes the one with the most data. The old primary comes
    /// back as a replica of the new one. What the primary took during the
    /// cut is what the failover takes back: with `--redis-durability
    /// replica` no buyer was told `202` for it, with `local` they were.
    pub(super) async fn fail_the_sale_over(&mut self) -> anyhow::Result<String> {
        let (slot, primary) = self.sale_shard().await?;
        let cluster = self.cluster()?;
        let replicas = cluster.replicas_of(&primary).await;
        anyhow::ensure!(!replicas.is_empty(), "{primary} has no replica in step");
        let paused = |cluster: &PrivateRedisCluster, stop: bool| {
            for url in &replicas {
                if let Some(node) = cluster.node(url) {
                    if stop { node.pause() } else { node.resume() }
                }
            }
        };
        paused(cluster, true);
        let cut = cut_replicas_off(&primary).await;
        if let Err(error) = cut {
            paused(cluster, false);
            return Err(error);
        }
        tokio::time::sleep(CUT_OFF).await;
        let killed = Instant::now();
        let node = cluster
            .node_mut(&primary)
            .with_context(|| format!("{primary} is none of ours"))?;
        tokio::task::block_in_place(|| node.kill());
        paused(cluster, false);
        let promoted = cluster.wait_for_failover(&primary, slot).await?;
        let promoted_in = killed.elapsed();
        let node = cluster
            .node_mut(&primary)
            .with_context(|| format!("{primary} is none of ours"))?;
        node.restart().await?;
        cluster.wait_whole().await?;
        Ok(format!(
            "the sale's {} replicas cut off for {CUT_OFF:?}, its primary killed with SIGKILL; \
             the cluster promoted {promoted} {:.1} s later; the old primary back as a replica",
            replicas.len(),
            promoted_in.as_secs_f64()
        ))
    }

    /// A primary that holds none of the sale's keys stopped (SIGSTOP) past
    /// the node timeout, until the cluster has promoted one of its
    /// replicas, then resumed: it comes back as a replica. The sale must
    /// not notice.
    pub(super) async fn stall_another_shard(&mut self) -> anyhow::Result<String> {
        let (_, sale_primary) = self.sale_shard().await?;
        let cluster = self.cluster()?;
        let other = cluster
            .masters()
            .await?
            .into_iter()
            .find(|master| *master != sale_primary)
            .context("no shard but the sale's")?;
        let slot = cluster.slot_of_master(&other).await?;
        let stalled = stall_until_failed_over(cluster, &other, slot).await?;
        Ok(format!("another shard's primary ({other}) {stalled}"))
    }

    /// The sale's primary stopped (SIGSTOP) past the node timeout, until
    /// the cluster has promoted one of its replicas, then resumed: it
    /// comes back as a replica, and whatever it ran when resumed, before
    /// it knew, is dropped with its data.
    pub(super) async fn stall_the_sale_shard(&mut self) -> anyhow::Result<String> {
        let (slot, primary) = self.sale_shard().await?;
        let cluster = self.cluster()?;
        let stalled = stall_until_failed_over(cluster, &primary, slot).await?;
        Ok(format!("the sale's primary ({primary}) {stalled}"))
    }

    /// The sale's replicas stopped (SIGSTOP) while its primary drops every
    /// client connection every [`DROP_EVERY`], for [`DROPS_FOR`]: nothing
    /// can be confirmed, and every answer in flight is lost on the way.
    /// Returns what happened, in words, and when (since `epoch`) the
    /// replicas were stopped and resumed: the fault's window for the judge.
    /// Not the call's own start and end: finding the shard's nodes first
    /// can put the stop well after the call on a busy machine, and a `WAIT`
    /// sent before the resume may be answered, rightly, just after it.
    pub(super) async fn drop_connections(
        &mut self,
        epoch: Instant,
    ) -> anyhow::Result<(String, Duration, Duration)> {
        let (_, primary) = self.sale_shard().await?;
        let cluster = self.cluster()?;
        let replicas = cluster.replicas_of(&primary).await;
        let nodes: Vec<_> = replicas
            .iter()
            .filter_map(|url| cluster.node(url))
            .collect();
        nodes.iter().for_each(|node| node.pause());
        let stopped = epoch.elapsed();
        let dropping = drop_clients(&primary, DROP_EVERY);
        tokio::time::sleep(DROPS_FOR).await;
        let kills = dropping.stop().await;
        let resumed = epoch.elapsed();
        nodes.iter().for_each(|node| node.resume());
        let kills = kills?;
        cluster.wait_whole().await?;
        let note = format!(
            "the sale's {} replicas stopped while its primary dropped its clients for {DROPS_FOR:?} \
             ({kills} kills dropped connections)",
            replicas.len()
        );
        Ok((note, stopped, resumed))
    }
}

/// Stop `primary` (SIGSTOP), wait until the cluster serves `slot` from
/// another node and [`STALL_FOR`] has passed, resume it, and wait until
/// the cluster is whole: what happened, in words.
async fn stall_until_failed_over(
    cluster: &PrivateRedisCluster,
    primary: &str,
    slot: u16,
) -> anyhow::Result<String> {
    let node = cluster
        .node(primary)
        .with_context(|| format!("{primary} is none of ours"))?;
    let stopped = Instant::now();
    node.pause();
    let promoted = cluster.wait_for_failover(primary, slot).await;
    let promoted_in = stopped.elapsed();
    tokio::time::sleep(STALL_FOR.saturating_sub(promoted_in)).await;
    // Resumed whatever the wait's outcome: never left stopped.
    node.resume();
    let promoted = promoted?;
    let stalled_for = stopped.elapsed();
    cluster.wait_whole().await?;
    Ok(format!(
        "stopped with SIGSTOP for {:.1} s; the cluster promoted {promoted} {:.1} s in; resumed, back as a replica",
        stalled_for.as_secs_f64(),
        promoted_in.as_secs_f64()
    ))
}
