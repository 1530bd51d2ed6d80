//! Open sale pages: `--pages` event streams of one sale held open on one
//! instance, and what they cost:
//! - the Redis commands per second the server counts (`INFO stats`) while
//!   they watch, against the same window before they opened, and the
//!   instance's memory (an instance with no worker in it, so that nothing
//!   else of its asks Redis; Redis counts every client's commands: run the
//!   bench alone on its server);
//! - the burst's figures while they watch the burst's sale on one of its
//!   two instances, against the same burst with no page open, alternated,
//!   each burst on two instances just started.
//!
//! The streams are held by a process of their own (`holder.rs`).

use std::time::Duration;

use anyhow::Context;
use seckill_loadtest::report::Report;

use super::compare::Figure;
use super::holder::Watchers;
use super::{Bound, Row};
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// How long the Redis commands are counted, each time: two snapshot ticks
/// of every stream.
const WINDOW: Duration = Duration::from_secs(10);

/// Bursts alone and bursts watched, alternated: one burst's figures move
/// several times over from one run to the next on this machine, so one
/// pair would say little.
const ROUNDS: usize = 5;

pub(super) async fn open_pages(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    let cap = stream_cap(args);
    let url = cluster
        .start_app("bench-pages", &["--no-worker", "--max-event-streams", &cap])
        .await?;
    let measured = async {
        let sale_id = loadrun::create_sale(store, "Bench pages", 10, Some(3600)).await?;
        let idle = commands_per_second(store).await?;
        let watchers = Watchers::open(&url, sale_id, args.pages).await?;
        let watched = commands_per_second(store).await?;
        let resident = cluster.resident_bytes("bench-pages")?;
        watchers.close().await?;
        anyhow::Ok((idle, watched, resident))
    }
    .await;
    cluster.stop().await;
    let (idle, watched, resident) = measured?;
    let mib = resident as f64 / 1024.0 / 1024.0;
    let extra = (watched - idle).max(0.0);
    // One read per second per sale, at most, whatever the pages.
    let (independent, small) = (Bound::AtMost(2.0), Bound::Below(256.0));
    Ok(Row {
        figure: "open sale pages on one instance: Redis commands/s they add, RSS",
        measured: format!(
            "{} pages: +{}/s ({watched:.1}/s vs {idle:.1}/s before), {} MiB",
            args.pages,
            independent.shown(extra, 1),
            small.shown(mib, 1)
        ),
        target: "independent of the pages (a read per page would be pages/5 per s); < 256 MiB",
        met: Some(independent.met(extra) && small.met(mib)),
        value: None,
    })
}

/// The burst of the burst rows, [`ROUNDS`] times (`--rounds`) alone and
/// as many times while `--pages` pages of its sale are open on its first
/// instance, alternated, each on two instances of its own just started,
/// as the burst row's is: the medians side by side.
///
/// Instances of their own for each burst, because what a burst costs
/// depends on the memory its instances already hold: an instance's half of
/// the burst takes about 100 MB for its connections, and one whose
/// allocator still holds the pages of an earlier burst (10 s, see
/// `Cargo.toml`) answers without faulting them in. On the same two
/// instances, a burst alone after a burst compared warm memory with a
/// burst whose memory the pages had just taken (one instance, 5,000
/// buyers: p99 33-34 ms with 1,600-2,300 page faults, 165-197 ms with
/// 20,000-33,000).
pub(super) async fn watched_burst(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 2]> {
    let (mut alone, mut watched) = (Vec::new(), Vec::new());
    for round in 0..args.rounds(ROUNDS) {
        // Each kind first in every other round: neither always follows
        // the other.
        let watched_first = round % 2 == 1;
        for watching in [watched_first, !watched_first] {
            let report = one_burst(args, services, store, token, watching).await?;
            say(if watching { "watched" } else { "alone" }, &report);
            if watching { &mut watched } else { &mut alone }.push(report);
        }
    }
    let (alone, watched) = (PageFigures::of(&alone)?, PageFigures::of(&watched)?);
    let row = |figure, alone: f64, watched: f64, pages: String| {
        let ratio = watched / alone;
        Row {
            figure,
            measured: format!(
                "{watched:.0} ms vs {alone:.0} ms alone ({}x){pages}",
                UNCHANGED.shown(ratio, 2)
            ),
            target: "unchanged: <= 1.25x the burst alone",
            met: Some(UNCHANGED.met(ratio)),
            value: Figure::lower(ratio),
        }
    };
    Ok([
        row(
            "burst while the pages watch one instance: last win (median)",
            alone.last_win_ms,
            watched.last_win_ms,
            format!(", {} pages", args.pages),
        ),
        row(
            "burst while the pages watch one instance: p99 (median)",
            alone.p99_ms,
            watched.p99_ms,
            String::new(),
        ),
    ])
}

/// Watched over alone, at most, for a figure to count as unchanged. The
/// medians narrow what one burst's figures move by on this machine (a
/// last win of 6 ms in one run, 119 ms in the next), they do not remove
/// it: two sets of bursts alone can differ by more than this
/// (docs/bench-history.md).
const UNCHANGED: Bound = Bound::AtMost(1.25);

/// One burst of the burst rows on two instances just started and a sale
/// of its own, with `--pages` pages of it open on the first instance if
/// `watching`.
async fn one_burst(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
    watching: bool,
) -> anyhow::Result<Report> {
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let cap = stream_cap(args);
    let cluster = Fleet::start_each(deployment, "bench-watched", 2, |_| {
        vec!["--max-event-streams".to_owned(), cap.clone()]
    })
    .await?;
    let measured = async {
        let sale_id = loadrun::create_sale(store, "Bench watched", 10, Some(3600)).await?;
        let watchers = if watching {
            Some(Watchers::open(&cluster.urls()[0], sale_id, args.pages).await?)
        } else {
            None
        };
        let load = super::burst::burst_load(args.burst_users);
        let report = loadrun::burst(
            store,
            &cluster,
            Strategy::Lock,
            (sale_id, 10),
            ("bench", &load),
        )
        .await?;
        if let Some(watchers) = watchers {
            watchers.close().await?;
        }
        anyhow::Ok(report)
    }
    .await;
    cluster.stop().await;
    measured
}

/// One burst's figures, on stderr: the spread behind the medians.
fn say(kind: &str, report: &Report) {
    let summary = &report.summary;
    eprintln!(
        "bench: burst {kind}: last win {}, p99 {:.0} ms",
        summary
            .time_to_sell_out_ms
            .map_or("none".into(), |ms| format!("{ms:.0} ms")),
        summary.p99_us as f64 / 1000.0,
    );
}

/// The medians of a few bursts' figures.
struct PageFigures {
    last_win_ms: f64,
    p99_ms: f64,
}

impl PageFigures {
    fn of(reports: &[Report]) -> anyhow::Result<Self> {
        let last_wins = reports
            .iter()
            .map(|report| {
                report
                    .summary
                    .time_to_sell_out_ms
                    .context("a burst did not sell out")
            })
            .collect::<anyhow::Result<Vec<f64>>>()?;
        let p99s = reports
            .iter()
            .map(|report| report.summary.p99_us as f64 / 1000.0)
            .collect();
        Ok(Self {
            last_win_ms: median(last_wins),
            p99_ms: median(p99s),
        })
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The instance's cap on streams, with room above the pages.
fn stream_cap(args: &BenchArgs) -> String {
    (args.pages + 100).to_string()
}

/// Commands per second Redis processed over [`WINDOW`], by its own count.
async fn commands_per_second(store: &Store) -> anyhow::Result<f64> {
    let before = commands_processed(store).await?;
    tokio::time::sleep(WINDOW).await;
    let after = commands_processed(store).await?;
    Ok(after.saturating_sub(before) as f64 / WINDOW.as_secs_f64())
}

/// `total_commands_processed` from `INFO stats`.
async fn commands_processed(store: &Store) -> anyhow::Result<u64> {
    super::redis_info::info_field(
        &mut store.redis().await?,
        "stats",
        "total_commands_processed",
    )
    .await
}
