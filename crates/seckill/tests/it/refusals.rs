//! A Redis that answers but refuses work (out of memory, a replica, a
//! replica without its primary) gets the same honest answer as one that is
//! down: `503` with `Retry-After`, nothing written, and `/healthz` says
//! Redis refuses writes. Once it takes writes again, purchases go through.

use seckill_core::queue::QueueStats;
use seckill_core::redis_pool::RedisAt;
use seckill_devenv::services::PrivateRedis;
use serde_json::Value;

use crate::helpers::{Options, Scratch, TestApp, services, spawn_app_on};

/// Run `args` on the private Redis, as an operator would with redis-cli.
async fn config(redis: &PrivateRedis, args: &[&str]) {
    let client = redis::Client::open(redis.url()).expect("a Redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("a connection to the private Redis");
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command
        .query_async::<()>(&mut conn)
        .await
        .unwrap_or_else(|error| panic!("{args:?}: {error}"));
}

/// A purchase and `/healthz` while Redis refuses: both `503`, the purchase
/// with `Retry-After` and the `unavailable` code, and nothing written.
async fn assert_refused_honestly(app: &TestApp, sale: i64, buyer: &str, why: &str) {
    let response = app.purchase(sale, buyer).await;
    assert_eq!(response.status(), 503, "{why}: a purchase");
    assert_eq!(response.headers()["retry-after"], "1", "{why}");
    let body: Value = response.json().await.expect("JSON");
    assert_eq!(body["error"], "unavailable", "{why}: {body}");
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("GET /healthz");
    assert_eq!(health.status(), 503, "{why}: /healthz");
    let body: Value = health.json().await.expect("JSON");
    assert_eq!(body["redis"], "refuses writes", "{why}: {body}");
    assert_eq!(body["postgres"], "ok", "{why}: {body}");
}

#[tokio::test]
async fn a_redis_refusing_writes_is_answered_503_with_retry_after_and_healthz_says_so() {
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let scratch = Scratch::on(
        &services().await.database_url,
        &RedisAt::Server(redis.url()),
    )
    .await;
    let app = spawn_app_on(scratch, Options::default()).await;
    let sale = app.create_sale(10).await;
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);

    // Out of memory, under the `noeviction` policy the docs ask for.
    config(&redis, &["CONFIG", "SET", "maxmemory", "1"]).await;
    assert_refused_honestly(&app, sale, "bob", "OOM").await;
    config(&redis, &["CONFIG", "SET", "maxmemory", "0"]).await;

    // A replica (of a primary that is not there): READONLY to every write,
    // then MASTERDOWN to everything once it may not serve stale data.
    config(&redis, &["REPLICAOF", "127.0.0.1", "1"]).await;
    assert_refused_honestly(&app, sale, "bob", "READONLY").await;
    config(&redis, &["CONFIG", "SET", "replica-serve-stale-data", "no"]).await;
    assert_refused_honestly(&app, sale, "bob", "MASTERDOWN").await;
    config(
        &redis,
        &["CONFIG", "SET", "replica-serve-stale-data", "yes"],
    )
    .await;
    config(&redis, &["REPLICAOF", "NO", "ONE"]).await;

    // Nothing of the refused purchases was written.
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
    // Writable again: the same buyer goes through, and the units add up.
    assert_eq!(app.purchase(sale, "bob").await.status(), 202);
    let health = app
        .client
        .get(app.url("/healthz"))
        .send()
        .await
        .expect("GET /healthz");
    assert_eq!(health.status(), 200);
    app.drain().await;
    assert_eq!(app.orders(sale).await.len(), 2);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// A sale whose load into Redis is refused (here Redis answers the load
/// `WRONGTYPE`: a key of another kind lies under the new sale's id) is not
/// created: its insert rolls back with the load, so the error answered is
/// true, and the retry it asks for creates the sale once. Before, the
/// insert was committed first: the error was told for a sale that existed,
/// and its retry made a second one; answered `201` instead, the sale would
/// have sold against whatever another database left under its id, which
/// only a new sale's load replaces.
#[tokio::test]
async fn a_sale_whose_load_into_redis_is_refused_is_not_created_and_its_retry_creates_it_once() {
    let app = crate::helpers::spawn_app().await;
    let first = app.create_sale(1).await;
    // The next sale's load epoch (`keys.rs`: beside its stock key).
    let stock = app.keys(first + 1).stock;
    let next = format!(
        "{}:epoch",
        stock.strip_suffix(":stock").expect("a stock key")
    );
    let mut redis = app.redis_conn().await;
    redis::cmd("HSET")
        .arg(&next)
        .arg("not")
        .arg("an epoch")
        .query_async::<()>(&mut redis)
        .await
        .expect("HSET");
    let body = serde_json::json!({"name": "Phone", "stock": 3, "price_cents": 99_900});
    let refused = app.post_sale(&body).send().await.expect("POST");
    assert_eq!(refused.status(), 500);
    assert_eq!(app.sale_count().await, 1, "nothing created");
    redis::cmd("DEL")
        .arg(&next)
        .query_async::<()>(&mut redis)
        .await
        .expect("DEL");
    let sale = app.create_sale(3).await;
    assert_eq!(app.sale_count().await, 2, "created once");
    assert_eq!(app.redis_stock(sale).await, Some(3));
    assert_eq!(app.purchase(sale, "ann").await.status(), 202);
    app.drain().await;
    assert_eq!(app.orders(sale).await.len(), 1);
}
