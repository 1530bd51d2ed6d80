//! `decr`: "cache, then compensate", as many tutorials write it.
//! DELIBERATELY BROKEN.
//!
//! What it is: no lock. Check the buyer (`HMGET` of the holds); `DECR` the stock; if
//! it went below zero, `INCR` it back and answer "sold out"; otherwise add
//! the buyer and queue the order. DECR is atomic, so the stock itself can
//! never be sold below zero, and it is fast.
//!
//! What it gets wrong: the buyer check and the buyer's record are two
//! steps with the decrement between them. Two requests of one buyer that
//! both pass the check before either records the buyer both take a unit:
//! two `202`s for one buyer, and PostgreSQL refuses the second order. Its
//! unit was taken in Redis and is never sold to anyone: an under-sell, and
//! the buyers refused "sold out" meanwhile were refused a unit that was
//! left. Knob: `--hold-pause-ms 200` between the decrement and the record
//! widens the gap until every repeated request hits it.

use anyhow::Context;

use super::{Buy, Outcome, record_take};
use crate::redis_pool::RedisConn;

/// One purchase by decrement-and-compensate.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    // Loads the sale if Redis lost it, and checks the buyer.
    let snapshot = shop.read_sale(conn, sale_id, &[user]).await?;
    if snapshot.holding[0] {
        return Ok(Outcome::AlreadyPurchased {
            order_id: snapshot.orders[0],
        });
    }
    let left: i64 = redis::cmd("DECR")
        .arg(&keys.stock)
        .query_async(conn)
        .await
        .context("DECR")?;
    if left < 0 {
        let () = redis::cmd("INCR")
            .arg(&keys.stock)
            .query_async(conn)
            .await
            .context("INCR back")?;
        shop.sold_out.set(sale_id);
        return Ok(Outcome::SoldOut);
    }
    // The gap: the unit is taken, the buyer not yet recorded.
    shop.hold_pause().await;
    record_take(shop, conn, keys, sale_id, user, Some(left)).await
}
