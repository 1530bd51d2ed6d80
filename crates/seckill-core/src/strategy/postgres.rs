//! `postgres`: no Redis on the decision; PostgreSQL is the lock.
//!
//! What it is: one transaction per buyer: `UPDATE sales SET sold = sold + 1
//! WHERE id = $1 AND sold < stock_total`, then the order stored confirmed
//! (`Store::take_in_postgres`). The UPDATE's row lock makes buyers of one
//! sale wait for each other, and its condition makes the oversell
//! impossible; the unique index on live orders refuses a second unit for
//! one buyer. No queue, no worker: the order is confirmed at once.
//!
//! What it costs: every buyer is a transaction on one hot row, so a sale
//! runs at the speed of PostgreSQL's row lock and its commits (compare the
//! lab's requests/s with `lock` and `lua`). Afterwards the unit and the
//! buyer are mirrored into Redis (for the pages and the other strategies)
//! and the payment deadline queued; a Redis wiped between the commit and
//! the mirror, and loaded again in between, counts the order twice: Redis
//! then shows one unit fewer than PostgreSQL (an under-sell, never an
//! oversell, since this strategy never asks Redis).

use anyhow::Context;
use redis::aio::ConnectionLike;

use super::{Buy, Outcome};
use crate::domain::{DeadlineJob, OrderJob};
use crate::queue::Queue;
use crate::store::Taken;

/// One purchase, decided by PostgreSQL.
pub(crate) async fn purchase<C: ConnectionLike + Send>(
    buy: Buy<'_>,
    conn: &mut C,
) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    // The sale in Redis first (a load reads PostgreSQL), so the mirror
    // below lands on figures that do not count this order yet.
    shop.read_sale(conn, sale_id, &[]).await?;
    let job = OrderJob::new(sale_id, user);
    let window = shop.payment_window;
    let pay_by = match shop
        .store
        .take_in_postgres(&job, window)
        .await
        .context("taking a unit in PostgreSQL")?
    {
        Taken::SoldOut => {
            shop.sold_out.set(sale_id);
            return Ok(Outcome::SoldOut);
        }
        Taken::AlreadyPurchased => return Ok(Outcome::AlreadyPurchased { order_id: None }),
        // Confirmed at once: this strategy has no worker to count it.
        Taken::Confirmed { pay_by } => {
            crate::metrics::metrics().orders("confirmed", 1);
            pay_by
        }
    };
    // One MULTI: no reader of the sale sees the unit gone and its buyer
    // not yet recorded (or the other way round).
    let (left,): (i64,) = redis::pipe()
        .atomic()
        .decr(&keys.stock, 1)
        .hset(&keys.holds, user.as_str(), job.order_id.to_string())
        .ignore()
        .query_async(conn)
        .await
        .context("mirroring the purchase into Redis")?;
    let () = redis::pipe()
        .publish(&keys.events, left)
        .ignore()
        .query_async(conn)
        .await
        .context("publishing the units left")?;
    let deadline = DeadlineJob::new(sale_id, pay_by);
    let (id, payload) = (deadline.id(), deadline.to_payload());
    Queue::new(keys.deadlines.clone())
        .enqueue(conn, &[(id.as_str(), payload.as_str())], window)
        .await
        .context("queueing the payment deadline")?;
    if left <= 0 {
        shop.sold_out.set(sale_id);
    }
    Ok(Outcome::Accepted {
        order_id: job.order_id,
    })
}
