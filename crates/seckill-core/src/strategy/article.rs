//! `article`: the article's `RedisLock`, exactly as written, bugs included.
//! DELIBERATELY BROKEN.
//!
//! What it is: `lock($name, $timeout, $expire, $waitIntervalUs)`,
//! `unlock($name)` and `isLocking($name)` from the article this project
//! grew from (`docs/the-article.md` describes it in our words),
//! translated line for line, around the same critical section its callers
//! run (read the stock, check, decrement, record the buyer, queue the
//! order: [`take_unguarded`]). Each bug, where it is in the article, and
//! what makes it happen here:
//!
//! 1. **SETNX, then EXPIRE, as two commands.** A process that dies
//!    between them leaves a lock with no TTL. Knob: `--crash-after-setnx` kills the process right there.
//! 2. **EXPIRE given the expiry timestamp as if it were a TTL**
//!    (`expire($redisKey, $expireAt)` with `$expireAt = time() + $expire`).
//!    The lock lives for about 56 years instead of 15 seconds: a holder that
//!    crashes inside its critical section blocks the sale for good.
//! 3. **"TTL < 0 means its holder crashed: take it."** A live holder caught between its SETNX and its EXPIRE also has no TTL,
//!    and is robbed: two holders. The takeover also sets no TTL, so every
//!    later arrival robs the robber too. Knob: `--hold-pause-ms 200` pauses
//!    the holder right there, between SETNX and EXPIRE (and again inside
//!    its critical section, between its read and its write, as for the
//!    other locks): the robbers read the stock while it sleeps, and the
//!    sale oversells.
//!    (`--redis-delay-ms 20`, a slow network, opens the same gap, by chance.)
//! 4. **`isLocking` assigns (`=`) where it meant to compare (`==`)**:
//!    it answers "yes" whenever anyone holds the key.
//! 5. **`unlock` trusts it and DELs the key**: a robbed holder
//!    deletes the thief's lock on its way out, letting a third one in. The
//!    lock's value is a time, not an owner, so nothing could tell anyway.
//! 6. **Polling every 100 ms** (`$waitIntervalUs = 100000`): under
//!    load, waiters sleep through most free moments of the lock.
//! 7. **No fence on the writes**: whoever believes it holds the lock writes.

use std::time::Duration;

use anyhow::Context;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use redis::aio::ConnectionLike;

use super::{Buy, Outcome, Shop, take_unguarded};
use crate::redis_pool::RedisConn;

/// The article's `$waitIntervalUs = 100000`.
const WAIT_INTERVAL: Duration = Duration::from_millis(100);

/// Under `--crash-after-setnx`, one SETNX at a time in this process, and
/// the one that takes the lock dies holding this gate.
///
/// The race it prevents: the crash is to leave the lock with no TTL. But
/// from the moment Redis runs the crashing SETNX, this process' other
/// buyers find the key with no TTL, take it over (bug 3), sell, and delete
/// it on their way out (bug 5); if one of them got that far before the
/// crash, the crash would leave no trace. (A CI run of the lab's crash row
/// sold 10 units so, when the crash was `std::process::exit`, whose
/// clean-up runs while the other threads go on serving.) Behind the gate
/// no other SETNX is sent before the process is dead, so none of them
/// ever sees the key.
static CRASH_GATE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// `--crash-after-setnx`: die at once, every thread with it, as a power cut
/// or `kill -9` would.
fn crash_now() -> ! {
    eprintln!("seckill: --crash-after-setnx: killed between SETNX and EXPIRE");
    let _ = kill(Pid::this(), Signal::SIGKILL);
    // Reached only where this process cannot be sent SIGKILL by itself:
    // as PID 1 of a container (the kernel ignores it there).
    std::process::abort()
}

/// One purchase under the article's lock.
pub(crate) async fn purchase(buy: Buy<'_>, conn: &mut RedisConn) -> anyhow::Result<Outcome> {
    let (shop, keys, sale_id, user) = buy.parts();
    let lock = ArticleLock {
        shop,
        key: &keys.lock,
    };
    let expire_secs = shop.settings.lock_ttl().as_secs().max(1);
    let Some(expire_at) = lock
        .lock(conn, shop.settings.lock_wait(), expire_secs)
        .await?
    else {
        return Ok(Outcome::Busy);
    };
    let pause = shop.settings.hold_pause();
    let outcome = take_unguarded(shop, conn, (keys, sale_id), user, pause).await;
    lock.unlock(conn, expire_at).await?;
    outcome
}

/// The article's lock on one key. Its "lockedNames" array is this
/// request's knowledge of the time it stored (`expire_at`).
struct ArticleLock<'a> {
    shop: &'a Shop,
    key: &'a str,
}

impl ArticleLock<'_> {
    /// `lock($name, $timeout, $expire)`: the expiry time stored, if taken.
    async fn lock<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        timeout: Duration,
        expire_secs: u64,
    ) -> anyhow::Result<Option<i64>> {
        let now = self.shop.settings.now_ms() / 1000;
        let timeout_at = self.shop.settings.now_ms() + timeout.as_millis() as i64;
        let expire_at = now + expire_secs as i64;
        loop {
            self.shop.slow_network().await;
            let crash = self.shop.settings.crash_after_setnx;
            let gate = if crash {
                Some(CRASH_GATE.lock().await)
            } else {
                None
            };
            let taken: bool = redis::cmd("SETNX")
                .arg(self.key)
                .arg(expire_at)
                .query_async(conn)
                .await
                .context("SETNX")?;
            if taken && crash {
                // Bug 1, on demand: the process dies before its EXPIRE.
                crash_now();
            }
            drop(gate);
            if taken {
                // The hold-pause knob: a GC pause at the worst moment, with
                // the lock taken and no TTL on it yet (bug 3's window).
                self.shop.hold_pause().await;
                self.shop.slow_network().await;
                // Bug 2: a timestamp where a number of seconds belongs.
                let _: bool = redis::cmd("EXPIRE")
                    .arg(self.key)
                    .arg(expire_at)
                    .query_async(conn)
                    .await
                    .context("EXPIRE")?;
                return Ok(Some(expire_at));
            }
            self.shop.slow_network().await;
            let ttl: i64 = redis::cmd("TTL")
                .arg(self.key)
                .query_async(conn)
                .await
                .context("TTL")?;
            // Bug 3: "no TTL" is also a live holder between its two steps.
            if ttl < 0 {
                self.shop.slow_network().await;
                let () = redis::cmd("SET")
                    .arg(self.key)
                    .arg(expire_at)
                    .query_async(conn)
                    .await
                    .context("SET")?;
                return Ok(Some(expire_at));
            }
            if timeout.is_zero() || self.shop.settings.now_ms() > timeout_at {
                return Ok(None);
            }
            // Bug 6: a fixed 100 ms nap.
            tokio::time::sleep(WAIT_INTERVAL).await;
        }
    }

    /// `unlock($name)`: `isLocking`, then DEL.
    async fn unlock<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        expire_at: i64,
    ) -> anyhow::Result<bool> {
        if self.is_locking(conn, expire_at).await? {
            self.shop.slow_network().await;
            // Bug 5: whoever holds it now, it is deleted.
            let deleted: i64 = redis::cmd("DEL")
                .arg(self.key)
                .query_async(conn)
                .await
                .context("DEL")?;
            return Ok(deleted == 1);
        }
        Ok(false)
    }

    /// `isLocking($name)`: `return (string)$this->lockedNames[$name] =
    /// (string)$this->redisString->get("Lock:$name");`. Bug 4: the
    /// assignment's value is whatever the key holds, so this is "does
    /// anyone hold it", never "do we".
    async fn is_locking<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        _ours: i64,
    ) -> anyhow::Result<bool> {
        self.shop.slow_network().await;
        let held: Option<String> = redis::cmd("GET")
            .arg(self.key)
            .query_async(conn)
            .await
            .context("GET")?;
        Ok(held.is_some_and(|value| !value.is_empty()))
    }
}
