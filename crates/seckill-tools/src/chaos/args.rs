//! `seckill chaos`'s options, and the faults it can inject.

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

/// `--crowd` unless told otherwise: the waiting crowd's buyers.
pub const DEFAULT_CROWD: u32 = 300;

/// The faults `seckill chaos` can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Fault {
    /// A worker killed with SIGKILL mid-batch, three times (a fresh one started each time).
    WorkerKill,
    /// An app instance killed with SIGKILL mid-load, then restarted on the same address.
    AppKill,
    /// An app instance stopped (SIGSTOP) while it holds the sale lock, until the lock has run out, then resumed: its purchases must write nothing (the fence).
    LockHolderPause,
    /// PostgreSQL stopped for --postgres-down-secs, then restarted.
    PostgresDown,
    /// Redis killed with SIGKILL and restarted from its append-only file.
    RedisKill,
    /// Redis restarted with no data at all (what a Redis without persistence meets).
    RedisWipe,
    /// Redis stopped with SIGSTOP for 3 s, as a host that stalls it would, then resumed: every command sent meanwhile runs when it goes on, after its caller was answered.
    RedisStall,
    /// Hostile traffic beside the load: made-up ids, malformed bodies, oversized headers, half-open connections.
    Flood,
    /// Not in the default run. Redis as a primary and a replica under three sentinels: the replica cut off, the primary killed with SIGKILL while orders flow, the replica promoted; the apps follow it without a restart. Keeps the promise with --redis-durability replica; with local, counts the 202s it takes back. Not with redis-kill, redis-wipe or redis-stall.
    RedisFailover,
    /// Not in the default run; on a cluster (--cluster). The sale's shard's replicas cut off, its primary killed with SIGKILL while orders flow; the cluster promotes a replica; the old primary back as a replica.
    ClusterFailover,
    /// Not in the default run; on a cluster. Another shard's primary (none of the sale's keys) stopped with SIGSTOP past the node timeout (the cluster promotes its replica) and past the answer bound, then resumed: the sale must sell on as if nothing happened.
    OtherShardStall,
    /// Not in the default run; on a cluster. The sale's shard's replicas stopped while its primary drops every client connection every 3 ms (CLIENT KILL TYPE normal), for 2 s.
    ConnectionDrops,
    /// Not in the default run; on a cluster. The sale's shard's primary stopped with SIGSTOP past the node timeout (the cluster promotes a replica) and past the answer bound, then resumed.
    SaleShardStall,
}

impl Fault {
    /// The default run: every fault on one Redis (`RedisFailover` needs a
    /// replicated one, and is asked for by name).
    pub(crate) const ALL: [Fault; 8] = [
        Fault::WorkerKill,
        Fault::AppKill,
        Fault::LockHolderPause,
        Fault::PostgresDown,
        Fault::RedisKill,
        Fault::RedisWipe,
        Fault::RedisStall,
        Fault::Flood,
    ];

    /// The faults of a run on a cluster (`--cluster` asks for them all).
    pub(crate) const CLUSTER: [Fault; 4] = [
        Fault::ClusterFailover,
        Fault::OtherShardStall,
        Fault::ConnectionDrops,
        Fault::SaleShardStall,
    ];

    /// Whether the fault needs one Redis server (it kills, wipes or stops
    /// it).
    pub(crate) fn needs_one_redis(self) -> bool {
        matches!(
            self,
            Fault::RedisKill | Fault::RedisWipe | Fault::RedisStall
        )
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Fault::WorkerKill => "worker-kill",
            Fault::AppKill => "app-kill",
            Fault::LockHolderPause => "lock-holder-pause",
            Fault::PostgresDown => "postgres-down",
            Fault::RedisKill => "redis-kill",
            Fault::RedisWipe => "redis-wipe",
            Fault::RedisStall => "redis-stall",
            Fault::Flood => "flood",
            Fault::RedisFailover => "redis-failover",
            Fault::ClusterFailover => "cluster-failover",
            Fault::OtherShardStall => "other-shard-stall",
            Fault::ConnectionDrops => "connection-drops",
            Fault::SaleShardStall => "sale-shard-stall",
        }
    }
}

/// `seckill chaos`'s options: all have defaults, none is needed.
#[derive(Debug, Clone, Args)]
pub struct ChaosArgs {
    /// Distinct buyers.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) users: u32,

    /// Units of the sale: fewer than the buyers, so the sale sells out, but
    /// plenty, so orders keep flowing through every fault.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) stock: u32,

    /// Purchases per second (an open model: they fall due whether or not earlier ones were answered).
    #[arg(long, default_value_t = 1_500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) rate: u32,

    /// Seconds of load; the faults are spread over it, so it must outlast them (every fault with the default 10 s PostgreSQL outage takes about 34 s; the cluster's four, about 33 s) [default: 40; with --cluster, 45].
    #[arg(long, value_parser = clap::value_parser!(u64).range(2..=3_600))]
    pub(crate) duration_secs: Option<u64>,

    /// Inject only this fault (repeat for several) [default: every fault].
    #[arg(long = "fault", value_enum)]
    pub(crate) faults: Vec<Fault>,

    /// Seed of the fault order: the same seed gives the same schedule.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,

    /// Seconds PostgreSQL stays down.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub(crate) postgres_down_secs: u64,

    /// Run on a private Redis Cluster of 3 primaries with 2 replicas each
    /// (node timeout 1.5 s) instead of one Redis; with no --fault, inject
    /// the cluster's faults (cluster-failover, other-shard-stall,
    /// connection-drops, sale-shard-stall). A cluster fault asked for by
    /// name implies it.
    #[arg(long)]
    pub(crate) cluster: bool,

    /// Run the redis-failover fault (with --cluster, the cluster's faults)
    /// twice, the same way, with --redis-durability local and then replica,
    /// and put the two side by side in one table (each run's reports go to
    /// a folder named after it).
    #[arg(long, conflicts_with = "faults")]
    pub(crate) compare_durability: bool,

    /// Buyers of the waiting crowd a redis-failover run has beside its
    /// load: a second sale behind a FIFO waiting room admitting 4 a second
    /// and 4 at once, joined, asked about once a second and bought from
    /// through the failover (0: no crowd).
    #[arg(long, default_value_t = DEFAULT_CROWD, value_parser = clap::value_parser!(u32).range(0..=5_000))]
    pub(crate) crowd: u32,

    /// Where the JSON and HTML reports go.
    #[arg(long, default_value = "target/seckill-chaos")]
    pub(crate) report_dir: PathBuf,

    /// What the instances' `202` waits for (`--redis-durability` and its
    /// wait), as their environment: set from the command's own flags.
    #[arg(skip)]
    pub(crate) durability: Vec<(&'static str, String)>,

    /// `--redis-replica-wait-ms`, for the runs `--compare-durability` makes.
    #[arg(skip = seckill_core::config::DEFAULT_REPLICA_WAIT_MS)]
    pub(crate) replica_wait: u64,
}

impl ChaosArgs {
    /// The same run, whose instances answer as `given` says a `202` waits.
    pub fn with_durability(mut self, given: &seckill_cli::ServiceArgs) -> Self {
        self.durability = given.durability_env().to_vec();
        self.replica_wait = given.redis_replica_wait_ms;
        self
    }

    /// Seconds of load: as given, or the default of the run's kind.
    pub(crate) fn duration_secs(&self) -> u64 {
        self.duration_secs
            .unwrap_or(if self.on_cluster() { 45 } else { 40 })
    }

    /// Whether the run is on a cluster: asked for, or implied by a fault.
    pub(crate) fn on_cluster(&self) -> bool {
        self.cluster || self.faults.iter().any(|f| Fault::CLUSTER.contains(f))
    }

    /// The durability the instances run with, by name.
    pub(crate) fn durability_name(&self) -> &str {
        self.durability
            .iter()
            .find(|(name, _)| *name == "SECKILL_REDIS_DURABILITY")
            .map_or("local", |(_, value)| value.as_str())
    }
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::Fault;

    /// A fault no run injects is tested by nothing: each is in the default
    /// run, in a cluster's run, or one of the few asked for by name.
    #[test]
    fn every_fault_is_in_one_run_or_asked_for_by_name() {
        let by_name_only = [Fault::RedisFailover];
        for fault in Fault::value_variants() {
            let runs = [
                Fault::ALL.contains(fault),
                Fault::CLUSTER.contains(fault),
                by_name_only.contains(fault),
            ];
            assert_eq!(
                runs.iter().filter(|&&is| is).count(),
                1,
                "{fault:?} must be in exactly one of Fault::ALL, Fault::CLUSTER and the faults asked for by name"
            );
        }
    }
}
