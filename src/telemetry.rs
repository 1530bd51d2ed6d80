//! Logging: structured `tracing` events to stderr, filtered by `RUST_LOG`
//! (default `info`). Standard output is kept for what commands print on
//! purpose (a created sale as JSON, the address being served).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset. The request middleware's own error
/// events are off: business answers (409 sold out, ...) are not problems,
/// and unexpected failures are logged, with their cause, by `web::error`.
const DEFAULT_FILTER: &str = "info,sqlx=warn,actix_server=warn,tracing_actix_web::middleware=off";

pub fn init() {
    let filter =
        EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    // Ignore the error of a second init (tests call it more than once).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}
