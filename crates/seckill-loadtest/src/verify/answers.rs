//! What the buyers were told beside their `202`s, held to the truth.
//!
//! A `202` is checked against PostgreSQL (`checks.rs`); the refusals
//! cannot be, but two of them can be caught lying from the answers alone:
//!
//! - a `sold_out` told while a unit was left. During a load test no unit
//!   comes back (an order cancelled by the payment window fails its own
//!   check, and nothing else returns a unit: a fenced or voided pass never
//!   took one). So a purchase that won took a unit that was there all
//!   along, since before its send. A `sold_out` whose answer was in before
//!   that send was told while the unit was still there.
//! - a `409 already_purchased` naming another order than the buyer's
//!   `202`: one of the two answers is false.
//!
//! The times are the generator's, on one clock: a `sold_out` counted
//! here was decided before its answer was in, and the winning purchase
//! reached the server after it was sent, so the order of the two on the
//! server is certain.

use std::collections::{BTreeMap, BTreeSet};

use uuid::Uuid;

use super::{Check, RunFacts, check};

/// No `sold_out` was answered before a purchase that won was sent.
pub(super) fn sold_out_told_true_check(facts: &RunFacts) -> Check {
    let last_win = facts.won_sent_us.iter().copied().max();
    let early: Vec<u64> = facts
        .sold_out_done_us
        .iter()
        .copied()
        .filter(|done| last_win.is_some_and(|sent| *done < sent))
        .collect();
    let found = match (early.iter().min(), last_win) {
        (Some(first), Some(sent)) => format!(
            "{} (the first answered at {:.1} ms; a purchase sent at {:.1} ms won)",
            early.len(),
            *first as f64 / 1_000.0,
            sent as f64 / 1_000.0
        ),
        _ => "0".to_owned(),
    };
    check(
        "told sold out while a unit was left (a sold_out answered before a winning purchase was sent)",
        0,
        found,
        early.is_empty(),
    )
}

/// A winner's `409 already_purchased` names the order of their `202`.
pub(super) fn named_another_order_check(facts: &RunFacts) -> Check {
    let mut won: BTreeMap<&str, BTreeSet<Uuid>> = BTreeMap::new();
    for (user, order) in &facts.accepted {
        won.entry(user.as_str()).or_default().insert(*order);
    }
    let wrong = facts
        .named
        .iter()
        .filter(|(user, order)| {
            won.get(user.as_str())
                .is_some_and(|orders| !orders.contains(order))
        })
        .count();
    check(
        "409s naming another order than the buyer's 202",
        0,
        wrong,
        wrong == 0,
    )
}
