use super::*;

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
            Outcome::AlreadyPurchased => "already",
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
    };
    let (outcomes, jobs, on_commit) = decide_batch(7, &refs, &snapshot);
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
    };
    let (outcomes, jobs, on_commit) = decide_batch(1, &refs, &snapshot);
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
    };
    let (outcomes, _, _) = decide_batch(1, &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["won", "sold out", "sold out"]);
}

#[test]
fn a_sale_sold_out_before_the_pass_does_not_rest_on_its_commit() {
    let buyers = users(&["ann", "bob"]);
    let refs: Vec<&UserId> = buyers.iter().collect();
    let snapshot = Snapshot {
        stock_left: 0,
        holding: vec![false, true],
    };
    let (outcomes, jobs, on_commit) = decide_batch(1, &refs, &snapshot);
    assert_eq!(kinds(&outcomes), ["sold out", "already"]);
    assert!(jobs.is_empty());
    assert_eq!(on_commit, [false, false]);
}
