//! Counts over time, one line each, with stretches of time shaded and
//! named: chaos's answers, its faults' windows behind them.

use plotters::prelude::*;

use super::{Colour, GRID, LEGEND_WIDTH, Swatch, draw_legend, svg_chart};

/// Counts over time, one line each, with stretches of time shaded and
/// named: chaos's answers per slice, its faults' windows behind them.
#[derive(Debug, Clone)]
pub struct Timeline<'a> {
    /// What the y axis counts: "answers per 250 ms".
    pub y_desc: &'a str,
    pub lines: Vec<Line<'a>>,
    /// What a shaded stretch is, for the legend: "fault in force".
    pub spans_desc: &'a str,
    pub spans: Vec<Span<'a>>,
}

/// One line of a [`Timeline`].
#[derive(Debug, Clone)]
pub struct Line<'a> {
    /// Its name in the legend.
    pub name: &'a str,
    pub colour: Colour,
    /// `(seconds from the start, count)`, in time order.
    pub points: Vec<(f64, f64)>,
}

/// A stretch of a [`Timeline`], shaded, its name written at its top.
#[derive(Debug, Clone)]
pub struct Span<'a> {
    pub name: &'a str,
    /// From and to, in seconds from the start.
    pub from_s: f64,
    pub to_s: f64,
}

impl Timeline<'_> {
    /// The chart, 900×300, its legend right of it.
    pub fn to_svg(&self) -> String {
        let end_s = self
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|(x, _)| *x))
            .chain(self.spans.iter().map(|span| span.to_s))
            .fold(1.0_f64, f64::max);
        let peak = self
            .lines
            .iter()
            .flat_map(|line| line.points.iter().map(|(_, y)| *y))
            .fold(1.0_f64, f64::max);
        // Room above the highest point for the spans' names.
        let top = peak * 1.3;
        let shade = Colour::SHADE.rgb();
        svg_chart((900, 300), |root| {
            let (plot, side) = root.split_horizontally(900 - LEGEND_WIDTH);
            let mut chart = ChartBuilder::on(&plot)
                .margin(15)
                .x_label_area_size(40)
                .y_label_area_size(60)
                .build_cartesian_2d(0f64..end_s, 0f64..top)?;
            chart
                .configure_mesh()
                .light_line_style(GRID)
                .y_label_formatter(&|y| format!("{y:.0}"))
                .x_desc("seconds from the start")
                .y_desc(self.y_desc)
                .draw()?;
            chart.draw_series(self.spans.iter().map(|span| {
                Rectangle::new([(span.from_s, 0.0), (span.to_s, top)], shade.filled())
            }))?;
            // Each name at its span's top, every other one a line lower,
            // so that two spans close together do not write over each other.
            let font = ("sans-serif", 12).into_font().color(&BLACK);
            chart.draw_series(self.spans.iter().enumerate().map(|(i, span)| {
                let lower = if i % 2 == 0 { 2 } else { 16 };
                EmptyElement::at((span.from_s, top))
                    + Text::new(span.name.to_owned(), (2, lower), font.clone())
            }))?;
            for line in &self.lines {
                chart.draw_series(LineSeries::new(
                    line.points.iter().copied(),
                    line.colour.rgb().stroke_width(2),
                ))?;
            }
            let mut legend = vec![(self.spans_desc, Swatch::Block(shade))];
            legend.extend(
                self.lines
                    .iter()
                    .map(|line| (line.name, Swatch::Line(line.colour.rgb()))),
            );
            draw_legend(&side, &legend)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_span_is_shaded_and_named_as_written() {
        let svg = Timeline {
            y_desc: "answers per 250 ms",
            lines: vec![Line {
                name: "sold",
                colour: Colour::GREEN,
                points: vec![(0.0, 3.0), (1.0, 5.0), (2.0, 4.0)],
            }],
            spans_desc: "fault in force",
            spans: vec![Span {
                name: "redis-wipe",
                from_s: 0.5,
                to_s: 1.5,
            }],
        }
        .to_svg();
        assert!(svg.starts_with("<svg"), "{svg}");
        assert!(svg.contains(">redis-wipe</text>"), "{svg}");
        assert!(svg.contains(">fault in force</text>"), "{svg}");
        assert!(!svg.contains('\n'));
    }
}
