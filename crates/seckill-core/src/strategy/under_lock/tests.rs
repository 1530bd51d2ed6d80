use super::*;
use crate::domain::PassKey;

/// A key for the passes' ids: any will do for deciding.
fn key() -> PassKey {
    PassKey::new(b"a test key".to_vec())
}

fn users(names: &[&str]) -> Vec<UserId> {
    names
        .iter()
        .map(|name| UserId::parse(name).expect("a buyer"))
        .collect()
}

fn kinds(outcomes: &[Outcome]) -> Vec<&'static str> {
    outcomes
        .iter()
        .map(|outcome| match outcome {
            Outcome::Accepted { .. } => "won",
            Outcome::SoldOut => "sold out",
            Outcome::AlreadyPurchased { .. } => "already",
            _ => "other",
        })
        .collect()
}

#[test]
fn a_batch_is_decided_in_arrival_order_against_the_units_left() {
    let buyers = users(&["ann", "bob", "cy", "dee"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 2,
        holding: vec![false, true, false, false],
        orders: vec![None; 4],
    };
    let (outcomes, jobs, on_commit) = decide_batch(PassIds::new(7, &key()), &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["won", "already", "won", "sold out"]);
    // bob held his unit before; dee is refused only because this
    // pass's winners took the last units.
    assert_eq!(on_commit, [true, false, true, true]);
    let winners: Vec<&str> = jobs.iter().map(|job| job.user_id.as_str()).collect();
    assert_eq!(winners, ["ann", "cy"]);
    assert!(jobs.iter().all(|job| job.sale_id == 7));
}

#[test]
fn a_buyer_twice_in_one_batch_takes_one_unit() {
    let buyers = users(&["ann", "ann", "bob"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 5,
        holding: vec![false, false, false],
        orders: vec![None; 3],
    };
    let (outcomes, jobs, on_commit) = decide_batch(PassIds::new(1, &key()), &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["won", "already", "won"]);
    assert_eq!(on_commit, [true, true, true]);
    assert_eq!(jobs.len(), 2);
}

#[test]
fn a_buyer_refused_for_want_of_stock_is_not_counted_as_holding() {
    let buyers = users(&["ann", "bob", "bob"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 1,
        holding: vec![false, false, false],
        orders: vec![None; 3],
    };
    let (outcomes, _, _) = decide_batch(PassIds::new(1, &key()), &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["won", "sold out", "sold out"]);
}

#[test]
fn a_sale_sold_out_before_the_pass_does_not_rest_on_its_commit() {
    let buyers = users(&["ann", "bob"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 0,
        holding: vec![false, true],
        orders: vec![None; 2],
    };
    let (outcomes, jobs, on_commit) = decide_batch(PassIds::new(1, &key()), &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["sold out", "already"]);
    assert!(jobs.is_empty());
    assert_eq!(on_commit, [false, false]);
}

/// What each `already purchased` answer names as the buyer's order.
fn named_orders(outcomes: &[Outcome]) -> Vec<Option<Uuid>> {
    outcomes
        .iter()
        .filter_map(|outcome| match outcome {
            Outcome::AlreadyPurchased { order_id } => Some(*order_id),
            _ => None,
        })
        .collect()
}

#[test]
fn a_buyer_who_asks_again_is_told_the_order_they_hold() {
    let buyers = users(&["ann", "bob", "bob"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let anns = Uuid::new_v4();
    let snapshot = Snapshot {
        stock_left: 5,
        holding: vec![true, false, false],
        orders: vec![Some(anns), None, None],
    };
    let (outcomes, jobs, _) = decide_batch(PassIds::new(1, &key()), &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["already", "won", "already"]);
    // ann's from Redis; bob's second request is told the order his
    // first request takes in this pass.
    assert_eq!(
        named_orders(&outcomes),
        [Some(anns), Some(jobs[0].order_id)]
    );
}

#[test]
fn an_order_the_room_refused_is_named_to_nobody() {
    let buyers = users(&["ann", "ann"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 5,
        holding: vec![false, false],
        orders: vec![None; 2],
    };
    let (mut outcomes, jobs, on_commit) = decide_batch(PassIds::new(1, &key()), &refs, &snapshot);
    // ann's admission had bought already: the commit refused her order.
    refuse(&mut outcomes, &on_commit, &jobs, &[0], SPENT);
    assert_eq!(kinds(&outcomes), ["already", "already"]);
    assert_eq!(named_orders(&outcomes), [None, None]);
}
