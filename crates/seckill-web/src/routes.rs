//! Every route, in one table: the top of the crate. Handlers live in
//! [`crate::api`] (JSON), [`crate::pages`] (HTML) and [`crate::admin`].

use actix_web::{HttpRequest, HttpResponse, Resource, web};

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
        // First: actix tries the paths in this order, running the regex
        // of each one with an `{id}` against the path, and a flash sale's
        // load is purchases. (No two paths here match the same request, so
        // the order changes nothing else.)
        .service(at("/api/sales/{id}/purchase", "POST").route(web::post().to(api::purchase)))
        .service(at("/healthz", "GET").route(web::get().to(api::health)))
        .service(at("/metrics", "GET").route(web::get().to(metrics::scrape)))
        .service(at("/api/sales", "POST").route(web::post().to(api::create_sale)))
        .service(at("/api/sales/{id}", "GET").route(web::get().to(api::get_sale)))
        .service(at("/api/sales/{id}/events", "GET").route(web::get().to(api::events::sale_events)))
        .service(
            at("/api/sales/{id}/queue", "GET, POST")
                .route(web::post().to(api::queue::join))
                .route(web::get().to(api::queue::status)),
        )
        .service(at("/api/sales/{id}/live", "GET").route(web::get().to(pages::scoreboard::stream)))
        .service(at("/api/orders/{id}", "GET").route(web::get().to(api::get_order)))
        .service(at("/api/orders/{id}/pay", "POST").route(web::post().to(api::pay)))
        .service(at("/", "GET").route(web::get().to(pages::index::index)))
        .service(at("/sales/{id}", "GET").route(web::get().to(pages::sale)))
        .service(at("/sales/{id}/buy", "POST").route(web::post().to(pages::buy)))
        .service(at("/sales/{id}/queue", "POST").route(web::post().to(pages::waiting::join)))
        .service(at("/sales/{id}/queue/events", "GET").route(web::get().to(pages::waiting::events)))
        .service(at("/sales/{id}/live", "GET").route(web::get().to(pages::scoreboard::page)))
        .service(at("/orders/{id}", "GET").route(web::get().to(pages::order)))
        .service(at("/orders/{id}/pay", "POST").route(web::post().to(pages::pay)))
        .service(at("/admin", "GET").route(web::get().to(admin::index)))
        .service(at("/admin/login", "POST").route(web::post().to(admin::login)))
        .service(at("/admin/logout", "POST").route(web::post().to(admin::logout)))
        .service(at("/admin/sales", "POST").route(web::post().to(admin::create_sale)))
        .service(at("/admin/sales/{id}", "GET").route(web::get().to(admin::sale)))
        .service(at("/admin/sales/{id}/redrive", "POST").route(web::post().to(admin::redrive)))
        .service(at("/static/{file}", "GET").route(web::get().to(pages::static_file)))
        .default_service(web::to(not_found));
}

/// The path `path`, whose routes take the methods `allow` names (as the
/// `Allow` header names them): asked with another method, it answers
/// `405 method_not_allowed` with `Allow`. (A route added with `cfg.route`
/// makes its method part of the path's match, and a wrong method was
/// answered `404`, as if nothing were there.)
fn at(path: &str, allow: &'static str) -> Resource {
    web::resource(path).default_service(web::to(move |request: HttpRequest| async move {
        refused(&request, ApiError::MethodNotAllowed(allow))
    }))
}

/// A path no route matches.
async fn not_found(request: HttpRequest) -> Result<HttpResponse, actix_web::Error> {
    refused(&request, ApiError::NotFound)
}

/// `error` as `request`'s path answers: JSON under `/api/`, where programs
/// ask, and a page elsewhere, where people do.
fn refused(request: &HttpRequest, error: ApiError) -> Result<HttpResponse, actix_web::Error> {
    Err(if request.path().starts_with("/api/") {
        error.into()
    } else {
        PageError::from(error).into()
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
