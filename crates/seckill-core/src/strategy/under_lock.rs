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

use std::collections::HashMap;
use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use uuid::Uuid;

use super::{Decision, Flag, Looked, Outcome, Shop, decide};
use crate::config::RedisDurability;
use crate::domain::{OrderJob, PassIds, UserId, carriers};
use crate::failure;
use crate::keys::SaleKeys;
use crate::lock::{Acquire, LockGuard, RedisLock, Release};
use crate::metrics::metrics;
use crate::payment;
use crate::queue::queue_script;
use crate::replicas;
use crate::store::Snapshot;
use crate::store::sales::{self, SnapshotRead};

static COMMIT: LazyLock<Script> = queue_script!("lua/purchase_commit.lua");

/// Steps 3 to 5 for a batch of orders, fenced: take the units, record the
/// buyers and queue the orders, only if `guard` still holds the lock; then
/// release it in the same step, announced to the waiters.
/// `Ok(Some(units left))` when it wrote, `Ok(None)` when the lock was lost
/// and nothing was written. For a sale without a waiting room; see
/// [`commit_spending`].
pub async fn commit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    jobs: &[OrderJob],
) -> redis::RedisResult<Option<i64>> {
    let committed = commit_spending(conn, keys, guard, false, jobs).await?;
    Ok(committed.map(|committed| committed.left))
}

/// What a commit that wrote did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Committed {
    /// Units left after it.
    pub(crate) left: i64,
    /// The orders (indexes into `jobs`) it refused because their buyer's
    /// waiting-room admission had bought already: nothing of them written.
    pub(crate) spent: Vec<usize>,
}

/// [`commit`], and when `roomed` (the sale has a waiting room) each
/// buyer's admission checked and spent in the same step
/// (`lua/purchase_commit.lua`): an admission buys once, whatever dies when.
async fn commit_spending<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    roomed: bool,
    jobs: &[OrderJob],
) -> redis::RedisResult<Option<Committed>> {
    let (committed, _) =
        commit_and_confirm(conn, keys, guard, roomed, jobs, RedisDurability::Local).await?;
    Ok(committed)
}

/// [`commit_spending`], and under `replica` a `WAIT` on the same
/// connection in the same round trip (`replicas::run_and_confirm`): also
/// whether a replica holds what this pass read and wrote.
async fn commit_and_confirm<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    roomed: bool,
    jobs: &[OrderJob],
    durability: RedisDurability,
) -> redis::RedisResult<(Option<Committed>, bool)> {
    let mut script = COMMIT.prepare_invoke();
    script
        .key(&keys.stock)
        .key(&keys.holds)
        .key(&keys.lock)
        .key(&keys.queue.due)
        .key(&keys.queue.jobs)
        .key(&keys.fenced)
        .key(&keys.room.admitted)
        .key(&keys.room.bought)
        .arg(guard.value())
        .arg(&keys.events)
        .arg(guard.released_channel())
        .arg(u8::from(roomed))
        .arg(pass_of(jobs));
    for job in jobs {
        script
            .arg(job.user_id.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload());
    }
    let ((status, left, spent), confirmed): ((String, i64, Vec<usize>), bool) =
        replicas::run_and_confirm(conn, &COMMIT, &script, durability).await?;
    match status.as_str() {
        "committed" => Ok((Some(Committed { left, spent }), confirmed)),
        "lock_lost" => Ok((None, confirmed)),
        other => Err(payment::unexpected_answer("purchase_commit.lua", other)),
    }
}

/// The id of the job that carries `jobs`, one pass's orders
/// (`domain::PassIds`): their pass's id ("" for none, when the commit
/// queues nothing).
fn pass_of(jobs: &[OrderJob]) -> String {
    let Some(first) = jobs.first() else {
        return String::new();
    };
    let [_, pass] = carriers(&first.order_id);
    debug_assert!(
        jobs.iter().all(|job| carriers(&job.order_id)[1] == pass),
        "a commit's orders are one pass's"
    );
    pass.to_string()
}

mod lanes;

pub(crate) use lanes::Lanes;

/// Take the lock, run the five steps for `users`, release. One outcome per
/// user, in order.
async fn pass(
    shop: &Shop,
    sale_id: i64,
    roomed: bool,
    users: &[&UserId],
) -> anyhow::Result<Vec<Outcome>> {
    let everyone = |outcome| Ok(vec![outcome; users.len()]);
    let keys = SaleKeys::new(shop.store.prefix(), sale_id);
    // The pool's wait timeout bounds how long a pass queues for a
    // connection; running out of connections is "busy", not an error.
    let mut conn = match shop.store.redis_pool().get().await {
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
    let inside = locked_section(shop, &mut conn, &keys, sale_id, roomed, users, read, &guard).await;
    let Inside {
        mut outcomes,
        released,
        sold_out,
        confirmed,
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
    // With `--redis-durability replica`, nobody is answered before a
    // replica holds what this pass read and wrote (one `WAIT` for the
    // whole pass, sent with the commit when there was one, on the
    // connection that took the lock). The race it closes: the primary
    // dies after the commit, before replicating it; the promoted replica
    // sells the same units again, and the buyers told `202` (or "sold
    // out") here are taken back.
    if !super::replicated(&mut conn, shop.store.durability(), &keys, confirmed).await {
        for outcome in &mut outcomes {
            *outcome = outcome.unconfirmed();
        }
        return Ok(outcomes);
    }
    if sold_out {
        shop.sold_out.set(sale_id);
    }
    Ok(outcomes)
}

/// What the locked section did.
struct Inside {
    /// One per buyer, in order.
    outcomes: Vec<Outcome>,
    /// Whether the lock is no longer ours to release (the commit released
    /// it, or it was lost).
    released: bool,
    /// Whether the sale is sold out once what this pass read and wrote
    /// holds: the instance's flag is set only then (in `pass`).
    sold_out: bool,
    /// Whether a replica holds what the pass wrote, when the commit's own
    /// `WAIT` (or a lost answer) said; `None`: the pass wrote nothing, and
    /// `pass` asks.
    confirmed: Option<bool>,
}

/// Steps 1 to 5 for a batch, run while holding the lock; `read` is what the
/// attempt that took it read (steps 1 and 2).
#[allow(clippy::too_many_arguments)]
async fn locked_section<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    keys: &SaleKeys,
    sale_id: i64,
    roomed: bool,
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
    let (mut outcomes, jobs, on_commit) = decide_batch(sale_id, users, &snapshot);
    // Sold out before this pass: say so to everyone at once. Sold out only
    // because this pass's winners take the last units: not before their
    // commit has landed (below). The race this prevents: a commit refused
    // by the fence (or lost) takes nothing, yet the flag made this
    // instance answer "sold out" to every buyer while the units were left.
    let sold_out_before = snapshot.stock_left <= 0;
    if jobs.is_empty() {
        return Ok(Inside {
            outcomes,
            released: false,
            sold_out: sold_out_before,
            confirmed: None,
        });
    }

    // The hold-pause knob: the GC pause of the fencing argument.
    shop.hold_pause().await;
    // Steps 3 to 5 in one fenced script, which releases the lock too:
    // written only if we still hold the lock.
    let durability = shop.store.durability();
    match commit_and_confirm(conn, keys, guard, roomed, &jobs, durability).await {
        Ok((Some(Committed { left, spent }), confirmed)) => {
            refuse_spent(&mut outcomes, &on_commit, &jobs, &spent);
            Ok(Inside {
                outcomes,
                released: true,
                sold_out: left <= 0,
                confirmed: Some(confirmed),
            })
        }
        Ok((None, confirmed)) => {
            tracing::warn!(
                fence = guard.fence(),
                buyers = jobs.len(),
                "lock lost before commit; the fence refused the write"
            );
            metrics().lock_fenced.inc();
            // Nothing was taken: the winners lost their turn, and so did
            // the buyers refused only because a winner took the unit
            // (sold out, or the same buyer twice).
            for (outcome, on_commit) in outcomes.iter_mut().zip(&on_commit) {
                if *on_commit {
                    *outcome = Outcome::LockLost;
                }
            }
            Ok(Inside {
                outcomes,
                released: true,
                sold_out: sold_out_before,
                confirmed: Some(confirmed),
            })
        }
        // The connection broke before the answer came back: the script may
        // have run. Find out before answering, so that an order that was
        // taken is never answered with an error.
        Err(error) if failure::transient_redis(&error) => {
            // The race this closes: the commit may still be on its way
            // (the connection broke, or the reply timed out, before Redis
            // ran it). Looked for now, it is not found, and the buyer is
            // told 503; then it lands, while the lock is still ours, and
            // takes the unit. Once the lock is not ours, it can only be
            // refused by the fence; so make sure of that first.
            close_the_fence(shop, guard).await;
            // The commit's `WAIT`, if any, was lost with it: a taken
            // order is final only under `local`, and one that could not be
            // looked up is in doubt. Both are told `503` with their order
            // ids (`confirmed: Some(false)`), never an error without them.
            let confirmed = match shop.after_a_lost_answer(&jobs).await {
                Looked::Taken => durability == RedisDurability::Local,
                Looked::Unknown => false,
                Looked::NotTaken => {
                    return Err(error).with_context(|| {
                        format!(
                            "committing purchases: the answer was lost, and none of the {} orders was taken",
                            jobs.len()
                        )
                    });
                }
            };
            Ok(Inside {
                outcomes,
                released: true,
                sold_out: false,
                confirmed: Some(confirmed),
            })
        }
        Err(error) => Err(error).context("committing purchases"),
    }
}

/// Make sure `guard` no longer holds the lock: release it if it still
/// does, on a connection of its own, trying again while Redis does not
/// answer. A lock taken before this call has run out one TTL after it
/// anyway, so that is as long as it tries.
async fn close_the_fence(shop: &Shop, guard: &LockGuard) {
    let deadline = tokio::time::Instant::now() + shop.settings.lock_ttl();
    loop {
        let released = match shop.store.redis().await {
            Ok(mut conn) => guard
                .compare_and_delete(&mut conn)
                .await
                .map_err(anyhow::Error::from),
            Err(error) => Err(error),
        };
        match released {
            Ok(_) => return,
            Err(_) if tokio::time::Instant::now() >= deadline => return,
            Err(_) => tokio::time::sleep(super::LOOKUP_RETRY).await,
        }
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
/// takes at most one unit. Returns one outcome per buyer, whether each
/// outcome holds only once this pass's commit lands (a winner; a buyer
/// refused because a winner of this pass took the unit or was the same
/// buyer), and the orders to
/// write. Pure, so it is unit-tested.
fn decide_batch(
    sale_id: i64,
    users: &[&UserId],
    snapshot: &Snapshot,
) -> (Vec<Outcome>, Vec<OrderJob>, Vec<bool>) {
    let mut left = snapshot.stock_left;
    // The buyers this pass takes a unit for, and the order of each: a
    // buyer's second request in the pass is told that order.
    let mut taken_here: HashMap<&str, Uuid> = HashMap::new();
    let mut jobs = Vec::new();
    let mut pass = PassIds::new(sale_id);
    let (outcomes, on_commit) = users
        .iter()
        .zip(snapshot.holding.iter().zip(&snapshot.orders))
        .map(|(user, (holds, held_order))| {
            let taken_by_this_pass = !*holds && taken_here.contains_key(user.as_str());
            match decide(*holds || taken_by_this_pass, left) {
                Decision::Take => {
                    left -= 1;
                    let job = pass.order(user);
                    let order_id = job.order_id;
                    taken_here.insert(user.as_str(), order_id);
                    jobs.push(job);
                    (Outcome::Accepted { order_id }, true)
                }
                Decision::AlreadyPurchased => {
                    let order_id = if taken_by_this_pass {
                        taken_here.get(user.as_str()).copied()
                    } else {
                        *held_order
                    };
                    (Outcome::AlreadyPurchased { order_id }, taken_by_this_pass)
                }
                Decision::SoldOut => (Outcome::SoldOut, snapshot.stock_left > 0),
            }
        })
        .unzip();
    (outcomes, jobs, on_commit)
}

/// The commit refused the orders `spent` (their buyers' admissions had
/// bought already): each such buyer is told so (already purchased: in a
/// room, a buyer buys once), and the buyers refused as sold out only
/// because a refused order was counted before them are told to retry
/// (busy), since its unit is still there.
fn refuse_spent(outcomes: &mut [Outcome], on_commit: &[bool], jobs: &[OrderJob], spent: &[usize]) {
    if spent.is_empty() {
        return;
    }
    for (index, job) in jobs.iter().enumerate() {
        if !spent.contains(&index) {
            continue;
        }
        // The refused order was never taken: neither its buyer's winning
        // request nor a second request of theirs in this pass may name it.
        for outcome in outcomes.iter_mut() {
            let names_it = match outcome {
                Outcome::Accepted { order_id } => *order_id == job.order_id,
                Outcome::AlreadyPurchased { order_id } => *order_id == Some(job.order_id),
                _ => false,
            };
            if names_it {
                *outcome = Outcome::AlreadyPurchased { order_id: None };
            }
        }
    }
    for (outcome, on_commit) in outcomes.iter_mut().zip(on_commit) {
        if *on_commit && *outcome == Outcome::SoldOut {
            *outcome = Outcome::Busy;
        }
    }
}

#[cfg(test)]
mod tests;
