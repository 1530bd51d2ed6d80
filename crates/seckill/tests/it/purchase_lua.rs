//! `lua`'s one script for the buyers of a sale waiting on one instance:
//! each buyer decided in turn against the units the ones before left, a
//! buyer who comes twice taking one unit, a call run twice taking nothing
//! more, and the instance sending its waiting buyers in one call; a
//! holder whose pass's answer is lost told the order she holds, and a
//! script that lands after the look that told its buyers taking nobody.

use std::time::Duration;

use seckill_core::config::Strategy;
use seckill_core::domain::{OrderJob, PassIds, UserId};
use seckill_core::redis_pool::{RedisAt, RedisConn};
use seckill_core::strategy::lua;
use uuid::Uuid;

use crate::helpers::{
    Monitor, Options, RawBuyers, Scratch, TestApp, spawn_app_on, spawn_app_on_private_redis_with,
};
use crate::proxy::LoseOneAnswer;

/// One call of the purchase script for `buyers`, each with a fresh order
/// id, as a pass of the sale's lane sends it: what it answered, and the
/// orders it named.
struct Call {
    pass: Uuid,
    jobs: Vec<OrderJob>,
    /// The sale has a waiting room.
    roomed: bool,
}

impl Call {
    /// Ids as a pass makes them (`PassIds`): the call's job is named by
    /// its first buyer's order id.
    async fn new(app: &TestApp, sale: i64, buyers: &[&str]) -> Self {
        let key = app.store.pass_key().await.expect("the database's key");
        let mut ids = PassIds::new(sale, key);
        let jobs = (buyers.iter())
            .map(|user| ids.order(&UserId::parse(user).expect("a buyer")))
            .collect();
        Self {
            pass: ids.job_id(),
            jobs,
            roomed: false,
        }
    }

    fn roomed(self) -> Self {
        Self {
            roomed: true,
            ..self
        }
    }

    /// Run it: (status, units left, one answer per buyer).
    async fn run(&self, app: &TestApp, conn: &mut RedisConn) -> (String, i64, Vec<String>) {
        let keys = app.keys(self.jobs[0].sale_id);
        let invocation = lua::invocation(&keys, self.roomed, self.pass, &self.jobs);
        invocation
            .invoke_async(conn)
            .await
            .expect("the purchase script")
    }

    fn order_of(&self, index: usize) -> String {
        self.jobs[index].order_id.to_string()
    }
}

async fn lua_app() -> (seckill_devenv::services::PrivateRedis, TestApp) {
    spawn_app_on_private_redis_with(Options::with_strategy(Strategy::Lua)).await
}

/// Five buyers in one call for three units left, ann twice: ann, bob and cy
/// each take one, ann's second request is told her order, dee is told
/// sold out. Sent again (as a connection lost and re-sent would), the
/// call takes nothing more and answers the same. Once a unit has come
/// back, a third run takes nobody new while the call's job is queued
/// (dee is told to ask again: her order would need that job's id); a
/// fourth, once the worker has written the call's orders, takes it for
/// dee. PostgreSQL ends with the four orders, each under the id the call
/// named.
#[tokio::test]
async fn one_call_decides_its_buyers_in_turn_and_a_second_run_takes_nothing_twice() {
    let (_redis, app) = lua_app().await;
    // Four units, one of them set aside in Redis until it comes back.
    let sale = app.create_sale(4).await;
    let mut conn = app.redis_conn().await;
    let units = |change: &str| redis::cmd(change).arg(app.keys(sale).stock).to_owned();
    let _: i64 = units("DECR")
        .query_async(&mut conn)
        .await
        .expect("a unit aside");
    let call = Call::new(&app, sale, &["ann", "bob", "ann", "cy", "dee"]).await;

    let (status, left, answers) = call.run(&app, &mut conn).await;
    let expected = [
        "taken".to_owned(),
        "taken".to_owned(),
        call.order_of(0),
        "taken".to_owned(),
        "sold_out".to_owned(),
    ];
    assert_eq!((status.as_str(), left), ("done", 0));
    assert_eq!(answers, expected, "the first run");

    let (status, left, again) = call.run(&app, &mut conn).await;
    assert_eq!((status.as_str(), left), ("done", 0));
    assert_eq!(again, expected, "the call run twice");
    assert_eq!(app.redis_stock(sale).await, Some(0), "units taken twice");
    let mut buyers = app.redis_buyers(sale).await;
    buyers.sort();
    assert_eq!(buyers, ["ann", "bob", "cy"]);
    assert_eq!(
        app.queue_stats(sale).await.waiting,
        1,
        "one job for the call"
    );

    let _: i64 = units("INCR")
        .query_async(&mut conn)
        .await
        .expect("a unit back");
    let (_, left, third) = call.run(&app, &mut conn).await;
    assert_eq!(left, 1, "the unit back stays on sale");
    assert_eq!(third[4], "busy", "dee, while the call's job is queued");
    assert_eq!(third[..4], expected[..4], "the others, as before");
    assert_eq!(app.queue_stats(sale).await.waiting, 1);
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (3, 0));

    let (_, left, fourth) = call.run(&app, &mut conn).await;
    assert_eq!(left, 0);
    assert_eq!(fourth[4], "taken", "dee, once the call's job is written");
    assert_eq!(fourth[..4], expected[..4], "the others, as before");
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (1, 0));
    let mut orders: Vec<(String, String)> = crate::helpers::orders(&app.pg, sale)
        .await
        .into_iter()
        .map(|(id, user, _)| (user, id.to_string()))
        .collect();
    orders.sort();
    assert_eq!(
        orders,
        [
            ("ann".to_owned(), call.order_of(0)),
            ("bob".to_owned(), call.order_of(1)),
            ("cy".to_owned(), call.order_of(3)),
            ("dee".to_owned(), call.order_of(4)),
        ]
    );
}

/// A roomed call: ann, admitted, takes a unit and leaves the admitted;
/// bob, never admitted, and dee, whose admission's end passed on Redis'
/// clock, are refused `not_admitted`; cy, whose admission bought already
/// (a unit that came back), is told `spent`; ann's second request, her
/// order. One unit taken, the refused left where they were.
#[tokio::test]
async fn a_roomed_call_checks_each_buyers_admission() {
    let (_redis, app) = lua_app().await;
    let sale = app.create_sale(5).await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let past = crate::room_door::a_second_ago_on_redis_clock(&app).await;
    let later = past + 600_000;
    let () = redis::pipe()
        .zadd(&keys.room.admitted, "ann", later)
        .ignore()
        .zadd(&keys.room.admitted, "cy", later)
        .ignore()
        .zadd(&keys.room.admitted, "dee", past)
        .ignore()
        .sadd(&keys.room.bought, "cy")
        .ignore()
        .query_async(&mut conn)
        .await
        .expect("a room's admitted and bought");
    let call = Call::new(&app, sale, &["ann", "bob", "cy", "dee", "ann"])
        .await
        .roomed();

    let (status, left, answers) = call.run(&app, &mut conn).await;
    assert_eq!((status.as_str(), left), ("done", 4));
    let ann = call.order_of(0);
    assert_eq!(
        answers,
        [
            "taken",
            "not_admitted",
            "spent",
            "not_admitted",
            ann.as_str()
        ]
    );
    let admitted: Vec<String> = redis::cmd("ZRANGE")
        .arg(&keys.room.admitted)
        .arg(0)
        .arg(-1)
        .query_async(&mut conn)
        .await
        .expect("ZRANGE");
    assert_eq!(admitted, ["dee", "cy"], "ann's place went at her take");
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}

/// The buyers waiting on one instance go in one call of the script: the
/// sale's Redis is stopped while 100 buyers ask for 40 units, and let go
/// once the instance has read every request (they wait in its lane by
/// then). Every unit is sold once, every buyer is answered (`202`, `409`,
/// or `503` for a pass whose answer the stop held past its timeout), and
/// Redis ran a handful of scripts, not one a buyer. (On a machine slow
/// to read the requests, each pass sent into the stop ends at its
/// timeout, 500 ms, and the lane takes the next: a few more scripts,
/// still far from one a buyer. The script is loaded first, so that each
/// one sent into the stop runs once Redis goes on.)
#[tokio::test]
async fn buyers_waiting_on_one_instance_go_in_one_script() {
    let (redis, app) = lua_app().await;
    let sale = app.create_sale(40).await;
    let mut monitor = Monitor::start(&redis.url(), &app.keys(sale).stock).await;
    let _: String = lua::script()
        .prepare_invoke()
        .load_async(&mut app.redis_conn().await)
        .await
        .expect("SCRIPT LOAD");

    redis.pause();
    let buyers = RawBuyers::send(&app, sale, "buyer", 100).await;
    buyers.all_read().await;
    redis.resume();
    let answers = buyers.statuses().await;

    let scripts = (monitor.until_now().await.into_iter())
        .filter(|command| command[0].eq_ignore_ascii_case("evalsha"))
        .count();
    assert!(
        scripts <= 10,
        "Redis ran {scripts} scripts for 100 buyers: they did not go together"
    );
    let count = |status| answers.iter().filter(|told| **told == status).count();
    assert_eq!(
        count(202) + count(409) + count(503),
        100,
        "every buyer is told one of 202, 409, 503: {answers:?}"
    );
    assert!(count(202) <= 40, "{answers:?}");
    // Whatever the first pass was told, the units were taken once each.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (40, 0));
    assert_eq!(app.sold(sale).await, 40);
    assert_eq!(app.redis_stock(sale).await, Some(0));
}

/// An instance whose every connection to the sale's Redis goes through
/// `proxy` (given where Redis is), the purchase script loaded first: a
/// script the proxy holds runs when it reaches Redis.
async fn lua_app_behind<F>(proxy: impl FnOnce(String) -> F) -> (TestApp, LoseOneAnswer)
where
    F: Future<Output = LoseOneAnswer>,
{
    let scratch = Scratch::new().await;
    let upstream = crate::proxy::upstream_of(scratch.redis_url());
    let proxy = proxy(upstream).await;
    let options = Options {
        app_redis: Some(RedisAt::Server(proxy.url.clone())),
        ..Options::with_strategy(Strategy::Lua)
    };
    let app = spawn_app_on(scratch, options).await;
    let _: String = lua::script()
        .prepare_invoke()
        .load_async(&mut app.redis_conn().await)
        .await
        .expect("SCRIPT LOAD");
    (app, proxy)
}

/// The purchase script's hash: what the proxy watches for.
fn the_script() -> Vec<Vec<u8>> {
    vec![lua::script().get_hash().as_bytes().to_vec()]
}

/// An instance whose first purchase script is held on its way for `late`
/// after its connection is closed (a stalled connection).
async fn lua_app_holding_the_script(late: Duration) -> (TestApp, LoseOneAnswer) {
    lua_app_behind(|upstream| LoseOneAnswer::delaying(upstream, the_script(), late)).await
}

/// Bob buys, his pass's script is held past the look: he is told `503`
/// with `Retry-After`, whatever the look found. The answer's body.
async fn bob_held_past_the_look(
    app: &TestApp,
    proxy: &LoseOneAnswer,
    sale: i64,
) -> serde_json::Value {
    let told = app.purchase(sale, "bob").await;
    assert_eq!(proxy.answers_lost(), 1, "the script was not held");
    assert_eq!(told.status(), 503);
    assert!(told.headers().contains_key("retry-after"), "{told:?}");
    told.json().await.expect("JSON")
}

/// Ann holds a unit and asks again; the answer of her pass's script is
/// lost. She is told `409 already_purchased` with the order she holds,
/// read from the holds after the loss (a script landing late would leave
/// it as it is), not `503` naming an order that never was.
#[tokio::test]
async fn a_holder_whose_answer_is_lost_is_told_the_order_she_holds() {
    let (app, proxy) =
        lua_app_behind(|upstream| LoseOneAnswer::start(upstream, the_script())).await;
    let sale = app.create_sale(5).await;
    // Her unit, taken past the proxy.
    let earlier = Call::new(&app, sale, &["ann"]).await;
    let (_, _, answers) = earlier.run(&app, &mut app.redis_conn().await).await;
    assert_eq!(answers, ["taken"]);

    let told = app.purchase(sale, "ann").await;
    assert_eq!(proxy.answers_lost(), 1, "the script's answer was not lost");
    assert_eq!(told.status(), 409);
    let body: serde_json::Value = told.json().await.expect("JSON");
    assert_eq!(body["error"], "already_purchased", "{body}");
    assert_eq!(body["order_id"], earlier.order_of(0), "{body}");
}

/// Bob's pass's script is held on its way (a stalled connection) until
/// after the look that follows its lost answer, and then reaches Redis.
/// The look voided the pass: Bob is told `503 busy` with `Retry-After`
/// (nothing was taken, ask again), and the script, landing late, takes
/// nothing: no order nobody was told about, no unit gone. Asked again,
/// Bob buys.
#[tokio::test]
async fn a_script_that_lands_after_its_look_takes_nobody() {
    let late = Duration::from_secs(2);
    let (app, proxy) = lua_app_holding_the_script(late).await;
    let sale = app.create_sale(5).await;
    let voided = app.keys(sale).voided;
    let mut monitor = Monitor::start(app.scratch.redis_url(), &voided).await;

    let body = bob_held_past_the_look(&app, &proxy, sale).await;
    assert_eq!(body["error"], "busy", "{body}");

    // The held script reaches Redis, runs, and asks whether its pass was
    // voided: a command of its own, which a script refused `NOSCRIPT`
    // never runs.
    tokio::time::sleep(late + Duration::from_secs(1)).await;
    let asked = (monitor.until_now().await.into_iter())
        .filter(|command| command[0].eq_ignore_ascii_case("sismember"))
        .count();
    assert_eq!(
        asked, 1,
        "the held script never ran: the test proves nothing"
    );
    assert_eq!(
        app.redis_stock(sale).await,
        Some(5),
        "the late script took a unit"
    );
    assert!(app.redis_buyers(sale).await.is_empty());
    let report = app.drain().await;
    assert_eq!(report.confirmed, 0, "an order nobody was told about");

    assert_eq!(app.purchase(sale, "bob").await.status(), 202);
    assert_eq!(app.redis_stock(sale).await, Some(4));
}

/// Redis has lost the sale (a restart without persistence) when Bob's
/// pass's script is held on its way. No job found then is no answer: a
/// worker may still write a batch it reserved before the loss, so the
/// look asks again, and once its 3 s pass with the sale still not
/// loaded, Bob is told `503 unconfirmed` with his order id (`GET
/// /api/orders/{id}` tells later), not `503 busy`.
#[tokio::test]
async fn a_look_while_redis_has_lost_the_sale_leaves_the_buyer_in_doubt() {
    let (app, proxy) = lua_app_holding_the_script(Duration::from_secs(5)).await;
    let sale = app.create_sale(5).await;
    app.wipe_all_of_sale(sale).await;

    let body = bob_held_past_the_look(&app, &proxy, sale).await;
    assert_eq!(body["error"], "unconfirmed", "{body}");
    assert!(body["order_id"].is_string(), "{body}");
}
