//! seckill's load test: thousands of buyers over HTTP, then the promise
//! checked in PostgreSQL and Redis.
//!
//! One run ([`load_test`]) goes through five phases, each shown as it
//! happens ([`progress`]):
//!
//! 1. **connect**: open the connections ([`http`]);
//! 2. **release** (or **send**): fire the buyers ([`scenario`]) and classify
//!    every answer by meaning ([`answer`]);
//! 3. **settle**: wait, bounded, until the worker has drained the sale's queue;
//! 4. **verify**: check every invariant in PostgreSQL and Redis ([`mod@verify`]);
//! 5. **report**: percentiles, timeline and resources ([`stats`]) as a
//!    terminal table, JSON and HTML ([`report`]).
//!
//! This crate talks to the app only over HTTP, and to PostgreSQL and Redis
//! only to verify. Starting app instances is the caller's business: the
//! `seckill-loadtest` binary and the `seckill demo` command (both of
//! `crates/seckill`) do it, through the load-test runner of
//! `crates/seckill-tools`.

pub mod answer;
pub mod http;
pub mod progress;
pub mod report;
pub mod scenario;
pub mod stats;
pub mod verify;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use redis::aio::ConnectionLike;
use sqlx::PgPool;
use uuid::Uuid;

use crate::answer::AnswerKind;
use crate::progress::Progress;
use crate::report::{Environment, Report, RunConfig};
use crate::scenario::{Plan, RunData, Scenario, Shape};
use crate::stats::{CpuClock, Summary};
use crate::verify::{Expect, Findings, RedisKeys, RunFacts, queue_depth, verify};

/// Share of late sends above which a `rate` run says the generator could not
/// keep up, and is invalid.
const MAX_LATE_SHARE: f64 = 0.01;

/// How the load is shaped and what the run must show. Shared by
/// `seckill-loadtest` and `seckill demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// How to send the load.
    #[arg(long, value_enum, default_value_t = Scenario::Burst)]
    pub scenario: Scenario,

    /// Distinct buyers.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub users: u32,

    /// Fraction of buyers who also fire a second request at the same moment (0 to 1).
    #[arg(long, default_value_t = 0.05, value_parser = fraction)]
    pub dup: f64,

    /// Requests per second (`rate` scenario).
    #[arg(long, default_value_t = 1000.0, value_parser = positive)]
    pub rate: f64,

    /// Seconds to keep sending (`rate`, `closed`) [default: send each buyer's requests once].
    #[arg(long, value_parser = seconds)]
    pub duration: Option<f64>,

    /// Connections (`rate`, `closed`); a burst opens one per request.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u64).range(1..=20_000))]
    pub connections: u64,

    /// What the run must show: `no-oversell`; `oversell` for the deliberately broken naive strategy; `observe` to check only PostgreSQL's word (no buyer twice, nothing lost).
    #[arg(long, value_enum, default_value_t = Expect::NoOversell)]
    pub expect: Expect,

    /// Seconds to wait for the worker to drain the sale's queue before verifying.
    #[arg(long, default_value_t = 30)]
    pub settle_secs: u64,

    /// Write the report as JSON here.
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Write the report as one self-contained HTML file here.
    #[arg(long)]
    pub html: Option<PathBuf>,
}

/// A rate: requests per second, above zero.
fn positive(raw: &str) -> Result<f64, String> {
    above_zero(raw, 10_000_000.0, "a number")
}

/// A duration: seconds, above zero, at most a day.
pub fn seconds(raw: &str) -> Result<f64, String> {
    above_zero(raw, 86_400.0, "a number of seconds")
}

/// A finite number in (0, max]; `what` names it in the error. Rejecting
/// NaN, infinities and huge values here keeps them from panicking later in
/// `Duration::from_secs_f64`, after the run has started things.
fn above_zero(raw: &str, max: f64, what: &str) -> Result<f64, String> {
    match raw.parse::<f64>() {
        Ok(value) if value.is_finite() && value > 0.0 && value <= max => Ok(value),
        _ => Err(format!("{raw} is not {what} above 0 (and at most {max})")),
    }
}

/// A fraction: a number from 0 to 1.
pub fn fraction(raw: &str) -> Result<f64, String> {
    let value: f64 = raw
        .parse()
        .map_err(|_| format!("{raw:?} is not a number"))?;
    if (0.0..=1.0).contains(&value) {
        Ok(value)
    } else {
        Err(format!("{value} is not between 0 and 1"))
    }
}

/// The sale under load, the instances serving it, and where to verify it.
/// `R` is a connection to the Redis the app uses, one server or a cluster:
/// the caller knows which.
pub struct Subject<R> {
    /// Base URLs of the app instances.
    pub targets: Vec<String>,
    /// How many of them the caller started for this run.
    pub spawned: usize,
    /// Their purchase strategy, when the caller knows it.
    pub strategy: Option<String>,
    pub sale_id: i64,
    pub stock: i64,
    pub pg: PgPool,
    pub redis: R,
    pub keys: RedisKeys,
}

/// Run the load, verify, and report. Errors are failures to run at all;
/// a run that ran but broke a promise or was invalid is a [`Report`] with
/// that verdict.
pub async fn load_test<R: ConnectionLike + Send>(
    subject: &mut Subject<R>,
    args: &LoadArgs,
    label: &str,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let started_at = Utc::now();
    let mut targets = Vec::new();
    for url in &subject.targets {
        targets.push(http::Target::resolve(url).await?);
    }
    let plan = Arc::new(Plan::new(subject.sale_id, args.users, args.dup, targets));
    // Units already sold (an existing sale given with --sale) were promised
    // before this run; the checks count them with this run's 202s.
    let before = verify::holders(&subject.pg, subject.sale_id).await?;
    let clock = CpuClock::start();
    let run = scenario::run(&plan, args.shape(), progress).await?;
    let generator = clock.stop();
    let summary = Summary::from_run(&run, args.scenario);
    let problems = problems(&summary);

    settle(subject, args, progress).await?;
    let facts = run_facts(subject.stock, &plan, &run, &before);
    let findings = check_invariants(subject, args.expect, &facts, progress).await?;

    let report = Report {
        schema: report::SCHEMA,
        label: label.to_owned(),
        started_at,
        config: run_config(subject, args, &plan),
        environment: Environment::here(),
        verdict: Report::judge(&problems, &findings.checks),
        oversold_by: findings.oversold_by,
        duplicate_buyers: findings.duplicate_buyers,
        summary,
        generator,
        stored: report::StoredOrders {
            sold_before: before.len() as u64,
            confirmed: findings.confirmed,
            rejected: findings.rejected,
            lost: findings.lost,
            recovered: facts.recovered.len() as u64,
        },
        invariants: findings.checks,
        problems,
    };
    if let Some(path) = &args.json {
        write(path, &report.to_json())?;
    }
    if let Some(path) = &args.html {
        write(path, &report.to_html())?;
    }
    Ok(report)
}

impl LoadArgs {
    /// How the scenario runs.
    fn shape(&self) -> Shape {
        Shape {
            scenario: self.scenario,
            rate: self.rate,
            duration: self.duration.map(Duration::from_secs_f64),
            connections: self.connections as usize,
        }
    }
}

/// What the run did, as the buyers saw it, for the verifier: the sale
/// of `stock` units `plan` sent to. `before` holds the orders that held a
/// unit before the run began.
fn run_facts(stock: i64, plan: &Plan, run: &RunData, before: &[(String, Uuid)]) -> RunFacts {
    // Buyers who were answered: a buyer whose every request came back busy
    // or failed never competed for a unit, so the check that every unit
    // found a buyer does not count them.
    let mut asked: Vec<u32> = run
        .samples
        .iter()
        .filter(|s| !matches!(s.outcome, AnswerKind::Busy | AnswerKind::Error))
        .map(|s| s.user)
        .collect();
    asked.sort_unstable();
    asked.dedup();
    let won: Vec<(String, Uuid)> = run
        .samples
        .iter()
        .filter(|s| s.outcome == AnswerKind::Won)
        .filter_map(|s| s.order_id.map(|id| (plan.user_id(s.user), id)))
        .collect();
    // Every order a `409 already_purchased` named: a winner's must be
    // their `202`'s (the verifier checks it). A buyer told no `202` whose
    // retry's `409` named the order they hold: the `202` was lost on its
    // way, and the retry told them.
    let named: Vec<(String, Uuid)> = run
        .samples
        .iter()
        .filter(|s| s.outcome == AnswerKind::Duplicate)
        .filter_map(|s| s.order_id.map(|id| (plan.user_id(s.user), id)))
        .collect();
    let winners: BTreeSet<&str> = won.iter().map(|(user, _)| user.as_str()).collect();
    let mut recovered: Vec<(String, Uuid)> = named
        .iter()
        .filter(|(user, _)| !winners.contains(user.as_str()))
        .cloned()
        .collect();
    recovered.sort_unstable();
    recovered.dedup();
    let times = |outcome: AnswerKind, at: fn(&scenario::Sample) -> u64| -> Vec<u64> {
        run.samples
            .iter()
            .filter(|s| s.outcome == outcome)
            .map(at)
            .collect()
    };
    RunFacts {
        sale_id: plan.sale_id,
        stock,
        // This run's user ids carry its tag: none of them bought before.
        distinct_buyers: before.len() + asked.len(),
        accepted: before.iter().cloned().chain(won).collect(),
        recovered,
        named,
        sold_out_done_us: times(AnswerKind::SoldOut, |s| s.done_us),
        won_sent_us: times(AnswerKind::Won, |s| s.sent_us),
    }
}

/// The verify phase: check every invariant, and show how many failed.
async fn check_invariants<R: ConnectionLike + Send>(
    subject: &mut Subject<R>,
    expect: Expect,
    facts: &RunFacts,
    progress: &Progress,
) -> anyhow::Result<Findings> {
    let checking = progress.phase("verify", None);
    let findings = verify(
        &subject.pg,
        &mut subject.redis,
        &subject.keys,
        facts,
        expect,
    )
    .await?;
    let failed = findings.checks.iter().filter(|c| !c.passed).count();
    checking.finish(&format!(
        "{} checks, {failed} failed",
        findings.checks.len()
    ));
    Ok(findings)
}

/// What was asked for, as the report records it.
fn run_config<R>(subject: &Subject<R>, args: &LoadArgs, plan: &Plan) -> RunConfig {
    RunConfig {
        scenario: args.scenario,
        targets: subject.targets.clone(),
        spawned_instances: subject.spawned,
        sale_id: subject.sale_id,
        stock: subject.stock,
        strategy: subject.strategy.clone(),
        users: args.users,
        duplicate_fraction: args.dup,
        planned_requests: plan.requests.len(),
        rate_per_second: (args.scenario == Scenario::Rate).then_some(args.rate),
        duration_s: args.duration,
        connections: (args.scenario != Scenario::Burst).then_some(args.connections as usize),
        expect: args.expect,
    }
}

/// Why the figures of a run cannot be trusted, if they cannot.
fn problems(summary: &Summary) -> Vec<String> {
    let mut problems = Vec::new();
    if summary.requests == 0 {
        problems.push("no request was answered: the run measured nothing".to_owned());
    }
    if summary.connect_errors > 0 {
        problems.push(format!(
            "{} connections could not be opened",
            summary.connect_errors
        ));
    }
    let errors = summary.count(AnswerKind::Error);
    if errors > 0 {
        problems.push(format!(
            "{errors} requests failed (5xx, unexpected answers or broken connections)"
        ));
    }
    if summary.dropped_sends > 0 {
        problems.push(format!(
            "{} sends dropped: the generator could not keep the rate",
            summary.dropped_sends
        ));
    }
    let late_share = summary.late_sends as f64 / summary.requests.max(1) as f64;
    if late_share > MAX_LATE_SHARE {
        problems.push(format!(
            "{:.1}% of sends left more than 10 ms late: the generator is saturated; lower --rate or raise --connections",
            late_share * 100.0
        ));
    }
    problems
}

/// Wait until the worker has drained the sale's queue, or the time is up
/// (then the "queue empty" check fails and says so).
async fn settle<R: ConnectionLike + Send>(
    subject: &mut Subject<R>,
    args: &LoadArgs,
    progress: &Progress,
) -> anyhow::Result<()> {
    let phase = progress.phase("settle", None);
    let deadline = Instant::now() + Duration::from_secs(args.settle_secs);
    loop {
        let depth = queue_depth(&mut subject.redis, &subject.keys)
            .await
            .context("reading the queue")?;
        let left = depth.waiting + depth.in_flight;
        if left == 0 {
            phase.finish("queue drained");
            return Ok(());
        }
        if Instant::now() >= deadline {
            phase.finish(&format!(
                "{left} jobs still queued after {}s",
                args.settle_secs
            ));
            return Ok(());
        }
        phase.message(&format!("{left} orders still queued"));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Write `content` to `path`, creating its directory first: how every
/// report is written (the lab's table too).
pub fn write(path: &std::path::Path, content: &str) -> anyhow::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    }
    std::fs::write(path, content).with_context(|| format!("writing {}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_that_got_no_answer_is_invalid() {
        let summary = Summary::from_run(&scenario::RunData::default(), Scenario::Closed);
        assert_eq!(
            problems(&summary),
            ["no request was answered: the run measured nothing"]
        );
    }

    /// A sample of buyer `user`, sent at `sent_ms` and answered 1 ms later.
    fn told(user: u32, outcome: AnswerKind, order: Option<Uuid>, sent_ms: u64) -> scenario::Sample {
        scenario::Sample {
            user,
            outcome,
            order_id: order,
            unconfirmed: false,
            instance: None,
            status: Some(if outcome == AnswerKind::Won { 202 } else { 409 }),
            retry_after: false,
            intended_us: sent_ms * 1_000,
            sent_us: sent_ms * 1_000,
            done_us: (sent_ms + 1) * 1_000,
        }
    }

    /// The verifier sees every `409` that named an order, a winner's too
    /// (so that one naming another order than their `202` is caught), and
    /// when each `sold_out` was in and each winning purchase was sent.
    #[test]
    fn the_facts_keep_a_winners_409_and_the_moments_of_sold_out_and_wins() {
        let plan = Plan::new(7, 3, 0.0, Vec::new());
        let (won, other, late) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
        let run = RunData {
            samples: vec![
                told(0, AnswerKind::Won, Some(won), 6),
                told(0, AnswerKind::Duplicate, Some(other), 7),
                told(1, AnswerKind::SoldOut, None, 4),
                told(2, AnswerKind::Duplicate, Some(late), 8),
            ],
            ..RunData::default()
        };
        let facts = run_facts(10, &plan, &run, &[]);
        assert_eq!(
            facts.named,
            [(plan.user_id(0), other), (plan.user_id(2), late)]
        );
        assert_eq!(facts.recovered, [(plan.user_id(2), late)]);
        assert_eq!(facts.sold_out_done_us, [5_000]);
        assert_eq!(facts.won_sent_us, [6_000]);
        assert_eq!((facts.sale_id, facts.stock), (7, 10));
    }

    #[test]
    fn rates_and_durations_must_be_finite_and_positive() {
        assert!(positive("250").is_ok());
        assert!(seconds("0.5").is_ok());
        for bad in ["0", "-1", "nan", "inf", "1e30", "x"] {
            assert!(positive(bad).is_err(), "{bad}");
            assert!(seconds(bad).is_err(), "{bad}");
        }
    }
}
