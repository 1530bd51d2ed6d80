//! Logging: structured `tracing` events to stderr, filtered by `RUST_LOG`
//! (default `info`). Standard output is kept for what commands print on
//! purpose (a created sale as JSON, the address being served).

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// The filter when `RUST_LOG` is unset. Failures are logged, with their
/// cause, by `web::error`; the request middleware logs none of its own
/// (`Cargo.toml`).
const DEFAULT_FILTER: &str = "info,sqlx=warn,actix_server=warn";

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

/// The span of every HTTP request, lean: its method, path and request id,
/// which is what the logs of a failed request need (`web::error` logs the
/// cause inside it; the `X-Request-Id` header names it to the client).
///
/// tracing-actix-web's default span records sixteen fields, among them the
/// matched route, which actix finds by matching the path against the route
/// table a second time, regex by regex, and the client's address, read from
/// the forwarding headers; the log formatter then writes each field out on
/// every request. A sold-out answer costs a few microseconds in all, and
/// those fields were a share of it that no log line used.
pub struct RequestSpan;

impl tracing_actix_web::RootSpanBuilder for RequestSpan {
    fn on_request_start(request: &actix_web::dev::ServiceRequest) -> tracing::Span {
        use actix_web::HttpMessage;
        let id = request
            .extensions()
            .get::<tracing_actix_web::RequestId>()
            .copied();
        tracing::info_span!(
            "request",
            method = %request.method(),
            path = request.path(),
            request_id = id.map(tracing::field::display),
        )
    }

    fn on_request_end<B: actix_web::body::MessageBody>(
        _span: tracing::Span,
        _outcome: &Result<actix_web::dev::ServiceResponse<B>, actix_web::Error>,
    ) {
    }
}
