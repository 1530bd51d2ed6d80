//! The report of one run: what was asked for, where it ran, what was
//! measured, what PostgreSQL holds and how each check went, and the verdict
//! that becomes the exit code. One value, [`Report`], written three ways,
//! one file each: a table for the terminal (`text.rs`), a versioned JSON
//! document for machines (`json.rs`), and one self-contained HTML page
//! (`html.rs`) with SVG charts drawn by plotters ([`charts`]).
//!
//! The ways to draw are the workspace's, not this report's alone: the
//! tools' reports (the lab, chaos, the bench) lay out their terminal tables
//! with [`Table`] and draw their charts with [`charts`], so that every
//! report of seckill reads and looks alike.

pub mod charts;
mod html;
mod json;
mod table;
mod text;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::stats::{Resources, Summary};
use crate::verify::{Check, Expect};

pub use table::{Align, Table};
pub use text::{micros, side_by_side};

/// Changes whenever a field of the JSON report changes meaning or goes away.
pub(crate) const SCHEMA: &str = "seckill-loadtest/1";

/// How the run ended; the exit code of the load test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every invariant held. Exit code 0.
    Pass,
    /// An invariant broke, whatever else happened in the run: a broken
    /// promise is never excused by errors beside it. Exit code 1.
    Fail,
    /// Every invariant held, but the run itself cannot be trusted
    /// (errors, a saturated generator): its passing checks prove nothing.
    /// Exit code 2.
    Invalid,
}

impl Verdict {
    pub fn exit_code(self) -> u8 {
        match self {
            Verdict::Pass => 0,
            Verdict::Fail => 1,
            Verdict::Invalid => 2,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Invalid => "INVALID",
        }
    }
}

/// What was asked for.
#[derive(Debug, Clone, Serialize)]
pub struct RunConfig {
    pub scenario: crate::scenario::Scenario,
    pub targets: Vec<String>,
    /// App instances the load test started itself (0 with `--target`).
    pub spawned_instances: usize,
    pub sale_id: i64,
    pub stock: i64,
    /// The instances' purchase strategy, when the load test started them.
    pub strategy: Option<String>,
    pub users: u32,
    pub duplicate_fraction: f64,
    /// Requests planned: every buyer once, plus the duplicates.
    pub planned_requests: usize,
    pub rate_per_second: Option<f64>,
    pub duration_s: Option<f64>,
    pub connections: Option<usize>,
    pub expect: Expect,
}

/// Where it ran.
#[derive(Debug, Clone, Serialize)]
pub struct Environment {
    pub os: &'static str,
    pub arch: &'static str,
    pub cpus: usize,
    pub generator: String,
}

impl Environment {
    pub fn here() -> Self {
        Self {
            os: std::env::consts::OS,
            arch: std::env::consts::ARCH,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            generator: format!("seckill-loadtest {}", env!("CARGO_PKG_VERSION")),
        }
    }
}

/// What PostgreSQL holds for the sale after the run.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct StoredOrders {
    /// Units already sold when the run began (an existing sale).
    pub sold_before: u64,
    /// Orders holding a unit.
    pub confirmed: u64,
    /// Orders PostgreSQL refused.
    pub rejected: u64,
    /// `202`s whose order PostgreSQL does not hold at all.
    pub lost: u64,
    /// Buyers none of whose requests got a `202`, but whose `409
    /// already_purchased` named the order they hold: a `202` lost on its
    /// way (a timeout, a dropped connection) and recovered by a retry.
    pub recovered: u64,
}

/// Everything about one run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    pub schema: &'static str,
    /// A short name for the run ("lock", "naive", ...).
    pub label: String,
    pub started_at: DateTime<Utc>,
    pub config: RunConfig,
    pub environment: Environment,
    pub summary: Summary,
    pub generator: Resources,
    pub stored: StoredOrders,
    pub invariants: Vec<Check>,
    pub verdict: Verdict,
    /// Why the run is invalid, when it is.
    pub problems: Vec<String>,
    /// Orders told beyond the stock (the naive strategy's oversell): this
    /// run's `202`s and orders recovered by a retry, with the units sold
    /// before it (`--sale`), less the sale's units; the promise check's
    /// count.
    pub oversold_by: u64,
    /// Buyers who got more than one `202` (the `decr` strategy's race).
    pub duplicate_buyers: u64,
}

impl Report {
    /// Decide the verdict from the problems and the checks. A failed check
    /// comes first: problems in the run (an `error` answer, a connection
    /// that could not be opened) may make a pass worthless, but cannot
    /// make a broken promise less broken.
    pub fn judge(problems: &[String], checks: &[Check]) -> Verdict {
        if !checks.iter().all(|c| c.passed) {
            Verdict::Fail
        } else if !problems.is_empty() {
            Verdict::Invalid
        } else {
            Verdict::Pass
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(passed: bool) -> Check {
        Check {
            name: "a check",
            expected: "1".into(),
            actual: "1".into(),
            passed,
        }
    }

    #[test]
    fn a_broken_promise_fails_whatever_else_happened_and_problems_alone_make_a_run_invalid() {
        assert_eq!(Report::judge(&[], &[check(true)]), Verdict::Pass);
        assert_eq!(
            Report::judge(&[], &[check(true), check(false)]),
            Verdict::Fail
        );
        assert_eq!(
            Report::judge(&["3 errors".into()], &[check(true)]),
            Verdict::Invalid
        );
        assert_eq!(
            Report::judge(&["1 requests failed".into()], &[check(true), check(false)]),
            Verdict::Fail
        );
        assert_eq!(Verdict::Pass.exit_code(), 0);
        assert_eq!(Verdict::Fail.exit_code(), 1);
        assert_eq!(Verdict::Invalid.exit_code(), 2);
    }
}
