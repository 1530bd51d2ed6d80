//! seckill on a Redis Cluster: three masters started from the installed
//! `redis-server`, slots shared out by `redis-cli --cluster create`, and
//! every part (the purchase path, the queue, the worker, the events, the
//! tally, the load test's verifier) pointed at it through
//! `SECKILL_REDIS_CLUSTER_NODES`; and a cluster with a replica per master,
//! where `--redis-durability replica` waits for them.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use seckill_core::events::SaleEvents;
use seckill_core::keys::SaleKeys;
use seckill_core::redis_pool::RedisPool;
use seckill_devenv::services::PrivateRedisCluster;
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    Monitor, Options, Scratch, TestApp, Told, cluster, create_sale_at, eventually,
    loadtest_command, services, spawn_app_on, start_app_and_a_worker,
};

use crate::processes::{finish, orders_by_status, read_json, text};

/// The masters, started and joined; a scratch database and prefix on them.
async fn three_masters() -> (PrivateRedisCluster, Scratch) {
    let redis = PrivateRedisCluster::start(3)
        .await
        .expect("a private 3-master Redis Cluster");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    (redis, scratch)
}

/// Create sales on `url` until one lives on each master; returns one sale
/// per master.
async fn a_sale_on_each_master(
    redis: &PrivateRedisCluster,
    scratch: &Scratch,
    url: &str,
) -> BTreeMap<String, i64> {
    one_sale_per_master(
        redis,
        |n| async move { create_sale_at(url, &format!("Sale {n}"), 10).await },
        |sale| SaleKeys::new(&scratch.prefix, sale).stock,
    )
    .await
}

/// Sales made by `create` (given a count) until one lives on each master
/// of `redis`, placed by their stock key (`stock_of`): master URL to sale.
async fn one_sale_per_master<Made>(
    redis: &PrivateRedisCluster,
    mut create: impl FnMut(usize) -> Made,
    stock_of: impl Fn(i64) -> String,
) -> BTreeMap<String, i64>
where
    Made: Future<Output = i64>,
{
    let mut by_master = BTreeMap::new();
    for n in 0..64 {
        let sale = create(n).await;
        let master = redis
            .master_of(&stock_of(sale))
            .await
            .expect("the sale's master");
        by_master.entry(master).or_insert(sale);
        if by_master.len() == redis.urls().len() {
            return by_master;
        }
    }
    panic!("64 sales and still a master without one: {by_master:?}");
}

#[tokio::test]
async fn a_two_instance_burst_on_sales_spread_over_three_masters_sells_each_unit_once() {
    let (redis, scratch) = three_masters().await;
    let mut processes = cluster(&scratch, &[]);
    let a = processes.start_app("a", &[]).await.expect("a starts");
    let b = start_app_and_a_worker(&mut processes, "b").await;
    let sales = a_sale_on_each_master(&redis, &scratch, &a).await;

    // One load test per sale, all at once, each against both instances and
    // verified by the load test itself (PostgreSQL and the sale's keys,
    // read through its own cluster connection).
    let dir = tempfile::tempdir().expect("a temp dir");
    let runs = sales.values().map(|sale| {
        let json = dir.path().join(format!("{sale}.json"));
        let command = loadtest_command(
            &scratch,
            &[
                "--target",
                &a,
                "--target",
                &b,
                "--sale",
                &sale.to_string(),
                "--users",
                "300",
                "--dup",
                "0.1",
                "--json",
                json.to_str().expect("a UTF-8 path"),
            ],
            &[],
        );
        async move { (finish(command).await, json) }
    });
    for (output, json) in futures::future::join_all(runs).await {
        assert_eq!(output.status.code(), Some(0), "{}", text(&output));
        let report = read_json(&json);
        assert_eq!(report["verdict"], "pass");
        assert_eq!(report["summary"]["counts"]["won"], 10);
        let checks = report["invariants"].as_array().expect("the checks");
        assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    }
    assert_eq!(orders_by_status(&scratch).await, [("confirmed".into(), 30)]);

    // Each master holds a sale's keys: the data really is spread.
    for (master, sale) in &sales {
        let client = redis::Client::open(master.as_str()).expect("a node URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a master answers");
        let keys: BTreeSet<String> = redis::cmd("KEYS")
            .arg(format!("{}:{{sale:{sale}}}:*", scratch.prefix))
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        assert!(
            keys.contains(&SaleKeys::new(&scratch.prefix, *sale).stock),
            "{master} does not hold sale {sale}'s stock: {keys:?}"
        );
    }

    // The instances' answer counts, flushed for several sales at once
    // (keys on different masters), add up to every request of each run.
    let pool = RedisPool::new(&scratch.redis, Duration::from_secs(5)).expect("a pool");
    for sale in sales.values() {
        let answers = SaleKeys::new(&scratch.prefix, *sale).answers;
        eventually(Duration::from_secs(5), "every answer counted", || async {
            let mut conn = pool.get().await.expect("a connection");
            let counts: BTreeMap<String, u64> = redis::cmd("HGETALL")
                .arg(&answers)
                .query_async(&mut conn)
                .await
                .expect("HGETALL");
            counts.values().sum::<u64>() == 330 && counts.get("accepted") == Some(&10)
        })
        .await;
    }
    processes.stop().await;
}

#[tokio::test]
async fn a_stock_change_published_on_one_master_reaches_an_instance_subscribed_on_another() {
    let (redis, scratch) = three_masters().await;
    let mut processes = cluster(&scratch, &[]);
    let a = processes.start_app("a", &[]).await.expect("a starts");
    let sales = a_sale_on_each_master(&redis, &scratch, &a).await;
    // The listener subscribes on the first node given; take a sale whose
    // master is another one, so that only the cluster bus can carry it.
    let first = &redis.urls()[0];
    let (_, &sale) = sales
        .iter()
        .find(|(master, _)| *master != first)
        .expect("a sale on another master");
    let shutdown = CancellationToken::new();
    let (events, task) =
        SaleEvents::start(&scratch.redis, &scratch.prefix, shutdown.clone()).expect("start");
    let mut changes = events.subscribe();
    // Both subscribers (instance a's and ours) on the first node, so that
    // the purchase below is published after they listen.
    let client = redis::Client::open(first.as_str()).expect("a node URL");
    let node = client
        .get_multiplexed_async_connection()
        .await
        .expect("the first node answers");
    eventually(Duration::from_secs(10), "two pattern subscribers", || {
        let mut node = node.clone();
        async move {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(&mut node)
                .await
                .expect("CLIENT LIST");
            // Each follows its patterns (stock changes, lock releases).
            let following = |client: &&str| {
                client
                    .split(' ')
                    .any(|field| field.strip_prefix("psub=").is_some_and(|n| n != "0"))
            };
            clients.lines().filter(following).count() >= 2
        }
    })
    .await;
    let response = crate::helpers::client()
        .post(format!("{a}/api/sales/{sale}/purchase"))
        .json(&serde_json::json!({ "user_id": "buyer" }))
        .send()
        .await
        .expect("POST purchase");
    assert_eq!(response.status(), 202);
    let received = tokio::time::timeout(Duration::from_secs(5), changes.recv())
        .await
        .ok()
        .and_then(Result::ok);
    let change = received.expect("a stock change arrived through the cluster bus");
    assert_eq!((change.sale_id, change.stock_left), (sale, 9));
    shutdown.cancel();
    task.await.expect("the listener stops");
    processes.stop().await;
}

/// A Redis Cluster with a replica per master (`--cluster-replicas 1`) and
/// `--redis-durability replica`: a `202` once a replica holds the writes;
/// with the sale's shard's replica frozen, and only that one (a `WAIT`
/// sent to the wrong shard must not pass), `503 unconfirmed` with the
/// order id.
#[tokio::test]
async fn on_a_cluster_with_replicas_a_202_waits_for_a_replica() {
    let _cores = crate::helpers::cores_alone().await;
    let redis = PrivateRedisCluster::start_with_replicas(3, 1)
        .await
        .expect("a private cluster of 3 masters and 3 replicas");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    let app = crate::helpers::spawn_app_on(
        scratch,
        crate::helpers::Options {
            durability: seckill_core::config::RedisDurability::Replica {
                wait: Duration::from_millis(300),
                replicas: 1,
            },
            ..Default::default()
        },
    )
    .await;
    // Units enough for every try below: an unconfirmed pass takes its unit.
    let sale = app.create_sale(50).await;
    // A `202` once the new replicas have caught up with their masters (a
    // cluster just started may still be in its first sync, and then the
    // pass's WAIT times out: `503 unconfirmed`, as it should).
    let mut n = 0;
    eventually(
        Duration::from_secs(10),
        "a 202 once the replicas are in step",
        || {
            n += 1;
            let buyer = format!("early-{n}");
            let app = &app;
            async move { app.purchase(sale, &buyer).await.status() == 202 }
        },
    )
    .await;

    let master = redis
        .master_of(&app.keys(sale).stock)
        .await
        .expect("the sale's master");
    let replicas = redis.replicas_of(&master).await;
    assert_eq!(replicas.len(), 1, "{replicas:?}");
    let replica = redis.node(&replicas[0]).expect("the replica's node");
    replica.pause();
    let response = app.purchase(sale, "bob").await;
    replica.resume();
    assert_eq!(response.status(), 503);
    let body: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(body["error"], "unconfirmed", "{body}");
    assert!(body["order_id"].is_string(), "{body}");

    let mut n = 0;
    eventually(
        Duration::from_secs(10),
        "a 202 once the replicas are back",
        || {
            n += 1;
            let buyer = format!("cy-{n}");
            let app = &app;
            async move { app.purchase(sale, &buyer).await.status() == 202 }
        },
    )
    .await;
}

/// The bound within which every request is answered, whatever a shard
/// does: a purchase that meets a node that does not answer spends a few
/// response timeouts (500 ms each; `redis_pool/timeouts.rs`) and is told
/// `503` with `Retry-After`.
const ANSWERED_WITHIN: Duration = Duration::from_secs(2);

/// One purchase, given up on (a test failure) past twice the bound.
async fn buy(app: &TestApp, sale: i64, buyer: &str) -> Told {
    app.purchase_within(sale, buyer, ANSWERED_WITHIN * 2).await
}

/// Sales created on `app` until one lives on each master of `redis`:
/// master URL to sale.
async fn a_sale_per_master(redis: &PrivateRedisCluster, app: &TestApp) -> BTreeMap<String, i64> {
    one_sale_per_master(redis, |_| app.create_sale(100), |sale| app.keys(sale).stock).await
}

/// The first row of the table: one shard's primary stopped
/// (SIGSTOP). The buyers of a sale on another shard are sold to as ever;
/// the buyer of the stopped shard's sale is told `503` with `Retry-After`;
/// nobody waits past the bound. (Before the cluster connections had a
/// response timeout, both waited for as long as the node was stopped.)
/// The purchase limits are on, per address and per buyer: their counts
/// live on the sale's shard. (Before, each buyer's count lived on any
/// shard, so a healthy sale's buyers whose count was on the stalled one
/// were told `503`.)
#[tokio::test]
async fn a_stalled_shard_stops_only_its_own_sales_and_every_buyer_is_answered_in_time() {
    let (redis, scratch) = three_masters().await;
    let limits = seckill_core::config::RateLimitSettings {
        rate_limit_per_ip: 10_000,
        rate_limit_per_buyer: 100,
        ..Default::default()
    };
    let options = Options {
        limits,
        ..Options::default()
    };
    let app = spawn_app_on(scratch, options).await;
    let sales = a_sale_per_master(&redis, &app).await;
    // Every sale sells before the stall (the connections are made).
    for sale in sales.values() {
        assert_eq!(buy(&app, *sale, "early").await.status, 202);
    }
    let (stalled_master, stalled_sale) = sales.iter().next().expect("a sale");
    let stalled = redis.node(stalled_master).expect("the master's node");

    stalled.pause();
    let healthy = sales
        .values()
        .filter(|sale| *sale != stalled_sale)
        .flat_map(|sale| (0..10).map(move |n| (*sale, format!("buyer-{sale}-{n}"))));
    let app = &app;
    let buying = healthy
        .clone()
        .map(|(sale, buyer)| async move { buy(app, sale, &buyer).await });
    let (told, stopped) = tokio::join!(
        futures::future::join_all(buying),
        buy(app, *stalled_sale, "stalled-buyer"),
    );
    stalled.resume();

    for ((sale, buyer), told) in healthy.zip(&told) {
        assert_eq!(told.status, 202, "{buyer} of sale {sale}: {told:?}");
        assert!(
            told.took < ANSWERED_WITHIN,
            "{buyer} of sale {sale}: {told:?}"
        );
    }
    assert_eq!(stopped.status, 503, "{stopped:?}");
    assert_eq!(stopped.body["error"], "unavailable", "{stopped:?}");
    assert!(stopped.retry_after, "{stopped:?}");
    assert!(stopped.took < ANSWERED_WITHIN, "{stopped:?}");
}

/// A primary that stops answering without closing its connections (its
/// host froze it, or a network drops its packets: no reset ever arrives)
/// is failed over to its replica, and its sale sells again from the
/// replica while the old primary is still stopped; every answer meanwhile
/// is a `202` or a `503`. (Before, the cluster client kept the stopped
/// node's slots in its map, since only an answer or a dropped connection
/// makes it ask the cluster again: the sale answered `503` until the old
/// primary came back; `redis_pool/followed.rs`.)
#[tokio::test]
async fn a_sale_sells_again_from_the_replica_that_replaced_its_stopped_primary() {
    let _cores = crate::helpers::cores_alone().await;
    let redis = PrivateRedisCluster::start_with(3, 1, Duration::from_millis(1_500))
        .await
        .expect("a private cluster of 3 masters and 3 replicas");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    let app = spawn_app_on(scratch, Options::default()).await;
    let sale = app.create_sale(100).await;
    sells(&app, sale).await;
    let slot = redis
        .slot_of(&app.keys(sale).stock)
        .await
        .expect("the slot");
    let old = redis.master_of_slot(slot).await.expect("the primary");
    let stopped = redis.node(&old).expect("the primary's node");

    stopped.pause();
    let promoted = redis.wait_for_failover(&old, slot).await;
    let mut answers = Vec::new();
    let sold = tokio::time::timeout(Duration::from_secs(10), async {
        for n in 0.. {
            let told = buy(&app, sale, &format!("after-{n}")).await;
            answers.push((told.status, told.body["error"].clone()));
            if told.status == 202 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await;
    stopped.resume();

    let promoted = promoted.expect("the cluster promoted the replica");
    assert!(
        sold.is_ok(),
        "no 202 within 10 s of {promoted} replacing {old}: {answers:?}"
    );
    assert!(
        answers
            .iter()
            .all(|(status, _)| [202, 503].contains(status)),
        "{answers:?}"
    );
}

/// A handle taken from the pool sends everything on the connection it
/// was given, even after the pool made its connection anew; the next
/// handle taken goes on the new one. A step and the `WAIT` that confirms
/// it are sent one after the other and must reach the same node: on two
/// connections, a step run by an old primary (resumed, not yet told it was
/// replaced) would be confirmed by the new primary's replicas
/// (`redis_pool/followed.rs`).
#[tokio::test]
async fn a_handle_keeps_its_connection_when_the_pool_makes_a_new_one() {
    let (redis, scratch) = three_masters().await;
    let pool = seckill_core::redis_pool::connect_redis(&redis.at(), Duration::from_secs(5))
        .await
        .expect("a pool on the cluster");
    let key = format!("{}:pinned", scratch.prefix);
    let node = redis.master_of(&key).await.expect("the key's master");
    let mut held = pool.get().await.expect("a handle");
    send(&mut held, "STRLEN", &key).await;
    let before = ran_on(&node, "strlen").await;

    // A command that goes unanswered on another shard makes the pool's
    // connection anew.
    let mut elsewhere = String::new();
    for n in 0.. {
        elsewhere = format!("{}:elsewhere-{n}", scratch.prefix);
        if redis.master_of(&elsewhere).await.expect("a master") != node {
            break;
        }
    }
    let other = redis.master_of(&elsewhere).await.expect("a master");
    let stopped = redis.node(&other).expect("its node");
    stopped.pause();
    let unanswered: redis::RedisResult<redis::Value> = redis::cmd("EXISTS")
        .arg(&elsewhere)
        .query_async(&mut pool.get().await.expect("a handle"))
        .await;
    stopped.resume();
    assert!(unanswered.is_err(), "the stopped shard answered");
    eventually(
        Duration::from_secs(10),
        "a handle on a new connection",
        || {
            let (pool, key, node, before) = (&pool, &key, &node, &before);
            async move {
                let mut fresh = pool.get().await.expect("a handle");
                send(&mut fresh, "HLEN", key).await;
                ran_on(node, "hlen").await != *before
            }
        },
    )
    .await;

    send(&mut held, "LLEN", &key).await;
    assert_eq!(ran_on(&node, "llen").await, before, "the held handle moved");
}

/// Send `command key` on `conn`.
async fn send(conn: &mut seckill_core::redis_pool::RedisConn, command: &str, key: &str) {
    let _: redis::Value = redis::cmd(command)
        .arg(key)
        .query_async(conn)
        .await
        .expect("an answer");
}

/// The id of the newest client connection to `node` whose last command
/// was `command` (lower case), from the node's `CLIENT LIST`.
async fn ran_on(node: &str, command: &str) -> u64 {
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut crate::helpers::redis_at(node).await)
        .await
        .expect("CLIENT LIST");
    let found = list
        .lines()
        .filter(|line| line.contains(&format!(" cmd={command} ")))
        .filter_map(|line| line.strip_prefix("id=")?.split(' ').next()?.parse().ok())
        .max();
    found.unwrap_or_else(|| panic!("no client ran {command}: {list}"))
}

/// A shard that forgot its scripts (a restart, a promotion) while another
/// is stopped: its sales still sell and its orders drain. The scripts go
/// by their hash, and the node's `NOSCRIPT` is answered by loading the
/// script on that node alone (`scripts.rs`). (Before, the redis crate's
/// `SCRIPT LOAD` went to every primary and waited for the stopped one:
/// the buyer was told `503`, and the worker could not reserve.)
#[tokio::test]
async fn a_shard_that_forgot_its_scripts_sells_while_another_shard_is_stopped() {
    let (redis, scratch) = three_masters().await;
    let app = spawn_app_on(scratch, Options::default()).await;
    let sales = a_sale_per_master(&redis, &app).await;
    for sale in sales.values() {
        assert_eq!(buy(&app, *sale, "early").await.status, 202);
    }
    let mut masters = sales.iter();
    let (forgetful, sale) = masters.next().expect("a sale");
    let (stopped, _) = masters.next().expect("another");
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut crate::helpers::redis_at(forgetful).await)
        .await
        .expect("SCRIPT FLUSH");

    let stopped = redis.node(stopped).expect("the master's node");
    stopped.pause();
    let told = buy(&app, *sale, "ann").await;
    let drained = app.worker.try_process_batch(*sale).await;
    stopped.resume();
    assert_eq!(told.status, 202, "{told:?}");
    assert!(told.took < ANSWERED_WITHIN, "{told:?}");
    let drained = drained.expect("the forgetful shard's orders drain");
    assert_eq!(
        drained.confirmed, 2,
        "early's and ann's orders: {drained:?}"
    );
}

/// A cluster of three shards, each a primary and one replica, and an app
/// whose `202` waits for the sale's replica (`wait` at most).
async fn three_shards_with_replicas(
    strategy: seckill_core::config::Strategy,
    wait: Duration,
) -> (PrivateRedisCluster, TestApp) {
    let redis = PrivateRedisCluster::start_with_replicas(3, 1)
        .await
        .expect("a private cluster of 3 masters and 3 replicas");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    let mut options = Options {
        durability: seckill_core::config::RedisDurability::Replica { wait, replicas: 1 },
        ..Options::default()
    };
    options.purchase.strategy = strategy;
    (redis, spawn_app_on(scratch, options).await)
}

/// How long the tests' `202` waits for a replica.
const WAIT: Duration = Duration::from_millis(300);

/// A `202` for a new buyer of `sale`, once its replica is in step (a
/// cluster just started may still be in its first sync).
async fn sells(app: &TestApp, sale: i64) {
    let mut n = 0;
    eventually(Duration::from_secs(10), "a 202 once in step", || {
        n += 1;
        let buyer = format!("early-{n}");
        async move { app.purchase(sale, &buyer).await.status() == 202 }
    })
    .await;
}

/// A sale touches only its own shard, its `WAIT` included. With one
/// shard's replica stopped, that shard's buyers are told `503 unconfirmed`
/// and another shard's are sold to; with a third shard's primary stopped,
/// the same. (Before, the `WAIT` went to every primary and took the
/// smallest count, and each order's lookup entry went to any shard: one
/// shard's trouble refused every sale's buyers.)
#[tokio::test]
async fn a_shard_without_a_live_replica_or_with_a_stalled_primary_stops_only_its_own_sales() {
    let _cores = crate::helpers::cores_alone().await;
    let (redis, app) = three_shards_with_replicas(seckill_core::config::Strategy::Lock, WAIT).await;
    let sales = a_sale_per_master(&redis, &app).await;
    for sale in sales.values() {
        sells(&app, *sale).await;
    }
    let shards: Vec<(&String, i64)> = sales.iter().map(|(master, sale)| (master, *sale)).collect();
    let [(replicaless, sale_a), (_, sale_b), (stalled, sale_c)] = shards[..] else {
        panic!("three shards: {shards:?}");
    };

    let replicas = redis.replicas_of(replicaless).await;
    assert!(!replicas.is_empty(), "{replicaless} has no replica");
    let nodes: Vec<_> = replicas
        .iter()
        .map(|url| redis.node(url).expect("a replica's node"))
        .collect();
    nodes.iter().for_each(|node| node.pause());
    let (on_a, on_b) = tokio::join!(buy(&app, sale_a, "ann"), buy(&app, sale_b, "bob"));
    nodes.iter().for_each(|node| node.resume());
    assert_eq!(on_a.status, 503, "{on_a:?}");
    assert_eq!(on_a.body["error"], "unconfirmed", "{on_a:?}");
    assert!(on_a.body["order_id"].is_string(), "{on_a:?}");
    assert_eq!(on_b.status, 202, "the other shard's buyer: {on_b:?}");

    let primary = redis.node(stalled).expect("the stalled primary's node");
    primary.pause();
    let (on_b, on_c) = tokio::join!(buy(&app, sale_b, "cy"), buy(&app, sale_c, "dee"));
    primary.resume();
    assert_eq!(on_b.status, 202, "the healthy shard's buyer: {on_b:?}");
    assert!(on_b.took < ANSWERED_WITHIN, "{on_b:?}");
    assert_eq!(on_c.status, 503, "the stalled shard's buyer: {on_c:?}");
    assert!(on_c.retry_after, "{on_c:?}");
}

/// How long a buyer may wait while the sale's primary drops every
/// connection: a commit in doubt makes sure a late one cannot land (up to
/// the lock's TTL, 2 s) and looks for its order (up to 3 s), and the
/// buyers queued behind it on the instance wait for it.
const IN_DOUBT_WITHIN: Duration = Duration::from_secs(15);

/// The second row of the table: the sale's replica stopped while
/// its primary drops every client connection every few milliseconds
/// (`CLIENT KILL TYPE normal`), under `replica`, with `strategy`. Nothing
/// can be confirmed, so nobody is told `202`; nobody is told `500`; and
/// every order that reaches PostgreSQL was told to its buyer, `202` or
/// `503` with its id. (Before, the cluster client re-sent what a dropped
/// connection lost: a `WAIT` on a fresh connection answered at once with
/// the stopped replica, a `202` with nothing behind it; a commit ran twice
/// and its buyer heard `lock_lost`, or `409`, for an order that was taken.)
async fn a_dropped_connection_is_in_doubt_never_a_second_try(
    strategy: seckill_core::config::Strategy,
) {
    let _cores = crate::helpers::cores_alone().await;
    let (redis, app) = three_shards_with_replicas(strategy, WAIT).await;
    let sale = app.create_sale(1_000).await;
    sells(&app, sale).await;
    let master = redis
        .master_of(&app.keys(sale).stock)
        .await
        .expect("the sale's master");
    let replicas = redis.replicas_of(&master).await;
    let replicas: Vec<_> = replicas
        .iter()
        .map(|url| redis.node(url).expect("a replica's node"))
        .collect();

    replicas.iter().for_each(|replica| replica.pause());
    let dropping = seckill_devenv::services::drop_clients(&master, Duration::from_millis(3));
    // Eighty buyers at once: many scripts in flight when a connection
    // drops (`lua`), a pass's commit among them (`lock`).
    let app = &app;
    let told = futures::future::join_all((0..80).map(|n| async move {
        let buyer = format!("buyer-{n}");
        let told = app.purchase_within(sale, &buyer, IN_DOUBT_WITHIN).await;
        (buyer, told)
    }))
    .await;
    let kills = dropping.stop().await.expect("the connection dropper");
    replicas.iter().for_each(|replica| replica.resume());
    assert!(kills > 0, "no connection was dropped");

    let mut statuses = BTreeMap::<u16, u32>::new();
    let mut told_ids = BTreeSet::new();
    for (buyer, told) in &told {
        *statuses.entry(told.status).or_default() += 1;
        assert_ne!(
            told.status, 202,
            "{buyer} told 202 with no replica: {told:?}"
        );
        assert_ne!(told.status, 500, "{buyer}: {told:?}");
        if let Some(id) = told.body["order_id"].as_str() {
            told_ids.insert(id.to_owned());
        }
    }
    let slowest = told.iter().map(|(_, told)| told.took).max();
    eprintln!("{strategy:?}: {statuses:?}, {kills} kills, slowest answer {slowest:?}");

    // Once the replica is back, the worker confirms what was taken.
    // (A pass may be given back while the replica catches up.)
    let orders = drained_orders(app, sale).await;
    for (order_id, buyer, status) in &orders {
        if buyer.starts_with("early-") {
            continue;
        }
        assert!(
            told_ids.contains(&order_id.to_string()),
            "{buyer}'s order {order_id} ({status}) was never told to its buyer"
        );
    }
}

#[tokio::test]
async fn with_lock_a_dropped_connection_is_in_doubt_never_a_second_try() {
    a_dropped_connection_is_in_doubt_never_a_second_try(seckill_core::config::Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_a_dropped_connection_is_in_doubt_never_a_second_try() {
    a_dropped_connection_is_in_doubt_never_a_second_try(seckill_core::config::Strategy::Lua).await;
}

/// A purchase whose commit ran but whose answer the connection lost, made
/// certain: the sale's replica is stopped, so the commit's `WAIT` holds
/// its connection after the commit ran, and exactly that connection is
/// dropped (`CLIENT KILL ID`) while it waits. The buyer is told `503`
/// naming the order the commit took, PostgreSQL ends with that order, and
/// Redis ran the commit once. (With the cluster client's own retries,
/// `retries(16)` in `redis_pool/timeouts.rs`, it re-sent the commit and
/// its `WAIT` on a new connection: the commit ran twice, and its second run
/// told the winner `409 already_purchased` under `lua`, as a script of
/// one buyer then did, and `lock_lost` under `lock`. `lua`'s pass script
/// now answers a second run what the first did, so only the count of
/// runs shows the re-send.)
async fn a_commit_whose_answer_was_lost_is_never_sent_again(
    strategy: seckill_core::config::Strategy,
) {
    let _cores = crate::helpers::cores_alone().await;
    let (redis, app) = three_shards_with_replicas(strategy, Duration::from_secs(3)).await;
    let sale = app.create_sale(10).await;
    sells(&app, sale).await;
    let master = redis
        .master_of(&app.keys(sale).stock)
        .await
        .expect("the sale's master");
    let replicas: Vec<_> = (redis.replicas_of(&master).await.iter())
        .map(|url| redis.node(url).expect("a replica's node"))
        .collect();
    let buyer = format!("lost-answer-{}", uuid::Uuid::new_v4().simple());
    let mut monitor = Monitor::start(&master, &buyer).await;

    replicas.iter().for_each(|replica| replica.pause());
    let drop_it = async {
        let dropped = drop_the_connection_in_wait(&master).await;
        replicas.iter().for_each(|replica| replica.resume());
        dropped
    };
    let (told, dropped) = tokio::join!(app.purchase_within(sale, &buyer, IN_DOUBT_WITHIN), drop_it);
    assert!(dropped, "no connection was seen waiting for the replica");

    let commits: Vec<_> = (monitor.until_now().await.into_iter())
        .filter(|command| command[0].eq_ignore_ascii_case("evalsha"))
        .collect();
    assert_eq!(
        commits.len(),
        1,
        "the commit ran more than once, and {buyer} was told {told:?}: {commits:?}"
    );
    assert_eq!(told.status, 503, "{buyer}: {told:?}");
    assert!(told.retry_after, "{told:?}");
    let order_id = told.body["order_id"]
        .as_str()
        .unwrap_or_else(|| panic!("{buyer} was not told the order taken: {told:?}"))
        .to_owned();

    let orders = drained_orders(&app, sale).await;
    let theirs: Vec<_> = orders.iter().filter(|(_, who, _)| *who == buyer).collect();
    assert_eq!(theirs.len(), 1, "{buyer}'s orders: {orders:?}");
    assert_eq!(
        theirs[0].0.to_string(),
        order_id,
        "{buyer} was told another order"
    );
}

/// The orders of `sale` in PostgreSQL once the worker has drained its
/// queue (a pass may be given back while a replica catches up).
async fn drained_orders(app: &TestApp, sale: i64) -> Vec<(uuid::Uuid, String, String)> {
    eventually(Duration::from_secs(20), "the queue drained", || async {
        let _ = app.worker.run_once().await;
        let stats = app.queue_stats(sale).await;
        stats.waiting == 0 && stats.in_flight == 0
    })
    .await;
    crate::helpers::orders(&app.pg, sale).await
}

/// Finds the client of `master` blocked in `WAIT` within 5 s and drops
/// its connection; whether one was found.
async fn drop_the_connection_in_wait(master: &str) -> bool {
    let mut conn = crate::helpers::redis_at(master).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        let clients: String = redis::cmd("CLIENT")
            .arg("LIST")
            .query_async(&mut conn)
            .await
            .expect("CLIENT LIST");
        // Blocked (`flags=b`) in `WAIT` now: `cmd` is only the last
        // command a client sent, and an idle connection whose last was an
        // earlier purchase's `WAIT` says `cmd=wait` too (killing it before
        // the purchase was sent lost no answer: the suite caught that).
        let waiting = clients
            .lines()
            .filter(|line| line.contains(" cmd=wait ") && line.contains(" flags=b "))
            .find_map(|line| line.strip_prefix("id=")?.split(' ').next());
        if let Some(id) = waiting {
            let _: i64 = redis::cmd("CLIENT")
                .arg("KILL")
                .arg("ID")
                .arg(id)
                .query_async(&mut conn)
                .await
                .expect("CLIENT KILL ID");
            return true;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    false
}

#[tokio::test]
async fn with_lock_a_commit_whose_answer_was_lost_is_never_sent_again() {
    a_commit_whose_answer_was_lost_is_never_sent_again(seckill_core::config::Strategy::Lock).await;
}

#[tokio::test]
async fn with_lua_a_commit_whose_answer_was_lost_is_never_sent_again() {
    a_commit_whose_answer_was_lost_is_never_sent_again(seckill_core::config::Strategy::Lua).await;
}

/// `--redis-wait-replicas 2` on shards with two replicas each: one of the
/// sale's replicas stopped is enough to refuse a `202` (`503 unconfirmed`
/// with the order id); with both in step, a `202`. (Before, `WAIT 1` was
/// sent whatever the setting, and one replica sufficed.)
#[tokio::test]
async fn a_202_waits_for_as_many_replicas_as_it_is_told() {
    let _cores = crate::helpers::cores_alone().await;
    let redis = PrivateRedisCluster::start_with_replicas(3, 2)
        .await
        .expect("a private cluster of 3 masters with 2 replicas each");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    let options = Options {
        durability: seckill_core::config::RedisDurability::Replica {
            wait: Duration::from_millis(300),
            replicas: 2,
        },
        ..Options::default()
    };
    let app = spawn_app_on(scratch, options).await;
    let sale = app.create_sale(50).await;
    sells(&app, sale).await;

    let master = redis
        .master_of(&app.keys(sale).stock)
        .await
        .expect("the sale's master");
    let replicas = redis.replicas_of(&master).await;
    assert_eq!(replicas.len(), 2, "{replicas:?}");
    let one = redis.node(&replicas[0]).expect("a replica's node");
    one.pause();
    let told = buy(&app, sale, "ann").await;
    one.resume();
    assert_eq!(told.status, 503, "{told:?}");
    assert_eq!(told.body["error"], "unconfirmed", "{told:?}");
    assert!(told.body["order_id"].is_string(), "{told:?}");
    sells(&app, sale).await;
}

/// Three masters, an app on them, and the master that holds the worker
/// sweep's lock (`{sweep}`: one shard's).
async fn three_masters_and_the_sweeps() -> (PrivateRedisCluster, TestApp, String) {
    let (redis, scratch) = three_masters().await;
    let sweep_lock = format!("{}:{{sweep}}:lock", scratch.prefix);
    let app = spawn_app_on(scratch, Options::default()).await;
    let sweeps_on = redis.master_of(&sweep_lock).await.expect("its master");
    (redis, app, sweeps_on)
}

/// A worker whose sweep fails, its lock's shard stopped (the sweep's lock
/// lives on one shard: `{sweep}`), still cancels at its deadline the
/// unpaid order of a sale on another shard, in the same pass. (Before, a
/// failed sweep ended the pass before any sale was visited, and, still
/// due, failed every pass after it: no sale on any shard cancelled an
/// unpaid order until the stopped one was back.)
#[tokio::test]
async fn a_stopped_shard_stops_not_the_payment_deadlines_of_the_sales_on_the_others() {
    let (redis, app, sweeps_on) = three_masters_and_the_sweeps().await;
    let sales = a_sale_per_master(&redis, &app).await;
    let (_, sale) = sales
        .iter()
        .find(|(master, _)| **master != sweeps_on)
        .expect("a sale on another master");
    let ann = app.buy(*sale, "ann").await;
    app.drain().await;
    crate::payment::make_deadlines_due(&app, *sale, &[ann]).await;

    let stopped = redis.node(&sweeps_on).expect("the master's node");
    stopped.pause();
    // A new worker sweeps on its first pass.
    let worker = seckill_core::worker::Worker::new(app.store.clone(), Default::default());
    let pass = worker.run_once().await;
    let status = crate::payment::status_of(&app, ann).await;
    stopped.resume();
    assert!(pass.is_err(), "the sweep's shard was stopped: {pass:?}");
    assert_eq!(status, "cancelled", "ann's order past its deadline");
}

/// The sweep puts back the payment deadlines Redis lost of every sale it
/// can reach: a sale whose shard is stopped fails its own, not those of
/// the sales swept after it. (Before, the first sale that failed ended
/// the sweep.)
#[tokio::test]
async fn a_sweep_puts_back_the_lost_deadlines_of_every_sale_but_a_stopped_shards() {
    let (redis, app, sweeps_on) = three_masters_and_the_sweeps().await;
    let mut others: Vec<(String, i64)> = a_sale_per_master(&redis, &app)
        .await
        .into_iter()
        .filter(|(master, _)| *master != sweeps_on)
        .collect();
    // Swept in the order of their ids: the stopped shard's sale first.
    others.sort_by_key(|(_, sale)| *sale);
    let [(stopped_master, first), (_, last)] = &others[..] else {
        panic!("two sales off the sweep's master: {others:?}");
    };
    for sale in [*first, *last] {
        app.buy(sale, "ann").await;
    }
    app.drain().await;
    for sale in [*first, *last] {
        let _: i64 = redis::cmd("DEL")
            .arg(&app.keys(sale).deadlines.all()[..])
            .query_async(&mut app.redis_conn().await)
            .await
            .expect("DEL");
    }

    let stopped = redis.node(stopped_master).expect("the master's node");
    stopped.pause();
    let worker = seckill_core::worker::Worker::new(app.store.clone(), Default::default());
    let pass = worker.run_once().await;
    let put_back = app.deadline_stats(*last).await;
    stopped.resume();
    assert!(pass.is_err(), "sale {first}'s shard was stopped: {pass:?}");
    assert_eq!(put_back.waiting, 1, "sale {last}'s lost deadline");
}
