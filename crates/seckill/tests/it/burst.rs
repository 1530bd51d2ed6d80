//! The promise, end to end: two app processes and two workers against one
//! Redis and one PostgreSQL, thousands of buyers released at once on a
//! 10-unit sale. Then the same burst with the deliberately broken `naive`
//! strategy, which must oversell, so that the lesson stays true.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use seckill_core::queue::QueueStats;
use serde_json::{Value, json};
use tokio::sync::Barrier;
use uuid::Uuid;

use seckill_devenv::processes::Fleet;

use crate::helpers::{
    Scratch, client, cluster, create_sale_at, eventually, orders, start_app_and_a_worker,
};

const STOCK: i64 = 10;
const BUYERS: usize = 2_000;
/// Buyers who fire a second request at the same moment as their first.
const REPEATS: usize = 200;

/// What one request got back.
struct Answer {
    user: String,
    status: u16,
    body: Value,
}

/// Three processes: two app instances (the first also runs the worker) and
/// a stand-alone worker. Returns them and the instances' base URLs.
async fn start_cluster(scratch: &Scratch, env: &[(&str, &str)]) -> (Fleet, Vec<String>) {
    let mut processes = cluster(scratch, env);
    let a = processes.start_app("a", &[]).await.expect("a starts");
    let b = start_app_and_a_worker(&mut processes, "b").await;
    (processes, vec![a, b])
}

/// Create the sale, then release every buyer at one barrier and collect the answers.
async fn burst(instances: &[String]) -> (i64, Vec<Answer>) {
    let http = client();
    let sale = create_sale_at(&instances[0], "Phone", STOCK).await;

    // Buyer i asks instance i % 2; a repeat asks the other instance.
    let mut requests: Vec<(String, String)> = (0..BUYERS)
        .map(|i| (format!("buyer-{i}"), instances[i % 2].clone()))
        .collect();
    requests.extend((0..REPEATS).map(|i| (format!("buyer-{i}"), instances[(i + 1) % 2].clone())));

    let start = Arc::new(Barrier::new(requests.len()));
    let tasks: Vec<_> = requests
        .into_iter()
        .map(|(user, instance)| {
            let (http, start) = (http.clone(), Arc::clone(&start));
            tokio::spawn(async move {
                start.wait().await;
                let response = http
                    .post(format!("{instance}/api/sales/{sale}/purchase"))
                    .json(&json!({ "user_id": user }))
                    .send()
                    .await
                    .expect("every request gets an answer");
                let status = response.status().as_u16();
                let body = response.json().await.expect("a JSON body");
                Answer { user, status, body }
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.expect("a buyer task panicked"));
    }
    (sale, answers)
}

fn count_by_status(answers: &[Answer]) -> HashMap<u16, usize> {
    let mut counts = HashMap::new();
    for answer in answers {
        *counts.entry(answer.status).or_default() += 1;
    }
    counts
}

#[tokio::test]
async fn ten_units_are_sold_exactly_ten_times_across_two_instances_under_a_burst() {
    seckill_cli::process::raise_open_files_limit();
    let scratch = Scratch::new().await;
    let (cluster, instances) = start_cluster(&scratch, &[]).await;
    let (sale, answers) = burst(&instances).await;

    let counts = count_by_status(&answers);
    assert_eq!(answers.len(), BUYERS + REPEATS);
    assert_eq!(
        counts.get(&202).copied().unwrap_or(0),
        STOCK as usize,
        "answers by status: {counts:?}"
    );
    assert_eq!(
        counts.get(&409).copied().unwrap_or(0),
        BUYERS + REPEATS - STOCK as usize,
        "everyone else is told sold_out or already_purchased: {counts:?}"
    );
    for answer in answers.iter().filter(|a| a.status == 409) {
        let code = answer.body["error"].as_str().unwrap_or_default();
        assert!(matches!(code, "sold_out" | "already_purchased"), "{code}");
    }
    let winners: HashMap<String, Uuid> = answers
        .iter()
        .filter(|a| a.status == 202)
        .map(|a| {
            let id = a.body["order_id"].as_str().expect("an order id");
            (a.user.clone(), Uuid::parse_str(id).expect("a UUID"))
        })
        .collect();
    assert_eq!(winners.len(), STOCK as usize, "a buyer won twice");

    // The workers drain the queue into PostgreSQL.
    let pg = scratch.pg().await;
    let redis = seckill_core::redis_pool::connect_redis(&scratch.redis, Duration::from_secs(5))
        .await
        .expect("Redis");
    let keys = seckill_core::keys::SaleKeys::new(&scratch.prefix, sale);
    let queue = seckill_core::queue::Queue::new(keys.queue.clone());
    eventually(Duration::from_secs(60), "the queue drains", || async {
        queue
            .stats(&mut redis.get().await.expect("conn"))
            .await
            .expect("stats")
            == QueueStats::default()
    })
    .await;

    let stored = orders(&pg, sale).await;
    assert_eq!(stored.len(), STOCK as usize, "orders in PostgreSQL");
    assert!(
        stored.iter().all(|(_, _, status)| status == "confirmed"),
        "{stored:?}"
    );
    let stored: HashMap<String, Uuid> =
        stored.into_iter().map(|(id, user, _)| (user, id)).collect();
    assert_eq!(
        stored, winners,
        "PostgreSQL holds exactly the accepted orders of the winners"
    );
    let sold: i32 = sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
        .bind(sale)
        .fetch_one(&pg)
        .await
        .expect("sold");
    assert_eq!(sold, STOCK as i32);

    let mut conn = redis.get().await.expect("conn");
    let stock: i64 = redis::cmd("GET")
        .arg(&keys.stock)
        .query_async(&mut conn)
        .await
        .expect("GET");
    assert_eq!(stock, 0);
    let buyers: HashSet<String> = redis::cmd("HKEYS")
        .arg(&keys.holds)
        .query_async(&mut conn)
        .await
        .expect("HKEYS");
    assert_eq!(buyers, winners.keys().cloned().collect::<HashSet<_>>());
    drop(cluster);
}

#[tokio::test]
async fn the_naive_strategy_oversells_under_the_same_burst_and_postgres_refuses_the_excess() {
    seckill_cli::process::raise_open_files_limit();
    let scratch = Scratch::new().await;
    let env = [
        ("SECKILL_STRATEGY", "naive"),
        ("SECKILL_NAIVE_DELAY_MS", "20"),
    ];
    let (cluster, instances) = start_cluster(&scratch, &env).await;
    let (sale, answers) = burst(&instances).await;

    let accepted = answers.iter().filter(|a| a.status == 202).count();
    assert!(
        accepted > STOCK as usize,
        "the naive strategy sold only {accepted} of {STOCK}: it must oversell"
    );

    let pg = scratch.pg().await;
    eventually(
        Duration::from_secs(60),
        "every accepted order reaches PostgreSQL",
        || async { orders(&pg, sale).await.len() == accepted },
    )
    .await;
    let stored = orders(&pg, sale).await;
    let confirmed = stored.iter().filter(|(_, _, s)| s == "confirmed").count();
    let rejected = stored.iter().filter(|(_, _, s)| s == "rejected").count();
    assert_eq!(confirmed, STOCK as usize, "PostgreSQL has the last word");
    assert_eq!(rejected, accepted - STOCK as usize);
    drop(cluster);
}
