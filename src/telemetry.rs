//! Logging: structured `tracing` events to stderr, filtered by `RUST_LOG`
//! (default `info`). Standard output is kept for what commands print on
//! purpose (a created sale as JSON, the address being served).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::field::MakeExt;

/// The filter when `RUST_LOG` is unset. Failures are logged, with their
/// cause, by `web::error`; the request middleware (`web::security::guard`)
/// opens every request's span and logs nothing of its own. The bench runs
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
        .fmt_fields(plain_fields())
        .try_init();
}

/// Fields written as `name=value`, space-separated, the message bare: what
/// the formatter's default writes, without its styling. The default styles
/// every field name (italic, on a terminal) through `nu_ansi_term`, which
/// costs as much with colours off, and every request's span has three
/// fields that are written out when it opens: a sold-out answer spent a
/// twentieth of its instructions there (callgrind).
fn plain_fields() -> impl for<'writer> tracing_subscriber::fmt::FormatFields<'writer> {
    tracing_subscriber::fmt::format::debug_fn(|writer, field, value| {
        if field.name() == "message" {
            write!(writer, "{value:?}")
        } else {
            write!(writer, "{field}={value:?}")
        }
    })
    .delimited(" ")
}
