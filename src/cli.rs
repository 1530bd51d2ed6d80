//! The command lines of `seckill` and `seckill-loadtest`, and what they print.
//!
//! Only definitions live here: clap turns them into parsing, `--help` and
//! environment fallbacks. The knobs they share with the library (where the
//! servers are, how purchases and the worker behave) are in `config.rs`;
//! the binaries (`src/main.rs`, `src/bin/seckill-loadtest.rs`) run the
//! commands.

use std::net::SocketAddr;
use std::path::PathBuf;

use chrono::{DateTime, Utc};
use clap::{Args, Parser, Subcommand};
use seckill_loadtest::LoadArgs;
use serde::Serialize;

use crate::config::{
    DEFAULT_MAX_EVENT_STREAMS, PurchaseSettings, RateLimitSettings, ServiceArgs, Strategy,
    WorkerSettings,
};
use crate::domain::{Sale, SaleStatus};

mod runs;

pub use runs::{BenchArgs, BenchRows, ChaosArgs, DemoArgs, Fault, HoldPagesArgs, LabArgs};

/// A flash sale that proves, under load and under faults, that 10 units are
/// never sold 11 times.
#[derive(Debug, Parser)]
#[command(name = "seckill", version, about, long_about = None)]
pub struct Cli {
    #[command(flatten)]
    pub services: ServiceArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the web app (and, unless --no-worker, the queue worker in-process).
    Serve(ServeArgs),
    /// Run the queue worker alone; several may run at once.
    Worker(WorkerArgs),
    /// Apply the database migrations and exit.
    Migrate,
    /// Manage sales.
    #[command(subcommand)]
    Sale(SaleCommand),
    /// The whole show: start two app instances and a worker, let 10,000 buyers
    /// race for 10 units, verify, report; then again with the deliberately
    /// broken `naive` strategy, side by side.
    Demo(DemoArgs),
    /// The promise under a schedule of faults: a private deployment (durable
    /// Redis, PostgreSQL, 2 app instances, 2 workers), steady purchases, and
    /// one fault after another (workers and an instance killed, a lock
    /// holder paused, PostgreSQL down, Redis killed and wiped, a hostile
    /// flood); then every promise checked, per fault and overall.
    Chaos(ChaosArgs),
    /// The concurrency lab: every purchase strategy, each with the fault knob
    /// that exposes its bug (and once without), raced by the same burst and
    /// measured in one table (also JSON and HTML). Exit 0 when every row
    /// shows what it must: the broken ones break as documented, the correct
    /// ones hold.
    Lab(LabArgs),
    /// Speed, each figure beside its target: the burst, accepted purchases
    /// per second (lock, lua, a cluster), the worker's drain against
    /// PostgreSQL's own bulk insert, an idle worker's delay, sold-out answers
    /// and the index under wrk, open sale pages. Starts its own instances and
    /// sales, in a database and key prefix of its own.
    Bench(BenchArgs),
    /// The bench's own helper: hold sale pages' event streams open in a
    /// process of their own (past the bench's open-files limit) until
    /// standard input ends. Not for users.
    #[command(hide = true)]
    HoldPages(HoldPagesArgs),
}

#[derive(Debug, Subcommand)]
pub enum SaleCommand {
    /// Create a sale and print it as JSON.
    Create(CreateSaleArgs),
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on.
    #[arg(long, env = "SECKILL_BIND", default_value = "127.0.0.1:8080")]
    pub bind: SocketAddr,

    /// Do not run the queue worker inside this process (run `seckill worker` instead).
    #[arg(long, env = "SECKILL_NO_WORKER")]
    pub no_worker: bool,

    /// Token for the admin API (`Authorization: Bearer ...`); admin calls are refused while unset.
    #[arg(long, env = "SECKILL_ADMIN_TOKEN", hide_env_values = true)]
    pub admin_token: Option<String>,

    /// Name of this instance, sent in the X-Seckill-Instance header of every response: 1 to 64 printable ASCII characters, no spaces [default: the bind address].
    #[arg(long, env = "SECKILL_INSTANCE_ID", value_parser = instance_name)]
    pub instance_id: Option<String>,

    /// Seconds an admin session lasts after its login, 60 to 2592000.
    #[arg(long, env = "SECKILL_ADMIN_SESSION_SECS", default_value_t = 43_200, value_parser = clap::value_parser!(u64).range(60..=2_592_000))]
    pub admin_session_secs: u64,

    /// Live sale pages (event streams) this instance serves at once, 1 to 1000000; one more is answered 503.
    #[arg(long, env = "SECKILL_MAX_EVENT_STREAMS", default_value_t = DEFAULT_MAX_EVENT_STREAMS, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_event_streams: u32,

    #[command(flatten)]
    pub purchase: PurchaseSettings,

    #[command(flatten)]
    pub worker: WorkerSettings,

    #[command(flatten)]
    pub limits: RateLimitSettings,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerArgs {
    #[command(flatten)]
    pub worker: WorkerSettings,

    /// Serve this worker's figures at `GET /metrics` on this address (an app instance serves them on its own port).
    #[arg(long, env = "SECKILL_METRICS_BIND")]
    pub metrics_bind: Option<SocketAddr>,
}

#[derive(Debug, Clone, Args)]
pub struct CreateSaleArgs {
    /// Name shown on the sale page.
    #[arg(long)]
    pub name: String,
    /// Units for sale.
    // Negative numbers parse, so that validation can say what is wrong with them.
    #[arg(long, allow_negative_numbers = true)]
    pub stock: i32,
    /// Price in cents.
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    pub price_cents: i64,
    /// Seconds from now until the sale opens.
    #[arg(long, default_value_t = 0)]
    pub starts_in: u64,
    /// Seconds the sale stays open after it starts [default: no end].
    #[arg(long)]
    pub duration: Option<u64>,
}

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

    /// Run the chaos scenario instead (as `seckill chaos`): a private
    /// deployment, a rate load of --users, --stock, --rate and --duration
    /// [default 30 s], and these faults injected one after another (give
    /// the option with no name for every fault).
    #[arg(long, value_enum, num_args = 0.., value_name = "FAULT", conflicts_with_all = ["targets", "spawn", "strategy", "sale"])]
    pub faults: Option<Vec<Fault>>,

    /// With --faults: seed of the fault order.
    #[arg(long, default_value_t = 1, requires = "faults")]
    pub seed: u64,

    #[command(flatten)]
    pub load: LoadArgs,
}

impl LoadTestCli {
    /// The chaos run `--faults` asks for, if it does.
    pub fn chaos(&self) -> Option<ChaosArgs> {
        let faults = self.faults.clone()?;
        Some(ChaosArgs {
            users: self.load.users,
            stock: self.stock,
            rate: self.load.rate.round().clamp(1.0, 100_000.0) as u32,
            duration_secs: self.load.duration.map_or(30, |secs| secs.ceil() as u64),
            faults,
            seed: self.seed,
            postgres_down_secs: 10,
            report_dir: self
                .load
                .json
                .as_ref()
                .and_then(|path| path.parent())
                .map_or_else(|| PathBuf::from("target/seckill-chaos"), PathBuf::from),
        })
    }
}

/// What `seckill sale create` prints, as JSON: the sale as created, with all
/// of its units left and its status.
#[derive(Debug, Serialize)]
pub struct CreatedSale<'a> {
    #[serde(flatten)]
    pub sale: &'a Sale,
    pub stock_left: i64,
    pub status: SaleStatus,
}

impl<'a> CreatedSale<'a> {
    pub fn new(sale: &'a Sale, now: DateTime<Utc>) -> Self {
        let stock_left = i64::from(sale.stock_total);
        Self {
            sale,
            stock_left,
            status: sale.status(now, stock_left),
        }
    }
}

/// An instance's name, refused at start unless its header can carry it.
fn instance_name(raw: &str) -> Result<String, String> {
    crate::web::security::instance_header(raw).map(|_| raw.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cli_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn settings_defaults_match_flag_defaults() {
        let cli = Cli::try_parse_from(["seckill", "serve"]).expect("serve parses");
        let Command::Serve(serve) = cli.command else {
            panic!("expected serve")
        };
        let (flags, defaults) = (serve.purchase, PurchaseSettings::default());
        assert_eq!(flags.lock_ttl_ms, defaults.lock_ttl_ms);
        assert_eq!(flags.lock_wait_ms, defaults.lock_wait_ms);
        assert_eq!(flags.strategy, defaults.strategy);
        assert_eq!(
            serve.worker.batch_size,
            WorkerSettings::default().batch_size
        );
        assert_eq!(
            serve.worker.payment_window_secs,
            WorkerSettings::default().payment_window_secs
        );
    }

    #[test]
    fn knobs_that_would_stall_the_system_are_refused() {
        for bad in [
            ["seckill", "worker", "--batch-size", "0"],
            ["seckill", "worker", "--lease-ms", "10"],
            ["seckill", "worker", "--max-attempts", "0"],
            ["seckill", "serve", "--lock-ttl-ms", "0"],
            ["seckill", "worker", "--payment-window-secs", "0"],
            // Numbers so large that a time computed from them would
            // overflow (Instant + Duration panics): refused at start.
            ["seckill", "serve", "--lock-wait-ms", "18446744073709551615"],
            ["seckill", "serve", "--lock-ttl-ms", "18446744073709551615"],
            [
                "seckill",
                "serve",
                "--sold-out-refresh-ms",
                "18446744073709551615",
            ],
            [
                "seckill",
                "serve",
                "--naive-delay-ms",
                "18446744073709551615",
            ],
            ["seckill", "worker", "--lease-ms", "18446744073709551615"],
            ["seckill", "worker", "--poll-ms", "18446744073709551615"],
            ["seckill", "worker", "--max-attempts", "4294967295"],
            // Names the X-Seckill-Instance header could not carry.
            ["seckill", "serve", "--instance-id", "a\nb"],
            ["seckill", "serve", "--instance-id", "shop 1"],
            ["seckill", "serve", "--instance-id", ""],
            ["seckill", "serve", "--instance-id", "ünï"],
        ] {
            assert!(Cli::try_parse_from(bad).is_err(), "{bad:?} was accepted");
        }
    }
}
