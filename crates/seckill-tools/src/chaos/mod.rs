//! `seckill chaos`: the promise under a schedule of faults.
//!
//! It starts a deployment of its own, as production would run one: a
//! durable Redis (append-only file, fsync'ed on every write), a PostgreSQL,
//! two app instances and two workers, all private, so that it may kill,
//! stop, pause and wipe them. It creates one sale with plenty of units,
//! sends purchases at a steady rate (an open model: they fall due whether or
//! not the deployment is answering), and meanwhile injects the faults one
//! after another, spread over the run, in an order the seed decides
//! (`schedule.rs`, `faults.rs`). A failover of a replicated Redis also has
//! a waiting crowd: a second sale behind a waiting room, and buyers
//! waiting in it through the failover (`crowd.rs`). When the load is over it waits for the queues to drain,
//! then checks every promise, per fault window and overall (`judge/`),
//! prints the table (`report.rs`) and writes it as JSON and as an HTML page
//! with the timeline of answers and the fault windows shaded (`html.rs`).
//!
//! Exit codes as the load test's: 0 every row and check held, 1 one broke,
//! 2 the run could not be trusted (the generator could not keep the rate).

mod args;
mod cluster;
mod compare;
mod crowd;
mod faults;
mod html;
mod judge;
mod report;
mod schedule;

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use seckill_loadtest::http::Target;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::report::Verdict;
use seckill_loadtest::scenario::{self, Plan, RunData, Scenario, Shape};

use seckill_core::domain::NewSale;
use seckill_core::keys::SaleKeys;
use seckill_core::redis_pool::RedisAt;
use seckill_core::store::Store;
use seckill_core::urls::with_database;
use seckill_devenv::processes::{Deployment, Fleet, seckill_binary};
use seckill_devenv::services::{
    PrivatePostgres, PrivateRedis, PrivateRedisCluster, PrivateRedisSentinel,
};

pub(crate) use self::args::Fault;
pub use self::args::{ChaosArgs, DEFAULT_CROWD};
use self::faults::{FaultWindow, Wiped};
use self::judge::{ChaosCheck, FaultRow};
use self::report::ChaosReport;
use self::schedule::{gap, schedule};

/// The lock TTL of the chaos deployment: short, so that pausing a holder
/// past it takes little of the run, and half the redis crate's 500 ms reply
/// timeout, so that a holder paused before it read the reply that gave it
/// the lock, and resumed when the lock ran out, still takes that reply
/// (see `faults.rs`, `pause_a_lock_holder`).
pub(super) const LOCK_TTL: Duration = Duration::from_millis(250);
/// The workers' lease: above PostgreSQL's 10 s statement timeout, short
/// enough that the jobs of a killed worker come back within the drain.
const LEASE: Duration = Duration::from_secs(12);
/// Connections the generator keeps to the instances. (1,024 dropped as
/// many sends as 64 on the 2-core development machine: the drops there are
/// the generator's own CPU, not connections held by a paused instance.)
const CONNECTIONS: usize = 512;
/// The payment window of the chaos deployment: short, so that the units of
/// winners who do not pay (nobody pays here) come back on sale within
/// seconds, and orders keep flowing through every fault instead of the sale
/// selling out at the start.
const PAYMENT_WINDOW: Duration = Duration::from_secs(5);
/// The timeline's slice: the report counts the answers of each, by what
/// they said, and the page draws one step per slice.
const SLICE: Duration = Duration::from_millis(250);
/// How long the waiting crowd goes on asking after the last fault, at
/// least: buyers who waited through it are answered after it.
const CROWD_AFTER_FAULTS: Duration = Duration::from_secs(3);
/// How long the queues may take to drain after the load.
const DRAIN_LIMIT: Duration = Duration::from_secs(120);
/// Share of sends dropped outside every fault window above which the run is
/// not trusted, as in the load test: the generator could not keep the rate.
/// (Sends dropped while a fault is in force are the fault's doing: an
/// instance paused or killed holds its connections; they are shown in the
/// fault's row.)
const MAX_DROPPED_SHARE: f64 = 0.01;

/// The Redis of the deployment: one durable server, or (for
/// `redis-failover`) a primary and a replica under three sentinels, or
/// (`--cluster`) a cluster of three shards, each a primary and two
/// replicas.
pub(crate) enum RigRedis {
    One(PrivateRedis),
    Replicated(PrivateRedisSentinel),
    Cluster(PrivateRedisCluster),
}

impl RigRedis {
    /// What it is, in words, for the run's first line.
    fn describe(&self) -> &'static str {
        match self {
            RigRedis::One(_) => "one Redis",
            RigRedis::Replicated(_) => "a primary, a replica and three sentinels",
            RigRedis::Cluster(_) => "a Redis Cluster of 3 primaries with 2 replicas each",
        }
    }
}

/// The deployment under test, and the sale.
pub(crate) struct Rig {
    redis: RigRedis,
    postgres: PrivatePostgres,
    store: Store,
    cluster: Fleet,
    keys: SaleKeys,
    sale_id: i64,
    stock: u32,
    lock_ttl: Duration,
    postgres_down: Duration,
    /// app-2's writes the fence refused during the lock-holder pause;
    /// `None` if that fault was not in the run.
    fence_refusals: Option<u64>,
    /// The waiting crowd's sale, behind its room: a failover's run only.
    crowd: Option<(i64, SaleKeys)>,
}

/// Run the chaos scenario (or, with `--compare-durability`, the failover
/// twice); returns its verdict.
pub async fn chaos(args: ChaosArgs) -> anyhow::Result<Verdict> {
    seckill_cli::process::raise_open_files_limit();
    if args.compare_durability {
        return compare::compare(args).await;
    }
    Ok(run(args).await?.0)
}

/// One chaos run: the report printed and written; returns its verdict and
/// the report.
async fn run(args: ChaosArgs) -> anyhow::Result<(Verdict, ChaosReport)> {
    let started_at = Utc::now();
    let faults = schedule(&args);
    let gap = gap(&faults, &args)?;
    let replicated = faults.contains(&Fault::RedisFailover);
    let on_cluster = args.on_cluster();
    anyhow::ensure!(
        !(replicated && on_cluster),
        "redis-failover runs on a primary with a replica under Sentinel, the cluster's faults on a \
         cluster: ask for them in separate runs"
    );
    anyhow::ensure!(
        !(replicated || on_cluster) || !faults.iter().any(|f| f.needs_one_redis()),
        "redis-kill, redis-wipe and redis-stall run on one server, not on a replicated Redis: \
         ask for them in separate runs"
    );
    let mut rig = Rig::start(&args, replicated, on_cluster).await?;
    eprintln!(
        "chaos: {} buyers, {} units, {} purchases/s for {} s, on {} with --redis-durability {}; faults in order: {}",
        args.users,
        args.stock,
        args.rate,
        args.duration_secs(),
        rig.redis.describe(),
        args.durability_name(),
        faults
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut targets = Vec::new();
    for url in rig.cluster.urls() {
        targets.push(Target::resolve(&url).await?);
    }
    let plan = Arc::new(Plan::new(rig.sale_id, args.users, 0.05, targets));
    let shape = Shape {
        scenario: Scenario::Rate,
        rate: f64::from(args.rate),
        duration: Some(Duration::from_secs(args.duration_secs())),
        connections: CONNECTIONS,
    };
    let epoch = Instant::now();
    let progress = Progress::stderr();
    let load = scenario::run(&plan, shape, &progress);
    let lasts = Duration::from_secs(args.duration_secs());
    let crowd = (rig.crowd.as_ref())
        .map(|(sale, _)| Arc::new(crowd::Crowd::new(rig.cluster.urls(), *sale, epoch, lasts)));
    let waiting = async {
        match &crowd {
            Some(crowd) => Arc::clone(crowd).run(args.crowd, args.seed).await.map(Some),
            None => Ok(None),
        }
    };
    let injecting = async {
        let injected = rig.inject_all(&faults, epoch, gap).await;
        if let Some(crowd) = &crowd {
            crowd.stay_until(Instant::now() + CROWD_AFTER_FAULTS);
        }
        injected
    };
    let (run, injected, answers) = tokio::join!(load, injecting, waiting);
    let (run, (windows, wiped), answers) = (run?, injected?, answers?);
    // Whom the crowd's room holds, read as soon as the crowd has stopped,
    // before the drain: no admission has run out since a buyer's last
    // answer, so a buyer it no longer holds lost their place.
    let waited = match (answers, &rig.crowd) {
        (Some(answers), Some((_, keys))) => {
            Some(judge::Waited::read(&rig, keys, answers, epoch).await?)
        }
        _ => None,
    };

    rig.drain().await?;
    let wipe_ran = windows
        .iter()
        .any(|window| window.fault == Fault::RedisWipe);
    // On a cluster, every request is answered, and in time: no fault there
    // takes an instance away.
    let strict = on_cluster && !windows.iter().any(|window| window.fault == Fault::AppKill);
    let (mut checks, lost, mut summary) =
        judge::checks(&rig, &plan, &run, wipe_ran.then_some(&wiped), strict).await?;
    if args.durability_name() == "replica"
        && windows
            .iter()
            .any(|window| window.fault == Fault::ConnectionDrops)
    {
        checks.push(judge::unreplicated_202s(&run, epoch, &windows)?);
    }
    let mut rows = judge::rows(&run, epoch, &windows, &lost)?;
    if let (Some(waited), Some((sale, _))) = (waited, &rig.crowd) {
        let (crowd_checks, row, figures) =
            judge::crowd(&rig, *sale, args.crowd, &waited, &windows).await?;
        checks.extend(crowd_checks);
        rows.push(row);
        summary.crowd = Some(figures);
    }
    let verdict = verdict(&run, &rows, &checks);
    let report = ChaosReport {
        schema: "seckill-chaos/1",
        started_at,
        users: args.users,
        stock: args.stock,
        rate: args.rate,
        duration_secs: args.duration_secs(),
        seed: args.seed,
        windows,
        rows,
        checks,
        summary,
        requests: run.samples.len(),
        dropped: run.dropped,
        verdict: verdict.as_str(),
        timeline: judge::timeline(&run, epoch, SLICE),
    };
    println!("{}", report.to_text());
    let path = args.report_dir.join("chaos.json");
    std::fs::create_dir_all(&args.report_dir).context("creating the report directory")?;
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&report).expect("a report serializes"),
    )
    .with_context(|| format!("writing {}", path.display()))?;
    println!("JSON report: {}", path.display());
    let page = args.report_dir.join("chaos.html");
    std::fs::write(&page, html::to_html(&report))
        .with_context(|| format!("writing {}", page.display()))?;
    println!("HTML report: {}", page.display());
    rig.cluster.stop().await;
    Ok((verdict, report))
}

/// The run's verdict, as the load test's (`Report::judge`): nothing sent
/// proves nothing (invalid); then a failed row or check fails the run,
/// however many sends the generator dropped; only a run that broke nothing
/// is invalid for its dropped sends.
fn verdict(run: &RunData, rows: &[FaultRow], checks: &[ChaosCheck]) -> Verdict {
    let sent = run.samples.len() as f64 + run.dropped as f64;
    if sent == 0.0 {
        return Verdict::Invalid;
    }
    if !(rows.iter().all(|r| r.ok) && checks.iter().all(|c| c.ok)) {
        return Verdict::Fail;
    }
    let dropped_between = rows
        .iter()
        .find(|row| row.fault == judge::BETWEEN)
        .map_or(run.dropped, |row| row.dropped);
    if dropped_between as f64 / sent > MAX_DROPPED_SHARE {
        Verdict::Invalid
    } else {
        Verdict::Pass
    }
}

impl Rig {
    /// Start the servers, the processes and the sale.
    async fn start(args: &ChaosArgs, replicated: bool, on_cluster: bool) -> anyhow::Result<Self> {
        let redis = if on_cluster {
            RigRedis::Cluster(
                PrivateRedisCluster::start_with(3, 2, cluster::NODE_TIMEOUT)
                    .await
                    .context("a private cluster of 3 primaries with 2 replicas each")?,
            )
        } else if replicated {
            RigRedis::Replicated(PrivateRedisSentinel::start().await?)
        } else {
            RigRedis::One(PrivateRedis::start_durable().await?)
        };
        let postgres = PrivatePostgres::start().await?;
        let database_url = with_database(&postgres.url("postgres"), "seckill")?;
        seckill_devenv::services::ensure_database(&database_url).await?;
        let prefix = "chaos";
        let pg = seckill_core::store::connect_postgres(&database_url).await?;
        let at = match &redis {
            RigRedis::One(redis) => RedisAt::Server(redis.url()),
            RigRedis::Replicated(sentinels) => sentinels.at(),
            RigRedis::Cluster(cluster) => cluster.at(),
        };
        let pool = seckill_core::redis_pool::connect_redis(&at, Duration::from_secs(5)).await?;
        let store = Store::new(pg, pool, prefix);
        let new = NewSale::builder("Chaos", i64::from(args.stock))
            .price_cents(99_900)
            .build(Utc::now())
            .context("the chaos sale")?;
        let sale_id = store.create_sale(&new).await?.id;
        let crowd = if replicated && args.crowd > 0 {
            let sale = crowd::create_sale(&store, args.crowd).await?;
            Some((sale, SaleKeys::new(prefix, sale)))
        } else {
            None
        };
        let deployment = Deployment::new(seckill_binary()?, &at, &database_url, prefix)
            .env("SECKILL_LOCK_TTL_MS", LOCK_TTL.as_millis().to_string())
            .env("SECKILL_LEASE_MS", LEASE.as_millis().to_string())
            .env(
                "SECKILL_PAYMENT_WINDOW_SECS",
                PAYMENT_WINDOW.as_secs().to_string(),
            )
            // The waiting crowd joins from one address: the join limit per
            // address would turn most of it away.
            .env("SECKILL_ROOM_JOINS_PER_IP", "0");
        let deployment = args
            .durability
            .iter()
            .fold(deployment, |d, (name, value)| d.env(name, value.clone()));
        let mut cluster = Fleet::new(deployment);
        for name in ["app-1", "app-2"] {
            cluster.start_app(name, &["--no-worker"]).await?;
        }
        for name in ["worker-a", "worker-b"] {
            cluster.start_worker(name, &[]).await?;
        }
        Ok(Self {
            redis,
            postgres,
            keys: SaleKeys::new(prefix, sale_id),
            store,
            cluster,
            sale_id,
            stock: args.stock,
            lock_ttl: LOCK_TTL,
            postgres_down: Duration::from_secs(args.postgres_down_secs),
            fence_refusals: None,
            crowd,
        })
    }

    /// Inject `faults` one after another, `gap` apart.
    async fn inject_all(
        &mut self,
        faults: &[Fault],
        epoch: Instant,
        gap: Duration,
    ) -> anyhow::Result<(Vec<FaultWindow>, Wiped)> {
        let mut windows = Vec::new();
        let mut wiped = Wiped::default();
        for fault in faults {
            tokio::time::sleep(gap).await;
            let (window, lost) = self.inject(*fault, epoch).await?;
            windows.push(window);
            wiped.extend(lost);
        }
        Ok((windows, wiped))
    }

    /// Wait until the sales' order queues and deadline queues are empty
    /// (every order written, every unpaid one cancelled), at most
    /// [`DRAIN_LIMIT`]. A read that fails is tried again: after a
    /// cluster's failover, the first may meet a connection to the old
    /// primary, and the client learns the new map from that failure.
    async fn drain(&self) -> anyhow::Result<()> {
        let deadline = Instant::now() + DRAIN_LIMIT;
        loop {
            let left = self.queued().await;
            if let Ok((0, 0, 0)) = left {
                return Ok(());
            }
            if Instant::now() >= deadline {
                let (due, inflight, deadlines) = left?;
                anyhow::bail!(
                    "the queues did not drain within {DRAIN_LIMIT:?}: {due} order jobs waiting, {inflight} in flight, {deadlines} deadlines"
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Orders waiting, orders in flight, and deadlines (waiting or held),
    /// of the sale and the waiting crowd's.
    async fn queued(&self) -> anyhow::Result<(u64, u64, u64)> {
        let mut conn = self.store.redis().await?;
        let mut left = (0, 0, 0);
        for keys in std::iter::once(&self.keys).chain(self.crowd.as_ref().map(|(_, keys)| keys)) {
            let (due, inflight, deadlines, held): (u64, u64, u64, u64) = redis::pipe()
                .zcard(&keys.queue.due)
                .zcard(&keys.queue.inflight)
                .zcard(&keys.deadlines.due)
                .zcard(&keys.deadlines.inflight)
                .query_async(&mut conn)
                .await
                .context("reading the queues")?;
            left = (left.0 + due, left.1 + inflight, left.2 + deadlines + held);
        }
        Ok(left)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill_loadtest::answer::AnswerKind;
    use seckill_loadtest::scenario::Sample;

    fn between(dropped: u64, ok: bool) -> FaultRow {
        FaultRow {
            fault: judge::BETWEEN.to_owned(),
            requests: 10,
            accepted: 1,
            errors: 0,
            unavailable: 0,
            internal: 0,
            lost: 0,
            dropped,
            recovered_after_ms: None,
            failures_by_second: Vec::new(),
            ok,
        }
    }

    fn check(ok: bool) -> ChaosCheck {
        ChaosCheck::equal("a check", 0, if ok { 0 } else { 1 })
    }

    /// Half the sends dropped between faults makes a clean run invalid,
    /// but a lost `202` beside them still fails it, as in the load test.
    #[test]
    fn a_broken_promise_fails_the_run_however_many_sends_were_dropped() {
        let sample = Sample {
            user: 0,
            outcome: AnswerKind::Won,
            order_id: None,
            unconfirmed: false,
            instance: None,
            status: Some(202),
            retry_after: false,
            intended_us: 0,
            sent_us: 0,
            done_us: 0,
        };
        let run = RunData {
            samples: vec![sample; 10],
            dropped: 10,
            ..RunData::default()
        };
        assert_eq!(
            verdict(&run, &[between(10, true)], &[check(true)]),
            Verdict::Invalid
        );
        assert_eq!(
            verdict(&run, &[between(10, true)], &[check(false)]),
            Verdict::Fail
        );
        assert_eq!(
            verdict(&run, &[between(10, false)], &[check(true)]),
            Verdict::Fail
        );
        assert_eq!(
            verdict(&run, &[between(0, true)], &[check(true)]),
            Verdict::Pass
        );
        assert_eq!(
            verdict(&RunData::default(), &[], &[check(false)]),
            Verdict::Invalid
        );
    }
}
