//! One bar per row beside a mark: the lab's `202`s per row against the
//! units, its p99 per row.

use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, Ranged, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::{Colour, GRID, LABEL, LEGEND_WIDTH, Swatch, draw_legend, svg_chart};

/// One bar per row, and a mark across them: the lab's `202`s per row
/// beside the units, or its p99 per row.
#[derive(Debug, Clone)]
pub struct Bars<'a> {
    /// Above the chart: what the bars are.
    pub title: &'a str,
    /// Top to bottom.
    pub bars: Vec<Bar>,
    pub mark: Option<Mark<'a>>,
}

/// One bar of [`Bars`].
#[derive(Debug, Clone)]
pub struct Bar {
    /// Its name, left of it.
    pub label: String,
    pub value: f64,
    pub colour: Colour,
}

/// A dashed line across [`Bars`] at one value, named in the legend.
#[derive(Debug, Clone)]
pub struct Mark<'a> {
    pub name: &'a str,
    pub value: f64,
}

impl Bars<'_> {
    /// The chart: 900 wide, 26 high a bar, the mark's legend right of it.
    pub fn to_svg(&self) -> String {
        let count = self.bars.len().max(1);
        let highest = self
            .bars
            .iter()
            .map(|bar| bar.value)
            .chain(self.mark.as_ref().map(|mark| mark.value))
            .fold(1.0_f64, f64::max);
        let widest_label = self
            .bars
            .iter()
            .map(|bar| bar.label.chars().count())
            .max()
            .unwrap_or(0);
        // Bar `i` fills the band from `count - 1 - i` to `count - i` of the
        // y axis ([`Bands`]), the first at the top; its name is written at
        // the band's middle.
        let band = |i: usize| (count - 1 - i) as f64;
        let label_of = |y: &f64| {
            let i = count as f64 - 0.5 - y;
            self.bars
                .get(i.round().max(0.0) as usize)
                .map_or_else(String::new, |bar| bar.label.clone())
        };
        let height = 90 + 30 * u32::try_from(count).unwrap_or(u32::MAX / 30);
        svg_chart((900, height), |root| {
            let (plot, side) = root.split_horizontally(900 - LEGEND_WIDTH);
            let mut chart = ChartBuilder::on(&plot)
                .caption(self.title, ("sans-serif", 16))
                .margin(15)
                .x_label_area_size(30)
                // About 9 pixels a character, at LABEL pixels.
                .y_label_area_size(u32::try_from(widest_label * 9 + 20).unwrap_or(250))
                // A fifth more than the longest bar: room for its figure.
                .build_cartesian_2d(0f64..highest * 1.2, Bands(count))?;
            chart
                .configure_mesh()
                .light_line_style(GRID)
                .disable_y_mesh()
                // LABEL pixels whatever the chart's height: plotters
                // sizes labels by it, and a chart of one bar is low.
                .label_style(("sans-serif", LABEL))
                .x_label_formatter(&|x| format!("{x:.0}"))
                .y_label_formatter(&label_of)
                .draw()?;
            chart.draw_series(self.bars.iter().enumerate().map(|(i, bar)| {
                let mut rect = Rectangle::new(
                    [(0.0, band(i)), (bar.value, band(i) + 1.0)],
                    bar.colour.rgb().filled(),
                );
                rect.set_margin(3, 3, 0, 0);
                rect
            }))?;
            let font = ("sans-serif", LABEL)
                .into_font()
                .color(&BLACK)
                .pos(Pos::new(HPos::Left, VPos::Center));
            chart.draw_series(self.bars.iter().enumerate().map(|(i, bar)| {
                EmptyElement::at((bar.value, band(i) + 0.5))
                    + Text::new(format!("{:.0}", bar.value), (4, 0), font.clone())
            }))?;
            let Some(mark) = &self.mark else {
                return Ok(());
            };
            chart.draw_series(DashedLineSeries::new(
                [(mark.value, 0.0), (mark.value, count as f64)],
                6,
                4,
                BLACK.stroke_width(1),
            ))?;
            draw_legend(&side, &[(mark.name, Swatch::Dashed(BLACK))])
        })
    }
}

/// The y axis of [`Bars`]: from 0 to the number of bars, one band of 1
/// each, whose key points (where the names go) are the bands' middles.
struct Bands(usize);

impl Ranged for Bands {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(0.0..self.0 as f64).map(value, limit)
    }

    fn key_points<Hint: KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        // No light lines between the bands: only the names.
        if hint.weight().allow_light_points() {
            return Vec::new();
        }
        (0..self.0).map(|band| band as f64 + 0.5).collect()
    }

    fn range(&self) -> std::ops::Range<f64> {
        0.0..self.0 as f64
    }
}

impl ValueFormatter<f64> for Bands {
    fn format(value: &f64) -> String {
        value.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_bar_is_named_and_its_figure_written() {
        let bar = |label: &str, value: f64, colour| Bar {
            label: label.to_owned(),
            value,
            colour,
        };
        let svg = Bars {
            title: "202s per row",
            bars: vec![
                bar("naive", 654.0, Colour::GREEN),
                bar("lock", 10.0, Colour::RED),
            ],
            mark: Some(Mark {
                name: "units",
                value: 10.0,
            }),
        }
        .to_svg();
        for text in [
            ">naive</text>",
            ">lock</text>",
            ">654</text>",
            ">units</text>",
        ] {
            assert!(svg.contains(text), "{text} missing: {svg}");
        }
    }
}
