//! Every route, in one table: the top of the crate. Handlers live in
//! [`crate::api`] (JSON), [`crate::pages`] (HTML) and [`crate::admin`].

use actix_web::web;

use crate::error::ApiError;
use crate::state::MAX_JSON_BYTES;
use crate::{admin, api, metrics, pages};

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
        .route(
            "/api/sales/{id}/events",
            web::get().to(api::events::sale_events),
        )
        .route("/api/sales/{id}/queue", web::post().to(api::queue::join))
        .route("/api/sales/{id}/queue", web::get().to(api::queue::status))
        .route(
            "/api/sales/{id}/live",
            web::get().to(pages::scoreboard::stream),
        )
        .route("/api/orders/{id}", web::get().to(api::get_order))
        .route("/api/orders/{id}/pay", web::post().to(api::pay))
        .route("/", web::get().to(pages::index::index))
        .route("/sales/{id}", web::get().to(pages::sale))
        .route("/sales/{id}/buy", web::post().to(pages::buy))
        .route("/sales/{id}/queue", web::post().to(pages::waiting::join))
        .route(
            "/sales/{id}/queue/events",
            web::get().to(pages::waiting::events),
        )
        .route("/sales/{id}/live", web::get().to(pages::scoreboard::page))
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
