//! Faults: private Redis and PostgreSQL servers that the tests stop and start.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use seckill_core::config::{PurchaseSettings, Strategy, WorkerSettings};
use seckill_core::domain::UserId;
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::queue::QueueStats;
use seckill_core::redis_pool::{RedisAt, connect_redis};
use seckill_core::store::Store;
use seckill_core::strategy::Shop;
use seckill_core::worker::Worker;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    Monitor, Options, Scratch, eventually, spawn_app, spawn_app_on, spawn_app_on_private_postgres,
    spawn_app_on_private_redis,
};
use crate::proxy::{LoseOneAnswer, Pause, upstream_of};
use crate::waiting_room::{fifo, sale_with_room};

#[tokio::test]
async fn the_worker_backs_off_while_postgres_is_down_and_loses_nothing() {
    let (mut postgres, app) = spawn_app_on_private_postgres().await;
    // The worker reaches PostgreSQL through a gate of its own, which
    // notes each time it found the server down.
    let gate = PostgresGate::start(&app.scratch.database_url).await;
    let worker_store = Store::new(
        seckill_core::store::connect_postgres(&gate.url)
            .await
            .expect("PostgreSQL through the gate"),
        app.redis.clone(),
        app.scratch.prefix.clone(),
    );
    let sale = app.create_sale(100).await;
    let mut accepted = Vec::new();
    for i in 0..30 {
        let response = app.purchase(sale, &format!("user-{i}")).await;
        assert_eq!(response.status(), 202);
        let body: Value = response.json().await.expect("JSON");
        accepted.push(body["order_id"].as_str().expect("id").to_owned());
    }

    postgres.stop();
    // The API says "try again later" meanwhile, never 500.
    let order = app
        .client
        .get(app.url(&format!("/api/orders/{}", accepted[0])))
        .send()
        .await
        .expect("GET");
    assert_eq!(order.status(), 503);
    assert_eq!(order.headers()["retry-after"], "1");
    // One step while PostgreSQL is down: it fails, and gives the jobs back
    // without using up an attempt.
    let step = app.worker.try_process_batch(sale).await;
    assert!(step.is_err(), "a batch cannot succeed without PostgreSQL");
    assert_eq!(
        app.queue_stats(sale).await,
        QueueStats {
            waiting: 30,
            in_flight: 0,
            dead: 0
        }
    );
    // The worker loop keeps running meanwhile, backing off: each pass
    // fails at once (the gate closes the connection), and the pauses
    // between them double from 100 ms. A worker that spun would fail six
    // times in a few milliseconds; one that backs off takes the four
    // pauses after its first four failures at least (1.5 s).
    let shutdown = CancellationToken::new();
    let worker =
        tokio::spawn(Worker::new(worker_store, WorkerSettings::default()).run(shutdown.clone()));
    eventually(Duration::from_secs(60), "six failed passes", || async {
        gate.refused().len() >= 6
    })
    .await;
    let refused = gate.refused();
    assert!(
        refused[5] - refused[0] >= Duration::from_millis(1_500),
        "the worker did not back off: it met PostgreSQL down at {:?}",
        refused
            .iter()
            .map(|at| *at - refused[0])
            .collect::<Vec<_>>()
    );
    assert_eq!(app.queue_stats(sale).await.dead, 0);

    postgres.restart().await.expect("PostgreSQL comes back");
    eventually(Duration::from_secs(60), "the queue drains", || async {
        app.queue_stats(sale).await == QueueStats::default()
    })
    .await;
    shutdown.cancel();
    worker.await.expect("the worker stops");
    let orders = app.orders(sale).await;
    let mut stored: Vec<String> = orders.iter().map(|(id, _, _)| id.to_string()).collect();
    stored.sort();
    accepted.sort();
    assert_eq!(stored, accepted, "every accepted order, once");
    assert_eq!(app.sold(sale).await, 30);
}

/// A TCP proxy in front of a PostgreSQL server. While the server is
/// down it closes each connection at once and notes when: a client fails
/// at once (a refused connection would be retried by the pool until its
/// timeout, and every pass would last as long, spinning or not).
struct PostgresGate {
    /// The database URL, through the gate.
    url: String,
    refused: Arc<Mutex<Vec<Instant>>>,
}

impl PostgresGate {
    async fn start(database_url: &str) -> Self {
        let mut url = url::Url::parse(database_url).expect("a database URL");
        let upstream = format!(
            "{}:{}",
            url.host_str().expect("a host"),
            url.port().unwrap_or(5432)
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        url.set_host(Some("127.0.0.1")).expect("a host");
        url.set_port(Some(listener.local_addr().expect("address").port()))
            .expect("a port");
        let refused = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn({
            let refused = Arc::clone(&refused);
            async move {
                while let Ok((mut client, _)) = listener.accept().await {
                    match tokio::net::TcpStream::connect(&upstream).await {
                        Ok(mut server) => {
                            tokio::spawn(async move {
                                let _ =
                                    tokio::io::copy_bidirectional(&mut client, &mut server).await;
                            });
                        }
                        Err(_) => refused.lock().expect("not poisoned").push(Instant::now()),
                    }
                }
            }
        });
        Self {
            url: url.to_string(),
            refused,
        }
    }

    /// When each connection found the server down, in order.
    fn refused(&self) -> Vec<Instant> {
        self.refused.lock().expect("not poisoned").clone()
    }
}

#[tokio::test]
async fn healthz_reports_redis_down_and_purchases_resume_after_it_restarts_empty() {
    let (mut redis, app) = spawn_app_on_private_redis().await;
    let sale = app.create_sale(3).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    app.drain().await;
    let admin = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("a client");
    let login = admin
        .post(app.url("/admin/login"))
        .form(&[("token", crate::helpers::ADMIN_TOKEN)])
        .send()
        .await
        .expect("POST /admin/login");
    assert_eq!(login.status(), 303);
    let cookie = login.headers()["set-cookie"]
        .to_str()
        .expect("ASCII")
        .split(';')
        .next()
        .expect("name=value")
        .to_owned();

    redis.kill();
    // A signed-in admin whose session cannot be checked is told to try
    // again, not asked for the token.
    let page = admin
        .get(app.url("/admin"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("GET /admin");
    assert_eq!(page.status(), 503);
    // Nor is a logout told it closed a session it could not reach (it was
    // told so before, and the session stayed open).
    let out = admin
        .post(app.url("/admin/logout"))
        .header("cookie", &cookie)
        .send()
        .await
        .expect("POST /admin/logout");
    assert_eq!(out.status(), 503);
    assert_eq!(out.headers()["retry-after"], "1");
    assert!(out.headers().get("set-cookie").is_none());
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("GET");
    assert_eq!(health.status(), 503);
    let body: Value = health.json().await.expect("JSON");
    assert_eq!(body["redis"], "down");
    assert_eq!(body["postgres"], "ok");
    // While Redis is down the answer is honest: unavailable, try again
    // later; never a 500, and no detail of the failure.
    let refused = app.purchase(sale, "bob").await;
    assert_eq!(refused.status(), 503);
    assert_eq!(refused.headers()["retry-after"], "1");
    assert!(
        refused.headers().contains_key("x-request-id"),
        "nothing to quote when reporting it"
    );
    let error: Value = refused.json().await.expect("a JSON error");
    assert_eq!(error["error"], "unavailable", "{error}");
    assert!(
        !error["message"]
            .as_str()
            .unwrap_or_default()
            .contains("refused"),
        "{error}"
    );
    let page = app
        .client
        .get(app.url(&format!("/api/sales/{sale}")))
        .send()
        .await
        .expect("GET");
    assert_eq!(page.status(), 503);
    assert_eq!(page.headers()["retry-after"], "1");

    // Redis comes back with nothing in it (no persistence): the sale is
    // reloaded from PostgreSQL, which remembers ann's unit.
    redis.restart().await.expect("Redis comes back");
    eventually(Duration::from_secs(10), "healthz is 200 again", || async {
        app.client
            .get(app.url("/healthz"))
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
    })
    .await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 409);
    assert_eq!(app.purchase(sale, "bob").await.status(), 202);
    app.drain().await;
    assert_eq!(app.sold(sale).await, 2);
    assert_eq!(app.redis_stock(sale).await, Some(1));
}

/// The commit script ran in Redis, and its answer was lost with the
/// connection. The order was taken, so the buyer must hear `202` with the
/// order id (found on the queue), never an error, and the order must reach
/// PostgreSQL once.
#[tokio::test]
async fn a_commit_whose_answer_is_lost_is_answered_202_and_the_order_is_kept() {
    let scratch = Scratch::new().await;
    let (upstream, needles) = commit_on_its_way(&scratch).await;
    let proxy = LoseOneAnswer::start(upstream, needles).await;
    let app = app_through(scratch, &proxy).await;
    let sale = app.create_sale(5).await;

    let response = app.purchase(sale, "ann").await;
    assert_eq!(proxy.answers_lost(), 1, "the commit's answer was not lost");
    assert_eq!(
        response.status(),
        202,
        "a taken order answered with an error"
    );
    let body: Value = response.json().await.expect("JSON");
    let order_id = body["order_id"].as_str().expect("an order id").to_owned();

    app.drain().await;
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1);
    assert_eq!(orders[0].0.to_string(), order_id);
    assert_eq!(orders[0].2, "confirmed");
    assert_eq!(
        app.purchase(sale, "ann").await.status(),
        409,
        "ann bought twice"
    );
}

/// A roomed pass whose commit answer is lost: ann, first in the pass,
/// holds an admission that bought already (her unpaid order was
/// cancelled, so she holds no unit: a state `room_door.rs` reaches); dee,
/// behind her, an admission the room no longer holds (lost with Redis'
/// data); and bob, behind them, buys. The commit refuses ann's and dee's
/// orders and takes bob's, in the job named by the pass's first order id,
/// ann's. The lookup finds that job and what it carries, and the room
/// tells why the others were refused: ann is told her admission bought
/// already, dee that the room does not hold hers, bob `202`, and only
/// bob's order reaches PostgreSQL.
#[tokio::test]
async fn a_roomed_pass_whose_answer_is_lost_answers_the_spent_buyer_and_the_taken_one() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 10)).await;
    spend_admission(&app, sale, "ann").await;
    seat(&app, sale, &["ann", "bob"]).await;
    let [ann, dee, bob] = one_roomed_pass_whose_answer_is_lost(&app, sale, ["ann", "dee", "bob"])
        .await
        .map(|told| told.unwrap_or_else(|error| panic!("{error}")));
    assert_eq!(ann, Outcome::AlreadyPurchased { order_id: None });
    assert_eq!(dee, Outcome::NotAdmitted);
    let Outcome::Accepted { order_id } = bob else {
        panic!("bob's taken order was answered {bob:?}");
    };
    app.drain().await;
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!((orders[0].0, orders[0].1.as_str()), (order_id, "bob"));
    assert_eq!(app.redis_stock(sale).await, Some(4));
}

/// The same, with no buyer for the commit to take: ann's admission bought
/// already and dee's the room no longer holds, so the commit takes
/// nothing and queues no job, and the lookup finds none. Each is told
/// the refusal a retry would be told (not `503 unavailable`, which sends
/// them back to hear it), and nothing is written.
#[tokio::test]
async fn a_roomed_pass_the_room_refused_whole_whose_answer_is_lost_answers_each_refusal() {
    let app = spawn_app().await;
    let sale = sale_with_room(&app, 5, 0, fifo(10, 10)).await;
    spend_admission(&app, sale, "ann").await;
    seat(&app, sale, &["ann"]).await;
    let [ann, dee] = one_roomed_pass_whose_answer_is_lost(&app, sale, ["ann", "dee"]).await;
    assert_eq!(ann, Ok(Outcome::AlreadyPurchased { order_id: None }));
    assert_eq!(dee, Ok(Outcome::NotAdmitted));
    assert_eq!(app.redis_stock(sale).await, Some(5));
    assert_eq!(app.redis_buyers(sale).await, ["cy"]);
    app.drain().await;
    assert!(app.orders(sale).await.is_empty());
}

/// Mark `buyer`'s admission to `sale`'s room as one that bought already.
async fn spend_admission(app: &crate::helpers::TestApp, sale: i64, buyer: &str) {
    let () = redis::cmd("SADD")
        .arg(&app.keys(sale).room.bought)
        .arg(buyer)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("an admission spent");
}

/// Seat `buyers` among `sale`'s room's admitted for the next ten minutes.
async fn seat(app: &crate::helpers::TestApp, sale: i64, buyers: &[&str]) {
    let until = chrono::Utc::now().timestamp_millis() + 600_000;
    let buyers: Vec<String> = buyers.iter().map(|b| (*b).to_owned()).collect();
    seckill_core::waiting_room::seat(&app.store, sale, &buyers, until)
        .await
        .expect("buyers admitted");
}

/// `buyers` buy on `sale` with `lock`, through a Redis proxy that loses
/// the answer to their pass's commit; what each is told, in order (an
/// error as its text). They go in one pass: cy, who holds a unit
/// already, takes a pass that commits nothing, and the test holds the
/// lock while her pass waits for it and the buyers arrive, so they wait
/// in the lane, in their order, and go through in the next pass, whose
/// commit is the first.
async fn one_roomed_pass_whose_answer_is_lost<const N: usize>(
    app: &crate::helpers::TestApp,
    sale: i64,
    buyers: [&'static str; N],
) -> [Result<Outcome, String>; N] {
    let (upstream, needles) = commit_on_its_way(&app.scratch).await;
    let proxy = LoseOneAnswer::start(upstream, needles).await;
    let through_proxy = Store::new(
        app.pg.clone(),
        connect_redis(&RedisAt::Server(proxy.url.clone()), Duration::from_secs(5))
            .await
            .expect("Redis through the proxy"),
        app.scratch.prefix.clone(),
    );
    let stored = app.store.sale(sale).await.expect("read").expect("a sale");
    let purchaser = Arc::new(Purchaser::new(Shop::new(
        through_proxy,
        PurchaseSettings {
            strategy: Strategy::Lock,
            lock_wait_ms: 30_000,
            ..Default::default()
        },
        "loses-an-answer",
        Duration::from_secs(600),
        LockReleases::default(),
    )));
    let buy = |name: &'static str| {
        let (purchaser, stored) = (purchaser.clone(), stored.clone());
        tokio::spawn(async move {
            let buyer = UserId::parse(name).expect("a buyer");
            purchaser
                .purchase(&stored, &buyer)
                .await
                .map_err(|error| format!("{name}'s purchase failed: {error:#}"))
        })
    };
    let () = redis::cmd("HSET")
        .arg(&app.keys(sale).holds)
        .arg("cy")
        .arg(uuid::Uuid::now_v7().to_string())
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("cy's hold");
    // The pauses are for a busy machine: each task joins its lane, or
    // takes its pass, within moments of starting.
    let (mut conn, held) = app.take_lock(sale, Duration::from_secs(30)).await;
    let cy = buy("cy");
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let mut tasks = Vec::new();
    for name in buyers {
        tasks.push(buy(name));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    held.release(&mut conn).await.expect("release");

    let cy = cy.await.expect("a purchase task");
    assert!(matches!(cy, Ok(Outcome::AlreadyPurchased { .. })), "{cy:?}");
    let mut told = Vec::new();
    for task in tasks {
        told.push(task.await.expect("a purchase task"));
    }
    assert_eq!(proxy.answers_lost(), 1, "the commit's answer was not lost");
    told.try_into().expect("one answer a buyer")
}

/// An app on `scratch` whose Redis connections go through `proxy`.
async fn app_through(scratch: Scratch, proxy: &LoseOneAnswer) -> crate::helpers::TestApp {
    spawn_app_on(
        scratch,
        Options {
            app_redis: Some(RedisAt::Server(proxy.url.clone())),
            ..Options::default()
        },
    )
    .await
}

/// The upstream (`host:port`) of the scratch Redis, and what the purchase
/// commit looks like on the wire: `EVALSHA` of the script's hash. The
/// script is loaded into Redis first, straight: a server without it would
/// answer the caught `EVALSHA` `NOSCRIPT`, and the commit would not run.
async fn commit_on_its_way(scratch: &Scratch) -> (String, Vec<Vec<u8>>) {
    let upstream = upstream_of(scratch.redis_url());
    let commit = redis::Script::new(concat!(
        include_str!("../../../seckill-core/src/lua/queue_lib.lua"),
        include_str!("../../../seckill-core/src/lua/purchase_commit.lua")
    ));
    load_straight(scratch, &commit).await;
    (upstream, vec![commit.get_hash().as_bytes().to_vec()])
}

/// Load `script` into the scratch Redis, past any proxy.
pub(crate) async fn load_straight(scratch: &Scratch, script: &redis::Script) {
    let _: String = script
        .prepare_invoke()
        .load_async(&mut crate::helpers::redis_at(scratch.redis_url()).await)
        .await
        .expect("SCRIPT LOAD");
}

/// The connection breaks while the commit is still on its way to Redis: it
/// arrives after the buyer was answered. Without the fence closed first,
/// the lookup finds nothing, the buyer is told `503`, and the late commit
/// then takes the unit while the lock is still held: an order nobody was
/// told about, and `409 already_purchased` on the retry. The pass releases
/// its lock before it looks, so the late commit finds the lock gone and
/// writes nothing.
#[tokio::test]
async fn a_commit_still_on_its_way_when_the_buyer_is_answered_can_no_longer_land() {
    let scratch = Scratch::new().await;
    let (upstream, needles) = commit_on_its_way(&scratch).await;
    // Late by a second: well after the lookup, well within the lock's 2 s.
    let proxy = LoseOneAnswer::delaying(upstream, needles, Duration::from_secs(1)).await;
    let app = app_through(scratch, &proxy).await;
    let sale = app.create_sale(5).await;

    let response = app.purchase(sale, "ann").await;
    assert_eq!(proxy.answers_lost(), 1, "the commit was not held");
    assert_eq!(
        response.status(),
        503,
        "nothing was taken when ann was answered"
    );
    assert_eq!(response.headers()["retry-after"], "1");
    // Told to ask again, as `lua` tells her: not that Redis is down.
    let told: serde_json::Value = response.json().await.expect("a JSON answer");
    assert_eq!(told["error"], "busy", "{told}");

    // The held commit has reached Redis by now, and written nothing.
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(app.redis_buyers(sale).await, Vec::<String>::new());
    assert_eq!(app.redis_stock(sale).await, Some(5));
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
    let retry = app.purchase(sale, "ann").await;
    assert_eq!(retry.status(), 202, "ann's retry is her first purchase");
}

/// Ann's pass's lock attempt is held on its way (a stalled connection,
/// closed at once) for 2 s, and then reaches Redis. Its abandon, sent on
/// the attempt's own connection, fails with that connection; sent again
/// on a new one from the pool, it runs first, while the attempt is still
/// held, and finds no lock to delete. It names the attempt abandoned, so
/// the attempt, landing after it, takes nothing: the sale's lock stays
/// free, and bob buys at once. Before, the late attempt held the lock for
/// nobody for its whole TTL (2 s here), and every buyer of the sale
/// waited.
#[tokio::test]
async fn a_lock_attempt_that_lands_after_its_abandon_takes_nothing() {
    let scratch = Scratch::new().await;
    let upstream = upstream_of(scratch.redis_url());
    let acquire = redis::Script::new(include_str!(
        "../../../seckill-core/src/lua/lock_acquire.lua"
    ));
    // Loaded first: the held attempt is an `EVALSHA`, which a server
    // without the script would refuse, proving nothing.
    load_straight(&scratch, &acquire).await;
    let late = Duration::from_secs(2);
    let needle = acquire.get_hash().as_bytes().to_vec();
    let proxy = LoseOneAnswer::delaying(upstream, vec![needle], late).await;
    let app = app_through(scratch, &proxy).await;
    let sale = app.create_sale(5).await;
    let lock = app.keys(sale).lock;
    // Every attempt's mark is named after the lock, then the attempt.
    let marks = seckill_core::keys::lock_abandoned(&lock, "");
    let mut monitor = Monitor::start(app.scratch.redis_url(), &marks).await;

    let told = app.purchase(sale, "ann").await;
    assert_eq!(proxy.answers_lost(), 1, "the attempt was not held");
    assert_eq!(told.status(), 503, "{told:?}");
    assert!(told.headers().contains_key("retry-after"), "{told:?}");

    // The held attempt reaches Redis and runs (the one `EVALSHA` of the
    // acquire script Redis is sent), after the abandon (`EVAL`) did.
    let mut before = Vec::new();
    let attempt = loop {
        let command = monitor.next(late + Duration::from_secs(5)).await;
        if command[0].eq_ignore_ascii_case("evalsha") {
            break command;
        }
        before.push(command);
    };
    // `EVALSHA` hash 4 lock fence line mark ...; `EVAL` text 2 lock mark ...
    let mark = &attempt[6];
    assert!(
        before
            .iter()
            .any(|command| command[0].eq_ignore_ascii_case("eval") && &command[4] == mark),
        "the attempt's abandon did not run before it: the test proves nothing: {before:?}"
    );
    let held: Option<String> = redis::cmd("GET")
        .arg(&lock)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("GET");
    assert_eq!(
        held, None,
        "the late attempt took the sale's lock for nobody"
    );
    assert_eq!(app.purchase(sale, "bob").await.status(), 202);
}

/// Ann's pass's commit runs, and before its answer is lost, Redis loses
/// the sale (its keys wiped, as a restart without persistence does).
/// Neither the queue nor PostgreSQL has her order then, and no answer can
/// come of it: a worker may still write a batch it reserved before the
/// loss. So the look asks again, and once its 3 s pass, she is told `503
/// unconfirmed` with her order id, not that nothing was taken.
#[tokio::test]
async fn a_lost_commit_while_redis_has_lost_the_sale_leaves_the_buyer_in_doubt() {
    let (app, proxy, pause, sale) = app_pausing_the_commit().await;

    let (told, ()) = tokio::join!(app.purchase(sale, "ann"), async {
        commit_ran(&app, &pause, sale).await;
        app.wipe_all_of_sale(sale).await;
        pause.go();
    });
    assert_eq!(proxy.answers_lost(), 1, "the commit's answer was not lost");
    assert_eq!(told.status(), 503, "{told:?}");
    assert!(told.headers().contains_key("retry-after"), "{told:?}");
    let body: Value = told.json().await.expect("JSON");
    assert_eq!(body["error"], "unconfirmed", "{body}");
    assert!(body["order_id"].is_string(), "{body}");
}

/// As above, and a worker that reserved ann's order before Redis lost the
/// sale writes it to PostgreSQL after. The look finds it there, though
/// Redis does not hold the sale: ann is told `202` with that order, not
/// left in doubt.
#[tokio::test]
async fn a_lost_commit_whose_order_a_worker_wrote_after_redis_lost_the_sale_is_told_202() {
    let (app, proxy, pause, sale) = app_pausing_the_commit().await;

    let (told, ()) = tokio::join!(app.purchase(sale, "ann"), async {
        commit_ran(&app, &pause, sale).await;
        let held = app.worker.reserve_orders(sale).await.expect("reserve");
        app.wipe_all_of_sale(sale).await;
        pause.go();
        let report = app.worker.write_batch(held).await.expect("write");
        assert_eq!(report.confirmed, 1);
    });
    assert_eq!(proxy.answers_lost(), 1, "the commit's answer was not lost");
    assert_eq!(told.status(), 202, "{told:?}");
    let body: Value = told.json().await.expect("JSON");
    let orders = app.orders(sale).await;
    assert_eq!(orders.len(), 1, "{orders:?}");
    assert_eq!(body["order_id"], orders[0].0.to_string(), "{body}");
}

/// Until the commit the pausing proxy caught has run: a reply came (one
/// to an earlier command may come first), and its buyer holds a unit.
async fn commit_ran(app: &crate::helpers::TestApp, pause: &Pause, sale: i64) {
    pause.ran().await;
    eventually(Duration::from_secs(1), "the commit ran", || async {
        !app.redis_buyers(sale).await.is_empty()
    })
    .await;
}

/// An app behind a proxy that pauses its first commit (`pausing`), and a
/// sale of 5.
async fn app_pausing_the_commit() -> (crate::helpers::TestApp, LoseOneAnswer, Pause, i64) {
    let scratch = Scratch::new().await;
    let (upstream, needles) = commit_on_its_way(&scratch).await;
    let (proxy, pause) = LoseOneAnswer::pausing(upstream, needles).await;
    let app = app_through(scratch, &proxy).await;
    let sale = app.create_sale(5).await;
    (app, proxy, pause, sale)
}

/// A load of a sale Redis lost reads PostgreSQL, sends its script, and
/// gives up on it (the reply never comes; its transaction rolls back and
/// lets the sale's row go). A worker then commits a batch it held through
/// the wipe, and the script lands late, with figures that do not count the
/// batch: its units would be sold a second time. The worker marks the
/// epoch when it commits on a sale Redis lost, and the late script, finding
/// the epoch moved, writes nothing.
#[tokio::test]
async fn a_load_still_on_its_way_after_a_commit_writes_nothing() {
    let scratch = Scratch::new().await;
    let upstream = upstream_of(scratch.redis_url());
    let load = redis::Script::new(include_str!("../../../seckill-core/src/lua/sale_load.lua"));
    let proxy = LoseOneAnswer::delaying(
        upstream,
        vec![
            load.get_hash().as_bytes().to_vec(),
            b"sale_load.lua".to_vec(),
        ],
        Duration::from_millis(1_500),
    )
    .await;
    let app = app_through(scratch, &proxy).await;
    // Created by the test's own store, straight to Redis: the proxy holds
    // the app's first load only.
    let new = seckill_core::domain::NewSale::builder("Phone", 5)
        .build(chrono::Utc::now())
        .expect("a sale");
    let sale = app.store.create_sale(&new).await.expect("a sale").id;
    app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    let held = app.worker.reserve_orders(sale).await.expect("reserve");
    app.wipe_all_of_sale(sale).await;

    // A page loads the sale through the app; its script is held.
    let page = app
        .client
        .get(app.url(&format!("/api/sales/{sale}")))
        .send()
        .await
        .expect("GET");
    assert_eq!(proxy.answers_lost(), 1, "the load was not held");
    assert_eq!(page.status(), 503);

    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!(report.confirmed, 2);
    // The held script has landed by now.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(
        view["stock_left"], 3,
        "ann's and bob's units sold again: {view}"
    );
    assert_eq!(
        app.purchase(sale, "ann").await.status(),
        409,
        "ann bought twice"
    );
}

/// The form's purchase was won, and Redis failed on the read of the units
/// left that the page shows after it (its answer lost). The buyer still
/// sees "You got one!" and the order id: a won purchase's answer never
/// depends on a read after it. (Before, the error replaced the page.)
#[tokio::test]
async fn a_won_form_purchase_is_shown_though_the_read_after_it_fails() {
    let scratch = Scratch::new().await;
    let upstream = upstream_of(scratch.redis_url());
    // The `lua` purchase is one `EVALSHA`; the page's read is a plain
    // `GET` of the stock key: lose the first such request's answer.
    // The sale is the scratch database's first: id 1.
    let stock = seckill_core::keys::SaleKeys::new(&scratch.prefix, 1).stock;
    let needle = format!("$3\r\nGET\r\n${}\r\n{stock}", stock.len());
    let proxy = LoseOneAnswer::start(upstream, vec![needle.into_bytes()]).await;
    let mut options = Options {
        app_redis: Some(RedisAt::Server(proxy.url.clone())),
        ..Options::default()
    };
    options.purchase.strategy = seckill_core::config::Strategy::Lua;
    let app = spawn_app_on(scratch, options).await;
    let sale = app.create_sale(5).await;
    assert_eq!(sale, 1, "the needle names sale 1's stock");

    let page = app.buy_by_form(sale, "ann").await;
    assert_eq!(proxy.answers_lost(), 1, "the read's answer was not lost");
    assert_eq!(page.status(), 200);
    let html = page.text().await.expect("a page");
    assert!(html.contains("You got one!"), "{html}");
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}
