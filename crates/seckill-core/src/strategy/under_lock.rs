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
//! of a sale waiting on one instance queue in a **lane** (`lanes.rs`): one
//! task (started by the first of them, the leader) takes everyone queued
//! through the lock at once: one read for all (stock and every buyer's
//! hold), decisions in arrival order, one fenced write for all the
//! winners; then everyone who queued meanwhile, until the lane is empty.
//! The lock still decides
//! between instances; the lane only saves each instance from contending
//! with itself. (Databases call this group commit.)

use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use uuid::Uuid;

use super::{Flag, LateCommit, Looked, Outcome, Shop};
use crate::config::RedisDurability;
use crate::domain::{OrderJob, PassIds, UserId};
use crate::failure;
use crate::keys::SaleKeys;
use crate::lock::{Acquire, LockGuard, RedisLock, Release};
use crate::metrics::metrics;
use crate::payment;
use crate::queue::queue_script;
use crate::redis_pool::RedisConn;
use crate::replicas;
use crate::store::Snapshot;
use crate::store::sales::{self, SnapshotRead};

static COMMIT: LazyLock<Script> = queue_script!("lua/purchase_commit.lua");

/// Steps 3 to 5 for a batch of orders, fenced: take the units, record the
/// buyers and queue the orders (one job, `job_id`: the pass's,
/// `domain::PassIds`), only if `guard` still holds the lock; then
/// release it in the same step, announced to the waiters.
/// `Ok(Some(units left))` when it wrote, `Ok(None)` when the lock was lost
/// and nothing was written. For a sale without a waiting room; see
/// [`commit_spending`].
pub async fn commit<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    job_id: Uuid,
    jobs: &[OrderJob],
) -> redis::RedisResult<Option<i64>> {
    let pass = PassJob { job_id, jobs };
    let committed = commit_spending(conn, keys, guard, false, pass).await?;
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
    /// The orders it refused because the room does not hold their buyer
    /// as admitted, or their admission's end passed on Redis' clock
    /// (`Outcome::NotAdmitted`): nothing of them written.
    pub(crate) withdrawn: Vec<usize>,
}

/// [`commit`], and when `roomed` (the sale has a waiting room) each
/// buyer's admission checked and spent in the same step
/// (`lua/purchase_commit.lua`): an admission buys once, whatever dies when.
async fn commit_spending<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    guard: &LockGuard,
    roomed: bool,
    pass: PassJob<'_>,
) -> redis::RedisResult<Option<Committed>> {
    let (committed, _) =
        commit_and_confirm(conn, keys, guard, roomed, pass, RedisDurability::Local).await?;
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
    PassJob { job_id, jobs }: PassJob<'_>,
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
        .arg(job_id.to_string());
    for job in jobs {
        script
            .arg(job.user_id.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload());
    }
    type Answer = (String, i64, Vec<usize>, Vec<usize>);
    let ((status, left, spent, withdrawn), confirmed): (Answer, bool) =
        replicas::run_and_confirm(conn, &COMMIT, &script, durability, &keys.waited).await?;
    match status.as_str() {
        "committed" => Ok((
            Some(Committed {
                left,
                spent,
                withdrawn,
            }),
            confirmed,
        )),
        "lock_lost" => Ok((None, confirmed)),
        other => Err(payment::unexpected_answer("purchase_commit.lua", other)),
    }
}

/// A pass's orders, and the id of the one job that carries them
/// (`domain::PassIds`).
#[derive(Clone, Copy)]
struct PassJob<'a> {
    job_id: Uuid,
    jobs: &'a [OrderJob],
}

mod decide;
mod lost;

use decide::{SPENT, decide_batch, refuse};
use lost::{close_the_fence, refused_by_the_room};

/// Take the lock, run the five steps for `users`, release. One outcome per
/// user, in order. (A sale lane's pass, `lanes.rs`.)
pub(super) async fn pass(
    shop: &Shop,
    (keys, mut conn): (SaleKeys, RedisConn),
    sale_id: i64,
    roomed: bool,
    users: &[&UserId],
) -> anyhow::Result<Vec<Outcome>> {
    let everyone = |outcome| Ok(vec![outcome; users.len()]);
    // Read before the lock is taken: from PostgreSQL the first time only.
    let key = shop.store.pass_key().await?;
    let lock = RedisLock::new(&keys.lock, &keys.fence, shop.settings.lock_ttl())
        .held_by(&*shop.instance)
        .abandons_through(shop.store.redis_pool());
    // If this instance learns meanwhile that the sale sold out (a pass
    // whose leader went away may still be running), there is no point in
    // waiting any longer.
    let wake = shop.released.of(sale_id);
    let waiting = std::time::Instant::now();
    // Steps 1 and 2 go with every attempt, so that the holder does not
    // spend a round trip reading inside the lock.
    let reads = sales::snapshot_reads(&keys, users);
    let give_up = || shop.sold_out_for(sale_id, users) == Flag::SoldOut;
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
    let ids = PassIds::new(sale_id, key);
    let section = Section {
        sale_id,
        roomed,
        ids,
    };
    let inside = locked_section(shop, &mut conn, &keys, section, users, read, &guard).await;
    let Inside {
        mut outcomes,
        sold_out,
        confirmed,
    } = match inside {
        Ok(inside) => inside,
        Err(error) => {
            release_and_confirm(&mut conn, guard, RedisDurability::Local, &keys).await;
            return Err(error);
        }
    };
    // With `--redis-durability replica`, nobody is answered before a
    // replica holds what this pass read and wrote: one `WAIT` for the
    // whole pass, in the pipeline of the step that let the lock go (the
    // commit, or the release of a pass that wrote nothing), so that it
    // reaches the node that step reached. The race it closes: the primary
    // dies after the commit, before replicating it; the promoted replica
    // sells the same units again, and the buyers told `202` (or "sold
    // out") here are taken back.
    let durability = shop.store.durability();
    let confirmed = match confirmed {
        Some(said) => said,
        None => release_and_confirm(&mut conn, guard, durability, &keys).await,
    };
    if !super::replicated(confirmed) {
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

/// Which pass the locked section runs: its sale, whether the sale has a
/// waiting room, and the ids its orders will take.
struct Section<'k> {
    sale_id: i64,
    roomed: bool,
    ids: PassIds<'k>,
}

/// What the locked section did.
struct Inside {
    /// One per buyer, in order.
    outcomes: Vec<Outcome>,
    /// Whether the sale is sold out once what this pass read and wrote
    /// holds: the instance's flag is set only then (in `pass`).
    sold_out: bool,
    /// Whether a replica holds what the pass read and wrote, when the
    /// commit's own `WAIT` (or a lost answer) said; the commit released
    /// the lock, or it was lost. `None`: the pass wrote nothing, and
    /// `pass` releases the lock and asks in one pipeline.
    confirmed: Option<bool>,
}

/// Steps 1 to 5 for a batch, run while holding the lock; `read` is what the
/// attempt that took it read (steps 1 and 2).
#[allow(clippy::too_many_arguments)]
async fn locked_section<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    keys: &SaleKeys,
    Section {
        sale_id,
        roomed,
        ids,
    }: Section<'_>,
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
    let job_id = ids.job_id();
    let (mut outcomes, jobs, on_commit) = decide_batch(ids, users, &snapshot);
    // Sold out before this pass: say so to everyone at once. Sold out only
    // because this pass's winners take the last units: not before their
    // commit has landed (below). The race this prevents: a commit refused
    // by the fence (or lost) takes nothing, yet the flag made this
    // instance answer "sold out" to every buyer while the units were left.
    let sold_out_before = snapshot.stock_left <= 0;
    if jobs.is_empty() {
        return Ok(Inside {
            outcomes,
            sold_out: sold_out_before,
            confirmed: None,
        });
    }

    // The hold-pause knob: the GC pause of the fencing argument.
    shop.hold_pause().await;
    // Steps 3 to 5 in one fenced script, which releases the lock too:
    // written only if we still hold the lock.
    let durability = shop.store.durability();
    let pass = PassJob {
        job_id,
        jobs: &jobs,
    };
    match commit_and_confirm(conn, keys, guard, roomed, pass, durability).await {
        Ok((
            Some(Committed {
                left,
                spent,
                withdrawn,
            }),
            confirmed,
        )) => {
            refuse(&mut outcomes, &on_commit, &jobs, &spent, SPENT);
            refuse(
                &mut outcomes,
                &on_commit,
                &jobs,
                &withdrawn,
                Outcome::NotAdmitted,
            );
            Ok(Inside {
                outcomes,
                sold_out: left <= 0,
                confirmed: Some(confirmed),
            })
        }
        Ok((None, _)) => {
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
            // Under `replica`, the refusals this pass read are not
            // confirmed either: the fence's answer, and the `WAIT` behind
            // it, may come from a node the pass did not read (the slot
            // moved to a promoted replica after the reads, and the commit
            // answered `MOVED` was sent there whole), whose replicas
            // confirm nothing the pass read.
            Ok(Inside {
                outcomes,
                sold_out: sold_out_before,
                confirmed: Some(durability == RedisDurability::Local),
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
            let looked = shop
                .after_a_lost_answer(job_id, &jobs, LateCommit::Fenced)
                .await;
            // Every order the commit did not take lost its turn, and so did
            // the buyers refused only because one of them took the unit:
            // told `busy` (`503`, ask again), as `lua` tells them, since
            // nothing was taken and a retry is told what is true. In a
            // room, the orders it did not take may have been refused by
            // the room (a roomed pass): which way, the room says, and a
            // buyer it refused is told that refusal, which a retry would
            // be told too. (Whether the commit ran or not, the fence is
            // closed: it cannot take anything now.)
            let not_taken: Vec<usize> = match &looked {
                Looked::Taken(taken) => (0..jobs.len())
                    .filter(|i| !taken.contains(&jobs[*i].order_id))
                    .collect(),
                Looked::NotTaken => (0..jobs.len()).collect(),
                Looked::Unknown => Vec::new(),
            };
            if roomed {
                let told = (&mut outcomes[..], &on_commit[..]);
                refused_by_the_room(shop, sale_id, told, &jobs, &not_taken).await;
            } else {
                refuse(&mut outcomes, &on_commit, &jobs, &not_taken, Outcome::Busy);
            }
            if looked == Looked::NotTaken {
                tracing::warn!(
                    %error,
                    buyers = jobs.len(),
                    "a commit's answer was lost and it took nobody; its buyers are told busy"
                );
            }
            let confirmed = looked != Looked::Unknown && durability == RedisDurability::Local;
            Ok(Inside {
                outcomes,
                sold_out: false,
                confirmed: Some(confirmed),
            })
        }
        Err(error) => Err(error).context("committing purchases"),
    }
}

/// Release the lock and, under `replica`, confirm in the same pipeline
/// (`replicas::run_and_confirm`) what the pass read under it: confirmed
/// only if the lock was still ours on the node the `WAIT` went to, and a
/// replica of that node holds everything up to the release. The race it
/// closes: a `WAIT` sent on its own after the release goes where the
/// connection's slot map says then; a primary that answered the pass's
/// reads (stalled past a failover, resumed, demoted) answers the release
/// `MOVED`, the map moves to the promoted replica, and its replicas would
/// confirm reads they never held. Under `local`, always confirmed; a
/// failure is logged, not fatal (the lock expires with its TTL).
async fn release_and_confirm<C: ConnectionLike + Send>(
    conn: &mut C,
    guard: LockGuard,
    durability: RedisDurability,
    keys: &SaleKeys,
) -> bool {
    let (script, call) = guard.release_call();
    let answer = replicas::run_and_confirm(conn, script, &call, durability, &keys.waited).await;
    match answer.map(|(found, confirmed): (i64, bool)| (Release::from_script(found), confirmed)) {
        Ok((Release::Released, confirmed)) => confirmed,
        Ok((lost, _)) => {
            tracing::warn!(
                ?lost,
                "the sale lock expired inside the critical section; raise SECKILL_LOCK_TTL_MS"
            );
            durability == RedisDurability::Local
        }
        Err(error) => {
            tracing::warn!(%error, "could not release the sale lock");
            durability == RedisDurability::Local
        }
    }
}

#[cfg(test)]
mod tests;
