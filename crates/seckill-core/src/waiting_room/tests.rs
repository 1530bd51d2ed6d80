use super::*;

fn look(head: Option<u64>, drawn: u64) -> Standing {
    Standing {
        place: Place::Outside,
        waiting: 100,
        closed: false,
        observed_per_sec: None,
        now_ms: 1_000,
        head,
        drawn,
        line_full: false,
        active: 0,
        next_free_ms: None,
        born_ms: 1,
        confirmed: true,
    }
}

/// storefront.md: after the open, the wait is the place at the rate
/// the room actually admitted at; before a second of admissions, at
/// its setting; before the open, the time to the open comes first.
#[test]
fn the_wait_runs_at_the_rate_actually_admitted() {
    let fifo = room(RoomMode::Fifo);
    let mut waiting = Standing {
        place: Place::Waiting {
            number: 20,
            ahead: 19,
        },
        ..look(Some(1), 0)
    };
    // The setting: 10 a second, 20 admissions to go.
    assert_eq!(waiting.eta_secs(&fifo, 0), Some(2.0));
    // Abandoned buyers, a slow crowd: the room admits 4 a second.
    waiting.observed_per_sec = Some(4.0);
    assert_eq!(waiting.eta_secs(&fifo, 0), Some(5.0));
    // The open 30 s away (now_ms is 1,000).
    assert_eq!(waiting.eta_secs(&fifo, 31_000), Some(35.0));
}

#[test]
fn a_room_full_of_admitted_buyers_says_until_when_and_the_wait_counts_it() {
    let fifo = room(RoomMode::Fifo);
    let mut waiting = Standing {
        place: Place::Waiting {
            number: 4,
            ahead: 3,
        },
        active: 9,
        next_free_ms: Some(53_000),
        ..look(Some(1), 0)
    };
    // A place free: 4 admissions at 10 a second.
    assert_eq!(waiting.full_for_secs(&fifo), None);
    assert_eq!(waiting.eta_secs(&fifo, 0), Some(0.4));
    // All 10 taken: nothing moves before the first turn runs out, 52 s
    // from now, at the latest; that place is the head's, and each of the 3
    // ahead takes one admission after it.
    waiting.active = 10;
    assert_eq!(waiting.full_for_secs(&fifo), Some(52.0));
    let eta = waiting.eta_secs(&fifo, 0).expect("waiting");
    assert!((eta - 52.3).abs() < 1e-9, "{eta}");
    // The head waits exactly as long as the page's "at the latest in",
    // however slow the room was while full (before, 1 / the observed
    // rate more: "about 60 s" beside "at the latest in 46 s").
    waiting.place = Place::Waiting {
        number: 1,
        ahead: 0,
    };
    waiting.observed_per_sec = Some(0.07);
    assert_eq!(waiting.eta_secs(&fifo, 0), Some(52.0));
}

fn room(mode: RoomMode) -> RoomSettings {
    RoomSettings {
        mode,
        admit_per_sec: 10,
        max_active: 10,
        admission_secs: 60,
        max_line: None,
    }
}

#[test]
fn a_buyer_is_judged_from_a_look_only_beyond_the_reach_of_the_room_since() {
    let fifo = room(RoomMode::Fifo);
    let at_once = Duration::ZERO;
    // 10 a second: a second's worth at once, and one more.
    assert_eq!(look(Some(5), 0).of_number(15, &fifo, at_once), None);
    let far = look(Some(5), 0)
        .of_number(16, &fifo, at_once)
        .expect("far back");
    assert_eq!(
        far.place,
        Place::Waiting {
            number: 16,
            ahead: 11
        }
    );
    // An older look reaches further.
    assert_eq!(
        look(Some(5), 0).of_number(16, &fifo, Duration::from_millis(500)),
        None
    );
    assert_eq!(
        look(Some(5), 0)
            .of_number(40, &fifo, Duration::from_millis(500))
            .map(|s| s.now_ms),
        Some(1_500)
    );
    // Before the head (gone or admitted), nobody waiting, no number.
    assert_eq!(look(Some(50), 0).of_number(40, &fifo, at_once), None);
    assert_eq!(look(None, 0).of_number(40, &fifo, at_once), None);
    assert_eq!(look(Some(1), 0).of_number(0, &fifo, at_once), None);
}

#[test]
fn a_lotterys_buyers_are_asked_about_in_redis_while_a_drawn_one_leads() {
    let lottery = room(RoomMode::Lottery);
    let drawn_head = look(Some(12_345), 30);
    assert_eq!(
        drawn_head.of_number(999_999, &lottery, Duration::ZERO),
        None
    );
    assert_eq!(
        drawn_head.of_number(LOTTERY_LATE + 40, &lottery, Duration::ZERO),
        None
    );
    // Once the drawn are through, later joiners queue by arrival.
    let late_head = look(Some(LOTTERY_LATE + 1), 30);
    assert_eq!(
        late_head
            .of_number(LOTTERY_LATE + 40, &lottery, Duration::ZERO)
            .map(|s| s.place),
        Some(Place::Waiting {
            number: LOTTERY_LATE + 40,
            ahead: 39
        })
    );
}
