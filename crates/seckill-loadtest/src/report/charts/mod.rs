//! Every chart of the workspace's HTML reports, drawn with plotters into
//! SVG strings. SVG keeps a page self-contained and sharp at any size.
//!
//! The load test's report has two: answers over time by outcome (where the
//! sell-out shows) and latency by percentile. The tools draw their own
//! figures with the two general shapes below, so that every page draws the
//! same way: counts over time with stretches of it shaded and named
//! ([`Timeline`]: chaos's answers and its fault windows, `timeline.rs`),
//! and one bar per row beside a mark ([`Bars`]: the lab's `202`s against
//! the units, `bars.rs`). What every chart shares is here: its colours,
//! its grid, its legend, and how it becomes SVG.

mod bars;
mod timeline;

use askama::Template as _;
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::Report;
use crate::answer::AnswerKind;

pub use bars::{Bar, Bars, Mark};
pub use timeline::{Line, Span, Timeline};

/// The chart's grid, light enough to read the lines over it.
const GRID: RGBColor = RGBColor(235, 235, 235);
/// Room right of a [`Timeline`]'s or [`Bars`]'s plot for the legend, so
/// that the legend never covers what is drawn.
const LEGEND_WIDTH: u32 = 180;

/// The labels' size, in the chart's pixels: a page shows the 900-pixel
/// chart about 740 wide (the lab's, on a 1024-pixel projector), so 15
/// reads as about 12 there.
const LABEL: u32 = 15;

/// A colour of a chart, as red, green and blue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Colour(pub u8, pub u8, pub u8);

impl Colour {
    /// What went well: sold, as expected.
    pub const GREEN: Colour = Colour(0x22, 0xaa, 0x77);
    /// What is neither: refused by the rules (sold out, already bought).
    pub const BLUE: Colour = Colour(0x55, 0x77, 0xcc);
    /// What went wrong: failed, not as expected.
    pub const RED: Colour = Colour(0xcc, 0x33, 0x33);
    /// A stretch of trouble, shaded behind the lines.
    const SHADE: Colour = Colour(0xf4, 0xc7, 0xc3);

    fn rgb(self) -> RGBColor {
        RGBColor(self.0, self.1, self.2)
    }
}

/// How a legend shows what an entry names.
#[derive(Debug, Clone, Copy)]
enum Swatch {
    /// A line of the chart.
    Line(RGBColor),
    /// A dashed line: a mark.
    Dashed(RGBColor),
    /// A shaded block: a stretch of time, a bar.
    Block(RGBColor),
}

/// The drawing errors of an SVG chart.
type DrawError = DrawingAreaErrorKind<<SVGBackend<'static> as DrawingBackend>::ErrorType>;

/// A legend in `area`, right of its chart, one entry a line: its swatch,
/// then its name. (plotters draws its own legend inside the plot, where it
/// covers what it explains; drawn beside it, it covers nothing.)
fn draw_legend(
    area: &DrawingArea<SVGBackend<'_>, Shift>,
    entries: &[(&str, Swatch)],
) -> Result<(), DrawError> {
    let font = ("sans-serif", LABEL)
        .into_font()
        .color(&BLACK)
        .pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (name, swatch)) in entries.iter().enumerate() {
        let y = 30 + 22 * i32::try_from(i).unwrap_or(0);
        match *swatch {
            Swatch::Line(colour) => {
                area.draw(&PathElement::new(
                    vec![(0, y), (20, y)],
                    colour.stroke_width(2),
                ))?;
            }
            Swatch::Dashed(colour) => {
                for x in [0, 8, 16] {
                    area.draw(&PathElement::new(
                        vec![(x, y), (x + 4, y)],
                        colour.stroke_width(1),
                    ))?;
                }
            }
            Swatch::Block(colour) => {
                area.draw(&Rectangle::new([(0, y - 5), (20, y + 5)], colour.filled()))?;
            }
        }
        area.draw(&Text::new((*name).to_owned(), (26, y), font.clone()))?;
    }
    Ok(())
}

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
        svg_chart((900, 360), |root| {
            // Log scale: ten winners must show beside thousands of
            // "sold out"; an empty bucket sits on the floor, at 0.5.
            let mut chart = ChartBuilder::on(root)
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..end_s, (FLOOR..peak * 2.0).log_scale())?;
            chart
                .configure_mesh()
                .light_line_style(GRID)
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
        svg_chart((900, 360), |root| {
            let mut chart = ChartBuilder::on(root)
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..8f64, (lowest / 2.0..highest * 2.0).log_scale())?;
            chart
                .configure_mesh()
                .light_line_style(GRID)
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

/// Draw one chart of `size` into an SVG string; a drawing error becomes a
/// note in the page rather than a failed run.
///
/// plotters writes each tag, and each label's text, on a line of its own;
/// the lines are joined, so that a label reads in the page as it was
/// written (`>redis-wipe</text>`) and the page is smaller. No label has a
/// line break of its own.
fn svg_chart<E: std::fmt::Display>(
    size: (u32, u32),
    draw: impl FnOnce(&DrawingArea<SVGBackend<'_>, Shift>) -> Result<(), E>,
) -> String {
    let mut svg = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        root.fill(&WHITE)
            .map_err(|e| e.to_string())
            .and_then(|()| draw(&root).map_err(|e| e.to_string()))
            .and_then(|()| root.present().map_err(|e| e.to_string()))
    };
    match drawn {
        Ok(()) => svg.replace('\n', ""),
        Err(error) => Unavailable { error: &error }
            .render()
            .expect("the note renders: its one value is a string"),
    }
}

/// What stands in a page for a chart that could not be drawn.
#[derive(askama::Template)]
#[template(ext = "html", source = "<p>chart unavailable: {{ error }}</p>")]
struct Unavailable<'a> {
    error: &'a str,
}

#[cfg(test)]
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chart_that_cannot_be_drawn_says_so_escaped() {
        let note = svg_chart((10, 10), |_| Err("<b> & co"));
        assert_eq!(note, "<p>chart unavailable: &#60;b&#62; &#38; co</p>");
    }
}
