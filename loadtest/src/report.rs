//! The report of one run: a table for the terminal, a versioned JSON
//! document for machines, and one self-contained HTML file with SVG charts
//! (drawn with plotters) for people.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use chrono::{DateTime, Utc};
use plotters::prelude::*;
use serde::Serialize;

use crate::outcome::Outcome;
use crate::stats::{Resources, Summary};
use crate::verify::{Check, Expect};

/// Changes whenever a field of the JSON report changes meaning or goes away.
pub const SCHEMA: &str = "seckill-loadtest/1";

/// How the run ended; the exit code of the load test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Every invariant held. Exit code 0.
    Pass,
    /// An invariant broke. Exit code 1.
    Fail,
    /// The run itself cannot be trusted (errors, a saturated generator);
    /// its invariants say nothing. Exit code 2.
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
pub struct Stored {
    /// Units already sold when the run began (an existing sale).
    pub sold_before: u64,
    /// Orders holding a unit.
    pub confirmed: u64,
    /// Orders PostgreSQL refused.
    pub rejected: u64,
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
    pub stored: Stored,
    pub invariants: Vec<Check>,
    pub verdict: Verdict,
    /// Why the run is invalid, when it is.
    pub problems: Vec<String>,
    /// Winning answers beyond the stock (the naive strategy's oversell).
    pub oversold_by: u64,
}

impl Report {
    /// Decide the verdict from the problems and the checks.
    pub fn judge(problems: &[String], checks: &[Check]) -> Verdict {
        if !problems.is_empty() {
            Verdict::Invalid
        } else if checks.iter().all(|c| c.passed) {
            Verdict::Pass
        } else {
            Verdict::Fail
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// The report as a terminal table.
    pub fn to_text(&self) -> String {
        let (c, s) = (&self.config, &self.summary);
        let mut out = String::new();
        let duplicates = c.planned_requests.saturating_sub(c.users as usize);
        let _ = writeln!(
            out,
            "\n== {}: {} of {} buyers (+{} duplicates) on {} instance(s), sale {} with {} units{} ==",
            self.label,
            c.scenario.as_str(),
            c.users,
            duplicates,
            c.targets.len(),
            c.sale_id,
            c.stock,
            c.strategy
                .as_deref()
                .map(|s| format!(", strategy {s}"))
                .unwrap_or_default(),
        );
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "outcome", "count", "p50", "p90", "p99", "p99.9", "max"
        );
        for latency in &s.latency {
            let [outcome, count, p50, p90, p99, p999, max] = cells(latency);
            let _ = writeln!(
                out,
                "{outcome:<12} {count:>8} {p50:>9} {p90:>9} {p99:>9} {p999:>9} {max:>9}"
            );
        }
        let _ = writeln!(
            out,
            "{} answers in {:.2} s = {:.0} requests/s",
            s.requests,
            s.wall_ms / 1000.0,
            s.requests_per_second
        );
        if let Some(skew) = s.launch_skew_us {
            let _ = writeln!(
                out,
                "launch skew (first to last send after the release): {}",
                micros(skew)
            );
        }
        let _ = match s.time_to_sell_out_ms {
            Some(ms) => writeln!(
                out,
                "sold out: the last winning answer came {ms:.1} ms after the start"
            ),
            None if s.count(Outcome::SoldOut) > 0 => {
                writeln!(out, "sold out before this run won anything")
            }
            None => writeln!(out, "not sold out"),
        };
        if c.scenario == crate::scenario::Scenario::Rate {
            let _ = writeln!(
                out,
                "late sends (> 10 ms after due): {}, dropped sends: {}",
                s.late_sends, s.dropped_sends
            );
        }
        if !s.won_by_instance.is_empty() {
            let _ = writeln!(
                out,
                "winners by instance: {}",
                by_instance(&s.won_by_instance)
            );
        }
        if !s.answers_by_instance.is_empty() {
            let _ = writeln!(
                out,
                "answers by instance: {}",
                by_instance(&s.answers_by_instance)
            );
        }
        let g = &self.generator;
        let _ = writeln!(
            out,
            "generator (connecting included): {:.0} ms CPU over {:.0} ms = {:.2} cores ({:.0}% of the machine), peak memory {:.0} MiB",
            g.cpu_ms,
            g.wall_ms,
            g.cores_used,
            g.machine_share * 100.0,
            g.peak_rss_mib
        );
        let _ = writeln!(
            out,
            "PostgreSQL: {} orders confirmed{}, {} refused",
            self.stored.confirmed,
            if self.stored.sold_before > 0 {
                format!(" ({} of them before this run)", self.stored.sold_before)
            } else {
                String::new()
            },
            self.stored.rejected
        );
        if !self.invariants.is_empty() {
            let _ = writeln!(out, "checks:");
            for check in &self.invariants {
                let _ = writeln!(
                    out,
                    "  {} {}: expected {}, found {}",
                    if check.passed { "pass" } else { "FAIL" },
                    check.name,
                    check.expected,
                    check.actual
                );
            }
        }
        for problem in &self.problems {
            let _ = writeln!(out, "  INVALID RUN: {problem}");
        }
        let _ = writeln!(out, "verdict: {}", self.verdict.as_str());
        out
    }

    /// One self-contained HTML page: no scripts, no external files.
    pub fn to_html(&self) -> String {
        let mut rows = String::new();
        for latency in &self.summary.latency {
            let _ = write!(
                rows,
                "<tr><td>{}</td></tr>",
                cells(latency).join("</td><td>")
            );
        }
        let mut checks = String::new();
        for check in &self.invariants {
            let _ = write!(
                checks,
                "<tr class=\"{}\"><td>{}</td><td class=\"text\">{}</td><td>{}</td><td>{}</td></tr>",
                if check.passed { "pass" } else { "fail" },
                if check.passed { "pass" } else { "FAIL" },
                escape(check.name),
                escape(&check.expected),
                escape(&check.actual)
            );
        }
        for problem in &self.problems {
            let _ = write!(
                checks,
                "<tr class=\"fail\"><td>INVALID</td><td colspan=\"3\">{}</td></tr>",
                escape(problem)
            );
        }
        format!(
            r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seckill load test: {label}</title>
<style>
body {{ font: 16px/1.5 system-ui, sans-serif; color: #111; max-width: 60rem; margin: 0 auto; padding: 1rem; }}
table {{ border-collapse: collapse; margin: 1rem 0; }}
td, th {{ border-bottom: 1px solid #ccc; padding: .25rem .75rem; text-align: right; }}
td:first-child, th:first-child, .text {{ text-align: left; }}
tr.fail td {{ color: #a11; font-weight: 600; }}
.verdict {{ font-size: 1.5rem; font-weight: 700; }}
.verdict.PASS {{ color: #0a6b2d; }} .verdict.FAIL, .verdict.INVALID {{ color: #a11; }}
svg {{ max-width: 100%; height: auto; }}
pre {{ background: #f4f4f4; padding: .5rem; white-space: pre-wrap; }}
</style></head><body>
<h1>seckill load test: {label}</h1>
<p class="verdict {verdict}">{verdict}</p>
<pre>{text}</pre>
<h2>Outcomes over time</h2>
{timeline}
<h2>Latency by percentile</h2>
{percentiles}
<h2>Latency by outcome</h2>
<table><tr><th>outcome</th><th>count</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>{rows}</table>
<h2>Checks</h2>
<table><tr><th></th><th class=\"text\">check</th><th>expected</th><th>found</th></tr>{checks}</table>
<p>Started {started}. Schema {schema}.</p>
</body></html>
"#,
            label = escape(&self.label),
            verdict = self.verdict.as_str(),
            text = escape(&self.to_text()),
            timeline = self.timeline_svg(),
            percentiles = self.percentile_svg(),
            started = self.started_at.to_rfc3339(),
            schema = SCHEMA,
        )
    }

    /// Answers per 100 ms, one line per outcome, the sell-out marked.
    fn timeline_svg(&self) -> String {
        /// Where a bucket with no answer is drawn on the log scale.
        const FLOOR: f64 = 0.5;
        let s = &self.summary;
        let end_s = (s.timeline.len().max(1) as f64) / 10.0;
        let peak = s
            .timeline
            .iter()
            .flat_map(|b| b.counts.values())
            .copied()
            .max()
            .unwrap_or(1)
            .max(1) as f64;
        svg_chart(|root| {
            // Log scale: ten winners must show beside thousands of
            // "sold out"; an empty bucket sits on the floor, at 0.5.
            let mut chart = ChartBuilder::on(root)
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..end_s, (FLOOR..peak * 2.0).log_scale())?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(235, 235, 235))
                .y_label_formatter(&|n| {
                    if *n < 1.0 {
                        "0".to_owned()
                    } else {
                        format!("{n:.0}")
                    }
                })
                .x_desc("seconds after the start")
                .y_desc("answers per 100 ms (log scale)")
                .draw()?;
            for (i, outcome) in Outcome::ALL.iter().enumerate() {
                if s.count(*outcome) == 0 {
                    continue;
                }
                let color = Palette99::pick(i).to_rgba();
                // A step per bucket: the count holds for its 100 ms.
                let points = s.timeline.iter().flat_map(|b| {
                    let (from, n) = (
                        b.t_ms as f64 / 1000.0,
                        (b.counts.get(outcome).copied().unwrap_or(0) as f64).max(FLOOR),
                    );
                    [(from, n), (from + 0.1, n)]
                });
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                    .label(outcome.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            if let Some(ms) = s.time_to_sell_out_ms {
                let x = ms / 1000.0;
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(x, FLOOR), (x, peak * 2.0)],
                        BLACK.stroke_width(1),
                    )))?
                    .label(format!("sold out at {ms:.0} ms"))
                    .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
            }
            chart
                .configure_series_labels()
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
        })
    }

    /// Latency (ms, log scale) at each percentile, one line per outcome.
    fn percentile_svg(&self) -> String {
        const LABELS: [&str; 9] = ["50", "75", "90", "95", "99", "99.5", "99.9", "99.99", "max"];
        let s = &self.summary;
        let highest = s
            .latency
            .iter()
            .map(|l| l.max_us)
            .max()
            .unwrap_or(1000)
            .max(1000) as f64
            / 1000.0;
        let lowest = s
            .latency
            .iter()
            .filter_map(|l| l.curve.first().map(|(_, us)| *us))
            .min()
            .unwrap_or(10)
            .max(10) as f64
            / 1000.0;
        svg_chart(|root| {
            let mut chart = ChartBuilder::on(root)
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..8f64, (lowest / 2.0..highest * 2.0).log_scale())?;
            chart
                .configure_mesh()
                .light_line_style(RGBColor(235, 235, 235))
                .x_labels(9)
                .x_label_formatter(&|x| {
                    LABELS
                        .get(x.round().max(0.0) as usize)
                        .copied()
                        .unwrap_or("")
                        .to_owned()
                })
                .x_desc("percentile")
                .y_label_formatter(&|ms| format!("{ms}"))
                .y_desc("latency (ms, log scale)")
                .draw()?;
            for latency in &s.latency {
                let color = Palette99::pick(latency.outcome.index()).to_rgba();
                let points = latency
                    .curve
                    .iter()
                    .enumerate()
                    .map(|(i, (_, us))| (i as f64, (*us as f64 / 1000.0).max(lowest / 2.0)));
                chart
                    .draw_series(LineSeries::new(points, color.stroke_width(2)))?
                    .label(latency.outcome.as_str())
                    .legend(move |(x, y)| {
                        PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
                    });
            }
            chart
                .configure_series_labels()
                .position(SeriesLabelPosition::UpperLeft)
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
        })
    }
}

/// Draw one 900×360 chart into an SVG string; a drawing error becomes a
/// note in the page rather than a failed run.
fn svg_chart<E: std::fmt::Display>(
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, plotters::coord::Shift>) -> Result<(), E>,
) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, (900, 360)).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root).map_err(|e| e.to_string()))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    match drawn {
        Ok(()) => svg,
        Err(error) => format!("<p>chart unavailable: {}</p>", escape(&error)),
    }
}

/// Two or more reports side by side, for the demo's lock-versus-naive finale.
pub fn side_by_side(reports: &[&Report]) -> String {
    let mut out = String::new();
    let row = |out: &mut String, name: &str, cells: Vec<String>| {
        let _ = write!(out, "{name:<38}");
        for cell in cells {
            let _ = write!(out, " {cell:>16}");
        }
        let _ = writeln!(out);
    };
    row(
        &mut out,
        "",
        reports.iter().map(|r| r.label.clone()).collect(),
    );
    row(
        &mut out,
        "units for sale",
        reports.iter().map(|r| r.config.stock.to_string()).collect(),
    );
    row(
        &mut out,
        "buyers told \"you got one\" (202)",
        reports
            .iter()
            .map(|r| r.summary.count(Outcome::Won).to_string())
            .collect(),
    );
    row(
        &mut out,
        "units sold beyond the stock",
        reports.iter().map(|r| r.oversold_by.to_string()).collect(),
    );
    row(
        &mut out,
        "orders confirmed by PostgreSQL",
        reports
            .iter()
            .map(|r| r.stored.confirmed.to_string())
            .collect(),
    );
    row(
        &mut out,
        "orders refused by PostgreSQL",
        reports
            .iter()
            .map(|r| r.stored.rejected.to_string())
            .collect(),
    );
    row(
        &mut out,
        "p99 of winning answers",
        reports
            .iter()
            .map(|r| {
                r.summary
                    .latency(Outcome::Won)
                    .map_or("-".to_owned(), |l| micros(l.p99_us))
            })
            .collect(),
    );
    row(
        &mut out,
        "time to sell out",
        reports
            .iter()
            .map(|r| {
                r.summary
                    .time_to_sell_out_ms
                    .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"))
            })
            .collect(),
    );
    row(
        &mut out,
        "verdict",
        reports
            .iter()
            .map(|r| r.verdict.as_str().to_owned())
            .collect(),
    );
    out
}

/// A latency row: outcome, count, p50, p90, p99, p99.9, max.
fn cells(latency: &crate::stats::Latency) -> [String; 7] {
    [
        latency.outcome.as_str().to_owned(),
        latency.count.to_string(),
        micros(latency.p50_us),
        micros(latency.p90_us),
        micros(latency.p99_us),
        micros(latency.p999_us),
        micros(latency.max_us),
    ]
}

fn by_instance(counts: &BTreeMap<String, u64>) -> String {
    counts
        .iter()
        .map(|(instance, n)| format!("{instance} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A latency for people: 850µs, 12.3ms, 1.24s.
pub fn micros(us: u64) -> String {
    match us {
        0..1_000 => format!("{us}µs"),
        1_000..1_000_000 => format!("{:.1}ms", us as f64 / 1000.0),
        _ => format!("{:.2}s", us as f64 / 1_000_000.0),
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
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
    fn problems_make_a_run_invalid_whatever_its_checks_say() {
        assert_eq!(Report::judge(&[], &[check(true)]), Verdict::Pass);
        assert_eq!(
            Report::judge(&[], &[check(true), check(false)]),
            Verdict::Fail
        );
        assert_eq!(
            Report::judge(&["3 errors".into()], &[check(true)]),
            Verdict::Invalid
        );
        assert_eq!(Verdict::Pass.exit_code(), 0);
        assert_eq!(Verdict::Fail.exit_code(), 1);
        assert_eq!(Verdict::Invalid.exit_code(), 2);
    }

    #[test]
    fn latencies_read_naturally() {
        assert_eq!(micros(850), "850µs");
        assert_eq!(micros(12_345), "12.3ms");
        assert_eq!(micros(1_240_000), "1.24s");
    }

    #[test]
    fn html_escapes_what_it_did_not_write() {
        assert_eq!(escape("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
