//! The load test against app instances this process starts, and the demo.
//!
//! The load generator itself lives in `loadtest/` (crate `seckill_loadtest`)
//! and knows the app only over HTTP. This module adds what needs seckill's
//! own code: finding or starting Redis and PostgreSQL ([`crate::services`]),
//! starting app instances and a worker as separate processes ([`Cluster`]),
//! creating the sale, and naming its Redis keys for the verifier.
//!
//! Two binaries use it: `seckill-loadtest` ([`load_test`]) and
//! `seckill demo` ([`demo`]).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::Utc;
use clap::{Args, ValueEnum};
use seckill_loadtest::progress::Progress;
use seckill_loadtest::report::{Report, Verdict, side_by_side};
use seckill_loadtest::verify::Expect;
use seckill_loadtest::{LoadArgs, Subject};
use sqlx::PgPool;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use crate::catalog;
use crate::config::{ServiceArgs, Strategy};
use crate::domain::NewSale;
use crate::keys::SaleKeys;
use crate::services::Services;
use crate::startup;

/// How long a started `seckill serve` may take to print its address.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a demo's sales stay open: long enough for a workshop to play
/// with the page, short enough that the sales of earlier demos move to the
/// "Ended" list instead of piling up as live ones.
const DEMO_SALE_OPEN: chrono::Duration = chrono::Duration::hours(1);
/// How long a stopped process may take to finish its work and exit.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

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
    pub spawn: Option<u32>,

    /// Purchase strategy of the instances it starts.
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,

    /// Units of the sale it creates.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000), conflicts_with = "sale")]
    pub stock: u32,

    /// Use this existing sale instead of creating one.
    #[arg(long, value_name = "ID")]
    pub sale: Option<i64>,

    #[command(flatten)]
    pub load: LoadArgs,
}

/// `seckill demo`'s options: all have defaults, none is needed.
#[derive(Debug, Clone, Args)]
pub struct DemoArgs {
    /// Distinct buyers in each run.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub users: u32,

    /// Units for sale in each run.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub stock: u32,

    /// App instances in each run (plus one worker).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub instances: u32,

    /// Where the JSON and HTML reports go.
    #[arg(long, default_value = "target/seckill-demo")]
    pub report_dir: PathBuf,

    /// Quit after the verdict instead of serving the sale page until Ctrl-C.
    #[arg(long)]
    pub exit: bool,

    /// Seconds the winners have to pay. Short, so that while the page stays
    /// up the unpaid orders are cancelled and their units come back on sale.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(30..=31_536_000))]
    pub payment_window_secs: u64,
}

/// What a [`Cluster`] runs.
#[derive(Debug, Clone, Copy)]
pub struct ClusterSpec<'a> {
    /// Names the instances: `{label}-1`, `{label}-2`, ...
    pub label: &'a str,
    pub instances: u32,
    pub strategy: Strategy,
    pub admin_token: &'a str,
    /// `SECKILL_PAYMENT_WINDOW_SECS` for the instances; `None` keeps the
    /// environment's (or the default).
    pub payment_window_secs: Option<u64>,
}

/// App instances and one worker, as separate `seckill` processes on shared
/// servers. Dropping it kills them; [`Cluster::stop`] stops them gracefully.
pub struct Cluster {
    /// Base URLs of the instances.
    pub urls: Vec<String>,
    processes: Vec<Child>,
}

impl Cluster {
    /// Start `instances` × `seckill serve --no-worker` and one `seckill worker`.
    pub async fn start(
        seckill: &Path,
        services: &Services,
        prefix: &str,
        spec: &ClusterSpec<'_>,
    ) -> anyhow::Result<Self> {
        let ClusterSpec {
            label,
            instances,
            strategy,
            admin_token,
            payment_window_secs,
        } = *spec;
        let strategy = strategy_name(strategy);
        let command = |args: &[&str]| {
            let mut command = Command::new(seckill);
            command
                .args(args)
                .env("SECKILL_REDIS_URL", &services.redis_url)
                .env("SECKILL_DATABASE_URL", &services.database_url)
                .env("SECKILL_REDIS_PREFIX", prefix)
                .env("SECKILL_STRATEGY", &strategy)
                .env("SECKILL_ADMIN_TOKEN", admin_token)
                // Errors only: the oversell warnings of a naive run would
                // drown the progress display.
                .env("RUST_LOG", "error")
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .kill_on_drop(true);
            if let Some(secs) = payment_window_secs {
                command.env("SECKILL_PAYMENT_WINDOW_SECS", secs.to_string());
            }
            command
        };
        let mut cluster = Self {
            urls: Vec::new(),
            processes: Vec::new(),
        };
        for i in 1..=instances {
            let id = format!("{label}-{i}");
            let mut child = command(&[
                "serve",
                "--bind",
                "127.0.0.1:0",
                "--no-worker",
                "--instance-id",
                &id,
            ])
            .spawn()
            .with_context(|| format!("starting {}", seckill.display()))?;
            let stdout = child.stdout.take().expect("stdout is piped");
            cluster.processes.push(child);
            let line =
                tokio::time::timeout(START_TIMEOUT, BufReader::new(stdout).lines().next_line())
                    .await
                    .with_context(|| format!("{id} did not start within {START_TIMEOUT:?}"))?
                    .context("reading the address of an instance")?
                    .with_context(|| {
                        format!("{id} exited before it listened (its errors are above)")
                    })?;
            let url = line
                .strip_prefix("seckill listening on ")
                .with_context(|| format!("unexpected first line from {id}: {line:?}"))?;
            cluster.urls.push(url.to_owned());
        }
        cluster.processes.push(
            command(&["worker"])
                .stdout(Stdio::null())
                .spawn()
                .context("starting the worker")?,
        );
        Ok(cluster)
    }

    /// SIGTERM every process and wait for it to finish its work.
    pub async fn stop(mut self) {
        use nix::sys::signal::{Signal, kill};
        use nix::unistd::Pid;
        for child in &self.processes {
            if let Some(pid) = child.id().and_then(|id| i32::try_from(id).ok()) {
                let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
            }
        }
        for child in &mut self.processes {
            if tokio::time::timeout(STOP_TIMEOUT, child.wait())
                .await
                .is_err()
            {
                let _ = child.kill().await;
            }
        }
    }
}

/// The admin token of the instances this process starts: the user's
/// `SECKILL_ADMIN_TOKEN`, or a fresh one (printed by the demo).
fn admin_token() -> String {
    std::env::var("SECKILL_ADMIN_TOKEN")
        .ok()
        .filter(|token| !token.is_empty())
        .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string())
}

fn strategy_name(strategy: Strategy) -> String {
    strategy
        .to_possible_value()
        .expect("no strategy is skipped")
        .get_name()
        .to_owned()
}

/// The `seckill` binary: this one, or the one beside `seckill-loadtest`.
fn seckill_binary() -> anyhow::Result<PathBuf> {
    let me = std::env::current_exe().context("finding this program")?;
    if me.file_stem().is_some_and(|stem| stem == "seckill") {
        return Ok(me);
    }
    let sibling = me.with_file_name(format!("seckill{}", std::env::consts::EXE_SUFFIX));
    if !sibling.exists() {
        bail!(
            "{} not found; build both binaries first (`cargo build --release`)",
            sibling.display()
        );
    }
    Ok(sibling)
}

/// The verifier's view of a sale's Redis keys.
pub fn verify_keys(prefix: &str, sale_id: i64) -> seckill_loadtest::verify::RedisKeys {
    let keys = SaleKeys::new(prefix, sale_id);
    seckill_loadtest::verify::RedisKeys {
        stock: keys.stock,
        buyers: keys.buyers,
        lock: keys.lock,
        queue_due: keys.queue.due,
        queue_inflight: keys.queue.inflight,
        queue_dead: keys.queue.dead,
    }
}

async fn redis_connection(url: &str) -> anyhow::Result<redis::aio::MultiplexedConnection> {
    redis::Client::open(url)
        .context("SECKILL_REDIS_URL is not a Redis URL")?
        .get_multiplexed_async_connection()
        .await
        .with_context(|| format!("connecting to Redis at {}", startup::redact(url)))
}

/// Create a sale that opens now and, if `open_for` is given, closes then.
async fn create_sale(
    pg: &PgPool,
    redis: &mut redis::aio::MultiplexedConnection,
    prefix: &str,
    name: &str,
    stock: u32,
    open_for: Option<chrono::Duration>,
) -> anyhow::Result<i64> {
    let now = Utc::now();
    let new = NewSale::parse(
        name,
        i64::from(stock),
        99_900,
        Some(now),
        open_for.map(|open_for| now + open_for),
        now,
    )
    .map_err(|reason| anyhow::anyhow!("invalid sale: {reason}"))?;
    Ok(catalog::create_sale(pg, redis, prefix, &new).await?.id)
}

/// `seckill-loadtest`: one run, its report on stdout. Returns the verdict.
pub async fn load_test(cli: LoadTestCli, services: &Services) -> anyhow::Result<Verdict> {
    startup::raise_open_files_limit();
    let prefix = cli.services.redis_prefix.clone();
    let pg = startup::connect_postgres(&services.database_url).await?;
    let mut redis = redis_connection(&services.redis_url).await?;
    let (sale_id, stock) = match cli.sale {
        Some(id) => {
            let stock: i32 = sqlx::query_scalar("SELECT stock_total FROM sales WHERE id = $1")
                .bind(id)
                .fetch_optional(&pg)
                .await
                .context("reading the sale")?
                .with_context(|| format!("no sale {id} in the database"))?;
            (id, i64::from(stock))
        }
        None => {
            let id = create_sale(&pg, &mut redis, &prefix, "Load test", cli.stock, None).await?;
            (id, i64::from(cli.stock))
        }
    };
    let strategy = cli.strategy.unwrap_or(Strategy::Lock);
    let cluster = if cli.targets.is_empty() {
        let instances = cli.spawn.unwrap_or(2);
        let progress = Progress::stderr().phase("start", None);
        let spec = ClusterSpec {
            label: "app",
            instances,
            strategy,
            admin_token: &admin_token(),
            payment_window_secs: None,
        };
        let cluster = Cluster::start(&seckill_binary()?, services, &prefix, &spec).await?;
        progress.finish(&format!("{instances} app instances and a worker"));
        Some(cluster)
    } else {
        None
    };
    let mut subject = Subject {
        targets: cluster
            .as_ref()
            .map_or_else(|| cli.targets.clone(), |c| c.urls.clone()),
        spawned: cluster.as_ref().map_or(0, |c| c.urls.len()),
        strategy: cluster.as_ref().map(|_| strategy_name(strategy)),
        sale_id,
        stock,
        pg,
        redis,
        keys: verify_keys(&prefix, sale_id),
    };
    // Interrupted, the run is dropped and the cluster stopped below.
    let progress = Progress::stderr();
    let report = tokio::select! {
        report = seckill_loadtest::load_test(&mut subject, &cli.load, "run", &progress) => report,
        () = startup::wait_for_signal() => Err(anyhow::anyhow!("interrupted")),
    };
    if let Some(cluster) = cluster {
        cluster.stop().await;
    }
    let report = report?;
    println!("{}", report.to_text());
    print_paths(&cli.load);
    Ok(report.verdict)
}

fn print_paths(load: &LoadArgs) {
    if let Some(path) = &load.json {
        println!("JSON report: {}", path.display());
    }
    if let Some(path) = &load.html {
        println!("HTML report: {}", path.display());
    }
}

/// `seckill demo`: the same burst against the safe strategy and the naive
/// one, side by side; then the sale page stays up until Ctrl-C (or, with
/// `--exit`, the demo ends). Returns the worse of the two verdicts.
pub async fn demo(args: DemoArgs, services: &Services, prefix: &str) -> anyhow::Result<Verdict> {
    // Interrupted during the runs, the runs' future is dropped, and with it
    // the clusters, whose processes are killed (a worker killed mid-batch
    // loses nothing: that is what the queue is for).
    let (verdict, kept, token) = tokio::select! {
        ran = both_runs(&args, services, prefix) => ran?,
        () = startup::wait_for_signal() => bail!("interrupted; the app instances were stopped"),
    };
    let Some((cluster, sale_id)) = kept else {
        return Ok(verdict);
    };
    if !args.exit {
        let url = &cluster.urls[0];
        println!(
            "\nThe sale page stays up: {url}/sales/{sale_id}\n\
             Every sale: {url}/   Admin: {url}/admin (token {token})\n\
             The winners' orders are cancelled {secs} s after they were confirmed unless paid\n\
             (nobody pays them here): watch the units come back on sale.\n\
             Press Ctrl-C to stop.",
            secs = args.payment_window_secs
        );
        startup::wait_for_signal().await;
    }
    cluster.stop().await;
    Ok(verdict)
}

/// The two runs of the demo. Returns the worse verdict, the `lock` cluster
/// with its sale (kept serving), and the admin token.
async fn both_runs(
    args: &DemoArgs,
    services: &Services,
    prefix: &str,
) -> anyhow::Result<(Verdict, Option<(Cluster, i64)>, String)> {
    startup::raise_open_files_limit();
    let seckill = seckill_binary()?;
    let pg = startup::connect_postgres(&services.database_url).await?;
    let progress = Progress::stderr();
    println!(
        "seckill demo: {} buyers race for {} units on {} app instances, twice:\n  \
         1. strategy `lock`: the Redis lock guards the stock; nothing may be oversold;\n  \
         2. strategy `naive`: no lock (deliberately broken); it must oversell, and PostgreSQL must refuse the excess.",
        args.users, args.stock, args.instances
    );
    let token = admin_token();
    let mut reports: Vec<Report> = Vec::new();
    let mut kept: Option<(Cluster, i64)> = None;
    for (label, strategy, expect) in [
        ("lock", Strategy::Lock, Expect::NoOversell),
        ("naive", Strategy::Naive, Expect::Oversell),
    ] {
        let starting = progress.phase("start", None);
        let spec = ClusterSpec {
            label,
            instances: args.instances,
            strategy,
            admin_token: &token,
            payment_window_secs: Some(args.payment_window_secs),
        };
        let cluster = Cluster::start(&seckill, services, prefix, &spec).await?;
        starting.finish(&format!(
            "{} `{label}` instances ({}) and a worker",
            args.instances,
            cluster.urls.join(", ")
        ));
        let mut redis = redis_connection(&services.redis_url).await?;
        let name = format!("Phone, {label} strategy");
        let sale_id = create_sale(
            &pg,
            &mut redis,
            prefix,
            &name,
            args.stock,
            Some(DEMO_SALE_OPEN),
        )
        .await?;
        let load = LoadArgs {
            scenario: seckill_loadtest::scenario::Scenario::Burst,
            users: args.users,
            dup: 0.05,
            rate: 0.0,
            duration: None,
            connections: 1,
            expect,
            settle_secs: 60,
            json: Some(args.report_dir.join(format!("{label}.json"))),
            html: Some(args.report_dir.join(format!("{label}.html"))),
        };
        let mut subject = Subject {
            targets: cluster.urls.clone(),
            spawned: cluster.urls.len(),
            strategy: Some(strategy_name(strategy)),
            sale_id,
            stock: i64::from(args.stock),
            pg: pg.clone(),
            redis,
            keys: verify_keys(prefix, sale_id),
        };
        let report = seckill_loadtest::load_test(&mut subject, &load, label, &progress).await;
        let report = match report {
            Ok(report) => report,
            Err(error) => {
                cluster.stop().await;
                return Err(error);
            }
        };
        println!("{}", report.to_text());
        print_paths(&load);
        reports.push(report);
        if strategy == Strategy::Lock {
            kept = Some((cluster, sale_id));
        } else {
            cluster.stop().await;
            reset_from_postgres(&pg, &services.redis_url, prefix, sale_id).await?;
        }
    }
    println!("\n== side by side ==");
    println!("{}", side_by_side(&reports.iter().collect::<Vec<_>>()));
    let verdict = reports
        .iter()
        .map(|r| r.verdict)
        .max_by_key(|v| v.exit_code())
        .unwrap_or(Verdict::Invalid);
    println!("demo verdict: {}", verdict.as_str());
    Ok((verdict, kept, token))
}

/// Replace a sale's units left and buyers in Redis with what PostgreSQL
/// says. The naive run leaves them wrong on purpose (more buyers than units,
/// a stock that was overwritten); left so, the sale page would go on showing
/// it, and the cancelled orders' units would be added to a wrong count.
async fn reset_from_postgres(
    pg: &PgPool,
    redis_url: &str,
    prefix: &str,
    sale_id: i64,
) -> anyhow::Result<()> {
    let keys = SaleKeys::new(prefix, sale_id);
    let mut redis = redis_connection(redis_url).await?;
    // One DEL of both keys, then the load (which writes only when the keys
    // are absent): a purchase between the two finds them absent and loads
    // the same figures from PostgreSQL.
    let () = redis::cmd("DEL")
        .arg(&keys.stock)
        .arg(&keys.buyers)
        .query_async(&mut redis)
        .await
        .context("clearing the naive sale in Redis")?;
    catalog::load_into_redis(pg, &mut redis, prefix, sale_id).await?;
    Ok(())
}
