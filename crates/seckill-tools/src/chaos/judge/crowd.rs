//! The waiting crowd's row and checks: what the buyers waiting in a room
//! across `redis-failover` were told (`chaos/crowd.rs`), against itself
//! and, once the queues have drained, against PostgreSQL.
//!
//! A failover may make a buyer wait (`503` with `Retry-After`), never
//! take back what they were told: a place they were shown is not later
//! "outside", nor missing from the room when the crowd stops, unless
//! their admission ran out; an admission they were told is not followed,
//! before it runs out or buys, by a place in line or another admission;
//! the room never has more buyers holding an admission they were told
//! than its `max_active`, and a buyer who bought is not handed a new
//! admission; every `202` is an order, one a buyer at most; nothing is
//! told while no replica can hold it (the replica frozen, then its
//! primary dead); and every request is answered. Under
//! `--redis-durability replica` each must hold; under `local` the row
//! shows which a failover breaks.

use std::collections::{BTreeMap, HashMap, HashSet};

use serde::Serialize;
use uuid::Uuid;

use super::{ChaosCheck, FaultRow};
use crate::chaos::crowd::{Answer, Asked, ROOM, buyer_id};
use crate::chaos::faults::{CUT_OFF, FaultWindow};

/// From the replica's freeze, how long an answer may still be told from
/// what a replica confirmed before it: an instance answers a far-back
/// buyer from a look at most 200 ms old, and takes a while to send it.
const FROZEN_SETTLE_MS: i64 = 300;
/// After the cut-off, the primary is killed; the sentinels take 2 s
/// without an answer to call it down, so for a second after the kill
/// (at least [`CUT_OFF`] after the freeze) no Redis can confirm anything.
const DEAD_FOR_MS: i64 = 1_000;

/// The row's name in the table.
pub(crate) const ROW: &str = "crowd in failover";
/// The checks' names, which `compare.rs` names too.
pub(crate) const TAKEN_BACK: &str =
    "waiting crowd: places taken back (told a place, then outside or not in the room at the end)";
pub(crate) const BEYOND_LIMIT: &str =
    "waiting crowd: most buyers holding an admission told to them, at once";
pub(crate) const READMITTED: &str = "waiting crowd: buyers told a new admission after their 202";
pub(crate) const UNADMITTED: &str =
    "waiting crowd: admissions taken back (then told waiting, or another, before it ran out)";
pub(crate) const LOST: &str =
    "waiting crowd: 202s (or orders a 409 already_purchased named) not in PostgreSQL";
pub(crate) const TOLD_CUT_OFF: &str =
    "waiting crowd: places, admissions or 202s told with the replica cut off or its primary dead";
pub(crate) const DOUBLE: &str = "waiting crowd: buyers with two orders or two 202s";
const UNTOLD: &str = "waiting crowd: orders in PostgreSQL nobody was told of";
const UNANSWERED: &str =
    "waiting crowd: requests with no answer, a 500, or a 503 without Retry-After";
const THROUGH: &str =
    "waiting crowd: buyers told a place before the failover and answered after it";

/// The crowd in figures, for `--compare-durability`'s second table.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub(crate) struct CrowdSummary {
    pub(crate) buyers: u32,
    /// Buyers told a place (a ticket, a position, an admission).
    pub(crate) placed: u64,
    /// Buyers told an admission.
    pub(crate) admitted: u64,
    /// Buyers told `202`.
    pub(crate) accepted: u64,
    /// Buyers told a place who were later told they were outside, or
    /// whom the room no longer held when the crowd stopped, their
    /// admission not run out.
    pub(crate) taken_back: u64,
    /// The most buyers holding an admission told to them at one moment,
    /// and the room's limit.
    pub(crate) most_admitted: u64,
    pub(crate) max_active: u32,
    /// Buyers told a new admission after their `202`.
    pub(crate) readmitted: u64,
    /// Buyers told an admission, then, before it ran out and before a
    /// `202`, a place in line or another admission.
    pub(crate) unadmitted: u64,
    /// Orders told to their buyers (a `202`, or a `409 already_purchased`
    /// naming the order they hold) that PostgreSQL does not have.
    pub(crate) lost: u64,
    /// Places, admissions and `202`s told while no replica could hold
    /// them.
    pub(crate) told_cut_off: u64,
    /// Buyers with two orders in PostgreSQL, or two `202`s.
    pub(crate) doubled: u64,
}

/// Whom the crowd's room held when the crowd had stopped.
#[derive(Clone, Copy)]
pub(crate) struct Room<'a> {
    /// Buyers (by number) in line, admitted or bought.
    pub(crate) held: &'a HashSet<u32>,
    /// When it was read, in ms from the run's start.
    pub(crate) read_ms: i64,
}

/// What one buyer was told, in order.
#[derive(Default)]
struct Told {
    /// Holds a place now (told one, and not told outside since).
    placed: bool,
    placed_ever: bool,
    taken_back: bool,
    /// Each admission told, by its text: when it was first told and when
    /// the buyer stopped holding it (it ran out, or a purchase with it was
    /// sent that may have bought), in ms from the run's start.
    admissions: HashMap<String, (i64, i64)>,
    /// The latest end of an admission told.
    admitted_until: Option<i64>,
    /// The latest admission told, and its end.
    latest: Option<(String, i64)>,
    unadmitted: bool,
    /// The admission the buyer's `202` was for.
    bought_with: Option<String>,
    readmitted: bool,
    accepted: HashSet<Uuid>,
    /// Orders a `409 already_purchased` named: the order the buyer holds,
    /// told as surely as by a `202`.
    named: HashSet<Uuid>,
    placed_before_failover: bool,
    answered_after_failover: bool,
}

impl Told {
    /// Whether an admission told has run out by `at`.
    fn ran_out(&self, at: i64) -> bool {
        self.admitted_until.is_some_and(|end| end <= at)
    }

    fn heard(&mut self, answer: &Answer, failover: Option<(i64, i64)>) {
        if let Some(standing) = &answer.standing {
            if standing.outside() {
                self.taken_back |= self.placed && !self.ran_out(answer.done_ms);
                self.placed = false;
            } else if !standing.closed {
                self.placed = true;
                self.placed_ever = true;
                self.placed_before_failover |=
                    failover.is_some_and(|(start, _)| answer.done_ms < start);
            }
            // Told admitted, and now (unbought, not run out) in line again
            // or admitted anew: the room forgot the admission it told
            // (which no longer buys: the commit refuses an admission the
            // room does not hold).
            if let Some((told, ends)) = &self.latest
                && *ends > answer.done_ms
                && self.accepted.is_empty()
                && !standing.bought
            {
                self.unadmitted |= standing.position.is_some()
                    || standing.admission.as_ref().is_some_and(|now| now != told);
            }
            if let Some(admission) = &standing.admission {
                let ends = standing.admission_ends_ms.unwrap_or(i64::MAX);
                self.latest = Some((admission.clone(), ends));
                self.admissions
                    .entry(admission.clone())
                    .or_insert((answer.done_ms, ends));
                self.admitted_until = self.admitted_until.max(Some(ends));
                self.readmitted |= self
                    .bought_with
                    .as_ref()
                    .is_some_and(|bought| bought != admission);
            }
        }
        if answer.asked == Asked::Purchase && may_have_bought(answer) {
            // The room frees the place at the purchase's commit, which
            // comes after its send: the hold ends at the send at the
            // latest, so no admission the room hands out for it overlaps.
            if let Some((_, held_until)) = answer
                .admission
                .as_ref()
                .and_then(|admission| self.admissions.get_mut(admission))
            {
                *held_until = (*held_until).min(answer.sent_ms);
            }
        }
        if answer.status == Some(202) {
            self.accepted.extend(answer.order_id);
            self.bought_with.clone_from(&answer.admission);
        }
        if answer.status == Some(409) && answer.error.as_deref() == Some("already_purchased") {
            self.named.extend(answer.order_id);
        }
        self.answered_after_failover |=
            answer.status.is_some() && failover.is_some_and(|(_, end)| answer.sent_ms >= end);
    }
}

/// Whether a purchase's answer leaves it possible that it bought: a
/// `202`, a `409` or `403` (bought already, or never will), a `503` that
/// names an order (in doubt), or no answer at all. Another `503` took
/// nothing, and its buyer still holds their admission.
fn may_have_bought(answer: &Answer) -> bool {
    match answer.status {
        None | Some(202 | 403 | 409) => true,
        Some(503) => answer.order_id.is_some(),
        Some(_) => false,
    }
}

/// The most buyers holding an admission told to them at one moment, and
/// that moment (ms from the run's start). A buyer holding two (a new one
/// told while the old had not run out) counts once.
fn most_holding(told: &BTreeMap<u32, Told>) -> (u64, i64) {
    let mut events = Vec::new();
    for buyer in told.values() {
        let mut held: Vec<(i64, i64)> = buyer
            .admissions
            .values()
            .copied()
            .filter(|(from, to)| from < to)
            .collect();
        held.sort_unstable();
        let mut merged: Vec<(i64, i64)> = Vec::new();
        for (from, to) in held {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        for (from, to) in merged {
            events.push((from, 1i64));
            events.push((to, -1));
        }
    }
    // At one moment, a hold that ends is gone before one that starts.
    events.sort_unstable();
    let (mut now, mut most, mut at) = (0i64, 0i64, 0i64);
    for (moment, change) in events {
        now += change;
        if now > most {
            (most, at) = (now, moment);
        }
    }
    (u64::try_from(most).unwrap_or(0), at)
}

/// The row and checks of the crowd: its `answers`, the roomed sale's
/// `orders` in PostgreSQL (`(id, buyer)`), whom the `room` held at the
/// end, the failover's window if the run had one, and how many buyers the
/// crowd had.
pub(crate) fn judge(
    answers: &[Answer],
    orders: &[(Uuid, String)],
    room: Room<'_>,
    failover: Option<&FaultWindow>,
    buyers: u32,
) -> (Vec<ChaosCheck>, FaultRow, CrowdSummary) {
    let window = failover.map(|w| {
        let ms = |d: std::time::Duration| i64::try_from(d.as_millis()).unwrap_or(i64::MAX);
        (ms(w.start), ms(w.end))
    });
    let mut in_order: Vec<&Answer> = answers.iter().collect();
    in_order.sort_by_key(|a| (a.buyer, a.sent_ms, a.done_ms));
    let mut told: BTreeMap<u32, Told> = BTreeMap::new();
    for answer in in_order {
        told.entry(answer.buyer).or_default().heard(answer, window);
    }
    // Told a place, never told otherwise since, and gone from the room:
    // taken back without a word to the buyer yet.
    for (n, buyer) in &mut told {
        buyer.taken_back |= buyer.placed && !room.held.contains(n) && !buyer.ran_out(room.read_ms);
    }
    let count = |pick: fn(&Told) -> bool| told.values().filter(|t| pick(t)).count() as u64;
    let (most, most_at) = most_holding(&told);

    let in_pg: HashSet<Uuid> = orders.iter().map(|(id, _)| *id).collect();
    // Every order a buyer was told they hold: a `202`'s, or one a `409
    // already_purchased` named (the load test's verifier holds both so).
    let promised: HashSet<Uuid> = told
        .values()
        .flat_map(|t| t.accepted.iter().chain(&t.named).copied())
        .collect();
    let lost = promised.difference(&in_pg).count() as u64;
    let mut orders_of: HashMap<&str, u32> = HashMap::new();
    for (_, buyer) in orders {
        *orders_of.entry(buyer.as_str()).or_default() += 1;
    }
    let doubled = told
        .iter()
        .filter(|(n, t)| t.accepted.len() > 1 || orders_of.get(buyer_id(**n).as_str()) > Some(&1))
        .count() as u64;
    let named: HashSet<Uuid> = answers.iter().filter_map(|a| a.order_id).collect();
    let untold = in_pg.difference(&named).count();
    let unanswered = answers
        .iter()
        .filter(|a| match a.status {
            None | Some(500) => true,
            Some(503) => !a.retry_after,
            Some(_) => false,
        })
        .count();
    let through = count(|t| t.placed_before_failover && t.answered_after_failover);
    // Under `replica`, a `200` or a `202` is told only on what a replica
    // confirmed: none can be sent after the freeze (and its settle) and
    // answered before a replica is back.
    let cut_off = window.map(|(frozen, _)| {
        let until = frozen + i64::try_from(CUT_OFF.as_millis()).unwrap_or(0) + DEAD_FOR_MS;
        (frozen + FROZEN_SETTLE_MS, until)
    });
    let told_cut_off = answers
        .iter()
        .filter(|a| matches!(a.status, Some(200 | 202)))
        .filter(|a| cut_off.is_some_and(|(from, to)| a.sent_ms >= from && a.done_ms <= to))
        .count() as u64;

    let summary = CrowdSummary {
        buyers,
        placed: count(|t| t.placed_ever),
        admitted: count(|t| !t.admissions.is_empty()),
        accepted: count(|t| !t.accepted.is_empty()),
        taken_back: count(|t| t.taken_back),
        most_admitted: most,
        max_active: ROOM.max_active,
        readmitted: count(|t| t.readmitted),
        unadmitted: count(|t| t.unadmitted),
        lost,
        told_cut_off,
        doubled,
    };
    let checks = vec![
        ChaosCheck::equal(TAKEN_BACK, 0, summary.taken_back),
        ChaosCheck {
            name: BEYOND_LIMIT,
            expected: format!("<= {} (the room's max_active)", ROOM.max_active),
            found: format!("{most} (at {:.1} s)", most_at as f64 / 1000.0),
            ok: most <= u64::from(ROOM.max_active),
        },
        ChaosCheck::equal(READMITTED, 0, summary.readmitted),
        ChaosCheck::equal(UNADMITTED, 0, summary.unadmitted),
        ChaosCheck::equal(LOST, 0, lost),
        ChaosCheck::equal(TOLD_CUT_OFF, 0, told_cut_off),
        ChaosCheck::equal(DOUBLE, 0, doubled),
        ChaosCheck::equal(UNTOLD, 0, untold),
        ChaosCheck::equal(UNANSWERED, 0, unanswered),
        ChaosCheck {
            name: THROUGH,
            expected: ">= 1".to_owned(),
            found: through.to_string(),
            ok: through >= 1,
        },
    ];
    let row = row(answers, window, lost, checks.iter().all(|c| c.ok));
    (checks, row, summary)
}

/// The crowd's line in the table: its answers, by what they said.
fn row(answers: &[Answer], window: Option<(i64, i64)>, lost: u64, held: bool) -> FaultRow {
    let with = |status: u16| answers.iter().filter(|a| a.status == Some(status)).count() as u64;
    let expected = [200, 202, 403, 409, 500, 503];
    let errors = answers
        .iter()
        .filter(|a| a.status.is_none_or(|s| !expected.contains(&s)))
        .count() as u64;
    let mut by_second = BTreeMap::new();
    for answer in answers {
        if matches!(answer.status, None | Some(500 | 503)) {
            *by_second
                .entry(u64::try_from(answer.sent_ms / 1000).unwrap_or(0))
                .or_insert(0u64) += 1;
        }
    }
    FaultRow {
        fault: ROW.to_owned(),
        requests: answers.len() as u64,
        accepted: with(202),
        errors,
        unavailable: with(503),
        internal: with(500),
        lost,
        dropped: 0,
        // From the failover's end to the first answer that told a place
        // or sold.
        recovered_after_ms: window.and_then(|(_, end)| {
            answers
                .iter()
                .filter(|a| a.sent_ms >= end && matches!(a.status, Some(200 | 202)))
                .map(|a| u64::try_from(a.sent_ms - end).unwrap_or(0))
                .min()
        }),
        failures_by_second: by_second.into_iter().collect(),
        ok: held && errors == 0 && !answers.is_empty(),
    }
}

#[cfg(test)]
mod tests;
