//! Every route, in one table: the top of the crate. Handlers live in
//! [`crate::api`] (JSON), [`crate::pages`] (HTML) and [`crate::admin`].

use actix_web::{HttpResponse, web};

use crate::error::{ApiError, PageError};
use crate::state::MAX_JSON_BYTES;
use crate::{admin, api, body, metrics, pages};

/// Every route, in one table.
pub(crate) fn routes(cfg: &mut web::ServiceConfig) {
    cfg.app_data(json_config())
        .app_data(
            web::FormConfig::default()
                .limit(MAX_JSON_BYTES)
                // Only pages post forms: a malformed one is answered as a page.
                .error_handler(|error, _request| {
                    let message = match &error {
                        actix_web::error::UrlencodedError::Parse(error) => {
                            body::reworded(&error.to_string())
                        }
                        actix_web::error::UrlencodedError::Overflow { limit, .. } => {
                            format!("the form is larger than {limit} bytes")
                        }
                        actix_web::error::UrlencodedError::ContentType => {
                            "the form must be sent as application/x-www-form-urlencoded".to_owned()
                        }
                        other => format!("the form could not be read: {other}"),
                    };
                    PageError::from(ApiError::InvalidRequest(message)).into()
                }),
        )
        .app_data(
            // Only pages read a query string (`/?page=`, `/admin?before=`).
            web::QueryConfig::default().error_handler(|error, _request| {
                let message = match &error {
                    actix_web::error::QueryPayloadError::Deserialize(error) => {
                        body::reworded(&error.to_string())
                    }
                    other => format!("the query could not be read: {other}"),
                };
                PageError::from(ApiError::InvalidRequest(message)).into()
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
        .default_service(web::to(not_found));
}

/// A path no route matches: JSON under `/api/`, where programs ask, and
/// a page elsewhere, where people do.
async fn not_found(request: actix_web::HttpRequest) -> Result<HttpResponse, actix_web::Error> {
    Err(if request.path().starts_with("/api/") {
        ApiError::NotFound.into()
    } else {
        PageError::from(ApiError::NotFound).into()
    })
}

/// JSON bodies: small, any content type (curl users forget it), and every
/// parse failure answered as `400 invalid_request` with the reason in our
/// words (`body.rs`).
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
                // Empty, not JSON, or well-formed JSON that is not the
                // request: a wrong type, a missing, unknown or repeated
                // field, not an object.
                actix_web::error::JsonPayloadError::Deserialize(error) => body::json_error(error),
                other => format!("the body could not be read: {other}"),
            };
            ApiError::InvalidRequest(message).into()
        })
}
