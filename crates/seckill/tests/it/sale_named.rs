//! Every order names a sale that is there, checked by PostgreSQL once per
//! statement (`migrations/20261206000002_orders_sale_checked_per_statement.sql`)
//! where a foreign key checked each row: an order naming no sale is
//! refused, alone or in a batch; a sale that orders name is neither
//! deleted, renumbered nor truncated away; an insert and a delete that
//! race each wait for the other; and no delete reads a snapshot older
//! than the orders it must see. No order is left naming nothing.

use std::time::{Duration, Instant};

use sqlx::Connection;
use uuid::Uuid;

use crate::helpers::{TestApp, spawn_app};

const FOREIGN_KEY_VIOLATION: &str = "23503";

#[tokio::test]
async fn an_order_naming_no_sale_is_refused_and_a_batch_with_one_writes_nothing() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let missing = sale + 1_000;
    let refused = insert_orders(&app.pg, &[missing]).await;
    assert_refused(refused, "an order of a sale that is not there");
    // The worker's shape of write: one statement, many rows; one bad row
    // refuses them all.
    let refused = insert_orders(&app.pg, &[sale, sale, missing, sale]).await;
    assert_refused(refused, "a batch with one order of no sale");
    assert_eq!(
        app.orders(sale).await.len(),
        0,
        "nothing of the batch written"
    );
    insert_orders(&app.pg, &[sale, sale])
        .await
        .expect("orders of a sale that is there");
    assert_eq!(app.orders(sale).await.len(), 2);
}

#[tokio::test]
async fn a_sale_with_orders_is_neither_deleted_renumbered_nor_truncated_and_keeps_them() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let other = app.create_sale(10).await;
    insert_orders(&app.pg, &[sale]).await.expect("an order");
    for (what, sql) in [
        ("a delete", format!("DELETE FROM sales WHERE id = {sale}")),
        (
            "a new id",
            format!("UPDATE sales SET id = id + 1000 WHERE id = {sale}"),
        ),
        ("a truncate of sales alone", "TRUNCATE sales".to_owned()),
        (
            "an order moved to another sale",
            format!("UPDATE orders SET sale_id = {other} WHERE sale_id = {sale}"),
        ),
    ] {
        assert_refused(sqlx::raw_sql(&sql).execute(&app.pg).await.map(drop), what);
    }
    assert_eq!(app.orders(sale).await.len(), 1);
    // What the triggers must let through: a sale without orders goes, and
    // other columns of a sale with orders change.
    sqlx::query("DELETE FROM sales WHERE id = $1")
        .bind(other)
        .execute(&app.pg)
        .await
        .expect("a sale without orders deleted");
    sqlx::query("UPDATE sales SET name = 'renamed' WHERE id = $1")
        .bind(sale)
        .execute(&app.pg)
        .await
        .expect("a sale with orders renamed");
}

/// The race a per-statement check must not lose: orders inserted, not
/// yet committed, while their sales are deleted. The statement names two
/// sales, and locks each: both deletes wait for the insert's lock on
/// their sale, then see its orders and are refused.
#[tokio::test]
async fn a_delete_racing_an_uncommitted_order_waits_for_it_and_is_refused() {
    let app = spawn_app().await;
    let sales = [app.create_sale(10).await, app.create_sale(10).await];
    let mut inserting = app.pg.begin().await.expect("BEGIN");
    insert_orders(&mut *inserting, &[sales[0], sales[1], sales[0]])
        .await
        .expect("orders of two sales, not yet committed");
    let deletes: Vec<_> = sales
        .iter()
        .map(|&sale| {
            let pg = app.pg.clone();
            tokio::spawn(async move {
                sqlx::query("DELETE FROM sales WHERE id = $1")
                    .bind(sale)
                    .execute(&pg)
                    .await
                    .map(drop)
            })
        })
        .collect();
    wait_for_lock_waits(&app, "DELETE FROM sales", 2).await;
    inserting.commit().await.expect("COMMIT");
    for delete in deletes {
        assert_refused(
            delete.await.expect("the delete ran"),
            "a delete that waited",
        );
    }
    assert_eq!(app.orders(sales[0]).await.len(), 2);
    assert_eq!(app.orders(sales[1]).await.len(), 1);
    assert_eq!(orphans(&app).await, 0);
}

/// A session's temporary tables come first in its search path: one named
/// `sales` must not stand in for the real one.
#[tokio::test]
async fn a_temporary_table_named_sales_does_not_stand_in_for_the_sales() {
    let app = spawn_app().await;
    let mut session = sqlx::PgConnection::connect_with(&app.pg.connect_options())
        .await
        .expect("PostgreSQL");
    sqlx::raw_sql("CREATE TEMP TABLE sales (id bigint); INSERT INTO sales VALUES (424242)")
        .execute(&mut session)
        .await
        .expect("a temporary sales table");
    let refused = insert_orders(&mut session, &[424242]).await;
    assert_refused(refused, "an order of a sale only the temporary table holds");
    session.close().await.expect("closed");
    assert_eq!(orphans(&app).await, 0);
}

/// The other way round: the sale deleted, not yet committed, while an
/// order of it is inserted. The insert waits for the delete and is
/// refused once the sale is gone.
#[tokio::test]
async fn an_order_racing_an_uncommitted_delete_of_its_sale_waits_for_it_and_is_refused() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let mut deleting = app.pg.begin().await.expect("BEGIN");
    sqlx::query("DELETE FROM sales WHERE id = $1")
        .bind(sale)
        .execute(&mut *deleting)
        .await
        .expect("the sale deleted, not yet committed");
    let pg = app.pg.clone();
    let insert = tokio::spawn(async move { insert_orders(&pg, &[sale]).await });
    wait_for_lock_waits(&app, "INSERT INTO orders", 1).await;
    deleting.commit().await.expect("COMMIT");
    let inserted = insert.await.expect("the insert ran");
    assert_refused(inserted, "the order that waited");
    assert_eq!(orphans(&app).await, 0);
}

/// The other ways in: rows copied in (`COPY`), and an upsert that would
/// move a stored order to a sale that is not there.
#[tokio::test]
async fn an_order_copied_in_or_moved_by_an_upsert_onto_no_sale_is_refused() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let missing = sale + 1_000;
    let mut conn = app.pg.acquire().await.expect("a connection");
    let mut copy = conn
        .copy_in_raw("COPY orders (id, sale_id, user_id, status, pay_by) FROM STDIN")
        .await
        .expect("COPY");
    for (buyer, named) in [("copied-1", sale), ("copied-2", missing)] {
        let row = format!(
            "{}\t{named}\t{buyer}\tconfirmed\t2030-01-01 00:00:00+00\n",
            Uuid::now_v7()
        );
        copy.send(row.as_bytes()).await.expect("a row sent");
    }
    assert_refused(
        copy.finish().await.map(drop),
        "a copy with an order of no sale",
    );
    assert_eq!(
        app.orders(sale).await.len(),
        0,
        "nothing of the copy written"
    );

    let stored = Uuid::now_v7();
    let upsert = |sale_id: i64| {
        sqlx::query(
            "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
             VALUES ($1, $2, 'upserted', 'confirmed', now() + interval '1 hour')
             ON CONFLICT (id) DO UPDATE SET sale_id = EXCLUDED.sale_id",
        )
        .bind(stored)
        .bind(sale_id)
        .execute(&app.pg)
    };
    upsert(sale).await.expect("the order stored");
    assert_refused(upsert(missing).await.map(drop), "an upsert onto no sale");
    assert_eq!(app.orders(sale).await.len(), 1);
    assert_eq!(orphans(&app).await, 0);
}

/// A transaction of REPEATABLE READ reads the snapshot of its start,
/// which misses an order committed since: deleting the order's sale from
/// there would leave the order naming nothing, so a sale is deleted (or
/// truncated) only under READ COMMITTED.
#[tokio::test]
async fn a_sale_is_not_deleted_from_a_snapshot_older_than_its_orders() {
    let app = spawn_app().await;
    let sale = app.create_sale(10).await;
    let mut old = app
        .pg
        .begin_with("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .expect("BEGIN REPEATABLE READ");
    let before: i64 = sqlx::query_scalar("SELECT count(*) FROM orders")
        .fetch_one(&mut *old)
        .await
        .expect("the snapshot taken");
    assert_eq!(before, 0);
    insert_orders(&app.pg, &[sale])
        .await
        .expect("an order, committed after that snapshot");
    let deleted = sqlx::query("DELETE FROM sales WHERE id = $1")
        .bind(sale)
        .execute(&mut *old)
        .await
        .map(drop);
    assert_refused(deleted, "a delete from the older snapshot");
    old.rollback().await.expect("ROLLBACK");
    let mut serializable = app
        .pg
        .begin_with("BEGIN ISOLATION LEVEL SERIALIZABLE")
        .await
        .expect("BEGIN SERIALIZABLE");
    let truncated = sqlx::raw_sql("TRUNCATE orders, sales")
        .execute(&mut *serializable)
        .await
        .map(drop);
    assert_refused(truncated, "a truncate from a transaction's snapshot");
    serializable.rollback().await.expect("ROLLBACK");
    assert_eq!(app.orders(sale).await.len(), 1);
    assert_eq!(orphans(&app).await, 0);
}

/// One statement of as many orders as `sales` has entries, one per entry,
/// each a buyer of its own.
async fn insert_orders<'e>(
    pg: impl sqlx::PgExecutor<'e>,
    sales: &[i64],
) -> Result<(), sqlx::Error> {
    let ids: Vec<Uuid> = sales.iter().map(|_| Uuid::now_v7()).collect();
    let buyers: Vec<String> = ids.iter().map(|id| format!("buyer-{id}")).collect();
    sqlx::query(
        "INSERT INTO orders (id, sale_id, user_id, status, pay_by)
         SELECT id, sale_id, user_id, 'confirmed', now() + interval '1 hour'
           FROM unnest($1::uuid[], $2::bigint[], $3::text[]) AS batch(id, sale_id, user_id)",
    )
    .bind(&ids)
    .bind(sales)
    .bind(&buyers)
    .execute(pg)
    .await
    .map(drop)
}

fn assert_refused(result: Result<(), sqlx::Error>, what: &str) {
    let error = result.expect_err(what);
    let database = error
        .as_database_error()
        .unwrap_or_else(|| panic!("{what}: {error}"));
    assert_eq!(
        database.code().as_deref(),
        Some(FOREIGN_KEY_VIOLATION),
        "{what}: {error}"
    );
    assert_eq!(database.constraint(), Some("orders_sale_id_fkey"), "{what}");
}

/// Orders whose sale is not there.
async fn orphans(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM orders o WHERE NOT EXISTS (SELECT 1 FROM sales s WHERE s.id = o.sale_id)",
    )
    .fetch_one(&app.pg)
    .await
    .expect("count")
}

/// Until `count` statements starting with `start`, in this test's
/// database, wait on a lock. Watched over a connection of its own.
async fn wait_for_lock_waits(app: &TestApp, start: &str, count: i64) {
    let mut watcher = sqlx::PgConnection::connect_with(&app.pg.connect_options())
        .await
        .expect("PostgreSQL");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let waiting: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'
                AND query LIKE $1 || '%'",
        )
        .bind(start)
        .fetch_one(&mut watcher)
        .await
        .expect("pg_stat_activity");
        if waiting >= count {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{waiting} of {count} {start} waited on a lock"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
