//! `lua`'s one script for the buyers of a sale waiting on one instance:
//! each buyer decided in turn against the units the ones before left, a
//! buyer who comes twice taking one unit, a call run twice taking nothing
//! more, and the instance sending its waiting buyers in one call.

use std::time::Duration;

use seckill_core::config::Strategy;
use seckill_core::domain::OrderJob;
use seckill_core::redis_pool::RedisConn;
use seckill_core::strategy::lua;
use uuid::Uuid;

use crate::helpers::{Monitor, Options, RawBuyers, TestApp, spawn_app_on_private_redis_with};

/// One call of the purchase script for `buyers` (a sale without a room),
/// each with a fresh order id, as a pass of the sale's lane sends it:
/// what it answered, and the orders it named.
struct Call {
    pass: Uuid,
    jobs: Vec<OrderJob>,
}

impl Call {
    fn new(sale: i64, buyers: &[&str]) -> Self {
        let jobs = (buyers.iter())
            .map(|user| OrderJob {
                order_id: Uuid::now_v7(),
                sale_id: sale,
                user_id: (*user).to_owned(),
            })
            .collect();
        Self {
            pass: Uuid::now_v7(),
            jobs,
        }
    }

    /// Run it: (status, units left, one answer per buyer).
    async fn run(&self, app: &TestApp, conn: &mut RedisConn) -> (String, i64, Vec<String>) {
        let keys = app.keys(self.jobs[0].sale_id);
        let invocation = lua::invocation(&keys, false, self.pass, &self.jobs);
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

/// Five buyers in one call for three units, ann twice: ann, bob and cy
/// each take one, ann's second request is told her order, dee is told
/// sold out. Sent again (as a connection lost and re-sent would), the
/// call takes nothing more and answers the same. PostgreSQL ends with
/// the three orders.
#[tokio::test]
async fn one_call_decides_its_buyers_in_turn_and_a_second_run_takes_nothing() {
    let (_redis, app) = lua_app().await;
    let sale = app.create_sale(3).await;
    let mut conn = app.redis_conn().await;
    let call = Call::new(sale, &["ann", "bob", "ann", "cy", "dee"]);

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

    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (3, 0));
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
        ]
    );
}

/// The buyers waiting on one instance go in one call of the script: the
/// sale's Redis is stopped while 100 buyers ask for 40 units, and let go
/// once the instance has read every request (they wait in its lane by
/// then). Every unit is sold once, every buyer is answered (`202`, `409`,
/// or `503` for the first pass's, whose answer the stop may have held
/// past its timeout), and Redis ran a handful of scripts, not one a buyer.
#[tokio::test]
async fn buyers_waiting_on_one_instance_go_in_one_script() {
    let (redis, app) = lua_app().await;
    let sale = app.create_sale(40).await;
    let mut monitor = Monitor::start(&redis.url(), &app.keys(sale).stock).await;

    redis.pause();
    let buyers = RawBuyers::send(&app, sale, "buyer", 100).await;
    buyers.all_read().await;
    redis.resume();
    let answers = buyers.statuses().await;

    let scripts = (monitor.until_now().await.into_iter())
        .filter(|command| command[0].eq_ignore_ascii_case("evalsha"))
        .count();
    assert!(
        scripts <= 4,
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
