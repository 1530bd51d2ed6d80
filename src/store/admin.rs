//! What the admin pages read and do: a sale's insides side by side (Redis'
//! figures, PostgreSQL's, both queues, the newest orders), and re-driving a
//! queue's dead letters.

use anyhow::Context;

use super::{OrderRow, Store};
use crate::keys::{SaleKeys, SaleQueue};
use crate::queue::{Queue, QueueStats};

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
            .redrive(&mut conn)
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
