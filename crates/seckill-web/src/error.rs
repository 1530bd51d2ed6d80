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
use actix_web::http::header::{self, HeaderValue};
use actix_web::{HttpResponse, ResponseError};

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
    #[error("the sale is sold out")]
    SoldOut,
    #[error("this buyer already has a unit of this sale")]
    AlreadyPurchased,
    #[error("the sale has not started yet")]
    NotStarted,
    #[error("the sale has ended")]
    Ended,
    #[error("too many buyers at once; try again in a moment")]
    Busy,
    #[error("this purchase held the sale's lock too long (it ran out) and took nothing; try again")]
    LockLost,
    #[error(
        "no Redis replica confirmed this purchase in time, so it is not final; \
         with an order_id, GET /api/orders/{{order_id}} tells what became of it; without, try again"
    )]
    Unconfirmed(Option<uuid::Uuid>),
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
            Self::SoldOut => "sold_out",
            Self::AlreadyPurchased => "already_purchased",
            Self::NotStarted => "not_started",
            Self::Ended => "ended",
            Self::Busy => "busy",
            Self::LockLost => "lock_lost",
            Self::Unconfirmed(_) => "unconfirmed",
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
            Self::SoldOut
            | Self::AlreadyPurchased
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
            | Self::Unavailable(_)
            | Self::TooManyStreams => StatusCode::SERVICE_UNAVAILABLE,
            Self::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn error_response(&self) -> HttpResponse {
        let message: &dyn std::fmt::Display = match self {
            Self::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "a server is unavailable");
                self
            }
            Self::Internal(cause) => {
                tracing::error!(error = format!("{cause:#}"), "request failed");
                &"Something went wrong on our side. Quote the X-Request-Id header when reporting it."
            }
            other => other,
        };
        let mut response = HttpResponse::build(self.status_code());
        match self {
            Self::Busy | Self::LockLost | Self::Unconfirmed(_) | Self::Unavailable(_) => {
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
            _ => {}
        }
        // Named here as a ready header value: `json` would make one from
        // its `mime` constant, checked byte by byte, at every answer.
        response.insert_header((
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        ));
        response.json(ErrorBody {
            error: self.code(),
            message,
            order_id: match self {
                Self::Unconfirmed(order_id) => *order_id,
                _ => None,
            },
            reason: match self {
                Self::NotAdmitted(reason) | Self::InvalidTicket(reason) => Some(reason),
                _ => None,
            },
        })
    }
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
    /// `other_sale`, `other_buyer`, `expired`, `used`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
}

fn as_text<S: serde::Serializer>(
    text: &&dyn std::fmt::Display,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    serializer.collect_str(text)
}
