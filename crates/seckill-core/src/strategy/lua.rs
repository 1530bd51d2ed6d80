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

use super::{Buy, Looked, Outcome};
use crate::config::RedisDurability;
use crate::domain::OrderJob;
use crate::failure;
use crate::payment;
use crate::queue::queue_script;
use crate::redis_pool::RedisConn;
use crate::replicas;
use crate::store;

static PURCHASE: LazyLock<Script> = queue_script!("lua/purchase_lua.lua");

/// The purchase script, as this strategy sends it (`seckill bench` runs it
/// under `redis-benchmark` for its baseline).
pub fn script() -> &'static Script {
    &PURCHASE
}

/// One purchase, in one script, with its `WAIT` under `replica` in the
/// same round trip (`replicas::run_and_confirm`), whatever it answers: a
/// "sold out" or an "already purchased" read from data a failover could
/// take back is not final either.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let roomed = buy.roomed;
    let (shop, keys, sale_id, user) = buy.parts();
    let durability = shop.store.durability();
    let job = OrderJob::new(sale_id, user);
    for _ in 0..2 {
        let mut script = PURCHASE.prepare_invoke();
        script
            .key(&keys.stock)
            .key(&keys.holds)
            .key(&keys.queue.due)
            .key(&keys.queue.jobs)
            .key(&keys.room.admitted)
            .key(&keys.room.bought)
            .arg(user.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload())
            .arg(&keys.events)
            .arg(u8::from(roomed));
        let ((status, left, held), confirmed): ((String, i64, Option<String>), bool) =
            match replicas::run_and_confirm(conn, &PURCHASE, &script, durability, &keys.waited)
                .await
            {
                Ok(answer) => answer,
                // The script may have run, its answer lost with the
                // connection. There is no lock, so no fence to close: a
                // script not found now may still land (sent to a stalled
                // server, it runs when the server goes on). Only an order
                // found taken, under `local`, is final; any other is in
                // doubt and told `503` with its id, never an error
                // without it.
                // (Under `replica` the `WAIT` was lost too: whatever a
                // look finds, the answer is the same, so none is made.)
                Err(error) if failure::answer_lost(&error) => {
                    let in_doubt = Outcome::Unconfirmed {
                        order_id: Some(job.order_id),
                    };
                    if durability != RedisDurability::Local {
                        return Ok(in_doubt);
                    }
                    let looked = shop
                        .after_a_lost_answer(job.order_id, std::slice::from_ref(&job))
                        .await;
                    return Ok(match looked {
                        Looked::Taken(_) => Outcome::Accepted {
                            order_id: job.order_id,
                        },
                        Looked::NotTaken | Looked::Unknown => in_doubt,
                    });
                }
                Err(error) => return Err(error).context("running the purchase script"),
            };
        let outcome = match status.as_str() {
            "taken" => Outcome::Accepted {
                order_id: job.order_id,
            },
            "already_purchased" => Outcome::AlreadyPurchased {
                order_id: held.and_then(|id| uuid::Uuid::parse_str(&id).ok()),
            },
            "sold_out" => Outcome::SoldOut,
            "not_admitted" => Outcome::NotAdmitted,
            "not_loaded" => {
                store::load::load_into_redis(shop.store.pg(), conn, shop.store.prefix(), sale_id)
                    .await?;
                continue;
            }
            other => return Err(payment::unexpected_answer("purchase_lua.lua", other).into()),
        };
        // Unconfirmed, no answer a failover could take back.
        if !super::replicated(conn, durability, keys, Some(confirmed)).await {
            return Ok(outcome.unconfirmed());
        }
        if outcome == Outcome::SoldOut || (status == "taken" && left <= 0) {
            shop.sold_out.set(sale_id);
        }
        return Ok(outcome);
    }
    anyhow::bail!("sale {sale_id} is not in Redis even after loading it")
}
