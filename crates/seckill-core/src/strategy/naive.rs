//! `naive`: no guard at all. DELIBERATELY BROKEN.
//!
//! What it is: the five steps of a purchase with nothing between the reads
//! and the writes, as a first draft without the article's lock would do
//! them, plus a pause between reading and writing (`--naive-delay-ms`) that
//! stands for any real work in between.
//!
//! What it gets wrong: every purchase that reads during another's pause
//! sees the same stock and writes the same "stock minus one", so units are
//! sold more than once, and a buyer's two requests can both win. PostgreSQL's
//! constraints then refuse the excess orders (see `store/orders.rs`): the
//! buyers were told `202` for orders that end `rejected`.

use std::time::Duration;

use anyhow::Context;

use super::{Buy, Decision, Outcome, decide};
use crate::domain::OrderJob;
use crate::queue::Queue;
use crate::redis_pool::RedisConn;

/// One purchase, unguarded.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    let snapshot = shop.read_sale(conn, sale_id, &[user]).await?;
    let stock_left = snapshot.stock_left;
    match decide(snapshot.holding[0], stock_left) {
        Decision::Take => {}
        Decision::AlreadyPurchased => {
            return Ok(Outcome::AlreadyPurchased {
                order_id: snapshot.orders[0],
            });
        }
        Decision::SoldOut => {
            shop.sold_out.set(sale_id);
            return Ok(Outcome::SoldOut);
        }
    }
    // The race window: other purchases read the same stock meanwhile.
    super::pause_for(shop.settings.naive_delay()).await;
    let job = OrderJob::new(sale_id, user);
    let () = redis::pipe()
        .set(&keys.stock, stock_left - 1)
        .ignore()
        // The buyer's hold names no order (`keys.rs`, `holds`).
        .hset(&keys.holds, user.as_str(), "")
        .ignore()
        .publish(&keys.events, stock_left - 1)
        .ignore()
        .query_async(conn)
        .await
        .context("writing the naive purchase")?;
    let (id, payload) = (job.order_id.to_string(), job.to_payload());
    Queue::new(keys.queue.clone())
        .enqueue(conn, &[(id.as_str(), payload.as_str())], Duration::ZERO)
        .await
        .context("queueing the naive purchase")?;
    Ok(Outcome::Accepted {
        order_id: job.order_id,
    })
}
