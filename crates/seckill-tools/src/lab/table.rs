//! The lab's one table, three ways: a table for the terminal, a JSON
//! document, and one self-contained HTML page with the table and two
//! charts (`202`s against the units, and the p99, per row). The terminal
//! table is the load test's [`Table`], the charts its [`charts`], the page
//! an askama template (`templates/lab.html`), which escapes what it shows.
//!
//! [`charts`]: seckill_loadtest::report::charts

use std::path::PathBuf;

use askama::Template;
use seckill_loadtest::report::charts::{Bar, Bars, Colour, Mark};
use seckill_loadtest::report::{Align, Table};
use serde::Serialize;

use super::expect::Figures;
use super::rows::LabRow;

/// One row, run and judged.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RowOutcome {
    pub(crate) row: LabRow,
    pub(crate) figures: Figures,
    /// `Ok` when the row showed what it must; otherwise why not.
    pub(crate) verdict: Result<(), String>,
    /// The row's own load-test report (HTML), with its charts.
    pub(crate) report: Option<PathBuf>,
}

/// A column: its heading, the side its cells keep to, and the cell of a row.
type Column = (&'static str, Align, fn(&RowOutcome) -> String);

/// The table's columns, in the terminal and on the page alike.
const COLUMNS: &[Column] = &[
    ("strategy", Align::Left, |o| {
        o.row.strategy.as_str().to_owned()
    }),
    ("knob", Align::Left, |o| o.row.knob.as_str().to_owned()),
    ("202s", Align::Right, |o| o.figures.accepted.to_string()),
    ("oversold", Align::Right, |o| o.figures.oversold.to_string()),
    ("dup buyers", Align::Right, |o| {
        o.figures.duplicate_buyers.to_string()
    }),
    ("lost", Align::Right, |o| o.figures.lost.to_string()),
    ("PG refused", Align::Right, |o| {
        o.figures.rejected.to_string()
    }),
    ("fenced", Align::Right, |o| o.figures.fenced.to_string()),
    ("stuck lock", Align::Left, |o| {
        o.figures.stuck_lock.clone().unwrap_or_else(|| "no".into())
    }),
    ("sold out in", Align::Right, |o| {
        o.figures
            .sell_out_ms
            .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"))
    }),
    ("req/s", Align::Right, |o| {
        format!("{:.0}", o.figures.requests_per_second)
    }),
    ("p99", Align::Right, |o| {
        format!("{:.0} ms", o.figures.p99_ms)
    }),
    ("expected", Align::Left, |o| {
        o.row.expect.describe().to_owned()
    }),
    ("as expected", Align::Left, |o| match &o.verdict {
        Ok(()) => "yes".to_owned(),
        Err(why) => format!("NO: {why}"),
    }),
];

/// The table for the terminal: a rule under the headings, columns as wide
/// as their widest cell.
pub(super) fn text(outcomes: &[RowOutcome]) -> String {
    let mut table = COLUMNS
        .iter()
        .fold(Table::new().rule(), |table, (heading, align, _)| {
            table.column(*heading, *align, 0)
        });
    for outcome in outcomes {
        table.row(COLUMNS.iter().map(|(_, _, cell)| cell(outcome)));
    }
    table.to_string()
}

/// The JSON document: every row with its flags, figures and verdict.
pub(super) fn json(outcomes: &[RowOutcome]) -> String {
    #[derive(Serialize)]
    struct Document<'a> {
        schema: &'static str,
        as_expected: bool,
        rows: &'a [RowOutcome],
    }
    serde_json::to_string_pretty(&Document {
        schema: "seckill-lab/1",
        as_expected: outcomes.iter().all(|o| o.verdict.is_ok()),
        rows: outcomes,
    })
    .expect("the lab's rows serialize")
}

/// The page's values: the table's cells, and the two charts as SVG.
#[derive(Template)]
#[template(path = "lab.html")]
struct LabPage {
    headings: Vec<Cell>,
    rows: Vec<PageRow>,
    /// 202s per row, against the units.
    accepted: String,
    /// p99 per row.
    p99: String,
}

/// One row of the page's table, and its lesson.
struct PageRow {
    /// `ok` or `bad`: whether the row showed what it must.
    class: &'static str,
    /// The row's load-test report, beside the lab's page.
    report: Option<String>,
    cells: Vec<Cell>,
    lesson: &'static str,
}

/// A cell of the page, with its column's class: `text` or `figure`.
struct Cell {
    text: String,
    class: &'static str,
}

impl Cell {
    fn new(text: String, align: Align) -> Self {
        let class = match align {
            Align::Left => "text",
            Align::Right => "figure",
        };
        Self { text, class }
    }
}

/// The HTML page: the table, the lesson of each row, and two bar charts.
pub(super) fn html(outcomes: &[RowOutcome]) -> String {
    let rows = outcomes
        .iter()
        .map(|outcome| PageRow {
            class: if outcome.verdict.is_ok() { "ok" } else { "bad" },
            report: outcome.report.as_deref().map(file_name),
            cells: COLUMNS
                .iter()
                .map(|(_, align, cell)| Cell::new(cell(outcome), *align))
                .collect(),
            lesson: outcome.row.lesson,
        })
        .collect();
    let headings = COLUMNS
        .iter()
        .map(|(heading, align, _)| Cell::new((*heading).to_owned(), *align))
        .collect();
    let units = outcomes.first().map_or(0, |o| o.figures.units);
    LabPage {
        headings,
        rows,
        accepted: Bars {
            title: "202s per row",
            bars: bars(outcomes, |o| o.figures.accepted as f64),
            mark: Some(Mark {
                name: "the units for sale",
                value: units as f64,
            }),
        }
        .to_svg(),
        p99: Bars {
            title: "p99 of every answer per row, ms",
            bars: bars(outcomes, |o| o.figures.p99_ms),
            mark: None,
        }
        .to_svg(),
    }
    .render()
    .expect("the lab's page renders: its values are strings, which always write")
}

/// A bar per row, green if the row showed what it must, red if not.
fn bars(outcomes: &[RowOutcome], value: fn(&RowOutcome) -> f64) -> Vec<Bar> {
    outcomes
        .iter()
        .map(|outcome| Bar {
            label: outcome.row.label(),
            value: value(outcome),
            colour: if outcome.verdict.is_ok() {
                Colour::GREEN
            } else {
                Colour::RED
            },
        })
        .collect()
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::rows::lesson;

    fn outcome(row: LabRow, accepted: u64, verdict: Result<(), String>) -> RowOutcome {
        RowOutcome {
            row,
            figures: Figures {
                units: 10,
                accepted,
                oversold: accepted.saturating_sub(10),
                p99_ms: 12.5,
                ..Figures::default()
            },
            verdict,
            report: Some(PathBuf::from("target/seckill-lab/naive.html")),
        }
    }

    /// Three of the rows docs/lab.md quotes, whose cells are the widest of
    /// the quote: the lines, the headings and the rule, as it shows them.
    #[test]
    fn the_table_reads_as_docs_lab_md_quotes_it() {
        let rows = lesson();
        let row = |label: &str| {
            rows.iter()
                .find(|row| row.label() == label)
                .expect("a row of the lesson")
                .clone()
        };
        let outcome = |label, figures| RowOutcome {
            row: row(label),
            figures,
            verdict: Ok(()),
            report: None,
        };
        let outcomes = [
            outcome(
                "naive",
                Figures {
                    accepted: 654,
                    oversold: 644,
                    duplicate_buyers: 1,
                    rejected: 644,
                    sell_out_ms: Some(228.0),
                    requests_per_second: 7416.0,
                    p99_ms: 276.0,
                    ..Figures::default()
                },
            ),
            outcome(
                "article+crash-after-setnx",
                Figures {
                    stuck_lock: Some("no TTL, left".into()),
                    requests_per_second: 20269.0,
                    p99_ms: 97.0,
                    ..Figures::default()
                },
            ),
            outcome(
                "lock+hold-pause",
                Figures {
                    fenced: 11,
                    requests_per_second: 218.0,
                    p99_ms: 9617.0,
                    ..Figures::default()
                },
            ),
        ];
        let quoted = [
            "strategy  knob               202s  oversold  dup buyers  lost  PG refused  fenced  stuck lock    sold out in  req/s      p99  expected                                  as expected",
            "--------  -----------------  ----  --------  ----------  ----  ----------  ------  ------------  -----------  -----  -------  ----------------------------------------  -----------",
            "naive     none                654       644           1     0         644       0  no                 228 ms   7416   276 ms  oversells; PostgreSQL refuses the excess  yes",
            "article   crash-after-setnx     0         0           0     0           0       0  no TTL, left            -  20269    97 ms  lock left with no TTL                     yes",
            "lock      hold-pause            0         0           0     0           0      11  no                      -    218  9617 ms  fence refuses the paused holder; holds    yes",
        ];
        assert_eq!(text(&outcomes).lines().collect::<Vec<_>>(), quoted);
    }

    #[test]
    fn the_page_escapes_what_it_shows() {
        let page = html(&[outcome(
            lesson()[0].clone(),
            3,
            Err("<script> & \"quotes\"".into()),
        )]);
        assert!(
            page.contains("NO: &#60;script&#62; &#38; &#34;quotes&#34;"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
    }

    #[test]
    fn the_table_has_one_line_per_row_and_says_which_were_not_as_expected() {
        let rows = lesson();
        let outcomes = [
            outcome(rows[0].clone(), 31, Ok(())),
            outcome(rows[1].clone(), 10, Err("nothing was oversold".into())),
        ];
        let table = text(&outcomes);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 4, "{table}");
        assert!(lines[0].starts_with("strategy"), "{table}");
        assert!(lines[2].starts_with("naive") && lines[2].contains("31"));
        assert!(lines[2].ends_with("yes"), "{table}");
        assert!(lines[3].ends_with("NO: nothing was oversold"), "{table}");

        let document: serde_json::Value =
            serde_json::from_str(&json(&outcomes)).expect("valid JSON");
        assert_eq!(document["as_expected"], false);
        assert_eq!(document["rows"][0]["figures"]["oversold"], 21);
        assert_eq!(
            document["rows"][1]["verdict"]["Err"],
            "nothing was oversold"
        );

        let page = html(&outcomes);
        assert_eq!(page.matches("<tr class=\"ok\">").count(), 1);
        assert_eq!(page.matches("<tr class=\"bad\">").count(), 1);
        assert!(page.contains("<a href=\"naive.html\">naive</a>"));
        assert_eq!(page.matches("<svg").count(), 2);
    }
}
