//! A waiting room seen: a buyer who stops asking is dropped as abandoned
//! and the next admitted in their place; `/metrics` counts every state of
//! a room driven through the API; the live page shows the room.
//!
//! The apps here take a buyer for gone after 1 s without asking
//! (`Options::room_abandon`), so that abandonment takes a second, not the
//! default half minute; whoever must keep their place asks in a loop.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::time::Duration;

use seckill_core::waiting_room::{self, RoomFigures};
use serde_json::{Value, json};

use crate::helpers::{Options, TestApp, eventually, spawn_app_with};
use crate::live::LiveStream;
use crate::waiting_room::{buy, joined, standing, ticket};

/// How long a buyer may go without asking, in these tests.
const ABANDON: Duration = Duration::from_secs(1);

async fn app_with_short_abandon() -> TestApp {
    spawn_app_with(Options {
        room_abandon: ABANDON,
        ..Options::default()
    })
    .await
}

/// A sale of `stock` with a `fifo` room admitting 50 a second, at most
/// `max_active` at once, each for `admission_secs`; it opens `opens_in`
/// seconds from now.
async fn room_sale(
    app: &TestApp,
    stock: i64,
    opens_in: i64,
    max_active: u32,
    admission_secs: u32,
) -> i64 {
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(opens_in);
    app.create_sale_with(json!({
        "name": "Watched room", "stock": stock, "price_cents": 100, "starts_at": starts_at,
        "waiting_room": {"mode": "fifo", "admit_per_sec": 50, "max_active": max_active,
                         "admission_secs": admission_secs},
    }))
    .await
}

/// A room's buyers, by name, with their tickets.
struct Room<'a> {
    app: &'a TestApp,
    sale: i64,
    tickets: BTreeMap<&'static str, String>,
}

impl<'a> Room<'a> {
    /// `buyers` join sale's room, in this order.
    async fn joined(app: &'a TestApp, sale: i64, buyers: &[&'static str]) -> Self {
        let mut tickets = BTreeMap::new();
        for buyer in buyers {
            tickets.insert(*buyer, ticket(&joined(app, sale, buyer).await));
        }
        Self { app, sale, tickets }
    }

    /// Where `buyer` stands now. A visit: it keeps them in line.
    async fn standing(&self, buyer: &str) -> Value {
        standing(self.app, self.sale, &self.tickets[buyer]).await
    }

    /// Ask as each of `askers` (buyers keeping their place), again and
    /// again, until `whom` (one of them) is admitted; their admission.
    async fn ask_until_admitted(&self, askers: &[&str], whom: &str) -> String {
        let admission = RefCell::new(None);
        let what = format!("{whom} to be admitted");
        eventually(Duration::from_secs(30), &what, || async {
            for buyer in askers {
                let now = self.standing(buyer).await;
                if *buyer == whom && now["admitted"] == true {
                    *admission.borrow_mut() = now["admission"].as_str().map(str::to_owned);
                }
            }
            admission.borrow().is_some()
        })
        .await;
        admission.into_inner().expect("admitted")
    }

    /// `buyer` buys with their admission: 202.
    async fn buys(&self, buyer: &str, admission: &str) {
        let answer = buy(self.app, self.sale, buyer, Some(admission)).await;
        assert_eq!(answer.status(), 202, "{buyer} buys");
    }

    async fn figures(&self) -> RoomFigures {
        waiting_room::figures(&self.app.store, self.sale)
            .await
            .expect("the room's figures")
    }
}

#[tokio::test]
async fn a_buyer_who_stops_asking_is_dropped_as_abandoned_and_the_next_is_admitted_in_their_place()
{
    let app = app_with_short_abandon().await;
    // One admitted at a time; the room opens once `gone` is stale.
    let sale = room_sale(&app, 10, 3, 1, 60).await;
    let room = Room::joined(&app, sale, &["gone", "stays", "patient"]).await;
    // `gone` never asks again; the others do, and `stays` is admitted
    // first although `gone` was ahead.
    let admission = room
        .ask_until_admitted(&["stays", "patient"], "stays")
        .await;
    let gone = room.standing("gone").await;
    assert_eq!(
        (gone["admitted"].clone(), gone["position"].clone()),
        (json!(false), Value::Null),
        "gone is out of the room: {gone}"
    );
    assert_eq!(
        room.figures().await,
        RoomFigures {
            waiting: 1,
            admitted: 1,
            admissions: 1,
            abandoned: 1,
            ..RoomFigures::default()
        }
    );
    // `patient` has been in line far longer than the abandon time, asking
    // all along: when `stays` buys, `patient`'s turn comes, not a drop.
    room.buys("stays", &admission).await;
    room.ask_until_admitted(&["patient"], "patient").await;
    assert_eq!(
        room.figures().await,
        RoomFigures {
            waiting: 0,
            admitted: 1,
            bought: 1,
            admissions: 2,
            expired: 0,
            abandoned: 1,
        }
    );
    // Nobody is in line: nothing is kept of when they were seen.
    let mut redis = app.redis_conn().await;
    let seen: u64 = redis::cmd("HLEN")
        .arg(&app.keys(sale).room.seen)
        .query_async(&mut redis)
        .await
        .expect("the seen set");
    assert_eq!(seen, 0, "seen entries outlive their buyers' place in line");
}

/// The `seckill_room_buyers` lines of a scrape, by state.
pub(crate) fn room_buyers(scrape: &str) -> BTreeMap<String, i64> {
    scrape
        .lines()
        .filter_map(|line| line.strip_prefix("seckill_room_buyers{state=\""))
        .filter_map(|rest| {
            let (state, value) = rest.split_once("\"} ")?;
            Some((state.to_owned(), value.trim().parse().ok()?))
        })
        .collect()
}

#[tokio::test]
async fn metrics_count_a_rooms_waiting_active_bought_expired_and_abandoned_buyers() {
    let app = app_with_short_abandon().await;
    // One admitted at a time, for the shortest admission (10 s).
    let sale = room_sale(&app, 10, 3, 1, 10).await;
    let buyers = [
        "gone-1", "gone-2", "ann", "bob", "cid", "dan", "eve", "fay", "gus",
    ];
    let room = Room::joined(&app, sale, &buyers).await;
    let waiting = ["dan", "eve", "fay", "gus"];
    // At the open, the two who never asked again are dropped; ann is
    // admitted and buys, then bob; cid lets his admission run out.
    let everyone = ["ann", "bob", "cid", "dan", "eve", "fay", "gus"];
    let ann = room.ask_until_admitted(&everyone, "ann").await;
    room.buys("ann", &ann).await;
    let bob = room.ask_until_admitted(&everyone[1..], "bob").await;
    room.buys("bob", &bob).await;
    room.ask_until_admitted(&everyone[2..], "cid").await;
    // cid asks no more; his admission runs out and dan's turn comes.
    room.ask_until_admitted(&waiting, "dan").await;
    let expected = BTreeMap::from(
        [
            ("waiting", 3),
            ("admitted", 1),
            ("bought", 2),
            ("admissions", 4),
            ("expired", 1),
            ("abandoned", 2),
        ]
        .map(|(state, n)| (state.to_owned(), n)),
    );
    // The registry is the test process', shared with other tests' apps: a
    // scrape of theirs may reset the rooms' figures during ours.
    let last = RefCell::new(BTreeMap::new());
    eventually(
        Duration::from_secs(10),
        "/metrics to count the room",
        || async {
            *last.borrow_mut() = room_buyers(&app.get_text("/metrics").await);
            *last.borrow() == expected
        },
    )
    .await;
}

#[tokio::test]
async fn the_live_page_shows_a_rooms_figures_and_a_sale_without_a_room_shows_none() {
    let app = app_with_short_abandon().await;
    let plain = app.create_sale(1).await;
    let sale = room_sale(&app, 1, 0, 2, 60).await;
    let html = app.get_text(&format!("/sales/{sale}/live")).await;
    assert!(html.contains("Waiting room"), "{html}");
    for id in ["room-waiting", "room-active", "room-bought", "room-expired"] {
        assert!(html.contains(&format!(r#"id="{id}""#)), "{id}: {html}");
    }
    assert!(html.contains(r#"id="room-abandoned""#) && html.contains(r#"id="room-rate""#));
    let plain_html = app.get_text(&format!("/sales/{plain}/live")).await;
    assert!(!plain_html.contains("Waiting room"), "{plain_html}");

    let mut stream = LiveStream::open(&app, sale).await;
    let room = Room::joined(&app, sale, &["ann", "bob", "cid", "dan"]).await;
    let ann = room
        .ask_until_admitted(&["ann", "bob", "cid", "dan"], "ann")
        .await;
    room.ask_until_admitted(&["bob", "cid", "dan"], "bob").await;
    let board = stream
        .until("two waiting, two active, admitting", |board| {
            let room = &board["room"];
            room["status"] == "ok"
                && room["waiting"] == 2
                && room["admitted"] == 2
                && room["admissions"] == 2
                && room["per_sec"].as_f64() > Some(0.0)
                && room["closed"] == false
        })
        .await;
    assert_eq!(board["room"]["abandoned"], 0, "{board}");
    // ann buys the only unit: the room closes, and the page says so.
    room.buys("ann", &ann).await;
    let board = stream
        .until("the room closed, one bought", |board| {
            board["room"]["closed"] == true && board["room"]["bought"] == 1
        })
        .await;
    assert_eq!(board["room"]["admitted"], 1, "{board}");
    // Nobody asks any more: past the abandon time, still not abandoned
    // (nobody was admitted, so nobody was judged), and the rate falls to 0
    // within the window.
    stream
        .until("no admissions in the last seconds", |board| {
            board["room"]["per_sec"].as_f64() == Some(0.0)
        })
        .await;

    let mut plain_stream = LiveStream::open(&app, plain).await;
    let board = plain_stream
        .until("a snapshot", |board| board["redis"]["status"] == "ok")
        .await;
    assert_eq!(board["room"], Value::Null, "{board}");
}
