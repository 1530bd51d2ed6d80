use chrono::{DateTime, Utc};
use uuid::Uuid;

use super::UserId;

/// Where an order stands, as `GET /api/orders/{id}` reports it.
///
/// The same enum is the `orders.status` column (a TEXT with a CHECK on the
/// four stored values): sqlx reads and writes it by its snake_case name, so
/// no status is ever spelled as a string in Rust. `Pending` is never
/// stored: a pending order lives only on the Redis queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, sqlx::Type)]
#[serde(rename_all = "snake_case")]
#[sqlx(type_name = "text", rename_all = "snake_case")]
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
    /// The status as the API, the pages and the `orders.status` column name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Confirmed => "confirmed",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Rejected => "rejected",
        }
    }
}

impl std::fmt::Display for OrderStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An order as the app knows it, wherever it is: still pending on a sale's
/// queue, or stored in PostgreSQL. This is also what `GET /api/orders/{id}`
/// answers.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Order {
    pub order_id: Uuid,
    pub sale_id: i64,
    pub user_id: String,
    pub status: OrderStatus,
    /// The end of the payment window, while the order is confirmed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pay_by: Option<DateTime<Utc>>,
}

impl Order {
    /// An order accepted by the purchase path and not yet written by the worker.
    pub(crate) fn pending(job: &OrderJob) -> Self {
        Self {
            order_id: job.order_id,
            sale_id: job.sale_id,
            user_id: job.user_id.clone(),
            status: OrderStatus::Pending,
            pay_by: None,
        }
    }

    /// Whole seconds left to pay, while the window is open.
    pub fn seconds_to_pay(&self) -> Option<i64> {
        self.pay_by
            .map(|deadline| (deadline - Utc::now()).num_seconds())
            .filter(|left| *left > 0)
    }
}

/// Why PostgreSQL refused an order the purchase path had accepted. Under the
/// `lock` strategy neither happens; under `naive` both do. Stored in
/// `orders.reason` by its snake_case name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, sqlx::Type)]
#[sqlx(type_name = "text", rename_all = "snake_case")]
pub enum RejectReason {
    /// The `sold <= stock_total` constraint refused one more unit.
    SoldOut,
    /// The buyer already holds a unit of this sale.
    DuplicateBuyer,
}

impl std::fmt::Display for RejectReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl RejectReason {
    /// The reason as stored in `orders.reason` and shown on the admin page.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::SoldOut => "sold_out",
            Self::DuplicateBuyer => "duplicate_buyer",
        }
    }
}

/// An accepted order on its way from Redis to PostgreSQL. Queued alone,
/// its job's id is the order id, so enqueueing it twice keeps one job; a
/// pass of the `lock` strategy queues its orders in one job
/// (`pass_job.rs`). (Its payment deadline is a job of its own, shared with the orders
/// confirmed with it: [`DeadlineJob`](super::DeadlineJob).)
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct OrderJob {
    pub order_id: Uuid,
    pub sale_id: i64,
    pub user_id: String,
}

impl OrderJob {
    /// A new order, with a fresh id that names its sale ([`order_id_for`]).
    pub fn new(sale_id: i64, user: &UserId) -> Self {
        Self {
            order_id: order_id_for(sale_id),
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

/// A fresh order id that carries its sale's id, so that a pending order
/// is found from its id alone ([`sale_of`]) on its sale's queue, in its
/// sale's Redis hash slot. The race-free alternative to an index written
/// beside every purchase: an index key cannot carry the sale's hash tag
/// (a lookup has only the order id), so on a cluster it lived on another
/// shard, and a purchase wrote to, and waited for, a shard not its sale's.
/// (Sharded databases name rows the same way: the id says where it lives.)
///
/// The layout is a UUIDv8 (RFC 9562's custom version): the first 48 bits
/// are UUIDv7's milliseconds, so ids still sort by creation time and the
/// orders table's primary key index stays append-mostly; 42 bits are
/// random (two ids of one sale made in the same millisecond collide with a
/// chance of one in about 4 trillion); the last 32 are the sale id. A sale
/// id past `u32::MAX` gets a plain UUIDv7: such an order is found once the
/// worker has written it to PostgreSQL (milliseconds later).
fn order_id_for(sale_id: i64) -> Uuid {
    let Ok(sale) = u32::try_from(sale_id) else {
        return Uuid::now_v7();
    };
    let mut bytes = *Uuid::now_v7().as_bytes();
    // The random bits from a UUIDv4: UUIDv7's are a counter that moves by
    // one between two ids of a millisecond, so one order's id would name
    // the next (paying needs only the order id).
    bytes[6..12].copy_from_slice(&Uuid::new_v4().as_bytes()[6..12]);
    // Version 8 in the high nibble of byte 6; the variant bits (byte 8)
    // are UUIDv4's, as UUIDv7's.
    bytes[6] = (bytes[6] & 0x0f) | 0x80;
    bytes[12..].copy_from_slice(&sale.to_be_bytes());
    Uuid::from_bytes(bytes)
}

/// The sale an order id names, if it was made by [`order_id_for`].
pub(crate) fn sale_of(order_id: &Uuid) -> Option<i64> {
    if order_id.get_version_num() != 8 {
        return None;
    }
    let last: [u8; 4] = order_id.as_bytes()[12..]
        .try_into()
        .expect("a UUID has 16 bytes");
    Some(i64::from(u32::from_be_bytes(last)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_order_id_names_its_sale_and_sorts_by_time() {
        let first = order_id_for(7);
        std::thread::sleep(std::time::Duration::from_millis(2));
        let second = order_id_for(7);
        assert_eq!((sale_of(&first), sale_of(&second)), (Some(7), Some(7)));
        assert!(first < second, "{first} {second}");
        assert_ne!(order_id_for(7), order_id_for(7));
        assert_eq!(
            sale_of(&order_id_for(i64::from(u32::MAX))),
            Some(4_294_967_295)
        );
        // A sale id too large for the id, and an id from elsewhere, name no sale.
        assert_eq!(sale_of(&order_id_for(i64::from(u32::MAX) + 1)), None);
        assert_eq!(sale_of(&Uuid::now_v7()), None);
        assert_eq!(order_id_for(7).get_variant(), uuid::Variant::RFC4122);
    }

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
    fn the_names_the_api_shows_are_the_serde_names() {
        // (That PostgreSQL reads each stored status back as itself is tested
        // against a real database in tests/it/store.rs.)
        for status in [
            OrderStatus::Pending,
            OrderStatus::Confirmed,
            OrderStatus::Paid,
            OrderStatus::Cancelled,
            OrderStatus::Rejected,
        ] {
            assert_eq!(
                serde_json::to_value(status).unwrap(),
                serde_json::Value::from(status.as_str())
            );
        }
    }
}
