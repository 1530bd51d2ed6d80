//! `seckill bench`'s options.

use clap::Args;

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    /// Seconds of each accepted-purchases run.
    #[arg(long, default_value_t = 5.0, value_parser = seckill_loadtest::seconds)]
    pub(crate) secs: f64,

    /// Buyers in the 10-unit burst.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    pub(crate) burst_users: u32,

    /// Buyers on the burst's two instances in all, before their memory is
    /// read: the burst's, then more bursts of 10 units, each as large as
    /// the open-files limit allows.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(10..=10_000_000))]
    pub(crate) memory_buyers: u32,

    /// Orders the worker drains.
    #[arg(long, default_value_t = 20_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) drain_orders: u32,

    /// Orders the worker drains in the drain's second run, a long queue.
    #[arg(long, default_value_t = 200_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) drain_orders_large: u32,

    /// Write this run's figures to FILE (JSON), for a later `--compare`.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<std::path::PathBuf>,

    /// Mark each figure that moved past its noise (docs/bench.md) since
    /// the run FILE holds (written by `--json`).
    #[arg(long, value_name = "FILE")]
    pub(crate) compare: Option<std::path::PathBuf>,

    /// Sale pages (event streams) held open on one instance.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub(crate) pages: u32,

    /// Sales of one unit an instance serves, each bought once and all
    /// ended, before its memory and purchases/s are measured beside one
    /// that served 10.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    pub(crate) ended_sales: u32,

    /// Buyers who join one waiting room before its memory and pace are measured.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(10..=1_000_000))]
    pub(crate) room_buyers: u32,

    /// Waiting rooms filled, then ended, before Redis' memory is read
    /// again (`--only rooms-end`).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) ended_rooms: u32,

    /// Buyers who join each of the `--ended-rooms`.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) room_buyers_each: u32,

    /// Requests in each of the capacity rows' runs (accepted purchases,
    /// refused ones, room joins, room status answers), and accepted
    /// purchases in the Redis cost rows'.
    #[arg(long, default_value_t = 100_000, value_parser = clap::value_parser!(u32).range(100..=10_000_000))]
    pub(crate) capacity_requests: u32,

    /// Rounds of each row measured against its baseline, the two runs
    /// alternated (each first in every other round; the row shows the
    /// median round). Each row's own when not given: 3 for the wrk rows,
    /// 5 for the watched burst and the roomed sale, 2 for `replica`
    /// against `local`. Fewer is quicker, and noisier.
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=99))]
    pub(crate) rounds: Option<u16>,

    /// Measure only these rows (repeat the flag for several); every row
    /// when not given.
    #[arg(long = "only", value_enum)]
    pub(crate) only: Vec<BenchRows>,

    /// The drain's worker (its batch size above all).
    #[command(flatten)]
    pub(crate) worker: seckill_cli::WorkerFlags,
}

impl BenchArgs {
    /// The rounds of a row whose own count is `usual` (`--rounds`).
    pub(crate) fn rounds(&self, usual: usize) -> usize {
        self.rounds.map_or(usual, usize::from)
    }
}

/// The groups of rows `seckill bench --only` can pick.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum BenchRows {
    /// The 10-unit burst on 2 instances: last win, p99; memory after
    /// `--memory-buyers` buyers on them.
    Burst,
    /// Accepted purchases/s with `lock`, and with `lua` beside
    /// redis-benchmark; each against sold-out answers (wrk).
    Accepted,
    /// Three sales on one Redis, then on a 3-master cluster.
    Cluster,
    /// One sale with --redis-durability replica against local, on a private primary and replica.
    Replica,
    /// The worker's drain against one bulk INSERT.
    Drain,
    /// An idle worker's delay from a 202 to the order confirmed.
    Idle,
    /// Sold-out answers against a bare actix handler (wrk); the bundled
    /// load generator against wrk on that handler.
    SoldOut,
    /// A waiting room's status answers against sold-out answers (wrk).
    Room,
    /// A lottery room of --room-buyers joined before the open, then
    /// opened: Redis' slowest command while they join, at the open and
    /// while it admits (SLOWLOG).
    RoomScripts,
    /// Accepted purchases/s on a sale with a waiting room against one
    /// without, with lock and lua, in this process.
    Roomed,
    /// The storefront index against a sale page, and with 1,000 sales (wrk).
    Index,
    /// Open sale pages: Redis commands/s they add, memory, and the burst
    /// while they watch against the burst alone.
    Pages,
    /// Redis' memory before --ended-rooms rooms of --room-buyers-each
    /// buyers, at their peak, and after they ended and their grace passed.
    RoomsEnd,
    /// An instance after --ended-sales ended sales against one after 10:
    /// its memory, and accepted purchases/s on a live sale.
    Ended,
    /// CPU time per request in an instance, Redis, PostgreSQL and the
    /// worker (accepted and refused purchases, room joins and status
    /// answers), and the ceilings of one Redis primary and one PostgreSQL.
    Capacity,
    /// Redis' CPU per accepted purchase (lock, the worker paused) and per
    /// order drained, from INFO cpu and INFO commandstats, on a private Redis.
    RedisCost,
}
