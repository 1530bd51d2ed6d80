use super::*;

/// A moment just longer than `limit` ago.
fn just_past(limit: Duration) -> Instant {
    Instant::now()
        .checked_sub(limit + Duration::from_millis(1))
        .expect("the machine has been up longer than that")
}

fn view() -> View {
    View {
        look: SingleFlight::default(),
        asked: Mutex::new(Instant::now()),
        buyers: Mutex::default(),
    }
}

/// A look reads at most `TRACKED_MAX` buyers of a room: past them, a
/// buyer the look cannot place is not tracked (and so is asked about
/// in Redis each time), while one tracked already stays tracked.
#[test]
fn a_look_reads_at_most_tracked_max_buyers() {
    let view = view();
    for n in 0..TRACKED_MAX + 5 {
        view.track(&format!("buyer-{n}"));
    }
    let (_, tracked) = view.to_send();
    assert_eq!(tracked.len(), TRACKED_MAX);
    assert!(tracked.contains(&"buyer-0".to_owned()));
    assert!(!tracked.contains(&format!("buyer-{TRACKED_MAX}")));
    // At the limit, a tracked buyer asking again is kept, their time
    // renewed (asked long ago, they would be dropped at the next look)...
    let long_ago = just_past(TRACKED_FOR);
    lock(&view.buyers)
        .tracked
        .insert("buyer-0".to_owned(), long_ago);
    view.track("buyer-0");
    let (_, tracked) = view.to_send();
    assert_eq!(tracked.len(), TRACKED_MAX);
    assert!(tracked.contains(&"buyer-0".to_owned()));
    // ...and a new one waits for a place to come free.
    view.track("late");
    assert!(!view.to_send().1.contains(&"late".to_owned()));
}

/// A tracked buyer who has not asked for `TRACKED_FOR` is read by
/// the looks no more, and frees their place for another; one answered
/// from a look since is still read.
#[test]
fn a_buyer_who_stopped_asking_is_read_no_more() {
    let view = view();
    let long_ago = just_past(TRACKED_FOR);
    for n in 0..TRACKED_MAX {
        view.track(&format!("buyer-{n}"));
    }
    for buyer in ["buyer-0", "buyer-1"] {
        lock(&view.buyers)
            .tracked
            .insert(buyer.to_owned(), long_ago);
    }
    view.answered("buyer-1", Place::Admitted { until_ms: 0 });
    let (_, tracked) = view.to_send();
    assert_eq!(tracked.len(), TRACKED_MAX - 1);
    assert!(!tracked.contains(&"buyer-0".to_owned()));
    assert!(tracked.contains(&"buyer-1".to_owned()));
    view.track("late");
    assert!(view.to_send().1.contains(&"late".to_owned()));
}

/// A buyer answered in line from a look is sent as seen with the next
/// look, once (so that Redis does not take them for gone); one
/// answered admitted or bought is not in line, and is not sent.
#[test]
fn a_buyer_answered_in_line_is_sent_as_seen_once() {
    let view = view();
    view.answered(
        "waiting",
        Place::Waiting {
            number: 7,
            ahead: 3,
        },
    );
    view.answered("admitted", Place::Admitted { until_ms: 0 });
    view.answered("bought", Place::Bought);
    assert_eq!(view.to_send().0, ["waiting"]);
    assert!(view.to_send().0.is_empty());
}

/// A look sends at most `SEEN_PER_LOOK` buyers seen, the first
/// answered first, and the rest with the next: the look's script stays
/// short however many buyers this instance answers, and nobody waits
/// behind later ones. A buyer asking again while queued is sent once.
#[test]
fn a_look_sends_the_oldest_seen_buyers_and_at_most_its_share() {
    let view = view();
    let in_line = Place::Waiting {
        number: 7,
        ahead: 3,
    };
    for n in 0..SEEN_PER_LOOK + 5 {
        view.answered(&format!("buyer-{n}"), in_line);
    }
    view.answered("buyer-0", in_line);
    let first = view.to_send().0;
    assert_eq!(first.len(), SEEN_PER_LOOK);
    assert_eq!(first[0], "buyer-0");
    assert_eq!(
        first[SEEN_PER_LOOK - 1],
        format!("buyer-{}", SEEN_PER_LOOK - 1)
    );
    view.answered("buyer-0", in_line);
    let next: Vec<String> = (SEEN_PER_LOOK..SEEN_PER_LOOK + 5)
        .map(|n| format!("buyer-{n}"))
        .chain(["buyer-0".to_owned()])
        .collect();
    assert_eq!(view.to_send().0, next);
    assert!(view.to_send().0.is_empty());
}

/// A buyer a look found out of line is asked about in Redis while
/// Redis finds them outside, not answered by their number between two
/// questions; one Redis places, or who stopped asking, no more; and
/// the view keeps at most `UNSEEN_MAX` such buyers.
#[test]
fn a_buyer_found_out_of_line_is_asked_about_in_redis_while_outside() {
    let view = view();
    view.unseen(vec!["gone".to_owned(), "admitted".to_owned()]);
    assert!(!view.ask_redis_about("here"));
    view.redis_found("gone", Place::Outside);
    assert!(view.ask_redis_about("gone"));
    assert!(view.ask_redis_about("gone"), "not answered by number next");
    view.redis_found("admitted", Place::Admitted { until_ms: 0 });
    assert!(!view.ask_redis_about("admitted"));
    let long_ago = just_past(UNSEEN_FOR);
    lock(&view.buyers)
        .unseen
        .insert("gone".to_owned(), long_ago);
    assert!(!view.ask_redis_about("gone"), "stopped asking");
    view.to_send();
    assert!(lock(&view.buyers).unseen.is_empty(), "dropped");
    view.unseen((0..=UNSEEN_MAX).map(|n| format!("gone-{n}")).collect());
    assert_eq!(lock(&view.buyers).unseen.len(), UNSEEN_MAX);
}
