//! Text in aligned columns, for the terminal: the one way the workspace
//! lays out a table. The load test's latency and side-by-side tables
//! (`text.rs`) are drawn with it, and so are the tables of the lab, chaos
//! and the bench in `seckill-tools`.
//!
//! A column is as wide as its widest cell, its heading included, and never
//! narrower than the least width it was given: a table whose widths are
//! quoted in the docs keeps them whatever its figures. Text columns keep to
//! the left, figures to the right, as each column says. No line ends in
//! spaces.
//!
//! ```
//! use seckill_loadtest::report::Table;
//!
//! let mut table = Table::new().left("strategy").right("202s");
//! table.row(["naive", "654"]);
//! table.row(["lock", "10"]);
//! assert_eq!(
//!     table.to_string(),
//!     "strategy  202s\n\
//!      naive      654\n\
//!      lock        10\n"
//! );
//! ```

use std::fmt;

/// Which side of its column a cell keeps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Text: names, notes, verdicts.
    Left,
    /// Figures, so that their digits line up.
    Right,
}

/// One column: its heading, its side, and the least width it takes.
#[derive(Debug, Clone)]
struct Column {
    heading: String,
    align: Align,
    min_width: usize,
}

/// A table for the terminal: add the columns, then the rows, then print it
/// (`Display`), one line for the headings and one per row.
#[derive(Debug, Clone)]
pub struct Table {
    columns: Vec<Column>,
    /// One cell per column, in the columns' order.
    rows: Vec<Vec<String>>,
    /// Spaces between two cells.
    gap: usize,
    /// A line of dashes under the headings.
    rule: bool,
}

impl Default for Table {
    fn default() -> Self {
        Self::new()
    }
}

impl Table {
    /// A table with no columns yet, its cells two spaces apart.
    pub fn new() -> Self {
        Self {
            columns: Vec::new(),
            rows: Vec::new(),
            gap: 2,
            rule: false,
        }
    }

    /// Cells `spaces` apart instead of two.
    pub fn gap(mut self, spaces: usize) -> Self {
        self.gap = spaces;
        self
    }

    /// A line of dashes under the headings, each as wide as its column.
    pub fn rule(mut self) -> Self {
        self.rule = true;
        self
    }

    /// Add a column whose cells keep to `align`, at least `min_width`
    /// characters wide.
    pub fn column(mut self, heading: impl Into<String>, align: Align, min_width: usize) -> Self {
        self.columns.push(Column {
            heading: heading.into(),
            align,
            min_width,
        });
        self
    }

    /// Add a column for each `(heading, align, min_width)`, in order.
    pub fn columns<'a>(
        self,
        columns: impl IntoIterator<Item = &'a (&'a str, Align, usize)>,
    ) -> Self {
        columns
            .into_iter()
            .fold(self, |table, &(heading, align, width)| {
                table.column(heading, align, width)
            })
    }

    /// Add a column of text.
    pub fn left(self, heading: impl Into<String>) -> Self {
        self.column(heading, Align::Left, 0)
    }

    /// Add a column of figures.
    pub fn right(self, heading: impl Into<String>) -> Self {
        self.column(heading, Align::Right, 0)
    }

    /// Add a row: one cell per column, in the columns' order.
    ///
    /// # Panics
    ///
    /// When the row has more or fewer cells than the table has columns:
    /// a table built so is a mistake in the code that builds it.
    pub fn row<S: Into<String>>(&mut self, cells: impl IntoIterator<Item = S>) {
        let cells: Vec<String> = cells.into_iter().map(Into::into).collect();
        assert_eq!(
            cells.len(),
            self.columns.len(),
            "a row has one cell per column"
        );
        self.rows.push(cells);
    }

    /// Each column's width: its widest cell, its heading, or its least
    /// width, whichever is widest. Counted in characters, as `format!`
    /// pads (`µs` is two).
    fn widths(&self) -> Vec<usize> {
        self.columns
            .iter()
            .enumerate()
            .map(|(i, column)| {
                self.rows
                    .iter()
                    .map(|row| row[i].chars().count())
                    .chain([column.heading.chars().count(), column.min_width])
                    .max()
                    .unwrap_or(0)
            })
            .collect()
    }

    /// One line: the cells, each padded to its column's width on the side
    /// away from its alignment, `gap` apart, trailing spaces trimmed.
    fn line<'a>(
        &self,
        f: &mut fmt::Formatter<'_>,
        cells: impl Iterator<Item = &'a str>,
        widths: &[usize],
    ) -> fmt::Result {
        let mut line = String::new();
        for (i, ((cell, width), column)) in cells.zip(widths).zip(&self.columns).enumerate() {
            if i > 0 {
                line.extend(std::iter::repeat_n(' ', self.gap));
            }
            let width = *width;
            line.push_str(&match column.align {
                Align::Left => format!("{cell:<width$}"),
                Align::Right => format!("{cell:>width$}"),
            });
        }
        writeln!(f, "{}", line.trim_end())
    }
}

impl fmt::Display for Table {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let widths = self.widths();
        let headings = self.columns.iter().map(|c| c.heading.as_str());
        self.line(f, headings, &widths)?;
        if self.rule {
            let dashes: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
            self.line(f, dashes.iter().map(String::as_str), &widths)?;
        }
        for row in &self.rows {
            self.line(f, row.iter().map(String::as_str), &widths)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_are_as_wide_as_their_widest_cell_or_their_least_width() {
        let mut table = Table::new()
            .gap(1)
            .column("fault", Align::Left, 8)
            .column("n", Align::Right, 3)
            .left("note");
        table.row(["app-kill", "1595", ""]);
        table.row(["flood", "7", "µs"]);
        assert_eq!(
            table.to_string(),
            "fault       n note\n\
             app-kill 1595\n\
             flood       7 µs\n"
        );
    }

    #[test]
    fn a_rule_underlines_each_heading_as_wide_as_its_column() {
        let mut table = Table::new().rule().left("a").right("bb");
        table.row(["xyz", "1"]);
        assert_eq!(table.to_string(), "a    bb\n---  --\nxyz   1\n");
    }

    #[test]
    #[should_panic(expected = "one cell per column")]
    fn a_row_with_a_cell_too_few_is_a_mistake() {
        Table::new().left("a").right("b").row(["only one"]);
    }
}
