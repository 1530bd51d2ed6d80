//! An instance answers the buyers far back in a waiting room's line from
//! its own look at the room (`seckill-web/src/room_view.rs`): a crowd
//! polling its places costs Redis one visit per moment, not one per
//! answer; the answers are the places Redis holds; and the buyers so
//! answered still count as asking, so the room never takes them for gone.

use std::time::Duration;

use serde_json::Value;

use crate::helpers::{Monitor, Options, TestApp, eventually, spawn_app_with};
use crate::room_page::{page, text_of};
use crate::waiting_room::{admission, admitted, buy, fifo, joined, lose_the_room, sale_with_room};
use crate::waiting_room::{standing, status_at, ticket};

/// A sale opening in ten minutes (nobody is admitted meanwhile), with
/// `count` buyers in line; their tickets, in order.
async fn a_long_line(app: &TestApp, count: usize) -> (i64, Vec<String>) {
    let sale = sale_with_room(app, 1, 600, fifo(1, 1)).await;
    let mut tickets = Vec::new();
    for n in 0..count {
        let standing = joined(app, sale, &format!("buyer-{n}")).await;
        tickets.push(standing["ticket"].as_str().expect("a ticket").to_owned());
    }
    (sale, tickets)
}

/// Runs of the room's script (each runs one `ZRANGE` of the line) among
/// the commands `monitor` saw.
fn visits(commands: &[Vec<String>]) -> usize {
    commands
        .iter()
        .filter(|command| {
            command
                .first()
                .is_some_and(|c| c.eq_ignore_ascii_case("zrange"))
        })
        .count()
}

#[tokio::test]
async fn twenty_buyers_far_back_asking_at_once_cost_redis_one_look_and_see_their_own_places() {
    let app = spawn_app_with(Options::default()).await;
    let (sale, tickets) = a_long_line(&app, 40).await;
    let far: Vec<&String> = tickets[20..].iter().collect();
    let mut monitor = Monitor::start(app.scratch.redis_url(), &app.keys(sale).room.line).await;
    let answers: Vec<Value> =
        futures::future::join_all(far.iter().map(|ticket| standing(&app, sale, ticket))).await;
    let commands = monitor.until_now().await;
    let seen = visits(&commands);
    for (n, answer) in answers.iter().enumerate() {
        let place = 21 + n as u64;
        assert_eq!(
            (
                answer["position"].as_u64(),
                answer["ahead"].as_u64(),
                answer["waiting"].as_u64()
            ),
            (Some(place), Some(place - 1), Some(40)),
            "{answer}"
        );
        // The ticket is answered back as it came.
        assert_eq!(answer["ticket"].as_str(), Some(far[n].as_str()), "{answer}");
    }
    // And not set again as a cookie: it is the one the request carried.
    let again = status_at(&app.address, sale, far[0]).await;
    assert_eq!(again.status(), 200);
    assert!(
        again.headers().get("set-cookie").is_none(),
        "{:?}",
        again.headers()
    );
    // One look, shared; a second only if the answers straddled its 200 ms.
    assert!(
        (1..=2).contains(&seen),
        "{seen} runs of the script for 20 answers"
    );
}

/// `count` questions at once with `ticket`, on `app`: their answers.
async fn asked_at_once(app: &TestApp, sale: i64, ticket: &str, count: usize) -> Vec<Value> {
    futures::future::join_all((0..count).map(|_| standing(app, sale, ticket))).await
}

/// The buyers whose place their number does not tell (the next in line,
/// one admitted) are answered from the instance's look too, once they
/// have asked once: a crowd at the head of the line costs Redis a look
/// every 200 ms, not a script per question. (Before, each of their
/// questions ran `room_visit.lua`: 40 questions, 40 runs.) And a buyer
/// who buys through the instance is told so at once, not "admitted" from
/// a look taken before the purchase.
#[tokio::test]
async fn the_next_in_line_and_an_admitted_buyer_are_answered_from_the_look_too() {
    let app = spawn_app_with(Options::default()).await;
    // Open at once, one admitted at a time: buyer-0 is admitted within a
    // second and holds the only place, buyer-1 is next.
    let sale = sale_with_room(&app, 5, 0, fifo(1, 1)).await;
    let mut tickets = Vec::new();
    for n in 0..3 {
        tickets.push(ticket(&joined(&app, sale, &format!("buyer-{n}")).await));
    }
    let (first, next) = (&tickets[0], &tickets[1]);
    admitted(&app, sale, first).await;
    assert_eq!(standing(&app, sale, next).await["position"], 1);
    // Both asked once; the next look, 200 ms on, reads where they stand.
    tokio::time::sleep(Duration::from_millis(250)).await;

    let mut monitor = Monitor::start(app.scratch.redis_url(), &app.keys(sale).room.line).await;
    let (nexts, firsts) = tokio::join!(
        asked_at_once(&app, sale, next, 20),
        asked_at_once(&app, sale, first, 20)
    );
    let runs = visits(&monitor.until_now().await);
    for answer in &nexts {
        assert_eq!(
            (answer["position"].as_u64(), answer["ahead"].as_u64()),
            (Some(1), Some(0)),
            "{answer}"
        );
    }
    for answer in &firsts {
        assert_eq!(answer["admitted"], true, "{answer}");
        assert!(
            answer["admission_expires_in_secs"].as_f64() > Some(50.0),
            "{answer}"
        );
    }
    assert!(
        (1..=2).contains(&runs),
        "{runs} runs of the script for 40 answers"
    );

    // The admission told from the look buys, and the buyer's next answer
    // (from a look that may have begun before the purchase) says bought.
    let answer = buy(&app, sale, "buyer-0", Some(admission(&firsts[0]))).await;
    assert_eq!(answer.status(), 202);
    let after = standing(&app, sale, first).await;
    assert_eq!(
        (&after["bought"], &after["admitted"]),
        (&Value::Bool(true), &Value::Bool(false)),
        "{after}"
    );
    // And the next in line is admitted in the place it freed, within the
    // look's 200 ms and the room's pace.
    admitted(&app, sale, next).await;
}

/// A page without JavaScript reloads itself every second while its buyer
/// waits: near the head too, each reload is answered from the instance's
/// look, and shows the place Redis holds. (Before, every reload ran a
/// visit of its own: 10 reloads, 10 runs.)
#[tokio::test]
async fn the_sale_page_of_the_next_in_line_reloading_costs_no_script_of_its_own() {
    let app = spawn_app_with(Options::default()).await;
    let sale = sale_with_room(&app, 5, 600, fifo(1, 1)).await;
    let first = ticket(&joined(&app, sale, "buyer-0").await);
    let cookie = format!("seckill_ticket_{sale}={first}");
    assert_eq!(
        text_of(&page(&app, sale, Some(&cookie)).await, "room-position"),
        "1"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;

    let mut monitor = Monitor::start(app.scratch.redis_url(), &app.keys(sale).room.line).await;
    let pages = futures::future::join_all((0..10).map(|_| page(&app, sale, Some(&cookie)))).await;
    let runs = visits(&monitor.until_now().await);
    for html in &pages {
        assert!(html.contains(r#"data-state="waiting""#));
        assert_eq!(text_of(html, "room-position"), "1");
        assert_eq!(text_of(html, "room-count"), "1");
    }
    assert!(
        (1..=2).contains(&runs),
        "{runs} runs of the script for 10 pages"
    );
}

#[tokio::test]
async fn a_buyer_answered_from_the_instances_look_is_noted_as_seen_in_redis() {
    let app = spawn_app_with(Options::default()).await;
    let (sale, tickets) = a_long_line(&app, 30).await;
    let last = "buyer-29";
    let seen_at = || async {
        let mut redis = app.redis_conn().await;
        let at: Option<i64> = redis::cmd("HGET")
            .arg(&app.keys(sale).room.seen)
            .arg(last)
            .query_async(&mut redis)
            .await
            .expect("HGET seen");
        at.expect("a buyer in line has been seen")
    };
    let joined_at = seen_at().await;
    // Asked, and answered from a look, the buyer is sent as seen with the
    // next look, which the next question after 200 ms makes.
    eventually(
        Duration::from_secs(10),
        "the buyer noted as seen again",
        || async {
            standing(&app, sale, &tickets[29]).await;
            seen_at().await > joined_at
        },
    )
    .await;
}

/// A line Redis lost (a flush, a failover under `local`) and began again
/// from number 1, with new buyers in it: a ticket of the old line, far
/// back in it, is no place in the new one. Its buyer is told they are
/// outside the room, to join again. (Before, the instance's look took the
/// old ticket's number for a place in the new line: "number 30, 29 ahead"
/// in a line of 5.)
#[tokio::test]
async fn a_ticket_of_a_line_redis_lost_is_no_place_in_the_line_begun_again() {
    let app = spawn_app_with(Options::default()).await;
    let (sale, tickets) = a_long_line(&app, 30).await;
    lose_the_room(&app, sale).await;
    for n in 0..5 {
        joined(&app, sale, &format!("newcomer-{n}")).await;
    }
    // Twice: the first may be the look's own moment, the second is
    // answered while the look is fresh.
    for _ in 0..2 {
        let old = standing(&app, sale, &tickets[29]).await;
        assert_eq!(old["position"], Value::Null, "{old}");
        assert_eq!(old["admitted"], false, "{old}");
        assert_eq!(old["waiting"], 5, "{old}");
    }
}
