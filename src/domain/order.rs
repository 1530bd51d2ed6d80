use uuid::Uuid;

use super::UserId;

/// Where an order stands, as `GET /api/orders/{id}` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// Accepted by the purchase API, still on the Redis queue.
    Pending,
    /// Written to PostgreSQL: the buyer holds a unit, and must pay for it
    /// before the payment window closes.
    Confirmed,
    /// Paid within the window: the unit is the buyer's for good.
    Paid,
    /// Not paid in time: the unit went back on sale.
    Cancelled,
    /// PostgreSQL refused it (see [`RejectReason`]).
    Rejected,
}

impl OrderStatus {
    /// The status as stored in the `orders.status` column.
    pub fn parse_db(raw: &str) -> Option<Self> {
        match raw {
            "confirmed" => Some(Self::Confirmed),
            "paid" => Some(Self::Paid),
            "cancelled" => Some(Self::Cancelled),
            "rejected" => Some(Self::Rejected),
            _ => None,
        }
    }

    /// The status as the API and the pages name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Rejected => "rejected",
        }
    }

    /// Whether the order can still change (pending and confirmed orders can).
    pub fn is_final(self) -> bool {
        matches!(self, Self::Paid | Self::Cancelled | Self::Rejected)
    }
}

/// Why PostgreSQL refused an order the purchase path had accepted. Under the
/// `lock` strategy neither happens; under `naive` both do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectReason {
    /// The `sold <= stock_total` constraint refused one more unit.
    SoldOut,
    /// The buyer already holds a unit of this sale.
    DuplicateBuyer,
}

impl RejectReason {
    pub fn as_db(self) -> &'static str {
        match self {
            Self::SoldOut => "sold_out",
            Self::DuplicateBuyer => "duplicate_buyer",
        }
    }
}

/// The queue job that carries an accepted order from Redis to PostgreSQL.
/// Its queue id is the order id, so enqueueing it twice keeps one job.
///
/// The same payload, under the same id, is the order's payment deadline on
/// the sale's deadline queue (see `payment.rs`): it names everything the
/// cancellation needs to give the unit back in Redis.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderJob {
    pub order_id: Uuid,
    pub sale_id: i64,
    pub user_id: String,
}

impl OrderJob {
    /// A new order, with a fresh id. UUIDv7 ids sort by creation time, which
    /// keeps the orders table's primary key index append-mostly.
    pub fn new(sale_id: i64, user: &UserId) -> Self {
        Self {
            order_id: Uuid::now_v7(),
            sale_id,
            user_id: user.as_str().to_owned(),
        }
    }

    pub fn to_payload(&self) -> String {
        serde_json::to_string(self).expect("an OrderJob always serializes")
    }

    pub fn from_payload(payload: &str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(payload)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn order_job_round_trips_through_its_payload() {
        let job = OrderJob {
            order_id: Uuid::now_v7(),
            sale_id: 7,
            user_id: "ann".into(),
        };
        assert_eq!(OrderJob::from_payload(&job.to_payload()).unwrap(), job);
        assert!(OrderJob::from_payload("{not json").is_err());
    }

    #[test]
    fn every_stored_status_parses_back_to_itself() {
        for status in [
            OrderStatus::Confirmed,
            OrderStatus::Paid,
            OrderStatus::Cancelled,
            OrderStatus::Rejected,
        ] {
            assert_eq!(OrderStatus::parse_db(status.as_str()), Some(status));
        }
        assert_eq!(OrderStatus::parse_db("pending"), None, "never stored");
        assert!(!OrderStatus::Confirmed.is_final());
        assert!(OrderStatus::Cancelled.is_final());
    }
}
