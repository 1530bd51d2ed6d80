//! What an instance keeps of each sale (the catalog's copy, the lock
//! strategy's lane, the sold-out flag, the lock's release notifier, the
//! answer counts) is bounded by the sales that are live, not by every sale
//! it ever served: the sales that ended are forgotten.

use std::time::Duration;

use seckill_core::domain::UserId;
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::strategy::Shop;
use serde_json::json;

use crate::helpers::{Scratch, client, eventually, spawn_app};
use crate::processes::interrupt;

#[tokio::test]
async fn an_instance_forgets_the_sales_that_ended_and_only_those() {
    let app = spawn_app().await;
    let purchaser = Purchaser::new(Shop::new(
        app.store.clone(),
        Default::default(),
        "ended-test",
        Duration::from_secs(60),
        LockReleases::default(),
    ));
    let ann = UserId::parse("ann").expect("a buyer id");
    let closes = chrono::Utc::now() + chrono::Duration::hours(1);
    let buy = async |id: i64| {
        let sale = app.store.sale(id).await.expect("read").expect("found");
        purchaser.purchase(&sale, &ann).await.expect("an answer")
    };
    // Twenty sales of one unit that end in an hour, each bought out (its
    // lane, its sold-out flag, its counts), and one that never ends.
    let mut ending = Vec::new();
    for n in 0..20 {
        let id = app
            .create_sale_with(json!({"name": format!("Sale {n}"), "stock": 1, "price_cents": 1, "ends_at": closes}))
            .await;
        assert!(matches!(buy(id).await, Outcome::Accepted { .. }));
        ending.push(id);
    }
    let open = app.create_sale(5).await;
    assert!(matches!(buy(open).await, Outcome::Accepted { .. }));
    let before = purchaser.sales_in_memory();
    assert!(
        before >= 21 * 3,
        "catalog, lane and counts of 21 sales: {before}"
    );

    // As if the hour had passed: the twenty are forgotten, the open one kept.
    let later = closes + chrono::Duration::seconds(1);
    assert_eq!(purchaser.forget_ended(later), 20);
    let kept = purchaser.sales_in_memory();
    assert!(
        kept <= 4 && kept > 0,
        "what is left is the open sale's: {kept}"
    );
    assert_eq!(purchaser.forget_ended(later), 0, "nothing left to forget");

    // The open sale still sells; an ended one, read again, still answers.
    let bob = UserId::parse("bob").expect("a buyer id");
    let sale = app.store.sale(open).await.expect("read").expect("found");
    assert!(matches!(
        purchaser.purchase(&sale, &bob).await.expect("an answer"),
        Outcome::Accepted { .. }
    ));
    let sale = app
        .store
        .sale(ending[0])
        .await
        .expect("read")
        .expect("found");
    assert!(matches!(
        purchaser.purchase(&sale, &bob).await.expect("an answer"),
        Outcome::SoldOut
    ));
}

/// A `seckill serve` process forgets a sale that ended by itself, within
/// `--forget-ended-after-secs` and a tick, the sale page's shared state
/// included; its `/metrics` say what it keeps.
#[tokio::test]
async fn a_serving_instance_forgets_an_ended_sale_by_itself() {
    let scratch = Scratch::new().await;
    let (server, url, store) =
        crate::processes::serve_process(&scratch, &["--forget-ended-after-secs", "1"]).await;
    let ends = chrono::Utc::now() + chrono::Duration::seconds(3);
    let new = seckill_core::domain::NewSale::builder("Ends soon", 5)
        .ends_at(ends)
        .build(chrono::Utc::now())
        .expect("a sale");
    let sale = store.create_sale(&new).await.expect("created").id;
    let http = client();
    let bought = http
        .post(format!("{url}/api/sales/{sale}/purchase"))
        .json(&json!({"user_id": "ann"}))
        .send()
        .await
        .expect("an answer");
    assert_eq!(bought.status(), 202);
    // A sale page's stream, opened and closed.
    let mut events = http
        .get(format!("{url}/api/sales/{sale}/events"))
        .send()
        .await
        .expect("a stream");
    crate::helpers::read_first_snapshot(&mut events).await;
    drop(events);
    // A room asked about here (its view: `room_view.rs`), of a sale that
    // ends too: forgotten once nobody has asked for a while.
    let room = seckill_core::domain::RoomSettings {
        mode: seckill_core::domain::RoomMode::Fifo,
        admit_per_sec: 1,
        max_active: 1,
        admission_secs: 60,
        max_line: None,
    };
    let roomed = seckill_core::domain::NewSale::builder("Roomed, ends soon", 5)
        .starts_at(ends - chrono::Duration::seconds(1))
        .ends_at(ends)
        .waiting_room(room)
        .build(chrono::Utc::now())
        .expect("a sale");
    let roomed = store.create_sale(&roomed).await.expect("created").id;
    let joined = crate::waiting_room::joined_at(&url, roomed, "bob").await;
    let asked = http
        .get(format!("{url}/api/sales/{roomed}/queue"))
        .header(
            "Seckill-Ticket",
            joined["ticket"].as_str().expect("a ticket"),
        )
        .send()
        .await
        .expect("a status");
    assert_eq!(asked.status(), 200);
    let kept = || async {
        let scrape = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .expect("an answer")
            .text()
            .await
            .expect("a body");
        scrape
            .lines()
            .find_map(|line| line.strip_prefix("seckill_sales_in_memory "))
            .and_then(|n| n.parse::<u64>().ok())
            .expect("the gauge")
    };
    let before = kept().await;
    assert!(
        before >= 5,
        "the sales' copies, the lane and counts, the room's view: {before}"
    );
    eventually(
        Duration::from_secs(20),
        "the ended sale forgotten",
        || async { kept().await == 0 },
    )
    .await;
    assert!(chrono::Utc::now() > ends, "forgotten before it ended");
    assert_eq!(interrupt(server).await, Some(0));
}

/// Most of the worker's passes visit the sales in play only; a full pass
/// (a worker's first, then every ten minutes) visits every sale, so an
/// order left on the queue of a sale that ended long ago is still written.
#[tokio::test]
async fn a_workers_pass_skips_sales_long_over_and_its_sweep_pass_visits_them() {
    let app = spawn_app().await;
    let (old, live) = (app.create_sale(5).await, app.create_sale(5).await);
    let first = app.drain().await; // a full pass: nothing queued yet
    assert_eq!(first.confirmed, 0);
    app.buy(old, "ann").await;
    app.buy(live, "bob").await;
    // As if `old` had ended three days ago, its orders left on its queue.
    sqlx::query(
        "UPDATE sales SET starts_at = now() - interval '4 days', \
         ends_at = now() - interval '3 days' WHERE id = $1",
    )
    .bind(old)
    .execute(&app.pg)
    .await
    .expect("moving the sale into the past");
    let pass = app.worker.run_once().await.expect("a pass");
    assert_eq!(pass.confirmed, 1, "only the sale in play: {pass:?}");
    assert_eq!(
        app.queue_stats(old).await.waiting,
        1,
        "left for a full pass"
    );
    // A worker's first pass is a full one: it visits every sale.
    let fresh = seckill_core::worker::Worker::new(app.store.clone(), app.worker_settings.clone());
    let swept = fresh.run_once().await.expect("a pass");
    assert_eq!(swept.confirmed, 1, "{swept:?}");
    assert_eq!(app.queue_stats(old).await.waiting, 0);
}
