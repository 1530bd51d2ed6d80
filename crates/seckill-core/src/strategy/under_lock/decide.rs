//! Steps 1 and 2 of a pass, decided in the app: who of the pass's buyers
//! takes a unit, and what the others are told. Pure, so unit-tested
//! (`tests.rs`).

use std::collections::HashMap;

use uuid::Uuid;

use crate::domain::{OrderJob, PassIds, UserId};
use crate::store::Snapshot;
use crate::strategy::{Decision, Outcome, decide};

/// Steps 1 and 2 for a batch, in arrival order: each buyer is decided
/// against the units the ones before left, and a buyer who appears twice
/// takes at most one unit. Returns one outcome per buyer, whether each
/// outcome holds only once this pass's commit lands (a winner; a buyer
/// refused because a winner of this pass took the unit or was the same
/// buyer), and the orders to
/// write. Pure, so it is unit-tested.
pub(super) fn decide_batch(
    mut pass: PassIds<'_>,
    users: &[&UserId],
    snapshot: &Snapshot,
) -> (Vec<Outcome>, Vec<OrderJob>, Vec<bool>) {
    let mut left = snapshot.stock_left;
    // The buyers this pass takes a unit for, and the order of each: a
    // buyer's second request in the pass is told that order.
    let mut taken_here: HashMap<&str, Uuid> = HashMap::new();
    let mut jobs = Vec::new();
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

/// What a buyer whose order the commit refused as a spent admission is
/// told: already purchased (in a room, a buyer buys once), with no order
/// (the API answers `403 not_admitted` `used`).
pub(super) const SPENT: Outcome = Outcome::AlreadyPurchased { order_id: None };

/// The commit refused the orders `refused` (indexes into `jobs`): the
/// room would not let their buyers' admissions buy (spent, or not held).
/// Each such buyer is told `told`, and the buyers refused as sold out only
/// because a refused order was counted before them are told to retry
/// (busy), since its unit is still there.
pub(super) fn refuse(
    outcomes: &mut [Outcome],
    on_commit: &[bool],
    jobs: &[OrderJob],
    refused: &[usize],
    told: Outcome,
) {
    if refused.is_empty() {
        return;
    }
    for (index, job) in jobs.iter().enumerate() {
        if !refused.contains(&index) {
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
                *outcome = told;
            }
        }
    }
    for (outcome, on_commit) in outcomes.iter_mut().zip(on_commit) {
        if *on_commit && *outcome == Outcome::SoldOut {
            *outcome = Outcome::Busy;
        }
    }
}
