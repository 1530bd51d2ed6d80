//! `lua`: no lock at all; the whole purchase is one Redis script
//! (`lua/purchase_lua.lua`).
//!
//! What it is: the checks and the writes in one script, which Redis runs
//! alone: nothing can happen between the check and the write, so nothing
//! can oversell. No waiting for a lock, no TTL, no fence.
//!
//! What it costs: nothing here, and that is the lesson. A lock is needed
//! when the decision involves more than one script can see (several Redis
//! hash slots, another database, a remote call); when it all lives in one
//! Redis slot, the script is the lock. `lock` stays the default because it
//! is the article's tool and the general one.
//!
//! The buyers of a sale waiting at once on one instance go in one call of
//! the script (a pass of the sale's lane, `lanes.rs`), as `lock`'s go
//! through the lock together: the script decides them in turn, so a pass
//! of thirty is thirty purchases, each atomic, for one script's and one
//! round trip's cost (docs/bench.md, "`lua` in lanes").

use std::sync::LazyLock;

use anyhow::Context;
use redis::{Script, ScriptInvocation};
use uuid::Uuid;

use super::{LateCommit, Looked, Outcome, Passed, Shop};
use crate::config::RedisDurability;
use crate::domain::{OrderJob, PassIds, UserId};
use crate::failure;
use crate::keys::SaleKeys;
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

/// The script's call for a pass of `jobs` (one sale's: `keys`), its one
/// job to be named `job_id`; `roomed`: the sale has a waiting room.
pub fn invocation<'a>(
    keys: &SaleKeys,
    roomed: bool,
    job_id: Uuid,
    jobs: &[OrderJob],
) -> ScriptInvocation<'a> {
    let mut script = PURCHASE.prepare_invoke();
    script
        .key(&keys.stock)
        .key(&keys.holds)
        .key(&keys.queue.due)
        .key(&keys.queue.jobs)
        .key(&keys.room.admitted)
        .key(&keys.room.bought)
        .key(&keys.voided)
        .arg(&keys.events)
        .arg(u8::from(roomed))
        .arg(job_id.to_string());
    for job in jobs {
        script
            .arg(job.user_id.as_str())
            .arg(job.order_id.to_string())
            .arg(job.to_payload());
    }
    script
}

/// A pass of the sale's lane: `users`' purchases in one script, with its
/// `WAIT` under `replica` in the same round trip
/// (`replicas::run_and_confirm`), whatever it answers: a "sold out" or an
/// "already purchased" read from data a failover could take back is not
/// final either. One outcome per user, in order; found later when the
/// script's answer was lost ([`Passed::Later`]).
pub(super) async fn pass(
    shop: &Shop,
    (keys, mut conn): (SaleKeys, RedisConn),
    sale_id: i64,
    roomed: bool,
    users: &[&UserId],
) -> anyhow::Result<Passed> {
    // Each buyer gets an order id of the pass, used if they win (an id
    // left unused names nothing): the one job the script queues carries
    // the orders taken, named as `lock`'s passes are (`domain::PassIds`).
    let mut ids = PassIds::new(sale_id, shop.store.pass_key().await?);
    let job_id = ids.job_id();
    let jobs: Vec<OrderJob> = users.iter().map(|user| ids.order(user)).collect();
    let durability = shop.store.durability();
    for _ in 0..2 {
        let script = invocation(&keys, roomed, job_id, &jobs);
        let ((status, left, answers), confirmed): ((String, i64, Vec<String>), bool) =
            match replicas::run_and_confirm(&mut conn, &PURCHASE, &script, durability, &keys.waited)
                .await
            {
                Ok(answer) => answer,
                // The script may have run, its answer lost with the
                // connection.
                Err(error) if failure::answer_lost(&error) => {
                    let shop = shop.clone();
                    return Ok(after_a_lost_answer(shop, keys, job_id, jobs, durability));
                }
                Err(error) => return Err(error).context("running the purchase script"),
            };
        if status == "not_loaded" {
            store::load::load_into_redis(shop.store.pg(), &mut conn, shop.store.prefix(), sale_id)
                .await?;
            continue;
        }
        // The script ran: whatever its answer says, each buyer is told
        // what happened, or that it is in doubt, never an error.
        if status != "done" || answers.len() != jobs.len() {
            tracing::error!(
                %status,
                answers = answers.len(),
                buyers = jobs.len(),
                "purchase_lua.lua answered out of shape; its buyers are in doubt"
            );
            return Ok(Passed::Now(jobs.iter().map(in_doubt).collect()));
        }
        let outcomes: Vec<Outcome> = (answers.iter().zip(&jobs))
            .map(|(answer, job)| outcome_of(answer, job))
            .collect();
        // Unconfirmed, no answer a failover could take back.
        if !super::replicated(confirmed) {
            return Ok(Passed::Now(
                outcomes.iter().map(Outcome::unconfirmed).collect(),
            ));
        }
        if left <= 0 {
            shop.sold_out.set(sale_id);
        }
        return Ok(Passed::Now(outcomes));
    }
    anyhow::bail!("sale {sale_id} is not in Redis even after loading it")
}

/// What the script answered for `job`'s buyer (or, after a lost answer,
/// the buyer's hold).
fn outcome_of(answer: &str, job: &OrderJob) -> Outcome {
    match answer {
        "taken" => Outcome::Accepted {
            order_id: job.order_id,
        },
        "sold_out" => Outcome::SoldOut,
        "not_admitted" => Outcome::NotAdmitted,
        // A second run of a call whose job is queued takes nobody new.
        "busy" => Outcome::Busy,
        // In a room a buyer buys once: the admission bought already, and
        // its unit came back (the API answers `403 not_admitted` `used`).
        "spent" => Outcome::AlreadyPurchased { order_id: None },
        // A hold that names no order: the lab's broken strategies write
        // empty ones on the same keys. Still a unit held.
        "" => Outcome::AlreadyPurchased { order_id: None },
        held => match Uuid::parse_str(held) {
            Ok(order_id) => Outcome::AlreadyPurchased {
                order_id: Some(order_id),
            },
            Err(_) => {
                tracing::error!(
                    answer = held,
                    "purchase_lua.lua answered what no buyer can be told"
                );
                in_doubt(job)
            }
        },
    }
}

/// A buyer whose purchase may or may not have been taken: `503` with
/// the id of the order they would have (`GET /api/orders/{id}` tells
/// later what became of it).
fn in_doubt(job: &OrderJob) -> Outcome {
    Outcome::Unconfirmed {
        order_id: Some(job.order_id),
    }
}

/// The pass's script may have run, its answer lost with the connection.
/// There is no lock, so no fence to close: a script not found now may
/// still land (sent to a stalled server, it runs when the server goes
/// on). So the look voids the pass in the step that looks for its job
/// (`Shop::after_a_lost_answer`, `lua/pass_void.lua`): once Redis has
/// answered it, the script takes nobody, whenever it lands, and what the
/// look found is final under `local`. An order found taken is `202`; a buyer
/// found holding another order is told that order (`409`); every other
/// buyer was not taken and is told `busy` (`503`, ask again: they were
/// refused, or the script never ran). A buyer is in doubt only when the
/// look cannot tell within its 3 s (Redis or PostgreSQL does not answer
/// it, or Redis lost the sale and nothing loaded it again), or the holds
/// cannot be read. (Under `replica` the `WAIT` was lost too: whatever a
/// look finds, a failover could take it back, so none is made.) The look
/// is left to a task of its own ([`Passed::Later`]).
fn after_a_lost_answer(
    shop: Shop,
    keys: SaleKeys,
    job_id: Uuid,
    jobs: Vec<OrderJob>,
    durability: RedisDurability,
) -> Passed {
    let doubt: Vec<Outcome> = jobs.iter().map(in_doubt).collect();
    if durability != RedisDurability::Local {
        return Passed::Now(doubt);
    }
    let look = Box::pin(async move {
        let looked = (shop.after_a_lost_answer(job_id, &jobs, LateCommit::Voided)).await;
        let taken = match looked {
            Looked::Taken(taken) => taken,
            Looked::NotTaken => Vec::new(),
            // Maybe not voided (the look had no answer), or Redis had
            // lost the sale: the script's orders may be written yet.
            Looked::Unknown => return jobs.iter().map(in_doubt).collect(),
        };
        // Read once the pass is voided: no late script can change them.
        let held = holds(&shop, &keys, &jobs).await.unwrap_or_else(|error| {
            tracing::warn!(%error, "the holds of a pass whose answer was lost could not be read");
            Vec::new()
        });
        (jobs.iter().enumerate())
            .map(|(i, job)| {
                let own = job.order_id.to_string();
                match held.get(i).cloned() {
                    // Taken: its job is queued, or its hold is in place.
                    _ if taken.contains(&job.order_id) => Outcome::Accepted {
                        order_id: job.order_id,
                    },
                    Some(Some(held)) if held == own => Outcome::Accepted {
                        order_id: job.order_id,
                    },
                    Some(Some(other)) => outcome_of(&other, job),
                    // Holding nothing, and the pass cannot take them now.
                    Some(None) => Outcome::Busy,
                    // The holds could not be read.
                    None => in_doubt(job),
                }
            })
            .collect()
    });
    Passed::Later { look, doubt }
}

/// The order each of `jobs`' buyers holds now, if any.
async fn holds(
    shop: &Shop,
    keys: &SaleKeys,
    jobs: &[OrderJob],
) -> anyhow::Result<Vec<Option<String>>> {
    let mut conn = shop.store.redis().await?;
    let buyers: Vec<&str> = jobs.iter().map(|job| job.user_id.as_str()).collect();
    Ok(redis::cmd("HMGET")
        .arg(&keys.holds)
        .arg(&buyers)
        .query_async(&mut conn)
        .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every answer the script gives becomes what its buyer is told, and
    /// one it cannot give leaves the buyer in doubt with their order id,
    /// never an error for the whole pass (whose other buyers may have
    /// won).
    #[test]
    fn each_answer_is_what_its_buyer_is_told_and_a_stray_one_is_in_doubt() {
        let job = OrderJob {
            order_id: Uuid::now_v7(),
            sale_id: 1,
            user_id: "ann".to_owned(),
        };
        let held = Uuid::now_v7();
        let order_id = job.order_id;
        for (answer, told) in [
            ("taken", Outcome::Accepted { order_id }),
            ("sold_out", Outcome::SoldOut),
            ("not_admitted", Outcome::NotAdmitted),
            ("busy", Outcome::Busy),
            ("spent", Outcome::AlreadyPurchased { order_id: None }),
            ("", Outcome::AlreadyPurchased { order_id: None }),
            (
                &held.to_string(),
                Outcome::AlreadyPurchased {
                    order_id: Some(held),
                },
            ),
            (
                "what?",
                Outcome::Unconfirmed {
                    order_id: Some(order_id),
                },
            ),
        ] {
            assert_eq!(outcome_of(answer, &job), told, "{answer:?}");
        }
    }
}
