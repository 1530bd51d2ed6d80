//! Sales: created in PostgreSQL, loaded into Redis, cached in each instance.
//!
//! PostgreSQL holds the sale itself; Redis holds what the purchase path
//! changes at high speed (units left, who bought). A sale's row never changes
//! after it is created, apart from its `sold` counter, so every instance keeps
//! the rows it has seen in memory and asks PostgreSQL once per sale.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use sqlx::PgPool;

use crate::domain::{NewSale, Sale};
use crate::keys::SaleKeys;

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("lua/sale_load.lua")));

const SALE_COLUMNS: &str = "id, name, price_cents, stock_total, starts_at, ends_at";

/// The sales this instance has seen, by id.
#[derive(Debug, Default)]
pub struct Catalog {
    /// A std lock, not a tokio one: nothing awaits while it is held.
    cache: RwLock<HashMap<i64, Arc<Sale>>>,
}

impl Catalog {
    /// The sale with this id, from memory or from PostgreSQL.
    pub async fn get(&self, pg: &PgPool, id: i64) -> anyhow::Result<Option<Arc<Sale>>> {
        if let Some(sale) = self.cache.read().expect("catalog lock poisoned").get(&id) {
            return Ok(Some(Arc::clone(sale)));
        }
        let sale: Option<Sale> =
            sqlx::query_as(&format!("SELECT {SALE_COLUMNS} FROM sales WHERE id = $1"))
                .bind(id)
                .fetch_optional(pg)
                .await
                .context("reading a sale")?;
        Ok(sale.map(|sale| {
            let sale = Arc::new(sale);
            self.cache
                .write()
                .expect("catalog lock poisoned")
                .insert(id, Arc::clone(&sale));
            sale
        }))
    }
}

/// Insert a sale into PostgreSQL and load it into Redis.
pub async fn create_sale<C: ConnectionLike + Send>(
    pg: &PgPool,
    redis: &mut C,
    prefix: &str,
    new: &NewSale,
) -> anyhow::Result<Sale> {
    let sale: Sale = sqlx::query_as(&format!(
        "INSERT INTO sales (name, price_cents, stock_total, starts_at, ends_at)
         VALUES ($1, $2, $3, $4, $5) RETURNING {SALE_COLUMNS}"
    ))
    .bind(&new.name)
    .bind(new.price_cents)
    .bind(new.stock_total)
    .bind(new.starts_at)
    .bind(new.ends_at)
    .fetch_one(pg)
    .await
    .context("inserting a sale")?;
    // If Redis fails here the sale exists only in PostgreSQL; that is safe:
    // the first purchase finds the stock key missing and loads it.
    load_into_redis(pg, redis, prefix, sale.id).await?;
    Ok(sale)
}

/// All sales, newest first.
pub async fn list_sales(pg: &PgPool) -> anyhow::Result<Vec<Sale>> {
    sqlx::query_as(&format!(
        "SELECT {SALE_COLUMNS} FROM sales ORDER BY id DESC"
    ))
    .fetch_all(pg)
    .await
    .context("listing sales")
}

/// Load a sale's units left and buyers into Redis from PostgreSQL, unless
/// Redis has them already. Returns whether it loaded.
pub async fn load_into_redis<C: ConnectionLike + Send>(
    pg: &PgPool,
    redis: &mut C,
    prefix: &str,
    sale_id: i64,
) -> anyhow::Result<bool> {
    // One statement, so one snapshot. Read as two queries, a worker commit
    // between them would give a stock that does not match the buyers: the
    // new buyer counted in one and not the other.
    let (left, buyers): (i32, Vec<String>) = sqlx::query_as(
        "SELECT s.stock_total - s.sold,
                COALESCE(array_agg(o.user_id) FILTER (WHERE o.user_id IS NOT NULL), '{}')
           FROM sales s
           LEFT JOIN orders o ON o.sale_id = s.id AND o.status IN ('confirmed', 'paid')
          WHERE s.id = $1
          GROUP BY s.id",
    )
    .bind(sale_id)
    .fetch_one(pg)
    .await
    .context("reading a sale's stock and buyers")?;
    let keys = SaleKeys::new(prefix, sale_id);
    let loaded: i64 = LOAD
        .key(&keys.stock)
        .key(&keys.buyers)
        .arg(left)
        .arg(buyers)
        .invoke_async(redis)
        .await
        .context("loading a sale into Redis")?;
    if loaded == 1 {
        tracing::info!(sale_id, stock_left = left, "sale loaded into Redis");
    }
    Ok(loaded == 1)
}
