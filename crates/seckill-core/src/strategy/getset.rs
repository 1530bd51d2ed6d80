//! `getset`: the GETSET takeover lock of a second article of the same kind
//! (`docs/the-article.md`).
//! DELIBERATELY BROKEN.
//!
//! What it is: the lock's value is its expiry time. `SETNX key expiry`
//! takes a free lock. A waiter that finds the stored time already past
//! takes the lock with `GETSET key new-expiry`, and has it only if the old
//! value it got back was past too (so of two waiters racing for an expired
//! lock, one wins). Then `EXPIRE key ttl`; the release DELs the key if it
//! still has a TTL, whoever holds it.
//!
//! What it gets wrong:
//! 1. **Clocks.** "Expired" is judged on each waiter's own clock. An
//!    instance whose clock runs ahead finds live locks expired and takes
//!    them. Knob: `--clock-skew-ms 5000` on one instance: it oversells.
//! 2. **No fence.** A holder paused past the TTL (a GC pause, a page
//!    fault) wakes up and writes, while the next holder writes too. Knob:
//!    `--hold-pause-ms` above the lock's TTL: it oversells.
//! 3. **Two takers.** A waiter that loses the GETSET race has still
//!    written its own expiry into the lock (and GETSET dropped its TTL: the
//!    key may be left with none); and the release deletes the key without
//!    asking whose it is.
//!
//! In the lab, the clock-skew row (one unit) also slows the skewed
//! instance's lock commands (`--redis-delay-ms 100`): an honest holder then
//! takes the lock first, sleeps on what it read (`--hold-pause-ms 2000` on
//! the honest instance), is robbed, and wakes to sell the unit the robber
//! sold meanwhile.

use std::time::Duration;

use anyhow::Context;
use redis::aio::ConnectionLike;

use super::{Buy, Flag, Outcome, Shop, take_unguarded};
use crate::domain::UserId;
use crate::redis_pool::RedisConn;

/// The pause between two tries of a waiter.
const RETRY: Duration = Duration::from_millis(5);

/// One purchase under the GETSET lock.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    match lock(shop, conn, &keys.lock, (sale_id, user)).await? {
        Got::Lock => {}
        Got::TimedOut => return Ok(Outcome::Busy),
        Got::SoldOut => return Ok(Outcome::SoldOut),
    }
    let pause = shop.settings.hold_pause();
    let outcome = take_unguarded(shop, conn, (keys, sale_id), user, pause).await;
    unlock(shop, conn, &keys.lock).await?;
    outcome
}

/// How a wait for the lock ended.
enum Got {
    Lock,
    /// The lock wait passed.
    TimedOut,
    /// This instance learned meanwhile that the sale sold out: waiting on
    /// is pointless (the caller's own check, not part of the lock).
    SoldOut,
}

/// Take the lock, trying until the lock wait has passed.
async fn lock<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    key: &str,
    (sale_id, user): (i64, &UserId),
) -> anyhow::Result<Got> {
    let ttl = shop.settings.lock_ttl();
    let give_up = shop.settings.now_ms() + shop.settings.lock_wait().as_millis() as i64;
    loop {
        let now = shop.settings.now_ms();
        let expiry = now + ttl.as_millis() as i64;
        shop.slow_network().await;
        let taken: bool = redis::cmd("SETNX")
            .arg(key)
            .arg(expiry)
            .query_async(conn)
            .await
            .context("SETNX")?;
        let taken = taken || {
            shop.slow_network().await;
            let stored: Option<i64> = redis::cmd("GET")
                .arg(key)
                .query_async(conn)
                .await
                .context("GET")?;
            // Bug 1: "past" by this instance's clock.
            if stored.is_some_and(|stored| stored < now) {
                shop.slow_network().await;
                let old: Option<i64> = redis::cmd("GETSET")
                    .arg(key)
                    .arg(expiry)
                    .query_async(conn)
                    .await
                    .context("GETSET")?;
                old.is_none_or(|old| old < now)
            } else {
                false
            }
        };
        if taken {
            shop.slow_network().await;
            let _: bool = redis::cmd("PEXPIRE")
                .arg(key)
                .arg(ttl.as_millis() as u64)
                .query_async(conn)
                .await
                .context("PEXPIRE")?;
            return Ok(Got::Lock);
        }
        if shop.settings.now_ms() > give_up {
            return Ok(Got::TimedOut);
        }
        if shop.sold_out_for(sale_id, &[user]) == Flag::SoldOut {
            return Ok(Got::SoldOut);
        }
        tokio::time::sleep(RETRY).await;
    }
}

/// "If the lock has not expired, delete it" (bug 3: whoever holds it).
async fn unlock<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    key: &str,
) -> anyhow::Result<()> {
    shop.slow_network().await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .context("PTTL")?;
    if ttl > 0 {
        shop.slow_network().await;
        let () = redis::cmd("DEL")
            .arg(key)
            .query_async(conn)
            .await
            .context("DEL")?;
    }
    Ok(())
}
