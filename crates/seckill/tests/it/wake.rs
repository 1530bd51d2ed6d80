//! An idle worker is woken by the purchase itself (the sale's stock change
//! on pub/sub), not only by its poll: with a poll of a minute, orders are
//! still confirmed at once, by a worker inside an instance and by a
//! stand-alone one.

use std::time::Duration;

use crate::helpers::{
    Scratch, client, cluster, create_sale_at, eventually, orders, start_app_and_a_worker,
};

/// Buy one unit of a fresh sale at `url`; wait (well under the minute's
/// poll) for PostgreSQL to hold the order confirmed.
async fn bought_and_confirmed(scratch: &Scratch, url: &str, name: &str) {
    let sale = create_sale_at(url, name, 3).await;
    // Long enough for the worker's first pass to have listed no such sale
    // and gone to sleep for its minute.
    tokio::time::sleep(Duration::from_millis(300)).await;
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

#[tokio::test]
async fn an_idle_worker_polling_once_a_minute_confirms_a_purchase_at_once() {
    let scratch = Scratch::new().await;
    let mut processes = cluster(&scratch, &[("SECKILL_POLL_MS", "60000")]);
    let inside = processes.start_app("a", &[]).await.expect("a starts");
    bought_and_confirmed(&scratch, &inside, "Inside").await;
    processes.stop().await;

    let mut processes = cluster(&scratch, &[("SECKILL_POLL_MS", "60000")]);
    let alone = start_app_and_a_worker(&mut processes, "b").await;
    bought_and_confirmed(&scratch, &alone, "Alone").await;
    processes.stop().await;
}
