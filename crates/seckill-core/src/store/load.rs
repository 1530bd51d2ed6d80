//! Loading a sale into Redis from PostgreSQL: when it is created, and
//! whenever Redis has lost it. The read and the write are one step as far
//! as PostgreSQL is concerned (the sale's row is held from the read until
//! the write is recorded); the script that writes is `lua/sale_load.lua`,
//! which says which races the load epoch fences.

use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;
use sqlx::PgPool;

use crate::keys::SaleKeys;
use crate::scripts;

static LOAD: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/sale_load.lua")));

/// A sale's figures as PostgreSQL has them, ready to be loaded into Redis.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loadable {
    /// `stock_total - sold`.
    pub stock_left: i32,
    /// The buyers of its confirmed and paid orders.
    pub buyers: Vec<String>,
    /// Each buyer's order, in the same order.
    pub orders: Vec<String>,
}

/// Load a sale's units left and buyers into Redis from PostgreSQL, unless
/// Redis has them already. Returns whether it loaded.
///
/// The read and the write are one step as far as PostgreSQL is concerned:
/// the load holds the sale's row (`FOR UPDATE`) from its read until the
/// write to Redis is done, and records the load's epoch beside it. A worker
/// confirming or cancelling an order of the sale (each changes `sold`)
/// waits meanwhile, so Redis never gets a past state; and a worker whose
/// batch was reserved before this load finds the epoch changed and writes
/// nothing (see `migrations/20261124000001_load_epoch.sql`).
pub(crate) async fn load_into_redis<C: ConnectionLike + Send>(
    pg: &PgPool,
    redis: &mut C,
    prefix: &str,
    sale_id: i64,
) -> anyhow::Result<bool> {
    begin_load(pg, sale_id).await?.write(redis, prefix).await
}

/// A load in progress: its transaction holds the sale's row, and what it
/// read. Public, with [`begin_load`], so that tests can play a load that
/// is under way while something else happens.
pub struct Loading {
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    sale_id: i64,
    /// This database's identity (`database_identity`), written into the
    /// epoch.
    database: String,
    /// Whether the sale was just created: whatever Redis holds under its
    /// id belongs to another database, epoch or none.
    new_sale: bool,
    /// What PostgreSQL holds.
    pub loadable: Loadable,
}

/// The read half of [`load_into_redis`]: lock the sale's row, then read its
/// units left and the buyers of its orders that hold a unit.
pub async fn begin_load(pg: &PgPool, sale_id: i64) -> anyhow::Result<Loading> {
    let tx = pg.begin().await.context("starting a load")?;
    loading(tx, sale_id).await
}

/// The load of a sale inserted in `tx`, not committed yet
/// (`Store::create_sale`): whatever Redis holds under its id belongs to
/// another database, epoch or none. The write commits the insert with the
/// load, so a sale that exists was loaded once.
pub(crate) async fn of_a_new_sale(
    tx: sqlx::Transaction<'static, sqlx::Postgres>,
    sale_id: i64,
) -> anyhow::Result<Loading> {
    let mut loading = loading(tx, sale_id).await?;
    loading.new_sale = true;
    Ok(loading)
}

/// Read in `tx`, holding the sale's row, what a load writes.
async fn loading(
    mut tx: sqlx::Transaction<'static, sqlx::Postgres>,
    sale_id: i64,
) -> anyhow::Result<Loading> {
    // The row lock first: every change of `sold` waits for this load now,
    // so the buyers read next (a fresh snapshot, after the lock) match it.
    let stock_left: i32 =
        sqlx::query_scalar("SELECT stock_total - sold FROM sales WHERE id = $1 FOR UPDATE")
            .bind(sale_id)
            .fetch_one(&mut *tx)
            .await
            .context("reading a sale's stock")?;
    let (buyers, orders): (Vec<String>, Vec<String>) = sqlx::query_as::<_, (String, String)>(
        "SELECT user_id, id::text FROM orders WHERE sale_id = $1 AND status IN ('confirmed', 'paid')",
    )
    .bind(sale_id)
    .fetch_all(&mut *tx)
    .await
    .context("reading a sale's buyers")?
    .into_iter()
    .unzip();
    let database: String = sqlx::query_scalar("SELECT id::text FROM database_identity")
        .fetch_one(&mut *tx)
        .await
        .context("reading the database's identity")?;
    Ok(Loading {
        tx,
        sale_id,
        database,
        new_sale: false,
        loadable: Loadable {
            stock_left,
            buyers,
            orders,
        },
    })
}

impl Loading {
    /// The write half: writes only if the sale's stock key is absent
    /// (`lua/sale_load.lua`), then records the load's epoch in PostgreSQL
    /// and lets go of the row. Returns whether it wrote.
    pub async fn write<C: ConnectionLike + Send>(
        mut self,
        redis: &mut C,
        prefix: &str,
    ) -> anyhow::Result<bool> {
        let keys = SaleKeys::new(prefix, self.sale_id);
        // Read while this load holds the sale's row: no other load and no
        // worker's commit can move it before the script runs, unless the
        // script is late (see `lua/sale_load.lua`).
        let seen = epoch(redis, &keys).await?.unwrap_or_default();
        let ours = format!("db:{}:", self.database);
        let epoch = format!("{ours}{}", uuid::Uuid::new_v4().simple());
        let mut load = LOAD.prepare_invoke();
        load.key(&keys.stock).key(&keys.holds).key(&keys.epoch);
        for key in [
            keys.lock.as_str(),
            &keys.returned,
            &keys.voided,
            &keys.answers,
        ]
        .into_iter()
        .chain(keys.queue.all())
        .chain(keys.deadlines.all())
        .chain(keys.room.all())
        {
            load.key(key);
        }
        load.arg(self.loadable.stock_left)
            .arg(&epoch)
            .arg(&ours)
            .arg(if self.new_sale { "new" } else { "known" })
            .arg(&seen);
        for (buyer, order) in self.loadable.buyers.iter().zip(&self.loadable.orders) {
            load.arg(buyer).arg(order);
        }
        let loaded: i64 = scripts::run(redis, &LOAD, &load)
            .await
            .context("loading a sale into Redis")?;
        if loaded == 1 {
            sqlx::query("UPDATE sales SET load_epoch = $2 WHERE id = $1")
                .bind(self.sale_id)
                .bind(&epoch)
                .execute(&mut *self.tx)
                .await
                .context("recording the load's epoch")?;
            tracing::info!(
                sale_id = self.sale_id,
                stock_left = self.loadable.stock_left,
                "sale loaded into Redis"
            );
        }
        self.tx.commit().await.context("finishing a load")?;
        if loaded == 1 {
            crate::metrics::metrics().redis_loads.inc();
        }
        Ok(loaded == 1)
    }
}

/// The sale's load epoch: changes with every load from PostgreSQL (`None`
/// while the sale is not loaded).
pub async fn epoch<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
) -> anyhow::Result<Option<String>> {
    redis::cmd("GET")
        .arg(&keys.epoch)
        .query_async(conn)
        .await
        .context("reading the sale's load epoch")
}
