//! What the run is doing, as it does it: connect, release, answers by
//! outcome, settle, verify.
//!
//! On a terminal each phase is a live indicatif bar; anywhere else (CI, a
//! pipe, a log file) each phase prints plain lines: when it starts, its
//! counts about once a second, and how it ended. The bars are drawn
//! together ([`BARS`]), and whatever else writes to the terminal meanwhile
//! (the log) goes through [`print_above`], which clears them, prints, and
//! draws them again below: a line is never glued to a bar.

use std::io::IsTerminal;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::Write;
use std::sync::LazyLock;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::answer::AnswerKind;

/// How often plain mode repeats a phase's counts.
const PLAIN_EVERY: Duration = Duration::from_secs(1);

/// Every live bar of the process, drawn on stderr as one block.
static BARS: LazyLock<MultiProgress> =
    LazyLock::new(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));

/// Print `text` (whole lines) on stderr above the live bars, which are
/// drawn again below it; with none, simply print it.
pub fn print_above(text: &[u8]) {
    BARS.suspend(|| {
        let _ = std::io::stderr().write_all(text);
    });
}

/// Where progress goes. Cheap to clone.
#[derive(Clone)]
pub struct Progress {
    live: bool,
}

impl Progress {
    /// Bars on a terminal, plain lines otherwise.
    pub fn stderr() -> Self {
        Self {
            live: std::io::stderr().is_terminal(),
        }
    }

    /// Start a phase; `total` gives it a bar, otherwise a spinner.
    pub fn phase(&self, name: &str, total: Option<u64>) -> Phase {
        let bar = self.live.then(|| {
            let bar = BARS.add(ProgressBar::with_draw_target(
                total,
                ProgressDrawTarget::hidden(),
            ));
            let template = if total.is_some() {
                "{prefix:>8.bold} [{bar:30.cyan/blue}] {pos}/{len} {msg}"
            } else {
                "{prefix:>8.bold} {spinner} {elapsed} {msg}"
            };
            bar.set_style(
                ProgressStyle::with_template(template)
                    .expect("a valid progress template")
                    .progress_chars("=> "),
            );
            bar.set_prefix(name.to_owned());
            bar.enable_steady_tick(Duration::from_millis(100));
            bar
        });
        if bar.is_none() {
            eprintln!("{name:>8}: started");
        }
        Phase {
            name: name.to_owned(),
            bar,
            started: Instant::now(),
            last_line: Arc::new(Mutex::new(Instant::now())),
        }
    }
}

/// One phase of the run.
#[derive(Clone)]
pub struct Phase {
    name: String,
    bar: Option<ProgressBar>,
    started: Instant,
    /// When plain mode last printed a line.
    last_line: Arc<Mutex<Instant>>,
}

impl Phase {
    /// Whether plain mode is due to print a line now.
    fn plain_due(&self) -> bool {
        let mut last = self.last_line.lock().expect("progress lock");
        if last.elapsed() >= PLAIN_EVERY {
            *last = Instant::now();
            true
        } else {
            false
        }
    }

    pub fn position(&self, done: u64) {
        match &self.bar {
            Some(bar) => bar.set_position(done),
            None if self.plain_due() => eprintln!("{:>8}: {done}", self.name),
            None => {}
        }
    }

    /// Show the answers so far, by outcome.
    pub fn answers(&self, counts: &[u64; AnswerKind::ALL.len()]) {
        let total: u64 = counts.iter().sum();
        let text = AnswerKind::ALL
            .iter()
            .zip(counts)
            .filter(|(_, count)| **count > 0)
            .map(|(outcome, count)| format!("{} {count}", outcome.as_str()))
            .collect::<Vec<_>>()
            .join(", ");
        match &self.bar {
            Some(bar) => {
                bar.set_position(total);
                bar.set_message(text);
            }
            None if self.plain_due() => eprintln!("{}", answers_line(&self.name, total, &text)),
            None => {}
        }
    }

    pub fn message(&self, text: &str) {
        match &self.bar {
            Some(bar) => bar.set_message(text.to_owned()),
            None if self.plain_due() => eprintln!("{:>8}: {text}", self.name),
            None => {}
        }
    }

    /// End the phase with a one-line summary.
    pub fn finish(&self, summary: &str) {
        match &self.bar {
            Some(bar) => {
                // The bar let go, and its summary printed above the live
                // ones as a line of its own: a log line printed later comes
                // after it, in the order things happened.
                bar.finish_and_clear();
                BARS.remove(bar);
                let _ = BARS.println(format!(
                    "{:>8}: {summary} ({:.1} s)",
                    self.name,
                    self.started.elapsed().as_secs_f64()
                ));
            }
            None => eprintln!(
                "{:>8}: done in {:.2?}: {summary}",
                self.name,
                self.started.elapsed()
            ),
        }
    }
}

/// Plain mode's line of answers so far: `release: 12 answers: accepted 3,
/// sold_out 9`, or `release: no answers yet` (never a colon with nothing
/// after it).
fn answers_line(name: &str, total: u64, by_outcome: &str) -> String {
    if total == 0 {
        format!("{name:>8}: no answers yet")
    } else {
        format!("{name:>8}: {total} answers: {by_outcome}")
    }
}

#[cfg(test)]
mod tests {
    use super::answers_line;

    #[test]
    fn a_line_of_answers_never_ends_in_a_colon_with_nothing_after_it() {
        assert_eq!(answers_line("release", 0, ""), " release: no answers yet");
        assert_eq!(
            answers_line("release", 3, "accepted 3"),
            " release: 3 answers: accepted 3"
        );
    }
}
