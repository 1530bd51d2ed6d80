//! Every Redis key seckill uses, in one place.
//!
//! All keys of one sale, including the keys of its two queues (orders and
//! payment deadlines), share the hash tag `{sale:ID}`. Redis Cluster places keys with the same tag in the
//! same slot, so every script that touches one sale (the lock, the purchase
//! commit, the queue) runs on one master, atomically, when seckill runs on
//! a cluster (`redis_pool.rs`). A purchase touches only its sale's keys, so
//! only its sale's shard: a pending order is found from its id, which
//! names its sale (`domain::order_id_for`), on that sale's queue, and the
//! buyer's rate limits count on that sale. The keys of no sale (an admin
//! login's rate limit, admin sessions) are each read and written alone.
//!
//! Every key starts with a prefix (`seckill` by default) so that tests, each
//! with a prefix of its own, can share one Redis server without seeing each
//! other's data.

/// The keys of one sale.
#[derive(Debug, Clone)]
pub struct SaleKeys {
    /// `STRING`: units left to sell. Absent until the sale is loaded into Redis.
    pub stock: String,
    /// `HASH` user id -> order id: the buyers who hold a unit of this sale
    /// (pending or confirmed), each with the order their unit belongs to,
    /// so that only that order's return takes the unit back
    /// (`lua/unit_return.lua`) and a buyer who asks again learns the
    /// order they won. The one record of who bought: a set of the buyers
    /// beside it named the same people, at a write and a read more per
    /// purchase (docs/bench.md, "Redis' cost per purchase"). The lab's
    /// broken strategies write an empty order id, a hold that names no
    /// order, as the articles record a buyer: their buyer's two requests
    /// can both win, and a return for either order gives the unit back.
    pub holds: String,
    /// `STRING` with a TTL: the sale's lock; its value names the holder.
    pub lock: String,
    /// `STRING`: counter behind the lock's fencing tokens; only ever grows.
    pub fence: String,
    /// The sale's order queue.
    pub queue: QueueKeys,
    /// The queue of payment deadlines: one delayed job per confirmed order,
    /// due when its payment window closes (see `payment.rs`).
    pub deadlines: QueueKeys,
    /// `SET`: ids of cancelled orders whose unit has been given back in
    /// Redis. It makes the give-back happen once per order however often the
    /// deadline job is delivered (see `lua/unit_return.lua`).
    pub(crate) returned: String,
    /// `SET`: ids of the passes whose answer was lost, each added by the
    /// look that then tells their buyers (`lua/pass_void.lua`): a `lua`
    /// script of such a pass that lands later takes nobody
    /// (`lua/purchase_lua.lua`). Kept, as `returned` is: one id a fault.
    pub voided: String,
    /// Pub/sub channel (not a key) on which every change of the units left
    /// is published, as the new number of units left.
    pub events: String,
    /// `STRING`: `db:<database id>:<random>`, fresh for every load of the
    /// sale from PostgreSQL (`lua/sale_load.lua`). A worker that sees it
    /// change while it holds a batch knows a load may have missed the
    /// batch's orders; a load that finds another database named in it
    /// clears the sale's keys first.
    pub(crate) epoch: String,
    /// `STRING` with a 1 s TTL: written right before every `WAIT` for the
    /// sale, on the same connection (`replicas.rs`), so that the `WAIT`
    /// covers everything Redis held when it ran, what the step before it
    /// read as much as what it wrote. Its value means nothing.
    pub waited: String,
    /// `STRING`: commits the fence refused (a holder whose lock had run out
    /// tried to write; `lua/purchase_commit.lua`). Only grows; the proof,
    /// in a chaos run or a class, that the fence fired.
    pub fenced: String,
    /// `HASH` answer -> count: how many purchases every instance answered
    /// with each answer (`accepted`, `sold_out`, ...), added by each
    /// instance's tally (`tally.rs`) every 100 ms; read by the live page.
    pub answers: String,
    /// The sale's waiting room, if it has one (`waiting_room.rs`).
    pub room: RoomKeys,
}

/// The keys of a sale's waiting room, under the sale's hash tag (one
/// script, `lua/room_visit.lua`, reads the stock beside them). Written by
/// the room's scripts only; read by `waiting_room.rs`. Each expires the
/// store's room grace (`--room-grace-secs`) after the sale's end (none,
/// for a sale without one), set by the script that writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoomKeys {
    /// `ZSET` buyer -> place: who waits, lowest place first in.
    pub line: String,
    /// `ZSET` buyer -> end of the admission (ms): who may buy now.
    pub admitted: String,
    /// `SET`: buyers whose admission bought whom the sale's holds hash
    /// does not name: their unit came back (`lua/unit_return.lua`), or
    /// it had by the time a strategy outside the door marked the
    /// admission (`lua/room_bought.lua`). An admission is spent when its
    /// buyer is here or in the holds (never both): it buys once.
    pub bought: String,
    /// `HASH`: places handed out, the admissions' pace and totals
    /// (admitted, expired, abandoned).
    pub state: String,
    /// `HASH` buyer -> when they last visited (ms, Redis' clock): one entry
    /// per buyer in `line`, written by every visit of a buyer in line and
    /// removed as they leave it (admitted or dropped), by
    /// `lua/room_visit.lua`, which alone reads it, to drop the buyers who
    /// left without a word instead of admitting them (`abandoned`). A hash,
    /// not a sorted set: it is only ever read by buyer, and costs a third
    /// less memory a buyer.
    pub seen: String,
}

impl RoomKeys {
    /// Every key of the room.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.line,
            &self.admitted,
            &self.bought,
            &self.state,
            &self.seen,
        ]
    }
}

impl SaleKeys {
    /// Every key of sale `sale_id` under `prefix`. Made for each purchase
    /// that reaches Redis (and each pass, batch and room visit): some
    /// thirty strings, each the sale's base and a suffix, so each is made
    /// by [`under`] at its final size. With `format!` each went through
    /// the formatting machinery and grew its buffer as it went: a fifth
    /// of the instructions of a `lua` purchase in the instance (callgrind,
    /// docs/bench.md).
    pub fn new(prefix: &str, sale_id: i64) -> Self {
        let base = format!("{prefix}:{{sale:{sale_id}}}");
        let room = under(&base, ":room");
        Self {
            stock: under(&base, ":stock"),
            holds: under(&base, ":holds"),
            lock: under(&base, ":lock"),
            fence: under(&base, ":fence"),
            queue: QueueKeys::new(&base),
            deadlines: QueueKeys::new(&under(&base, ":pay")),
            returned: under(&base, ":returned"),
            voided: under(&base, ":voided"),
            events: under(&base, ":events"),
            epoch: under(&base, ":epoch"),
            waited: under(&base, ":waited"),
            fenced: under(&base, ":fenced"),
            answers: under(&base, ":answers"),
            room: RoomKeys {
                line: under(&room, ":line"),
                admitted: under(&room, ":admitted"),
                bought: under(&room, ":bought"),
                state: under(&room, ":state"),
                seen: under(&room, ":seen"),
            },
        }
    }
}

/// `base` followed by `suffix`, in one allocation of the final size.
fn under(base: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(base.len() + suffix.len());
    key.push_str(base);
    key.push_str(suffix);
    key
}

/// `STRING` with a TTL: the rate limiter's state for one client (`kind`
/// is `ip`, `buyer` or `join-ip`), on one sale or, for what belongs to no
/// sale (an admin login), on none. A sale's limits carry its hash tag, so
/// on a cluster its buyers' requests touch only the sale's shard: a
/// limit's key elsewhere would make another shard's stall stop them.
pub fn rate_limit(prefix: &str, sale_id: Option<i64>, kind: &str, client: &str) -> String {
    match sale_id {
        Some(sale_id) => format!("{prefix}:{{sale:{sale_id}}}:rate:{kind}:{client}"),
        None => format!("{prefix}:rate:{kind}:{client}"),
    }
}

/// `STRING` with a TTL: an open admin session, until it expires or its
/// admin logs out.
pub(crate) fn admin_session(prefix: &str, id: &str) -> String {
    format!("{prefix}:admin:session:{id}")
}

/// `STRING` with a TTL: wrong admin tokens from one client in the current
/// window.
pub(crate) fn login_failures(prefix: &str, client: &str) -> String {
    format!("{prefix}:admin:failures:{client}")
}

/// `STRING` with a 1 s TTL: written by `/healthz` to learn whether Redis
/// takes writes (a server out of memory or a replica still answers `PING`).
pub fn health(prefix: &str) -> String {
    format!("{prefix}:health")
}

/// A sale's two queues, by name (the admin's re-drive form names them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleQueue {
    /// The order queue, drained into PostgreSQL by the worker.
    Orders,
    /// The payment deadlines, one delayed job per confirmed order.
    Deadlines,
}

impl SaleQueue {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Orders => "orders",
            Self::Deadlines => "deadlines",
        }
    }
}

impl SaleKeys {
    /// The keys of one of the sale's queues.
    pub fn queue_keys(&self, which: SaleQueue) -> &QueueKeys {
        match which {
            SaleQueue::Orders => &self.queue,
            SaleQueue::Deadlines => &self.deadlines,
        }
    }
}

/// The lock that lets one worker at a time sweep the payment deadlines
/// (see `worker.rs`), and its fencing counter: `(lock, fence)`. Not a sale's
/// key, so it carries a hash tag of its own: the lock's script touches the
/// lock, its fence and its line at once, which a Redis Cluster allows only
/// for keys in one slot.
pub(crate) fn sweep_lock(prefix: &str) -> (String, String) {
    (
        format!("{prefix}:{{sweep}}:lock"),
        format!("{prefix}:{{sweep}}:fence"),
    )
}

/// The lock's line: `STRING` with a TTL, the one waiter who asked for the
/// lock while it was held and is next to take it (`lua/lock_acquire.lua`).
/// Beside its lock, so under the same hash tag.
pub fn lock_line(lock: &str) -> String {
    format!("{lock}:line")
}

/// The mark of a lock attempt (named by its `nonce`) whose answer was
/// lost and which its caller gave up (`lua/lock_abandon.lua`), so that the
/// attempt, landing late, takes nothing (`lua/lock_acquire.lua`). A
/// `STRING` that expires a minute after it is set. Beside its lock, so
/// under the same hash tag.
pub fn lock_abandoned(lock: &str, nonce: &str) -> String {
    format!("{lock}:abandoned:{nonce}")
}

/// The pub/sub channel (not a key) on which a lock's release is announced,
/// so that waiters wake instead of polling (`lock.rs`).
pub(crate) fn lock_released(lock: &str) -> String {
    format!("{lock}:released")
}

/// The pub/sub channels every sale has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SaleChannel {
    /// [`SaleKeys::events`]: the units left, after every change.
    Events,
    /// [`lock_released`] of the sale's lock: it was released.
    LockReleased,
}

impl SaleChannel {
    pub(crate) const ALL: [SaleChannel; 2] = [SaleChannel::Events, SaleChannel::LockReleased];

    /// What the channel's name ends with, after the sale's hash tag.
    fn suffix(self) -> &'static str {
        match self {
            SaleChannel::Events => "events",
            SaleChannel::LockReleased => "lock:released",
        }
    }
}

/// The pattern that matches this channel of every sale under `prefix`,
/// for one `PSUBSCRIBE` per app instance. Glob characters in the prefix are
/// escaped so that they match only themselves.
pub(crate) fn channel_pattern(prefix: &str, which: SaleChannel) -> String {
    format!("{}:{{sale:*}}:{}", glob_literal(prefix), which.suffix())
}

/// `text` as a Redis glob pattern (`PSUBSCRIBE`, `KEYS`, `SCAN MATCH`)
/// that matches itself only: the pattern characters escaped with a
/// backslash.
pub fn glob_literal(text: &str) -> String {
    let mut pattern = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern
}

/// The sale, and which of its channels, a channel name under `prefix` is:
/// the inverse of [`SaleKeys::events`] and of [`lock_released`].
pub(crate) fn sale_of_channel(prefix: &str, channel: &str) -> Option<(i64, SaleChannel)> {
    let (id, suffix) = channel
        .strip_prefix(prefix)?
        .strip_prefix(":{sale:")?
        .split_once("}:")?;
    let which = SaleChannel::ALL
        .into_iter()
        .find(|which| which.suffix() == suffix)?;
    Some((id.parse().ok()?, which))
}

/// The keys of one task queue. `base` carries the hash tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueKeys {
    /// `ZSET` job id -> due time (ms, Redis clock): jobs waiting to run.
    pub due: String,
    /// `ZSET` job id -> lease deadline (ms): jobs a worker has reserved.
    pub inflight: String,
    /// `HASH` job id -> payload: the job bodies, for due, in-flight and dead jobs.
    pub jobs: String,
    /// `HASH` job id -> times reserved, kept only past the first (none: in
    /// flight on its first delivery, or due with none counted), so that
    /// most jobs, which run once, never write it (`lua/queue_reserve.lua`).
    pub(crate) attempts: String,
    /// `ZSET` job id -> time it was given up on (ms): the dead-letter set.
    pub dead: String,
    /// `<reserved><token>`: `STRING` (JSON, expiring with its lease), what a
    /// reserve took, handed out again to its retry (`lua/queue_reserve.lua`).
    reserved: String,
}

impl QueueKeys {
    pub fn new(base: &str) -> Self {
        let queue = under(base, ":q");
        Self {
            due: under(&queue, ":due"),
            inflight: under(&queue, ":inflight"),
            jobs: under(&queue, ":jobs"),
            attempts: under(&queue, ":attempts"),
            dead: under(&queue, ":dead"),
            reserved: under(&queue, ":reserved:"),
        }
    }

    /// The record of the reserve made with `token` (`reserved`).
    pub fn reservation(&self, token: &str) -> String {
        under(&self.reserved, token)
    }

    /// The keys in the fixed order every queue script expects them.
    pub fn all(&self) -> [&str; 5] {
        [
            &self.due,
            &self.inflight,
            &self.jobs,
            &self.attempts,
            &self.dead,
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The names themselves: data written under them outlives a build.
    #[test]
    fn a_sales_keys_are_named_as_they_always_were() {
        let keys = SaleKeys::new("t1", 42);
        let named = |suffix: &str| format!("t1:{{sale:42}}:{suffix}");
        let pairs = [
            (&keys.stock, "stock"),
            (&keys.holds, "holds"),
            (&keys.lock, "lock"),
            (&keys.fence, "fence"),
            (&keys.returned, "returned"),
            (&keys.voided, "voided"),
            (&keys.events, "events"),
            (&keys.epoch, "epoch"),
            (&keys.waited, "waited"),
            (&keys.fenced, "fenced"),
            (&keys.answers, "answers"),
            (&keys.room.line, "room:line"),
            (&keys.room.admitted, "room:admitted"),
            (&keys.room.bought, "room:bought"),
            (&keys.room.state, "room:state"),
            (&keys.room.seen, "room:seen"),
            (&keys.queue.due, "q:due"),
            (&keys.queue.inflight, "q:inflight"),
            (&keys.queue.jobs, "q:jobs"),
            (&keys.queue.attempts, "q:attempts"),
            (&keys.queue.dead, "q:dead"),
            (&keys.deadlines.due, "pay:q:due"),
            (&keys.deadlines.inflight, "pay:q:inflight"),
            (&keys.deadlines.jobs, "pay:q:jobs"),
            (&keys.deadlines.attempts, "pay:q:attempts"),
            (&keys.deadlines.dead, "pay:q:dead"),
        ];
        for (key, suffix) in pairs {
            assert_eq!(*key, named(suffix));
        }
    }

    #[test]
    fn every_key_of_a_sale_shares_one_hash_tag() {
        let keys = SaleKeys::new("t1", 42);
        let mut all = vec![
            &keys.stock,
            &keys.holds,
            &keys.lock,
            &keys.fence,
            &keys.returned,
            &keys.voided,
            &keys.events,
            &keys.epoch,
            &keys.waited,
            &keys.fenced,
            &keys.answers,
            &keys.room.line,
            &keys.room.admitted,
            &keys.room.bought,
            &keys.room.state,
            &keys.room.seen,
        ];
        let (line, released) = (lock_line(&keys.lock), lock_released(&keys.lock));
        let abandoned = lock_abandoned(&keys.lock, "test:0");
        all.extend([&line, &released, &abandoned]);
        let queues: Vec<String> = keys
            .queue
            .all()
            .iter()
            .chain(keys.deadlines.all().iter())
            .map(|k| k.to_string())
            .collect();
        all.extend(queues.iter());
        for key in all {
            assert!(
                key.starts_with("t1:{sale:42}:"),
                "{key} lacks the sale's hash tag"
            );
        }
    }

    #[test]
    fn the_sweep_locks_keys_share_one_hash_tag() {
        let (lock, fence) = sweep_lock("t1");
        let others = [
            lock_line(&lock),
            lock_released(&lock),
            lock_abandoned(&lock, "test:0"),
        ];
        for key in [&lock, &fence].into_iter().chain(&others) {
            assert!(
                key.starts_with("t1:{sweep}:"),
                "{key} lacks the sweep's hash tag"
            );
        }
    }

    #[test]
    fn the_order_queue_and_the_deadline_queue_are_distinct() {
        let keys = SaleKeys::new("t1", 42);
        for (order, deadline) in keys.queue.all().iter().zip(keys.deadlines.all()) {
            assert_ne!(*order, deadline);
        }
    }

    #[test]
    fn a_sale_channel_names_its_sale_and_matches_the_pattern() {
        let keys = SaleKeys::new("t1", 42);
        assert_eq!(
            sale_of_channel("t1", &keys.events),
            Some((42, SaleChannel::Events))
        );
        assert_eq!(
            sale_of_channel("t1", &lock_released(&keys.lock)),
            Some((42, SaleChannel::LockReleased))
        );
        assert_eq!(sale_of_channel("t2", &keys.events), None);
        assert_eq!(sale_of_channel("t1", &keys.stock), None);
        assert_eq!(
            channel_pattern("t1", SaleChannel::Events),
            "t1:{sale:*}:events"
        );
        assert_eq!(
            channel_pattern("t1", SaleChannel::LockReleased),
            "t1:{sale:*}:lock:released"
        );
        assert_eq!(
            channel_pattern("a*b", SaleChannel::Events),
            "a\\*b:{sale:*}:events"
        );
    }

    #[test]
    fn different_sales_and_prefixes_never_collide() {
        assert_ne!(SaleKeys::new("a", 1).stock, SaleKeys::new("a", 11).stock);
        assert_ne!(SaleKeys::new("a", 1).stock, SaleKeys::new("b", 1).stock);
    }
}
