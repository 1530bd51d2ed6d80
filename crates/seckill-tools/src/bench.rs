//! `seckill bench`: the speed figures of the purchase path and the worker,
//! measured side by side in one run on this machine, each beside its
//! target and, where the target is a ratio, beside its baseline measured
//! in the same run.
//!
//! What it measures, and how:
//! - **the burst**: 10 units, `--burst-users` buyers at once on 2 `lock`
//!   instances (the load test's burst): from the first send to the last
//!   win, the p99 of every answer; then more bursts on the same instances
//!   until `--memory-buyers` have bought, each as large as the open-files
//!   limit allows, and the larger instance's memory after them;
//! - **accepted purchases per second** on one sale of a million units,
//!   every request a new buyer, 64 connections for `--secs` seconds
//!   (the load test's closed scenario), with `lock` and with `lua`, `lua`
//!   beside `redis-benchmark` running its script (`lua.rs`);
//! - **the worker's drain** (`worker.rs`): `--drain-orders` jobs queued on one sale,
//!   drained into PostgreSQL by the worker's own drain (four batches
//!   in flight), against one
//!   server-side `INSERT ... SELECT` of as many rows into a copy of
//!   `orders` (the most PostgreSQL can take, as a baseline);
//! - **past one Redis** (`cluster.rs`): accepted purchases per second on
//!   three sales at once, on the one Redis and on a private 3-master
//!   cluster, one sale per master;
//! - **what a replica costs** (`replica.rs`): accepted purchases per
//!   second on one sale with `--redis-durability replica` against `local`,
//!   on a private primary and replica, alternated;
//! - **an idle worker's delay**: purchases one at a time on an instance
//!   with its worker in-process, from the `202` to the order found
//!   confirmed in PostgreSQL (polled every millisecond): the p50;
//! - **with wrk** (`wrk.rs`): sold-out answers against a bare actix
//!   handler, and the index against a sale page and against itself; a
//!   waiting room's status answers against sold-out answers (`waiting_room.rs`);
//! - **open sale pages** (`pages.rs`): `--pages` event streams on one
//!   instance, the Redis commands they add per second, its memory; and the
//!   burst while they watch its sale, against the burst alone;
//! - **a waiting room's door** (`roomed.rs`): accepted purchases per
//!   second on a roomed sale against an unroomed one, in this process;
//! - **a lottery room's open** (`room_scripts.rs`): Redis' slowest
//!   command while `--room-buyers` join, at the open and while it admits,
//!   and the slowest purchase of another sale across the open;
//! - **ended sales** (`ended.rs`): an instance that served
//!   `--ended-sales` sales, all ended and forgotten, against one that
//!   served 10: its memory, and accepted purchases per second;
//! - **rooms that end** (`rooms_end.rs`): Redis' memory before
//!   `--ended-rooms` waiting rooms, at their peak, and after they ended;
//! - **capacity** (`capacity.rs`): the CPU time one request costs an
//!   instance, Redis, PostgreSQL and the worker, each a process of its
//!   own, and the ceilings of one Redis primary and one PostgreSQL that
//!   follow (docs/capacity.md).
//!
//! Every instance it starts logs as a user's does ([`deployment`]).

mod accepted;
mod args;
mod baseline;
mod burst;
mod capacity;
mod cluster;
mod compare;
mod cpu;
mod ended;
mod generator;
mod holder;
pub(crate) mod leftovers;
mod lua;
mod own_core;
mod pages;
mod redis_cost;
mod redis_info;
mod replica;
mod room_scripts;
mod roomed;
mod rooms_end;
#[cfg(target_os = "linux")]
mod shield;
mod waiting_room;
mod worker;
mod wrk;

pub(crate) use args::{BenchArgs, BenchRows};
pub(crate) use holder::{HoldPagesArgs, hold_pages};

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use clap::ValueEnum;
use seckill_loadtest::LoadArgs;
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::report::{Align, Table};
use seckill_loadtest::scenario::Scenario;
use seckill_loadtest::verify::Expect;

use crate::loadrun::{self, admin_token};
use compare::{Figure, SavedRun};
use seckill_cli::telemetry;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_core::urls;
use seckill_devenv::processes::{Deployment, Fleet};
use seckill_devenv::services::{PrivateServers, Services};

/// The instances every row measures, of `strategy`: logging with the
/// default filter (`info`), as a user's do, not with the errors only that
/// keep the tests and the demo quiet. Their `info` spans cost every
/// request only when the filter takes them in: measured errors-only, a
/// sold-out answer once ran half again as fast as a user's did, and the
/// bench did not show it (docs/bench-history.md).
fn deployment(
    services: &Services,
    prefix: &str,
    strategy: Strategy,
    token: &str,
) -> anyhow::Result<Deployment> {
    // The join limit off: the bench's rooms fill from this one address.
    Ok(loadrun::deployment(services, prefix, strategy, token)?
        .env("RUST_LOG", telemetry::DEFAULT_FILTER)
        .env("SECKILL_ROOM_JOINS_PER_IP", "0"))
}

/// One row of the table.
struct Row {
    figure: &'static str,
    measured: String,
    target: &'static str,
    /// `None`: not measured, or no target to meet.
    met: Option<bool>,
    /// The figure as a number, for `--json` and `--compare`; `None` where
    /// the row was not measured or has no one figure.
    value: Option<Figure>,
}

/// What this run's database and key prefix are named after: its pid, and a
/// random tag, since a pid alone is not unique (two containers' benches,
/// each pid 1, on one PostgreSQL would drop each other's database; a bench
/// killed before its clean-up would hand its leftovers to the next with
/// its pid).
static RUN: LazyLock<String> = LazyLock::new(|| {
    let tag = uuid::Uuid::new_v4().simple().to_string();
    format!("{}_{}", std::process::id(), &tag[..8])
});

/// `seckill bench`: measure, print the table.
pub(crate) async fn bench(
    args: BenchArgs,
    services: &Services,
    prefix: &str,
) -> anyhow::Result<()> {
    // The earlier run first: a file that cannot be compared is said at
    // once, not after minutes of measuring.
    let earlier = args.compare.as_deref().map(SavedRun::read).transpose()?;
    seckill_cli::process::raise_open_files_limit();
    // Ctrl-C, from here on, ends the measuring, not the process: the
    // clean-up below runs.
    let stop = seckill_cli::process::stop_requested();
    // Held until the clean-up below is done; a bench killed before it
    // leaves its database and keys to the next bench (`leftovers.rs`).
    let _held = leftovers::hold_and_sweep(services, &RUN).await?;
    // What the bench writes is measurement, not the user's: a database and
    // a key prefix of its own, dropped afterwards, failed run or not. (In
    // the app's database, its live "Bench drain" sales of 20,000 units were
    // listed on the storefront's index for an hour.)
    let database = urls::with_database(&services.database_url, &format!("seckill_bench_{}", *RUN))?;
    let own = Services::resolve(
        Some(services.redis.clone()),
        Some(&database),
        PrivateServers::Refused,
    )
    .await?;
    let prefix = format!("{prefix}:bench-{}", *RUN);
    // The servers' URLs logged at start name the app's database: say that
    // the bench works beside it, not in it.
    tracing::info!(database = %urls::redact(&database), %prefix, "the bench's own database and key prefix, dropped when it ends");
    let measured = tokio::select! {
        measured = measure(&args, &own, &prefix) => measured,
        () = stop => Err(anyhow::anyhow!("interrupted; the bench's database and keys are dropped")),
    };
    let cleaned = clean_up(&own, &prefix).await;
    match measured {
        Ok(rows) => {
            let moved = earlier.map(|earlier| compare::compare_rows(&rows, &earlier));
            println!("{}", table(&rows, moved.as_deref()));
            if let Some(path) = &args.json {
                SavedRun::of(&rows, compare::this_commit()).write(path)?;
            }
            cleaned
        }
        // The run's error is the one returned; the clean-up's is not lost.
        Err(error) => {
            if let Err(left) = cleaned {
                eprintln!("bench: cleaning up after the failed run: {left:#}");
            }
            Err(error)
        }
    }
}

/// Every row `args` asks for, measured with `prefix` on `services`, in
/// the order `BenchRows` lists them. The `match` names every group, so a
/// group added to `BenchRows` does not compile until it measures something.
async fn measure(args: &BenchArgs, services: &Services, prefix: &str) -> anyhow::Result<Vec<Row>> {
    let store = loadrun::connect(services, prefix).await?;
    let token = admin_token();
    let mut rows = Vec::new();
    for &group in BenchRows::value_variants() {
        if !(args.only.is_empty() || args.only.contains(&group)) {
            continue;
        }
        match group {
            BenchRows::Burst => {
                eprintln!("bench: the burst");
                rows.extend(burst::burst(args, services, &store, &token).await?);
            }
            BenchRows::Accepted => {
                for strategy in [Strategy::Lock, Strategy::Lua] {
                    eprintln!("bench: accepted purchases/s with {}", strategy.as_str());
                    rows.push(
                        accepted::accepted_per_second(args, services, &store, &token, strategy)
                            .await?,
                    );
                }
                for strategy in [Strategy::Lock, Strategy::Lua] {
                    eprintln!(
                        "bench: accepted purchases/s with {} against sold-out answers (wrk)",
                        strategy.as_str()
                    );
                    rows.push(
                        accepted::accepted_against_sold_out(
                            args, services, &store, &token, strategy,
                        )
                        .await?,
                    );
                }
            }
            BenchRows::Cluster => {
                eprintln!("bench: 3 sales on 1 Redis, then on a 3-master cluster");
                rows.push(cluster::spread_over_masters(args, services, &store, &token).await?);
            }
            BenchRows::Replica => {
                eprintln!(
                    "bench: one sale with --redis-durability replica, then local, alternated"
                );
                rows.push(replica::replica_against_local(args, services, &store, &token).await?);
            }
            BenchRows::Drain => {
                eprintln!("bench: the worker's drain");
                rows.extend(worker::drain(args, &store).await?);
            }
            BenchRows::Idle => {
                eprintln!("bench: an idle worker's delay");
                rows.push(worker::idle_delay(services, &store, &token).await?);
            }
            BenchRows::SoldOut => {
                eprintln!("bench: sold-out answers against a bare handler (wrk)");
                rows.push(wrk::sold_out(args, services, &store, &token).await?);
                eprintln!("bench: the bundled load generator against wrk, on the bare handler");
                rows.push(generator::generator_against_wrk(args).await?);
            }
            BenchRows::Room => {
                eprintln!("bench: waiting room status answers against sold-out answers (wrk)");
                rows.extend(
                    waiting_room::status_against_sold_out(args, services, &store, &token).await?,
                );
                eprintln!("bench: a waiting room {} buyers join", args.room_buyers);
                rows.extend(waiting_room::crowded_room(args, services, &store, &token).await?);
            }
            BenchRows::RoomScripts => {
                eprintln!(
                    "bench: a lottery room of {} buyers: Redis' slowest command",
                    args.room_buyers
                );
                rows.extend(room_scripts::slowest_command(args, &store).await?);
            }
            BenchRows::Roomed => {
                eprintln!("bench: accepted purchases/s on a roomed sale against an unroomed one");
                rows.push(roomed::roomed_against_unroomed(args, &store).await?);
            }
            BenchRows::Index => {
                eprintln!("bench: the storefront index (wrk)");
                rows.extend(wrk::index(args, services, &store, &token).await?);
            }
            BenchRows::Pages => {
                eprintln!("bench: {} open sale pages", args.pages);
                rows.push(pages::open_pages(args, services, &store, &token).await?);
                eprintln!(
                    "bench: the burst, alone and while {} pages watch",
                    args.pages
                );
                rows.extend(pages::watched_burst(args, services, &store, &token).await?);
            }
            BenchRows::RoomsEnd => {
                eprintln!(
                    "bench: Redis' memory after {} ended rooms of {} buyers",
                    args.ended_rooms, args.room_buyers_each
                );
                rows.push(rooms_end::memory_after_ended_rooms(args, &store).await?);
            }
            BenchRows::Ended => {
                eprintln!(
                    "bench: an instance after {} ended sales, and after 10",
                    args.ended_sales
                );
                rows.extend(ended::ended_sales(args, services, &store, &token).await?);
            }
            BenchRows::Capacity => {
                eprintln!(
                    "bench: capacity: CPU per request in each process, {} requests a run",
                    args.capacity_requests
                );
                rows.extend(capacity::capacity(args, services, &store, &token).await?);
            }
            BenchRows::RedisCost => {
                eprintln!(
                    "bench: Redis' CPU per accepted purchase and per drained order, {} of each",
                    args.capacity_requests
                );
                rows.extend(redis_cost::redis_cost(args, services, &store, &token).await?);
            }
        }
    }
    Ok(rows)
}

/// Delete the bench's keys and drop its database, each whether or not the
/// other could be done.
async fn clean_up(services: &Services, prefix: &str) -> anyhow::Result<()> {
    let deleted = async {
        let redis =
            seckill_core::redis_pool::connect_redis(&services.redis, Duration::from_secs(5))
                .await?;
        redis.delete_under(prefix).await
    }
    .await
    .context("deleting the bench's Redis keys");
    let dropped = seckill_devenv::services::drop_database(&services.database_url)
        .await
        .context("dropping the bench's database");
    deleted.and(dropped)
}

/// New buyers, each request once, over `connections` for `secs`, checked
/// by PostgreSQL's word only (the purchases/s rows).
fn closed_load(secs: f64, connections: u64) -> LoadArgs {
    LoadArgs {
        scenario: Scenario::Closed,
        users: 10_000_000,
        dup: 0.0,
        rate: 0.0,
        duration: Some(secs),
        connections,
        expect: Expect::Observe,
        settle_secs: 60,
        json: None,
        html: None,
    }
}

/// Accepted purchases per second of a run.
fn accepted_rate(report: &seckill_loadtest::report::Report) -> f64 {
    report.summary.count(AnswerKind::Won) as f64 / (report.summary.wall_ms / 1000.0)
}

/// Start 2 instances of `strategy` and a worker, create a sale of `units`,
/// run `load` against it, read what `after` reads of them once it is over
/// (unless it failed), stop them. Returns the report and that.
async fn run<T>(
    services: &Services,
    store: &Store,
    token: &str,
    strategy: Strategy,
    units: u32,
    load: &LoadArgs,
    after: impl AsyncFnOnce(&Fleet) -> anyhow::Result<T>,
) -> anyhow::Result<(seckill_loadtest::report::Report, T)> {
    let deployment = deployment(services, store.prefix(), strategy, token)?;
    let cluster = Fleet::start(deployment, "bench", 2).await?;
    let sale_id = loadrun::create_sale(store, "Bench", units, Some(3600)).await?;
    let report = loadrun::burst(store, &cluster, strategy, (sale_id, units), ("bench", load)).await;
    let outcome = async { Ok((report?, after(&cluster).await?)) }.await;
    cluster.stop().await;
    outcome
}

/// What a figure must be to meet its row's target. Every row with a
/// numeric target is judged, and its figure shown, by one: a figure judged
/// against one limit and rounded apart from it could read "20 ms" and be
/// marked missed.
#[derive(Debug, Clone, Copy)]
enum Bound {
    AtLeast(f64),
    AtMost(f64),
    Below(f64),
}

impl Bound {
    fn met(self, value: f64) -> bool {
        match self {
            Self::AtLeast(limit) => value >= limit,
            Self::AtMost(limit) => value <= limit,
            Self::Below(limit) => value < limit,
        }
    }

    /// `value` with `places` decimals, or more when that few would show it
    /// on the other side of the limit: 29.85% against at least 30 shows as
    /// 29.9%, not as a 30% marked missed (at worst, every digit it has).
    fn shown(self, value: f64, places: usize) -> String {
        (places..=places + 3)
            .map(|places| format!("{value:.places$}"))
            .find(|text| {
                text.parse()
                    .is_ok_and(|shown| self.met(shown) == self.met(value))
            })
            .unwrap_or_else(|| value.to_string())
    }
}

/// The table for the terminal: each figure, what was measured, whether
/// its target was met, and the target; with `--compare`, how each figure
/// moved since the earlier run (`moved`, one per row).
fn table(rows: &[Row], moved: Option<&[compare::Moved]>) -> String {
    // `met` five wide, as docs/bench.md shows it, though "yes" takes three.
    let mut table = Table::new()
        .left("figure")
        .left("measured")
        .column("met", Align::Left, 5)
        .left("target");
    if moved.is_some() {
        table = table.left("since the earlier run");
    }
    for (i, row) in rows.iter().enumerate() {
        let met = match row.met {
            Some(true) => "yes",
            Some(false) => "NO",
            None => "-",
        };
        match moved {
            Some(moved) => {
                let since = moved[i].shown();
                table.row([row.figure, &row.measured, met, row.target, &since]);
            }
            None => table.row([row.figure, &row.measured, met, row.target]),
        }
    }
    table.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_figure_is_never_shown_on_the_other_side_of_its_target() {
        let at_least = Bound::AtLeast(30.0);
        assert_eq!(at_least.shown(29.85, 0), "29.9");
        assert_eq!(at_least.shown(29.9999, 0), "29.9999");
        assert_eq!(at_least.shown(30.4, 0), "30");
        assert_eq!(at_least.shown(31.6, 0), "32");
        let at_most = Bound::AtMost(1.25);
        assert_eq!(at_most.shown(1.2504, 2), "1.2504");
        assert_eq!(at_most.shown(1.2449, 2), "1.24");
        assert_eq!(at_most.shown(0.38, 2), "0.38");
        let below = Bound::Below(64.0);
        assert_eq!(below.shown(63.96, 1), "63.96");
        assert_eq!(below.shown(64.0, 1), "64.0");
        assert!(!below.met(64.0) && below.met(63.96));
    }

    #[test]
    fn the_columns_line_up_with_their_headers_whatever_the_widths() {
        let rows = [Row {
            figure: "f",
            measured: "2.8 ms".into(),
            target: "<= 5 ms",
            met: Some(true),
            value: None,
        }];
        let table = table(&rows, None);
        let lines: Vec<&str> = table.lines().collect();
        // `met` keeps five characters, as docs/bench.md shows it.
        assert_eq!(lines[0], "figure  measured  met    target", "{table}");
        let column = |line: &str, word: &str| line.find(word).expect(word);
        assert_eq!(column(lines[0], "met"), column(lines[1], "yes"), "{table}");
        assert_eq!(
            column(lines[0], "target"),
            column(lines[1], "<= 5"),
            "{table}"
        );
    }
}
