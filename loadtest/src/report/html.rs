//! The report as one self-contained HTML page: the verdict, the terminal
//! table, two charts ([`super::charts`]), latency by outcome and every
//! check. No scripts and no external files, so the page can be mailed or
//! attached to a CI run and still open years later.

use std::fmt::Write as _;

use super::text::cells;
use super::{Report, SCHEMA};

impl Report {
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
}

pub(super) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_escapes_what_it_did_not_write() {
        assert_eq!(escape("<b>&\""), "&lt;b&gt;&amp;&quot;");
    }
}
