//! An idle worker is woken by the purchase itself (the sale's stock change
//! on pub/sub), not only by its poll: with a poll of a minute, orders are
//! still confirmed at once, by a worker inside an instance and by a
//! stand-alone one.

use std::time::Duration;

use seckill_core::domain::NewSale;
use seckill_core::keys::SaleKeys;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;

use crate::helpers::{
    Monitor, Scratch, client, cluster, eventually, orders, start_app_and_a_worker,
};

/// A sale created before any worker runs, so that the first pass of the
/// worker's poll lists it; and a watch on its payment deadline queue.
/// Until an order of the sale is confirmed, only that pass reads the
/// queue: it does so after the sale's order queue, as the last thing it
/// does for the sale (a woken worker reads the order queue alone).
async fn sale_watched_by_the_poll(scratch: &Scratch, name: &str) -> (i64, Monitor) {
    let redis = seckill_core::redis_pool::connect_redis(&scratch.redis, Duration::from_secs(5))
        .await
        .expect("Redis");
    let store = Store::new(scratch.pg().await, redis, scratch.prefix.clone());
    let new = NewSale::builder(name, 3)
        .build(chrono::Utc::now())
        .expect("a sale");
    let sale = store.create_sale(&new).await.expect("create").id;
    let deadlines = SaleKeys::new(&scratch.prefix, sale).deadlines.due;
    (sale, Monitor::start(scratch.redis_url(), &deadlines).await)
}

/// Once the poll's first pass has been over `sale` (and gone to sleep for
/// its minute), buy one unit at `url`; wait (well under the minute) for
/// PostgreSQL to hold the order confirmed: only a wake-up can have done it.
async fn bought_and_confirmed(scratch: &Scratch, url: &str, sale: i64, poll: &mut Monitor) {
    poll.next(Duration::from_secs(60)).await;
    let answer = client()
        .post(format!("{url}/api/sales/{sale}/purchase"))
        .json(&serde_json::json!({"user_id": "ann"}))
        .send()
        .await
        .expect("POST purchase");
    assert_eq!(answer.status(), 202);
    let pg = scratch.pg().await;
    eventually(Duration::from_secs(10), "the order confirmed", || {
        let pg = pg.clone();
        async move {
            orders(&pg, sale)
                .await
                .iter()
                .any(|(_, _, status)| status == "confirmed")
        }
    })
    .await;
}

fn polling_once_a_minute(scratch: &Scratch) -> Fleet {
    cluster(scratch, &[("SECKILL_POLL_MS", "60000")])
}

#[tokio::test]
async fn an_idle_worker_polling_once_a_minute_confirms_a_purchase_at_once() {
    let scratch = Scratch::new().await;
    let (sale, mut poll) = sale_watched_by_the_poll(&scratch, "Inside").await;
    let mut processes = polling_once_a_minute(&scratch);
    let inside = processes.start_app("a", &[]).await.expect("a starts");
    bought_and_confirmed(&scratch, &inside, sale, &mut poll).await;
    processes.stop().await;

    let (sale, mut poll) = sale_watched_by_the_poll(&scratch, "Alone").await;
    let mut processes = polling_once_a_minute(&scratch);
    let alone = start_app_and_a_worker(&mut processes, "b").await;
    bought_and_confirmed(&scratch, &alone, sale, &mut poll).await;
    processes.stop().await;
}
