//! The worker and a sale reloaded from PostgreSQL under it (Redis lost the
//! sale): a batch reserved before the reload is not written, a commit
//! waits for a reload under way, a batch committed first is counted by
//! the reload, and a load epoch PostgreSQL missed does not stall the queue.

use std::time::Duration;

use seckill_core::queue::QueueStats;

use crate::helpers::{TestApp, spawn_app};

/// A 5-unit sale whose two orders (ann's, bob's) a worker has reserved
/// when Redis restarts empty: the sale's figures and its queues are gone.
async fn a_batch_held_through_a_wipe() -> (TestApp, i64, seckill_core::worker::Batch) {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    app.buy(sale, "bob").await;
    let held = app.worker.reserve_orders(sale).await.expect("reserve");
    app.wipe_all_of_sale(sale).await;
    (app, sale, held)
}

/// Redis' buyers of a sale, sorted.
async fn buyers(app: &TestApp, sale: i64) -> Vec<String> {
    let mut buyers = app.redis_buyers(sale).await;
    buyers.sort();
    buyers
}

/// After a batch held through a wipe was refused: PostgreSQL has none of
/// its orders, Redis sells all 5 units again, and ann (whose order went
/// with the wipe) can buy again. Had the batch been written, Redis would
/// promise 5 units while PostgreSQL grants 3: later 202s would end
/// rejected.
async fn assert_the_batch_went_with_the_wipe(app: &TestApp, sale: i64) {
    assert_eq!(app.orders(sale).await.len(), 0, "the batch was written");
    assert_eq!(app.sold(sale).await, 0);
    assert_eq!(app.redis_stock(sale).await, Some(5));
    assert!(buyers(app, sale).await.is_empty());
    app.buy(sale, "ann").await;
    let report = app.drain().await;
    assert_eq!((report.confirmed, report.rejected), (1, 0));
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.redis_stock(sale).await, Some(4));
}

/// The exact interleaving: a worker holds a reserved batch when Redis is
/// wiped; a page loads the sale from PostgreSQL, where the batch is not
/// committed yet, so the new Redis sells the batch's units again; then the
/// worker tries to commit. PostgreSQL must refuse the batch (the load
/// epoch moved), so that Redis and PostgreSQL agree.
#[tokio::test]
async fn a_batch_reserved_before_a_load_is_not_written() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    // A page loads the sale from PostgreSQL, which has no order yet.
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 5);

    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!((report.confirmed, report.superseded), (0, 2));
    assert_the_batch_went_with_the_wipe(&app, sale).await;
}

/// The same, with the load under way when the worker commits: the load
/// holds the sale's row from its read until its write to Redis is done, so
/// the worker's commit waits for it, then finds the new epoch.
#[tokio::test]
async fn a_commit_waits_for_a_load_under_way_and_then_writes_nothing() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    let loading = app.begin_load(sale).await;
    assert_eq!(loading.loadable.stock_left, 5);
    let worker = seckill_core::worker::Worker::new(app.store.clone(), app.worker_settings.clone());
    let commit = tokio::spawn(async move { worker.write_batch(held).await });
    // It waits for the sale's row, which the load holds (a commit that
    // did not wait would end without ever waiting here).
    crate::helpers::eventually(
        Duration::from_secs(20),
        "the commit to wait for the load's row",
        || async { crate::payment::lock_waiters(&app).await == 1 },
    )
    .await;
    assert!(
        !commit.is_finished(),
        "the commit did not wait for the load"
    );
    assert!(app.finish_load(loading).await);
    let report = commit.await.expect("join").expect("write");
    assert_eq!((report.confirmed, report.superseded), (0, 2));
    assert_the_batch_went_with_the_wipe(&app, sale).await;
}

/// The other order: the worker commits before any load, and the load that
/// follows reads the batch from PostgreSQL. Nothing is lost, and Redis
/// counts ann and bob.
#[tokio::test]
async fn a_batch_committed_before_the_load_is_counted_by_it() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!((report.confirmed, report.superseded), (2, 0));
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 3);
    assert_eq!(buyers(&app, sale).await, ["ann", "bob"]);
    assert_eq!(
        app.purchase(sale, "ann").await.status(),
        409,
        "ann bought twice"
    );
}

/// A worker keeps several batches of a sale in flight: two are held
/// (ann's, then bob's) when Redis restarts empty. The first to commit
/// marks the sale's epoch, so that a load still on its way lands on
/// nothing; the second, reserved under the same epoch, finds that mark
/// its own and is written too. No load came between them: both buyers
/// were told `202`, and both orders are kept. (Each commit used to mark
/// an epoch of its own: every batch but the first was refused, and its
/// orders lost, though nothing had sold their units again.)
#[tokio::test]
async fn every_batch_held_through_a_wipe_is_written_when_no_load_came_first() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    let first = app.worker.reserve_orders(sale).await.expect("reserve");
    app.buy(sale, "bob").await;
    let second = app.worker.reserve_orders(sale).await.expect("reserve");
    app.wipe_all_of_sale(sale).await;
    for (who, held) in [("ann", first), ("bob", second)] {
        let report = app.worker.write_batch(held).await.expect("write");
        assert_eq!(
            (report.confirmed, report.superseded),
            (1, 0),
            "{who}'s batch"
        );
    }
    let mut written: Vec<String> = app.orders(sale).await.into_iter().map(|o| o.1).collect();
    written.sort();
    assert_eq!(written, ["ann", "bob"]);
    let view = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(view["stock_left"], 3);
    assert_eq!(buyers(&app, sale).await, ["ann", "bob"]);
}

/// A load that wrote Redis and then failed to record its epoch leaves
/// PostgreSQL behind. The worker finds Redis' epoch unchanged since it
/// reserved, records it, and writes the batch on its next delivery: the
/// orders are not lost, and the queue does not stall.
#[tokio::test]
async fn a_load_epoch_postgres_missed_is_recorded_and_the_batch_written() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    app.buy(sale, "ann").await;
    sqlx::query("UPDATE sales SET load_epoch = 'from-a-failed-load' WHERE id = $1")
        .bind(sale)
        .execute(&app.pg)
        .await
        .expect("UPDATE");
    let first = app.worker.try_process_batch(sale).await.expect("step");
    assert_eq!((first.confirmed, first.superseded), (0, 0));
    let report = app.drain().await;
    assert_eq!(report.confirmed, 1);
    assert_eq!(app.sold(sale).await, 1);
    assert_eq!(app.queue_stats(sale).await, QueueStats::default());
}

/// A load after the wipe wrote Redis and then failed to record its epoch
/// in PostgreSQL (a reply timeout, a failed `COMMIT`): PostgreSQL still
/// holds the epoch the batch was reserved under. The new Redis sells the
/// batch's units again all the same, so the batch must not be written:
/// the fence compares the batch's epoch with Redis' too, under the row
/// lock that keeps loads out.
#[tokio::test]
async fn a_batch_is_not_written_after_a_load_whose_epoch_postgres_missed() {
    let (app, sale, held) = a_batch_held_through_a_wipe().await;
    let before: Option<String> = sqlx::query_scalar("SELECT load_epoch FROM sales WHERE id = $1")
        .bind(sale)
        .fetch_one(&app.pg)
        .await
        .expect("the epoch");
    let loading = app.begin_load(sale).await;
    assert!(app.finish_load(loading).await, "the load wrote Redis");
    // Its record in PostgreSQL is undone: as if it had failed.
    sqlx::query("UPDATE sales SET load_epoch = $2 WHERE id = $1")
        .bind(sale)
        .bind(&before)
        .execute(&app.pg)
        .await
        .expect("UPDATE");

    let report = app.worker.write_batch(held).await.expect("write");
    assert_eq!((report.confirmed, report.superseded), (0, 2));
    assert_the_batch_went_with_the_wipe(&app, sale).await;
}

/// The repair of a missed epoch records Redis' epoch only over the one
/// PostgreSQL held when the batch was refused (a load that completed
/// meanwhile is never written over with an older epoch), and only an epoch
/// of this database.
#[tokio::test]
async fn the_repair_of_a_missed_epoch_never_writes_over_a_newer_load() {
    let app = spawn_app().await;
    let sale = app.create_sale(5).await;
    let epoch = |pg: sqlx::PgPool| async move {
        sqlx::query_scalar::<_, Option<String>>("SELECT load_epoch FROM sales WHERE id = $1")
            .bind(sale)
            .fetch_one(&pg)
            .await
            .expect("the epoch")
    };
    let newer = epoch(app.pg.clone()).await.expect("the sale's load epoch");
    let stale = app
        .store
        .record_load_epoch(sale, "older", Some("what-the-worker-saw"))
        .await
        .expect("a repair");
    assert!(!stale, "a repair over an epoch it did not see");
    assert_eq!(epoch(app.pg.clone()).await.as_deref(), Some(newer.as_str()));
    // Nor one another database drew, sharing this Redis and prefix.
    let foreign = app
        .store
        .record_load_epoch(
            sale,
            &format!("db:{}:x", uuid::Uuid::new_v4()),
            Some(&newer),
        )
        .await
        .expect("a repair");
    assert!(!foreign, "a repair with another database's epoch");
    assert!(
        newer.starts_with("db:"),
        "{newer}: an epoch names its database"
    );
    let repaired = app
        .store
        .record_load_epoch(sale, "redis-epoch", Some(&newer))
        .await
        .expect("a repair");
    assert!(repaired);
    assert_eq!(epoch(app.pg.clone()).await.as_deref(), Some("redis-epoch"));
}
