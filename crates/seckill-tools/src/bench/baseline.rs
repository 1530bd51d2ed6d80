//! The baseline `seckill bench` measures the worker against: the most
//! PostgreSQL takes, one server-side `INSERT ... SELECT` of as many rows
//! into a copy of `orders` (same columns, constraints and indexes), in a
//! transaction that is rolled back: nothing is left behind.

use std::time::{Duration, Instant};

use sqlx::PgPool;

/// How long one `INSERT ... SELECT` of `n` confirmed orders of sale
/// `sale_id` takes in a copy of `orders`.
pub(crate) async fn time_bulk_insert(
    pg: &PgPool,
    sale_id: i64,
    n: u32,
) -> anyhow::Result<Duration> {
    let mut tx = pg.begin().await?;
    sqlx::query("CREATE TEMP TABLE bench_orders (LIKE orders INCLUDING ALL) ON COMMIT DROP")
        .execute(&mut *tx)
        .await?;
    let started = Instant::now();
    sqlx::query(
        "INSERT INTO bench_orders (id, sale_id, user_id, status, pay_by)
         SELECT gen_random_uuid(), $1, 'bench-' || g, 'confirmed', now() + interval '15 minutes'
           FROM generate_series(1, $2) AS g",
    )
    .bind(sale_id)
    .bind(i64::from(n))
    .execute(&mut *tx)
    .await?;
    let took = started.elapsed();
    tx.rollback().await?;
    Ok(took)
}
