//! One error type for the HTTP API, and the one place it becomes a response.
//!
//! Policy: business outcomes and bad input are answered with their own status
//! and a stable machine-readable code, `{"error": "<code>", "message": "..."}`.
//! A failure because Redis or PostgreSQL is down (or refusing work for a
//! while: see `failure::transient`) is `503 unavailable` with `Retry-After`:
//! the request was fine, and trying again later is the right move.
//! Anything else unexpected is logged with its whole cause chain inside the
//! request's span (which carries the request id) and reaches the client only
//! as a generic 500; the `X-Request-Id` response header links the two.

use actix_web::http::StatusCode;
use actix_web::http::header::ContentType;
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, HttpResponseBuilder, ResponseError};

use seckill_core::failure;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{0}")]
    InvalidRequest(String),
    #[error("missing or wrong admin token")]
    Unauthorized,
    #[error("the admin API is disabled: set SECKILL_ADMIN_TOKEN to enable it")]
    AdminDisabled,
    #[error("no such sale")]
    SaleNotFound,
    #[error("no such order")]
    OrderNotFound,
    #[error("no such page or endpoint")]
    NotFound,
    /// A path that is there, asked with a method it does not take; with
    /// the methods it takes, as the `Allow` header names them.
    #[error("this address takes {0} only")]
    MethodNotAllowed(&'static str),
    #[error("the sale is sold out")]
    SoldOut,
    /// With the order the buyer's unit belongs to, where the purchase path
    /// knows it: a buyer whose `202` was lost on its way asks again and
    /// learns the order they won.
    #[error(
        "this buyer already has a unit of this sale; with an order_id, it is the order that holds it"
    )]
    AlreadyPurchased(Option<uuid::Uuid>),
    #[error("the sale has not started yet")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error(
        "nothing was taken: too many buyers at once, or the answer was lost on its way; try again in a moment"
    )]
    Busy,
    #[error("this purchase held the sale's lock too long (it ran out) and took nothing; try again")]
    LockLost,
    #[error(
        "Redis did not confirm this purchase in time (its answer was lost, or no replica \
         confirmed it), so it is not final; with an order_id, GET /api/orders/{{order_id}} \
         tells what became of it; without, try again"
    )]
    Unconfirmed(Option<uuid::Uuid>),
    /// With `--redis-durability replica`: the waiting room's answer (a
    /// join, a place, an admission) rests on writes no replica confirmed in
    /// time, which a failover could take back.
    #[error(
        "no Redis replica confirmed the waiting room's answer in time, so it is not final; ask again in a moment"
    )]
    RoomUnconfirmed,
    #[error("the payment window of this order has closed; the order is cancelled or about to be")]
    PaymentWindowClosed,
    #[error("this order is not confirmed yet; pay once it is confirmed")]
    OrderPending,
    #[error("this order was refused and holds no unit to pay for")]
    OrderRejected,
    #[error("cross-site form posts are refused")]
    CrossSite,
    #[error(
        "this sale has a waiting room: buy with the admission it gives you when your turn comes ({0})"
    )]
    NotAdmitted(&'static str),
    #[error("this ticket is not one of this sale's waiting room ({0}); join again")]
    InvalidTicket(&'static str),
    #[error("this sale has no waiting room")]
    NoWaitingRoom,
    #[error("the waiting room is closed: the sale has sold out or ended")]
    RoomClosed,
    #[error("the waiting room's line is full; try again later")]
    LineFull,
    #[error("too many requests from this client; slow down")]
    RateLimited(std::time::Duration),
    #[error("the request's headers are larger than 16 KiB")]
    HeadersTooLarge,
    #[error("too many live pages are open on this instance; try again in a moment")]
    TooManyStreams,
    #[error("a server behind the app is unavailable; try again in a moment")]
    Unavailable(anyhow::Error),
    #[error("internal error")]
    Internal(anyhow::Error),
}

/// Every `?` on an `anyhow` error in a handler comes through here: a
/// server that is down is `Unavailable`, anything else `Internal`.
impl From<anyhow::Error> for ApiError {
    fn from(error: anyhow::Error) -> Self {
        if failure::transient(&error) {
            Self::Unavailable(error)
        } else {
            Self::Internal(error)
        }
    }
}

/// Shared with every caller that waited for one failed read (`single_flight.rs`):
/// a server that is down stays `503` for each, anything else `500`.
impl crate::single_flight::Shared for ApiError {
    fn share(&self) -> Self {
        match self {
            Self::Unavailable(cause) => Self::Unavailable(anyhow::anyhow!("{cause:#}")),
            Self::Internal(cause) => Self::Internal(anyhow::anyhow!("{cause:#}")),
            other => Self::Internal(anyhow::anyhow!("{other}")),
        }
    }
}

impl ApiError {
    /// Bad input, with the validation's own words as the message.
    pub(crate) fn invalid(reason: impl std::fmt::Display) -> Self {
        Self::InvalidRequest(reason.to_string())
    }

    /// The stable code clients match on.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            Self::InvalidRequest(_) => "invalid_request",
            Self::Unauthorized | Self::AdminDisabled => "unauthorized",
            Self::SaleNotFound => "sale_not_found",
            Self::OrderNotFound => "order_not_found",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed(_) => "method_not_allowed",
            Self::SoldOut => "sold_out",
            Self::AlreadyPurchased(_) => "already_purchased",
            Self::NotStarted => "not_started",
            Self::Ended => "ended",
            Self::Busy => "busy",
            Self::LockLost => "lock_lost",
            Self::Unconfirmed(_) | Self::RoomUnconfirmed => "unconfirmed",
            Self::PaymentWindowClosed => "payment_window_closed",
            Self::OrderPending => "order_pending",
            Self::OrderRejected => "order_rejected",
            Self::CrossSite => "cross_site_request",
            Self::NotAdmitted(_) => "not_admitted",
            Self::InvalidTicket(_) => "invalid_ticket",
            Self::NoWaitingRoom => "no_waiting_room",
            Self::RoomClosed => "room_closed",
            Self::LineFull => "line_full",
            Self::RateLimited(_) => "rate_limited",
            Self::HeadersTooLarge => "headers_too_large",
            Self::TooManyStreams => "too_many_streams",
            Self::Unavailable(_) => "unavailable",
            Self::Internal(_) => "internal",
        }
    }
}

impl ResponseError for ApiError {
    fn status_code(&self) -> StatusCode {
        match self {
            Self::InvalidRequest(_) | Self::InvalidTicket(_) => StatusCode::BAD_REQUEST,
            Self::NotAdmitted(_) => StatusCode::FORBIDDEN,
            Self::NoWaitingRoom => StatusCode::NOT_FOUND,
            Self::Unauthorized | Self::AdminDisabled => StatusCode::UNAUTHORIZED,
            Self::SaleNotFound | Self::OrderNotFound | Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed(_) => StatusCode::METHOD_NOT_ALLOWED,
            Self::SoldOut
            | Self::AlreadyPurchased(_)
            | Self::NotStarted
            | Self::Ended
            | Self::PaymentWindowClosed
            | Self::OrderPending
            | Self::OrderRejected
            | Self::RoomClosed
            | Self::LineFull => StatusCode::CONFLICT,
            Self::CrossSite => StatusCode::FORBIDDEN,
            Self::HeadersTooLarge => StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            Self::RateLimited(_) => StatusCode::TOO_MANY_REQUESTS,
            Self::Busy
            | Self::LockLost
            | Self::Unconfirmed(_)
            | Self::RoomUnconfirmed
            | Self::Unavailable(_)
            | Self::TooManyStreams => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let message = self.message();
        // Named here as a ready header value: `json` would make one from
        // its `mime` constant, checked byte by byte, at every answer.
        self.response()
            .insert_header((
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            ))
            .json(ErrorBody {
                error: self.code(),
                message,
                order_id: match self {
                    Self::Unconfirmed(order_id) | Self::AlreadyPurchased(order_id) => *order_id,
                    _ => None,
                },
                reason: match self {
                    Self::NotAdmitted(reason) | Self::InvalidTicket(reason) => Some(reason),
                    _ => None,
                },
            })
    }
}

impl ApiError {
    /// What the client reads: the error's own words, but for an internal
    /// failure, which is logged here with its cause chain and told only
    /// generically. Logs a server that is down, too.
    fn message(&self) -> &dyn std::fmt::Display {
        match self {
            Self::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "a server is unavailable");
                self
            }
            Self::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "request failed");
                &"Something went wrong on our side. Quote the X-Request-Id header when reporting it."
            }
            other => other,
        }
    }

    /// The response's status and headers, the same for the API's JSON
    /// and a page's HTML: when to try again, how to authenticate.
    fn response(&self) -> HttpResponseBuilder {
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::Busy
            | Self::LockLost
            | Self::Unconfirmed(_)
            | Self::RoomUnconfirmed
            | Self::Unavailable(_) => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("1")));
            }
            Self::TooManyStreams => {
                response.insert_header((header::RETRY_AFTER, HeaderValue::from_static("5")));
            }
            Self::RateLimited(wait) => {
                // Whole seconds, rounded up: a client that waits as told gets through.
                let secs = wait.as_millis().div_ceil(1_000).max(1);
                response.insert_header((header::RETRY_AFTER, secs.to_string()));
            }
            Self::Unauthorized | Self::AdminDisabled => {
                response
                    .insert_header((header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer")));
            }
            Self::MethodNotAllowed(allow) => {
                response.insert_header((header::ALLOW, HeaderValue::from_static(allow)));
            }
            _ => {}
        }
        response
    }

    /// A page's heading for this error: what happened, in a few words.
    fn heading(&self) -> &'static str {
        match self {
            Self::SaleNotFound => "No such sale",
            Self::OrderNotFound => "No such order",
            Self::NotFound => "No such page",
            Self::InvalidRequest(_) | Self::InvalidTicket(_) => "That did not work",
            Self::SoldOut => "Sold out",
            Self::AlreadyPurchased(_) => "You already have one",
            Self::NotStarted => "Not open yet",
            Self::Ended => "The sale has ended",
            Self::RateLimited(_) => "Too many requests",
            Self::Internal(_) => "Something went wrong",
            _ => match self.status_code() {
                StatusCode::SERVICE_UNAVAILABLE => "Please try again in a moment",
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "Not allowed",
                _ => "That did not work",
            },
        }
    }
}

/// An error on a page asked for as a page (`pages/`, `admin/`, a form
/// posted without JavaScript): the same status, headers and words as the
/// API's [`ApiError`], in the storefront's layout with a link back, never
/// raw JSON. A page handler returns `Result<_, PageError>`, and `?` turns
/// every `ApiError` into one; the route table's extractors do the same for
/// a malformed form or query on a page.
#[derive(Debug)]
pub(crate) struct PageError {
    error: ApiError,
    /// Where the link back goes, and what it says.
    back: (String, &'static str),
}

impl PageError {
    /// The error, with a link back to `href` (such as the sale a refused
    /// form was posted from) instead of the list of sales.
    pub(crate) fn back_to(error: ApiError, href: String, label: &'static str) -> Self {
        Self {
            error,
            back: (href, label),
        }
    }
}

impl From<ApiError> for PageError {
    fn from(error: ApiError) -> Self {
        Self::back_to(error, "/".to_owned(), "Back to the sales")
    }
}

impl From<anyhow::Error> for PageError {
    fn from(error: anyhow::Error) -> Self {
        ApiError::from(error).into()
    }
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.error.fmt(f)
    }
}

#[derive(askama::Template)]
#[template(path = "error.html")]
struct ErrorPage<'a> {
    heading: &'static str,
    message: String,
    code: &'static str,
    back: &'a str,
    back_label: &'static str,
}

impl ResponseError for PageError {
    fn status_code(&self) -> StatusCode {
        self.error.status_code()
    }

    fn error_response(&self) -> HttpResponse {
        let message = match &self.error {
            ApiError::SaleNotFound => {
                "There is no sale at this address: the link may be mistyped, or the sale never existed."
                    .to_owned()
            }
            ApiError::OrderNotFound => {
                "There is no order at this address: check the link you were given when you bought."
                    .to_owned()
            }
            ApiError::NotFound => "There is nothing at this address.".to_owned(),
            other => sentence(&other.message().to_string()),
        };
        let page = ErrorPage {
            heading: self.error.heading(),
            message,
            code: self.error.code(),
            back: &self.back.0,
            back_label: self.back.1,
        };
        let mut response = self.error.response();
        match askama::Template::render(&page) {
            Ok(body) => response.content_type(ContentType::html()).body(body),
            Err(error) => {
                tracing::error!(error = %error, "rendering an error page");
                response
                    .content_type(ContentType::plaintext())
                    .body(page.message)
            }
        }
    }
}

/// A message as a sentence: a capital first letter (but for a field's
/// name, such as `user_id`, which is written as the form names it), a
/// full stop at the end.
fn sentence(message: &str) -> String {
    let first_word = message.split(' ').next().unwrap_or_default();
    let mut chars = message.chars();
    let mut text: String = match chars.next() {
        Some(first) if !first_word.contains('_') => first.to_uppercase().chain(chars).collect(),
        _ => message.to_owned(),
    };
    if !text.ends_with(['.', '!', '?']) {
        text.push('.');
    }
    text
}

/// An error's body, `{"error": "<code>", "message": "..."}`, written
/// straight from the error's text: no `String` of the message and no map
/// of JSON values made first (every sold-out answer is one of these).
#[derive(serde::Serialize)]
struct ErrorBody<'a> {
    error: &'static str,
    #[serde(serialize_with = "as_text")]
    message: &'a dyn std::fmt::Display,
    /// The order an `unconfirmed` answer is about, when it took a unit.
    #[serde(skip_serializing_if = "Option::is_none")]
    order_id: Option<uuid::Uuid>,
    /// Why an admission or a ticket was refused: `missing`, `forged`,
    /// `other_sale`, `other_buyer`, `expired`, `used`, `withdrawn`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

fn as_text<S: serde::Serializer>(
    text: &&dyn std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(text)
}
