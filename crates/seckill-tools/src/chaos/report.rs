//! The chaos run's result, one value ([`ChaosReport`]) written three
//! ways: the text for the terminal (here), the JSON document (its
//! serialization), and the HTML page (`html.rs`).

use std::fmt::Write as _;

use chrono::Utc;
use seckill_loadtest::report::Table;
use serde::Serialize;

use super::faults::FaultWindow;
use super::judge::{self, ChaosCheck, FaultRow, Summary, Tick};

/// The whole result, as the JSON report holds it.
#[derive(Debug, Serialize)]
pub(super) struct ChaosReport {
    pub(super) schema: &'static str,
    pub(super) started_at: chrono::DateTime<Utc>,
    pub(super) users: u32,
    pub(super) stock: u32,
    pub(super) rate: u32,
    pub(super) duration_secs: u64,
    pub(super) seed: u64,
    pub(super) windows: Vec<FaultWindow>,
    pub(super) rows: Vec<FaultRow>,
    pub(super) checks: Vec<ChaosCheck>,
    /// The checks' figures that a comparison of runs shows.
    pub(super) summary: Summary,
    pub(super) requests: usize,
    pub(super) dropped: u64,
    pub(super) verdict: &'static str,
    /// Answers per quarter second, by what they said.
    pub(super) timeline: Vec<Tick>,
}

impl ChaosReport {
    /// The report for the terminal: the run, the fault windows one a line,
    /// the table, where the failed requests fell, the checks, the verdict.
    pub(super) fn to_text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "\n== chaos: {} buyers, {} units, {} purchases/s for {} s, seed {} ==",
            self.users, self.stock, self.rate, self.duration_secs, self.seed
        );
        for window in &self.windows {
            let _ = writeln!(
                out,
                "{:>7.1} s - {:>5.1} s  {:<18} {}",
                window.start.as_secs_f64(),
                window.end.as_secs_f64(),
                window.fault.as_str(),
                window.note
            );
        }
        let mut table = Table::new().gap(1).columns(&FaultRow::COLUMNS);
        for row in &self.rows {
            table.row(row.cells());
        }
        let _ = write!(out, "\n{table}");
        let _ = writeln!(
            out,
            "recovered: from the fault's end to the first answer that sold or refused a unit"
        );
        if self.rows.iter().any(|row| row.fault == judge::CROWD_ROW) {
            let _ = writeln!(
                out,
                "{}: every answer of the waiting crowd, in its own sale's room, across the \
                 failover; recovered: to its first place told or unit sold",
                judge::CROWD_ROW
            );
        }
        for row in self
            .rows
            .iter()
            .filter(|r| !r.failures_by_second.is_empty())
        {
            let seconds: Vec<String> = row
                .failures_by_second
                .iter()
                .map(|(second, count)| format!("{second} s: {count}"))
                .collect();
            let _ = writeln!(
                out,
                "failed requests, {}: {}",
                row.fault,
                seconds.join(", ")
            );
        }
        let _ = writeln!(out, "\nchecks:");
        for check in &self.checks {
            let _ = writeln!(
                out,
                "  {} {}: expected {}, found {}",
                if check.ok { "pass" } else { "FAIL" },
                check.name,
                check.expected,
                check.found
            );
        }
        if self.summary.accepted > 0 && self.summary.held == 0 {
            let _ = writeln!(
                out,
                "  (nobody pays in a chaos run: every order was cancelled when its {} s payment window closed, \
                 so no unit is held and Redis has all {} units on sale again, each given back once)",
                super::PAYMENT_WINDOW.as_secs(),
                self.stock
            );
        }
        let _ = writeln!(
            out,
            "{} answers, {} dropped sends\nverdict: {}",
            self.requests, self.dropped, self.verdict
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::chaos::Fault;
    use crate::chaos::judge;

    /// Two of the windows and two of the rows docs/chaos.md quotes: the
    /// lines as it shows them, whatever the widths of a run's figures.
    #[test]
    fn the_table_reads_as_docs_chaos_md_quotes_it() {
        let window = |fault, start, end, note: &str| FaultWindow {
            fault,
            start: Duration::from_millis(start),
            end: Duration::from_millis(end),
            note: note.to_owned(),
        };
        let row = |fault: &str, requests, accepted, unavailable, recovered_after_ms| FaultRow {
            fault: fault.to_owned(),
            requests,
            accepted,
            errors: 0,
            unavailable,
            internal: 0,
            lost: 0,
            dropped: 0,
            recovered_after_ms,
            failures_by_second: Vec::new(),
            ok: true,
        };
        let report = ChaosReport {
            schema: "seckill-chaos/1",
            started_at: Utc::now(),
            users: 5000,
            stock: 3000,
            rate: 1500,
            duration_secs: 40,
            seed: 1,
            windows: vec![
                window(
                    Fault::LockHolderPause,
                    3_500,
                    9_100,
                    "app-2 stopped while holding the lock",
                ),
                window(
                    Fault::PostgresDown,
                    26_400,
                    36_500,
                    "PostgreSQL down for 10s",
                ),
            ],
            rows: vec![
                row("redis-wipe", 1747, 684, 1, Some(0)),
                row(judge::BETWEEN, 13197, 6645, 0, None),
            ],
            checks: Vec::new(),
            summary: Summary::default(),
            requests: 14944,
            dropped: 0,
            verdict: "PASS",
            timeline: Vec::new(),
        };
        let text = report.to_text();
        for quoted in [
            "    3.5 s -   9.1 s  lock-holder-pause  app-2 stopped while holding the lock",
            "   26.4 s -  36.5 s  postgres-down      PostgreSQL down for 10s",
            "fault               requests    202  errors    503   500  lost  dropped  recovered  ok",
            "redis-wipe              1747    684       0      1     0     0        0       0 ms yes",
            "(between faults)       13197   6645       0      0     0     0        0          - yes",
        ] {
            assert!(
                text.lines().any(|line| line == quoted),
                "{quoted:?} not in\n{text}"
            );
        }
    }
}
