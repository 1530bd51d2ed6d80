//! `getset`: the GETSET takeover lock of the second article
//! (`../shared/seeds/003_b1e2e2220a905781.txt`, lines 100-140).
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
//! In the lab, the clock-skew row also slows the skewed instance's lock
//! commands (`--redis-delay-ms 20`): an honest holder then takes the lock
//! first, sleeps on what it read (`--hold-pause-ms 200` on the honest
//! instance), is robbed, and wakes to sell a unit the robber sold
//! meanwhile.

use std::time::Duration;

use anyhow::Context;
use redis::aio::ConnectionLike;

use super::{Buy, Outcome, Shop, take_unguarded};

/// The pause between two tries of a waiter.
const RETRY: Duration = Duration::from_millis(5);

/// One purchase under the GETSET lock.
pub async fn purchase<C: ConnectionLike + Send>(
    buy: Buy<'_>,
    conn: &mut C,
) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    if !lock(shop, conn, &keys.lock).await? {
        return Ok(Outcome::Busy);
    }
    let pause = shop.settings.hold_pause();
    let outcome = take_unguarded(shop, conn, (keys, sale_id), user, pause).await;
    unlock(shop, conn, &keys.lock).await?;
    outcome
}

/// Take the lock, trying until the lock wait has passed.
async fn lock<C: ConnectionLike + Send>(
    shop: &Shop,
    conn: &mut C,
    key: &str,
) -> anyhow::Result<bool> {
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
            return Ok(true);
        }
        if shop.settings.now_ms() > give_up {
            return Ok(false);
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
