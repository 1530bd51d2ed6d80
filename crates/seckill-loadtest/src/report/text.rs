//! The report as plain text for the terminal: a headline, latency by
//! outcome, the run's timing and where the answers came from, what
//! PostgreSQL holds, every check, and the verdict. Also the side-by-side
//! table the demo ends with, and how a latency reads for people. The
//! tables are [`Table`]s.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::Report;
use super::table::{Align, Table};
use crate::answer::AnswerKind;

impl Report {
    /// The report as a terminal table, one section after another.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        self.write_headline(&mut out);
        self.write_latency_table(&mut out);
        self.write_timing(&mut out);
        self.write_instances(&mut out);
        self.write_generator(&mut out);
        self.write_stored(&mut out);
        self.write_checks(&mut out);
        self.write_verdict(&mut out);
        out
    }

    /// `== label: what was sent, to where, for which sale ==`.
    fn write_headline(&self, out: &mut String) {
        let c = &self.config;
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
    }

    /// Count and latency percentiles, one row per outcome.
    fn write_latency_table(&self, out: &mut String) {
        let mut table = Table::new().gap(1).column("outcome", Align::Left, 12);
        for (heading, width) in [
            ("count", 8),
            ("p50", 9),
            ("p90", 9),
            ("p99", 9),
            ("p99.9", 9),
            ("max", 9),
        ] {
            table = table.column(heading, Align::Right, width);
        }
        for latency in &self.summary.latency {
            table.row(cells(latency));
        }
        out.push_str(&table.to_string());
    }

    /// Throughput, launch skew (burst), when the sale sold out, and late
    /// or dropped sends (rate).
    fn write_timing(&self, out: &mut String) {
        let s = &self.summary;
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
            None if s.count(AnswerKind::SoldOut) > 0 => {
                writeln!(out, "sold out before this run won anything")
            }
            None => writeln!(out, "not sold out"),
        };
        if self.config.scenario == crate::scenario::Scenario::Rate {
            let _ = writeln!(
                out,
                "late sends (> 10 ms after due): {}, dropped sends: {}",
                s.late_sends, s.dropped_sends
            );
        }
    }

    /// Which instances answered, and which of them sold the units.
    fn write_instances(&self, out: &mut String) {
        let s = &self.summary;
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
    }

    /// What the generator itself cost, to tell whether it was the bottleneck.
    fn write_generator(&self, out: &mut String) {
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
    }

    /// The orders PostgreSQL holds after the run.
    fn write_stored(&self, out: &mut String) {
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
        if self.stored.recovered > 0 {
            let _ = writeln!(
                out,
                "{} winners learned their order from a retry's 409 (their 202 was lost on its way)",
                self.stored.recovered
            );
        }
    }

    /// Every check: pass or FAIL, what was expected, what was found.
    fn write_checks(&self, out: &mut String) {
        if self.invariants.is_empty() {
            return;
        }
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

    /// Why the run is invalid, if it is, and the verdict.
    fn write_verdict(&self, out: &mut String) {
        for problem in &self.problems {
            let _ = writeln!(out, "  INVALID RUN: {problem}");
        }
        let _ = writeln!(out, "verdict: {}", self.verdict.as_str());
    }
}

/// How one cell of the side-by-side table is read from its report.
type Cell = fn(&Report) -> String;

/// The rows of the side-by-side table after the labels: what each row
/// shows, and how to read it from one report.
const COMPARED: [(&str, Cell); 8] = [
    ("units for sale", |r| r.config.stock.to_string()),
    ("buyers told \"you got one\" (202)", |r| {
        r.summary.count(AnswerKind::Won).to_string()
    }),
    ("units sold beyond the stock", |r| r.oversold_by.to_string()),
    ("orders confirmed by PostgreSQL", |r| {
        r.stored.confirmed.to_string()
    }),
    ("orders refused by PostgreSQL", |r| {
        r.stored.rejected.to_string()
    }),
    ("p99 of winning answers", |r| {
        r.summary
            .latency(AnswerKind::Won)
            .map_or("-".to_owned(), |l| micros(l.p99_us))
    }),
    ("time to sell out", |r| {
        r.summary
            .time_to_sell_out_ms
            .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"))
    }),
    ("verdict", |r| r.verdict.as_str().to_owned()),
];

/// Two or more reports side by side, for the demo's lock-versus-naive finale.
pub fn side_by_side(reports: &[&Report]) -> String {
    let mut table = Table::new().gap(1).column("", Align::Left, 38);
    for report in reports {
        table = table.column(report.label.clone(), Align::Right, 16);
    }
    for (name, cell) in COMPARED {
        table.row(std::iter::once(name.to_owned()).chain(reports.iter().map(|r| cell(r))));
    }
    table.to_string()
}

/// A latency row: outcome, count, p50, p90, p99, p99.9, max.
pub(super) fn cells(latency: &crate::stats::Latency) -> [String; 7] {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_read_naturally() {
        assert_eq!(micros(850), "850µs");
        assert_eq!(micros(12_345), "12.3ms");
        assert_eq!(micros(1_240_000), "1.24s");
    }
}
