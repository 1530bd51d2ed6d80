//! `lock` (the default): the article's Redis lock, with its bugs fixed,
//! and a fence on the writes.
//!
//! What it is: the sale's lock (`lock.rs`) is taken around the five steps,
//! so the purchases of one sale run one at a time across every instance,
//! and the writes are one script that first checks the lock still holds
//! this holder's value (`lua/purchase_commit.lua`): a holder whose lock ran
//! out while it was paused writes nothing, and its buyer is told
//! `503 lock_lost`.
//!
//! What it costs: the lock serialises a sale. Each pass through it is two
//! round trips to Redis (take the lock with the reads behind it in one
//! pipeline, then write and release), and with an fsync'ed append-only
//! file both wait for the disk. One buyer per
//! pass would cap a sale at a few hundred purchases a second. So the buyers
//! of a sale waiting on one instance queue in a **lane** ([`Lanes`]): one
//! task (started by the first of them, the leader) takes everyone queued
//! through the lock at once: one read for all (stock and every buyer's
//! membership), decisions in arrival order, one fenced write for all the
//! winners; then everyone who queued meanwhile, until the lane is empty.
//! The lock still decides
//! between instances; the lane only saves each instance from contending
//! with itself. (Databases call this group commit.)

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use tokio::sync::oneshot;

use super::{Decision, Flag, Outcome, Shop, decide};
use crate::domain::{OrderJob, UserId};
use crate::keys::SaleKeys;
use crate::lock::{Acquire, LockGuard, RedisLock, Release};
use crate::metrics::metrics;
use crate::payment;
use crate::probe;
use crate::queue::queue_script;
use crate::store::Snapshot;
use crate::store::sales::{self, SnapshotRead};

static COMMIT: LazyLock<Script> = queue_script!("lua/purchase_commit.lua");

/// The most buyers one pass through the lock takes; the rest wait for the
/// next pass. Bounds one script's length and one pass's time.
const MAX_BATCH: usize = 256;

/// Steps 3 to 5 for a batch of orders, fenced: take the units, record the
/// buyers and queue the orders, only if `guard` still holds the lock; then
/// release it in the same step, announced to the waiters.
/// `Ok(Some(units left))` when it wrote, `Ok(None)` when the lock was lost
/// and nothing was written.
pub async fn commit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    jobs: &[OrderJob],
) -> redis::RedisResult<Option<i64>> {
    let mut script = COMMIT.prepare_invoke();
    script
        .key(&keys.stock)
        .key(&keys.buyers)
        .key(&keys.lock)
        .key(&keys.queue.due)
        .key(&keys.queue.jobs)
        .key(&keys.fenced)
        .arg(guard.value())
        .arg(&keys.events)
        .arg(guard.released_channel());
    for job in jobs {
        script
            .arg(job.user_id.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload());
    }
    let (status, left): (String, i64) = script.invoke_async(conn).await?;
    match status.as_str() {
        "committed" => Ok(Some(left)),
        "lock_lost" => Ok(None),
        other => Err(payment::unexpected_answer("purchase_commit.lua", other)),
    }
}

/// The buyers of each sale waiting on this instance.
#[derive(Default)]
pub struct Lanes {
    /// One lane per sale seen here. A std Mutex: held for a lookup, never
    /// across an await.
    by_sale: Mutex<HashMap<i64, Arc<Lane>>>,
}

/// One sale's waiting buyers on this instance.
#[derive(Default)]
struct Lane {
    /// A std Mutex: held for a push or a take, never across an await.
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// Buyers who arrived and wait to be taken through the lock, oldest
    /// first.
    waiting: Vec<Waiter>,
    /// Whether a task is taking them through ([`drain`]): one contender for
    /// the Redis lock per sale per instance. Without it every waiting buyer
    /// would poll Redis for the lock, and the holder's writes would queue
    /// behind their polls. Set by the buyer who finds it unset, cleared by
    /// the task when it finds nobody waiting, both under this lock: the
    /// race it settles is a buyer joining as the task finds the lane empty,
    /// who is either taken by the task or starts the next one, never left
    /// waiting with no task to come.
    draining: bool,
}

/// A buyer waiting in a lane, and where to send the answer.
struct Waiter {
    user: UserId,
    answer: oneshot::Sender<anyhow::Result<Outcome>>,
}

impl Lanes {
    /// Buy one unit of the sale for `user`, with the buyers waiting beside.
    pub async fn purchase(
        &self,
        shop: &Shop,
        sale_id: i64,
        user: &UserId,
    ) -> anyhow::Result<Outcome> {
        let lane = self.lane(sale_id);
        let (answer, answered) = oneshot::channel();
        let waiter = Waiter {
            user: user.clone(),
            answer,
        };
        if lane.join(waiter) {
            // In a task of its own: its passes carry other buyers' answers
            // and may hold the Redis lock, so they must finish even if this
            // request is dropped. On the store's runtime, not this HTTP
            // worker's: there, in a burst, a pass would wait behind
            // thousands of new requests at each of its round trips, holding
            // the lock the other instances wait for (see `Store::runtime`);
            // and the task takes the next batch itself, so that no request
            // has to be served between two passes.
            let runtime = &shop.store.runtime;
            runtime.spawn(drain(shop.clone(), Arc::clone(&lane), sale_id));
        }
        answered.await.unwrap_or_else(|_| Err(no_answer()))
    }

    fn lane(&self, sale_id: i64) -> Arc<Lane> {
        self.by_sale
            .lock()
            .expect("lanes poisoned")
            .entry(sale_id)
            .or_default()
            .clone()
    }
}

/// Take the lane's buyers through the sale's lock, a pass of up to
/// [`MAX_BATCH`] at a time, oldest first, until nobody is waiting.
async fn drain(shop: Shop, lane: Arc<Lane>, sale_id: i64) {
    let _on_panic = Undrained(&lane);
    while let Some(batch) = lane.next_batch() {
        through_the_lock(&shop, sale_id, batch).await;
    }
}

/// Should a pass panic, its lane is marked as drained by nobody as the
/// task unwinds, so that the next buyer starts a task again (the buyers of
/// that pass get no answer: `no_answer`).
struct Undrained<'a>(&'a Lane);

impl Drop for Undrained<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.state().draining = false;
        }
    }
}

impl Lane {
    /// Queue `waiter`; whether no task is draining the lane, so that the
    /// caller is to start one.
    fn join(&self, waiter: Waiter) -> bool {
        let mut state = self.state();
        state.waiting.push(waiter);
        !std::mem::replace(&mut state.draining, true)
    }

    /// The next pass's buyers; `None` when nobody waits, and then the task
    /// that asked is done draining.
    fn next_batch(&self) -> Option<Vec<Waiter>> {
        let mut state = self.state();
        if state.waiting.is_empty() {
            state.draining = false;
            return None;
        }
        let n = state.waiting.len().min(MAX_BATCH);
        Some(state.waiting.drain(..n).collect())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LaneState> {
        // Nothing that can panic runs under it; were it poisoned all the
        // same, a push or a drain of a Vec leaves its state whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The pass that should have answered a buyer ended without it (it
/// panicked).
fn no_answer() -> anyhow::Error {
    anyhow::anyhow!("the purchase's pass through the lock ended without an answer")
}

/// One pass: take `batch` through the sale's lock and answer each buyer.
async fn through_the_lock(shop: &Shop, sale_id: i64, batch: Vec<Waiter>) {
    // Buyers whose request is gone (the client hung up) buy nothing.
    let batch: Vec<Waiter> = batch
        .into_iter()
        .filter(|waiter| !waiter.answer.is_closed())
        .collect();
    if batch.is_empty() {
        return;
    }
    let users: Vec<&UserId> = batch.iter().map(|waiter| &waiter.user).collect();
    match pass(shop, sale_id, &users).await {
        Ok(outcomes) => {
            for (waiter, outcome) in batch.into_iter().zip(outcomes) {
                let _ = waiter.answer.send(Ok(outcome));
            }
        }
        Err(error) => {
            // Each buyer gets the failure, judged once: a server that is
            // down stays "unavailable" (503) for every one of them.
            let judged = probe::Judged::of(&error);
            for waiter in batch {
                let _ = waiter.answer.send(Err(judged.to_error()));
            }
        }
    }
}

/// Take the lock, run the five steps for `users`, release. One outcome per
/// user, in order.
async fn pass(shop: &Shop, sale_id: i64, users: &[&UserId]) -> anyhow::Result<Vec<Outcome>> {
    let everyone = |outcome| Ok(vec![outcome; users.len()]);
    let keys = SaleKeys::new(&shop.store.prefix, sale_id);
    // The pool's wait timeout bounds how long a pass queues for a
    // connection; running out of connections is "busy", not an error.
    let mut conn = match shop.store.redis.get().await {
        Ok(conn) => conn,
        Err(deadpool_redis::PoolError::Timeout(_)) => return everyone(Outcome::Busy),
        Err(error) => return Err(error).context("getting a Redis connection"),
    };
    if shop.known_sold_out(&mut conn, &keys, sale_id).await? {
        return everyone(Outcome::SoldOut);
    }
    let lock =
        RedisLock::new(&keys.lock, &keys.fence, shop.settings.lock_ttl()).held_by(&*shop.instance);
    // If this instance learns meanwhile that the sale sold out (a pass
    // whose leader went away may still be running), there is no point in
    // waiting any longer.
    let refresh = shop.settings.sold_out_refresh();
    let wake = shop.released.of(sale_id);
    let waiting = std::time::Instant::now();
    // Steps 1 and 2 go with every attempt, so that the holder does not
    // spend a round trip reading inside the lock.
    let reads = sales::snapshot_reads(&keys, users);
    let give_up = || shop.sold_out.check(sale_id, refresh) == Flag::SoldOut;
    let (acquired, read) = lock
        .acquire_and_read(
            &mut conn,
            shop.settings.lock_wait(),
            wake.as_deref(),
            give_up,
            &reads,
        )
        .await
        .context("taking the sale lock")?;
    metrics()
        .lock_wait_seconds
        .observe(waiting.elapsed().as_secs_f64());
    let guard = match acquired {
        Acquire::Held(guard) => guard,
        Acquire::TimedOut => return everyone(Outcome::Busy),
        Acquire::GaveUp => return everyone(Outcome::SoldOut),
    };

    // Inside the lock. Whatever happens here, the lock is released: by the
    // commit, or below.
    let inside = locked_section(shop, &mut conn, &keys, sale_id, users, read, &guard).await;
    let Inside {
        outcomes,
        noted,
        released,
    } = match inside {
        Ok(inside) => inside,
        Err(error) => {
            release(&mut conn, guard).await;
            return Err(error);
        }
    };
    if !released {
        release(&mut conn, guard).await;
    }
    // Out of the lock: note the new orders' sale for lookups.
    if !noted.is_empty() {
        shop.note_pending(&mut conn, &noted).await;
    }
    Ok(outcomes)
}

/// What the locked section did.
struct Inside {
    /// One per buyer, in order.
    outcomes: Vec<Outcome>,
    /// Orders taken whose sale still has to be noted for lookups.
    noted: Vec<OrderJob>,
    /// Whether the lock is no longer ours to release (the commit released
    /// it, or it was lost).
    released: bool,
}

/// Steps 1 to 5 for a batch, run while holding the lock; `read` is what the
/// attempt that took it read (steps 1 and 2).
async fn locked_section<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    keys: &SaleKeys,
    sale_id: i64,
    users: &[&UserId],
    read: Option<SnapshotRead>,
    guard: &LockGuard,
) -> anyhow::Result<Inside> {
    // Steps 1 and 2: plain reads for the whole batch, which ran under the
    // lock in the round trip that took it. Nobody else writes this sale
    // while we hold the lock, so what they read stays true until we write.
    // When Redis did not hold the sale, it is loaded and read again.
    let snapshot = match read.and_then(Snapshot::from_read) {
        Some(snapshot) => snapshot,
        None => shop.read_sale(conn, sale_id, users).await?,
    };
    let (mut outcomes, jobs) = decide_batch(sale_id, users, &snapshot);
    if outcomes.contains(&Outcome::SoldOut) {
        shop.sold_out.set(sale_id);
    }
    if jobs.is_empty() {
        return Ok(Inside {
            outcomes,
            noted: Vec::new(),
            released: false,
        });
    }

    // The hold-pause knob: the GC pause of the fencing argument.
    shop.hold_pause().await;
    // Steps 3 to 5 in one fenced script, which releases the lock too:
    // written only if we still hold the lock.
    match commit(conn, keys, guard, &jobs).await {
        Ok(Some(left)) => {
            if left <= 0 {
                shop.sold_out.set(sale_id);
            }
            Ok(Inside {
                outcomes,
                noted: jobs,
                released: true,
            })
        }
        Ok(None) => {
            tracing::warn!(
                fence = guard.fence(),
                buyers = jobs.len(),
                "lock lost before commit; the fence refused the write"
            );
            metrics().lock_fenced.inc();
            for outcome in &mut outcomes {
                if matches!(outcome, Outcome::Accepted { .. }) {
                    *outcome = Outcome::LockLost;
                }
            }
            Ok(Inside {
                outcomes,
                noted: Vec::new(),
                released: true,
            })
        }
        // The connection broke before the answer came back: the script may
        // have run. Find out before answering, so that an order that was
        // taken is never answered with an error.
        Err(error) if probe::transient_redis(&error) => {
            shop.after_a_lost_answer(&jobs, error).await?;
            Ok(Inside {
                outcomes,
                noted: Vec::new(),
                released: true,
            })
        }
        Err(error) => Err(error).context("committing purchases"),
    }
}

/// Release the lock; a failure is logged, not fatal (the lock expires with
/// its TTL).
async fn release<C: ConnectionLike + Send>(conn: &mut C, guard: LockGuard) {
    match guard.release(conn).await {
        Ok(Release::Released) => {}
        Ok(lost) => tracing::warn!(
            ?lost,
            "the sale lock expired inside the critical section; raise SECKILL_LOCK_TTL_MS"
        ),
        Err(error) => tracing::warn!(%error, "could not release the sale lock"),
    }
}

/// Steps 1 and 2 for a batch, in arrival order: each buyer is decided
/// against the units the ones before left, and a buyer who appears twice
/// takes at most one unit. Returns one outcome per buyer and the orders to
/// write. Pure, so it is unit-tested.
fn decide_batch(
    sale_id: i64,
    users: &[&UserId],
    snapshot: &Snapshot,
) -> (Vec<Outcome>, Vec<OrderJob>) {
    let mut left = snapshot.stock_left;
    let mut taken_here: HashSet<&str> = HashSet::new();
    let mut jobs = Vec::new();
    let outcomes = users
        .iter()
        .zip(&snapshot.holding)
        .map(|(user, holds)| {
            let already = *holds || taken_here.contains(user.as_str());
            match decide(already, left) {
                Decision::Take => {
                    left -= 1;
                    taken_here.insert(user.as_str());
                    let job = OrderJob::new(sale_id, user);
                    let order_id = job.order_id;
                    jobs.push(job);
                    Outcome::Accepted { order_id }
                }
                Decision::AlreadyPurchased => Outcome::AlreadyPurchased,
                Decision::SoldOut => Outcome::SoldOut,
            }
        })
        .collect();
    (outcomes, jobs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(name: &str) -> Waiter {
        let user = UserId::parse(name).expect("a buyer");
        Waiter {
            user,
            answer: oneshot::channel().0,
        }
    }

    fn names(batch: &[Waiter]) -> Vec<&str> {
        batch.iter().map(|waiter| waiter.user.as_str()).collect()
    }

    /// The first buyer to find no task draining its lane starts one; the
    /// task takes the buyers oldest first, at most a pass's worth at a
    /// time, and once it finds the lane empty the next buyer starts one
    /// again.
    #[test]
    fn one_task_at_a_time_drains_a_lane_and_the_next_buyer_starts_another() {
        let lane = Lane::default();
        assert!(lane.join(waiter("ann")), "the first starts a task");
        assert!(!lane.join(waiter("bob")), "one is draining");
        assert_eq!(names(&lane.next_batch().expect("two wait")), ["ann", "bob"]);
        assert!(!lane.join(waiter("cy")), "the task is still draining");
        assert_eq!(names(&lane.next_batch().expect("cy waits")), ["cy"]);
        assert!(lane.next_batch().is_none(), "nobody waits: the task ends");
        assert!(lane.join(waiter("di")), "no task now: di starts one");
        for n in 0..MAX_BATCH {
            assert!(!lane.join(waiter(&format!("u{n}"))));
        }
        assert_eq!(lane.next_batch().expect("a full pass").len(), MAX_BATCH);
        let last = format!("u{}", MAX_BATCH - 1);
        assert_eq!(names(&lane.next_batch().expect("one left")), [last]);
        assert!(lane.next_batch().is_none());
    }

    fn users(names: &[&str]) -> Vec<UserId> {
        names
            .iter()
            .map(|name| UserId::parse(name).expect("a buyer"))
            .collect()
    }

    fn kinds(outcomes: &[Outcome]) -> Vec<&'static str> {
        outcomes
            .iter()
            .map(|outcome| match outcome {
                Outcome::Accepted { .. } => "won",
                Outcome::SoldOut => "sold out",
                Outcome::AlreadyPurchased => "already",
                _ => "other",
            })
            .collect()
    }

    #[test]
    fn a_batch_is_decided_in_arrival_order_against_the_units_left() {
        let buyers = users(&["ann", "bob", "cy", "dee"]);
        let refs: Vec<&UserId> = buyers.iter().collect();
        let snapshot = Snapshot {
            stock_left: 2,
            holding: vec![false, true, false, false],
        };
        let (outcomes, jobs) = decide_batch(7, &refs, &snapshot);
        assert_eq!(kinds(&outcomes), ["won", "already", "won", "sold out"]);
        let winners: Vec<&str> = jobs.iter().map(|job| job.user_id.as_str()).collect();
        assert_eq!(winners, ["ann", "cy"]);
        assert!(jobs.iter().all(|job| job.sale_id == 7));
    }

    #[test]
    fn a_buyer_twice_in_one_batch_takes_one_unit() {
        let buyers = users(&["ann", "ann", "bob"]);
        let refs: Vec<&UserId> = buyers.iter().collect();
        let snapshot = Snapshot {
            stock_left: 5,
            holding: vec![false, false, false],
        };
        let (outcomes, jobs) = decide_batch(1, &refs, &snapshot);
        assert_eq!(kinds(&outcomes), ["won", "already", "won"]);
        assert_eq!(jobs.len(), 2);
    }

    #[test]
    fn a_buyer_refused_for_want_of_stock_is_not_counted_as_holding() {
        let buyers = users(&["ann", "bob", "bob"]);
        let refs: Vec<&UserId> = buyers.iter().collect();
        let snapshot = Snapshot {
            stock_left: 1,
            holding: vec![false, false, false],
        };
        let (outcomes, _) = decide_batch(1, &refs, &snapshot);
        assert_eq!(kinds(&outcomes), ["won", "sold out", "sold out"]);
    }
}
