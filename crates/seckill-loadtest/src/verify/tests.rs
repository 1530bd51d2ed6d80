//! The checks that need no server, on made-up runs and snapshots. Those
//! that read PostgreSQL and Redis are run against real ones in
//! `crates/seckill/tests/it/verify.rs`.

use super::answers::{named_another_order_check, sold_out_told_true_check};
use super::checks::{oversold_by, redis_holds_check};
use super::*;

/// A sale of `stock` units, won by `winners` (user `w{i}`, a fresh order each).
fn facts(stock: i64, winners: usize) -> RunFacts {
    RunFacts {
        sale_id: 1,
        stock,
        distinct_buyers: 100,
        accepted: (0..winners)
            .map(|i| (format!("w{i}"), Uuid::now_v7()))
            .collect(),
        ..RunFacts::default()
    }
}

/// PostgreSQL holding one confirmed order for each of `facts`' winners.
fn snapshot(facts: &RunFacts) -> SaleSnapshot {
    SaleSnapshot {
        sold: facts.accepted.len() as i64,
        confirmed: facts
            .accepted
            .iter()
            .map(|(user, id)| (user.clone(), vec![*id]))
            .collect(),
        all_ids: facts.accepted.iter().map(|(_, id)| *id).collect(),
        rejected: 0,
        cancelled: 0,
    }
}

/// Redis' holds as a correct strategy writes them: each buyer's order.
fn holds_of(facts: &RunFacts) -> BTreeMap<String, String> {
    facts
        .accepted
        .iter()
        .map(|(user, id)| (user.clone(), id.to_string()))
        .collect()
}

/// A `sold_out` answered at 5 ms, before a purchase sent at 6 ms won: a
/// unit was left when it was told (none comes back during a run). One
/// answered after the last winning send is true.
#[test]
fn a_sold_out_answered_before_a_winning_purchase_was_sent_is_a_lie() {
    let mut run = facts(10, 10);
    run.won_sent_us = vec![1_000, 6_000, 2_000];
    run.sold_out_done_us = vec![7_000, 9_000];
    assert!(sold_out_told_true_check(&run).passed);
    run.sold_out_done_us.push(5_000);
    let lie = sold_out_told_true_check(&run);
    assert!(!lie.passed, "{lie:?}");
    assert_eq!(
        lie.actual,
        "1 (the first answered at 5.0 ms; a purchase sent at 6.0 ms won)"
    );
    // No winner: nothing shows a unit was left.
    run.won_sent_us.clear();
    assert!(sold_out_told_true_check(&run).passed);
}

/// A winner's `409 already_purchased` must name their `202`'s order; a
/// buyer with no `202` (told by the retry alone) is checked elsewhere.
#[test]
fn a_winners_409_naming_another_order_than_their_202_fails() {
    let mut run = facts(10, 2);
    let (winner, order) = run.accepted[0].clone();
    run.named = vec![(winner.clone(), order), ("no-202".into(), Uuid::now_v7())];
    assert!(named_another_order_check(&run).passed);
    run.named.push((winner, Uuid::now_v7()));
    let wrong = named_another_order_check(&run);
    assert!(!wrong.passed, "{wrong:?}");
    assert_eq!(wrong.actual, "1");
}

/// Under `no-oversell` (the correct strategies) every hold names its
/// buyer's order: one that names none is as wrong as one naming another.
#[test]
fn a_redis_hold_that_names_no_order_fails_the_buyers_check() {
    let run = facts(5, 3);
    let stored = snapshot(&run);
    let mut holds = holds_of(&run);
    assert!(redis_holds_check(&stored, &holds).passed);
    holds.insert(run.accepted[1].0.clone(), String::new());
    let check = redis_holds_check(&stored, &holds);
    assert!(!check.passed, "{check:?}");
    assert_eq!(check.actual, "3 buyers, some with no order");
}

/// An existing sale (`--sale`) had 4 of its 10 units sold before the run,
/// whose 7 `202`s make 11 orders: one beyond the stock, though the run's
/// own `202`s (7) are fewer than the units.
#[test]
fn units_sold_beyond_the_stock_count_those_sold_before_the_run() {
    let run = facts(10, 11);
    assert_eq!(oversold_by(&run), 1);
    assert_eq!(oversold_by(&facts(10, 10)), 0);
    let mut recovered = facts(10, 10);
    recovered.recovered = vec![("late".into(), Uuid::now_v7())];
    assert_eq!(oversold_by(&recovered), 1);
}
