//! The store against a real PostgreSQL: the enums the code uses for a
//! column are the values the column holds, both ways.

use seckill::domain::{OrderStatus, RejectReason};
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
