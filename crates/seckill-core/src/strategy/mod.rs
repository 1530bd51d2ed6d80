//! The ways to guard a sale's stock, one file each, and what they share.
//!
//! Every strategy runs the same five steps of a purchase (see `purchase.rs`):
//! check the buyer, check the stock, take a unit, remember the buyer, queue
//! the order. They differ in what keeps two purchases from interleaving
//! between the checks and the writes:
//! - `under_lock.rs` (`--strategy lock`, the default): the article's Redis lock,
//!   fixed, with a fence; the buyers waiting on one instance go through it
//!   together.
//! - `naive.rs` (`--strategy naive`): nothing. DELIBERATELY BROKEN: it
//!   oversells, so the demo and the tests can show that it does.
//! - `article.rs`, `getset.rs`, `decr.rs`: the locks and the counter trick
//!   of the articles and tutorials this project grew from, bugs included
//!   (DELIBERATELY BROKEN; each file names its bugs and the knob that
//!   makes each one happen).
//! - `lua.rs`: no lock; the purchase is one Redis script, for the buyers
//!   waiting on one instance together. Correct.
//! - `postgres.rs`: no Redis on the decision; one conditional UPDATE in
//!   PostgreSQL. Correct, and the price of a database round trip.
//!
//! What they share lives here: the [`Outcome`] of a purchase, the pure
//! decision ([`decide`]), the per-instance sold-out flags, the sale lanes
//! of `lock` and `lua` (`lanes.rs`), and [`Shop`], the
//! instance's handles and the steps every strategy uses (read the sale,
//! note a pending order, find out whether a commit whose answer was lost
//! went through).

pub(crate) mod article;
pub(crate) mod decr;
pub(crate) mod getset;
mod lanes;
mod lost_answer;
pub mod lua;
pub(crate) mod naive;
pub(crate) mod postgres;
mod sold_out;
pub mod under_lock;

pub(crate) use lanes::Lanes;
pub(crate) use lost_answer::{LOOKUP_RETRY, LateCommit, Looked};
pub(crate) use sold_out::{Flag, SoldOutFlags};

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use redis::aio::ConnectionLike;
use uuid::Uuid;

use crate::config::PurchaseSettings;
use crate::domain::{OrderJob, UserId};
use crate::events::LockReleases;
use crate::keys::SaleKeys;
use crate::queue::Queue;
use crate::redis_pool::RedisConn;
use crate::store::{self, Snapshot, Store};

/// How a purchase ended. Business outcomes, not errors: each maps to one
/// HTTP status in `web::api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The buyer got a unit; the order is on the queue.
    Accepted {
        order_id: Uuid,
    },
    SoldOut,
    /// The buyer holds a unit of this sale already. `order_id` is the
    /// order it belongs to, where the strategy keeps one (every one but
    /// the lab's broken ones, `holds` in `keys.rs`): a buyer whose `202` was lost on its way (a client that timed
    /// out, a phone that lost its connection) and who asks again learns
    /// the order they won, instead of a refusal that names nothing.
    AlreadyPurchased {
        order_id: Option<Uuid>,
    },
    NotStarted,
    Ended,
    /// Nothing was taken, and the client may retry: the lock could not
    /// be had in time, or (`lua`) the pass's answer was lost and the look
    /// that voided it found the buyer not taken.
    Busy,
    /// This purchase held the lock, but it ran out before the commit (a
    /// pause longer than its TTL): the fence refused the write, nothing was
    /// taken, and the client may retry.
    LockLost,
    /// With `--redis-durability replica`: decided, but no replica confirmed
    /// the pass's writes in time, so a failover could still take the
    /// decision back. The buyer is told `503`, with the order id when the
    /// decision was a unit (`GET /api/orders/{id}` tells what became of it).
    Unconfirmed {
        order_id: Option<Uuid>,
    },
    /// On a sale with a waiting room: the room does not hold the buyer as
    /// admitted, though their admission is signed and has not run out by
    /// the instance's clock (Redis lost it: a wipe, a failover under
    /// `local`, an instance that admitted from an old primary cut off
    /// from the others; or its end passed on Redis' clock, ahead of the
    /// instance's). Nothing was taken; the buyer joins again.
    NotAdmitted,
}

impl Outcome {
    /// What a buyer is told when the pass that decided this outcome was not
    /// confirmed by a replica: a decision made on Redis' data is not
    /// final; an answer that decided nothing (busy, lock lost) stands.
    pub(crate) fn unconfirmed(&self) -> Self {
        match self {
            Self::Accepted { order_id } => Self::Unconfirmed {
                order_id: Some(*order_id),
            },
            // The order a buyer holds may land: its id is told, so that
            // the buyer is never told "no" without it for a unit that
            // turns out to be theirs.
            Self::AlreadyPurchased { order_id } => Self::Unconfirmed {
                order_id: *order_id,
            },
            Self::SoldOut | Self::NotAdmitted => Self::Unconfirmed { order_id: None },
            other => *other,
        }
    }
}

/// What the checks decide, given what was read. Pure, so it is unit-tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    Take,
    SoldOut,
    AlreadyPurchased,
}

/// Steps 1 and 2. A buyer who already has a unit is told so even when the
/// sale has since sold out: it is the more useful answer.
pub(crate) fn decide(already_bought: bool, stock_left: i64) -> Decision {
    if already_bought {
        Decision::AlreadyPurchased
    } else if stock_left <= 0 {
        Decision::SoldOut
    } else {
        Decision::Take
    }
}

/// Whether a replica confirmed a pass, as the `WAIT` sent in the pipeline
/// of its last step said (`replicas::run_and_confirm`): counted and
/// logged when not, since its buyers are then told `503`.
pub(crate) fn replicated(confirmed: bool) -> bool {
    if !confirmed {
        crate::metrics::metrics().unreplicated_passes.inc();
        tracing::warn!("no replica confirmed a purchase's writes in time; its buyers get 503");
    }
    confirmed
}

/// What a pass found for its buyers, one outcome each, in order: now, or
/// once a look that may take seconds is done.
pub(crate) enum Passed {
    Now(Vec<Outcome>),
    /// A `lua` pass whose answer was lost: whether its orders were taken
    /// is looked up (`lua.rs`, `after_a_lost_answer`) in a task of its
    /// own (`lanes.rs`), and the lane goes on with its next pass meanwhile. `lua` holds
    /// no lock a pass must keep until it is done, and a stalled server
    /// would otherwise hold every later buyer of the sale on this
    /// instance behind each pass's look (up to 3 s), one after another.
    /// `doubt`: what each buyer is told if the look panics.
    Later {
        look: std::pin::Pin<Box<dyn Future<Output = Vec<Outcome>> + Send>>,
        doubt: Vec<Outcome>,
    },
}

/// One purchase, as every strategy's `purchase` takes it.
#[derive(Clone, Copy)]
pub(crate) struct Buy<'a> {
    pub(crate) shop: &'a Shop,
    pub(crate) keys: &'a SaleKeys,
    pub(crate) sale_id: i64,
    pub(crate) user: &'a UserId,
}

impl<'a> Buy<'a> {
    /// Its parts, in the order every strategy names them.
    pub(crate) fn parts(self) -> (&'a Shop, &'a SaleKeys, i64, &'a UserId) {
        (self.shop, self.keys, self.sale_id, self.user)
    }
}

/// What every strategy works with: one per instance, shared by all its
/// requests. Cheap to clone (pools and flags are shared), so a batch can
/// run in a task of its own.
#[derive(Clone)]
pub struct Shop {
    /// Redis for the purchase; PostgreSQL only to load a sale Redis lost.
    pub(crate) store: Store,
    /// The strategy and its timings; fixed at start.
    pub(crate) settings: PurchaseSettings,
    /// This instance's memory of sold-out sales. Set by any purchase that
    /// sees no unit left, cleared when a stale flag finds units again.
    pub(crate) sold_out: Arc<SoldOutFlags>,
    /// This instance's name, written into the sale locks it takes.
    pub(crate) instance: Arc<str>,
    /// How long a confirmed order has to be paid (the worker's setting):
    /// the `postgres` strategy confirms orders itself.
    pub(crate) payment_window: Duration,
    /// The sale locks' releases as this instance hears them (`events.rs`):
    /// the `lock` strategy's waiter wakes on them instead of polling.
    pub(crate) released: LockReleases,
}

/// A fault knob's pause. Off, it is no pause at all: a zero `sleep` still
/// waits for the timer's next millisecond tick, and the knobs pause inside
/// the critical sections.
pub(super) async fn pause_for(pause: Duration) {
    if !pause.is_zero() {
        tokio::time::sleep(pause).await;
    }
}

impl Shop {
    /// The slow-network knob (`--redis-delay-ms`): a pause before each
    /// command of the hand-written locks (`article`, `getset`).
    pub(crate) async fn slow_network(&self) {
        pause_for(self.settings.redis_delay()).await;
    }

    /// The hold-pause knob (`--hold-pause-ms`): a pause of the holder at
    /// the worst moment, the GC pause of the fencing argument.
    pub(crate) async fn hold_pause(&self) {
        pause_for(self.settings.hold_pause()).await;
    }

    pub fn new(
        store: Store,
        settings: PurchaseSettings,
        instance: &str,
        payment_window: Duration,
        released: LockReleases,
    ) -> Self {
        Self {
            store,
            settings,
            sold_out: Arc::default(),
            instance: instance.into(),
            payment_window,
            released,
        }
    }

    /// Where every purchase of a sale starts: its keys and a Redis
    /// connection, or the answer for each of its buyers at once when the
    /// pool has no connection free within its wait timeout (`busy`, not an
    /// error) or the sale is known sold out ([`Shop::known_sold_out`]).
    pub(crate) async fn ready(
        &self,
        sale_id: i64,
        users: &[&UserId],
    ) -> anyhow::Result<Result<(SaleKeys, RedisConn), Outcome>> {
        let keys = SaleKeys::new(self.store.prefix(), sale_id);
        let Some(mut conn) = self.store.redis_pool().get_or_busy().await? else {
            return Ok(Err(Outcome::Busy));
        };
        if let Some(known) = self
            .known_sold_out(&mut conn, &keys, sale_id, users)
            .await?
        {
            return Ok(Err(known));
        }
        Ok(Ok((keys, conn)))
    }

    /// What this instance's memory of sold-out sales tells `users` of
    /// `sale_id` ([`SoldOutFlags::check`]), starting the listing of the
    /// sale's holders in the background when it asks for one.
    pub(crate) fn sold_out_for(&self, sale_id: i64, users: &[&UserId]) -> Flag {
        let (flag, listing) = self
            .sold_out
            .check(sale_id, users, self.settings.sold_out_refresh());
        if let Some(listing) = listing {
            let shop = self.clone();
            let listing = async move {
                let keys = SaleKeys::new(shop.store.prefix(), sale_id);
                let list = match shop.store.redis().await {
                    Ok(mut conn) => sold_out::list_holders(&mut conn, &keys).await,
                    Err(error) => Err(error),
                };
                if let Err(error) = &list {
                    tracing::warn!(sale_id, error = %format!("{error:#}"), "listing a sold-out sale's holders failed; its buyers are answered from Redis");
                }
                shop.sold_out.listed(sale_id, listing, list);
            };
            self.store.runtime().spawn(listing);
        }
        flag
    }

    /// What to tell the buyers `users` of a sale sold out as far as this
    /// instance can tell without the lock (`None`: not known sold out, or
    /// one of them may hold a unit): a flag within its refresh period
    /// costs nothing, a stale one costs one script (under `replica`, with
    /// a write and a `WAIT` behind it).
    pub(crate) async fn known_sold_out<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &SaleKeys,
        sale_id: i64,
        users: &[&UserId],
    ) -> anyhow::Result<Option<Outcome>> {
        match self.sold_out_for(sale_id, users) {
            Flag::Unknown => Ok(None),
            Flag::SoldOut => Ok(Some(Outcome::SoldOut)),
            Flag::Stale => {
                // Reading "0 left" without the lock is a true answer: at the
                // moment of the read there was nothing to sell. Under
                // `replica`, a true answer only once a replica holds what
                // it read (`replicas.rs`): the race this prevents is a unit
                // given back and taken again on data no replica has, and
                // this instance telling its buyers "sold out" from it, to
                // be taken back by a failover that gives the unit back.
                // Unconfirmed, the buyer is told so at once: the purchase
                // would read the same data and wait for the same replica
                // in vain, a second wait for every request.
                let (left, takes, confirmed) = sold_out::look(conn, keys, self.store.durability())
                    .await
                    .context("reading the stock")?;
                match left {
                    Some(left) if left <= 0 && confirmed => {
                        self.sold_out.refreshed(sale_id, takes);
                        // A holder among `users` is answered by Redis.
                        Ok((self.sold_out_for(sale_id, users) == Flag::SoldOut)
                            .then_some(Outcome::SoldOut))
                    }
                    Some(left) if left <= 0 => Ok(Some(Outcome::SoldOut.unconfirmed())),
                    _ => {
                        self.sold_out.clear(sale_id);
                        Ok(None)
                    }
                }
            }
        }
    }

    /// Steps 1 and 2 for `buyers`: the units left and who holds one,
    /// loading the sale from PostgreSQL first if Redis lost it.
    pub(crate) async fn read_sale<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        sale_id: i64,
        buyers: &[&UserId],
    ) -> anyhow::Result<Snapshot> {
        store::sales::snapshot(self.store.pg(), conn, self.store.prefix(), sale_id, buyers).await
    }
}

/// Steps 1 to 5 with no guard of their own: read the stock and the buyer,
/// decide, pause for `pause` (the hold-pause knob: a GC pause), then DECR
/// the stock, record the buyer, queue the order. What `article` and
/// `getset` run inside their locks: whatever their locks let through, this
/// sells.
pub(crate) async fn take_unguarded(
    shop: &Shop,
    conn: &mut RedisConn,
    (keys, sale_id): (&SaleKeys, i64),
    user: &UserId,
    pause: Duration,
) -> anyhow::Result<Outcome> {
    let snapshot = shop.read_sale(conn, sale_id, &[user]).await?;
    match decide(snapshot.holding[0], snapshot.stock_left) {
        Decision::Take => {}
        Decision::AlreadyPurchased => {
            return Ok(Outcome::AlreadyPurchased {
                order_id: snapshot.orders[0],
            });
        }
        Decision::SoldOut => {
            shop.sold_out.set(sale_id);
            return Ok(Outcome::SoldOut);
        }
    }
    pause_for(pause).await;
    record_take(shop, conn, keys, sale_id, user, None).await
}

/// Steps 3 to 5 with no check: DECR the stock (unless the caller did:
/// `decremented` is then the units left it got), add the buyer, publish
/// the units left, queue the order. Separate commands
/// on purpose, as the articles' callers write them: only the broken
/// strategies use this, and what guards it (or fails to) is theirs.
pub(crate) async fn record_take(
    shop: &Shop,
    conn: &mut RedisConn,
    keys: &SaleKeys,
    sale_id: i64,
    user: &UserId,
    decremented: Option<i64>,
) -> anyhow::Result<Outcome> {
    let job = OrderJob::new(sale_id, user);
    let left = match decremented {
        Some(left) => left,
        None => redis::cmd("DECR")
            .arg(&keys.stock)
            .query_async(conn)
            .await
            .context("taking a unit")?,
    };
    let (id, payload) = (job.order_id.to_string(), job.to_payload());
    let () = redis::pipe()
        // The buyer's hold names no order (`keys.rs`, `holds`).
        .hset(&keys.holds, user.as_str(), "")
        .ignore()
        .publish(&keys.events, left)
        .ignore()
        .query_async(conn)
        .await
        .context("recording the buyer")?;
    Queue::new(keys.queue.clone())
        .enqueue(conn, &[(id.as_str(), payload.as_str())], Duration::ZERO)
        .await
        .context("queueing the order")?;
    if left <= 0 {
        shop.sold_out.set(sale_id);
    }
    Ok(Outcome::Accepted {
        order_id: job.order_id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repeat_buyer_is_told_so_even_when_sold_out() {
        assert_eq!(decide(true, 5), Decision::AlreadyPurchased);
        assert_eq!(decide(true, 0), Decision::AlreadyPurchased);
    }

    #[test]
    fn a_new_buyer_takes_a_unit_only_while_one_is_left() {
        assert_eq!(decide(false, 1), Decision::Take);
        assert_eq!(decide(false, 0), Decision::SoldOut);
        assert_eq!(decide(false, -2), Decision::SoldOut);
    }
}
