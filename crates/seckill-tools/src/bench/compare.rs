//! `seckill bench --json <file>` keeps a run's figures as numbers;
//! `seckill bench --compare <file>` reads such a run and marks every figure
//! of this one that moved past the noise docs/bench.md measured for its
//! row ("Noise, and what --compare marks"). A figure is compared with
//! the row of the same name in the earlier run; a row that one of the
//! two runs did not measure, or whose noise was never measured, is shown
//! as such and not judged.
//!
//! The noise of a row is the spread of its figure over runs of one build
//! on this machine: (largest - smallest) / median. A move within it says
//! nothing; past it, in the row's worse direction, is marked `LOSS`, in
//! its better direction `gain`.

use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::Row;

/// Which way a row's figure gets better.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(super) enum Better {
    Higher,
    Lower,
    /// A figure with no target (measured, no target): any move is news.
    Either,
}

/// A row's figure as a number, beside the text the table shows.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub(super) struct Figure {
    pub(super) value: f64,
    pub(super) better: Better,
}

impl Figure {
    pub(super) fn higher(value: f64) -> Option<Self> {
        Some(Self {
            value,
            better: Better::Higher,
        })
    }

    pub(super) fn lower(value: f64) -> Option<Self> {
        Some(Self {
            value,
            better: Better::Lower,
        })
    }

    pub(super) fn either(value: f64) -> Option<Self> {
        Some(Self {
            value,
            better: Better::Either,
        })
    }
}

/// A run as `--json` writes it and `--compare` reads it.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SavedRun {
    /// The build measured (`git rev-parse --short HEAD`), when known.
    pub(super) commit: Option<String>,
    /// When the run ended, RFC 3339.
    pub(super) date: String,
    pub(super) rows: Vec<SavedRow>,
}

/// One row of a saved run.
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct SavedRow {
    pub(super) figure: String,
    pub(super) measured: String,
    pub(super) target: String,
    pub(super) met: Option<bool>,
    /// `None`: the row was not measured, or has no figure to compare.
    pub(super) value: Option<Figure>,
}

impl SavedRun {
    pub(super) fn of(rows: &[Row], commit: Option<String>) -> Self {
        Self {
            commit,
            date: chrono::Utc::now().to_rfc3339(),
            rows: rows
                .iter()
                .map(|row| SavedRow {
                    figure: row.figure.to_owned(),
                    measured: row.measured.clone(),
                    target: row.target.to_owned(),
                    met: row.met,
                    value: row.value,
                })
                .collect(),
        }
    }

    /// Write the run to `path`, as JSON.
    pub(super) fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("a run always serializes");
        std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
    }

    /// Read a run `--json` wrote. A missing file, or one that is not such
    /// a run, is an error that names the file and what is wrong with it.
    pub(super) fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "--compare {}: cannot read the earlier run (write one with --json <file>)",
                path.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| {
            format!(
                "--compare {}: not a run written by `seckill bench --json`",
                path.display()
            )
        })
    }

    fn value_of(&self, figure: &str) -> Option<f64> {
        let row = self.rows.iter().find(|row| row.figure == figure)?;
        row.value.map(|figure| figure.value)
    }
}

/// The build this run measured, as git names it, when the bench runs in
/// a clone (`None` elsewhere).
pub(super) fn this_commit() -> Option<String> {
    let output = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .ok()?;
    let commit = String::from_utf8(output.stdout).ok()?.trim().to_owned();
    (output.status.success() && !commit.is_empty()).then_some(commit)
}

/// Each row's noise, as a fraction of its figure: the spread of its runs
/// in docs/bench.md ("Noise, and what --compare marks"), which shows the
/// runs each was taken from. A test keeps the two the same.
pub(super) const NOISE: &[(&str, f64)] = &[
    ("burst, 10 units, 2 instances: first send to last win", 1.12),
    ("same burst: p99 of every answer", 5.94),
    (
        "same instances: memory of the larger after every burst (VmRSS)",
        0.19,
    ),
    ("accepted purchases/s on one sale, lock", 0.12),
    (
        "accepted purchases/s on one sale, lua / redis-benchmark running the script",
        0.17,
    ),
    (
        "accepted purchases/s, lock, 3 sales at once: 3-master cluster vs 1 Redis",
        0.26,
    ),
    ("worker drain into PostgreSQL, orders/s", 0.54),
    (
        "worker drain / one server-side INSERT of as many rows",
        0.39,
    ),
    (
        "worker drain of --drain-orders-large / one INSERT of as many rows",
        0.19,
    ),
    ("idle worker: 202 to order confirmed, p50", 0.07),
    ("sold-out answers / bare actix handler (wrk)", 0.03),
    ("storefront index, 20 sales / sale page (wrk)", 0.17),
    ("storefront index, 1,000 sales / 20 sales (wrk)", 0.18),
    (
        "an instance's memory after ended sales: --ended-sales vs 10",
        0.07,
    ),
    (
        "accepted purchases/s on a live sale after ended sales: --ended-sales vs 10",
        0.21,
    ),
];

/// The noise docs/bench.md measured for `figure`, if it did.
pub(super) fn noise_of(figure: &str) -> Option<f64> {
    NOISE
        .iter()
        .find(|(name, _)| *name == figure)
        .map(|(_, noise)| *noise)
}

/// What a figure did since the earlier run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Moved {
    /// Within its noise: nothing to say.
    Within { change: f64 },
    /// Past its noise, the worse way.
    Loss { change: f64, noise: f64 },
    /// Past its noise, the better way (or either way, for a row with no
    /// target).
    Gain { change: f64, noise: f64 },
    /// Its noise was never measured: shown, not judged.
    NoNoise { change: f64 },
    /// One of the two runs has no figure for the row.
    Unmeasured,
}

/// Judge `now` against the earlier figure `before`, with `noise` (a
/// fraction of the figure). The change is relative to `before`.
pub(super) fn judge(now: Figure, before: f64, noise: Option<f64>) -> Moved {
    if before == 0.0 || !before.is_finite() || !now.value.is_finite() {
        return Moved::Unmeasured;
    }
    let change = (now.value - before) / before.abs();
    let Some(noise) = noise else {
        return Moved::NoNoise { change };
    };
    if change.abs() <= noise {
        return Moved::Within { change };
    }
    let worse = match now.better {
        Better::Higher => change < 0.0,
        Better::Lower => change > 0.0,
        Better::Either => false,
    };
    if worse {
        Moved::Loss { change, noise }
    } else {
        Moved::Gain { change, noise }
    }
}

impl Moved {
    /// The text of the table's comparison column.
    pub(super) fn shown(self) -> String {
        let percent = |change: f64| format!("{:+.0}%", change * 100.0);
        match self {
            Self::Within { change } => format!("{} (within noise)", percent(change)),
            Self::Loss { change, noise } => {
                format!("{} LOSS (noise {:.0}%)", percent(change), noise * 100.0)
            }
            Self::Gain { change, noise } => {
                format!("{} gain (noise {:.0}%)", percent(change), noise * 100.0)
            }
            Self::NoNoise { change } => format!("{} (noise not measured)", percent(change)),
            Self::Unmeasured => "-".to_owned(),
        }
    }
}

/// Each row of this run against the earlier run's row of the same name.
pub(super) fn compare_rows(rows: &[Row], earlier: &SavedRun) -> Vec<Moved> {
    rows.iter()
        .map(|row| match (row.value, earlier.value_of(row.figure)) {
            (Some(now), Some(before)) => judge(now, before, noise_of(row.figure)),
            _ => Moved::Unmeasured,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_row_that_fell_past_its_noise_is_marked_and_one_within_is_not() {
        let drain = |value| Figure::higher(value).expect("a figure");
        // 30% slower against a noise of 15%: a loss.
        assert!(matches!(
            judge(drain(35_000.0), 50_000.0, Some(0.15)),
            Moved::Loss { .. }
        ));
        // 10% slower: within.
        assert!(matches!(
            judge(drain(45_000.0), 50_000.0, Some(0.15)),
            Moved::Within { .. }
        ));
        // A latency that grew past its noise is a loss; one that fell, a gain.
        let p50 = |value| Figure::lower(value).expect("a figure");
        assert!(matches!(
            judge(p50(4.0), 3.0, Some(0.08)),
            Moved::Loss { .. }
        ));
        assert!(matches!(
            judge(p50(2.0), 3.0, Some(0.08)),
            Moved::Gain { .. }
        ));
        // No noise measured: shown, never judged.
        assert!(matches!(
            judge(drain(1.0), 50_000.0, None),
            Moved::NoNoise { .. }
        ));
        assert!(
            judge(drain(35_000.0), 50_000.0, Some(0.15))
                .shown()
                .contains("LOSS")
        );
        assert!(
            !judge(drain(45_000.0), 50_000.0, Some(0.15))
                .shown()
                .contains("LOSS")
        );
    }

    #[test]
    fn every_noise_is_the_one_docs_bench_md_states() {
        let page = include_str!("../../../../docs/bench.md");
        for (figure, noise) in NOISE {
            let line = page
                .lines()
                .find(|line| line.starts_with(&format!("| {figure} |")))
                .unwrap_or_else(|| panic!("docs/bench.md's noise table has no row {figure}"));
            let stated = format!("| {:.0}% |", noise * 100.0);
            assert!(
                line.trim_end().ends_with(&stated),
                "docs/bench.md states another noise for {figure}: {line} (the code: {stated})"
            );
        }
    }

    #[test]
    fn a_missing_or_garbled_earlier_run_is_a_clear_error() {
        let dir = tempfile::tempdir().expect("a directory");
        let missing = dir.path().join("none.json");
        let error = format!("{:#}", SavedRun::read(&missing).expect_err("missing"));
        assert!(error.contains("cannot read the earlier run"), "{error}");
        assert!(error.contains("none.json"), "{error}");
        let garbled = dir.path().join("garbled.json");
        std::fs::write(&garbled, "{\"rows\": 3").expect("written");
        let error = format!("{:#}", SavedRun::read(&garbled).expect_err("garbled"));
        assert!(error.contains("not a run written by"), "{error}");
    }
}
