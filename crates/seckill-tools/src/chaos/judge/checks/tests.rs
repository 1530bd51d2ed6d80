use super::*;

fn told(status: Option<u16>, retry_after: bool) -> Sample {
    Sample {
        user: 0,
        outcome: AnswerKind::Error,
        order_id: None,
        unconfirmed: false,
        instance: None,
        status,
        retry_after,
        intended_us: 0,
        sent_us: 0,
        done_us: 0,
    }
}

fn naming(outcome: AnswerKind, status: u16, order: Uuid) -> Sample {
    Sample {
        outcome,
        order_id: Some(order),
        ..told(Some(status), status == 503)
    }
}

/// A `409 already_purchased` names the order its buyer holds: one
/// PostgreSQL never got is lost, as a `202`'s would be. An order a
/// `503 unconfirmed` named is in doubt, not lost.
#[test]
fn an_order_named_by_a_409_that_never_reached_postgres_is_lost() {
    let (won, named, in_doubt) = (Uuid::now_v7(), Uuid::now_v7(), Uuid::now_v7());
    let run = RunData {
        samples: vec![
            naming(AnswerKind::Won, 202, won),
            naming(AnswerKind::Duplicate, 409, named),
            naming(AnswerKind::Busy, 503, in_doubt),
        ],
        ..RunData::default()
    };
    let plan = Plan::new(1, 1, 0.0, Vec::new());
    let stored = [(won, plan.user_id(0), OrderStatus::Confirmed)];
    let key = PassKey::new(b"a key".to_vec());
    let promised = promised(&plan, &run, &stored, (&Wiped::default(), &key));
    assert_eq!(promised.lost, HashSet::from([named]));
    assert_eq!(promised.unconfirmed, HashSet::from([in_doubt]));
}

/// A `500`, and a `503` that does not say when to try again, are each
/// counted; a `503` with `Retry-After`, a refusal, and no answer at
/// all (judged elsewhere) are not.
#[test]
fn a_500_and_a_503_without_retry_after_are_dishonest_answers() {
    let samples = [
        told(Some(503), true),
        told(Some(503), false),
        told(Some(503), false),
        told(Some(500), true),
        told(Some(409), false),
        told(None, false),
    ];
    assert_eq!(dishonest(&samples), (1, 2));
}

/// A request with no answer may have made one order its buyer never
/// heard of: it excuses one of that buyer's untold orders, not every one
/// (before, one unanswered request excused them all). An order named only
/// by a later `409` was made by a request whose answer did not name it,
/// and uses that excuse up. On a cluster (`strict`) nothing is excused.
#[test]
fn an_unanswered_request_excuses_one_untold_order_of_its_buyer() {
    let [told, first, second, other, named] = [(); 5].map(|()| Uuid::now_v7());
    let order = |id, user: &str, status| (id, user.to_owned(), status);
    let orders = [
        order(told, "ann", OrderStatus::Confirmed),
        order(first, "bob", OrderStatus::Cancelled),
        order(second, "bob", OrderStatus::Confirmed),
        order(other, "cy", OrderStatus::Confirmed),
    ];
    let unanswered = HashMap::from([("bob".to_owned(), 1), ("dee".to_owned(), 3)]);
    let answered = |id: &Uuid| *id == told;
    let by_409 = |id: &Uuid| *id == named;
    assert_eq!(untold(&orders, (answered, by_409), Some(&unanswered)), 2);
    assert_eq!(untold(&orders, (answered, by_409), None), 3);
    let twice = HashMap::from([("bob".to_owned(), 2)]);
    assert_eq!(untold(&orders, (answered, by_409), Some(&twice)), 1);

    // Bob's unanswered request made the order a `409` named later: his
    // other order has no excuse left.
    let orders = [
        order(named, "bob", OrderStatus::Cancelled),
        order(second, "bob", OrderStatus::Confirmed),
    ];
    assert_eq!(untold(&orders, (answered, by_409), Some(&unanswered)), 1);
    assert_eq!(untold(&orders, (answered, by_409), Some(&twice)), 0);
}
