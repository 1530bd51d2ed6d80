//! What the chaos run must show, per fault window and overall, read from
//! the answers the buyers got and from PostgreSQL and Redis afterwards.
//!
//! The promise, under faults: no unit sold twice; nobody holding two; every
//! `202` an order in PostgreSQL, except the orders a Redis wipe took while
//! they still waited on the queue (counted exactly: they are the ids read
//! from the queue at the wipe); no order nobody was told about, except for
//! buyers whose request got no answer (an instance killed after its commit);
//! Redis equal to PostgreSQL; no lock without a TTL; no dead letter; and no
//! `500` ever: while a server is down the answer is `503`.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::scenario::{Plan, RunData, Sample};
use serde::Serialize;
use uuid::Uuid;

use super::Rig;
use super::faults::{Window, Wiped};
use crate::chaos::Fault;
use seckill_core::domain::OrderStatus;

/// The name of the row for the time between faults.
pub const BETWEEN: &str = "(between faults)";

/// After a fault's window ends, answers may still show it this long (a
/// client reconnecting, a pool finding its server again).
const RECOVERY: Duration = Duration::from_secs(1);

/// One row of the table: a fault window, or the time between faults.
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    pub fault: String,
    pub requests: u64,
    pub accepted: u64,
    /// No answer (connection refused or cut), or an unexpected status.
    pub errors: u64,
    /// `503 unavailable` (a server down), and `500`s, which must not exist.
    pub unavailable: u64,
    pub internal: u64,
    /// `202`s in this window whose order was lost (a Redis wipe).
    pub lost: u64,
    /// Sends the generator dropped, for want of a connection the deployment
    /// freed in time, while the fault was in force.
    pub dropped: u64,
    /// From the window's end to the first answer that sold or refused a unit.
    pub recovered_after_ms: Option<u64>,
    /// Requests that failed (no answer, 503 or 500), by the whole second of
    /// the run they fell due in: where the trouble was.
    pub failures_by_second: Vec<(u64, u64)>,
    pub ok: bool,
}

impl Row {
    /// The table's columns, in order.
    pub const COLUMNS: [&'static str; 10] = [
        "fault",
        "requests",
        "202",
        "errors",
        "503",
        "500",
        "lost",
        "dropped",
        "recovered",
        "ok",
    ];

    /// The row's cells, in the order of [`Row::COLUMNS`]: what the terminal
    /// table and the HTML page both show.
    pub fn cells(&self) -> [String; 10] {
        [
            self.fault.clone(),
            self.requests.to_string(),
            self.accepted.to_string(),
            self.errors.to_string(),
            self.unavailable.to_string(),
            self.internal.to_string(),
            self.lost.to_string(),
            self.dropped.to_string(),
            self.recovered_after_ms
                .map_or_else(|| "-".to_owned(), |ms| format!("{ms} ms")),
            if self.ok { "yes" } else { "NO" }.to_owned(),
        ]
    }
}

/// One overall check.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub name: &'static str,
    pub expected: String,
    pub found: String,
    pub ok: bool,
}

impl Check {
    fn equal(name: &'static str, expected: impl ToString, found: impl ToString) -> Self {
        let (expected, found) = (expected.to_string(), found.to_string());
        let ok = expected == found;
        Self {
            name,
            expected,
            found,
            ok,
        }
    }
}

/// What a sample says, in the chaos run's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Said {
    Sold,
    Refused,
    Unavailable,
    Internal,
    Error,
}

fn said(sample: &Sample) -> Said {
    match (sample.outcome, sample.status) {
        (AnswerKind::Won, _) => Said::Sold,
        (AnswerKind::Error, Some(500)) => Said::Internal,
        (AnswerKind::Error, Some(503)) => Said::Unavailable,
        (AnswerKind::Error, _) => Said::Error,
        _ => Said::Refused,
    }
}

/// Faults during which buyers may see no answer or `503 unavailable`.
fn may_fail(fault: Fault) -> bool {
    !matches!(fault, Fault::WorkerKill | Fault::Flood)
}

/// The table: a row per fault window, and one for the time between them.
///
/// A request belongs to a window when it was out while the fault was in
/// force: due before the window (and its recovery) ended, answered after it
/// began. A request sent just before an instance was killed is the kill's.
pub fn rows(
    run: &RunData,
    epoch: Instant,
    windows: &[Window],
    lost: &HashSet<Uuid>,
) -> anyhow::Result<Vec<Row>> {
    let started = run.started.context("the load never started")?;
    let offset = started.saturating_duration_since(epoch);
    let due = |sample: &Sample| offset + Duration::from_micros(sample.intended_us);
    let done =
        |sample: &Sample| offset + Duration::from_micros(sample.done_us.max(sample.intended_us));
    let during = |sample: &Sample, window: &Window| {
        due(sample) < window.end + RECOVERY && done(sample) >= window.start
    };
    let dropped_due = |window: Option<&Window>| {
        run.dropped_at_us
            .iter()
            .map(|us| offset + Duration::from_micros(*us))
            .filter(|at| match window {
                Some(w) => (w.start..w.end + RECOVERY).contains(at),
                None => !windows
                    .iter()
                    .any(|w| (w.start..w.end + RECOVERY).contains(at)),
            })
            .count() as u64
    };
    let mut rows = Vec::new();
    for window in windows {
        // In a window where nothing may fail, a request that was also out
        // during a fault where things may (in flight across both) is that
        // fault's, not this one's.
        let excused = |sample: &Sample| {
            !may_fail(window.fault)
                && windows
                    .iter()
                    .any(|other| may_fail(other.fault) && during(sample, other))
        };
        let inside: Vec<&Sample> = run
            .samples
            .iter()
            .filter(|s| during(s, window) && !excused(s))
            .collect();
        let recovered_after_ms = run
            .samples
            .iter()
            .filter(|s| due(s) >= window.end && matches!(said(s), Said::Sold | Said::Refused))
            .map(|s| due(s) - window.end)
            .min()
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        let mut row = row(
            window.fault.as_str(),
            &inside,
            lost,
            may_fail(window.fault),
            recovered_after_ms,
        );
        row.failures_by_second = failures_by_second(&inside, &due);
        row.dropped = dropped_due(Some(window));
        rows.push(row);
    }
    let between: Vec<&Sample> = run
        .samples
        .iter()
        .filter(|s| !windows.iter().any(|w| during(s, w)))
        .collect();
    let mut between_row = row(BETWEEN, &between, lost, false, None);
    between_row.failures_by_second = failures_by_second(&between, &due);
    between_row.dropped = dropped_due(None);
    rows.push(between_row);
    Ok(rows)
}

/// Failed requests (no answer, 503, 500) by the whole second they fell due in.
fn failures_by_second(samples: &[&Sample], due: &impl Fn(&Sample) -> Duration) -> Vec<(u64, u64)> {
    let mut by_second = std::collections::BTreeMap::new();
    for sample in samples {
        if matches!(
            said(sample),
            Said::Error | Said::Unavailable | Said::Internal
        ) {
            *by_second.entry(due(sample).as_secs()).or_insert(0u64) += 1;
        }
    }
    by_second.into_iter().collect()
}

fn row(
    fault: &str,
    samples: &[&Sample],
    lost: &HashSet<Uuid>,
    may_fail: bool,
    recovered_after_ms: Option<u64>,
) -> Row {
    let count = |what: Said| samples.iter().filter(|s| said(s) == what).count() as u64;
    let (errors, unavailable, internal) = (
        count(Said::Error),
        count(Said::Unavailable),
        count(Said::Internal),
    );
    Row {
        fault: fault.to_owned(),
        requests: samples.len() as u64,
        accepted: count(Said::Sold),
        errors,
        unavailable,
        internal,
        lost: samples
            .iter()
            .filter(|s| s.order_id.is_some_and(|id| lost.contains(&id)))
            .count() as u64,
        dropped: 0,
        recovered_after_ms,
        failures_by_second: Vec::new(),
        // A window no request fell in proves nothing: it fails. Where
        // nothing may fail, no `503` may come, and requests with no answer
        // at all stay under 1% (a connection the generator lost on its
        // own side, as the load test tolerates).
        ok: !samples.is_empty()
            && internal == 0
            && (may_fail || (unavailable == 0 && errors * 100 <= samples.len() as u64)),
    }
}

/// Orders of the sale as PostgreSQL has them: `(id, user, status)`.
async fn stored(rig: &Rig) -> anyhow::Result<Vec<(Uuid, String, OrderStatus)>> {
    let rows = rig.store.orders_of_sale(rig.sale_id, i64::MAX).await?;
    Ok(rows
        .into_iter()
        .map(|row| (row.id, row.user_id, row.status))
        .collect())
}

/// What the buyers were told, against what PostgreSQL has.
struct Promised {
    /// Order ids answered `202`.
    accepted_ids: HashSet<Uuid>,
    /// Of those, the ones PostgreSQL does not have.
    lost: HashSet<Uuid>,
    /// Of the accepted, the ones waiting on the queue when Redis was wiped:
    /// lost, every one.
    waiting_at_wipe: HashSet<Uuid>,
    /// Of the accepted, the ones a worker held when Redis was wiped: lost
    /// or not, as the worker's commit and the sale's reload raced.
    in_flight_at_wipe: HashSet<Uuid>,
    /// Buyers with a request that got no answer at all.
    unanswered: HashSet<String>,
}

fn promised(
    plan: &Plan,
    run: &RunData,
    orders: &[(Uuid, String, OrderStatus)],
    wiped: &Wiped,
) -> Promised {
    let in_pg: HashSet<Uuid> = orders.iter().map(|(id, _, _)| *id).collect();
    let accepted_ids: HashSet<Uuid> = run.samples.iter().filter_map(|s| s.order_id).collect();
    let lost: HashSet<Uuid> = accepted_ids
        .iter()
        .copied()
        .filter(|id| !in_pg.contains(id))
        .collect();
    let among = |ids: &HashSet<String>| {
        accepted_ids
            .iter()
            .copied()
            .filter(|id| ids.contains(&id.to_string()))
            .collect()
    };
    let unanswered = run
        .samples
        .iter()
        .filter(|s| s.status.is_none())
        .map(|s| plan.user_id(s.user))
        .collect();
    Promised {
        waiting_at_wipe: among(&wiped.waiting),
        in_flight_at_wipe: among(&wiped.in_flight),
        accepted_ids,
        lost,
        unanswered,
    }
}

/// Every overall check. (Long on purpose: one list, in the order the
/// docs/chaos.md gives them, reads better than the same list cut in pieces.)
/// `wiped` is `None` when the run had no Redis wipe: then no `202` may be
/// lost at all, and the check says so in those words.
pub async fn checks(
    rig: &Rig,
    plan: &Plan,
    run: &RunData,
    wiped: Option<&Wiped>,
) -> anyhow::Result<(Vec<Check>, HashSet<Uuid>)> {
    let no_wipe = Wiped::default();
    let orders = stored(rig).await?;
    let Promised {
        accepted_ids,
        lost,
        waiting_at_wipe,
        in_flight_at_wipe,
        unanswered,
    } = promised(plan, run, &orders, wiped.unwrap_or(&no_wipe));
    let holding: Vec<&str> = orders
        .iter()
        .filter(|(_, _, s)| matches!(s, OrderStatus::Confirmed | OrderStatus::Paid))
        .map(|(_, user, _)| user.as_str())
        .collect();
    let distinct: HashSet<&str> = holding.iter().copied().collect();
    let invented = orders
        .iter()
        .filter(|(id, user, _)| !accepted_ids.contains(id) && !unanswered.contains(user))
        .count();
    let rejected = orders
        .iter()
        .filter(|(_, _, s)| *s == OrderStatus::Rejected)
        .count();
    let sold = rig.store.sold(rig.sale_id).await?;
    let (redis_stock, redis_buyers, lock_ttl, depth) = rig.redis_figures().await?;
    let mut pg_buyers: Vec<&str> = distinct.iter().copied().collect();
    pg_buyers.sort_unstable();
    let mut checks = vec![
        Check {
            name: "units held <= units",
            expected: format!("<= {}", rig.stock),
            found: holding.len().to_string(),
            ok: holding.len() <= rig.stock as usize,
        },
        Check::equal(
            "buyers holding two units",
            0,
            holding.len() - distinct.len(),
        ),
        Check::equal("sold counter = units held", holding.len(), sold),
    ];
    checks.extend(match wiped {
        Some(_) => vec![
            Check::equal(
                "202s waiting on the queue at the Redis wipe that were lost",
                waiting_at_wipe.len(),
                lost.intersection(&waiting_at_wipe).count(),
            ),
            Check::equal(
                "lost 202s that were not on the queue at the wipe",
                0,
                lost.difference(&waiting_at_wipe)
                    .filter(|id| !in_flight_at_wipe.contains(id))
                    .count(),
            ),
        ],
        None => vec![Check::equal(
            "lost 202s (no Redis wipe in this run)",
            0,
            lost.len(),
        )],
    });
    checks.extend([
        Check::equal(
            "orders nobody was told about (other than unanswered buyers)",
            0,
            invented,
        ),
        Check::equal("orders PostgreSQL refused", 0, rejected),
        Check::equal(
            "Redis stock = units - sold",
            i64::from(rig.stock) - i64::from(sold),
            redis_stock.unwrap_or(i64::MIN),
        ),
        Check {
            name: "Redis buyers = PostgreSQL buyers",
            expected: format!("{} buyers", pg_buyers.len()),
            found: format!(
                "{} buyers, {} not in PostgreSQL's",
                redis_buyers.len(),
                redis_buyers
                    .iter()
                    .filter(|b| !distinct.contains(b.as_str()))
                    .count()
            ),
            ok: pg_buyers == redis_buyers.iter().map(String::as_str).collect::<Vec<_>>(),
        },
        Check {
            name: "no lock key without a TTL",
            expected: "absent or expiring".to_owned(),
            found: lock_ttl.to_string(),
            ok: lock_ttl != -1,
        },
        Check::equal("queues empty (waiting + in flight)", 0, depth.0),
        Check::equal("dead-lettered jobs (orders and deadlines)", 0, depth.1),
    ]);
    if let Some(refused) = rig.fence_refusals {
        checks.push(Check {
            name: "writes of the paused lock holder the fence refused",
            expected: ">= 1".to_owned(),
            found: refused.to_string(),
            ok: refused >= 1,
        });
    }
    let internal = run.samples.iter().filter(|s| s.status == Some(500)).count();
    checks.push(Check::equal("answers 500 internal", 0, internal));
    Ok((checks, lost))
}

impl Rig {
    /// Redis' stock, sorted buyers, the lock's PTTL, and the order queue's
    /// `(waiting + in flight, dead)`.
    async fn redis_figures(&self) -> anyhow::Result<(Option<i64>, Vec<String>, i64, (u64, u64))> {
        let mut conn = self.store.redis().await?;
        let (stock, mut buyers, ttl): (Option<i64>, Vec<String>, i64) = redis::pipe()
            .get(&self.keys.stock)
            .smembers(&self.keys.buyers)
            .pttl(&self.keys.lock)
            .query_async(&mut conn)
            .await
            .context("reading the sale in Redis")?;
        let (mut queued, mut dead) = (0, 0);
        for queue in [&self.keys.queue, &self.keys.deadlines] {
            let (due, inflight, buried): (u64, u64, u64) = redis::pipe()
                .zcard(&queue.due)
                .zcard(&queue.inflight)
                .zcard(&queue.dead)
                .query_async(&mut conn)
                .await
                .context("reading a queue")?;
            queued += due + inflight;
            dead += buried;
        }
        buyers.sort_unstable();
        Ok((stock, buyers, ttl, (queued, dead)))
    }
}

/// Answers in one slice of the run, by what they said.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct Tick {
    /// The slice's start, from the start of the chaos run.
    pub at_ms: u64,
    pub sold: u64,
    pub refused: u64,
    /// No answer, `503` or `500`.
    pub failed: u64,
}

/// The run in slices of `slice`, by due time: what the timeline chart draws.
pub fn timeline(run: &RunData, epoch: Instant, slice: Duration) -> Vec<Tick> {
    let Some(started) = run.started else {
        return Vec::new();
    };
    let offset = started.saturating_duration_since(epoch);
    let slice_us = u64::try_from(slice.as_micros()).unwrap_or(u64::MAX).max(1);
    let offset_us = u64::try_from(offset.as_micros()).unwrap_or(0);
    let mut ticks: Vec<Tick> = Vec::new();
    for sample in &run.samples {
        let index = usize::try_from((offset_us + sample.intended_us) / slice_us).unwrap_or(0);
        if ticks.len() <= index {
            ticks.resize(index + 1, Tick::default());
        }
        let tick = &mut ticks[index];
        match said(sample) {
            Said::Sold => tick.sold += 1,
            Said::Refused => tick.refused += 1,
            _ => tick.failed += 1,
        }
    }
    for (i, tick) in ticks.iter_mut().enumerate() {
        tick.at_ms = (i as u64 * slice_us) / 1_000;
    }
    ticks
}
