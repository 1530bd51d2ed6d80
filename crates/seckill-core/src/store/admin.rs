//! What the admin pages read and do: a sale's insides side by side (Redis'
//! figures, PostgreSQL's, both queues, the newest orders), re-driving a
//! queue's dead letters; and the admin's sessions and wrong-token counts,
//! kept in Redis so that every instance sees a logout and a lock-out. And
//! `seckill reset`: every sale and order forgotten, for a clean storefront.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use anyhow::Context;

use super::{OrderRow, Store};
use crate::keys::{self, SaleKeys, SaleQueue};
use crate::queue::{Queue, QueueStats};
use crate::scripts;

/// The gap between the due times of re-driven jobs, so that old
/// batch-mates are tried apart (`lua/queue_redrive.lua`): 1,000 dead jobs
/// are all due again within 50 s.
const REDRIVE_SPACING: Duration = Duration::from_millis(50);

static LOGIN_FAILURE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/login_failure.lua")));

/// A sale's insides, for its admin page.
#[derive(Debug)]
pub struct SaleInside {
    /// Units left according to Redis (`None`: the sale is not loaded).
    pub redis_stock: Option<i64>,
    /// Units held by confirmed and paid orders, according to PostgreSQL.
    pub sold: i32,
    /// The order queue and the deadline queue.
    pub order_queue: QueueStats,
    pub deadline_queue: QueueStats,
    /// The newest orders, newest first.
    pub orders: Vec<OrderRow>,
}

impl Store {
    /// Read a sale's insides, with at most `orders_shown` orders.
    pub async fn sale_inside(&self, sale_id: i64, orders_shown: i64) -> anyhow::Result<SaleInside> {
        let keys = SaleKeys::new(&self.prefix, sale_id);
        let mut conn = self.redis().await?;
        let redis_stock: Option<i64> = redis::cmd("GET")
            .arg(&keys.stock)
            .query_async(&mut conn)
            .await
            .context("reading the stock")?;
        let order_queue = Queue::new(keys.queue.clone())
            .stats(&mut conn)
            .await
            .context("reading the order queue")?;
        let deadline_queue = Queue::new(keys.deadlines.clone())
            .stats(&mut conn)
            .await
            .context("reading the deadline queue")?;
        Ok(SaleInside {
            redis_stock,
            sold: self.sold(sale_id).await?,
            order_queue,
            deadline_queue,
            orders: self.orders_of_sale(sale_id, orders_shown).await?,
        })
    }

    /// Put a queue's dead-lettered jobs back, due now. Returns how many.
    pub async fn redrive(&self, sale_id: i64, which: SaleQueue) -> anyhow::Result<u64> {
        let keys = SaleKeys::new(&self.prefix, sale_id);
        let mut conn = self.redis().await?;
        let count = Queue::new(keys.queue_keys(which).clone())
            .redrive(&mut conn, REDRIVE_SPACING)
            .await
            .context("re-driving dead-lettered jobs")?;
        tracing::info!(
            sale_id,
            queue = which.as_str(),
            count,
            "dead-lettered jobs re-driven"
        );
        Ok(count)
    }
}

impl Store {
    /// Open admin session `id` for `ttl`.
    pub async fn open_session(&self, id: &str, ttl: Duration) -> anyhow::Result<()> {
        redis::cmd("SET")
            .arg(keys::admin_session(&self.prefix, id))
            .arg(1)
            .arg("PX")
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1))
            .query_async::<()>(&mut self.redis().await?)
            .await
            .context("opening an admin session")
    }

    /// Whether admin session `id` is open (not expired, not logged out).
    pub async fn session_is_open(&self, id: &str) -> anyhow::Result<bool> {
        redis::cmd("EXISTS")
            .arg(keys::admin_session(&self.prefix, id))
            .query_async(&mut self.redis().await?)
            .await
            .context("checking an admin session")
    }

    /// Close admin session `id` (log out): every copy of its cookie stops working.
    pub async fn close_session(&self, id: &str) -> anyhow::Result<()> {
        redis::cmd("DEL")
            .arg(keys::admin_session(&self.prefix, id))
            .query_async::<()>(&mut self.redis().await?)
            .await
            .context("closing an admin session")
    }

    /// Count one admin token attempt from `client`, in a window of
    /// `window` from its first. Returns the attempts in the window and how
    /// long it has left.
    pub async fn note_login_attempt(
        &self,
        client: &str,
        window: Duration,
    ) -> anyhow::Result<(u64, Duration)> {
        let (attempts, left_ms): (u64, i64) = scripts::run(
            &mut self.redis().await?,
            &LOGIN_FAILURE,
            LOGIN_FAILURE
                .key(keys::login_failures(&self.prefix, client))
                .arg(u64::try_from(window.as_millis()).unwrap_or(u64::MAX)),
        )
        .await
        .context("counting a token attempt")?;
        Ok((
            attempts,
            Duration::from_millis(u64::try_from(left_ms).unwrap_or(0)),
        ))
    }

    /// Forget `client`'s attempts (it presented the right token).
    pub async fn clear_login_attempts(&self, client: &str) -> anyhow::Result<()> {
        redis::cmd("DEL")
            .arg(keys::login_failures(&self.prefix, client))
            .query_async::<()>(&mut self.redis().await?)
            .await
            .context("clearing token attempts")
    }

    /// Forget every sale and every order (`seckill reset`): both tables
    /// emptied in one statement, then every Redis key under the prefix
    /// deleted. Returns how many sales and orders there were. The sale ids
    /// go on counting from where they were: an instance still running
    /// keeps the sales it read in its cache (sales never change), and a
    /// new sale under an old id would be shown as the old one.
    ///
    /// PostgreSQL first: once it holds no sale, nothing can load one into
    /// Redis again while the keys go.
    pub async fn forget_every_sale(&self) -> anyhow::Result<(i64, i64)> {
        // READ COMMITTED whatever the server's default: `sales` is
        // truncated only so, so that no order committed meanwhile is
        // missed (`migrations/20261206000002_orders_sale_checked_per_statement.sql`).
        let mut tx = self
            .pg
            .begin_with("BEGIN ISOLATION LEVEL READ COMMITTED")
            .await
            .context("starting the reset")?;
        let (sales, orders): (i64, i64) =
            sqlx::query_as("SELECT (SELECT count(*) FROM sales), (SELECT count(*) FROM orders)")
                .fetch_one(&mut *tx)
                .await
                .context("counting the sales and orders")?;
        sqlx::query("TRUNCATE orders, sales")
            .execute(&mut *tx)
            .await
            .context("emptying the sales and orders")?;
        tx.commit().await.context("committing the reset")?;
        self.redis
            .delete_under(&self.prefix)
            .await
            .context("deleting the Redis keys")?;
        Ok((sales, orders))
    }
}
