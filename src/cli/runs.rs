//! The options of the commands that start and measure a deployment of
//! their own (`demo`, `lab`, `chaos`, `bench` and its helper): split from
//! `cli.rs`, which keeps the command table and the commands of a running
//! deployment (`serve`, `worker`, `sale`, `seckill-loadtest`).

use std::path::PathBuf;

use clap::Args;
use serde::Serialize;

use crate::config::{Knob, Strategy, WorkerSettings};

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

#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// Run only this strategy's rows.
    #[arg(long, value_enum)]
    pub strategy: Option<Strategy>,

    /// Run only the rows with this fault knob (with --strategy: one row; a pairing the lesson does not teach runs with the knob's usual values).
    #[arg(long, value_enum)]
    pub knob: Option<Knob>,

    /// Distinct buyers in each row.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub users: u32,

    /// Fraction of buyers who also send a second request at the same moment (0 to 1; a row may set its own).
    #[arg(long, default_value_t = 0.05, value_parser = seckill_loadtest::fraction)]
    pub dup: f64,

    /// Units for sale in each row.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub stock: u32,

    /// App instances in each row (plus one worker; a row may set its own).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub instances: u32,

    /// Where the table (lab.json, lab.html) and each row's load-test report go.
    #[arg(long, default_value = "target/seckill-lab")]
    pub report_dir: PathBuf,

    /// Quit after the table instead of keeping every row's instances serving until Ctrl-C.
    #[arg(long)]
    pub exit: bool,
}

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Seconds of each accepted-purchases run.
    #[arg(long, default_value_t = 5.0, value_parser = seckill_loadtest::seconds)]
    pub secs: f64,

    /// Buyers in the 10-unit burst.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    pub burst_users: u32,

    /// Buyers on the burst's two instances in all, before their memory is
    /// read: the burst's, then more bursts of 10 units, each as large as
    /// the open-files limit allows.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    pub memory_buyers: u32,

    /// Orders the worker drains.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub drain_orders: u32,

    /// Sale pages (event streams) held open on one instance.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub pages: u32,

    /// Measure only these rows (repeat the flag for several); every row
    /// when not given.
    #[arg(long = "only", value_enum)]
    pub only: Vec<BenchRows>,

    /// The drain's worker (its batch size above all).
    #[command(flatten)]
    pub worker: WorkerSettings,
}

/// The groups of rows `seckill bench --only` can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BenchRows {
    /// The 10-unit burst on 2 instances: last win, p99; memory after
    /// `--memory-buyers` buyers on them.
    Burst,
    /// Accepted purchases/s with `lock`, and with `lua` beside redis-benchmark.
    Accepted,
    /// Three sales on one Redis, then on a 3-master cluster.
    Cluster,
    /// The worker's drain against one bulk INSERT.
    Drain,
    /// An idle worker's delay from a 202 to the order confirmed.
    Idle,
    /// Sold-out answers against a bare actix handler (wrk).
    SoldOut,
    /// The storefront index against a sale page, and with 1,000 sales (wrk).
    Index,
    /// Open sale pages: Redis commands/s they add, memory, and the burst
    /// while they watch against the burst alone.
    Pages,
}

/// The faults `seckill chaos` can inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Fault {
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
    /// Hostile traffic beside the load: made-up ids, malformed bodies, oversized headers, half-open connections.
    Flood,
}

impl Fault {
    pub const ALL: [Fault; 7] = [
        Fault::WorkerKill,
        Fault::AppKill,
        Fault::LockHolderPause,
        Fault::PostgresDown,
        Fault::RedisKill,
        Fault::RedisWipe,
        Fault::Flood,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Fault::WorkerKill => "worker-kill",
            Fault::AppKill => "app-kill",
            Fault::LockHolderPause => "lock-holder-pause",
            Fault::PostgresDown => "postgres-down",
            Fault::RedisKill => "redis-kill",
            Fault::RedisWipe => "redis-wipe",
            Fault::Flood => "flood",
        }
    }
}

/// `seckill chaos`'s options: all have defaults, none is needed.
#[derive(Debug, Clone, Args)]
pub struct ChaosArgs {
    /// Distinct buyers.
    #[arg(long, default_value_t = 5_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub users: u32,

    /// Units of the sale: fewer than the buyers, so the sale sells out, but
    /// plenty, so orders keep flowing through every fault.
    #[arg(long, default_value_t = 3_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub stock: u32,

    /// Purchases per second (an open model: they fall due whether or not earlier ones were answered).
    #[arg(long, default_value_t = 1_500, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,

    /// Seconds of load; the faults are spread over it, so it must outlast them (every fault with the default 10 s PostgreSQL outage takes about 29 s).
    #[arg(long, default_value_t = 30, value_parser = clap::value_parser!(u64).range(2..=3_600))]
    pub duration_secs: u64,

    /// Inject only this fault (repeat for several) [default: every fault].
    #[arg(long = "fault", value_enum)]
    pub faults: Vec<Fault>,

    /// Seed of the fault order: the same seed gives the same schedule.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,

    /// Seconds PostgreSQL stays down.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..=600))]
    pub postgres_down_secs: u64,

    /// Where the JSON and HTML reports go.
    #[arg(long, default_value = "target/seckill-chaos")]
    pub report_dir: PathBuf,
}

/// `seckill hold-pages`: what the bench asks it to hold.
#[derive(Debug, Args)]
pub struct HoldPagesArgs {
    /// The instance's base URL, `http://host:port`.
    #[arg(long)]
    pub url: String,

    /// The sale whose page is open.
    #[arg(long)]
    pub sale: i64,

    /// How many of its event streams.
    #[arg(long)]
    pub pages: u32,
}
