//! A sale's status as `GET /api/sales/{id}` tells it (`upcoming`, `live`,
//! `sold_out`, `ended`, or `404 sale_not_found`), and as the index sorts
//! it: live sales first, then upcoming, then ended.

use serde_json::json;

use crate::helpers::{TestApp, spawn_app};
use crate::purchase::error_code;

/// A sale that ended an hour ago: the API refuses to create one, so it is
/// written straight to PostgreSQL.
async fn ended_sale(app: &TestApp) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO sales (name, price_cents, stock_total, starts_at, ends_at)
         VALUES ('Past', 100, 3, now() - interval '2 hours', now() - interval '1 hour')
         RETURNING id",
    )
    .fetch_one(&app.pg)
    .await
    .expect("insert a past sale")
}

async fn upcoming_sale(app: &TestApp) -> i64 {
    let starts_at = chrono::Utc::now() + chrono::Duration::hours(1);
    app.create_sale_with(json!({
        "name": "Later", "stock": 3, "price_cents": 100, "starts_at": starts_at,
    }))
    .await
}

/// A live sale, a sold-out one, an upcoming one and an ended one, created
/// in that order: their ids.
async fn one_of_each(app: &TestApp) -> [i64; 4] {
    let live = app.create_sale(2).await;
    let sold_out = app.create_sale(1).await;
    app.buy(sold_out, "ann").await;
    let upcoming = upcoming_sale(app).await;
    let ended = ended_sale(app).await;
    [live, sold_out, upcoming, ended]
}

#[tokio::test]
async fn the_sale_api_tells_upcoming_live_sold_out_and_ended_apart_and_404s_the_unknown() {
    let app = spawn_app().await;
    let [live, sold_out, upcoming, ended] = one_of_each(&app).await;

    let sale = async |id: i64| app.get_json(&format!("/api/sales/{id}")).await;
    let (live, sold_out, upcoming, ended) = (
        sale(live).await,
        sale(sold_out).await,
        sale(upcoming).await,
        sale(ended).await,
    );
    assert_eq!(
        (&live["status"], &live["stock_left"]),
        (&json!("live"), &json!(2))
    );
    assert_eq!(
        (&sold_out["status"], &sold_out["stock_left"]),
        (&json!("sold_out"), &json!(0))
    );
    assert_eq!(
        (&upcoming["status"], &upcoming["stock_left"]),
        (&json!("upcoming"), &json!(3))
    );
    assert_eq!(ended["status"], "ended", "{ended}");
    for field in [
        "id",
        "name",
        "price_cents",
        "stock_total",
        "starts_at",
        "ends_at",
    ] {
        assert!(ended.get(field).is_some(), "{field} missing from {ended}");
    }

    for id in ["424242", "not-a-number"] {
        let response = app
            .client
            .get(app.url(&format!("/api/sales/{id}")))
            .send()
            .await
            .expect("GET");
        assert_eq!(response.status(), 404, "sale {id}");
        assert_eq!(error_code(response).await, "sale_not_found", "sale {id}");
    }
}

#[tokio::test]
async fn the_index_lists_live_sales_then_upcoming_then_ended() {
    let app = spawn_app().await;
    // Created oldest first: newest first alone would list them backwards.
    let [live, sold_out, upcoming, ended] = one_of_each(&app).await;

    let html = app
        .client
        .get(app.url("/"))
        .send()
        .await
        .expect("GET /")
        .text()
        .await
        .expect("HTML");
    // Each heading with the sales listed under it, in page order.
    let sections: Vec<(String, Vec<i64>)> = html
        .split("<h2 ")
        .skip(1)
        .map(|section| {
            let title = section
                .split('>')
                .nth(1)
                .and_then(|rest| rest.split('<').next())
                .expect("a heading")
                .to_owned();
            let ids = section
                .split("<a href=\"/sales/")
                .skip(1)
                .map(|rest| {
                    rest.split('"')
                        .next()
                        .expect("an id")
                        .parse()
                        .expect("a number")
                })
                .collect();
            (title, ids)
        })
        .collect();
    let expected: Vec<(String, Vec<i64>)> = vec![
        ("Live now".into(), vec![live]),
        ("Upcoming".into(), vec![upcoming]),
        ("Sold out".into(), vec![sold_out]),
        ("Ended".into(), vec![ended]),
    ];
    assert_eq!(sections, expected, "{html}");
}
