//! Sales: created in PostgreSQL, loaded into Redis, cached in each process.
//!
//! PostgreSQL holds the sale itself; Redis holds what the purchase path
//! changes at high speed (units left, who bought). A sale's row never changes
//! after it is created, apart from its `sold` counter, so every process keeps
//! the rows it has seen in memory (`catalog.rs`) and asks PostgreSQL once per
//! sale, however many of its requests miss the sale at once.
//!
//! Redis may lose a sale's figures (a restart without persistence). Every
//! read of them goes through [`snapshot`], which finds the stock key missing,
//! loads the sale from PostgreSQL (`lua/sale_load.lua`, which writes only
//! when the keys are still absent) and reads again.

use std::sync::Arc;

use anyhow::Context;
use chrono::{DateTime, Utc};
use redis::aio::ConnectionLike;
use sqlx::PgPool;
use uuid::Uuid;

use super::Store;
use super::load::{load_into_redis, of_a_new_sale};
use crate::domain::{NewSale, Sale, UserId};
use crate::keys::SaleKeys;

pub const SALE_COLUMNS: &str = "id, name, price_cents, stock_total, starts_at, ends_at, \
     room_mode, room_admit_per_sec, room_max_active, room_admission_secs, room_max_line";

/// What Redis says of a sale, for some buyers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Units left to sell (negative only after the `naive` strategy oversold).
    pub stock_left: i64,
    /// For each buyer asked about, in order, whether they hold a unit.
    pub holding: Vec<bool>,
    /// For each buyer asked about, in order, the order their unit belongs
    /// to, as the sale's holds hash names it: what a buyer who asks again
    /// is told, so that a `202` lost on its way can be found again.
    pub orders: Vec<Option<Uuid>>,
}

/// What [`snapshot_reads`] answers: the units left (`None` when Redis does
/// not hold the sale), and the order id the holds hash keeps for each
/// buyer (`None`: the buyer holds no unit).
pub(crate) type SnapshotRead = (Option<i64>, Vec<Option<String>>);

impl Snapshot {
    /// The snapshot in a [`snapshot_reads`]' answer, `None` when Redis does
    /// not hold the sale (it must be loaded: [`snapshot`] does).
    pub(crate) fn from_read((left, orders): SnapshotRead) -> Option<Self> {
        left.map(|stock_left| Self {
            stock_left,
            holding: orders.iter().map(Option::is_some).collect(),
            orders: orders
                .iter()
                .map(|id| id.as_deref().and_then(|id| Uuid::parse_str(id).ok()))
                .collect(),
        })
    }

    /// A snapshot of the units left alone, with no buyer asked about.
    fn of_stock(left: Option<i64>) -> SnapshotRead {
        (left, Vec::new())
    }
}

/// Steps 1 and 2 for some buyers (at least one), as commands for the
/// caller to send: the units left, which of `buyers` hold one, and the
/// order each holds. The lock strategy sends them with its attempt at the
/// sale lock.
pub(crate) fn snapshot_reads(keys: &SaleKeys, buyers: &[&UserId]) -> redis::Pipeline {
    let buyers: Vec<&str> = buyers.iter().map(|buyer| buyer.as_str()).collect();
    let mut reads = redis::pipe();
    reads
        .get(&keys.stock)
        .cmd("HMGET")
        .arg(&keys.holds)
        .arg(&buyers);
    reads
}

impl Store {
    /// The sale with this id, from memory or from PostgreSQL.
    pub async fn sale(&self, id: i64) -> anyhow::Result<Option<Arc<Sale>>> {
        if let Some(sale) = self.catalog.cached(id) {
            return Ok(Some(sale));
        }
        if self.catalog.known_missing(id) || self.catalog.beyond_max(id) {
            return Ok(None);
        }
        // The race this prevents: a burst's first requests for a sale this
        // process has not seen all miss the cache at once, and each would
        // read the sale from PostgreSQL, queueing for the pool's few
        // connections ahead of their own purchases (a thundering herd).
        // One read is in flight; the others wait for its answer, a failure
        // included (judged once: PostgreSQL down is a 503 for each).
        let store = self.clone();
        let reading = self.catalog.reading(&self.runtime, id, move || async move {
            store.read_sale(id).await
        });
        reading.await.map_err(|failure| failure.to_error())
    }

    /// A sale from PostgreSQL, cached; or its absence, remembered.
    async fn read_sale(&self, id: i64) -> anyhow::Result<Option<Arc<Sale>>> {
        self.catalog.count_read();
        let sale: Option<Sale> =
            sqlx::query_as(&format!("SELECT {SALE_COLUMNS} FROM sales WHERE id = $1"))
                .bind(id)
                .fetch_optional(&self.pg)
                .await
                .context("reading a sale")?;
        if sale.is_none() {
            self.catalog.note_missing(id);
            let max: i64 = sqlx::query_scalar("SELECT COALESCE(max(id), 0) FROM sales")
                .fetch_one(&self.pg)
                .await
                .context("reading the highest sale id")?;
            self.catalog.note_max(max);
        }
        Ok(sale.map(|sale| self.catalog.cache(sale)))
    }

    /// Insert a sale into PostgreSQL and load it into Redis.
    pub async fn create_sale(&self, new: &NewSale) -> anyhow::Result<Sale> {
        // The connection first: with Redis unreachable, nothing is written,
        // and a retry cannot create the sale twice.
        let mut conn = self.redis().await?;
        let mut tx = self.pg.begin().await.context("starting a sale's insert")?;
        let sale: Sale = sqlx::query_as(&format!(
            "INSERT INTO sales (name, price_cents, stock_total, starts_at, ends_at, \
                                room_mode, room_admit_per_sec, room_max_active, room_admission_secs, \
                                room_max_line)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING {SALE_COLUMNS}"
        ))
        .bind(&new.name)
        .bind(new.price_cents)
        .bind(new.stock_total)
        .bind(new.starts_at)
        .bind(new.ends_at)
        .bind(new.waiting_room.map(|room| room.mode.as_str()))
        .bind(new.waiting_room.map(|room| room.admit_per_sec as i32))
        .bind(new.waiting_room.map(|room| room.max_active as i32))
        .bind(new.waiting_room.map(|room| room.admission_secs as i32))
        .bind(
            new.waiting_room
                .and_then(|room| room.max_line)
                .map(|cap| cap as i32),
        )
        .fetch_one(&mut *tx)
        .await
        .context("inserting a sale")?;
        // The insert commits with the load, in one transaction (the
        // write commits it once Redis holds the sale): whatever Redis holds
        // under a new sale's id is not this sale's (another database's sale
        // of the same id, left under the same prefix), and only a load of a
        // sale just created replaces it; a purchase loads only a sale whose
        // stock key is missing. So a load that fails rolls the sale back,
        // and the error answered is true: a retry creates it once. (A load
        // that ran in Redis and whose commit then failed leaves keys under
        // an id the sequence never hands out again.)
        of_a_new_sale(tx, sale.id)
            .await?
            .write(&mut conn, &self.prefix)
            .await?;
        self.catalog.forget_missing(sale.id);
        self.catalog.cache(sale.clone());
        tracing::info!(sale_id = sale.id, stock = sale.stock_total, "sale created");
        Ok(sale)
    }

    /// Up to `limit` sales, newest first, older than sale `before` (from
    /// the newest with `None`): a page of the admin's list, whose cost is
    /// the page's, however many sales there are.
    pub async fn sales(&self, before: Option<i64>, limit: i64) -> anyhow::Result<Vec<Sale>> {
        sqlx::query_as(&format!(
            "SELECT {SALE_COLUMNS} FROM sales WHERE ($1::bigint IS NULL OR id < $1) \
             ORDER BY id DESC LIMIT $2"
        ))
        .bind(before)
        .bind(limit)
        .fetch_all(&self.pg)
        .await
        .context("listing sales")
    }

    /// One page of the storefront's listing: live sales (sold out or not)
    /// first, then upcoming, then ended, newest first within each, as they
    /// stand at `now`; `limit` of them from `offset`, and how many sales
    /// there are. PostgreSQL sorts and cuts: one scan of `sales` and a
    /// top-N sort, and only the page's rows come back.
    pub async fn sales_page(
        &self,
        now: DateTime<Utc>,
        offset: i64,
        limit: i64,
    ) -> anyhow::Result<SalesPage> {
        // The sort's first key is the section: the `CASE` must say what
        // `Sale::window` says at `now` (0 open, 1 not started, 2 ended);
        // `pages::the_index_pages_through_every_sale_live_ones_first`
        // checks the order.
        let rows: Vec<Listed> = sqlx::query_as(&format!(
            "SELECT {SALE_COLUMNS}, count(*) OVER () AS total FROM sales \
             ORDER BY CASE WHEN $1 < starts_at THEN 1 \
                           WHEN ends_at IS NOT NULL AND $1 >= ends_at THEN 2 \
                           ELSE 0 END, id DESC \
             LIMIT $3 OFFSET $2"
        ))
        .bind(now)
        .bind(offset)
        .bind(limit)
        .fetch_all(&self.pg)
        .await
        .context("listing a page of sales")?;
        let total = rows.first().map_or(0, |row| row.total);
        Ok(SalesPage {
            sales: rows.into_iter().map(|row| row.sale).collect(),
            total,
        })
    }

    /// Record `epoch` as the sale's load epoch, over `over` only, and only
    /// an epoch of this database (`database_identity`): for a
    /// worker that found PostgreSQL's record (`over`) behind Redis' (a
    /// load whose last step failed). Returns whether it wrote. The race the
    /// comparison closes: a load completes between the worker's refusal
    /// and this write; written over, its newer epoch would let a batch
    /// reserved before it through PostgreSQL's half of the fence.
    pub async fn record_load_epoch(
        &self,
        sale_id: i64,
        epoch: &str,
        over: Option<&str>,
    ) -> anyhow::Result<bool> {
        // Nor an epoch another database drew (a deployment sharing this
        // Redis and prefix): its orders are not this database's.
        let written = sqlx::query(
            "UPDATE sales SET load_epoch = $2
             WHERE id = $1 AND load_epoch IS NOT DISTINCT FROM $3
               AND ($2 NOT LIKE 'db:%'
                    OR $2 LIKE 'db:' || (SELECT id::text FROM database_identity) || ':%')",
        )
        .bind(sale_id)
        .bind(epoch)
        .bind(over)
        .execute(&self.pg)
        .await
        .context("recording a sale's load epoch")?;
        Ok(written.rows_affected() == 1)
    }

    /// The ids of all sales, oldest first: the worker's round.
    pub async fn sale_ids(&self) -> anyhow::Result<Vec<i64>> {
        sqlx::query_scalar("SELECT id FROM sales ORDER BY id")
            .fetch_all(&self.pg)
            .await
            .context("listing sales")
    }

    /// The sales that have not ended, or ended less than `after` ago: the
    /// ones whose queues the worker visits on every pass.
    pub(crate) async fn sales_in_play(
        &self,
        after: std::time::Duration,
    ) -> anyhow::Result<Vec<i64>> {
        sqlx::query_scalar(
            "SELECT id FROM sales WHERE ends_at IS NULL \
             OR ends_at > now() - make_interval(secs => $1) ORDER BY id",
        )
        .bind(after.as_secs_f64())
        .fetch_all(&self.pg)
        .await
        .context("listing the sales in play")
    }

    /// Units held by confirmed and paid orders, as PostgreSQL counts them.
    pub async fn sold(&self, sale_id: i64) -> anyhow::Result<i32> {
        sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
            .bind(sale_id)
            .fetch_one(&self.pg)
            .await
            .context("reading sold")
    }

    /// Units left of a sale, from Redis (loaded from PostgreSQL if missing).
    pub async fn stock_left(&self, sale_id: i64) -> anyhow::Result<i64> {
        let mut conn = self.redis().await?;
        let snapshot = snapshot(&self.pg, &mut conn, &self.prefix, sale_id, &[]).await?;
        Ok(snapshot.stock_left)
    }

    /// Units left of each of `sale_ids`, in order, in one read (`MGET`; on
    /// a cluster, the connection splits it by master). A sale Redis does
    /// not hold (it was restarted) is loaded first, as [`Store::stock_left`]
    /// does.
    pub async fn stocks_left(&self, sale_ids: &[i64]) -> anyhow::Result<Vec<i64>> {
        if sale_ids.is_empty() {
            return Ok(Vec::new());
        }
        let stocks: Vec<String> = sale_ids
            .iter()
            .map(|id| SaleKeys::new(&self.prefix, *id).stock)
            .collect();
        let read: Vec<Option<i64>> = redis::cmd("MGET")
            .arg(stocks)
            .query_async(&mut self.redis().await?)
            .await
            .context("reading the sales' units left")?;
        let mut left = Vec::with_capacity(sale_ids.len());
        for (id, stock) in sale_ids.iter().zip(read) {
            left.push(match stock {
                Some(stock) => stock,
                None => self.stock_left(*id).await?,
            });
        }
        Ok(left)
    }

    /// Replace a sale's units left and buyers in Redis with what PostgreSQL
    /// says. The demo runs it after the `naive` run, which leaves them wrong
    /// on purpose (more buyers than units, a stock that was overwritten).
    pub async fn reset_sale_in_redis(&self, sale_id: i64) -> anyhow::Result<()> {
        let keys = SaleKeys::new(&self.prefix, sale_id);
        let mut conn = self.redis().await?;
        // One DEL of both keys, then the load (which writes only when the keys
        // are absent): a purchase between the two finds them absent and loads
        // the same figures from PostgreSQL.
        let () = redis::cmd("DEL")
            .arg(&keys.stock)
            .arg(&keys.holds)
            .query_async(&mut conn)
            .await
            .context("clearing a sale in Redis")?;
        load_into_redis(&self.pg, &mut conn, &self.prefix, sale_id).await?;
        Ok(())
    }
}

/// Units left of a sale and which of `buyers` hold one, from Redis, loading
/// the sale from PostgreSQL first if Redis does not have it (it was
/// restarted). On the purchase path, under the sale lock, so it takes the
/// caller's connection.
pub async fn snapshot<C: ConnectionLike + Send>(
    pg: &PgPool,
    conn: &mut C,
    prefix: &str,
    sale_id: i64,
    buyers: &[&UserId],
) -> anyhow::Result<Snapshot> {
    let keys = SaleKeys::new(prefix, sale_id);
    for _ in 0..2 {
        // One round trip either way; with no buyer (a page, a live stream's
        // snapshot) only the stock is read.
        let read: SnapshotRead = if buyers.is_empty() {
            redis::cmd("GET")
                .arg(&keys.stock)
                .query_async(conn)
                .await
                .map(Snapshot::of_stock)
        } else {
            snapshot_reads(&keys, buyers).query_async(conn).await
        }
        .context("reading the sale from Redis")?;
        match Snapshot::from_read(read) {
            Some(snapshot) => return Ok(snapshot),
            None => {
                load_into_redis(pg, conn, prefix, sale_id).await?;
            }
        }
    }
    anyhow::bail!("sale {sale_id} has no stock in Redis even after loading it")
}

/// One page of the listing ([`Store::sales_page`]).
#[derive(Debug)]
pub struct SalesPage {
    pub sales: Vec<Sale>,
    /// Sales in all; 0 when the page is past the last one.
    pub total: i64,
}

#[derive(sqlx::FromRow)]
struct Listed {
    #[sqlx(flatten)]
    sale: Sale,
    total: i64,
}
