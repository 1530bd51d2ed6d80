//! The chaos report as one self-contained HTML page: the timeline of
//! answers with the fault windows shaded and named, the table, the checks.
//! The page is an askama template (`templates/chaos.html`), which escapes
//! what it shows; the timeline is the load test's [`Timeline`] chart.

use askama::Template;
use seckill_loadtest::report::Align;
use seckill_loadtest::report::charts::{Colour, Line, Span, Timeline};

use super::SLICE;
use super::judge::{FaultRow, Tick};
use super::report::ChaosReport;

/// The page's values: the report, and what is drawn or laid out from it.
#[derive(Template)]
#[template(path = "chaos.html")]
struct ChaosPage<'a> {
    report: &'a ChaosReport,
    /// The table's headings, each with its column's class.
    headings: Vec<(&'static str, &'static str)>,
    /// The table's rows: `ok` or `bad`, and each cell with its class.
    rows: Vec<(&'static str, Vec<(String, &'static str)>)>,
    /// The timeline, as SVG.
    chart: String,
}

/// The page.
pub(super) fn to_html(report: &ChaosReport) -> String {
    let class = |align: Align| match align {
        Align::Left => "text",
        Align::Right => "figure",
    };
    let rows = report
        .rows
        .iter()
        .map(|row| {
            let cells = row
                .cells()
                .into_iter()
                .zip(FaultRow::COLUMNS)
                .map(|(cell, (_, align, _))| (cell, class(align)))
                .collect();
            (if row.ok { "ok" } else { "bad" }, cells)
        })
        .collect();
    ChaosPage {
        report,
        headings: FaultRow::COLUMNS
            .iter()
            .map(|(heading, align, _)| (*heading, class(*align)))
            .collect(),
        rows,
        chart: timeline(report),
    }
    .render()
    .expect("the chaos page renders: its values are strings and numbers, which always write")
}

/// Answers per slice over the run (sold, refused, failed), with every
/// fault's window shaded and named.
fn timeline(report: &ChaosReport) -> String {
    // A step per slice: its count holds until the next one starts.
    let slice_s = SLICE.as_secs_f64();
    let line = |name, colour, pick: fn(&Tick) -> u64| Line {
        name,
        colour,
        points: report
            .timeline
            .iter()
            .flat_map(|tick| {
                let (from, n) = (tick.at_ms as f64 / 1000.0, pick(tick) as f64);
                [(from, n), (from + slice_s, n)]
            })
            .collect(),
    };
    let y_desc = format!("answers per {:.0} ms, by what they said", slice_s * 1000.0);
    Timeline {
        y_desc: &y_desc,
        lines: vec![
            line("sold", Colour::GREEN, |t| t.sold),
            line("refused", Colour::BLUE, |t| t.refused),
            line("failed", Colour::RED, |t| t.failed),
        ],
        spans_desc: "fault in force",
        spans: report
            .windows
            .iter()
            .map(|window| Span {
                name: window.fault.as_str(),
                from_s: window.start.as_secs_f64(),
                to_s: window.end.as_secs_f64(),
            })
            .collect(),
    }
    .to_svg()
}
