//! A pass's orders, and the one queue job that carries them.
//!
//! `lock` decides a pass of buyers at once (`strategy/under_lock.rs`),
//! `lua`'s script a lane's buyers (`strategy/lua.rs`), and each queues
//! the pass's orders as one job, not one job per order
//! (`lua/purchase_commit.lua`, `lua/purchase_lua.lua`): what Redis spends on
//! a job (its entry in the due set, its body, its reserve and its ack) is
//! then spent once a pass, where it was a third of what Redis spent on
//! each purchase (docs/bench.md, "Redis' cost per purchase").
//!
//! A pending order is still found from its id alone: the pass's job is
//! named by its first order's id, and each order id of the pass hides the
//! pass and the order's place in it, enciphered under the database's
//! secret key ([`PassIds`]). So an order is carried by a job named by its
//! own id (one order, queued by the other strategies) or by its pass's
//! ([`carriers`]), and one order's id says nothing of its pass-mates'
//! (paying needs only the order id).

use serde::Deserialize;
use uuid::Uuid;

use hmac::Mac;

use super::{OrderJob, PassKey, UserId};

/// Orders one pass can hold: one byte of the id numbers them.
pub const MAX_PASS: usize = 256;

/// The 42 bits of an order id that are neither its time, its sale, nor
/// UUID's version and variant (`order::order_id_for`'s layout): the low
/// 4 bits of byte 6, byte 7, the low 6 bits of byte 8, bytes 9 to 11.
fn secret_bits(id: &[u8; 16]) -> u64 {
    let mut bits = u64::from(id[6] & 0x0f);
    bits = bits << 8 | u64::from(id[7]);
    bits = bits << 6 | u64::from(id[8] & 0x3f);
    for byte in &id[9..12] {
        bits = bits << 8 | u64::from(*byte);
    }
    bits
}

/// Write `bits` (42) where [`secret_bits`] reads them.
fn set_secret_bits(id: &mut [u8; 16], bits: u64) {
    let byte = |shift: u32| u8::try_from((bits >> shift) & 0xff).expect("a byte");
    id[11] = byte(0);
    id[10] = byte(8);
    id[9] = byte(16);
    id[8] = (id[8] & 0xc0) | (byte(24) & 0x3f);
    id[7] = byte(30);
    id[6] = (id[6] & 0xf0) | (byte(38) & 0x0f);
}

/// Rounds of the Feistel network that enciphers a pass and a place.
const ROUNDS: u8 = 4;
/// Bits in each half of the 42 enciphered.
const HALF: u32 = 21;
const HALF_MASK: u64 = (1 << HALF) - 1;

/// One round's function: 21 bits of the key's HMAC of the round and the
/// half.
fn round(key: &PassKey, round: u8, half: u64) -> u64 {
    let bytes = key
        .mac_of(&format!("order-id.{round}.{half}"))
        .finalize()
        .into_bytes();
    u64::from(u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]])) & HALF_MASK
}

/// A keyed permutation of 42 bits (a Feistel network over two halves of
/// 21, each round's function an HMAC): without the key, one output says
/// nothing of another's.
fn encipher(key: &PassKey, plain: u64) -> u64 {
    let (mut left, mut right) = (plain >> HALF, plain & HALF_MASK);
    for r in 0..ROUNDS {
        (left, right) = (right, left ^ round(key, r, right));
    }
    left << HALF | right
}

/// [`encipher`], undone.
fn decipher(key: &PassKey, cipher: u64) -> u64 {
    let (mut left, mut right) = (cipher >> HALF, cipher & HALF_MASK);
    for r in (0..ROUNDS).rev() {
        (left, right) = (right ^ round(key, r, left), left);
    }
    left << HALF | right
}

/// The ids of one pass: the job's, and its orders' in turn.
#[derive(Debug, Clone)]
pub struct PassIds<'k> {
    /// The key the ids are enciphered under.
    key: &'k PassKey,
    /// The sale the pass sells.
    sale_id: i64,
    /// The ids' time, sale, version and variant; their secret bits are
    /// each order's.
    frame: [u8; 16],
    /// The pass: 34 random bits, above 8 bits for the place in it.
    pass: u64,
    /// How many order ids were handed out.
    handed: usize,
}

impl<'k> PassIds<'k> {
    /// A fresh pass of sale `sale_id`, its ids enciphered under `key` (the
    /// database's, which every instance and worker reads alike). Laid out
    /// as `order::order_id_for`'s ids (milliseconds, 42 secret bits, the
    /// sale). The pass is 34 random bits: two passes of one sale in one
    /// millisecond share their ids with a chance of one in about 17
    /// billion.
    pub fn new(sale_id: i64, key: &'k PassKey) -> Self {
        let mut frame = *Uuid::now_v7().as_bytes();
        let random = *Uuid::new_v4().as_bytes();
        let drawn = u64::from_be_bytes(random[..8].try_into().expect("eight bytes"));
        // The variant bits (byte 8), then the version in the high nibble
        // of byte 6: 8 when the id names its sale, else 7 (as
        // `order_id_for`: such an order is found once it is written).
        frame[8] = (frame[8] & 0x3f) | 0x80;
        match u32::try_from(sale_id) {
            Ok(sale) => {
                frame[6] = (frame[6] & 0x0f) | 0x80;
                frame[12..].copy_from_slice(&sale.to_be_bytes());
            }
            Err(_) => {
                frame[6] = (frame[6] & 0x0f) | 0x70;
                frame[12..].copy_from_slice(&random[12..]);
            }
        }
        Self {
            key,
            sale_id,
            frame,
            pass: (drawn >> 30) << 8,
            handed: 0,
        }
    }

    /// The id of the job that carries the pass's orders: its first
    /// order's.
    pub fn job_id(&self) -> Uuid {
        self.id_of(0)
    }

    /// The pass's next order, for `user`. A pass holds at most
    /// [`MAX_PASS`] orders (the lanes take at most that many buyers a
    /// pass); one more is a bug.
    pub fn order(&mut self, user: &UserId) -> OrderJob {
        let place = u8::try_from(self.handed).expect("a pass holds at most MAX_PASS orders");
        self.handed += 1;
        OrderJob {
            order_id: self.id_of(place),
            sale_id: self.sale_id,
            user_id: user.as_str().to_owned(),
        }
    }

    fn id_of(&self, place: u8) -> Uuid {
        let mut id = self.frame;
        set_secret_bits(&mut id, encipher(self.key, self.pass | u64::from(place)));
        Uuid::from_bytes(id)
    }
}

/// The ids of the jobs that may carry order `order_id`: its own (a job of
/// one order) and its pass's, were it one of a pass's under `key`. The
/// same id twice for a pass's first order.
pub fn carriers(order_id: &Uuid, key: &PassKey) -> [Uuid; 2] {
    let mut job = *order_id.as_bytes();
    let first = decipher(key, secret_bits(&job)) & !0xff;
    set_secret_bits(&mut job, encipher(key, first));
    [*order_id, Uuid::from_bytes(job)]
}

/// A pass's job: `{"n":<orders>,"orders":[<order job>,...]}`, `n` first
/// so that the queue weighs the job without decoding it
/// (`lua/queue_lib.lua`, `weight_of`). The purchase scripts build the
/// same text in Lua (`queue_lib.lua`, `pass_payload`); this is the other
/// writers' way (the drain's bench, tests).
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

    fn key() -> PassKey {
        PassKey::new(b"a test key".to_vec())
    }

    fn buyer(name: &str) -> UserId {
        UserId::parse(name).expect("a valid id")
    }

    #[test]
    fn a_pass_names_its_orders_and_each_order_its_pass() {
        let key = key();
        let mut pass = PassIds::new(7, &key);
        let orders: Vec<Uuid> = (0..MAX_PASS)
            .map(|_| pass.order(&buyer("ann")).order_id)
            .collect();
        assert_eq!(orders[0], pass.job_id());
        for order in &orders {
            assert_eq!(carriers(order, &key), [*order, pass.job_id()]);
            assert_eq!(sale_of(order), Some(7));
            assert_eq!(order.get_version_num(), 8);
            assert_eq!(order.get_variant(), uuid::Variant::RFC4122);
        }
        let distinct: std::collections::HashSet<&Uuid> = orders.iter().collect();
        assert_eq!(distinct.len(), MAX_PASS);
    }

    /// One order's id says nothing of its pass-mates': in the clear they
    /// would share 34 of their 42 secret bits; enciphered, two share
    /// about half, as ids drawn apart do. Under another key the same id
    /// names another pass.
    #[test]
    fn an_order_id_hides_its_pass_mates() {
        let key = key();
        let mut pass = PassIds::new(7, &key);
        let bits: Vec<u64> = (0..64)
            .map(|_| secret_bits(pass.order(&buyer("ann")).order_id.as_bytes()))
            .collect();
        let shared: u32 = bits
            .windows(2)
            .map(|pair| 42 - (pair[0] ^ pair[1]).count_ones())
            .sum();
        let mean = f64::from(shared) / 63.0;
        assert!((15.0..27.0).contains(&mean), "{mean} bits shared");
        let other = PassKey::new(b"another key".to_vec());
        let order = pass.order(&buyer("bob")).order_id;
        assert_ne!(carriers(&order, &other)[1], pass.job_id());
    }

    #[test]
    fn the_cipher_is_undone_by_its_inverse() {
        let key = key();
        for plain in [0, 1, 255, 256, (1 << 42) - 1, 0x2aa_aaaa_aaaa] {
            let cipher = encipher(&key, plain);
            assert!(cipher < 1 << 42);
            assert_eq!(decipher(&key, cipher), plain);
        }
        let mut id = [0xff; 16];
        set_secret_bits(&mut id, 0);
        assert_eq!(secret_bits(&id), 0);
        assert_eq!(id[6] & 0xf0, 0xf0, "the version is left alone");
        assert_eq!(id[8] & 0xc0, 0xc0, "the variant is left alone");
        set_secret_bits(&mut id, (1 << 42) - 1);
        assert_eq!(id, [0xff; 16]);
    }

    #[test]
    fn passes_drawn_back_to_back_share_no_id() {
        let key = key();
        let jobs: std::collections::HashSet<Uuid> = (0..10_000)
            .map(|_| PassIds::new(7, &key).job_id())
            .collect();
        assert_eq!(jobs.len(), 10_000);
    }

    #[test]
    #[should_panic(expected = "at most MAX_PASS")]
    fn a_pass_past_its_size_is_a_bug() {
        let key = key();
        let mut pass = PassIds::new(7, &key);
        for _ in 0..=MAX_PASS {
            pass.order(&buyer("ann"));
        }
    }

    #[test]
    fn a_sale_too_large_for_the_id_gets_ids_that_name_no_sale() {
        let key = key();
        let mut pass = PassIds::new(i64::from(u32::MAX) + 1, &key);
        let order = pass.order(&buyer("ann")).order_id;
        assert_eq!(order.get_version_num(), 7);
        assert_eq!(sale_of(&order), None);
    }

    #[test]
    fn a_job_carries_one_order_or_a_pass() {
        let key = key();
        let mut pass = PassIds::new(7, &key);
        let orders: Vec<OrderJob> = ["ann", "bob"]
            .iter()
            .map(|user| pass.order(&buyer(user)))
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
