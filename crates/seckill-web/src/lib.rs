//! seckill's storefront: the HTTP side of one instance. Shared state, the
//! route table and the input limits are here; the handlers are one file
//! per page or API ([`api`] for the JSON API, `room.rs` for its waiting
//! room, `pages.rs` with `pages/waiting.rs`, `index.rs`, `live.rs` and
//! `scoreboard.rs` for the pages, `admin.rs` for the admin pages), and
//! [`startup`] wires an instance: pools, listener, worker, shutdown.
//!
//! Handlers only read and call `seckill-core`; nothing here knows how the
//! servers were found or how the process was started.

mod admin;
mod admin_token;
mod api;
mod body;
pub mod client_ip;
mod error;
pub mod fresh;
mod index;
mod limits;
mod live;
mod lookup;
pub mod metrics;
mod pages;
mod room;
mod room_view;
mod scoreboard;
pub mod security;
pub mod startup;

use std::sync::Arc;

use actix_web::web;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use admin_token::AdminToken;
pub use error::ApiError;
pub use live::{LiveSales, PACE, SNAPSHOT_EVERY};
pub use lookup::SaleView;

use seckill_core::config::RateLimitSettings;
use seckill_core::purchase::Purchaser;
use seckill_core::scoreboard::Scoreboard;
use seckill_core::store::Store;

/// The largest JSON body the API reads; anything larger is answered 400.
pub(crate) const MAX_JSON_BYTES: usize = 4 * 1024;

/// Everything a request handler needs, shared by all workers of one
/// instance. Built once by `startup.rs`; nothing in it is replaced while the
/// instance runs (what changes inside, the catalog cache and the sold-out
/// flags, has its own lock).
pub(crate) struct AppState {
    /// PostgreSQL, Redis, the key prefix and the cache of sales: every read
    /// and write of data goes through it. Set by `startup`; never replaced.
    pub(crate) store: Store,
    /// The purchase path, with this instance's sold-out flags (which only
    /// the purchase path changes). Set by `startup`; never replaced.
    pub(crate) purchaser: Purchaser,
    /// The rate limits per client IP and per buyer (off unless configured),
    /// and the proxies whose `X-Forwarded-For` names the client. Fixed at
    /// start.
    pub(crate) limits: RateLimitSettings,
    /// The admin token's digest; checks logins, cookies and bearer headers.
    /// Fixed at start from `SECKILL_ADMIN_TOKEN`.
    pub(crate) admin: AdminToken,
    /// The snapshots of the sales watched on the live page, one reading
    /// task per watched sale shared by all its streams. Set by `startup`.
    pub(crate) scoreboard: Scoreboard,
    /// The storefront's index as last built, served to every request for
    /// a quarter of a second (`index.rs`).
    pub(crate) index: index::IndexCache,
    /// The sales whose pages are open here: each one's last units-left
    /// snapshot and paced changes, shared by its event streams (`live.rs`).
    /// Fed by one task, started with it by `startup`.
    pub(crate) live: Arc<LiveSales>,
    /// One permit per live event stream, held while it is open: bounds how
    /// many this instance serves at once (`SECKILL_MAX_EVENT_STREAMS`).
    pub(crate) streams: Arc<Semaphore>,
    /// How many permits `streams` started with; fixed at start.
    pub(crate) max_streams: usize,
    /// This instance's look at each waiting room it is asked about, so
    /// that a crowd polling its places costs Redis one visit per room per
    /// moment, not one per answer (`room_view.rs`).
    pub(crate) room_views: room_view::RoomViews,
    /// Cancelled when the instance shuts down (by `startup`, on a signal):
    /// live event streams end then, so that they do not hold the graceful
    /// shutdown up.
    pub(crate) shutdown: CancellationToken,
}

/// Every route, in one table.
pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.app_data(json_config())
        .app_data(
            web::FormConfig::default()
                .limit(MAX_JSON_BYTES)
                .error_handler(|error, _request| {
                    ApiError::invalid(format!("malformed form: {error}")).into()
                }),
        )
        .app_data(
            web::QueryConfig::default().error_handler(|error, _request| {
                ApiError::invalid(format!("malformed query: {error}")).into()
            }),
        )
        // First: actix tries the routes in this order, running the regex
        // of each one with an `{id}` against the path, and a flash sale's
        // load is purchases. (No two routes here match the same path, so
        // the order changes nothing else.)
        .route("/api/sales/{id}/purchase", web::post().to(api::purchase))
        .route("/healthz", web::get().to(api::health))
        .route("/metrics", web::get().to(metrics::scrape))
        .route("/api/sales", web::post().to(api::create_sale))
        .route("/api/sales/{id}", web::get().to(api::get_sale))
        .route("/api/sales/{id}/events", web::get().to(live::sale_events))
        .route("/api/sales/{id}/queue", web::post().to(room::join))
        .route("/api/sales/{id}/queue", web::get().to(room::status))
        .route("/api/sales/{id}/live", web::get().to(scoreboard::stream))
        .route("/api/orders/{id}", web::get().to(api::get_order))
        .route("/api/orders/{id}/pay", web::post().to(api::pay))
        .route("/", web::get().to(index::index))
        .route("/sales/{id}", web::get().to(pages::sale))
        .route("/sales/{id}/buy", web::post().to(pages::buy))
        .route("/sales/{id}/queue", web::post().to(pages::waiting::join))
        .route(
            "/sales/{id}/queue/events",
            web::get().to(pages::waiting::events),
        )
        .route("/sales/{id}/live", web::get().to(scoreboard::page))
        .route("/orders/{id}", web::get().to(pages::order))
        .route("/orders/{id}/pay", web::post().to(pages::pay))
        .route("/admin", web::get().to(admin::index))
        .route("/admin/login", web::post().to(admin::login))
        .route("/admin/logout", web::post().to(admin::logout))
        .route("/admin/sales", web::post().to(admin::create_sale))
        .route("/admin/sales/{id}", web::get().to(admin::sale))
        .route("/admin/sales/{id}/redrive", web::post().to(admin::redrive))
        .route("/static/{file}", web::get().to(pages::static_file))
        .default_service(web::to(|| async {
            Err::<actix_web::HttpResponse, _>(ApiError::NotFound)
        }));
}

/// JSON bodies: small, any content type (curl users forget it), and every
/// parse failure answered as `400 invalid_request` with the parser's reason.
fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_JSON_BYTES)
        .content_type_required(false)
        .error_handler(|error, _request| {
            let message = match &error {
                actix_web::error::JsonPayloadError::Overflow { limit }
                | actix_web::error::JsonPayloadError::OverflowKnownLength { limit, .. } => {
                    format!("request body is larger than {limit} bytes")
                }
                // Well-formed JSON that is not the request: a wrong type,
                // a missing, unknown or repeated field, not an object.
                actix_web::error::JsonPayloadError::Deserialize(error) if error.is_data() => {
                    format!("invalid request body: {error}")
                }
                other => format!("malformed JSON body: {other}"),
            };
            ApiError::InvalidRequest(message).into()
        })
}
