//! The JSON API handlers. Each one parses its input into domain types, calls
//! the domain, and maps the outcome to a response; no business rule lives here.

use std::time::Duration;

use actix_web::{HttpRequest, HttpResponse, web};
use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

pub(crate) mod events;
pub(crate) mod queue;

use crate::admin::admit;
use crate::admin_token::AdminToken;
use crate::body::{Object, field};
use crate::door;
use crate::error::ApiError;
use crate::limits;
use crate::lookup::{SaleView, find_sale, parse_order_id, parse_sale_id, pay_order};
use crate::state::AppState;
use seckill_core::domain::{NewSale, OrderStatus, RoomSettings, UserId};
use seckill_core::keys;
use seckill_core::probe::{self, RedisHealth};
use seckill_core::purchase::Outcome;

/// How long `/healthz` waits for each server.
const HEALTH_PROBE_LIMIT: Duration = Duration::from_secs(1);

/// `POST /api/sales/{id}/purchase` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PurchaseRequest {
    #[serde(deserialize_with = "field::user_id")]
    user_id: String,
    /// On a sale with a waiting room: the admission it gave this buyer.
    #[serde(default, deserialize_with = "field::admission")]
    admission: Option<String>,
}

#[derive(Debug, Serialize)]
struct PurchaseAccepted {
    order_id: Uuid,
    status: OrderStatus,
}

/// `POST /api/sales` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CreateSaleRequest {
    #[serde(deserialize_with = "field::name")]
    name: String,
    #[serde(deserialize_with = "field::stock")]
    stock: i64,
    #[serde(deserialize_with = "field::price_cents")]
    price_cents: i64,
    #[serde(default, deserialize_with = "field::starts_at")]
    starts_at: Option<DateTime<Utc>>,
    #[serde(default, deserialize_with = "field::ends_at")]
    ends_at: Option<DateTime<Utc>>,
    waiting_room: Option<RoomSettings>,
}

pub(crate) async fn purchase(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Json<Object<PurchaseRequest>>,
) -> Result<HttpResponse, ApiError> {
    let Object(body) = body.into_inner();
    let user = UserId::parse(&body.user_id).map_err(ApiError::invalid)?;
    // The limits first, before the sale is looked up: a flood of
    // purchases costs the lookup nothing past its limit.
    let on = limits::On::Sale {
        sale_id: parse_sale_id(&path)?,
        buyer: &user,
    };
    limits::check(&state, &request, on).await?;
    let sale = find_sale(&state, &path).await?;
    if sale.waiting_room.is_some() {
        door::admit(&state, &sale, &user, body.admission.as_deref()).await?;
    }
    match state.purchaser.purchase(&sale, &user).await? {
        Outcome::Accepted { order_id } => {
            if sale.waiting_room.is_some() {
                door::spend(&state, &sale, &user).await;
            }
            Ok(HttpResponse::Accepted().json(PurchaseAccepted {
                order_id,
                status: OrderStatus::Pending,
            }))
        }
        // In a room a buyer buys once: an admission that bought and holds
        // no unit now (its order was cancelled unpaid) is spent.
        Outcome::AlreadyPurchased { order_id: None } if sale.waiting_room.is_some() => {
            Err(ApiError::NotAdmitted("used"))
        }
        Outcome::NotAdmitted => Err(ApiError::NotAdmitted(door::NOT_HELD)),
        Outcome::SoldOut => Err(ApiError::SoldOut),
        Outcome::AlreadyPurchased { order_id } => Err(ApiError::AlreadyPurchased(order_id)),
        Outcome::NotStarted => Err(ApiError::NotStarted),
        Outcome::Ended => Err(ApiError::Ended),
        Outcome::Busy => Err(ApiError::Busy),
        Outcome::LockLost => Err(ApiError::LockLost),
        Outcome::Unconfirmed { order_id } => Err(ApiError::Unconfirmed(order_id)),
    }
}

pub(crate) async fn get_sale(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sale = find_sale(&state, &path).await?;
    let left = state.store.stock_left(sale.id).await?;
    Ok(HttpResponse::Ok().json(SaleView::new(&sale, left)))
}

pub(crate) async fn create_sale(
    state: web::Data<AppState>,
    request: HttpRequest,
    body: web::Json<Object<CreateSaleRequest>>,
) -> Result<HttpResponse, ApiError> {
    admit(&state, &request, AdminToken::bearer(&request)).await?;
    let Object(body) = body.into_inner();
    let mut new = NewSale::builder(body.name, body.stock).price_cents(body.price_cents);
    if let Some(starts_at) = body.starts_at {
        new = new.starts_at(starts_at);
    }
    if let Some(ends_at) = body.ends_at {
        new = new.ends_at(ends_at);
    }
    if let Some(room) = body.waiting_room {
        new = new.waiting_room(room);
    }
    let new = new.build(Utc::now()).map_err(ApiError::invalid)?;
    let sale = state.store.create_sale(&new).await?;
    state.index.forget();
    Ok(HttpResponse::Created().json(SaleView::new(&sale, i64::from(sale.stock_total))))
}

pub(crate) async fn get_order(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let order_id = parse_order_id(&path)?;
    match state.store.find_order(order_id).await? {
        Some(order) => Ok(HttpResponse::Ok().json(order)),
        None => Err(ApiError::OrderNotFound),
    }
}

/// `POST /api/orders/{id}/pay`: simulated payment, no body.
pub(crate) async fn pay(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let order = pay_order(&state, parse_order_id(&path)?).await?;
    Ok(HttpResponse::Ok().json(order))
}

/// `GET /healthz`: 200 only when Redis takes a write and PostgreSQL
/// answers; otherwise 503, saying which is "down" or "refuses writes".
pub(crate) async fn health(state: web::Data<AppState>) -> HttpResponse {
    let health_key = keys::health(state.store.prefix());
    let (redis, postgres) = tokio::join!(
        probe::redis_pool_health(state.store.redis_pool(), &health_key, HEALTH_PROBE_LIMIT),
        probe::postgres_pool_answers(state.store.pg(), HEALTH_PROBE_LIMIT),
    );
    let body = serde_json::json!({
        "redis": redis.as_str(),
        "postgres": if postgres { "ok" } else { "down" },
    });
    if redis == RedisHealth::Ok && postgres {
        HttpResponse::Ok().json(body)
    } else {
        HttpResponse::ServiceUnavailable().json(body)
    }
}
