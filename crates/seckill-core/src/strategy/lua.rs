//! `lua`: no lock at all; the whole purchase is one Redis script
//! (`lua/purchase_lua.lua`).
//!
//! What it is: the checks and the writes in one script, which Redis runs
//! alone: nothing can happen between the check and the write, so nothing
//! can oversell. One round trip per buyer, no waiting, no TTL, no fence.
//!
//! What it costs: nothing here, and that is the lesson. A lock is needed
//! when the decision involves more than one script can see (several Redis
//! hash slots, another database, a remote call); when it all lives in one
//! Redis slot, the script is the lock. `lock` stays the default because it
//! is the article's tool and the general one.

use std::sync::LazyLock;

use anyhow::Context;
use redis::Script;

use super::{Buy, Outcome};
use crate::domain::OrderJob;
use crate::payment;
use crate::queue::queue_script;
use crate::redis_pool::RedisConn;
use crate::store;

static PURCHASE: LazyLock<Script> = queue_script!("lua/purchase_lua.lua");

/// The purchase script, as this strategy sends it (`seckill bench` runs it
/// under `redis-benchmark` for its baseline).
pub fn script() -> &'static Script {
    &PURCHASE
}

/// One purchase, in one script.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let roomed = buy.roomed;
    let (shop, keys, sale_id, user) = buy.parts();
    let job = OrderJob::new(sale_id, user);
    for _ in 0..2 {
        let (status, left): (String, i64) = PURCHASE
            .key(&keys.stock)
            .key(&keys.buyers)
            .key(&keys.queue.due)
            .key(&keys.queue.jobs)
            .key(&keys.holds)
            .key(&keys.room.admitted)
            .key(&keys.room.bought)
            .key(&keys.room.state)
            .arg(user.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload())
            .arg(&keys.events)
            .arg(u8::from(roomed))
            .invoke_async(conn)
            .await
            .context("running the purchase script")?;
        match status.as_str() {
            "taken" => {
                if left <= 0 {
                    shop.sold_out.set(sale_id);
                }
                shop.note_pending(conn, std::slice::from_ref(&job)).await;
                // With `--redis-durability replica`: the script was this
                // connection's last write, so one `WAIT` covers it (see
                // `replicas.rs`); unconfirmed, no `202` a failover could
                // take back.
                if !super::replicated(conn, shop.store.durability()).await {
                    return Ok(Outcome::Unconfirmed {
                        order_id: Some(job.order_id),
                    });
                }
                return Ok(Outcome::Accepted {
                    order_id: job.order_id,
                });
            }
            "already_purchased" => return Ok(Outcome::AlreadyPurchased),
            "sold_out" => {
                shop.sold_out.set(sale_id);
                return Ok(Outcome::SoldOut);
            }
            "not_loaded" => {
                store::load::load_into_redis(shop.store.pg(), conn, shop.store.prefix(), sale_id)
                    .await?;
            }
            other => return Err(payment::unexpected_answer("purchase_lua.lua", other).into()),
        }
    }
    anyhow::bail!("sale {sale_id} is not in Redis even after loading it")
}
