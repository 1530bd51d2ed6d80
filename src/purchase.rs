//! The purchase path: who gets a unit. This is the lesson; read it top to bottom.
//!
//! A purchase must (1) check that the buyer has not bought yet, (2) check
//! that a unit is left, (3) take the unit, (4) remember the buyer and (5)
//! queue the order for PostgreSQL. Steps 1-2 read and steps 3-5 write; if two
//! purchases interleave between the read and the write, both see "1 left" and
//! both take it. That is the oversell.
//!
//! Two strategies sit behind [`Strategy`]:
//! - [`Strategy::Lock`] (the default) takes the sale's Redis lock around the
//!   five steps, so purchases of one sale run one at a time across every app
//!   instance, and fences the writes so that a holder whose lock expired
//!   cannot write (see `lua/purchase_commit.lua`).
//! - [`Strategy::Naive`] is DELIBERATELY BROKEN: it reads, pauses, and writes
//!   "stock minus one" with no lock. It oversells, and exists so the demo and
//!   the tests can show that it does.
//!
//! Requests for a sale that is sold out do not take the lock at all: each
//! instance keeps a "sold out" flag per sale ([`SoldOutFlags`]), set whenever
//! a purchase sees no units left and trusted for a short while before it is
//! checked against Redis again.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use redis::Script;
use redis::aio::ConnectionLike;
use uuid::Uuid;

use crate::config::{PurchaseSettings, Strategy};
use crate::domain::{OrderJob, Sale, UserId, Window};
use crate::keys::SaleKeys;
use crate::lock::{Acquire, LockGuard, RedisLock, Release};
use crate::payment;
use crate::probe;
use crate::queue::{Queue, queue_script};
use crate::store::{self, Snapshot, Store};

static COMMIT: LazyLock<Script> = queue_script!("lua/purchase_commit.lua");

/// How long a purchase whose commit answer was lost spends finding out
/// whether its order was taken (a Redis restart takes a moment), and the
/// pause between two tries.
const LOOKUP_LIMIT: Duration = Duration::from_secs(3);
const LOOKUP_RETRY: Duration = Duration::from_millis(100);

/// How a purchase ended. Business outcomes, not errors: each maps to one
/// HTTP status in `web::api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The buyer got a unit; the order is on the queue.
    Accepted {
        order_id: Uuid,
    },
    SoldOut,
    AlreadyPurchased,
    NotStarted,
    Ended,
    /// The lock could not be had in time; the client may retry.
    Busy,
    /// This purchase held the lock, but it ran out before the commit (a
    /// pause longer than its TTL): the fence refused the write, nothing was
    /// taken, and the client may retry.
    LockLost,
}

/// What the checks decide, given what was read. Pure, so it is unit-tested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Take,
    SoldOut,
    AlreadyPurchased,
}

/// Steps 1 and 2. A buyer who already has a unit is told so even when the
/// sale has since sold out: it is the more useful answer.
fn decide(already_bought: bool, stock_left: i64) -> Decision {
    if already_bought {
        Decision::AlreadyPurchased
    } else if stock_left <= 0 {
        Decision::SoldOut
    } else {
        Decision::Take
    }
}

/// Per-instance memory of which sales were seen sold out, and when.
#[derive(Debug, Default)]
pub struct SoldOutFlags {
    /// A std Mutex, not a tokio one: it is held for a map lookup and never
    /// across an await.
    seen: Mutex<HashMap<i64, Instant>>,
}

/// What an instance knows about a sale's stock without asking Redis.
#[derive(Debug, PartialEq, Eq)]
enum Flag {
    /// No purchase here has seen it sold out.
    Unknown,
    /// Seen sold out within the refresh period: answer without Redis.
    SoldOut,
    /// Seen sold out, but long enough ago that a unit may have come back.
    Stale,
}

impl SoldOutFlags {
    fn check(&self, sale_id: i64, refresh: Duration) -> Flag {
        match self
            .seen
            .lock()
            .expect("sold-out flags poisoned")
            .get(&sale_id)
        {
            None => Flag::Unknown,
            Some(at) if at.elapsed() < refresh => Flag::SoldOut,
            Some(_) => Flag::Stale,
        }
    }

    fn set(&self, sale_id: i64) {
        self.seen
            .lock()
            .expect("sold-out flags poisoned")
            .insert(sale_id, Instant::now());
    }

    fn clear(&self, sale_id: i64) {
        self.seen
            .lock()
            .expect("sold-out flags poisoned")
            .remove(&sale_id);
    }
}

/// Steps 3 to 5 of a purchase, fenced: take the unit, record the buyer and
/// queue the order, all in one script that first checks that `guard` still
/// owns the sale's lock (see `lua/purchase_commit.lua`). Returns the units
/// left (below zero if Redis was already oversold), or `None` when the lock
/// had expired: then nothing was written.
pub async fn commit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    job: &OrderJob,
) -> redis::RedisResult<Option<i64>> {
    let (status, left): (String, i64) = COMMIT
        .key(&keys.stock)
        .key(&keys.buyers)
        .key(&keys.lock)
        .key(&keys.queue.due)
        .key(&keys.queue.jobs)
        .key(&keys.fenced)
        .arg(guard.value())
        .arg(&job.user_id)
        .arg(job.order_id.to_string())
        .arg(job.to_payload())
        .arg(&keys.events)
        .invoke_async(conn)
        .await?;
    match status.as_str() {
        "committed" => Ok(Some(left)),
        "lock_lost" => Ok(None),
        other => Err(payment::unexpected_answer("purchase_commit.lua", other)),
    }
}

/// Runs purchases. One per app instance, shared by all requests.
pub struct Purchaser {
    /// Redis for the lock and the commit; PostgreSQL only to load a sale
    /// Redis lost. Shared with the rest of the instance; never replaced.
    store: Store,
    /// The strategy and its timings; fixed at start.
    settings: PurchaseSettings,
    /// This instance's memory of sold-out sales. Set by any purchase that
    /// sees no unit left, cleared when a stale flag finds units again.
    sold_out: SoldOutFlags,
    /// This instance's name, written into the sale locks it takes.
    instance: String,
}

impl Purchaser {
    pub fn new(store: Store, settings: PurchaseSettings, instance: String) -> Self {
        Self {
            store,
            settings,
            sold_out: SoldOutFlags::default(),
            instance,
        }
    }

    pub fn strategy(&self) -> Strategy {
        self.settings.strategy
    }

    /// Try to buy one unit of `sale` for `user`.
    #[tracing::instrument(skip_all, fields(sale_id = sale.id, user_id = %user, strategy = ?self.settings.strategy))]
    pub async fn purchase(&self, sale: &Sale, user: &UserId) -> anyhow::Result<Outcome> {
        // The sale's window is checked on this instance's clock: sale times
        // are wall-clock promises to people, and instances are expected to
        // run NTP. (Queue timing, which decides redelivery, uses Redis' clock.)
        match sale.window(Utc::now()) {
            Window::NotStarted => return Ok(Outcome::NotStarted),
            Window::Ended => return Ok(Outcome::Ended),
            Window::Open => {}
        }
        // Sold out, as far as this instance knows: answer without touching Redis.
        let refresh = self.settings.sold_out_refresh();
        if self.sold_out.check(sale.id, refresh) == Flag::SoldOut {
            return Ok(Outcome::SoldOut);
        }
        let keys = SaleKeys::new(&self.store.prefix, sale.id);
        // The pool's wait timeout bounds how long a request queues for a
        // connection; running out of connections is "busy", not an error.
        let mut conn = match self.store.redis.get().await {
            Ok(conn) => conn,
            Err(deadpool_redis::PoolError::Timeout(_)) => return Ok(Outcome::Busy),
            Err(error) => return Err(error).context("getting a Redis connection"),
        };
        if self.known_sold_out(&mut conn, &keys, sale.id).await? {
            return Ok(Outcome::SoldOut);
        }
        match self.settings.strategy {
            Strategy::Lock => self.purchase_with_lock(&mut conn, &keys, sale, user).await,
            Strategy::Naive => self.purchase_naive(&mut conn, &keys, sale, user).await,
        }
    }

    /// Whether the sale is sold out as far as we can tell without the lock:
    /// a stale flag costs one GET.
    async fn known_sold_out<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &SaleKeys,
        sale_id: i64,
    ) -> anyhow::Result<bool> {
        match self
            .sold_out
            .check(sale_id, self.settings.sold_out_refresh())
        {
            Flag::Unknown => Ok(false),
            Flag::SoldOut => Ok(true),
            Flag::Stale => {
                // Reading "0 left" without the lock is a true answer: at the
                // moment of the read there was nothing to sell.
                let left: Option<i64> = redis::cmd("GET")
                    .arg(&keys.stock)
                    .query_async(conn)
                    .await
                    .context("reading the stock")?;
                if left.is_some_and(|left| left <= 0) {
                    self.sold_out.set(sale_id);
                    Ok(true)
                } else {
                    self.sold_out.clear(sale_id);
                    Ok(false)
                }
            }
        }
    }

    /// The safe strategy.
    async fn purchase_with_lock<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &SaleKeys,
        sale: &Sale,
        user: &UserId,
    ) -> anyhow::Result<Outcome> {
        let lock = RedisLock::new(&keys.lock, &keys.fence, self.settings.lock_ttl())
            .held_by(&self.instance);
        // While we wait, another request on this instance may find the sale
        // sold out; then there is no point in waiting any longer.
        let refresh = self.settings.sold_out_refresh();
        let acquired = lock
            .acquire(conn, self.settings.lock_wait(), || {
                self.sold_out.check(sale.id, refresh) == Flag::SoldOut
            })
            .await
            .context("taking the sale lock")?;
        let guard = match acquired {
            Acquire::Held(guard) => guard,
            Acquire::TimedOut => return Ok(Outcome::Busy),
            Acquire::GaveUp => return Ok(Outcome::SoldOut),
        };

        // Inside the lock. Whatever happens here, the lock is released below.
        let result = self.locked_section(conn, keys, sale, user, &guard).await;

        match guard.release(conn).await {
            Ok(Release::Released) => {}
            Ok(lost) => tracing::warn!(
                ?lost,
                "the sale lock expired inside the critical section; raise SECKILL_LOCK_TTL_MS"
            ),
            // Not fatal: the lock expires with its TTL.
            Err(error) => tracing::warn!(%error, "could not release the sale lock"),
        }
        result
    }

    /// Steps 1 to 5, run while holding the lock.
    async fn locked_section<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &SaleKeys,
        sale: &Sale,
        user: &UserId,
        guard: &LockGuard,
    ) -> anyhow::Result<Outcome> {
        // Steps 1 and 2: plain reads. Nobody else writes this sale while we
        // hold the lock, so what we read stays true until we write.
        if let Err(outcome) = self.check(conn, sale.id, user).await? {
            return Ok(outcome);
        }

        // Steps 3 to 5 in one fenced script: written only if we still hold the lock.
        let job = OrderJob::new(sale.id, user);
        let committed = match commit(conn, keys, guard, &job).await {
            Ok(committed) => committed,
            // The connection broke before the answer came back: the script
            // may have run. Find out before answering, so that an order that
            // was taken is never answered with an error.
            Err(error) if probe::transient_redis(&error) => {
                return self.after_a_lost_answer(&job, error).await;
            }
            Err(error) => return Err(error).context("committing a purchase"),
        };
        let Some(left) = committed else {
            tracing::warn!(
                fence = guard.fence(),
                "lock lost before commit; the fence refused the write"
            );
            return Ok(Outcome::LockLost);
        };
        if left <= 0 {
            self.sold_out.set(sale.id);
        }
        self.note_pending(conn, &job).await;
        Ok(Outcome::Accepted {
            order_id: job.order_id,
        })
    }

    /// Note the order's sale for lookups. The order is taken whatever this
    /// does: a failure is logged, and the order is found once the worker
    /// has written it (a few milliseconds).
    async fn note_pending<C: ConnectionLike + Send>(&self, conn: &mut C, job: &OrderJob) {
        if let Err(error) = self.store.note_pending(conn, job).await {
            tracing::warn!(order_id = %job.order_id, error = format!("{error:#}"), "could not note a pending order's sale");
        }
    }

    /// The commit's answer was lost with its connection. Look the order up
    /// (PostgreSQL, then the sale's queue) on a fresh connection: found, it
    /// was taken, and the buyer is told so; not found, or Redis still cannot
    /// be asked, the error stands (the API answers `503`, and the buyer may
    /// look the order id up later).
    async fn after_a_lost_answer(
        &self,
        job: &OrderJob,
        error: redis::RedisError,
    ) -> anyhow::Result<Outcome> {
        // Redis may be on its way back (the connection broke because it was
        // restarting): ask again until it answers or the limit passes.
        let deadline = tokio::time::Instant::now() + LOOKUP_LIMIT;
        loop {
            match tokio::time::timeout_at(deadline, self.was_taken(job)).await {
                Ok(Ok(true)) => {
                    if let Ok(mut conn) = self.store.redis().await {
                        self.note_pending(&mut conn, job).await;
                    }
                    tracing::warn!(order_id = %job.order_id, "commit answer lost, but the order was taken");
                    return Ok(Outcome::Accepted {
                        order_id: job.order_id,
                    });
                }
                // Redis and PostgreSQL answered, and neither has it.
                Ok(Ok(false)) => break,
                Ok(Err(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(LOOKUP_RETRY).await;
                }
                Ok(Err(_)) | Err(_) => break,
            }
        }
        Err(error).with_context(|| {
            format!(
                "committing a purchase: the answer was lost; order {} was not found",
                job.order_id
            )
        })
    }

    /// Whether the order of `job` is on its sale's queue or in PostgreSQL.
    async fn was_taken(&self, job: &OrderJob) -> anyhow::Result<bool> {
        let mut conn = self.store.redis().await?;
        let queued = self
            .store
            .queued_on(&mut conn, job.sale_id, job.order_id)
            .await?;
        Ok(queued.is_some() || self.store.stored_order(job.order_id).await?.is_some())
    }

    /// Steps 1 and 2: `Ok(units left)` when `user` may take a unit, or
    /// `Err(outcome)` with the answer that ends the purchase.
    async fn check<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        sale_id: i64,
        user: &UserId,
    ) -> anyhow::Result<Result<i64, Outcome>> {
        // Loads the sale into Redis first if Redis lost it (a restart).
        let Snapshot {
            stock_left,
            holds_unit,
        } = store::sales::snapshot(
            &self.store.pg,
            conn,
            &self.store.prefix,
            sale_id,
            Some(user),
        )
        .await?;
        Ok(match decide(holds_unit, stock_left) {
            Decision::Take => Ok(stock_left),
            Decision::AlreadyPurchased => Err(Outcome::AlreadyPurchased),
            Decision::SoldOut => {
                self.sold_out.set(sale_id);
                Err(Outcome::SoldOut)
            }
        })
    }

    /// DELIBERATELY BROKEN. The same five steps with no lock and a pause
    /// between reading and writing, as a first draft without the article's
    /// lock would do them. Every purchase that reads during another's pause sees the same stock
    /// and writes the same "stock minus one": units are sold more than once.
    /// PostgreSQL's constraints then refuse the excess orders (see store/orders.rs).
    async fn purchase_naive<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        keys: &SaleKeys,
        sale: &Sale,
        user: &UserId,
    ) -> anyhow::Result<Outcome> {
        let stock_left = match self.check(conn, sale.id, user).await? {
            Ok(stock_left) => stock_left,
            Err(outcome) => return Ok(outcome),
        };
        // The race window: other purchases read the same stock meanwhile.
        tokio::time::sleep(self.settings.naive_delay()).await;
        let job = OrderJob::new(sale.id, user);
        let () = redis::pipe()
            .set(&keys.stock, stock_left - 1)
            .ignore()
            .sadd(&keys.buyers, user.as_str())
            .ignore()
            .publish(&keys.events, stock_left - 1)
            .ignore()
            .query_async(conn)
            .await
            .context("writing the naive purchase")?;
        let (id, payload) = (job.order_id.to_string(), job.to_payload());
        Queue::new(keys.queue.clone())
            .enqueue(conn, &[(id.as_str(), payload.as_str())], Duration::ZERO)
            .await
            .context("queueing the naive purchase")?;
        self.note_pending(conn, &job).await;
        Ok(Outcome::Accepted {
            order_id: job.order_id,
        })
    }
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

    #[test]
    fn sold_out_flag_is_trusted_only_within_the_refresh_period() {
        let flags = SoldOutFlags::default();
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::Unknown);
        flags.set(1);
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::SoldOut);
        assert_eq!(flags.check(1, Duration::ZERO), Flag::Stale);
        assert_eq!(flags.check(2, Duration::from_secs(60)), Flag::Unknown);
        flags.clear(1);
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::Unknown);
    }
}
