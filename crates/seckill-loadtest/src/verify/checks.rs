//! The checks read from PostgreSQL's snapshot and Redis' figures, each
//! against what the buyers were told: the promise (no oversell, or the
//! naive strategy's oversell), nothing lost, nothing invented, nobody
//! twice, and Redis in step with PostgreSQL. Pure functions of what the
//! verifier read (`mod.rs` reads it), so that each is tested on made-up
//! figures.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::{Check, Expect, QueueDepth, RunFacts, SaleSnapshot, check};

/// Buyers with more than one `202`.
pub(super) fn duplicate_buyers(facts: &RunFacts) -> usize {
    let mut wins: BTreeMap<&str, usize> = BTreeMap::new();
    for (user, _) in &facts.accepted {
        *wins.entry(user.as_str()).or_default() += 1;
    }
    wins.values().filter(|n| **n > 1).count()
}

/// The units the sale started with, as a count.
fn units(facts: &RunFacts) -> usize {
    usize::try_from(facts.stock).unwrap_or(0)
}

/// The promise itself: no more `202`s than units, or, for the naive
/// strategy, more; none when only PostgreSQL's word is checked.
pub(super) fn promise_check(facts: &RunFacts, expect: Expect) -> Option<Check> {
    let (accepted, units) = (facts.told().count(), units(facts));
    Some(match expect {
        Expect::Observe => return None,
        Expect::NoOversell => check(
            "accepted purchases (202) <= units",
            format!("<= {units}"),
            accepted,
            accepted <= units,
        ),
        Expect::Oversell => check(
            "the naive strategy oversold (202s > units)",
            format!("> {units}"),
            format!("{accepted} ({} too many)", oversold_by(facts)),
            accepted > units,
        ),
    })
}

/// Orders told to their buyers beyond the units: the `202`s, the orders
/// recovered by a retry, and the units sold before the run (an existing
/// sale's), less the units the sale had. What the promise check judges,
/// and the report calls "units sold beyond the stock".
pub(super) fn oversold_by(facts: &RunFacts) -> u64 {
    facts.told().count().saturating_sub(units(facts)) as u64
}

/// Every unit found a buyer, if there were buyers enough, and no more.
pub(super) fn confirmed_count_check(facts: &RunFacts, stored: &SaleSnapshot) -> Check {
    let expected = units(facts).min(facts.distinct_buyers);
    let confirmed = stored.confirmed_orders();
    check(
        "confirmed orders in PostgreSQL = min(units, distinct buyers)",
        expected,
        confirmed,
        confirmed == expected,
    )
}

/// One unit per buyer.
pub(super) fn double_orders_check(stored: &SaleSnapshot) -> Check {
    let doubled = stored
        .confirmed
        .values()
        .filter(|ids| ids.len() > 1)
        .count();
    check("buyers holding two orders", 0, doubled, doubled == 0)
}

/// The sale's `sold` counter agrees with its orders.
pub(super) fn sold_counter_check(stored: &SaleSnapshot) -> Check {
    let confirmed = stored.confirmed_orders();
    check(
        "sold counter = confirmed orders",
        confirmed,
        stored.sold,
        usize::try_from(stored.sold).is_ok_and(|sold| sold == confirmed),
    )
}

/// Nothing lost: every order id the buyers were promised is stored.
pub(super) fn lost_orders_check(facts: &RunFacts, stored: &SaleSnapshot) -> Check {
    let lost = lost_orders(facts, stored);
    check(
        "accepted orders missing from PostgreSQL",
        0,
        lost,
        lost == 0,
    )
}

/// Orders told to their buyers (`202`s, and orders recovered by a retry)
/// whose id PostgreSQL does not hold.
pub(super) fn lost_orders(facts: &RunFacts, stored: &SaleSnapshot) -> usize {
    facts
        .told()
        .filter(|(_, id)| !stored.all_ids.contains(id))
        .count()
}

/// A load test measures the race for the units, which ends in seconds;
/// an order cancelled for want of payment means the payment window
/// (SECKILL_PAYMENT_WINDOW_SECS) was shorter than the run, and the counts
/// of the other checks no longer describe the race.
pub(super) fn cancelled_orders_check(stored: &SaleSnapshot) -> Check {
    check(
        "orders cancelled by the payment window during the run",
        0,
        stored.cancelled,
        stored.cancelled == 0,
    )
}

/// The safe strategy never sends PostgreSQL an order it must refuse.
pub(super) fn rejected_orders_check(stored: &SaleSnapshot) -> Check {
    check("rejected orders", 0, stored.rejected, stored.rejected == 0)
}

/// Exactly the winners hold the units: each `202` (or order recovered by
/// a retry's `409`) is one confirmed order of its user, and no confirmed
/// order lacks one.
pub(super) fn exactly_the_202s_check(facts: &RunFacts, stored: &SaleSnapshot) -> Check {
    let promised: BTreeMap<&str, Uuid> = facts.told().map(|(u, id)| (u.as_str(), *id)).collect();
    let kept = stored
        .confirmed
        .iter()
        .all(|(user, ids)| ids.len() == 1 && promised.get(user.as_str()) == Some(&ids[0]))
        && promised.len() == stored.confirmed.len();
    check(
        "confirmed orders are exactly the 202s (nothing lost, nothing invented)",
        format!("{} orders, one per 202", promised.len()),
        format!(
            "{} orders of {} users",
            stored.confirmed_orders(),
            stored.confirmed.len()
        ),
        kept,
    )
}

/// Redis' stock counter agrees with PostgreSQL and never went below zero.
pub(super) fn redis_stock_check(
    facts: &RunFacts,
    stored: &SaleSnapshot,
    stock: Option<i64>,
) -> Check {
    let expected = facts.stock - stored.sold;
    check(
        "Redis stock = units - sold, never negative",
        expected,
        stock.map_or("missing".to_owned(), |s| s.to_string()),
        stock == Some(expected) && expected >= 0,
    )
}

/// Redis' holders are PostgreSQL's buyers, no more and no fewer, and each
/// is held for the order PostgreSQL holds for them: the order a buyer who
/// asks again is told of. A hold that names no order (empty) fails: only
/// the lab's broken strategies write one, and they are never held to this
/// check (`Expect::NoOversell` is for the correct strategies alone).
pub(super) fn redis_holds_check(stored: &SaleSnapshot, holds: &BTreeMap<String, String>) -> Check {
    let pg_holds: BTreeMap<String, String> = stored
        .confirmed
        .iter()
        .map(|(buyer, orders)| {
            let orders: Vec<String> = orders.iter().map(Uuid::to_string).collect();
            (buyer.clone(), orders.join(","))
        })
        .collect();
    let same_buyers = holds.keys().eq(pg_holds.keys());
    let same = same_buyers
        && holds
            .iter()
            .zip(&pg_holds)
            .all(|((_, held), (_, stored))| held == stored);
    check(
        "Redis buyers = PostgreSQL buyers",
        format!("{} buyers", pg_holds.len()),
        format!(
            "{} buyers{}",
            holds.len(),
            if same {
                ""
            } else if same_buyers && holds.values().any(String::is_empty) {
                ", some with no order"
            } else if same_buyers {
                ", some with another order"
            } else {
                ", different ones"
            }
        ),
        same,
    )
}

/// The worker did every job the run queued, and gave up on none.
pub(super) fn queue_checks(queue: QueueDepth) -> [Check; 2] {
    let left = queue.waiting + queue.in_flight;
    [
        check("queue empty (waiting + in flight)", 0, left, left == 0),
        check("dead-lettered jobs", 0, queue.dead, queue.dead == 0),
    ]
}
