//! The load test against app instances this process starts: what
//! `seckill-loadtest` ([`load_test`]) and `seckill demo` share.
//!
//! The load generator itself lives in `crates/seckill-loadtest` (crate `seckill_loadtest`)
//! and knows the app only over HTTP. This module adds what needs seckill's
//! own code: connecting to the servers [`seckill_devenv::services`] found, starting
//! app instances and a worker ([`seckill_devenv::processes`]), creating the sale, and
//! naming its Redis keys for the verifier.

use std::path::PathBuf;

use anyhow::Context;
use chrono::Utc;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::report::Verdict;
use seckill_loadtest::{LoadArgs, Subject};

use seckill_cli::ServiceArgs;
use seckill_core::config::Strategy;
use seckill_devenv::processes::{Deployment, Fleet, seckill_binary};

use crate::chaos::{ChaosArgs, Fault};
use seckill_core::domain::NewSale;
use seckill_core::keys::SaleKeys;
use seckill_core::redis_pool::RedisConn;
use seckill_core::store::Store;
use seckill_devenv::services::Services;

/// `seckill-loadtest`'s command line.
#[derive(Debug, clap::Parser)]
#[command(
    name = "seckill-loadtest",
    version,
    about = "Fire thousands of buyers at seckill over HTTP, then check in PostgreSQL and Redis that nothing was oversold, lost or invented.",
    after_help = "Exit status: 0 every check passed; 1 a check failed; 2 the run itself was invalid (errors, a saturated generator) or could not run."
)]
pub struct LoadTestCli {
    #[command(flatten)]
    pub services: ServiceArgs,

    /// Base URL of a running app instance; repeat for several (buyers are
    /// spread round-robin). Its Redis and PostgreSQL must be the ones given
    /// by --redis-url / --database-url (or the local ones), for verification.
    #[arg(long = "target", value_name = "URL", conflicts_with_all = ["spawn", "strategy"])]
    pub targets: Vec<String>,

    /// Start this many app instances, and one worker, for the run [default: 2 when no --target is given].
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(crate) spawn: Option<u32>,

    /// Purchase strategy of the instances it starts.
    #[arg(long, value_parser = seckill_cli::flags::strategy())]
    pub(crate) strategy: Option<Strategy>,

    /// Units of the sale it creates.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000), conflicts_with = "sale")]
    pub(crate) stock: u32,

    /// Use this existing sale instead of creating one.
    #[arg(long, value_name = "ID")]
    pub(crate) sale: Option<i64>,

    /// Run the chaos scenario instead (as `seckill chaos`): a private
    /// deployment, a rate load of --users, --stock, --rate and --duration
    /// (30 s unless given), and these faults injected one after another (give
    /// the option with no name for every fault).
    #[arg(long, value_enum, num_args = 0.., value_name = "FAULT", conflicts_with_all = ["targets", "spawn", "strategy", "sale"])]
    pub(crate) faults: Option<Vec<Fault>>,

    /// With --faults: seed of the fault order.
    #[arg(long, default_value_t = 1, requires = "faults")]
    pub(crate) seed: u64,

    #[command(flatten)]
    pub(crate) load: LoadArgs,
}

impl LoadTestCli {
    /// The chaos run `--faults` asks for, if it does.
    pub fn chaos(&self) -> Option<ChaosArgs> {
        let faults = self.faults.clone()?;
        Some(
            ChaosArgs {
                users: self.load.users,
                stock: self.stock,
                rate: self.load.rate.round().clamp(1.0, 100_000.0) as u32,
                duration_secs: self.load.duration.map(|secs| secs.ceil() as u64),
                faults,
                seed: self.seed,
                postgres_down_secs: 10,
                // The load test's buyers are the load: no waiting crowd.
                crowd: 0,
                report_dir: self
                    .load
                    .json
                    .as_ref()
                    .and_then(|path| path.parent())
                    .map_or_else(|| PathBuf::from("target/seckill-chaos"), PathBuf::from),
                // A cluster fault among `--faults` implies one.
                cluster: false,
                compare_durability: false,
                durability: Vec::new(),
                replica_wait: seckill_core::config::DEFAULT_REPLICA_WAIT_MS,
            }
            .with_durability(&self.services),
        )
    }
}

/// How long a Redis connection of the harness may wait for the pool.
const POOL_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// The admin token of the instances this process starts: the user's
/// `SECKILL_ADMIN_TOKEN`, or a fresh one (printed by the demo).
pub(crate) fn admin_token() -> String {
    std::env::var("SECKILL_ADMIN_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

/// The store of the servers the run uses.
pub(crate) async fn connect(services: &Services, prefix: &str) -> anyhow::Result<Store> {
    let pg = seckill_core::store::connect_postgres(&services.database_url).await?;
    let redis = seckill_core::redis_pool::connect_redis(&services.redis, POOL_WAIT).await?;
    Ok(Store::new(pg, redis, prefix))
}

/// The processes of a run: instances of `strategy`, with `token` as their
/// admin token, on the servers found.
pub(crate) fn deployment(
    services: &Services,
    prefix: &str,
    strategy: Strategy,
    token: &str,
) -> anyhow::Result<Deployment> {
    Ok(Deployment::new(
        seckill_binary()?,
        &services.redis,
        &services.database_url,
        prefix,
    )
    .env("SECKILL_STRATEGY", strategy.as_str())
    .env("SECKILL_ADMIN_TOKEN", token))
}

/// The price of every sale the tools create: a phone, 999.00.
pub(crate) const PRICE_CENTS: i64 = 99_900;

/// Create a sale of `stock` units that opens now and, if `open_secs` is
/// given, closes that many seconds later.
pub(crate) async fn create_sale(
    store: &Store,
    name: &str,
    stock: u32,
    open_secs: Option<i64>,
) -> anyhow::Result<i64> {
    let mut new = NewSale::builder(name, i64::from(stock)).price_cents(PRICE_CENTS);
    if let Some(secs) = open_secs {
        new = new.lasts(secs);
    }
    let new = new.build(Utc::now()).context("invalid sale")?;
    Ok(store.create_sale(&new).await?.id)
}

/// What the load generator is pointed at and verifies: the instances, the
/// sale, and the servers behind them.
pub(crate) async fn subject(
    store: &Store,
    targets: Vec<String>,
    spawned: Option<Strategy>,
    sale_id: i64,
    stock: i64,
) -> anyhow::Result<Subject<RedisConn>> {
    // Held for the run: the verifier's reads never wait for the pool.
    let redis = store.redis().await?;
    Ok(Subject {
        spawned: if spawned.is_some() { targets.len() } else { 0 },
        targets,
        strategy: spawned.map(|strategy| strategy.as_str().to_owned()),
        sale_id,
        stock,
        pg: store.pg().clone(),
        redis,
        keys: verify_keys(store.prefix(), sale_id),
    })
}

/// The verifier's view of a sale's Redis keys.
pub fn verify_keys(prefix: &str, sale_id: i64) -> seckill_loadtest::verify::RedisKeys {
    let keys = SaleKeys::new(prefix, sale_id);
    seckill_loadtest::verify::RedisKeys {
        stock: keys.stock,
        holds: keys.holds,
        lock: keys.lock,
        queue_due: keys.queue.due,
        queue_inflight: keys.queue.inflight,
        queue_dead: keys.queue.dead,
    }
}

/// The load test against `cluster`'s instances on sale `sale_id` of
/// `stock` units, verified as `load` says: what a demo run and a lab row
/// share. Progress goes to stderr; the caller prints the report.
pub(crate) async fn burst(
    store: &Store,
    cluster: &Fleet,
    strategy: Strategy,
    (sale_id, stock): (i64, u32),
    (label, load): (&str, &LoadArgs),
) -> anyhow::Result<seckill_loadtest::report::Report> {
    let mut subject = subject(
        store,
        cluster.urls(),
        Some(strategy),
        sale_id,
        i64::from(stock),
    )
    .await?;
    seckill_loadtest::load_test(&mut subject, load, label, &Progress::stderr()).await
}

/// Where the reports went, if anywhere.
pub(crate) fn print_paths(load: &LoadArgs) {
    if let Some(path) = &load.json {
        println!("JSON report: {}", path.display());
    }
    if let Some(path) = &load.html {
        println!("HTML report: {}", path.display());
    }
}

/// `seckill-loadtest`: one run, its report on stdout. Returns the verdict.
pub async fn load_test(cli: LoadTestCli, services: &Services) -> anyhow::Result<Verdict> {
    seckill_cli::process::raise_open_files_limit();
    let store = connect(services, &cli.services.redis_prefix).await?;
    let (sale_id, stock) = match cli.sale {
        Some(id) => {
            let sale = store
                .sale(id)
                .await?
                .with_context(|| format!("no sale {id} in the database"))?;
            (id, i64::from(sale.stock_total))
        }
        None => {
            let id = create_sale(&store, "Load test", cli.stock, None).await?;
            (id, i64::from(cli.stock))
        }
    };
    let strategy = cli.strategy.unwrap_or(Strategy::Lock);
    let cluster = match cli.targets.is_empty() {
        true => Some(spawn(&cli, services, store.prefix(), strategy).await?),
        false => None,
    };
    let targets = cluster
        .as_ref()
        .map_or_else(|| cli.targets.clone(), Fleet::urls);
    let spawned = cluster.as_ref().map(|_| strategy);
    let mut subject = subject(&store, targets, spawned, sale_id, stock).await?;
    // Interrupted, the run is dropped and the cluster stopped below.
    let progress = Progress::stderr();
    let report = tokio::select! {
        report = seckill_loadtest::load_test(&mut subject, &cli.load, "run", &progress) => report,
        () = seckill_cli::process::stop_requested() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Some(cluster) = cluster {
        cluster.stop().await;
    }
    let report = report?;
    println!("{}", report.to_text());
    print_paths(&cli.load);
    Ok(report.verdict)
}

/// Start `--spawn N` instances (2 by default) and a worker, showing progress.
async fn spawn(
    cli: &LoadTestCli,
    services: &Services,
    prefix: &str,
    strategy: Strategy,
) -> anyhow::Result<Fleet> {
    let instances = cli.spawn.unwrap_or(2);
    let progress = Progress::stderr().phase("start", None);
    // The join limit off: the load test sends every buyer from this one
    // address, and measures the sale, not the limit.
    let deployment = cli.services.durability_env().into_iter().fold(
        deployment(services, prefix, strategy, &admin_token())?
            .env("SECKILL_ROOM_JOINS_PER_IP", "0"),
        |d, (name, value)| d.env(name, value),
    );
    let cluster = Fleet::start(deployment, "app", instances).await?;
    progress.finish(&format!("{instances} app instances and a worker"));
    Ok(cluster)
}
