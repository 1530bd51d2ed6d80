//! The lab's one table, three ways: a table for the terminal, a JSON
//! document, and one self-contained HTML page with the table and two
//! charts (`202`s against the units, and the p99, per row).

use std::fmt::Write;
use std::path::PathBuf;

use serde::Serialize;

use super::expect::Figures;
use super::rows::Row;

/// One row, run and judged.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub row: Row,
    pub figures: Figures,
    /// `Ok` when the row showed what it must; otherwise why not.
    pub verdict: Result<(), String>,
    /// The row's own load-test report (HTML), with its charts.
    pub report: Option<PathBuf>,
}

/// The columns: heading, and the cell of a row.
type Column = (&'static str, fn(&Outcome) -> String);

const COLUMNS: &[Column] = &[
    ("strategy", |o| o.row.strategy.as_str().to_owned()),
    ("knob", |o| o.row.knob.as_str().to_owned()),
    ("202s", |o| o.figures.accepted.to_string()),
    ("oversold", |o| o.figures.oversold.to_string()),
    ("dup buyers", |o| o.figures.duplicate_buyers.to_string()),
    ("lost", |o| o.figures.lost.to_string()),
    ("PG refused", |o| o.figures.rejected.to_string()),
    ("fenced", |o| o.figures.fenced.to_string()),
    ("stuck lock", |o| {
        o.figures.stuck_lock.clone().unwrap_or_else(|| "no".into())
    }),
    ("sold out in", |o| {
        o.figures
            .sell_out_ms
            .map_or("-".to_owned(), |ms| format!("{ms:.0} ms"))
    }),
    ("req/s", |o| format!("{:.0}", o.figures.requests_per_second)),
    ("p99", |o| format!("{:.0} ms", o.figures.p99_ms)),
    ("expected", |o| o.row.expect.describe().to_owned()),
    ("as expected", |o| match &o.verdict {
        Ok(()) => "yes".to_owned(),
        Err(why) => format!("NO: {why}"),
    }),
];

/// The table for the terminal: columns as wide as their widest cell.
pub fn text(outcomes: &[Outcome]) -> String {
    let cells: Vec<Vec<String>> = outcomes
        .iter()
        .map(|o| COLUMNS.iter().map(|(_, cell)| cell(o)).collect())
        .collect();
    let widths: Vec<usize> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, (heading, _))| {
            cells
                .iter()
                .map(|row| row[i].chars().count())
                .chain([heading.len()])
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    let headings = COLUMNS.iter().map(|(heading, _)| (*heading).to_owned());
    line(&mut out, headings, &widths);
    let rule = widths.iter().map(|w| "-".repeat(*w));
    line(&mut out, rule, &widths);
    for row in cells {
        line(&mut out, row.into_iter(), &widths);
    }
    out
}

/// One line of the table: text columns left, figures right.
fn line(out: &mut String, cells: impl Iterator<Item = String>, widths: &[usize]) {
    let cells: Vec<String> = cells
        .zip(widths)
        .enumerate()
        .map(|(i, (cell, width))| match i {
            0 | 1 | 8 | 12 | 13 => format!("{cell:<width$}"),
            _ => format!("{cell:>width$}"),
        })
        .collect();
    let _ = writeln!(out, "{}", cells.join("  ").trim_end());
}

/// The JSON document: every row with its flags, figures and verdict.
pub fn json(outcomes: &[Outcome]) -> String {
    #[derive(Serialize)]
    struct Document<'a> {
        schema: &'static str,
        as_expected: bool,
        rows: &'a [Outcome],
    }
    serde_json::to_string_pretty(&Document {
        schema: "seckill-lab/1",
        as_expected: outcomes.iter().all(|o| o.verdict.is_ok()),
        rows: outcomes,
    })
    .expect("the lab's rows serialize")
}

/// The HTML page: the table, the lesson of each row, and two bar charts.
pub fn html(outcomes: &[Outcome]) -> String {
    let mut rows = String::new();
    for outcome in outcomes {
        let class = if outcome.verdict.is_ok() { "ok" } else { "bad" };
        let _ = write!(rows, "<tr class=\"{class}\">");
        for (i, (_, cell)) in COLUMNS.iter().enumerate() {
            let cell = escape(&cell(outcome));
            let _ = match (i, &outcome.report) {
                (0, Some(path)) => write!(
                    rows,
                    "<td><a href=\"{}\">{cell}</a></td>",
                    escape(&file_name(path))
                ),
                _ => write!(rows, "<td>{cell}</td>"),
            };
        }
        let _ = write!(
            rows,
            "</tr><tr class=\"lesson\"><td colspan=\"{}\">{}</td></tr>",
            COLUMNS.len(),
            escape(outcome.row.lesson)
        );
    }
    let headings: String = COLUMNS
        .iter()
        .map(|(heading, _)| format!("<th>{heading}</th>"))
        .collect();
    let units = outcomes.first().map_or(0, |o| o.figures.units);
    let accepted = bars(
        outcomes,
        |o| o.figures.accepted as f64,
        Some(units as f64),
        "202s per row; the line is the units",
    );
    let p99 = bars(
        outcomes,
        |o| o.figures.p99_ms,
        None,
        "p99 of every answer, ms",
    );
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
<title>seckill lab</title><style>\
body{{font:15px system-ui,sans-serif;margin:2em;color:#222}}\
table{{border-collapse:collapse}}td,th{{padding:.3em .6em;border-bottom:1px solid #ddd;text-align:right}}\
td:first-child,td:nth-child(2),td:nth-child(9),td:nth-child(13),td:nth-child(14),th{{text-align:left}}tr.bad td{{background:#fdd}}\
tr.lesson td{{text-align:left;color:#666;font-size:13px;border-bottom:2px solid #bbb}}\
svg{{margin:1em 0;display:block}}</style></head><body>\
<h1>seckill lab</h1><p>Each row: its own instances and sale, the same burst, then PostgreSQL and \
Redis read back. Click a strategy for that row's load-test report.</p>\
<table><tr>{headings}</tr>{rows}</table>{accepted}{p99}</body></html>"
    )
}

/// A horizontal bar chart, one bar per row, with an optional mark line.
fn bars(
    outcomes: &[Outcome],
    value: fn(&Outcome) -> f64,
    mark: Option<f64>,
    title: &str,
) -> String {
    const LABEL: f64 = 220.0;
    const WIDTH: f64 = 420.0;
    const BAR: f64 = 22.0;
    let max = outcomes
        .iter()
        .map(value)
        .chain(mark)
        .fold(1.0_f64, f64::max);
    let scale = |v: f64| v / max * WIDTH;
    let height = BAR * outcomes.len() as f64 + 30.0;
    let mut svg = format!(
        "<svg width=\"{}\" height=\"{height}\" role=\"img\" aria-label=\"{title}\">\
<text x=\"0\" y=\"14\" font-weight=\"bold\">{title}</text>",
        LABEL + WIDTH + 80.0,
    );
    for (i, outcome) in outcomes.iter().enumerate() {
        let y = 24.0 + BAR * i as f64;
        let v = value(outcome);
        let fill = if outcome.verdict.is_ok() {
            "#4a7"
        } else {
            "#c44"
        };
        let _ = write!(
            svg,
            "<text x=\"0\" y=\"{}\">{}</text><rect x=\"{LABEL}\" y=\"{y}\" width=\"{:.1}\" height=\"{}\" fill=\"{fill}\"/>\
<text x=\"{:.1}\" y=\"{}\">{v:.0}</text>",
            y + 15.0,
            escape(&outcome.row.label()),
            scale(v),
            BAR - 4.0,
            LABEL + scale(v) + 4.0,
            y + 15.0
        );
    }
    if let Some(mark) = mark {
        let x = LABEL + scale(mark);
        let _ = write!(
            svg,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"20\" y2=\"{height}\" stroke=\"#000\" stroke-dasharray=\"4\"/>"
        );
    }
    svg.push_str("</svg>");
    svg
}

fn file_name(path: &std::path::Path) -> String {
    path.file_name()
        .map_or_else(String::new, |name| name.to_string_lossy().into_owned())
}

fn escape(raw: &str) -> String {
    raw.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lab::rows::lesson;

    fn outcome(row: Row, accepted: u64, verdict: Result<(), String>) -> Outcome {
        Outcome {
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
