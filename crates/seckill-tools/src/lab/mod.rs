//! `seckill lab`: every way to guard the stock, each with the fault that
//! breaks it, measured side by side in one table.
//!
//! Each row of the lesson ([`rows::lesson`]) gets instances of its own,
//! started with its strategy and its knob's flags, and a fresh sale; the
//! load test's burst (default: 10 units, 2,000 buyers plus 5% who send
//! twice, 2 instances) runs against it and its verifier reads PostgreSQL
//! and Redis. The lab adds what the verifier does not look for: the
//! sale's fence counter, a watch on the lock key during the run (a lock
//! with a TTL of years), the lock left without a TTL, the instances that
//! died. Then each row is judged against its expectation, and the table
//! is printed, and written as JSON and one HTML page ([`table`]).
//!
//! Each row's instances stop when its row is done (thirteen rows of three
//! processes, each with a pool of PostgreSQL connections, would exhaust
//! a stock PostgreSQL's 100). Without `--exit`, one instance per row, with
//! the row's strategy and knob, and one worker serve every row's sale
//! after the table, so the class can open the pages, until Ctrl-C.

mod args;
mod expect;
mod rows;
mod table;
mod watch;

use std::pin::pin;

use anyhow::Context;
use seckill_loadtest::LoadArgs;
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::report::{Report, Verdict};
use seckill_loadtest::scenario::Scenario;

use crate::loadrun::{self, admin_token};
pub(crate) use args::{Knob, LabArgs};
use expect::RowFigures;
use rows::LabRow;
use seckill_core::config::Strategy;
use seckill_core::keys::SaleKeys;
use seckill_core::redis_pool::RedisAt;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;
use table::RowOutcome;
use watch::LockWatch;

/// How long the lab's sales stay open, in seconds: the class has an hour
/// to look at the pages.
const SALE_OPEN_SECS: i64 = 3600;
/// A lock TTL longer than this is no lease: nobody will wait it out.
const A_YEAR_MS: i64 = 365 * 24 * 3600 * 1000;

/// `seckill lab`: run the rows asked for, print the table, write it as
/// JSON and HTML. Returns whether every row showed what it must.
pub(crate) async fn lab(args: LabArgs, services: &Services, prefix: &str) -> anyhow::Result<bool> {
    seckill_cli::process::raise_open_files_limit();
    let token = admin_token();
    let rows = rows::select(args.strategy, args.knob);
    anyhow::ensure!(
        !rows.is_empty(),
        "no row of the lesson uses --knob {}: name a strategy too (--strategy article --knob {0})",
        args.knob.map_or("none", |knob| knob.as_str())
    );
    let store = loadrun::connect(services, prefix).await?;
    println!("{}", header(&args, &rows));
    // What tells this run's sales from an earlier run's on the storefront.
    let run = chrono::Local::now().format("%b %-d %H:%M").to_string();
    // One listener for the whole lab: a Ctrl-C between two rows, or
    // between "Press Ctrl-C to stop." and the wait, is not lost (see
    // stop_requested).
    let mut stop = pin!(seckill_cli::process::stop_requested());
    let mut outcomes = Vec::new();
    let mut sales = Vec::new();
    for row in rows {
        let ran = tokio::select! {
            ran = run_row(&args, services, &store, &token, (&run, &row)) => ran?,
            () = &mut stop => anyhow::bail!("interrupted; the app instances were stopped"),
        };
        eprintln!(
            "  {:<26} {}",
            row.label(),
            match &ran.outcome.verdict {
                Ok(()) => "as expected".to_owned(),
                Err(why) => format!("NOT as expected: {why}"),
            }
        );
        sales.push((row, ran.sale_id));
        outcomes.push(ran.outcome);
    }
    println!("\n{}", table::text(&outcomes));
    let json = args.report_dir.join("lab.json");
    let html = args.report_dir.join("lab.html");
    seckill_loadtest::write(&json, &table::json(&outcomes))?;
    seckill_loadtest::write(&html, &table::html(&outcomes))?;
    println!("JSON: {}\nHTML: {}", json.display(), html.display());
    let met = outcomes.iter().all(|o| o.verdict.is_ok());
    println!(
        "lab verdict: {}",
        if met {
            "every row as expected"
        } else {
            "a row NOT as expected"
        }
    );
    if !args.exit {
        let cluster = tokio::select! {
            cluster = serve_rows(services, prefix, &token, &sales) => cluster?,
            () = &mut stop => anyhow::bail!("interrupted; the app instances were stopped"),
        };
        stop.await;
        cluster.stop().await;
    }
    Ok(met)
}

/// One instance per row, with the row's strategy and the flags every one
/// of its instances had, and one worker; prints where each row's sale page
/// is. Not the crash knob (the room's first buyer would stop the instance)
/// and not one instance's skew: the served row is the strategy to try by
/// hand, not the race again.
async fn serve_rows(
    services: &Services,
    prefix: &str,
    token: &str,
    sales: &[(LabRow, i64)],
) -> anyhow::Result<Fleet> {
    let deployment = loadrun::deployment(services, prefix, Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    // First: a page is out once its line is, and its purchases need the
    // worker.
    cluster.start_worker("lab-worker", &[]).await?;
    println!("\nEach row's sale, on an instance of its own (admin token {token}):");
    for (row, sale_id) in sales {
        let label = row.label();
        let mut args = vec!["--no-worker", "--strategy", row.strategy.as_str()];
        args.extend(
            row.flags
                .every
                .iter()
                .map(String::as_str)
                .filter(|flag| *flag != "--crash-after-setnx"),
        );
        let url = cluster.start_app(&label, &args).await?;
        println!("  {label:<26} {url}/sales/{sale_id}  (live: {url}/sales/{sale_id}/live)");
    }
    println!("Press Ctrl-C to stop.");
    Ok(cluster)
}

/// What each row runs: buyers, units, instances.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Workload {
    buyers: u32,
    /// Share of the buyers who send twice at once.
    dup: f64,
    units: u32,
    instances: u32,
}

impl Workload {
    /// The run's workload, as `--users`, `--dup`, `--stock` and
    /// `--instances` set it.
    fn of_run(args: &LabArgs) -> Self {
        Self {
            buyers: args.users,
            dup: args.dup,
            units: args.stock,
            instances: args.instances,
        }
    }

    /// A row's: the run's, but where the row sets its own.
    fn of_row(args: &LabArgs, row: &LabRow) -> Self {
        let units = row.units.unwrap_or(args.stock);
        let instances = row.instances.unwrap_or(args.instances);
        Self {
            buyers: row.buyers.count(args.users, units),
            dup: row.dup.unwrap_or(args.dup),
            units,
            // A fault set on the second instance (a skewed clock) needs
            // one: with `--instances 1` the row ran without its fault and
            // showed nothing.
            instances: if row.flags.second.is_empty() {
                instances
            } else {
                instances.max(2)
            },
        }
    }

    fn buyers(self) -> String {
        if self.dup >= 1.0 {
            format!("{}, each sending twice", count(self.buyers, "buyer"))
        } else {
            format!(
                "{} (+{:.0}% sending twice)",
                count(self.buyers, "buyer"),
                self.dup * 100.0
            )
        }
    }

    /// The whole workload in words: "2000 buyers (+5% sending twice) race
    /// for 10 units on 2 app instances".
    fn describe(self) -> String {
        format!(
            "{} race for {} on {}",
            self.buyers(),
            count(self.units, "unit"),
            count(self.instances, "app instance")
        )
    }

    /// Only what differs from `run`: "1 unit", "5 buyers, each sending twice".
    fn differences(self, run: Self) -> Vec<String> {
        let mut differs = Vec::new();
        if (self.buyers, self.dup) != (run.buyers, run.dup) {
            differs.push(self.buyers());
        }
        if self.units != run.units {
            differs.push(count(self.units, "unit"));
        }
        if self.instances != run.instances {
            differs.push(count(self.instances, "app instance"));
        }
        differs
    }
}

/// "1 unit", "10 units".
fn count(n: u32, what: &str) -> String {
    format!("{n} {what}{}", if n == 1 { "" } else { "s" })
}

/// The lab's first line: the workload every row runs, and each row that
/// runs another, with what it changes, so that the header is true of
/// every row under it.
fn header(args: &LabArgs, rows: &[LabRow]) -> String {
    let run = Workload::of_run(args);
    if let [row] = rows {
        return format!(
            "seckill lab: 1 row ({}): {}",
            row.label(),
            Workload::of_row(args, row).describe()
        );
    }
    let mut header = format!("seckill lab: {} rows; each: {}", rows.len(), run.describe());
    let others: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            let differs = Workload::of_row(args, row).differences(run);
            (!differs.is_empty()).then(|| format!("{}: {}", row.label(), differs.join(", ")))
        })
        .collect();
    if !others.is_empty() {
        header.push_str(", but\n  ");
        header.push_str(&others.join("\n  "));
    }
    header
}

/// One row, run and judged.
struct Ran {
    outcome: RowOutcome,
    sale_id: i64,
}

async fn run_row(
    args: &LabArgs,
    services: &Services,
    store: &Store,
    token: &str,
    (run, row): (&str, &LabRow),
) -> anyhow::Result<Ran> {
    let label = row.label();
    let deployment = loadrun::deployment(services, store.prefix(), row.strategy, token)?;
    let workload = Workload::of_row(args, row);
    let units = workload.units;
    let mut cluster = Fleet::start_each(deployment, &label, workload.instances, |i| {
        row.flags.of_instance(i)
    })
    .await?;
    // The run's time in the name: the storefront lists every run's sales.
    let name = format!("Lab {run}: {label}");
    let sale_id = loadrun::create_sale(store, &name, units, Some(SALE_OPEN_SECS)).await?;
    let load = LoadArgs {
        scenario: Scenario::Burst,
        users: workload.buyers,
        dup: workload.dup,
        rate: 0.0,
        duration: None,
        connections: 1,
        expect: row.expect.verify_as(),
        settle_secs: 30,
        json: Some(args.report_dir.join(format!("{label}.json"))),
        html: Some(args.report_dir.join(format!("{label}.html"))),
    };
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let watch = LockWatch::start(&services.redis, &keys.lock).await?;
    let report = loadrun::burst(
        store,
        &cluster,
        row.strategy,
        (sale_id, units),
        (&label, &load),
    )
    .await;
    let longest_ttl_ms = watch.stop().await;
    let crashed = cluster.exited()?.len() as u64;
    cluster.stop().await;
    let report = report?;
    let longest_ttl_ms = longest_ttl_ms.with_context(|| format!("watching the lock of {label}"))?;
    let after = LockAfter::read(store, &keys).await?;
    let figures = figures(&report, longest_ttl_ms, &after, crashed);
    // A broken row leaves the sale's figures in Redis wrong on purpose;
    // left so, its page would go on showing them while it serves. (For a
    // row that held, Redis already agrees with PostgreSQL.)
    store.reset_sale_in_redis(sale_id).await?;
    if after.without_ttl {
        // Left as the evidence: the lab does not take a lock it does not
        // hold (that is the article's bug 5).
        // `-c`: in a cluster, follow the redirect to the lock's master.
        let (cluster, node) = match &services.redis {
            RedisAt::Server(url) => ("", url.clone()),
            RedisAt::Cluster(nodes) => ("-c ", nodes[0].clone()),
            // Under Sentinel: the primary they name now.
            at => (
                "",
                format!("redis://{}", at.node_of(&keys.lock).await?.addr()),
            ),
        };
        eprintln!(
            "  {label}: the lock {} has no TTL; see for yourself: redis-cli {cluster}-u {} PTTL '{}'",
            keys.lock,
            seckill_core::urls::redact(&node),
            keys.lock
        );
    }
    Ok(Ran {
        outcome: RowOutcome {
            verdict: row.expect.judge(&figures),
            row: row.clone(),
            figures,
            report: load.html.clone(),
        },
        sale_id,
    })
}

/// The figures of a row, from the load test's report and the lab's own
/// reads.
fn figures(report: &Report, longest_ttl_ms: i64, after: &LockAfter, crashed: u64) -> RowFigures {
    let stuck_lock = if after.without_ttl {
        Some("no TTL, left".to_owned())
    } else if longest_ttl_ms > A_YEAR_MS {
        Some(format!("TTL {} years", longest_ttl_ms / A_YEAR_MS))
    } else {
        None
    };
    RowFigures {
        units: u64::try_from(report.config.stock).unwrap_or(0),
        accepted: report.summary.count(AnswerKind::Won),
        oversold: report.oversold_by,
        duplicate_buyers: report.duplicate_buyers,
        lost: report.stored.lost,
        confirmed: report.stored.confirmed,
        rejected: report.stored.rejected,
        fenced: after.fenced,
        lock_lost: after.lock_lost,
        busy: report.summary.count(AnswerKind::Busy),
        stuck_lock,
        lock_left_without_ttl: after.without_ttl,
        crashed,
        sell_out_ms: report.summary.time_to_sell_out_ms,
        requests_per_second: report.summary.requests_per_second,
        p99_ms: report.summary.p99_us as f64 / 1000.0,
        verified: report.verdict == Verdict::Pass,
    }
}

/// The sale's lock and fence counter after a run.
struct LockAfter {
    /// The lock key exists and has no TTL: nothing will ever remove it.
    without_ttl: bool,
    /// Commits the fence refused.
    fenced: u64,
    /// Buyers answered `503 lock_lost` (the instances' answer tally, which
    /// each flushes to Redis as it stops).
    lock_lost: u64,
}

impl LockAfter {
    async fn read(store: &Store, keys: &SaleKeys) -> anyhow::Result<Self> {
        let mut conn = store.redis().await?;
        let (ttl, fenced, lock_lost): (i64, Option<u64>, Option<u64>) = redis::pipe()
            .pttl(&keys.lock)
            .get(&keys.fenced)
            .hget(&keys.answers, "lock_lost")
            .query_async(&mut conn)
            .await
            .context("reading the lock after the run")?;
        Ok(Self {
            without_ttl: ttl == -1,
            fenced: fenced.unwrap_or(0),
            lock_lost: lock_lost.unwrap_or(0),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::Knob;

    fn run_args() -> LabArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            lab: LabArgs,
        }
        Cli::parse_from(["lab"]).lab
    }

    /// The header is true of every row under it: the rows that run
    /// another workload than the run's say so, with what they change.
    #[test]
    fn the_header_names_every_row_whose_workload_differs() {
        let args = run_args();
        assert_eq!(
            header(&args, &rows::lesson()),
            "seckill lab: 13 rows; each: 2000 buyers (+5% sending twice) race for 10 units \
             on 2 app instances, but\n  \
             article+crash-after-setnx: 1 app instance\n  \
             getset+clock-skew: 1 unit\n  \
             decr+hold-pause: 5 buyers, each sending twice"
        );
        let crash = rows::select(Some(Strategy::Article), Some(Knob::CrashAfterSetnx));
        assert_eq!(
            header(&args, &crash),
            "seckill lab: 1 row (article+crash-after-setnx): \
             2000 buyers (+5% sending twice) race for 10 units on 1 app instance"
        );
        let lock = rows::select(Some(Strategy::Lock), None);
        assert_eq!(
            header(&args, &lock),
            "seckill lab: 2 rows; each: 2000 buyers (+5% sending twice) race for 10 units \
             on 2 app instances"
        );
    }

    /// The clock-skew row's fault is its second instance's clock: asked
    /// for one instance, the run gives that row two, and says so.
    #[test]
    fn a_row_whose_fault_is_its_second_instance_runs_two_of_one_asked() {
        let args = LabArgs {
            instances: 1,
            ..run_args()
        };
        let skew = rows::select(Some(Strategy::Getset), Some(Knob::ClockSkew));
        assert_eq!(
            header(&args, &skew),
            "seckill lab: 1 row (getset+clock-skew): \
             2000 buyers (+5% sending twice) race for 1 unit on 2 app instances"
        );
        let skew = rows::select(Some(Strategy::Lock), Some(Knob::ClockSkew));
        assert_eq!(Workload::of_row(&args, &skew[0]).instances, 2);
    }
}
