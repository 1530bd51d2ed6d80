//! The report as one self-contained HTML page: the verdict, the terminal
//! table, two charts ([`super::charts`]), latency by outcome and every
//! check. No scripts and no external files, so the page can be mailed or
//! attached to a CI run and still open years later.
//!
//! The page is an askama template, which escapes every value it is given
//! but the charts (`|safe`): SVG whose text plotters escaped itself. The
//! template is written here, beside the values that fill it, as the
//! crate's one page.

use askama::Template;

use super::text::cells;
use super::{Report, SCHEMA};

/// The page's values.
#[derive(Template)]
#[template(
    ext = "html",
    source = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>seckill load test: {{ report.label }}</title>
<style>
body { font: 16px/1.5 system-ui, sans-serif; color: #111; max-width: 60rem; margin: 0 auto; padding: 1rem; }
table { border-collapse: collapse; margin: 1rem 0; }
td, th { border-bottom: 1px solid #ccc; padding: .25rem .75rem; text-align: right; }
td:first-child, th:first-child, .text { text-align: left; }
tr.fail td { color: #a11; font-weight: 600; }
.verdict { font-size: 1.5rem; font-weight: 700; }
.verdict.PASS { color: #0a6b2d; } .verdict.FAIL, .verdict.INVALID { color: #a11; }
svg { max-width: 100%; height: auto; }
pre { background: #f4f4f4; padding: .5rem; white-space: pre-wrap; }
</style></head><body>
<h1>seckill load test: {{ report.label }}</h1>
<p class="verdict {{ verdict }}">{{ verdict }}</p>
<pre>{{ text }}</pre>
<h2>Outcomes over time</h2>
{{ timeline|safe }}
<h2>Latency by percentile</h2>
{{ percentiles|safe }}
<h2>Latency by outcome</h2>
<table><tr><th>outcome</th><th>count</th><th>p50</th><th>p90</th><th>p99</th><th>p99.9</th><th>max</th></tr>
{%- for row in latency %}<tr>{% for cell in row %}<td>{{ cell }}</td>{% endfor %}</tr>{% endfor -%}
</table>
<h2>Checks</h2>
<table><tr><th></th><th class="text">check</th><th>expected</th><th>found</th></tr>
{%- for check in report.invariants -%}
{%- if check.passed %}<tr class="pass"><td>pass</td>{% else %}<tr class="fail"><td>FAIL</td>{% endif -%}
<td class="text">{{ check.name }}</td><td>{{ check.expected }}</td><td>{{ check.actual }}</td></tr>
{%- endfor %}
{%- for problem in report.problems %}<tr class="fail"><td>INVALID</td><td colspan="3">{{ problem }}</td></tr>{% endfor -%}
</table>
<p>Started {{ report.started_at.to_rfc3339() }}. Schema {{ schema }}.</p>
</body></html>
"#
)]
struct Page<'a> {
    report: &'a Report,
    /// `PASS`, `FAIL` or `INVALID`: the verdict's class and its words.
    verdict: &'static str,
    /// The terminal report, shown as it was printed.
    text: String,
    /// The charts, as SVG.
    timeline: String,
    percentiles: String,
    /// The latency table's rows: outcome, count, p50, p90, p99, p99.9, max.
    latency: Vec<[String; 7]>,
    schema: &'static str,
}

impl Report {
    /// One self-contained HTML page: no scripts, no external files.
    pub fn to_html(&self) -> String {
        Page {
            report: self,
            verdict: self.verdict.as_str(),
            text: self.to_text(),
            timeline: self.timeline_svg(),
            percentiles: self.percentile_svg(),
            latency: self.summary.latency.iter().map(cells).collect(),
            schema: SCHEMA,
        }
        .render()
        .expect("the page renders: its values are strings and numbers, which always write")
    }
}
