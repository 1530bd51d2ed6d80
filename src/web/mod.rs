//! The HTTP side: shared state, the route table, and the input limits.

mod admin;
mod api;
mod error;
mod limits;
mod live;
mod pages;
pub mod security;

use std::sync::Arc;

use actix_web::{HttpRequest, web};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

pub use api::SaleView;
pub use error::ApiError;

use crate::config::RateLimitSettings;
use crate::events::SaleEvents;
use crate::purchase::Purchaser;
use crate::store::Store;

/// The largest JSON body the API reads; anything larger is answered 400.
pub const MAX_JSON_BYTES: usize = 4 * 1024;

/// Everything a request handler needs, shared by all workers of one
/// instance. Built once by `startup.rs`; nothing in it is replaced while the
/// instance runs (what changes inside, the catalog cache and the sold-out
/// flags, has its own lock).
pub struct AppState {
    /// PostgreSQL, Redis, the key prefix and the cache of sales: every read
    /// and write of data goes through it. Set by `startup`; never replaced.
    pub store: Store,
    /// The purchase path, with this instance's sold-out flags (which only
    /// the purchase path changes). Set by `startup`; never replaced.
    pub purchaser: Purchaser,
    /// The rate limits per client IP and per buyer (off unless configured).
    /// Fixed at start.
    pub limits: RateLimitSettings,
    /// The admin token's digest; checks logins, cookies and bearer headers.
    /// Fixed at start from `SECKILL_ADMIN_TOKEN`.
    pub admin: AdminToken,
    /// Stock changes from Redis pub/sub, for the live sale pages. Only the
    /// events task sends on it; every stream is a receiver.
    pub events: SaleEvents,
    /// One permit per live event stream, held while it is open: bounds how
    /// many this instance serves at once (`SECKILL_MAX_EVENT_STREAMS`).
    pub streams: Arc<Semaphore>,
    /// Cancelled when the instance shuts down (by `startup`, on a signal):
    /// live event streams end then, so that they do not hold the graceful
    /// shutdown up.
    pub shutdown: CancellationToken,
}

/// The admin token, kept only as a SHA-256 digest, and the value of the
/// admin login cookie it opens. Comparing digests of fixed length in constant
/// time reveals neither the token nor its length through response timing.
pub struct AdminToken {
    digest: Option<[u8; 32]>,
    cookie: Option<String>,
}

/// What the admin login cookie holds: a digest of the token, labelled so
/// that it differs from the digest above. Never the token itself, so a
/// leaked cookie (a log, a screenshot of the browser's tools) does not leak
/// the token, which also opens the admin API.
fn admin_cookie_value(token: &str) -> String {
    let digest = Sha256::new()
        .chain_update(b"seckill admin cookie v1\0")
        .chain_update(token.as_bytes())
        .finalize();
    digest.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl AdminToken {
    pub fn new(token: Option<&str>) -> Self {
        let token = token.filter(|t| !t.is_empty());
        Self {
            digest: token.map(|t| Sha256::digest(t.as_bytes()).into()),
            cookie: token.map(admin_cookie_value),
        }
    }

    pub fn check(&self, presented: Option<&str>) -> Result<(), ApiError> {
        let Some(expected) = &self.digest else {
            return Err(ApiError::AdminDisabled);
        };
        let presented: [u8; 32] = Sha256::digest(presented.unwrap_or_default().as_bytes()).into();
        if bool::from(presented.ct_eq(expected)) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// The login cookie's value, if `presented` is the token.
    pub fn cookie_for(&self, presented: &str) -> Result<String, ApiError> {
        self.check(Some(presented))?;
        Ok(admin_cookie_value(presented))
    }

    /// Check the value of a login cookie.
    pub fn check_cookie(&self, presented: Option<&str>) -> Result<(), ApiError> {
        let Some(expected) = &self.cookie else {
            return Err(ApiError::AdminDisabled);
        };
        // Every right value has the same length, so comparing lengths first
        // reveals nothing about the expected value.
        let presented = presented.unwrap_or_default().as_bytes();
        if presented.len() == expected.len() && bool::from(presented.ct_eq(expected.as_bytes())) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// Check an `Authorization: Bearer <token>` header.
    pub fn check_bearer(&self, request: &HttpRequest) -> Result<(), ApiError> {
        let presented = request
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            .and_then(|value| value.strip_prefix("Bearer "));
        self.check(presented)
    }
}

/// Every route, in one table.
pub fn routes(cfg: &mut web::ServiceConfig) {
    cfg.app_data(json_config())
        .app_data(
            web::FormConfig::default()
                .limit(MAX_JSON_BYTES)
                .error_handler(|error, _request| {
                    ApiError::invalid(format!("malformed form: {error}")).into()
                }),
        )
        .route("/healthz", web::get().to(api::health))
        .route("/api/sales", web::post().to(api::create_sale))
        .route("/api/sales/{id}", web::get().to(api::get_sale))
        .route("/api/sales/{id}/purchase", web::post().to(api::purchase))
        .route("/api/sales/{id}/events", web::get().to(live::sale_events))
        .route("/api/orders/{id}", web::get().to(api::get_order))
        .route("/api/orders/{id}/pay", web::post().to(api::pay))
        .route("/", web::get().to(pages::index))
        .route("/sales/{id}", web::get().to(pages::sale))
        .route("/sales/{id}/buy", web::post().to(pages::buy))
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
                other => format!("malformed JSON body: {other}"),
            };
            ApiError::InvalidRequest(message).into()
        })
}
