//! After a run: did the system keep its promise? Each invariant becomes one
//! [`Check`] with what was expected, what was found, and whether it held.
//!
//! The verifier reads PostgreSQL and Redis directly and trusts nothing the
//! app said, except the list of `202`s the buyers received: those are the
//! promises the system made, and every one must be kept. What else the
//! buyers were told is held to the truth too (`answers.rs`): a `sold_out`
//! while a unit was left, or a `409` naming another order than the
//! buyer's `202`, is a lie. The checks on PostgreSQL and Redis are in
//! `checks.rs`; this file reads what they check.

mod answers;
mod checks;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Context;
use redis::aio::ConnectionLike;
use serde::Serialize;
use sqlx::PgPool;
use uuid::Uuid;

/// The Redis keys of the sale under test, which the verifier reads. The
/// caller names them (seckill's `keys::SaleKeys` knows the layout); this
/// crate does not depend on seckill.
#[derive(Debug, Clone)]
pub struct RedisKeys {
    /// `STRING`: units left.
    pub stock: String,
    /// `HASH` user id -> order id: the buyers holding a unit, each with
    /// the order their unit belongs to.
    pub holds: String,
    /// `STRING` with a TTL: the sale's lock.
    pub lock: String,
    /// `ZSET`s of the sale's order queue: waiting, in flight, dead-lettered.
    pub queue_due: String,
    pub queue_inflight: String,
    pub queue_dead: String,
}

/// How many jobs the sale's order queue holds, read in one transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueDepth {
    pub waiting: u64,
    pub in_flight: u64,
    pub dead: u64,
}

pub(crate) async fn queue_depth<C: ConnectionLike + Send>(
    redis: &mut C,
    keys: &RedisKeys,
) -> redis::RedisResult<QueueDepth> {
    let (waiting, in_flight, dead) = redis::pipe()
        .atomic()
        .zcard(&keys.queue_due)
        .zcard(&keys.queue_inflight)
        .zcard(&keys.queue_dead)
        .query_async(redis)
        .await?;
    Ok(QueueDepth {
        waiting,
        in_flight,
        dead,
    })
}

use self::answers::{named_another_order_check, sold_out_told_true_check};
use self::checks::{
    cancelled_orders_check, confirmed_count_check, double_orders_check, duplicate_buyers,
    exactly_the_202s_check, lost_orders, lost_orders_check, oversold_by, promise_check,
    queue_checks, redis_holds_check, redis_stock_check, rejected_orders_check, sold_counter_check,
};

/// What the run did, as the buyers saw it.
#[derive(Debug, Clone, Default)]
pub struct RunFacts {
    pub sale_id: i64,
    /// Units the sale started with.
    pub stock: i64,
    /// Distinct user ids that got at least one answer other than busy or
    /// an error (the buyers who competed for a unit).
    pub distinct_buyers: usize,
    /// `(user id, order id)` of every `202` answer.
    pub accepted: Vec<(String, Uuid)>,
    /// `(user id, order id)` of the buyers who got no `202` but whose
    /// `409 already_purchased` named the order they hold: told, by a
    /// retry, as surely as by a `202`. Checked with the `202`s.
    pub recovered: Vec<(String, Uuid)>,
    /// `(user id, order id)` of every `409 already_purchased` that named
    /// an order, the winners' too: a winner's must name their `202`'s.
    pub named: Vec<(String, Uuid)>,
    /// When each `sold_out` answer was in, in µs from the run's start.
    pub sold_out_done_us: Vec<u64>,
    /// When each purchase answered `202` was sent, on the same clock.
    pub won_sent_us: Vec<u64>,
}

impl RunFacts {
    /// Every order a buyer was told they hold: the `202`s and the orders
    /// recovered by a retry.
    fn told(&self) -> impl Iterator<Item = &(String, Uuid)> {
        self.accepted.iter().chain(&self.recovered)
    }
}

/// What the run is supposed to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The safe strategy: nothing oversold, nothing lost, nothing invented.
    NoOversell,
    /// The deliberately broken `naive` strategy: the run passes only if the
    /// purchase path accepted more orders than there were units (and
    /// PostgreSQL still confirmed no more than the stock).
    Oversell,
    /// Whatever the purchase path did, PostgreSQL kept its word: no buyer
    /// holds two units, `sold` agrees with the orders, every `202` is
    /// stored, the queue drained. For runs judged by their figures instead
    /// (`seckill lab`): a broken strategy may oversell, sell one buyer
    /// twice, or sell less than it had.
    Observe,
}

/// One invariant, checked.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub expected: String,
    pub actual: String,
    pub passed: bool,
}

fn check(
    name: &'static str,
    expected: impl ToString,
    actual: impl ToString,
    passed: bool,
) -> Check {
    Check {
        name,
        expected: expected.to_string(),
        actual: actual.to_string(),
        passed,
    }
}

/// What the verifier found: every check of a run, and what PostgreSQL
/// holds for the sale. The run's verdict is judged from these checks and
/// the run's own problems ([`Report::judge`](crate::report::Report::judge)).
#[derive(Debug, Clone)]
pub struct Findings {
    pub checks: Vec<Check>,
    /// Orders holding a unit.
    pub confirmed: u64,
    /// Orders PostgreSQL refused (the naive strategy's excess).
    pub rejected: u64,
    /// `202`s whose order PostgreSQL does not hold at all.
    pub lost: u64,
    /// Buyers who got more than one `202`.
    pub duplicate_buyers: u64,
    /// Orders told (with the units sold before the run) beyond the
    /// units: the count the promise check judges.
    pub oversold_by: u64,
}

impl Findings {
    pub fn passed(&self) -> bool {
        self.checks.iter().all(|check| check.passed)
    }
}

/// The state of one sale in PostgreSQL, read in one snapshot.
struct SaleSnapshot {
    sold: i64,
    /// `user id -> order ids` of the orders that hold a unit: `confirmed`
    /// (awaiting payment) or `paid`.
    confirmed: BTreeMap<String, Vec<Uuid>>,
    /// Ids of every stored order, whatever its status.
    all_ids: BTreeSet<Uuid>,
    /// Orders PostgreSQL refused.
    rejected: i64,
    /// Orders whose payment window ran out; their units went back on sale.
    cancelled: i64,
}

impl SaleSnapshot {
    /// Orders holding a unit.
    fn confirmed_orders(&self) -> usize {
        self.confirmed.values().map(Vec::len).sum()
    }
}

async fn read_postgres(pg: &PgPool, sale_id: i64) -> anyhow::Result<SaleSnapshot> {
    // One transaction at REPEATABLE READ: every query sees the same snapshot.
    let mut tx = pg.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        .execute(&mut *tx)
        .await?;
    let sold: i32 = sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
        .bind(sale_id)
        .fetch_one(&mut *tx)
        .await
        .context("reading the sale")?;
    let rows: Vec<(Uuid, String, String)> =
        sqlx::query_as("SELECT id, user_id, status FROM orders WHERE sale_id = $1")
            .bind(sale_id)
            .fetch_all(&mut *tx)
            .await
            .context("reading the orders")?;
    tx.commit().await?;
    let mut stored = SaleSnapshot {
        sold: i64::from(sold),
        confirmed: BTreeMap::new(),
        all_ids: BTreeSet::new(),
        rejected: 0,
        cancelled: 0,
    };
    for (id, user, status) in rows {
        stored.all_ids.insert(id);
        match status.as_str() {
            "rejected" => stored.rejected += 1,
            "cancelled" => stored.cancelled += 1,
            // confirmed or paid: the buyer holds a unit.
            _ => stored.confirmed.entry(user).or_default().push(id),
        }
    }
    Ok(stored)
}

/// `(user id, order id)` of the orders that hold a unit of the sale now.
/// Taken before a run on an existing sale: those promises were made
/// before the run, and the verifier counts them as such.
pub async fn holders(pg: &PgPool, sale_id: i64) -> anyhow::Result<Vec<(String, Uuid)>> {
    let stored = read_postgres(pg, sale_id).await?;
    Ok(stored
        .confirmed
        .into_iter()
        .flat_map(|(user, ids)| ids.into_iter().map(move |id| (user.clone(), id)))
        .collect())
}

/// Check every invariant of a finished run. Call it once the queue has
/// drained (a job still queued shows up as a failed "queue empty" check).
///
/// The checks come in a fixed order, PostgreSQL first, then Redis: reports
/// and tests list them in that order.
pub async fn verify<C: ConnectionLike + Send>(
    pg: &PgPool,
    redis: &mut C,
    keys: &RedisKeys,
    facts: &RunFacts,
    expect: Expect,
) -> anyhow::Result<Findings> {
    let stored = read_postgres(pg, facts.sale_id).await?;
    let mut checks = Vec::new();
    if let Some(promise) = promise_check(facts, expect) {
        // Every unit found a buyer: a strategy that may sell less than it
        // had (Observe) is judged by its figures instead.
        checks.extend([promise, confirmed_count_check(facts, &stored)]);
    }
    checks.extend([
        double_orders_check(&stored),
        sold_counter_check(&stored),
        lost_orders_check(facts, &stored),
        cancelled_orders_check(&stored),
    ]);
    if expect == Expect::NoOversell {
        checks.push(rejected_orders_check(&stored));
        checks.push(exactly_the_202s_check(facts, &stored));
        // What the buyers were told, held to the truth: a correct
        // strategy's answers are; the broken ones are judged by
        // PostgreSQL's word alone.
        checks.push(sold_out_told_true_check(facts));
        checks.push(named_another_order_check(facts));
        let (stock, holds): (Option<i64>, BTreeMap<String, String>) = redis::pipe()
            .get(&keys.stock)
            .hgetall(&keys.holds)
            .query_async(redis)
            .await
            .context("reading the sale from Redis")?;
        checks.push(redis_stock_check(facts, &stored, stock));
        checks.push(redis_holds_check(&stored, &holds));
    }
    let queue = queue_depth(redis, keys)
        .await
        .context("reading the queue")?;
    checks.extend(queue_checks(queue));
    if expect == Expect::NoOversell {
        // A deliberately broken lock may leave its key without a TTL (that
        // is one of its bugs); `seckill lab` reports it in a column.
        checks.push(lock_ttl_check(redis, keys).await?);
    }
    Ok(Findings {
        checks,
        confirmed: stored.confirmed_orders() as u64,
        rejected: u64::try_from(stored.rejected).unwrap_or(0),
        lost: lost_orders(facts, &stored) as u64,
        duplicate_buyers: duplicate_buyers(facts) as u64,
        oversold_by: oversold_by(facts),
    })
}

/// No lock is left behind that never expires: the article's `setnx()`
/// then `expire()` leaves one whenever it crashes between the two.
async fn lock_ttl_check<C: ConnectionLike + Send>(
    redis: &mut C,
    keys: &RedisKeys,
) -> anyhow::Result<Check> {
    // -2: no lock (fine); -1: a lock that never expires (the article's
    // SETNX-then-EXPIRE bug).
    let lock_ttl: i64 = redis::cmd("PTTL")
        .arg(&keys.lock)
        .query_async(redis)
        .await
        .context("reading the lock's TTL")?;
    Ok(check(
        "no lock key without a TTL",
        "absent or expiring",
        match lock_ttl {
            -2 => "absent".to_owned(),
            -1 => "no TTL".to_owned(),
            ms => format!("expires in {ms} ms"),
        },
        lock_ttl != -1,
    ))
}
