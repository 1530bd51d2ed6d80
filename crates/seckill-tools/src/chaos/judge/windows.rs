//! The chaos table, read from the answers the buyers got: a row per fault
//! window and one for the time between faults, each judged by what may
//! and may not fail while its fault is in force; and the same answers in
//! slices of the run, for the timeline the page draws.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::report::Align;
use seckill_loadtest::scenario::{RunData, Sample};
use serde::Serialize;
use uuid::Uuid;

use crate::chaos::Fault;
use crate::chaos::faults::FaultWindow;
use crate::chaos::judge::ChaosCheck;

/// The name of the row for the time between faults.
pub(crate) const BETWEEN: &str = "(between faults)";

/// After a fault's window ends, answers may still show it this long (a
/// client reconnecting, a pool finding its server again).
const RECOVERY: Duration = Duration::from_secs(1);

/// One row of the table: a fault window, or the time between faults.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FaultRow {
    pub(crate) fault: String,
    pub(crate) requests: u64,
    pub(crate) accepted: u64,
    /// No answer (connection refused or cut), or an unexpected status.
    pub(crate) errors: u64,
    /// `503 unavailable` (a server down) and `503 unconfirmed` (Redis not
    /// heard in time: no replica confirmed, or an answer lost), and `500`s,
    /// which must not exist.
    pub(crate) unavailable: u64,
    pub(crate) internal: u64,
    /// `202`s in this window whose order was lost (a Redis wipe).
    pub(crate) lost: u64,
    /// Sends the generator dropped, for want of a connection the deployment
    /// freed in time, while the fault was in force.
    pub(crate) dropped: u64,
    /// From the window's end to the first answer that sold or refused a unit.
    pub(crate) recovered_after_ms: Option<u64>,
    /// Requests that failed (no answer, 503 or 500), by the whole second of
    /// the run they fell due in: where the trouble was.
    pub(crate) failures_by_second: Vec<(u64, u64)>,
    pub(crate) ok: bool,
}

impl FaultRow {
    /// The table's columns, in order: heading, side, and least width (the
    /// widths docs/chaos.md shows, whatever a run's figures).
    pub(crate) const COLUMNS: [(&'static str, Align, usize); 10] = [
        ("fault", Align::Left, 18),
        ("requests", Align::Right, 9),
        ("202", Align::Right, 6),
        ("errors", Align::Right, 7),
        ("503", Align::Right, 6),
        ("500", Align::Right, 5),
        ("lost", Align::Right, 5),
        ("dropped", Align::Right, 8),
        ("recovered", Align::Right, 10),
        ("ok", Align::Right, 3),
    ];

    /// The row's cells, in the order of [`FaultRow::COLUMNS`]: what the terminal
    /// table and the HTML page both show.
    pub(crate) fn cells(&self) -> [String; 10] {
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

/// What a sample says, in the chaos run's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Told {
    Sold,
    Refused,
    Unavailable,
    Internal,
    Error,
}

/// A `503 busy` (the sale's lock not had in time) and a `503 lock_lost`
/// (a pass slower than the lock's TTL, its write refused by the fence)
/// are answers about the sale's lock, refusals like a `409`. A `503
/// unconfirmed` is not: the instance could not hear from Redis in time
/// (no replica confirmed the pass, or its answer was lost), a server's
/// trouble, counted with `503 unavailable` where nothing may fail.
fn said(sample: &Sample) -> Told {
    match (sample.outcome, sample.status) {
        (AnswerKind::Won, _) => Told::Sold,
        (AnswerKind::Busy, _) if sample.unconfirmed => Told::Unavailable,
        (AnswerKind::Error, Some(500)) => Told::Internal,
        (AnswerKind::Error, Some(503)) => Told::Unavailable,
        (AnswerKind::Error, _) => Told::Error,
        _ => Told::Refused,
    }
}

/// Faults during which buyers may see no answer or `503 unavailable`.
/// Every fault is named, with no `_` arm: a new fault does not compile
/// until it says which it is (a catch-all would let it fail buyers
/// unnoticed, or hold it to a promise it cannot keep).
fn may_fail(fault: Fault) -> bool {
    match fault {
        // The servers buyers talk to stay up: a worker is not in the
        // request's path, and the flood is beside the load, not over it.
        Fault::WorkerKill | Fault::Flood => false,
        // Another shard's trouble: the sale's shard serves on, and its
        // buyers must not notice (a sale touches only its own shard).
        Fault::OtherShardStall => false,
        // An instance, a server behind them, or the lock holder is gone
        // for a while.
        Fault::AppKill
        | Fault::LockHolderPause
        | Fault::PostgresDown
        | Fault::RedisKill
        | Fault::RedisWipe
        | Fault::RedisStall
        | Fault::RedisFailover
        | Fault::ClusterFailover
        | Fault::ConnectionDrops
        | Fault::SaleShardStall => true,
    }
}

/// The table: a row per fault window, and one for the time between them.
///
/// A request belongs to a window when it was out while the fault was in
/// force: due before the window (and its recovery) ended, answered after it
/// began. A request sent just before an instance was killed is the kill's.
pub(crate) fn rows(
    run: &RunData,
    epoch: Instant,
    windows: &[FaultWindow],
    lost: &HashSet<Uuid>,
) -> anyhow::Result<Vec<FaultRow>> {
    let started = run.started.context("the load never started")?;
    let offset = started.saturating_duration_since(epoch);
    let due = |sample: &Sample| offset + Duration::from_micros(sample.intended_us);
    let done =
        |sample: &Sample| offset + Duration::from_micros(sample.done_us.max(sample.intended_us));
    let during = |sample: &Sample, window: &FaultWindow| {
        due(sample) < window.end + RECOVERY && done(sample) >= window.start
    };
    let dropped_due = |window: Option<&FaultWindow>| {
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
            .filter(|s| due(s) >= window.end && matches!(said(s), Told::Sold | Told::Refused))
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

/// How long a `202` may come after the sale's replicas were stopped: a
/// pass whose `WAIT` was answered just before (the replica wait, 250 ms,
/// and a margin for the instance to send its answer).
const REPLICAS_STOPPED_SETTLE: Duration = Duration::from_millis(500);

/// `202`s sent and answered while the sale's replicas were stopped
/// (`connection-drops`, from [`REPLICAS_STOPPED_SETTLE`] after its start
/// to its end): under `--redis-durability replica` no replica can have
/// confirmed their writes, so there must be none.
pub(crate) fn unreplicated_202s(
    run: &RunData,
    epoch: Instant,
    windows: &[FaultWindow],
) -> anyhow::Result<ChaosCheck> {
    let started = run.started.context("the load never started")?;
    let offset = started.saturating_duration_since(epoch);
    let at = |us: u64| offset + Duration::from_micros(us);
    let found = windows
        .iter()
        .filter(|w| w.fault == Fault::ConnectionDrops)
        .map(|w| {
            run.samples
                .iter()
                .filter(|s| said(s) == Told::Sold)
                .filter(|s| {
                    at(s.sent_us) >= w.start + REPLICAS_STOPPED_SETTLE && at(s.done_us) <= w.end
                })
                .count()
        })
        .sum::<usize>();
    Ok(ChaosCheck {
        name: "202s sent and answered while the sale's replicas were stopped",
        expected: "0".to_owned(),
        found: found.to_string(),
        ok: found == 0,
    })
}

/// Failed requests (no answer, 503, 500) by the whole second they fell due in.
fn failures_by_second(samples: &[&Sample], due: &impl Fn(&Sample) -> Duration) -> Vec<(u64, u64)> {
    let mut by_second = std::collections::BTreeMap::new();
    for sample in samples {
        if matches!(
            said(sample),
            Told::Error | Told::Unavailable | Told::Internal
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
) -> FaultRow {
    let count = |what: Told| samples.iter().filter(|s| said(s) == what).count() as u64;
    let (errors, unavailable, internal) = (
        count(Told::Error),
        count(Told::Unavailable),
        count(Told::Internal),
    );
    FaultRow {
        fault: fault.to_owned(),
        requests: samples.len() as u64,
        accepted: count(Told::Sold),
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

/// Answers in one slice of the run, by what they said.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct Tick {
    /// The slice's start, from the start of the chaos run.
    pub(crate) at_ms: u64,
    pub(crate) sold: u64,
    pub(crate) refused: u64,
    /// No answer, `503` or `500`.
    pub(crate) failed: u64,
}

/// The run in slices of `slice`, by due time: what the timeline chart draws.
pub(crate) fn timeline(run: &RunData, epoch: Instant, slice: Duration) -> Vec<Tick> {
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
            Told::Sold => tick.sold += 1,
            Told::Refused => tick.refused += 1,
            _ => tick.failed += 1,
        }
    }
    for (i, tick) in ticks.iter_mut().enumerate() {
        tick.at_ms = (i as u64 * slice_us) / 1_000;
    }
    ticks
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(fault: Fault, start_ms: u64, end_ms: u64) -> FaultWindow {
        FaultWindow {
            fault,
            start: Duration::from_millis(start_ms),
            end: Duration::from_millis(end_ms),
            note: String::new(),
        }
    }

    /// A sample due and answered at `at_ms`.
    fn answered(at_ms: u64, outcome: AnswerKind, status: u16, unconfirmed: bool) -> Sample {
        Sample {
            user: 0,
            outcome,
            order_id: None,
            unconfirmed,
            instance: None,
            status: Some(status),
            retry_after: status == 503,
            intended_us: at_ms * 1_000,
            sent_us: at_ms * 1_000,
            done_us: at_ms * 1_000 + 10,
        }
    }

    /// Where nothing may fail (another shard's stall, the time between
    /// faults), a `503 unconfirmed` is a `503`: the sale noticed. A `503
    /// busy` there is a refusal, an answer about the sale's lock.
    #[test]
    fn a_503_unconfirmed_fails_a_window_where_nothing_may_fail_and_busy_does_not() {
        let epoch = Instant::now();
        let windows = [window(Fault::OtherShardStall, 1_000, 2_000)];
        let run = |samples: Vec<Sample>| RunData {
            samples,
            started: Some(epoch),
            ..RunData::default()
        };
        let ok_rows = |samples| {
            rows(&run(samples), epoch, &windows, &HashSet::new())
                .expect("rows")
                .iter()
                .map(|row| (row.unavailable, row.ok))
                .collect::<Vec<_>>()
        };
        let won = |at| answered(at, AnswerKind::Won, 202, false);
        let busy = |at| answered(at, AnswerKind::Busy, 503, false);
        let unconfirmed = |at| answered(at, AnswerKind::Busy, 503, true);
        // The stall's window, then the time between faults.
        assert_eq!(
            ok_rows(vec![won(1_500), busy(1_600), won(5_000), busy(5_100)]),
            [(0, true), (0, true)]
        );
        assert_eq!(
            ok_rows(vec![won(1_500), unconfirmed(1_600), won(5_000)]),
            [(1, false), (0, true)]
        );
        assert_eq!(
            ok_rows(vec![won(1_500), won(5_000), unconfirmed(5_100)]),
            [(0, true), (1, false)]
        );
    }
}
