//! A purchase and the sale's lock: busy while another holds it, sold out
//! without waiting for it, a holder whose lock ran out fenced off, a
//! commit below zero still a commit, and the buyers waiting on one
//! instance going through it together.

use std::time::Duration;

use seckill_core::domain::OrderJob;
use seckill_core::keys::SaleKeys;
use seckill_core::lock::{LockGuard, RedisLock};
use seckill_core::redis_pool::RedisConn;
use seckill_core::strategy::under_lock;
use uuid::Uuid;

use crate::helpers::{Options, RawBuyers, spawn_app, spawn_app_with};
use crate::purchase::error_code;

/// The lock's commit of one order, for `user`, as a pass of its own
/// under `guard`: the units left it answers, `None` if the fence refused
/// it.
async fn commit_alone(
    conn: &mut RedisConn,
    keys: &SaleKeys,
    guard: &LockGuard,
    sale: i64,
    user: &str,
) -> Option<i64> {
    let job = OrderJob {
        order_id: Uuid::now_v7(),
        sale_id: sale,
        user_id: user.into(),
    };
    under_lock::commit(conn, keys, guard, job.order_id, std::slice::from_ref(&job))
        .await
        .expect("commit")
}

#[tokio::test]
async fn purchase_returns_503_busy_with_retry_after_while_the_lock_is_held_and_writes_nothing() {
    let mut options = Options::default();
    options.purchase.lock_wait_ms = 100;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(10).await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let _held = RedisLock::new(&keys.lock, &keys.fence, Duration::from_secs(30))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("the lock is free");

    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "1");
    assert_eq!(error_code(response).await, "busy");
    assert_eq!(app.redis_stock(sale).await, Some(10));
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.queue_stats(sale).await.waiting, 0);
}

#[tokio::test]
async fn a_sold_out_sale_answers_409_without_waiting_for_the_lock() {
    let mut options = Options::default();
    // If sold-out requests still queued for the lock, they would answer 503.
    options.purchase.lock_wait_ms = 300;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(1).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    assert_eq!(app.purchase(sale, "bob").await.status(), 409);

    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let _held = RedisLock::new(&keys.lock, &keys.fence, Duration::from_secs(30))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("the lock is free");
    for user in ["carl", "dora", "eve"] {
        let response = app.purchase(sale, user).await;
        assert_eq!(response.status(), 409, "{user}");
        assert_eq!(error_code(response).await, "sold_out");
    }
}

#[tokio::test]
async fn a_holder_whose_lock_expired_commits_nothing() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;

    // A purchase takes the lock, reads "1 left", then stalls past its TTL...
    let stale = RedisLock::new(&keys.lock, &keys.fence, Duration::from_millis(50))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("free");
    tokio::time::sleep(Duration::from_millis(100)).await;
    // ...another purchase takes the lock meanwhile...
    let current = RedisLock::new(&keys.lock, &keys.fence, Duration::from_secs(30))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("free after expiry");
    // ...and the stalled one wakes up and tries to write its decision.
    let written = commit_alone(&mut conn, &keys, &stale, sale, "stale").await;
    assert_eq!(written, None, "a stale holder's write went through");
    let fenced: Option<i64> = redis::cmd("GET")
        .arg(&keys.fenced)
        .query_async(&mut conn)
        .await
        .expect("GET fenced");
    assert_eq!(fenced, Some(1), "the refusal was not counted");
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert!(app.redis_buyers(sale).await.is_empty());
    assert_eq!(app.queue_stats(sale).await.waiting, 0);

    // The current holder's commit does go through.
    assert_eq!(
        commit_alone(&mut conn, &keys, &current, sale, "current").await,
        Some(0)
    );
    assert_eq!(app.redis_buyers(sale).await, ["current"]);
}

/// A holder whose commit takes the stock below zero (Redis already out of
/// step: the `naive` strategy ran on the same sale, or a reload raced) did
/// write: the order is queued, so the answer must be "written", not "lock
/// lost" (which the API would answer `503` for an order it had taken).
#[tokio::test]
async fn a_commit_that_takes_the_stock_below_zero_is_reported_as_written() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let holder = RedisLock::new(&keys.lock, &keys.fence, Duration::from_secs(30))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("free");
    // Something outside the lock sold the last unit meanwhile.
    let () = redis::cmd("SET")
        .arg(&keys.stock)
        .arg(0)
        .query_async(&mut conn)
        .await
        .expect("SET");
    let written = commit_alone(&mut conn, &keys, &holder, sale, "late").await;
    assert_eq!(
        written,
        Some(-1),
        "a commit that wrote was reported as a lost lock"
    );
    assert_eq!(app.queue_stats(sale).await.waiting, 1);
    assert_eq!(app.redis_buyers(sale).await, ["late"]);
}

/// The buyers waiting on one instance go through the sale's lock together:
/// while another holds the lock, 300 buyers arrive for 40 units; once it is
/// released, one pass takes them all. Every unit is sold once, every buyer
/// gets one answer, and the lock is taken a handful of times, not once per
/// buyer (each acquisition draws one fencing token).
#[tokio::test]
async fn buyers_waiting_on_one_instance_go_through_the_lock_together() {
    let mut options = Options::default();
    // The buyers wait as long as the test holds the lock.
    options.purchase.lock_wait_ms = 60_000;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(40).await;
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let held = RedisLock::new(&keys.lock, &keys.fence, Duration::from_secs(60))
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .expect("free");

    // The lock is released once the instance has read every request.
    let buyers = RawBuyers::send(&app, sale, "buyer", 300).await;
    buyers.all_read().await;
    held.release(&mut conn).await.expect("release");
    let answers = buyers.statuses().await;
    let won = answers.iter().filter(|status| **status == 202).count();
    let sold_out = answers.iter().filter(|status| **status == 409).count();
    assert_eq!((won, sold_out), (40, 260), "{answers:?}");

    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (40, 0));
    assert_eq!(app.sold(sale).await, 40);
    assert_eq!(app.redis_stock(sale).await, Some(0));
    let acquisitions: i64 = redis::cmd("GET")
        .arg(&keys.fence)
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("GET fence");
    // Ours, then one pass per 256 waiting buyers (and a straggler or two).
    assert!(
        acquisitions <= 5,
        "the lock was taken {acquisitions} times for 300 buyers: they did not go through together"
    );
}

/// A pass whose commit the fence refuses took nothing, so nobody it
/// refused for want of a unit is told "sold out", and the instance does
/// not start answering "sold out" to everyone. Here every holder pauses
/// 400 ms inside a 100 ms lock: ann's pass is fenced; bob and cy, queued
/// behind it, go through the next pass together, where bob wins the one
/// unit and cy is refused for want of it, and that pass is fenced too.
#[tokio::test]
async fn a_fenced_pass_answers_lock_lost_to_everyone_it_refused_and_leaves_the_sale_on_sale() {
    let mut options = Options::default();
    options.purchase.hold_pause_ms = 400;
    options.purchase.lock_ttl_ms = 100;
    options.purchase.lock_wait_ms = 5_000;
    let app = spawn_app_with(options).await;
    let sale = app.create_sale(1).await;
    let (ann, (bob, cy)) = tokio::join!(app.purchase(sale, "ann"), async {
        // While ann's pass holds the lane, both queue behind it.
        tokio::time::sleep(Duration::from_millis(150)).await;
        tokio::join!(app.purchase(sale, "bob"), app.purchase(sale, "cy"))
    });
    for (name, response) in [("ann", ann), ("bob", bob), ("cy", cy)] {
        assert_eq!(response.status(), 503, "{name}");
        assert_eq!(error_code(response).await, "lock_lost", "{name}");
    }
    // Nothing was taken, and the next buyer is not told "sold out" by a
    // flag: she goes through the lock (and is fenced like the others).
    assert_eq!(app.redis_stock(sale).await, Some(1));
    assert!(app.redis_buyers(sale).await.is_empty());
    let dee = app.purchase(sale, "dee").await;
    assert_eq!(dee.status(), 503);
    assert_eq!(error_code(dee).await, "lock_lost");
}
