//! The HTML report's two charts, drawn with plotters into SVG strings:
//! answers over time by outcome (where the sell-out shows) and latency by
//! percentile. SVG keeps the page self-contained and sharp at any size.

use plotters::prelude::*;

use super::Report;
use super::html::escape;
use crate::answer::AnswerKind;

impl Report {
    /// Answers per 100 ms, one line per outcome, the sell-out marked.
    pub(super) fn timeline_svg(&self) -> String {
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
            for (i, outcome) in AnswerKind::ALL.iter().enumerate() {
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
    pub(super) fn percentile_svg(&self) -> String {
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
