//! The chaos report as one self-contained HTML page: the timeline of
//! answers with the fault windows shaded and named, the table, the checks.
//! Hand-written SVG: three lines and a few rectangles need no chart crate.

use std::fmt::Write as _;

use super::ChaosReport;
use super::judge::{Row, Tick};

const WIDTH: f64 = 900.0;
const HEIGHT: f64 = 260.0;
const MARGIN: f64 = 40.0;

/// The page.
pub fn to_html(report: &ChaosReport) -> String {
    let mut rows = String::new();
    for row in &report.rows {
        let _ = write!(rows, "<tr class=\"{}\">", if row.ok { "ok" } else { "bad" });
        for cell in row.cells() {
            let _ = write!(rows, "<td>{}</td>", escape(&cell));
        }
        rows.push_str("</tr>");
    }
    let header: String = Row::COLUMNS
        .iter()
        .map(|column| format!("<th>{column}</th>"))
        .collect();
    let mut checks = String::new();
    for check in &report.checks {
        let _ = write!(
            checks,
            "<li class=\"{}\">{} {}: expected {}, found {}</li>",
            if check.ok { "ok" } else { "bad" },
            if check.ok { "pass" } else { "FAIL" },
            escape(check.name),
            escape(&check.expected),
            escape(&check.found)
        );
    }
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>seckill chaos: {verdict}</title>\
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}td,th{{padding:2px 8px;text-align:right}}\
td:first-child{{text-align:left}}.bad{{color:#b00;font-weight:bold}}</style></head><body>\
<h1>seckill chaos: {verdict}</h1><p>{users} buyers, {stock} units, {rate} purchases/s for {secs} s, seed {seed}; \
{requests} answers, {dropped} dropped sends.</p>{svg}\
<table><tr>{header}</tr>{rows}</table>\
<h2>Checks</h2><ul>{checks}</ul></body></html>",
        verdict = report.verdict,
        users = report.users,
        stock = report.stock,
        rate = report.rate,
        secs = report.duration_secs,
        seed = report.seed,
        requests = report.requests,
        dropped = report.dropped,
        svg = timeline_svg(report),
    )
}

/// Answers per slice over the run (sold, refused, failed), with every
/// fault's window shaded and named.
fn timeline_svg(report: &ChaosReport) -> String {
    let end_ms = report
        .timeline
        .last()
        .map_or(1, |tick| tick.at_ms + 1)
        .max(
            report
                .windows
                .iter()
                .map(|w| w.end.as_millis() as u64)
                .max()
                .unwrap_or(0),
        )
        .max(1) as f64;
    let peak = report
        .timeline
        .iter()
        .map(|t| t.sold.max(t.refused).max(t.failed))
        .max()
        .unwrap_or(1)
        .max(1) as f64;
    let x = |ms: f64| MARGIN + (WIDTH - 2.0 * MARGIN) * ms / end_ms;
    let y = |n: u64| HEIGHT - MARGIN - (HEIGHT - 2.0 * MARGIN) * n as f64 / peak;
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{WIDTH}\" height=\"{HEIGHT}\" role=\"img\" aria-label=\"answers over time, faults shaded\">"
    );
    for window in &report.windows {
        let (from, to) = (
            x(window.start.as_millis() as f64),
            x(window.end.as_millis() as f64),
        );
        let _ = write!(
            svg,
            "<rect x=\"{from:.1}\" y=\"{MARGIN}\" width=\"{:.1}\" height=\"{:.1}\" fill=\"#f4c7c3\"/>\
<text x=\"{from:.1}\" y=\"{:.1}\" font-size=\"10\">{}</text>",
            (to - from).max(2.0),
            HEIGHT - 2.0 * MARGIN,
            MARGIN - 4.0,
            window.fault.as_str()
        );
    }
    for (name, colour, pick) in [
        ("sold", "#2a7", (|t: &Tick| t.sold) as fn(&Tick) -> u64),
        ("refused", "#57c", |t: &Tick| t.refused),
        ("failed", "#c33", |t: &Tick| t.failed),
    ] {
        let points: Vec<String> = report
            .timeline
            .iter()
            .map(|t| format!("{:.1},{:.1}", x(t.at_ms as f64), y(pick(t))))
            .collect();
        let _ = write!(
            svg,
            "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"1.5\" points=\"{}\"><title>{name}</title></polyline>",
            points.join(" ")
        );
    }
    let _ = write!(
        svg,
        "<text x=\"{MARGIN}\" y=\"{:.1}\" font-size=\"11\">0 s</text><text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">{:.0} s</text>\
<text x=\"{:.1}\" y=\"{:.1}\" font-size=\"11\" text-anchor=\"end\">green sold, blue refused, red failed (per slice)</text></svg>",
        HEIGHT - MARGIN + 14.0,
        WIDTH - MARGIN,
        HEIGHT - MARGIN + 14.0,
        end_ms / 1000.0,
        WIDTH - MARGIN,
        HEIGHT - 6.0
    );
    svg
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}
