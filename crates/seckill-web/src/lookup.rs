//! What the JSON API and the pages share: a sale or an order found from
//! the id in a path (a malformed id is simply "not found"), a sale as both
//! show it, and paying with a refusal as the error both answer.

use chrono::{DateTime, Utc};
use serde::Serialize;
use uuid::Uuid;

use seckill_core::domain::{Order, Sale, SaleStatus};
use seckill_core::payment::{self, PayRefused};

use crate::error::ApiError;
use crate::state::AppState;

/// The currency every price is in, as the pages write it.
const CURRENCY: &str = "$";

/// A sale as the API shows it.
#[derive(Debug, Serialize)]
pub struct SaleView {
    pub(crate) id: i64,
    pub(crate) name: String,
    pub(crate) price_cents: i64,
    pub(crate) stock_total: i32,
    pub(crate) stock_left: i64,
    pub(crate) starts_at: DateTime<Utc>,
    pub(crate) ends_at: Option<DateTime<Utc>>,
    pub(crate) status: SaleStatus,
    /// The sale's waiting room, if it has one (`null` otherwise).
    pub(crate) waiting_room: Option<seckill_core::domain::RoomSettings>,
}

impl SaleView {
    /// The price for people, with its currency: 99900 -> "$999.00".
    /// Every sale is priced in cents of one currency, the storefront's
    /// (a real shop would keep the currency with the price).
    pub(crate) fn price(&self) -> String {
        format!(
            "{CURRENCY}{}.{:02}",
            self.price_cents / 100,
            self.price_cents % 100
        )
    }

    /// Units taken so far (pending, confirmed or paid).
    pub(crate) fn sold(&self) -> i64 {
        i64::from(self.stock_total) - self.stock_left
    }

    /// When the sale opens, for people: "2026-11-23 14:00:00 UTC".
    pub(crate) fn opens(&self) -> String {
        self.starts_at.format("%Y-%m-%d %H:%M:%S UTC").to_string()
    }

    /// When the sale closes, for people, if it ever does.
    pub(crate) fn closes(&self) -> Option<String> {
        self.ends_at
            .map(|end| end.format("%Y-%m-%d %H:%M:%S UTC").to_string())
    }

    pub(crate) fn new(sale: &Sale, stock_left: i64) -> Self {
        Self::new_at(sale, stock_left, Utc::now())
    }

    /// As it stands at `now`.
    pub(crate) fn new_at(sale: &Sale, stock_left: i64, now: DateTime<Utc>) -> Self {
        Self {
            id: sale.id,
            name: sale.name.clone(),
            price_cents: sale.price_cents,
            stock_total: sale.stock_total,
            stock_left: stock_left.max(0),
            starts_at: sale.starts_at,
            ends_at: sale.ends_at,
            status: sale.status(now, stock_left),
            waiting_room: sale.waiting_room,
        }
    }
}

/// Ids in paths are parsed by hand so that a malformed id is simply "not found".
pub(crate) fn parse_sale_id(raw: &str) -> Result<i64, ApiError> {
    raw.parse::<i64>().map_err(|_| ApiError::SaleNotFound)
}

pub(crate) async fn find_sale(
    state: &AppState,
    raw_id: &str,
) -> Result<std::sync::Arc<Sale>, ApiError> {
    let id = parse_sale_id(raw_id)?;
    state.store.sale(id).await?.ok_or(ApiError::SaleNotFound)
}

/// Pay, with a refusal as the error the API and the pages show.
pub(crate) async fn pay_order(state: &AppState, order_id: Uuid) -> Result<Order, ApiError> {
    payment::pay(&state.store, order_id)
        .await?
        .map_err(|refused| match refused {
            PayRefused::WindowClosed => ApiError::PaymentWindowClosed,
            PayRefused::Rejected => ApiError::OrderRejected,
            PayRefused::Pending => ApiError::OrderPending,
            PayRefused::NotFound => ApiError::OrderNotFound,
        })
}

/// A malformed order id is simply "not found".
pub(crate) fn parse_order_id(raw: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(raw).map_err(|_| ApiError::OrderNotFound)
}
