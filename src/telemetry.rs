//! Logging: structured `tracing` events to stderr, filtered by `RUST_LOG`
//! (default `info`). Standard output is kept for what commands print on
//! purpose (a created sale as JSON, the address being served).

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

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Ignore the error of a second init (tests call it more than once).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
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
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = PlainVisitor {
            writer,
            first: true,
            result: Ok(()),
        };
        fields.record(&mut visitor);
        visitor.result
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
        } else {
            self.record_debug(field, &value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        let name = field.name();
        if self.result.is_err() || name.starts_with("log.") {
            return;
        }
        let space = if self.first { "" } else { " " };
        self.first = false;
        self.result = if name == "message" {
            write!(self.writer, "{space}{value:?}")
        } else {
            write!(self.writer, "{space}{name}={value:?}")
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a log line of a request looks like: the span's fields, then
    /// the event's message and fields; a `log` crate record's own fields
    /// left out.
    #[test]
    fn fields_are_written_as_the_default_writes_them() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(lines.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(PlainFields)
            .finish();
        tracing::subscriber::with_default(subscriber, || {
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
        let text = lines.text();
        assert!(
            text.contains(r#"request{method=POST path="/buy"}: seckill::telemetry::tests: rate limited kind="ip" count=3"#),
            "{text}"
        );
        assert!(text.contains(r#"from the log crate answer="x""#), "{text}");
        assert!(!text.contains("log."), "{text}");
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
