//! A waiting room is one line for every instance, in Redis: it outlives
//! the instance a buyer joined on, runs on a Redis Cluster (its keys share
//! the sale's hash tag), and opens again when an unpaid unit comes back.

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::{
    Options, Scratch, cluster, create_sale_with_at, services, spawn_app, spawn_app_on,
};
use crate::payment::{app_with_window, make_deadlines_due, run_deadlines_until};
use crate::waiting_room::{
    admission, admitted, admitted_at, buy, buy_at, fifo, join, joined, joined_at, sale_with_room,
    standing, standing_at, ticket,
};

#[tokio::test]
async fn the_room_admits_again_when_an_unpaid_unit_comes_back() {
    // A window far longer than the test, closed by hand below.
    let app = app_with_window(600, 100).await;
    let sale = sale_with_room(&app, 1, 0, fifo(1, 1)).await;
    let ann = ticket(&joined(&app, sale, "ann").await);
    let bob = ticket(&joined(&app, sale, "bob").await);
    let ann_in = admitted(&app, sale, &ann).await;
    let bought = buy(&app, sale, "ann", Some(admission(&ann_in))).await;
    assert_eq!(bought.status(), 202);
    let order: Value = bought.json().await.expect("an order");
    let order = uuid::Uuid::parse_str(order["order_id"].as_str().expect("an id")).expect("a UUID");
    app.drain().await;

    let closed = standing(&app, sale, &bob).await;
    assert_eq!(
        (closed["closed"].clone(), closed["admitted"].clone()),
        (json!(true), json!(false)),
        "{closed}"
    );

    // Ann does not pay: her unit comes back, and the room admits bob.
    make_deadlines_due(&app, sale, &[order]).await;
    run_deadlines_until(&app, sale, |report| report.cancelled == 1).await;
    let bob_in = admitted(&app, sale, &bob).await;
    assert_eq!(bob_in["closed"], false, "{bob_in}");
    let again = buy(&app, sale, "bob", Some(admission(&bob_in))).await;
    assert_eq!(again.status(), 202);
}

/// Create a sale with a room through the admin API of the process at `url`.
async fn roomed_sale_at(url: &str, opens_in_secs: i64, room: Value) -> i64 {
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(opens_in_secs);
    let body = json!({"name": "Roomed", "stock": 5, "price_cents": 100,
                      "starts_at": starts_at, "waiting_room": room});
    create_sale_with_at(url, &body).await
}

#[tokio::test]
async fn buyers_keep_their_places_when_the_instance_they_joined_on_dies() {
    let scratch = Scratch::new().await;
    let mut processes = cluster(&scratch, &[]);
    let one = processes
        .start_app("one", &["--no-worker"])
        .await
        .expect("instance one");
    let two = processes
        .start_app("two", &["--no-worker"])
        .await
        .expect("instance two");
    // Opens in 3 s: both buyers wait before the open, whoever asks.
    let sale = roomed_sale_at(&one, 3, fifo(1, 1)).await;
    let mut tickets = Vec::new();
    for buyer in ["ann", "bob"] {
        let joined = joined_at(&one, sale, buyer).await;
        tickets.push((ticket(&joined), joined["number"].clone()));
    }
    processes.kill("one").await.expect("instance one killed");

    // Instance two knows both places: the same numbers, and bob still
    // behind ann (one admitted at a time, and ann has not bought).
    let bob = standing_at(&two, sale, &tickets[1].0).await;
    assert_eq!(bob["number"], tickets[1].1, "{bob}");
    assert_eq!(bob["admitted"], false, "{bob}");
    let ann = standing_at(&two, sale, &tickets[0].0).await;
    assert!(
        ann["admitted"] == true || ann["number"] == tickets[0].1,
        "{ann}"
    );
    // Ann's turn comes on instance two, and her admission buys there.
    let ann_in = admitted_at(&two, sale, &tickets[0].0, Duration::from_secs(20)).await;
    let bought = buy_at(&two, sale, "ann", Some(admission(&ann_in))).await;
    assert_eq!(bought.status(), 202);
    processes.stop().await;
}

#[tokio::test]
async fn a_room_runs_on_a_redis_cluster() {
    let redis = seckill_devenv::services::PrivateRedisCluster::start(3)
        .await
        .expect("a private 3-master Redis Cluster");
    let scratch = Scratch::on(&services().await.database_url, &redis.at()).await;
    let app = spawn_app_on(scratch, Options::default()).await;
    let sale = sale_with_room(&app, 2, 0, fifo(10, 2)).await;
    for buyer in ["ann", "bob"] {
        let mine = ticket(&joined(&app, sale, buyer).await);
        let now = admitted(&app, sale, &mine).await;
        assert_eq!(
            buy(&app, sale, buyer, Some(admission(&now))).await.status(),
            202,
            "{buyer}"
        );
        // The admission bought once: a second purchase takes nothing
        // (ann's is told she holds her unit; bob's took the last one: the
        // instance then knows the sale sold out, and says so before asking
        // Redis anything).
        let again = buy(&app, sale, buyer, Some(admission(&now))).await;
        assert_eq!(again.status(), 409, "{buyer}");
    }
    let late = join(&app, sale, "cid").await;
    assert_eq!(late.status(), 409, "the room closed at the sell-out");
}

#[tokio::test]
async fn before_the_open_the_wait_counts_the_time_to_the_open_and_a_lottery_says_it_draws() {
    let app = spawn_app().await;
    let lottery =
        json!({"mode": "lottery", "admit_per_sec": 10, "max_active": 1, "admission_secs": 60});
    let sale = sale_with_room(&app, 1, 600, lottery).await;
    let first = joined(&app, sale, "ann").await;
    // First in line, at 10 a second: 0.1 s once the sale is open, and
    // the open is ten minutes away.
    let eta = first["eta_secs"].as_f64().expect("an estimate");
    assert!((590.0..=600.5).contains(&eta), "{first}");

    let page = app.get_text(&format!("/sales/{sale}")).await;
    assert!(page.contains("draws lots"), "{page}");
    assert!(
        page.contains("Until the open, your place can move back"),
        "{page}"
    );
    let fifo_sale = sale_with_room(&app, 1, 600, fifo(10, 1)).await;
    let page = app.get_text(&format!("/sales/{fifo_sale}")).await;
    assert!(!page.contains("draws lots"), "{page}");
}
