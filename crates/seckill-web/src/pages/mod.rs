//! Server-rendered pages: the sale list, a sale, the result of a purchase,
//! and an order. They work without JavaScript: every figure is rendered here,
//! and buying and paying are plain form posts. With JavaScript
//! (`static/sale.js`, `static/order.js`), the sale page counts down to the
//! opening, buys without leaving the page and shows the units left falling
//! live; the order page follows the order's status and the time left to pay.
//! A sale's waiting room on its page is [`waiting`]'s.

mod first_paint;
pub(crate) mod index;
pub(crate) mod scoreboard;
pub(crate) mod waiting;

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::header::{self, ContentType, HeaderValue};
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use askama::Template;
use serde::Deserialize;

use crate::door;
use crate::error::{ApiError, PageError};
use crate::limits;
use crate::lookup::{SaleView, find_sale, parse_order_id, parse_sale_id, pay_order};
use crate::state::AppState;
use seckill_core::domain::{Order, OrderStatus, SaleStatus, UserId};
use seckill_core::purchase::Outcome;

/// The cookie that remembers a browser's buyer id, so one browser is one buyer.
const BUYER_COOKIE: &str = "seckill_buyer";

#[derive(Template)]
#[template(path = "sale.html")]
struct SalePage {
    sale: SaleView,
    buyer: String,
    /// Whether the Buy button works now (the server checks again anyway).
    open: bool,
    /// The opening time and the server's clock, in ms since the epoch, for
    /// the countdown: the script counts on the server's clock, not the
    /// visitor's, which may be off.
    starts_at_ms: i64,
    /// When the sale closes, in ms since the epoch; 0 if it never does.
    ends_at_ms: i64,
    server_now_ms: i64,
    /// The sale's waiting room as this buyer stands in it, if it has one.
    room: Option<waiting::RoomPanel>,
}

impl SalePage {
    /// Whether the Buy form waits, hidden, for the buyer's turn.
    fn buy_hidden(&self) -> bool {
        self.room.as_ref().is_some_and(|room| !room.admitted())
    }
}

#[derive(Template)]
#[template(path = "order.html")]
struct OrderPage {
    order: Order,
    sale_name: String,
    /// What a failed payment said, if this page answers one.
    notice: Option<String>,
    server_now_ms: i64,
}

impl OrderPage {
    /// What the order's status means, after "Status: confirmed." on the
    /// page (`static/order.js` has the same words).
    fn headline(&self) -> &'static str {
        match self.order.status {
            OrderStatus::Pending => "Your unit is reserved, and the order is being recorded.",
            OrderStatus::Confirmed => "The unit is yours once you pay.",
            OrderStatus::Paid => "The unit is yours.",
            OrderStatus::Cancelled => "The payment window closed, and the unit went back on sale.",
            OrderStatus::Rejected => "This order holds no unit.",
        }
    }

    fn pay_by_ms(&self) -> i64 {
        self.order
            .pay_by
            .map_or(0, |deadline| deadline.timestamp_millis())
    }
}

#[derive(Template)]
#[template(path = "bought.html")]
struct BoughtPage {
    sale: SaleView,
    /// Whether the buyer got a unit.
    won: bool,
    /// The outcome in words.
    headline: String,
    order_id: Option<String>,
}

#[derive(Debug, Deserialize)]
pub(crate) struct BuyForm {
    user_id: String,
    /// On a sale with a waiting room: the admission the page was given
    /// (empty, or absent, until the buyer's turn).
    admission: Option<String>,
}

pub(super) fn html(page: &impl Template) -> Result<HttpResponse, ApiError> {
    let body = page.render().context("rendering a page")?;
    Ok(HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(body))
}

pub(crate) async fn sale(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    let sale = find_sale(&state, &path).await?;
    let left = state.store.stock_left(sale.id).await?;
    let known = request
        .cookie(BUYER_COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| UserId::parse(v).is_ok());
    let buyer = known
        .clone()
        .unwrap_or_else(|| format!("buyer-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    let view = SaleView::new(&sale, left);
    let room = match &sale.waiting_room {
        Some(settings) => Some(waiting::panel(&state, &request, &sale, settings, &buyer).await?),
        None => None,
    };
    let mut response = html(&SalePage {
        open: view.status == SaleStatus::Live,
        starts_at_ms: view.starts_at.timestamp_millis(),
        ends_at_ms: view.ends_at.map_or(0, |end| end.timestamp_millis()),
        server_now_ms: chrono::Utc::now().timestamp_millis(),
        sale: view,
        // The ticket's buyer, where the room knows one.
        buyer: room
            .as_ref()
            .map_or_else(|| buyer.clone(), |room| room.buyer.clone()),
        room,
    })?;
    // Remember the buyer from the first visit, so that one browser is one
    // buyer whether it buys with the script or with the form.
    if known.is_none() {
        set_buyer_cookie(&mut response, &buyer)?;
    }
    Ok(response)
}

fn set_buyer_cookie(response: &mut HttpResponse, buyer: &str) -> Result<(), ApiError> {
    // Lax: sent when the visitor follows a link here from elsewhere, never
    // with a post another site starts.
    let cookie = Cookie::build(BUYER_COOKIE, buyer.to_owned())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .finish();
    // Percent-encoded, as actix reads a cookie back (`HttpRequest::cookie`
    // decodes). Written raw (`add_cookie`), an id with `;` in it was cut
    // there by the browser, and one with `%41` in it came back as another
    // buyer, `A`.
    let value =
        HeaderValue::from_str(&cookie.encoded().to_string()).context("setting the buyer cookie")?;
    response.headers_mut().append(header::SET_COOKIE, value);
    Ok(())
}

/// `POST /sales/{id}/buy`, the Buy button without JavaScript: the outcome
/// as a page; a refusal (a bad buyer id, too many tries, a server down) as
/// an error page with a link back to the sale.
pub(crate) async fn buy(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    form: web::Form<BuyForm>,
) -> Result<HttpResponse, PageError> {
    bought(&state, &request, &path, &form)
        .await
        .map_err(|error| match error {
            ApiError::SaleNotFound => error.into(),
            error => PageError::back_to(
                error,
                format!("/sales/{}", path.as_str()),
                "Back to the sale",
            ),
        })
}

async fn bought(
    state: &AppState,
    request: &HttpRequest,
    path: &str,
    form: &BuyForm,
) -> Result<HttpResponse, ApiError> {
    let user = UserId::parse(&form.user_id).map_err(ApiError::invalid)?;
    let on = limits::On::Sale {
        sale_id: parse_sale_id(path)?,
        buyer: &user,
    };
    limits::check(state, request, on).await?;
    let sale = find_sale(state, path).await?;
    // A sale with a waiting room sells only to an admitted buyer, as the
    // API does; a refusal is a page saying why, and writes nothing.
    if sale.waiting_room.is_some() {
        let admission = form.admission.as_deref().filter(|a| !a.is_empty());
        if let Err(refused) = door::admit(state, &sale, &user, admission).await {
            return waiting::not_admitted(state, &sale, refused).await;
        }
    }
    let outcome = state.purchaser.purchase(&sale, &user).await?;
    let (won, headline, order_id) = match outcome {
        // In a room a buyer buys once: already purchased, with no unit
        // held, is their admission spent (checked in the purchase's own
        // commit), as the API says it.
        Outcome::AlreadyPurchased { order_id: None } if sale.waiting_room.is_some() => {
            return waiting::not_admitted(state, &sale, ApiError::NotAdmitted("used")).await;
        }
        Outcome::NotAdmitted => {
            return waiting::not_admitted(state, &sale, ApiError::NotAdmitted(door::NOT_HELD))
                .await;
        }
        Outcome::Accepted { order_id } => {
            if sale.waiting_room.is_some() {
                door::spend(state, &sale, &user).await;
            }
            (true, "You got one!".to_owned(), Some(order_id.to_string()))
        }
        Outcome::SoldOut => (
            false,
            "Sold out. Every unit has been taken.".to_owned(),
            None,
        ),
        // The order their unit belongs to, where known: a buyer whose
        // first answer was lost on its way finds the order they won.
        Outcome::AlreadyPurchased { order_id } => (
            false,
            "You already have one of these.".to_owned(),
            order_id.map(|id| id.to_string()),
        ),
        Outcome::NotStarted => (false, "The sale has not started yet.".to_owned(), None),
        Outcome::Ended => (false, "The sale has ended.".to_owned(), None),
        Outcome::Busy => (
            false,
            "Too busy right now. Please try again.".to_owned(),
            None,
        ),
        Outcome::LockLost => (
            false,
            "Your turn ran out before it finished; nothing was taken. Please try again.".to_owned(),
            None,
        ),
        Outcome::Unconfirmed { order_id } => (
            false,
            "We could not confirm your purchase yet. If an order number is shown, \
             its page tells what became of it; otherwise try again."
                .to_owned(),
            order_id.map(|id| id.to_string()),
        ),
    };
    // The units left are a courtesy, read after the purchase was decided:
    // the answer never depends on it. The race it closes: Redis fails
    // between the win and this read, and the buyer sees an error page
    // instead of "You got one!" and the order id (and a retry would say
    // "You already have one"). Unread, the page shows the sale's total.
    let left = match state.store.stock_left(sale.id).await {
        Ok(left) => left,
        Err(error) => {
            tracing::warn!(
                error = format!("{error:#}"),
                "units left unread after a purchase"
            );
            i64::from(sale.stock_total)
        }
    };
    let page = BoughtPage {
        sale: SaleView::new(&sale, left),
        won,
        headline,
        order_id,
    };
    let mut response = html(&page)?;
    set_buyer_cookie(&mut response, user.as_str())?;
    Ok(response)
}

pub(crate) async fn order(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    let order = state
        .store
        .find_order(parse_order_id(&path)?)
        .await?
        .ok_or(ApiError::OrderNotFound)?;
    Ok(html(&order_page(&state, order, None).await?)?)
}

/// `POST /orders/{id}/pay`, the form behind the Pay button: pay, then show
/// the order (a redirect, so that reloading does not post again), or the
/// order with the reason the payment was refused.
pub(crate) async fn pay(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    let order_id = parse_order_id(&path)?;
    match pay_order(&state, order_id).await {
        Ok(_) => Ok(HttpResponse::SeeOther()
            .insert_header(("Location", format!("/orders/{order_id}")))
            .finish()),
        Err(
            refused @ (ApiError::PaymentWindowClosed
            | ApiError::OrderPending
            | ApiError::OrderRejected),
        ) => {
            let order = state
                .store
                .find_order(order_id)
                .await?
                .ok_or(ApiError::OrderNotFound)?;
            let page = order_page(&state, order, Some(refused.to_string())).await?;
            let mut response = html(&page)?;
            *response.status_mut() = actix_web::http::StatusCode::CONFLICT;
            Ok(response)
        }
        Err(other) => Err(other.into()),
    }
}

async fn order_page(
    state: &AppState,
    order: Order,
    notice: Option<String>,
) -> Result<OrderPage, ApiError> {
    let sale_name = state
        .store
        .sale(order.sale_id)
        .await?
        .map_or_else(String::new, |sale| sale.name.clone());
    Ok(OrderPage {
        order,
        sale_name,
        notice,
        server_now_ms: chrono::Utc::now().timestamp_millis(),
    })
}

/// The few static files, compiled into the binary so it runs from anywhere.
pub(crate) async fn static_file(path: web::Path<String>) -> Result<HttpResponse, PageError> {
    let (body, content_type) = match path.as_str() {
        "style.css" => (
            include_str!("../../static/style.css"),
            "text/css; charset=utf-8",
        ),
        "sale.js" => (
            include_str!("../../static/sale.js"),
            "text/javascript; charset=utf-8",
        ),
        "order.js" => (
            include_str!("../../static/order.js"),
            "text/javascript; charset=utf-8",
        ),
        "live.js" => (
            include_str!("../../static/live.js"),
            "text/javascript; charset=utf-8",
        ),
        "admin.js" => (
            include_str!("../../static/admin.js"),
            "text/javascript; charset=utf-8",
        ),
        _ => return Err(ApiError::NotFound.into()),
    };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "public, max-age=300"))
        .body(body))
}
