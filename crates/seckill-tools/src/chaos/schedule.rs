//! When each fault falls: the order the seed gives, and the gap before
//! each, so that every fault falls while purchases are being sent.

use std::time::Duration;

use super::{ChaosArgs, Fault, cluster};

/// About how long each fault takes, to spread them over the run.
fn length(fault: Fault, args: &ChaosArgs) -> Duration {
    match fault {
        Fault::WorkerKill | Fault::Flood => Duration::from_secs(2),
        Fault::AppKill | Fault::RedisKill | Fault::RedisWipe => Duration::from_secs(1),
        Fault::RedisStall => super::faults::REDIS_STALL + Duration::from_secs(1),
        // The replica cut off, the kill, the sentinels' promotion (about
        // 3 s: 2 s without an answer, then the election), the old primary
        // back as a replica.
        Fault::RedisFailover => Duration::from_secs(6),
        // The cut-off, the kill, the cluster's promotion (the node timeout,
        // then the election), the old primary back as a replica in step.
        Fault::ClusterFailover => Duration::from_secs(6),
        // Stopped past the answer bound (the cluster promotes a replica
        // meanwhile), then resumed and back in step as a replica.
        Fault::OtherShardStall | Fault::SaleShardStall => {
            cluster::STALL_FOR + Duration::from_secs(1)
        }
        Fault::ConnectionDrops => cluster::DROPS_FOR + Duration::from_secs(1),
        // Waiting for units on sale (a sold-out sale has no holder with
        // anything to write; unpaid units come back within the payment
        // window), then stopped until its lock runs out, and the refusal
        // (see `faults.rs`).
        Fault::LockHolderPause => Duration::from_secs(4),
        Fault::PostgresDown => Duration::from_secs(args.postgres_down_secs),
    }
}

/// The gap before each fault: what the run has beyond the faults' lengths,
/// shared out, so every fault falls while purchases are being sent.
pub(super) fn gap(faults: &[Fault], args: &ChaosArgs) -> anyhow::Result<Duration> {
    let busy: Duration = faults.iter().map(|f| length(*f, args)).sum();
    let run = Duration::from_secs(args.duration_secs());
    let slots = u32::try_from(faults.len() + 1).unwrap_or(u32::MAX);
    anyhow::ensure!(
        run > busy + Duration::from_secs(u64::from(slots)),
        "--duration-secs {} is too short for these faults: they take about {} s, and need a second between each and at the ends: more than {} s in all",
        args.duration_secs(),
        busy.as_secs_f64().ceil(),
        busy.as_secs() + u64::from(slots)
    );
    Ok((run - busy) / slots)
}

/// The faults to inject, in the order the seed gives.
pub(super) fn schedule(args: &ChaosArgs) -> Vec<Fault> {
    let mut faults: Vec<Fault> = if args.faults.is_empty() && args.cluster {
        Fault::CLUSTER.to_vec()
    } else if args.faults.is_empty() {
        Fault::ALL.to_vec()
    } else {
        let mut chosen = args.faults.clone();
        chosen.sort();
        chosen.dedup();
        chosen
    };
    let mut rng = fastrand::Rng::with_seed(args.seed);
    rng.shuffle(&mut faults);
    faults
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    /// `seckill chaos`'s options, as its command line parses them.
    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        args: ChaosArgs,
    }

    fn args(line: &[&str]) -> ChaosArgs {
        let mut all = vec!["chaos"];
        all.extend_from_slice(line);
        Line::parse_from(all).args
    }

    #[test]
    fn the_same_seed_gives_the_same_schedule_and_every_fault_once() {
        let first = schedule(&args(&["--seed", "3"]));
        assert_eq!(first, schedule(&args(&["--seed", "3"])));
        let mut sorted = first.clone();
        sorted.sort();
        assert_eq!(sorted, Fault::ALL.to_vec());
        let chosen = schedule(&args(&["--fault", "flood", "--fault", "flood"]));
        assert_eq!(chosen, [Fault::Flood]);
    }

    #[test]
    fn a_cluster_run_injects_the_cluster_faults_and_a_cluster_fault_implies_one() {
        let mut faults = schedule(&args(&["--cluster"]));
        faults.sort();
        assert_eq!(faults, Fault::CLUSTER.to_vec());
        assert!(args(&["--fault", "sale-shard-stall"]).on_cluster());
        assert!(!args(&["--fault", "redis-failover"]).on_cluster());
        assert!(
            gap(&Fault::CLUSTER, &args(&["--cluster"])).is_ok(),
            "the defaults fit"
        );
    }

    #[test]
    fn the_faults_must_fit_in_the_run() {
        assert!(gap(&Fault::ALL, &args(&[])).is_ok(), "the defaults fit");
        assert!(gap(&Fault::ALL, &args(&["--duration-secs", "10"])).is_err());
    }
}
