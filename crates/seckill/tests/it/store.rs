//! The store against a real PostgreSQL: the enums the code uses for a
//! column are the values the column holds, both ways; a sale Redis lost is
//! loaded again; a sale's reads into the process' cache.

use seckill_core::domain::{OrderStatus, RejectReason, UserId};
use seckill_core::store::{Snapshot, sales};
use uuid::Uuid;

use crate::helpers::spawn_app;

#[tokio::test]
async fn every_stored_status_and_reason_reads_back_as_itself() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    // Each row as the migrations allow it: the timestamps and the reason
    // go with their status (the CHECKs enforce it).
    let rows = [
        (OrderStatus::Confirmed, None),
        (OrderStatus::Paid, None),
        (OrderStatus::Cancelled, None),
        (OrderStatus::Rejected, Some(RejectReason::SoldOut)),
        (OrderStatus::Rejected, Some(RejectReason::DuplicateBuyer)),
    ];
    let mut written = Vec::new();
    for (i, (status, reason)) in rows.into_iter().enumerate() {
        let id = Uuid::now_v7();
        sqlx::query(
            "INSERT INTO orders (id, sale_id, user_id, status, reason, pay_by, paid_at, cancelled_at)
             VALUES ($1, $2, $3, $4, $5, now() + interval '1 hour',
                     CASE WHEN $4 = 'paid' THEN now() END,
                     CASE WHEN $4 = 'cancelled' THEN now() END)",
        )
        .bind(id)
        .bind(sale)
        .bind(format!("buyer-{i}"))
        .bind(status)
        .bind(reason)
        .execute(&app.pg)
        .await
        .unwrap_or_else(|error| panic!("storing {status:?}: {error}"));
        written.push((id, status, reason));
    }
    for (id, status, _) in &written {
        let stored = app
            .store
            .stored_order(*id)
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(stored.status, *status);
        // The deadline is shown only while it matters.
        assert_eq!(stored.pay_by.is_some(), *status == OrderStatus::Confirmed);
    }
    let listed = app.store.orders_of_sale(sale, 100).await.expect("list");
    assert_eq!(listed.len(), written.len());
    for (id, status, reason) in &written {
        let row = listed.iter().find(|row| row.id == *id).expect("listed");
        assert_eq!((row.status, row.reason), (*status, *reason));
    }
    // The status column holds the names the API shows.
    let names: Vec<String> = sqlx::query_scalar("SELECT status FROM orders ORDER BY id")
        .fetch_all(&app.pg)
        .await
        .expect("names");
    let expected: Vec<&str> = written.iter().map(|(_, s, _)| s.as_str()).collect();
    assert_eq!(names, expected);
}

/// `pending` is a status the API shows, never one PostgreSQL stores: a
/// pending order lives only on the queue. The column's CHECK refuses it.
#[tokio::test]
async fn a_pending_order_can_never_be_stored() {
    let app = spawn_app().await;
    let sale = app.create_sale(1).await;
    let refused =
        sqlx::query("INSERT INTO orders (id, sale_id, user_id, status) VALUES ($1, $2, 'ann', $3)")
            .bind(Uuid::now_v7())
            .bind(sale)
            .bind(OrderStatus::Pending)
            .execute(&app.pg)
            .await
            .expect_err("pending was stored");
    let constraint = refused.as_database_error().and_then(|db| db.constraint());
    assert_eq!(constraint, Some("orders_status_check"));
}

/// Redis out of step with PostgreSQL (as the `naive` run leaves it) is put
/// back in line, buyers and all.
#[tokio::test]
async fn reset_sale_in_redis_puts_back_postgres_figures() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    app.buy(sale, "ann").await;
    app.drain().await;
    let keys = app.keys(sale);
    let () = redis::pipe()
        .set(&keys.stock, -4)
        .ignore()
        .hset(&keys.holds, "ghost", uuid::Uuid::new_v4().to_string())
        .ignore()
        .query_async(&mut app.redis_conn().await)
        .await
        .expect("break Redis");
    app.store.reset_sale_in_redis(sale).await.expect("reset");
    assert_eq!(app.redis_stock(sale).await, Some(2));
    assert_eq!(app.redis_buyers(sale).await, ["ann"]);
}

/// A snapshot of a sale Redis lost loads it from PostgreSQL first, and
/// says who holds a unit.
#[tokio::test]
async fn a_snapshot_of_a_sale_redis_lost_loads_it_first() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let anns = app.buy(sale, "ann").await;
    app.drain().await;
    app.wipe_sale_from_redis(sale).await;
    let mut conn = app.redis_conn().await;
    let ann = UserId::parse("ann").expect("a buyer");
    let bob = UserId::parse("bob").expect("a buyer");
    let snapshot = sales::snapshot(&app.pg, &mut conn, &app.scratch.prefix, sale, &[&ann, &bob])
        .await
        .expect("snapshot");
    assert_eq!(
        snapshot,
        Snapshot {
            stock_left: 2,
            holding: vec![true, false],
            orders: vec![Some(anns), None],
        }
    );
    assert_eq!(app.store.stock_left(sale).await.expect("stock"), 2);
}

/// A burst's first requests for a sale the process has not seen yet all
/// miss its cache at once: one read of the sale from PostgreSQL is in
/// flight, and the others wait for its answer instead of queueing for the
/// pool's connections with a read each.
#[tokio::test]
async fn lookups_that_miss_a_sale_at_once_read_it_from_postgres_once() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    // Every read of the table waits until this transaction ends.
    // Watched over a connection of its own: the lookups may hold every
    // one of the pool's.
    use sqlx::Connection;
    let mut watcher = sqlx::PgConnection::connect_with(&app.pg.connect_options())
        .await
        .expect("PostgreSQL");
    let reads_before = app.store.catalog_reads();
    let mut blocker = app.pg.begin().await.expect("BEGIN");
    sqlx::query("LOCK TABLE sales IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *blocker)
        .await
        .expect("LOCK");
    let lookups: Vec<_> = (0..20)
        .map(|_| {
            let store = app.store.clone();
            tokio::spawn(async move { store.sale(sale).await })
        })
        .collect();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while reads_waiting(&mut watcher).await == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no read of the sale waiting on the lock"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    // Time for the other lookups to pile up, had they each their own read.
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(reads_waiting(&mut watcher).await, 1);
    blocker.rollback().await.expect("ROLLBACK");
    for lookup in lookups {
        let found = lookup.await.expect("the lookup ran").expect("the sale");
        assert_eq!(found.map(|found| found.id), Some(sale));
    }
    // And that one read answered them all.
    assert_eq!(app.store.catalog_reads() - reads_before, 1);
}

/// Reads of one sale by id waiting on a lock, in this database.
async fn reads_waiting(pg: &mut sqlx::PgConnection) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE datname = current_database() AND wait_event_type = 'Lock' AND query = $1",
    )
    .bind(format!(
        "SELECT {} FROM sales WHERE id = $1",
        sales::SALE_COLUMNS
    ))
    .fetch_one(&mut *pg)
    .await
    .expect("pg_stat_activity")
}

/// The sweep reads the unpaid orders' deadlines a page at a time, in
/// order of sale and moment: each moment that has an unpaid order once,
/// however many orders share it, none whose orders are all paid, and a
/// page never larger than asked.
#[tokio::test]
async fn the_unpaid_deadlines_are_read_a_page_at_a_time_each_once() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let mut unpaid = Vec::new();
    // A drain each: a moment each (two orders share one).
    for users in [&["a", "b"][..], &["c"], &["d"], &["e", "g"]] {
        for user in users {
            unpaid.push(app.buy(sale, user).await);
        }
        app.drain().await;
    }
    let paid = app.buy(sale, "f").await;
    app.drain().await;
    assert_eq!(app.pay(paid).await.status(), 200);
    // And a second sale's, after the first's in the order read.
    let other = app.create_sale(10).await;
    unpaid.push(app.buy(other, "a").await);
    app.drain().await;

    let mut moments = Vec::new();
    for order in unpaid {
        let stored = app.store.stored_order(order).await.expect("read");
        let stored = stored.expect("a stored order");
        moments.push((stored.sale_id, stored.pay_by.expect("a deadline")));
    }
    moments.sort();
    moments.dedup();
    let (mut seen, mut after) = (Vec::new(), None);
    loop {
        let page = app.store.unpaid_deadlines(after, 2).await.expect("a page");
        assert!(page.len() <= 2, "a page of {}", page.len());
        let Some((last, _)) = page.last() else { break };
        after = Some((last.sale_id, last.pay_by()));
        seen.extend(
            page.iter()
                .map(|(deadline, _)| (deadline.sale_id, deadline.pay_by())),
        );
    }
    assert_eq!(
        seen, moments,
        "every unpaid moment once, in order, and none only paid"
    );
}
