//! The burst rows: 10 units, `--burst-users` buyers at once on 2 `lock`
//! instances, from the first send to the last win and the p99 of every
//! answer; then more bursts on the same instances until `--memory-buyers`
//! have come, and the larger instance's memory after them. A burst the load
//! test could not trust, or that sold a unit twice, meets no target.

use std::time::Duration;

use seckill_loadtest::LoadArgs;
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::report::{Report, Verdict};
use seckill_loadtest::scenario::Scenario;
use seckill_loadtest::verify::Expect;

use super::compare::Figure;
use super::{Bound, Row, run};
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// 10 units, a burst on 2 `lock` instances: time to the last win, p99;
/// then more bursts on the same instances until `--memory-buyers` have
/// come, and the larger instance's memory after them.
pub(super) async fn burst(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 3]> {
    let load = burst_load(args.burst_users);
    let more = MoreBursts::after(args.burst_users, args.memory_buyers);
    let (report, memory) = run(
        services,
        store,
        token,
        Strategy::Lock,
        10,
        &load,
        // A failure here fails the memory row only: the burst's figures
        // are measured already.
        async |cluster: &Fleet| {
            Ok(async {
                more.run(store, cluster).await?;
                Memory::of(cluster).await
            }
            .await)
        },
    )
    .await?;
    let last_win = report.summary.time_to_sell_out_ms;
    let p99_ms = report.summary.p99_us as f64 / 1000.0;
    let (quick, p99) = (Bound::AtMost(20.0), Bound::AtMost(100.0));
    let rows = [
        Row {
            figure: "burst, 10 units, 2 instances: first send to last win",
            measured: last_win.map_or("did not sell out".into(), |ms| {
                format!("{} ms", quick.shown(ms, 0))
            }),
            target: "<= 20 ms",
            met: Some(last_win.is_some_and(|ms| quick.met(ms))),
            value: last_win.and_then(Figure::lower),
        },
        Row {
            figure: "same burst: p99 of every answer",
            measured: format!("{} ms", p99.shown(p99_ms, 0)),
            target: "<= 100 ms",
            met: Some(p99.met(p99_ms)),
            value: Figure::lower(p99_ms),
        },
        memory_row(args, &more, answered(&report), memory),
    ];
    // A burst the load test could not trust, or that sold a unit twice:
    // its figures are shown, and meet nothing.
    if report.verdict == Verdict::Pass {
        return Ok(rows);
    }
    let why = format!(
        " (the burst's verdict: {:?}{})",
        report.verdict,
        report
            .problems
            .iter()
            .map(|problem| format!("; {problem}"))
            .collect::<String>()
    );
    Ok(rows.map(|row| Row {
        measured: row.measured + &why,
        met: None,
        value: None,
        ..row
    }))
}

/// The memory row: what the instances hold once every buyer was answered.
fn memory_row(
    args: &BenchArgs,
    more: &MoreBursts,
    first: u64,
    memory: anyhow::Result<Memory>,
) -> Row {
    const FIGURE: &str = "same instances: memory of the larger after every burst (VmRSS)";
    const TARGET: &str = "< 64 MiB after 100,000 buyers (here in bursts of <= 18,000)";
    let memory = match memory {
        Ok(memory) => memory,
        Err(error) => {
            return Row {
                figure: FIGURE,
                measured: format!("not measured: {error:#}"),
                target: TARGET,
                met: None,
                value: None,
            };
        }
    };
    let mib = |bytes: u64| bytes as f64 / 1024.0 / 1024.0;
    let (right_after, settled) = (mib(memory.right_after), mib(memory.settled));
    let asked = u64::from(args.burst_users) + u64::from(more.buyers());
    let answered = first + u64::from(more.buyers());
    let unanswered = if answered < asked {
        format!(", {} of them unanswered", asked - answered)
    } else {
        String::new()
    };
    let target = Bound::Below(64.0);
    Row {
        figure: FIGURE,
        measured: format!(
            "{} MiB {}s after {asked} buyers{}{unanswered} ({right_after:.1} MiB at once)",
            target.shown(settled, 1),
            MEMORY_SETTLE.as_secs(),
            more.describe(args.burst_users),
        ),
        target: TARGET,
        met: (answered >= 100_000).then_some(target.met(settled)),
        value: Figure::lower(settled),
    }
}

/// Buyers of a run who were answered (anything but a failed connection or
/// an unexpected answer).
fn answered(report: &Report) -> u64 {
    report.summary.requests - report.summary.count(AnswerKind::Error)
}

/// The bursts that follow the measured one on the same instances, each on
/// a new sale of 10 units, until `--memory-buyers` have come: as large as
/// this process's open-files limit lets one burst be, up to
/// [`LARGEST_BURST`] (each of its buyers holds a connection; 20,000 files
/// is the hard limit here, so 100,000 buyers cannot come at once).
struct MoreBursts {
    count: u32,
    size: u32,
}

/// The largest of the bursts after the first: what this machine's limit
/// of 20,000 open files allows, wherever the bench runs, so that the
/// figure means the same on a machine that allows more (and below the
/// 28,232 local ports a machine has by default for each instance's port).
const LARGEST_BURST: u32 = 18_000;

/// Files the bench keeps open besides a burst's connections (its Redis and
/// PostgreSQL pools, the instances' pipes, the runtime's own).
const BENCH_FILES: u64 = 512;

impl MoreBursts {
    fn after(first: u32, total: u32) -> Self {
        use nix::sys::resource::{Resource, getrlimit};
        let files = getrlimit(Resource::RLIMIT_NOFILE).map_or(1_024, |(soft, _)| soft);
        let largest = u32::try_from(files.saturating_sub(BENCH_FILES))
            .unwrap_or(u32::MAX)
            .clamp(10, LARGEST_BURST);
        Self::split(total.saturating_sub(first), largest)
    }

    /// `left` buyers in as few equal bursts as fit in `largest` each.
    fn split(left: u32, largest: u32) -> Self {
        let count = left.div_ceil(largest);
        let size = if count == 0 { 0 } else { left.div_ceil(count) };
        Self { count, size }
    }

    fn buyers(&self) -> u32 {
        self.count * self.size
    }

    /// How the buyers came, for the row: nothing when in one burst.
    fn describe(&self, first: u32) -> String {
        if self.count == 0 {
            return String::new();
        }
        let bursts = if self.count == 1 { "burst" } else { "bursts" };
        format!(
            " (the burst's {first}, then {} more {bursts} of {})",
            self.count, self.size
        )
    }

    /// Run them. An error if one of them could not be trusted (the load
    /// test's verdict: an unanswered buyer makes it so) or sold a unit
    /// twice, so that once they ran, every one of their buyers was
    /// answered.
    async fn run(&self, store: &Store, cluster: &Fleet) -> anyhow::Result<()> {
        let load = burst_load(self.size);
        for round in 1..=self.count {
            eprintln!(
                "bench: burst {round} of {} more, {} buyers",
                self.count, self.size
            );
            let sale_id = loadrun::create_sale(store, "Bench memory", 10, Some(3600)).await?;
            let report = loadrun::burst(
                store,
                cluster,
                Strategy::Lock,
                (sale_id, 10),
                ("bench-memory", &load),
            )
            .await?;
            anyhow::ensure!(
                report.verdict == Verdict::Pass,
                "burst {round} of {} more: {:?} ({})",
                self.count,
                report.verdict,
                report.problems.join("; ")
            );
        }
        Ok(())
    }
}

/// A burst: `users` buyers at once, each once, on 10 units.
pub(super) fn burst_load(users: u32) -> LoadArgs {
    LoadArgs {
        scenario: Scenario::Burst,
        users,
        dup: 0.0,
        rate: 0.0,
        duration: None,
        connections: 1,
        expect: Expect::NoOversell,
        settle_secs: 30,
        json: None,
        html: None,
    }
}

/// How long after a run its instances' memory is read a second time:
/// jemalloc gives pages unused for its decay time (10 s) back to the system.
const MEMORY_SETTLE: Duration = Duration::from_secs(12);

/// The larger instance's resident memory once a run is over, at once and
/// `MEMORY_SETTLE` later.
struct Memory {
    right_after: u64,
    settled: u64,
}

impl Memory {
    async fn of(cluster: &Fleet) -> anyhow::Result<Self> {
        let largest = || -> anyhow::Result<u64> {
            let names = cluster.names();
            let sizes = names.iter().map(|name| cluster.resident_bytes(name));
            Ok(sizes
                .collect::<anyhow::Result<Vec<u64>>>()?
                .into_iter()
                .max()
                .unwrap_or(0))
        };
        let right_after = largest()?;
        tokio::time::sleep(MEMORY_SETTLE).await;
        Ok(Self {
            right_after,
            settled: largest()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_buyers_left_come_in_as_few_equal_bursts_as_the_files_allow() {
        // 100,000 buyers, the first burst's 10,000 among them, at most
        // 19,488 at once: five bursts of 18,000.
        let more = MoreBursts::split(90_000, 19_488);
        assert_eq!((more.count, more.size), (5, 18_000));
        assert_eq!(more.buyers(), 90_000);
        assert_eq!(
            more.describe(10_000),
            " (the burst's 10000, then 5 more bursts of 18000)"
        );
        // Rounded up, never fewer buyers than asked.
        let more = MoreBursts::split(10, 3);
        assert_eq!((more.count, more.size), (4, 3));
        // None left: no more bursts, nothing said.
        let more = MoreBursts::split(0, 19_488);
        assert_eq!(more.buyers(), 0);
        assert_eq!(more.describe(10_000), "");
    }
}
