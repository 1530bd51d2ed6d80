//! One Redis server stalled (SIGSTOP): it holds its connections and
//! answers nothing, as a server stalled by its host would. An instance's
//! callers share one connection to it (`src/redis_pool/sharing.rs`), so
//! every buyer's command waits on the same socket, and everything sent
//! into it runs once the server goes on, after its buyer was answered.
//!
//! What a buyer must be told meanwhile: `503` with `Retry-After`, within a
//! bound, never `500`; and an order that lands after its buyer was told
//! `503` was named in that answer (`unconfirmed`, with the order id), so
//! that nobody is told "no" for a unit that was sold to them. Once the
//! server goes on, the sale sells again at once, and PostgreSQL ends with
//! the orders Redis took, no buyer twice.

use std::time::Duration;

use futures::future::join_all;
use seckill_core::config::Strategy;

use crate::helpers::{Options, TestApp, Told, eventually, spawn_app_on_private_redis_with};

/// The bound within which every buyer is answered while the server is
/// stopped. A purchase spends a response timeout (500 ms;
/// `redis_pool/timeouts.rs`) on the command that meets the stall, or the
/// pool's create timeout (2.5 s) waiting for a new handle behind the
/// shared connection's check; one whose script was sent looks for its
/// order for up to 3 s more (`strategy/lost_answer.rs`) before it answers
/// in doubt. The stall begins before the buyers ask, so the lock's passes
/// meet it at their first command, not between the lock and the commit
/// (that one is `faults.rs`' lost answer, whose fence is closed first).
const ANSWERED_WITHIN: Duration = Duration::from_secs(4);

/// How soon a buyer is sold to once the server goes on: a round trip or
/// two, with room for a busy machine, but less than the lock's TTL (2 s),
/// which a lock taken for nobody would hold the sale for.
const SOLD_AGAIN_WITHIN: Duration = Duration::from_millis(1500);

/// Buyers who ask while the server is stopped, all at once, every one on
/// the shared connection.
const STALLED_BUYERS: usize = 16;

#[tokio::test]
async fn lock_a_stalled_server_answers_every_buyer_503_in_time_and_names_each_order_that_lands() {
    stalled_server(Strategy::Lock).await;
}

#[tokio::test]
async fn lua_a_stalled_server_answers_every_buyer_503_in_time_and_names_each_order_that_lands() {
    stalled_server(Strategy::Lua).await;
}

async fn stalled_server(strategy: Strategy) {
    let mut options = Options::default();
    options.purchase.strategy = strategy;
    let (redis, app) = spawn_app_on_private_redis_with(options).await;
    let sale = app.create_sale(100).await;
    // The connection is made, and shared, before the stall.
    let early = buy(&app, sale, "early").await;
    assert_eq!(early.status, 202, "{early:?}");
    let fence_before = fence(&app, sale).await;

    redis.pause();
    let app = &app;
    let stalled = join_all(
        (0..STALLED_BUYERS).map(|n| async move { buy(app, sale, &format!("stalled-{n}")).await }),
    )
    .await;
    redis.resume();

    for (n, told) in stalled.iter().enumerate() {
        assert_eq!(told.status, 503, "stalled-{n}: {told:?}");
        // Not "busy" (too many buyers at once): the server does not answer.
        let error = told.body["error"].as_str();
        assert!(
            matches!(error, Some("unavailable" | "unconfirmed")),
            "stalled-{n}: {told:?}"
        );
        assert!(told.retry_after, "stalled-{n}: {told:?}");
        assert!(told.took < ANSWERED_WITHIN, "stalled-{n}: {told:?}");
    }
    if strategy == Strategy::Lock {
        // A pass's lock attempt went into the stall and ran when the server
        // went on (it drew a fence): what the abandon is for.
        eventually(
            Duration::from_secs(2),
            "a lock attempt run after the stall",
            || async { fence(app, sale).await > fence_before },
        )
        .await;
    }
    // Sold to again at once: the shared connection is not left broken by
    // the commands that timed out on it, and a lock attempt sent into the
    // stall, which runs when the server goes on, is abandoned right after
    // it (`lua/lock_abandon.lua`), not left to hold the sale for its TTL.
    let after = buy(app, sale, "after").await;
    assert_eq!(after.status, 202, "{after:?}");
    assert!(after.took < SOLD_AGAIN_WITHIN, "{after:?}");

    app.drain().await;
    let orders = app.orders(sale).await;
    let buyers: Vec<&str> = orders.iter().map(|(_, user, _)| user.as_str()).collect();
    let mut distinct = buyers.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len(),
        buyers.len(),
        "a buyer ordered twice: {buyers:?}"
    );
    for who in ["early", "after"] {
        assert!(
            buyers.contains(&who),
            "{who}'s order is missing: {buyers:?}"
        );
    }
    // Every order of a buyer told `503` was named in that answer. `lock`
    // sends no commit into the stall (its passes meet it at the lock), so
    // none lands; `lua`'s first buyer's script goes in on the connection
    // `early` just used, is answered in doubt, and lands.
    let landed = orders
        .iter()
        .filter(|(_, user, _)| user.starts_with("stalled-"));
    match strategy {
        Strategy::Lock => assert_eq!(landed.count(), 0, "{buyers:?}"),
        _ => assert!(
            landed.count() > 0,
            "no script went into the stall: {stalled:?}"
        ),
    }
    for (order_id, user, _) in &orders {
        let Some(n) = user.strip_prefix("stalled-") else {
            continue;
        };
        let told = &stalled[n.parse::<usize>().expect("a number")];
        assert_eq!(
            told.body["error"], "unconfirmed",
            "{user} was told no, and their order {order_id} landed: {told:?}"
        );
        assert_eq!(
            told.body["order_id"],
            order_id.to_string(),
            "{user}'s order {order_id} landed, another was named: {told:?}"
        );
    }
    let left = app
        .redis_stock(sale)
        .await
        .expect("the sale's stock in Redis");
    assert_eq!(
        usize::try_from(100 - left).expect("units taken"),
        orders.len(),
        "Redis took one count of units and PostgreSQL holds another: {orders:?}"
    );
}

/// The sale lock's fence: how many times the lock was taken.
async fn fence(app: &TestApp, sale: i64) -> i64 {
    let fence: Option<i64> = redis::cmd("GET")
        .arg(&app.keys(sale).fence)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("GET the fence");
    fence.unwrap_or(0)
}

/// One purchase, given up on (a test failure) past twice the bound.
async fn buy(app: &TestApp, sale: i64, buyer: &str) -> Told {
    app.purchase_within(sale, buyer, ANSWERED_WITHIN * 2).await
}
