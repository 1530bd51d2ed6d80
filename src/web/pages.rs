//! Server-rendered pages: the sale list, a sale, and the result of a purchase.
//! They work without JavaScript: buying is a plain form post.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::http::header::ContentType;
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use askama::Template;
use serde::Deserialize;

use super::AppState;
use super::api::{SaleView, find_sale};
use super::error::ApiError;
use crate::catalog;
use crate::domain::UserId;
use crate::purchase::Outcome;

/// The cookie that remembers a browser's buyer id, so one browser is one buyer.
const BUYER_COOKIE: &str = "seckill_buyer";

#[derive(Template)]
#[template(path = "index.html")]
struct IndexPage {
    sales: Vec<SaleView>,
}

#[derive(Template)]
#[template(path = "sale.html")]
struct SalePage {
    sale: SaleView,
    buyer: String,
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
pub struct BuyForm {
    user_id: String,
}

fn html(page: &impl Template) -> Result<HttpResponse, ApiError> {
    let body = page.render().context("rendering a page")?;
    Ok(HttpResponse::Ok()
        .content_type(ContentType::html())
        .body(body))
}

pub async fn index(state: web::Data<AppState>) -> Result<HttpResponse, ApiError> {
    let mut sales = Vec::new();
    for sale in catalog::list_sales(&state.pg).await? {
        let left = state.stock_left(sale.id).await?;
        sales.push(SaleView::new(&sale, left));
    }
    html(&IndexPage { sales })
}

pub async fn sale(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sale = find_sale(&state, &path).await?;
    let left = state.stock_left(sale.id).await?;
    let buyer = request
        .cookie(BUYER_COOKIE)
        .map(|c| c.value().to_owned())
        .filter(|v| UserId::parse(v).is_ok())
        .unwrap_or_else(|| format!("buyer-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]));
    html(&SalePage {
        sale: SaleView::new(&sale, left),
        buyer,
    })
}

pub async fn buy(
    state: web::Data<AppState>,
    path: web::Path<String>,
    form: web::Form<BuyForm>,
) -> Result<HttpResponse, ApiError> {
    let user = UserId::parse(form.user_id.trim()).map_err(ApiError::InvalidRequest)?;
    let sale = find_sale(&state, &path).await?;
    let outcome = state.purchaser.purchase(&sale, &user).await?;
    let (won, headline, order_id) = match outcome {
        Outcome::Accepted { order_id } => {
            (true, "You got one!".to_owned(), Some(order_id.to_string()))
        }
        Outcome::SoldOut => (
            false,
            "Sold out. Every unit has been taken.".to_owned(),
            None,
        ),
        Outcome::AlreadyPurchased => (false, "You already have one of these.".to_owned(), None),
        Outcome::NotStarted => (false, "The sale has not started yet.".to_owned(), None),
        Outcome::Ended => (false, "The sale has ended.".to_owned(), None),
        Outcome::Busy => (
            false,
            "Too busy right now. Please try again.".to_owned(),
            None,
        ),
    };
    let left = state.stock_left(sale.id).await?;
    let page = BoughtPage {
        sale: SaleView::new(&sale, left),
        won,
        headline,
        order_id,
    };
    let mut response = html(&page)?;
    let cookie = Cookie::build(BUYER_COOKIE, user.as_str().to_owned())
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .finish();
    response
        .add_cookie(&cookie)
        .context("setting the buyer cookie")?;
    Ok(response)
}

/// The few static files, compiled into the binary so it runs from anywhere.
pub async fn static_file(path: web::Path<String>) -> Result<HttpResponse, ApiError> {
    let (body, content_type) = match path.as_str() {
        "style.css" => (
            include_str!("../../static/style.css"),
            "text/css; charset=utf-8",
        ),
        _ => return Err(ApiError::NotFound),
    };
    Ok(HttpResponse::Ok()
        .content_type(content_type)
        .insert_header(("Cache-Control", "public, max-age=300"))
        .body(body))
}
