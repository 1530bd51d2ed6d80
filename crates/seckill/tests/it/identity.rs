//! A sale's Redis state belongs to the database it was loaded from. Two
//! deployments sharing a Redis and a key prefix, or a database dropped and
//! created again (the README's `DROP DATABASE` without the key clean-up),
//! both have a sale 1: the second's must not sell from the first's stock,
//! buyers or queue.

use crate::helpers::{Options, Scratch, spawn_app_on};

#[tokio::test]
async fn a_sale_loaded_from_another_database_is_not_trusted() {
    let first = spawn_app_on(Scratch::new().await, Options::default()).await;
    let sale = first.create_sale(1).await;
    first.buy(sale, "ann").await;
    // One more order waits on the first database's queue.
    assert_eq!(first.purchase(sale, "bob").await.status(), 409, "sold out");

    // A fresh database, the same Redis and prefix: its sale has the same id.
    let mut second = Scratch::new().await;
    second.prefix = first.scratch.prefix.clone();
    let second = spawn_app_on(second, Options::default()).await;
    let same = second.create_sale(10).await;
    assert_eq!(same, sale, "both databases number their first sale 1");

    for buyer in ["ann", "cy", "dee"] {
        let response = second.purchase(same, buyer).await;
        assert_eq!(
            response.status(),
            202,
            "{buyer} on the second database's sale of 10"
        );
    }
    assert_eq!(second.redis_stock(same).await, Some(7));
    // The first database's order was not drained into the second's.
    second.drain().await;
    let mut buyers: Vec<String> = second.orders(same).await.into_iter().map(|o| o.1).collect();
    buyers.sort();
    assert_eq!(buyers, ["ann", "cy", "dee"]);
}

/// The issue's own case: the leftover sale was written before epochs
/// named their database (an epoch of plain hex). A sale just created owns
/// its id, so whatever Redis holds under it is replaced all the same.
#[tokio::test]
async fn a_new_sale_replaces_leftover_state_that_names_no_database() {
    let app = spawn_app_on(Scratch::new().await, Options::default()).await;
    let keys = app.keys(1);
    let () = redis::pipe()
        .set(&keys.stock, 0)
        .hset(&keys.holds, "ann", uuid::Uuid::new_v4().to_string())
        .set(
            format!("{}:{{sale:1}}:epoch", app.scratch.prefix),
            "0123456789abcdef",
        )
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("a leftover sold-out sale 1");
    let sale = app.create_sale(10).await;
    assert_eq!(sale, 1);
    let response = app.purchase(sale, "ann").await;
    assert_eq!(response.status(), 202, "ann on the new sale 1 of 10");
    assert_eq!(app.redis_stock(sale).await, Some(9));
}
