//! `GET /metrics` after a burst, scraped from real processes (each process
//! has one registry; two apps inside this test process would share it):
//! the figures add up to what the buyers were told and what PostgreSQL
//! holds.

use std::time::Duration;

use serde_json::json;

use crate::helpers::{
    Scratch, TestApp, client, cluster, create_sale_at, eventually, orders,
    spawn_app_on_private_redis,
};

/// The sum of every sample of `name` whose labels include each of `labels`
/// (`answer="accepted"`), over the scrapes.
fn sum(scrapes: &[String], name: &str, labels: &[&str]) -> f64 {
    scrapes
        .iter()
        .flat_map(|scrape| scrape.lines())
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let (series, value) = line.rsplit_once(' ')?;
            let (metric, rest) = series.split_once('{').unwrap_or((series, ""));
            (metric == name && labels.iter().all(|label| rest.contains(label)))
                .then(|| value.parse::<f64>().expect("a number"))
        })
        .sum()
}

#[tokio::test]
async fn metrics_after_a_burst_count_what_the_buyers_were_told_and_postgres_holds() {
    let scratch = Scratch::new().await;
    let mut processes = cluster(&scratch, &[]);
    // One stand-alone worker confirms every order, and serves its own
    // figures (`--metrics-bind`) on a port found free a moment ago.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let worker = format!("http://127.0.0.1:{port}");
    processes
        .start_worker("worker", &["--metrics-bind", &format!("127.0.0.1:{port}")])
        .await
        .expect("the worker starts");
    let a = processes
        .start_app("a", &["--no-worker"])
        .await
        .expect("a starts");
    let b = processes
        .start_app("b", &["--no-worker"])
        .await
        .expect("b starts");
    let http = client();
    let sale = create_sale_at(&a, "Phone", 10).await;

    // 300 buyers, the first 20 asking twice, half on each instance.
    let requests: Vec<(String, &str)> = (0..300)
        .map(|i| (format!("buyer-{i}"), if i % 2 == 0 { &a } else { &b }))
        .chain((0..20).map(|i| (format!("buyer-{i}"), if i % 2 == 0 { &b } else { &a })))
        .map(|(user, url)| (user, url.as_str()))
        .collect();
    let statuses: Vec<u16> = futures::future::join_all(requests.iter().map(|(user, url)| {
        let http = http.clone();
        async move {
            http.post(format!("{url}/api/sales/{sale}/purchase"))
                .json(&json!({ "user_id": user }))
                .send()
                .await
                .expect("an answer")
                .status()
                .as_u16()
        }
    }))
    .await;
    let accepted = statuses.iter().filter(|s| **s == 202).count();
    assert_eq!(accepted, 10, "{statuses:?}");

    let pg = scratch.pg().await;
    eventually(Duration::from_secs(20), "ten confirmed orders", || {
        let pg = pg.clone();
        async move { orders(&pg, sale).await.len() == 10 }
    })
    .await;

    let mut scrapes = Vec::new();
    for url in [&a, &b, &worker] {
        let answer = http
            .get(format!("{url}/metrics"))
            .send()
            .await
            .expect("GET /metrics");
        assert_eq!(answer.status(), 200);
        let kind = answer.headers()["content-type"].to_str().expect("ASCII");
        assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
        scrapes.push(answer.text().await.expect("the scrape"));
    }
    let purchases = "seckill_purchases_total";
    let lock = "strategy=\"lock\"";
    assert_eq!(
        sum(&scrapes, purchases, &[lock, "answer=\"accepted\""]),
        10.0
    );
    assert_eq!(
        sum(&scrapes, purchases, &[lock]),
        320.0,
        "every answer counted"
    );
    let refused = sum(&scrapes, purchases, &["answer=\"sold_out\""])
        + sum(&scrapes, purchases, &["answer=\"already_purchased\""]);
    let busy = sum(&scrapes, purchases, &["answer=\"busy\""]);
    assert_eq!(refused + busy, 310.0);
    assert_eq!(
        sum(&scrapes, "seckill_purchase_seconds_count", &[lock]),
        320.0
    );
    // The worker confirmed them all, and the instances none.
    assert_eq!(
        sum(
            &scrapes[2..],
            "seckill_orders_total",
            &["event=\"confirmed\""]
        ),
        10.0
    );
    assert_eq!(
        sum(&scrapes, "seckill_orders_total", &["event=\"confirmed\""]),
        10.0
    );
    assert_eq!(
        sum(&scrapes, "seckill_orders_total", &["event=\"rejected\""]),
        0.0
    );
    assert!(sum(&scrapes, "seckill_lock_wait_seconds_count", &[]) >= 1.0);
    assert!(sum(&scrapes[2..], "seckill_worker_batch_size_count", &[]) >= 1.0);
    // The orders are written; their payment deadlines wait, one for each
    // moment the worker confirmed some at (the orders of one batch share it).
    assert_eq!(
        sum(&scrapes[..1], "seckill_queue_jobs", &["queue=\"orders\""]),
        0.0
    );
    let moments: i64 =
        sqlx::query_scalar("SELECT count(DISTINCT pay_by) FROM orders WHERE sale_id = $1")
            .bind(sale)
            .fetch_one(&pg)
            .await
            .expect("the orders' deadlines");
    assert!((1..=10).contains(&moments), "{moments} moments");
    assert_eq!(
        sum(
            &scrapes[..1],
            "seckill_queue_jobs",
            &["queue=\"deadlines\"", "state=\"waiting\""]
        ),
        moments as f64
    );
    processes.stop().await;
}

/// With Redis gone, the scrape still answers 200 with the counts (a
/// monitor must not go blind in an outage); only the queue depths, which
/// need Redis, are left out.
#[tokio::test]
async fn metrics_answer_while_redis_is_down() {
    let (mut redis, app) = spawn_app_on_private_redis().await;
    app.create_sale(3).await;
    let scrape = |app: &TestApp| {
        let url = app.url("/metrics");
        async move { client().get(url).send().await.expect("GET /metrics") }
    };
    let up = scrape(&app).await.text().await.expect("the scrape");
    assert!(up.contains("seckill_queue_jobs{"), "{up}");
    redis.kill();
    let answer = scrape(&app).await;
    assert_eq!(answer.status(), 200);
    let scrape = answer.text().await.expect("the scrape");
    assert!(
        scrape.contains("# TYPE seckill_lock_fenced_total counter"),
        "{scrape}"
    );
    assert!(!scrape.contains("seckill_queue_jobs{"), "{scrape}");
}

/// Scrapes sent at once are answered in turn: each reads every sale's
/// queues in one walk, and no walk starts before the one before it ended.
/// (Before, each scrape walked at once, on a pooled connection of its
/// own: anyone who could reach `/metrics`, served on the storefront's
/// port, could send a hundred and hold the connections, and Redis' time,
/// that buyers need.)
#[tokio::test]
async fn scrapes_sent_at_once_read_redis_one_after_another() {
    let app = crate::helpers::spawn_app().await;
    for _ in 0..2 {
        app.create_sale(5).await;
    }
    let needle = format!("{}:{{sale:", app.scratch.prefix);
    let mut monitor = crate::helpers::Monitor::start(app.scratch.redis_url(), &needle).await;
    let scrapes = (0..8).map(|_| app.client.get(app.url("/metrics")).send());
    for scraped in futures::future::join_all(scrapes).await {
        assert_eq!(scraped.expect("GET /metrics").status(), 200);
    }
    let counted: Vec<String> = (monitor.until_now().await.into_iter())
        .filter(|command| command[0].eq_ignore_ascii_case("zcard"))
        .map(|command| command[1].clone())
        .collect();
    // One walk: two sales, their order and deadline queues, three sets each.
    let walk = 2 * 2 * 3;
    assert_eq!(counted.len(), 8 * walk, "{counted:?}");
    for (n, one) in counted.chunks(walk).enumerate() {
        assert_eq!(one, &counted[..walk], "walk {n} ran beside another");
    }
}
