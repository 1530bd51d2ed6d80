//! The answer tally: how many purchases of each sale this instance answered,
//! by answer (accepted, sold out, already purchased, ...), for the live page
//! on the projector.
//!
//! Counting must cost the purchase path nothing it would notice, so a
//! purchase only bumps an atomic counter in this process' memory. A
//! background task ([`Tally::flush_until`]) adds what was counted to the
//! sale's answers hash in Redis (`keys::SaleKeys::answers`) every
//! [`FLUSH_EVERY`], all sales in one pipelined round trip of `HINCRBY`s, so
//! that the live page sees the sum over every instance.
//!
//! A flush that fails (Redis is down for a moment) keeps what it took and
//! adds it to the next one: counts are late, never lost. A real system
//! would also tag each flush so that one whose answer was lost after Redis
//! applied it is not applied twice; a classroom counter can live with that.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::keys::SaleKeys;
use crate::store::Store;
use crate::strategy::Outcome;

/// How often the counts go to Redis.
pub(crate) const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// The fields of the answers hash, one per [`Outcome`], named like the
/// API's code for each refusal (`web/error.rs`); [`slot`] gives an
/// outcome's place in this list.
pub(crate) const FIELDS: [&str; 9] = [
    "accepted",
    "sold_out",
    "already_purchased",
    "not_started",
    "ended",
    "busy",
    "lock_lost",
    "unconfirmed",
    "not_admitted",
];

/// An outcome's place in [`FIELDS`] (and in a sale's counters, and in the
/// purchase path's figures for `/metrics`).
pub(crate) fn slot(outcome: &Outcome) -> usize {
    match outcome {
        Outcome::Accepted { .. } => 0,
        Outcome::SoldOut => 1,
        Outcome::AlreadyPurchased { .. } => 2,
        Outcome::NotStarted => 3,
        Outcome::Ended => 4,
        Outcome::Busy => 5,
        Outcome::LockLost => 6,
        Outcome::Unconfirmed { .. } => 7,
        Outcome::NotAdmitted => 8,
    }
}

/// Counts of one sale not yet flushed, one per answer.
type Counts = [AtomicU64; FIELDS.len()];

/// One instance's answer counts, by sale. Shared by the purchase path
/// (which counts) and the flush task (which empties the counts into Redis).
#[derive(Default)]
pub struct Tally {
    /// The counts of every sale answered since start. A std RwLock, not a
    /// tokio one: nothing awaits while it is held. Purchases take the read
    /// side (the sale is almost always there already) and only bump an
    /// atomic; the write side is taken once per sale, to add it.
    sales: RwLock<HashMap<i64, Arc<Counts>>>,
    /// What forgotten sales had counted and the flush task has not taken
    /// yet (std Mutex: held for a merge, never across an await).
    forgotten: std::sync::Mutex<Pending>,
}

impl Tally {
    /// Count one answer to a purchase of `sale_id`.
    pub(crate) fn count(&self, sale_id: i64, outcome: &Outcome) {
        self.counts_of(sale_id)[slot(outcome)].fetch_add(1, Ordering::Relaxed);
    }

    fn counts_of(&self, sale_id: i64) -> Arc<Counts> {
        if let Some(counts) = self.sales.read().expect("tally poisoned").get(&sale_id) {
            return Arc::clone(counts);
        }
        // Two first purchases of a sale may both get here: `entry` keeps
        // whichever came first, so neither one's count lands in a map
        // entry that the other then replaces.
        let mut sales = self.sales.write().expect("tally poisoned");
        Arc::clone(sales.entry(sale_id).or_default())
    }

    /// Forget the sales in `ended`; what they counted goes to Redis with
    /// the next flush. A purchase that took a sale's counts before they
    /// were removed and counts after the swap loses that one count (an
    /// `ended` answer, on a sale nobody watches any more).
    pub(crate) fn forget(&self, ended: &[i64]) {
        let mut into = self.forgotten.lock().expect("tally poisoned");
        let mut sales = self.sales.write().expect("tally poisoned");
        for sale_id in ended {
            if let Some(counts) = sales.remove(sale_id) {
                for (field, count) in FIELDS.iter().zip(counts.iter()) {
                    let delta = count.swap(0, Ordering::Relaxed);
                    if delta > 0 {
                        *into.entry((*sale_id, field)).or_default() += delta;
                    }
                }
            }
        }
        crate::map_memory::shrink_if_sparse(&mut sales);
    }

    /// How many sales have counts here.
    pub(crate) fn len(&self) -> usize {
        self.sales.read().expect("tally poisoned").len()
    }

    /// Take every count out of memory, leaving zeros, and add them to
    /// `into`. `swap`, not a load and then a store of zero: a purchase that
    /// counts between the two would be wiped out.
    fn take(&self, into: &mut Pending) {
        for (key, delta) in self.forgotten.lock().expect("tally poisoned").drain() {
            *into.entry(key).or_default() += delta;
        }
        let sales = self.sales.read().expect("tally poisoned");
        for (sale_id, counts) in sales.iter() {
            for (field, count) in FIELDS.iter().zip(counts.iter()) {
                let delta = count.swap(0, Ordering::Relaxed);
                if delta > 0 {
                    *into.entry((*sale_id, field)).or_default() += delta;
                }
            }
        }
    }

    /// Flush the counts into Redis every [`FLUSH_EVERY`] until `stop`,
    /// then once more, so that a graceful stop loses nothing Redis takes.
    pub async fn flush_until(self: Arc<Self>, store: Store, stop: CancellationToken) {
        // What was taken out of memory but not yet written: kept across a
        // failed flush, and only this task touches it.
        let mut pending = Pending::new();
        let mut ticks = tokio::time::interval(FLUSH_EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stopping = tokio::select! {
                () = stop.cancelled() => true,
                _ = ticks.tick() => false,
            };
            self.take(&mut pending);
            if let Err(error) = flush(&store, &mut pending).await {
                tracing::warn!(
                    error = format!("{error:#}"),
                    waiting = pending.len(),
                    stopping,
                    "answer counts kept for the next flush"
                );
            }
            if stopping {
                return;
            }
        }
    }
}

/// Counts taken but not yet in Redis, by sale and hash field.
type Pending = HashMap<(i64, &'static str), u64>;

/// Add `pending` to the answers hashes (one round trip to one server);
/// empty it once Redis has taken it. Plain `HINCRBY`s: each adds to
/// whatever is there, so there is no read-then-write to keep atomic, and
/// instances never clash. Each sale's hash may live on another master of a
/// cluster, so they go [`RedisConn::send_apart`](crate::redis_pool::RedisConn::send_apart).
async fn flush(store: &Store, pending: &mut Pending) -> anyhow::Result<()> {
    if pending.is_empty() {
        return Ok(());
    }
    let adds = pending
        .iter()
        .map(|((sale_id, field), delta)| {
            let key = SaleKeys::new(store.prefix(), *sale_id).answers;
            redis::Cmd::hincr(key, *field, *delta)
        })
        .collect();
    let mut conn = store.redis().await?;
    conn.send_apart(adds)
        .await
        .context("adding answer counts to Redis")?;
    pending.clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_taken_once_and_added_up_by_sale_and_answer() {
        let tally = Tally::default();
        let accepted = Outcome::Accepted {
            order_id: uuid::Uuid::nil(),
        };
        tally.count(1, &accepted);
        tally.count(1, &accepted);
        tally.count(1, &Outcome::SoldOut);
        tally.count(2, &Outcome::Busy);
        let mut pending = Pending::new();
        tally.take(&mut pending);
        assert_eq!(pending[&(1, "accepted")], 2);
        assert_eq!(pending[&(1, "sold_out")], 1);
        assert_eq!(pending[&(2, "busy")], 1);
        assert_eq!(pending.len(), 3);
        // A second take finds zeros and adds nothing: a failed flush's
        // counts stay as they were, ready for the next one.
        tally.take(&mut pending);
        assert_eq!(pending[&(1, "accepted")], 2);
        tally.count(1, &accepted);
        tally.take(&mut pending);
        assert_eq!(pending[&(1, "accepted")], 3);
    }

    #[test]
    fn every_outcome_has_a_field_of_its_own() {
        let outcomes = [
            Outcome::Accepted {
                order_id: uuid::Uuid::nil(),
            },
            Outcome::SoldOut,
            Outcome::AlreadyPurchased { order_id: None },
            Outcome::NotStarted,
            Outcome::Ended,
            Outcome::Busy,
            Outcome::LockLost,
            Outcome::Unconfirmed { order_id: None },
            Outcome::NotAdmitted,
        ];
        let slots: std::collections::HashSet<_> = outcomes.iter().map(slot).collect();
        assert_eq!(slots.len(), FIELDS.len());
        assert_eq!(FIELDS[slot(&Outcome::LockLost)], "lock_lost");
        assert_eq!(
            FIELDS[slot(&Outcome::AlreadyPurchased { order_id: None })],
            "already_purchased"
        );
    }
}
