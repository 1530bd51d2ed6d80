//! Every strategy, and each bug of the broken ones made to happen on
//! demand by its knob: what `docs` and the lab promise an instructor.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use seckill_core::config::{PurchaseSettings, Strategy};
use serde_json::{Value, json};

use crate::helpers::{Monitor, Options, Scratch, TestApp, cluster, spawn_app_with, start_instance};

async fn app_with(purchase: PurchaseSettings) -> TestApp {
    spawn_app_with(Options {
        purchase,
        ..Options::default()
    })
    .await
}

fn settings(strategy: Strategy) -> PurchaseSettings {
    PurchaseSettings {
        strategy,
        ..PurchaseSettings::default()
    }
}

/// `buyers` purchases at once, one per buyer id from `names`; returns the
/// statuses, in order.
async fn at_once(app: &TestApp, sale: i64, names: &[String]) -> Vec<u16> {
    futures::future::join_all(
        names
            .iter()
            .map(|name| async move { app.purchase(sale, name).await.status().as_u16() }),
    )
    .await
}

fn buyers(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("buyer-{i}")).collect()
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

/// A one-unit sale on an instance whose lock holders pause 2 s inside a
/// 300 ms lock; ann buys, and bob once ann holds the lock.
async fn ann_then_bob_paused_past_the_ttl(
    strategy: Strategy,
) -> (TestApp, i64, reqwest::Response, reqwest::Response) {
    let app = app_with(PurchaseSettings {
        hold_pause_ms: 2_000,
        lock_ttl_ms: 300,
        lock_wait_ms: 5_000,
        ..settings(strategy)
    })
    .await;
    let sale = app.create_sale(1).await;
    let (first, second) = ann_then_bob(&app, sale).await;
    (app, sale, first, second)
}

/// ann buys, and bob as soon as ann holds the lock: during her pause
/// (bob's request is on its way well within it, even on a slow machine).
async fn ann_then_bob(app: &TestApp, sale: i64) -> (reqwest::Response, reqwest::Response) {
    let first = app.purchase(sale, "ann");
    let second = async {
        once_the_lock_is_held(app, sale).await;
        app.purchase(sale, "bob").await
    };
    tokio::join!(first, second)
}

/// Wait until somebody holds the sale's lock.
async fn once_the_lock_is_held(app: &TestApp, sale: i64) {
    let lock = app.keys(sale).lock;
    let mut conn = app.redis_conn().await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    while !redis::cmd("EXISTS")
        .arg(&lock)
        .query_async::<bool>(&mut conn)
        .await
        .expect("EXISTS")
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nobody took the lock"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// What PostgreSQL holds once the queue is drained: (confirmed, rejected).
async fn settled(app: &TestApp, sale: i64) -> (usize, usize) {
    app.drain().await;
    let orders = app.orders(sale).await;
    let confirmed = orders.iter().filter(|o| o.2 == "confirmed").count();
    let rejected = orders.iter().filter(|o| o.2 == "rejected").count();
    (confirmed, rejected)
}

/// Both buyers of a one-unit sale were told 202; PostgreSQL confirmed one
/// order and refused the other.
async fn one_unit_sold_twice(
    app: &TestApp,
    sale: i64,
    first: reqwest::Response,
    second: reqwest::Response,
) {
    assert_eq!(
        (first.status().as_u16(), second.status().as_u16()),
        (202, 202),
        "no oversell"
    );
    assert_eq!(settled(app, sale).await, (1, 1));
}

/// The correct strategies sell every unit once to 300 buyers at once.
#[tokio::test]
async fn lua_and_postgres_sell_each_unit_once() {
    // Each app lives to the end of the test: a TestApp dropped earlier
    // deletes its keys while its server runs on, and the server's next
    // flush of the answer tally wrote them back, left behind.
    let mut apps = Vec::new();
    for strategy in [Strategy::Lua, Strategy::Postgres] {
        let app = app_with(settings(strategy)).await;
        let sale = app.create_sale(40).await;
        let statuses = at_once(&app, sale, &buyers(300)).await;
        assert_eq!(
            (count(&statuses, 202), count(&statuses, 409)),
            (40, 260),
            "{strategy:?}: {statuses:?}"
        );
        assert_eq!(settled(&app, sale).await, (40, 0), "{strategy:?}");
        assert_eq!(app.sold(sale).await, 40, "{strategy:?}");
        assert_eq!(app.redis_stock(sale).await, Some(0), "{strategy:?}");
        assert_eq!(
            app.purchase(sale, "buyer-0").await.status(),
            409,
            "{strategy:?}: a winner bought twice"
        );
        apps.push(app);
    }
}

/// `postgres` confirms at once: no queue, no worker.
#[tokio::test]
async fn postgres_confirms_the_order_without_the_worker() {
    let app = app_with(settings(Strategy::Postgres)).await;
    let sale = app.create_sale(3).await;
    let order = app.buy(sale, "ann").await;
    let stored = app.get_json(&format!("/api/orders/{order}")).await;
    assert_eq!(stored["status"], "confirmed");
    assert_eq!(app.queue_stats(sale).await.waiting, 0);
    let (queued, due) = app.deadlines_queued_and_due(sale).await;
    assert_eq!(
        (queued.len(), queued),
        (1, due),
        "its deadline, by its pay_by"
    );
    assert_eq!(app.redis_stock(sale).await, Some(2));
}

/// `article` with a holder paused between SETNX and EXPIRE (the knob):
/// buyers find its lock with no TTL, take it "from a crashed holder" (and
/// from each other: the takeover sets no TTL either), and sell the same
/// units: more 202s than units, the excess refused by PostgreSQL.
#[tokio::test]
async fn article_with_a_holder_paused_before_its_expire_oversells() {
    let app = app_with(PurchaseSettings {
        hold_pause_ms: 200,
        lock_wait_ms: 10_000,
        ..settings(Strategy::Article)
    })
    .await;
    let sale = app.create_sale(3).await;
    let statuses = at_once(&app, sale, &buyers(30)).await;
    let won = count(&statuses, 202);
    assert!(
        won > 3,
        "{won} 202s for 3 units: no oversell ({statuses:?})"
    );
    let (confirmed, rejected) = settled(&app, sale).await;
    assert_eq!((confirmed, rejected), (3, won - 3));
}

/// `article` stores the expiry timestamp as the TTL: a lock held for a
/// moment lives for decades. The TTL lives only from the EXPIRE to the
/// unlock's DEL; the test reads what Redis ran (`MONITOR`) rather than
/// hope to look in between.
#[tokio::test]
async fn article_gives_its_lock_a_ttl_of_decades() {
    let app = app_with(settings(Strategy::Article)).await;
    let sale = app.create_sale(3).await;
    let lock = app.keys(sale).lock;
    let mut monitor = Monitor::start(app.scratch.redis_url(), &lock).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    let asked: Vec<i64> = monitor
        .until_now()
        .await
        .into_iter()
        .filter(|command| command.get(1) == Some(&lock))
        .filter_map(|command| match command[0].to_ascii_uppercase().as_str() {
            "EXPIRE" => command.get(2)?.parse().ok(),
            "PEXPIRE" => command.get(2)?.parse::<i64>().ok().map(|ms| ms / 1_000),
            _ => None,
        })
        .collect();
    let a_year = 365 * 24 * 3600;
    assert!(
        asked.iter().any(|secs| *secs > a_year),
        "TTLs asked {asked:?} s: not the timestamp bug"
    );
}

/// `article` with `--crash-after-setnx`: the process dies between SETNX and
/// EXPIRE, and the lock is left with no TTL: it never expires by itself.
#[tokio::test]
async fn article_crashing_between_setnx_and_expire_leaves_a_lock_that_never_expires() {
    let scratch = Scratch::new().await;
    let mut processes = cluster(
        &scratch,
        &[
            ("SECKILL_STRATEGY", "article"),
            ("SECKILL_CRASH_AFTER_SETNX", "true"),
        ],
    );
    let url = processes.start_app("a", &[]).await.expect("a starts");
    let client = crate::helpers::client();
    let sale = crate::helpers::create_sale_at(&url, "Crash", 3).await;
    let answer = client
        .post(format!("{url}/api/sales/{sale}/purchase"))
        .json(&json!({"user_id": "ann"}))
        .send()
        .await;
    assert!(answer.is_err(), "the instance answered: {answer:?}");
    let status = processes
        .wait("a", Duration::from_secs(10))
        .await
        .expect("a exits");
    assert_eq!(status.signal(), Some(9), "killed, as a crash: {status:?}");

    let lock = seckill_core::keys::SaleKeys::new(&scratch.prefix, sale).lock;
    let mut conn = redis::Client::open(scratch.redis_url())
        .expect("URL")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    let ttl: i64 = redis::cmd("TTL")
        .arg(&lock)
        .query_async(&mut conn)
        .await
        .expect("TTL");
    assert_eq!(ttl, -1, "the lock should exist with no TTL");
}

/// `getset` has no fence: a holder paused past the lock's TTL (the knob)
/// wakes up and writes while the next holder writes too. One unit, two
/// buyers, two 202s.
#[tokio::test]
async fn getset_with_a_holder_paused_past_its_ttl_oversells() {
    let (app, sale, first, second) = ann_then_bob_paused_past_the_ttl(Strategy::Getset).await;
    one_unit_sold_twice(&app, sale, first, second).await;
}

/// `getset` judges expiry by each instance's clock. An instance whose clock
/// runs 5 s ahead (the knob) finds a live lock "expired" and takes it with
/// GETSET while its holder, on the honest instance, is still inside: one
/// unit, two 202s.
#[tokio::test]
async fn getset_on_an_instance_whose_clock_runs_ahead_oversells() {
    let honest = PurchaseSettings {
        hold_pause_ms: 1_500,
        lock_ttl_ms: 3_000,
        ..settings(Strategy::Getset)
    };
    let app = app_with(honest.clone()).await;
    let ahead = Options {
        purchase: PurchaseSettings {
            clock_skew_ms: 5_000,
            ..honest
        },
        ..Options::default()
    };
    let skewed = start_instance(&app.scratch, &ahead, "skewed").await;
    let sale = app.create_sale(1).await;
    let first = app.purchase(sale, "ann");
    let second = async {
        // During ann's pause, on the instance that thinks her lock old.
        once_the_lock_is_held(&app, sale).await;
        app.client
            .post(format!("{skewed}/api/sales/{sale}/purchase"))
            .json(&json!({"user_id": "bob"}))
            .send()
            .await
            .expect("POST purchase")
    };
    let (first, second) = tokio::join!(first, second);
    one_unit_sold_twice(&app, sale, first, second).await;
}

/// `lock` with the same pause: every holder on this instance pauses past
/// the lock's TTL, and the fence refuses each one's write (503 lock_lost):
/// nothing is sold twice, nothing is lost, and the unit is still there.
#[tokio::test]
async fn lock_with_a_holder_paused_past_its_ttl_does_not_oversell() {
    let (app, sale, first, second) = ann_then_bob_paused_past_the_ttl(Strategy::Lock).await;
    for response in [first, second] {
        assert_eq!(response.status(), 503);
        let body: Value = response.json().await.expect("JSON");
        assert_eq!(body["error"], "lock_lost");
    }
    assert_eq!(settled(&app, sale).await, (0, 0));
    assert_eq!(app.redis_stock(sale).await, Some(1), "the unit was lost");
    let fenced: i64 = redis::cmd("GET")
        .arg(&app.keys(sale).fenced)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("GET fenced");
    assert_eq!(fenced, 2);
}

/// `decr` checks the buyer, takes the unit, and only then records the
/// buyer: a buyer's two requests inside that gap (the knob widens it) both
/// win. PostgreSQL refuses the second order, and its unit, taken in Redis,
/// is never sold: Redis says sold out while PostgreSQL has a unit left.
#[tokio::test]
async fn decr_lets_one_buyer_win_twice_and_undersells() {
    let app = app_with(PurchaseSettings {
        hold_pause_ms: 200,
        ..settings(Strategy::Decr)
    })
    .await;
    let sale = app.create_sale(2).await;
    let twice = vec!["ann".to_owned(), "ann".to_owned()];
    let statuses = at_once(&app, sale, &twice).await;
    assert_eq!(statuses, [202, 202], "one buyer did not win twice");
    assert_eq!(settled(&app, sale).await, (1, 1));
    assert_eq!(app.redis_stock(sale).await, Some(0));
    assert_eq!(app.sold(sale).await, 1, "PostgreSQL still has a unit");
    assert_eq!(
        app.purchase(sale, "bob").await.status(),
        409,
        "bob was sold the unit left"
    );
}
