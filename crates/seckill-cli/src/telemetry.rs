//! Logging: structured `tracing` events to stderr, filtered by `RUST_LOG`
//! (default `info`). Standard output is kept for what commands print on
//! purpose (a created sale as JSON, the address being served, a worker's
//! ready line).

use std::io::IsTerminal;

use std::fmt;

use tracing::field::{Field, Visit};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// The filter when `RUST_LOG` is unset. Failures are logged, with their
/// cause, by `web::error`; the request middleware (`web::security::guard`)
/// opens every request's span and logs only its refusals. The bench runs
/// its instances with it, as users do.
pub const DEFAULT_FILTER: &str = "info,sqlx=warn,actix_server=warn";

/// Where log lines go instead of straight to stderr: set by a tool that
/// draws progress bars there, so that each line is printed above the bars
/// rather than glued to one ([`send_logs_through`]).
type Sink = Box<dyn Fn(&[u8]) + Send + Sync>;
static SINK: std::sync::RwLock<Option<Sink>> = std::sync::RwLock::new(None);

/// Send every log line through `sink` from now on (`None`: straight to
/// stderr again). A tool with live progress bars sets one that prints
/// above them (`seckill_loadtest::progress::print_above`).
pub fn send_logs_through(sink: Option<Sink>) {
    *SINK.write().expect("the log sink lock") = sink;
}

/// The log's writer: one `write` per event (the formatter hands over each
/// line whole), to the sink if one is set, else to stderr.
struct LogWriter;

impl std::io::Write for LogWriter {
    fn write(&mut self, line: &[u8]) -> std::io::Result<usize> {
        match SINK.read().expect("the log sink lock").as_ref() {
            Some(sink) => sink(line),
            None => std::io::stderr().write_all(line)?,
        }
        Ok(line.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Ignore the error of a second init (tests call it more than once).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogWriter)
        .with_ansi(std::io::stderr().is_terminal())
        .fmt_fields(PlainFields)
        .try_init();
}

/// Fields written as `name=value`, space-separated, the message bare,
/// and the `log.` fields of records from the `log` crate left out: what
/// the formatter's default writes (`DefaultFields`), without its styling.
/// The default styles every field name (italic, on a terminal) through
/// `nu_ansi_term`, which costs as much with colours off, and every
/// request's span has three fields, written out when it opens: a sold-out
/// answer spent a twentieth of its instructions there (callgrind).
#[derive(Clone, Copy)]
struct PlainFields;

impl<'writer> FormatFields<'writer> for PlainFields {
    fn format_fields<R: RecordFields>(
        &self,
        mut writer: Writer<'writer>,
        fields: R,
    ) -> fmt::Result {
        // Written into a string of its own, sized for a usual line, and
        // handed over whole: a span's fields go into a string that starts
        // empty and would grow, and move, at nearly every field.
        let mut text = String::with_capacity(128);
        let mut visitor = PlainVisitor {
            writer: Writer::new(&mut text),
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result?;
        writer.write_str(&text)
    }
}

/// Writes one record's fields for [`PlainFields`].
struct PlainVisitor<'writer> {
    writer: Writer<'writer>,
    /// No field written yet: none needs a space before it.
    first: bool,
    result: fmt::Result,
}

impl Visit for PlainVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"));
        } else if needs_no_escape(value) {
            // What `{:?}` writes for such a string, without its walk over
            // every character for escapes: a request's path is written
            // this way as every request's span opens.
            self.write_field(field, |writer| {
                writer.write_char('"')?;
                writer.write_str(value)?;
                writer.write_char('"')
            });
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write_field(field, |writer| write!(writer, "{value:?}"));
    }
}

impl PlainVisitor<'_> {
    /// `name=` and the value `write` writes; the message without its name.
    fn write_field(&mut self, field: &Field, write: impl FnOnce(&mut Writer<'_>) -> fmt::Result) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = (|| {
            self.writer.write_str(space)?;
            if name != "message" {
                self.writer.write_str(name)?;
                self.writer.write_char('=')?;
            }
            write(&mut self.writer)
        })();
    }
}

/// Whether `{:?}` writes `value` as it is, between quotes: printable ASCII
/// with no quote or backslash.
fn needs_no_escape(value: &str) -> bool {
    value
        .bytes()
        .all(|byte| (b' '..=b'~').contains(&byte) && byte != b'"' && byte != b'\\')
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a log line of a request looks like: the span's fields, then
    /// the event's message and fields; a `log` crate record's own fields
    /// left out.
    #[test]
    fn fields_are_written_as_the_default_writes_them() {
        let text = written(|| {
            let span = tracing::info_span!("request", method = %"POST", path = "/buy");
            let _entered = span.enter();
            tracing::warn!(kind = "ip", count = 3, "rate limited");
            tracing::warn!(
                log.target = "actix_http",
                log.line = 7,
                answer = "x",
                "from the log crate"
            );
        });
        assert!(
            text.contains(r#"request{method=POST path="/buy"}: seckill_cli::telemetry::tests: rate limited kind="ip" count=3"#),
            "{text}"
        );
        assert!(text.contains(r#"from the log crate answer="x""#), "{text}");
        assert!(!text.contains("log."), "{text}");
    }

    /// A string field is written as `{:?}` writes it, whether or not it
    /// has characters to escape.
    #[test]
    fn strings_are_quoted_and_escaped_as_debug_writes_them() {
        for value in [
            "/buy",
            "",
            "a\"b",
            "back\\slash",
            "tab\there",
            "ünï",
            "\u{202E}",
        ] {
            let text = written(|| tracing::warn!(path = value));
            assert!(
                text.ends_with(&format!(" path={value:?}\n")),
                "{value:?}: {text}"
            );
        }
    }

    /// What the formatter writes of what `log` logs, without times or colours.
    fn written(log: impl FnOnce()) -> String {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(PlainFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        lines.text()
    }

    /// Everything written, shared with the formatter.
    #[derive(Clone, Default)]
    struct Lines(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

    impl Lines {
        fn text(&self) -> String {
            String::from_utf8(self.0.lock().expect("not poisoned").clone()).expect("UTF-8")
        }
    }

    impl std::io::Write for Lines {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .expect("not poisoned")
                .extend_from_slice(bytes);
            Ok(bytes.len())
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Lines {
        type Writer = Lines;

        fn make_writer(&'a self) -> Self::Writer {
            self.clone()
        }
    }
}

#[cfg(test)]
mod sink_tests {
    use std::io::Write;
    use std::sync::{Arc, Mutex};

    use super::{LogWriter, send_logs_through};

    #[test]
    fn a_log_line_goes_through_the_sink_while_one_is_set() {
        let seen = Arc::new(Mutex::new(Vec::<u8>::new()));
        let into = Arc::clone(&seen);
        send_logs_through(Some(Box::new(move |line: &[u8]| {
            into.lock().expect("lock").extend_from_slice(line);
        })));
        LogWriter.write_all(b"INFO sale loaded\n").expect("written");
        send_logs_through(None);
        assert_eq!(seen.lock().expect("lock").as_slice(), b"INFO sale loaded\n");
    }
}
