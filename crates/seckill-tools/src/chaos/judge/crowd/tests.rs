//! The crowd's judge, on answers made up to break each promise.

use super::*;
use crate::chaos::crowd::Standing;

/// An answer of buyer `n` sent at `at` s and answered 100 ms later.
fn answer(n: u32, at: f64, asked: Asked, status: u16) -> Answer {
    let sent_ms = (at * 1000.0) as i64;
    Answer {
        buyer: n,
        asked,
        sent_ms,
        done_ms: sent_ms + 100,
        status: Some(status),
        retry_after: status == 503,
        error: None,
        standing: None,
        order_id: None,
        admission: None,
    }
}

fn waiting(n: u32, at: f64, position: u64) -> Answer {
    Answer {
        standing: Some(Standing {
            position: Some(position),
            ..Standing::default()
        }),
        ..answer(n, at, Asked::Status, 200)
    }
}

fn outside(n: u32, at: f64) -> Answer {
    Answer {
        standing: Some(Standing::default()),
        ..answer(n, at, Asked::Status, 200)
    }
}

/// Told admission `text`, which runs out at `ends` s.
fn admitted(n: u32, at: f64, text: &str, ends: f64) -> Answer {
    Answer {
        standing: Some(Standing {
            admission: Some(text.to_owned()),
            admission_ends_ms: Some((ends * 1000.0) as i64),
            ..Standing::default()
        }),
        ..answer(n, at, Asked::Status, 200)
    }
}

fn bought(n: u32, at: f64, with: &str, order: Uuid) -> Answer {
    Answer {
        admission: Some(with.to_owned()),
        order_id: Some(order),
        ..answer(n, at, Asked::Purchase, 202)
    }
}

/// [`judge`], with every buyer of `answers` in the room at 60 s.
fn judged(
    answers: &[Answer],
    orders: &[(Uuid, String)],
    failover: Option<&FaultWindow>,
) -> (Vec<ChaosCheck>, FaultRow, CrowdSummary) {
    let held: HashSet<u32> = answers.iter().map(|a| a.buyer).collect();
    let room = Room {
        held: &held,
        read_ms: 60_000,
    };
    judge(answers, orders, room, failover, held.len() as u32)
}

fn failed(name: &str, checks: &[ChaosCheck]) -> bool {
    !checks
        .iter()
        .find(|c| c.name == name)
        .expect("the check")
        .ok
}

#[test]
fn a_place_told_then_outside_is_taken_back_unless_its_admission_ran_out() {
    let (checks, row, _) = judged(&[waiting(0, 1.0, 5), outside(0, 2.0)], &[], None);
    assert!(failed(TAKEN_BACK, &checks));
    assert!(!row.ok);
    let ran_out = [admitted(0, 1.0, "a", 2.0), outside(0, 2.5)];
    let (checks, _, _) = judged(&ran_out, &[], None);
    assert!(!failed(TAKEN_BACK, &checks));
    // Outside before any place was told is a newcomer's answer.
    let (checks, _, _) = judged(&[outside(0, 1.0), waiting(0, 2.0, 1)], &[], None);
    assert!(!failed(TAKEN_BACK, &checks));
}

#[test]
fn a_place_told_that_the_room_no_longer_holds_is_taken_back_too() {
    let gone = |answers: &[Answer]| {
        let room = Room {
            held: &HashSet::new(),
            read_ms: 20_000,
        };
        judge(answers, &[], room, None, 1).0
    };
    assert!(failed(TAKEN_BACK, &gone(&[waiting(0, 1.0, 5)])));
    assert!(!failed(TAKEN_BACK, &gone(&[admitted(0, 1.0, "a", 11.0)])));
}

#[test]
fn more_buyers_holding_admissions_than_max_active_is_beyond_the_limit() {
    let n = ROOM.max_active;
    let at_once: Vec<Answer> = (0..=n).map(|b| admitted(b, 1.0, "a", 11.0)).collect();
    let (checks, _, summary) = judged(&at_once, &[], None);
    assert!(failed(BEYOND_LIMIT, &checks));
    assert_eq!(summary.most_admitted, u64::from(n) + 1);
    // The same, but one bought (its purchase sent) before the last was
    // told: a place freed, and filled.
    let mut in_turn = at_once.clone();
    in_turn[usize::try_from(n).expect("small")] = admitted(n, 3.0, "a", 13.0);
    in_turn.push(bought(0, 2.0, "a", Uuid::new_v4()));
    let (checks, _, _) = judged(&in_turn, &[], None);
    assert!(!failed(BEYOND_LIMIT, &checks), "{checks:?}");
    // A purchase refused with a plain 503 took nothing: still held.
    let mut unavailable = in_turn.clone();
    unavailable.last_mut().expect("the purchase").status = Some(503);
    unavailable.last_mut().expect("the purchase").order_id = None;
    let (checks, _, _) = judged(&unavailable, &[], None);
    assert!(failed(BEYOND_LIMIT, &checks));
}

#[test]
fn a_new_admission_after_a_202_is_told_again_and_the_same_one_is_not() {
    let order = Uuid::new_v4();
    let again = [
        admitted(0, 1.0, "a", 11.0),
        bought(0, 2.0, "a", order),
        admitted(0, 3.0, "a", 11.0),
    ];
    let (checks, _, _) = judged(&again, &[(order, buyer_id(0))], None);
    assert!(!failed(READMITTED, &checks));
    let mut anew = again.clone();
    anew[2] = admitted(0, 3.0, "b", 13.0);
    let (checks, _, _) = judged(&anew, &[(order, buyer_id(0))], None);
    assert!(failed(READMITTED, &checks));
}

#[test]
fn every_202_is_one_order_and_every_order_was_told() {
    let (first, second) = (Uuid::new_v4(), Uuid::new_v4());
    let told = [admitted(0, 1.0, "a", 11.0), bought(0, 2.0, "a", first)];
    let (checks, _, _) = judged(&told, &[(first, buyer_id(0))], None);
    assert!(
        checks.iter().all(|c| c.ok || c.name == THROUGH),
        "{checks:?}"
    );
    let (checks, row, _) = judged(&told, &[], None);
    assert!(failed(LOST, &checks));
    assert_eq!(row.lost, 1);
    let two = [(first, buyer_id(0)), (second, buyer_id(0))];
    let (checks, _, _) = judged(&told, &two, None);
    assert!(failed(DOUBLE, &checks));
    assert!(failed(UNTOLD, &checks));
}

/// A retry's `409 already_purchased` names the order its buyer holds:
/// an order so named that PostgreSQL never got is lost, as a `202`'s.
#[test]
fn an_order_a_409_named_that_never_reached_postgres_is_lost() {
    let order = Uuid::new_v4();
    let again = Answer {
        error: Some("already_purchased".to_owned()),
        order_id: Some(order),
        ..answer(0, 2.0, Asked::Purchase, 409)
    };
    let told = [admitted(0, 1.0, "a", 11.0), again];
    let (checks, _, _) = judged(&told, &[(order, buyer_id(0))], None);
    assert!(!failed(LOST, &checks), "{checks:?}");
    let (checks, row, summary) = judged(&told, &[], None);
    assert!(failed(LOST, &checks), "{checks:?}");
    assert_eq!((row.lost, summary.lost), (1, 1));
}

#[test]
fn a_503_with_retry_after_is_an_answer_and_a_500_or_none_is_not() {
    let fine = [answer(0, 1.0, Asked::Join, 503)];
    let (checks, _, _) = judged(&fine, &[], None);
    assert!(!failed(UNANSWERED, &checks));
    for broken in [
        Answer {
            retry_after: false,
            ..answer(0, 1.0, Asked::Join, 503)
        },
        answer(0, 1.0, Asked::Status, 500),
        Answer {
            status: None,
            ..answer(0, 1.0, Asked::Status, 200)
        },
    ] {
        let (checks, row, _) = judged(&[broken], &[], None);
        assert!(failed(UNANSWERED, &checks));
        assert!(!row.ok);
    }
}

#[test]
fn the_crowd_must_have_waited_through_the_failover() {
    let window = FaultWindow {
        fault: crate::chaos::Fault::RedisFailover,
        start: std::time::Duration::from_secs(3),
        end: std::time::Duration::from_secs(9),
        note: String::new(),
    };
    let across = [waiting(0, 1.0, 3), waiting(0, 10.0, 1)];
    let (checks, _, _) = judged(&across, &[], Some(&window));
    assert!(!failed(THROUGH, &checks));
    let after_only = [waiting(0, 9.5, 3), waiting(0, 10.0, 1)];
    let (checks, _, _) = judged(&after_only, &[], Some(&window));
    assert!(failed(THROUGH, &checks));
}

#[test]
fn an_admission_told_then_a_place_in_line_or_another_is_taken_back() {
    let back_in_line = [admitted(0, 1.0, "a", 11.0), waiting(0, 2.0, 3)];
    assert!(failed(UNADMITTED, &judged(&back_in_line, &[], None).0));
    let another = [admitted(0, 1.0, "a", 11.0), admitted(0, 2.0, "b", 12.0)];
    assert!(failed(UNADMITTED, &judged(&another, &[], None).0));
    // Run out first: a new turn, told fairly.
    let later = [admitted(0, 1.0, "a", 11.0), admitted(0, 12.0, "b", 22.0)];
    assert!(!failed(UNADMITTED, &judged(&later, &[], None).0));
}

#[test]
fn nothing_is_told_while_no_replica_can_hold_it() {
    let window = FaultWindow {
        fault: crate::chaos::Fault::RedisFailover,
        start: std::time::Duration::from_secs(3),
        end: std::time::Duration::from_secs(9),
        note: String::new(),
    };
    // Sent 400 ms after the freeze, answered 100 ms later.
    let told = [waiting(0, 1.0, 3), waiting(0, 3.4, 2)];
    assert!(failed(TOLD_CUT_OFF, &judged(&told, &[], Some(&window)).0));
    // Sent just after the freeze: a look confirmed before it may answer.
    let early = [waiting(0, 1.0, 3), waiting(0, 3.1, 2)];
    assert!(!failed(TOLD_CUT_OFF, &judged(&early, &[], Some(&window)).0));
    let refused = [waiting(0, 1.0, 3), answer(0, 3.4, Asked::Status, 503)];
    assert!(!failed(
        TOLD_CUT_OFF,
        &judged(&refused, &[], Some(&window)).0
    ));
}
