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

use super::expect::RowFigures;
use super::rows::LabRow;

/// One row, run and judged.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct RowOutcome {
    pub(crate) row: LabRow,
    pub(crate) figures: RowFigures,
    /// `Ok` when the row showed what it must; otherwise why not.
    pub(crate) verdict: Result<(), String>,
    /// The row's own load-test report (HTML), with its charts.
    pub(crate) report: Option<PathBuf>,
}

/// A column: its heading, the side its cells keep to, the cell of a row,
/// and whether the terminal's table has it too.
struct Column {
    heading: &'static str,
    align: Align,
    cell: fn(&RowOutcome) -> String,
    terminal: bool,
}

/// A column of the page and the terminal's table.
const fn both(heading: &'static str, align: Align, cell: fn(&RowOutcome) -> String) -> Column {
    Column {
        heading,
        align,
        cell,
        terminal: true,
    }
}

/// A column of the page alone.
const fn page_only(heading: &'static str, align: Align, cell: fn(&RowOutcome) -> String) -> Column {
    Column {
        heading,
        align,
        cell,
        terminal: false,
    }
}

/// Every column, in order, under one heading wherever it shows: the room
/// reads the terminal's table and the page side by side. The terminal
/// shows about 100 characters, so that its table does not wrap on a
/// projector; the page adds the 503s and the speed. Neither has `lost`,
/// which is 0 in a row as expected (the JSON has it; a row that lost a
/// 202 says so in its `ok` cell).
const COLUMNS: &[Column] = &[
    both("row", Align::Left, |o| o.row.label()),
    both("202s", Align::Right, |o| o.figures.accepted.to_string()),
    both("oversold", Align::Right, |o| o.figures.oversold.to_string()),
    both("twice", Align::Right, |o| {
        o.figures.duplicate_buyers.to_string()
    }),
    both("refused", Align::Right, |o| o.figures.rejected.to_string()),
    page_only("503s", Align::Right, |o| o.figures.busy.to_string()),
    both("lock lost", Align::Right, |o| {
        o.figures.lock_lost.to_string()
    }),
    both("fenced", Align::Right, |o| o.figures.fenced.to_string()),
    both("stuck lock", Align::Left, stuck_lock),
    both("sold out", Align::Right, sold_out_in),
    page_only("req/s", Align::Right, |o| {
        format!("{:.0}", o.figures.requests_per_second)
    }),
    page_only("p99", Align::Right, |o| {
        format!("{:.0} ms", o.figures.p99_ms)
    }),
    both("ok", Align::Left, as_expected),
];

/// The terminal's columns.
fn terminal_columns() -> impl Iterator<Item = &'static Column> {
    COLUMNS.iter().filter(|column| column.terminal)
}

/// "no TTL" (left behind, for ever) or "56 years" (asked for during the
/// run), or "no".
fn stuck_lock(o: &RowOutcome) -> String {
    if o.figures.lock_left_without_ttl {
        return "no TTL".to_owned();
    }
    o.figures
        .stuck_lock
        .as_deref()
        .map_or("no".to_owned(), |stuck| {
            stuck.trim_start_matches("TTL ").to_owned()
        })
}

fn sold_out_in(o: &RowOutcome) -> String {
    o.figures
        .sell_out_ms
        .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"))
}

fn as_expected(o: &RowOutcome) -> String {
    match &o.verdict {
        Ok(()) => "yes".to_owned(),
        Err(why) => format!("NO: {why}"),
    }
}

/// The table for the terminal: a rule under the headings, columns as wide
/// as their widest cell.
pub(super) fn text(outcomes: &[RowOutcome]) -> String {
    let mut table = terminal_columns().fold(Table::new().rule(), |table, column| {
        table.column(column.heading, column.align, 0)
    });
    for outcome in outcomes {
        table.row(terminal_columns().map(|column| (column.cell)(outcome)));
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
    /// The row's name in the pieces a narrow screen may put on two lines:
    /// the strategy, then `+` and the knob (`article`, `+crash-after-setnx`).
    name: Vec<String>,
    /// The row's load-test report, beside the lab's page.
    report: Option<String>,
    cells: Vec<Cell>,
    lesson: &'static str,
    /// What the row must show, in the words of the expectation.
    expected: &'static str,
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
            name: match outcome.row.label().split_once('+') {
                Some((strategy, knob)) => vec![strategy.to_owned(), format!("+{knob}")],
                None => vec![outcome.row.label()],
            },
            report: outcome.report.as_deref().map(file_name),
            cells: COLUMNS
                .iter()
                .map(|column| Cell::new((column.cell)(outcome), column.align))
                .collect(),
            lesson: outcome.row.lesson,
            expected: outcome.row.expect.describe(),
        })
        .collect();
    let headings = COLUMNS
        .iter()
        .map(|column| Cell::new(column.heading.to_owned(), column.align))
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
            figures: RowFigures {
                units: 10,
                accepted,
                oversold: accepted.saturating_sub(10),
                p99_ms: 12.5,
                ..RowFigures::default()
            },
            verdict,
            report: Some(PathBuf::from("target/seckill-lab/naive.html")),
        }
    }

    /// Four rows as docs/lab.md quotes them, with the widest cells of its
    /// quote: the headings, the rule and the lines, each as it shows them.
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
                RowFigures {
                    accepted: 697,
                    oversold: 687,
                    duplicate_buyers: 2,
                    rejected: 687,
                    sell_out_ms: Some(528.0),
                    ..RowFigures::default()
                },
            ),
            outcome(
                "article+crash-after-setnx",
                RowFigures {
                    stuck_lock: Some("no TTL, left".into()),
                    lock_left_without_ttl: true,
                    ..RowFigures::default()
                },
            ),
            outcome(
                "getset+hold-pause",
                RowFigures {
                    accepted: 15,
                    oversold: 5,
                    rejected: 5,
                    sell_out_ms: Some(3972.0),
                    ..RowFigures::default()
                },
            ),
            outcome(
                "lock+hold-pause",
                RowFigures {
                    lock_lost: 2100,
                    fenced: 10,
                    ..RowFigures::default()
                },
            ),
        ];
        let quote = include_str!("../../../../docs/lab.md");
        for line in text(&outcomes).lines() {
            assert!(
                quote.lines().any(|quoted| quoted == line),
                "docs/lab.md does not quote this line:\n{line}"
            );
        }
    }

    /// On a projector a terminal shows about a hundred characters at a
    /// size the room can read: every line of the whole lesson's table, its
    /// cells as wide as the lab makes them, fits.
    #[test]
    fn the_terminal_table_fits_a_projector() {
        let outcomes: Vec<RowOutcome> = lesson()
            .into_iter()
            .map(|row| RowOutcome {
                row,
                figures: RowFigures {
                    accepted: 9999,
                    oversold: 9999,
                    duplicate_buyers: 9999,
                    rejected: 9999,
                    lock_lost: 9999,
                    fenced: 9999,
                    stuck_lock: Some("TTL 56 years".into()),
                    sell_out_ms: Some(9999.0),
                    ..RowFigures::default()
                },
                verdict: Ok(()),
                report: None,
            })
            .collect();
        let table = text(&outcomes);
        let widest = table.lines().map(|line| line.chars().count()).max();
        assert!(widest <= Some(105), "{widest:?} characters:\n{table}");
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
        assert!(lines[0].starts_with("row"), "{table}");
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
        assert!(page.contains("<a href=\"naive.html\"><span>naive</span></a>"));
        assert_eq!(page.matches("<svg").count(), 2);
    }
}
