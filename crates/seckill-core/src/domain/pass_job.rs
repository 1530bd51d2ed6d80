//! A pass's orders, and the one queue job that carries them.
//!
//! The lock strategy decides a pass of buyers at once
//! (`strategy/under_lock.rs`) and queues the pass's orders as one job,
//! not one job per order (`lua/purchase_commit.lua`): what Redis spends on
//! a job (its entry in the due set, its body, its reserve and its ack) is
//! then spent once a pass, where it was a third of what Redis spent on
//! each purchase (docs/bench.md, "Redis' cost per purchase").
//!
//! A pending order is still found from its id alone: the pass's job is
//! named by the pass's id, and each order id of the pass is that id with
//! the order's place in the pass in one byte ([`PassIds`]). So an order
//! is carried by a job named by its own id (one order, queued by the
//! other strategies) or by its pass's ([`carriers`]).

use serde::Deserialize;
use uuid::Uuid;

use super::{OrderJob, UserId};

/// Orders one pass can hold: one byte of the id numbers them.
pub const MAX_PASS: usize = 256;

/// The byte of an order id that holds its place in its pass: the last of
/// the random bits, before the sale's id (`order::order_id_for`).
const PLACE: usize = 11;

/// The ids of one pass: the job's, and its orders' in turn.
#[derive(Debug, Clone)]
pub struct PassIds {
    /// The sale the pass sells.
    sale_id: i64,
    /// The pass's id, place 0: the job's id, and the first order's.
    base: [u8; 16],
    /// How many order ids were handed out.
    handed: usize,
}

impl PassIds {
    /// A fresh pass of sale `sale_id`. Its ids are laid out as
    /// `order::order_id_for`'s (milliseconds, random bits, the sale), with
    /// the random bits drawn here and not from UUIDv7's counter: the
    /// counter moves by one between two ids of a millisecond, in the very
    /// byte that numbers a pass's orders, so two passes drawn one after
    /// the other would share their ids. 34 random bits are left: two
    /// passes of one sale in one millisecond share an id with a chance of
    /// one in about 17 billion.
    pub fn new(sale_id: i64) -> Self {
        let mut base = *Uuid::now_v7().as_bytes();
        let random = *Uuid::new_v4().as_bytes();
        base[6..PLACE].copy_from_slice(&random[6..PLACE]);
        base[PLACE] = 0;
        // The variant bits (byte 8), then the version in the high nibble
        // of byte 6: 8 when the id names its sale, else 7 (as
        // `order_id_for`: such an order is found once it is written).
        base[8] = (base[8] & 0x3f) | 0x80;
        match u32::try_from(sale_id) {
            Ok(sale) => {
                base[6] = (base[6] & 0x0f) | 0x80;
                base[12..].copy_from_slice(&sale.to_be_bytes());
            }
            Err(_) => {
                base[6] = (base[6] & 0x0f) | 0x70;
                base[12..].copy_from_slice(&random[12..]);
            }
        }
        Self {
            sale_id,
            base,
            handed: 0,
        }
    }

    /// The id of the job that carries the pass's orders.
    pub fn job_id(&self) -> Uuid {
        Uuid::from_bytes(self.base)
    }

    /// The pass's next order, for `user`.
    pub fn order(&mut self, user: &UserId) -> OrderJob {
        OrderJob {
            order_id: self.next_order_id(),
            sale_id: self.sale_id,
            user_id: user.as_str().to_owned(),
        }
    }

    /// The next order's id. A pass holds at most [`MAX_PASS`] orders (the
    /// lanes take at most that many buyers a pass); one more is a bug.
    fn next_order_id(&mut self) -> Uuid {
        let place = u8::try_from(self.handed).expect("a pass holds at most MAX_PASS orders");
        self.handed += 1;
        let mut id = self.base;
        id[PLACE] = place;
        Uuid::from_bytes(id)
    }
}

/// The ids of the jobs that may carry order `order_id`: its own (a job of
/// one order) and its pass's. The same id twice for a pass's first order.
pub fn carriers(order_id: &Uuid) -> [Uuid; 2] {
    let mut pass = *order_id.as_bytes();
    pass[PLACE] = 0;
    [*order_id, Uuid::from_bytes(pass)]
}

/// A pass's job: `{"n":<orders>,"orders":[<order job>,...]}`, `n` first
/// so that the queue weighs the job without decoding it
/// (`lua/queue_lib.lua`, `weight_of`). The commit builds the same text in
/// Lua; this is the other writers' way (the drain's bench, tests).
pub fn pass_payload(orders: &[OrderJob]) -> String {
    let bodies: Vec<String> = orders.iter().map(OrderJob::to_payload).collect();
    format!(
        r#"{{"n":{},"orders":[{}]}}"#,
        orders.len(),
        bodies.join(",")
    )
}

/// The orders a job's payload carries: one order's job, or a pass's. A
/// pass whose `n` is not its count of orders does not decode: the queue
/// weighed it wrong.
pub fn carried(payload: &str) -> Result<Vec<OrderJob>, serde_json::Error> {
    #[derive(Deserialize)]
    struct Pass {
        n: usize,
        orders: Vec<OrderJob>,
    }
    if !payload.starts_with(r#"{"n":"#) {
        return OrderJob::from_payload(payload).map(|order| vec![order]);
    }
    let pass: Pass = serde_json::from_str(payload)?;
    if pass.n != pass.orders.len() {
        return Err(serde::de::Error::custom(format!(
            "a pass of {} orders says it holds {}",
            pass.orders.len(),
            pass.n
        )));
    }
    Ok(pass.orders)
}

#[cfg(test)]
mod tests {
    use super::super::order::sale_of;
    use super::*;

    #[test]
    fn a_pass_names_its_orders_and_each_order_its_pass() {
        let mut pass = PassIds::new(7);
        let orders: Vec<Uuid> = (0..MAX_PASS).map(|_| pass.next_order_id()).collect();
        assert_eq!(orders[0], pass.job_id());
        for order in &orders {
            assert_eq!(carriers(order), [*order, pass.job_id()]);
            assert_eq!(sale_of(order), Some(7));
            assert_eq!(order.get_version_num(), 8);
            assert_eq!(order.get_variant(), uuid::Variant::RFC4122);
        }
        let distinct: std::collections::HashSet<&Uuid> = orders.iter().collect();
        assert_eq!(distinct.len(), MAX_PASS);
    }

    /// The counter of UUIDv7 moves by one in the byte that numbers a
    /// pass's orders: passes drawn back to back must not share ids.
    #[test]
    fn passes_drawn_back_to_back_share_no_id() {
        let jobs: std::collections::HashSet<Uuid> =
            (0..10_000).map(|_| PassIds::new(7).job_id()).collect();
        assert_eq!(jobs.len(), 10_000);
    }

    #[test]
    #[should_panic(expected = "at most MAX_PASS")]
    fn a_pass_past_its_size_is_a_bug() {
        let mut pass = PassIds::new(7);
        for _ in 0..=MAX_PASS {
            pass.next_order_id();
        }
    }

    #[test]
    fn a_sale_too_large_for_the_id_gets_ids_that_name_no_sale() {
        let mut pass = PassIds::new(i64::from(u32::MAX) + 1);
        let order = pass.next_order_id();
        assert_eq!(order.get_version_num(), 7);
        assert_eq!(sale_of(&order), None);
    }

    #[test]
    fn a_job_carries_one_order_or_a_pass() {
        let mut pass = PassIds::new(7);
        let orders: Vec<OrderJob> = ["ann", "bob"]
            .iter()
            .map(|user| pass.order(&UserId::parse(user).unwrap()))
            .collect();
        assert_eq!((orders[1].sale_id, orders[1].user_id.as_str()), (7, "bob"));
        assert_eq!(carried(&pass_payload(&orders)).unwrap(), orders);
        assert_eq!(
            carried(&orders[1].to_payload()).unwrap(),
            [orders[1].clone()]
        );
        let miscounted = pass_payload(&orders).replacen(r#"{"n":2"#, r#"{"n":3"#, 1);
        assert!(carried(&miscounted).is_err());
        assert!(carried(r#"{"n":1,"orders":[{"no":1}]}"#).is_err());
        assert!(carried("{not json").is_err());
    }
}
