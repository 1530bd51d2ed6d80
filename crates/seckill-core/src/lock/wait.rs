//! Waiting for a lock (the article's `lock($name, $timeout, $expire)`):
//! woken by the release's announcement, backing off in between, keeping one
//! place in line. The one attempt it repeats is `RedisLock::attempt`.

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Acquire, RedisLock};
use crate::keys;
use crate::scripts;

static LEAVE_LINE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("../lua/lock_leave_line.lua")));

/// The first pause of a waiter, before it doubles.
const BACKOFF_BASE: Duration = Duration::from_millis(1);
/// The longest pause of a waiter between two attempts.
const BACKOFF_CAP: Duration = Duration::from_millis(32);
/// How long a waiter's place next in line is kept without the waiter
/// coming back for it: a waiter that keeps waiting comes back at least
/// every [`BACKOFF_CAP`], and one that stops waiting gives its place back,
/// so this lapses only for a waiter that died, which holds the lock back
/// this long at most.
pub const PLACE_KEPT: Duration = Duration::from_millis(128);

impl RedisLock {
    /// Try until `wait` has passed. The article's `lock(name, wait, ttl)`.
    ///
    /// Between attempts the waiter sleeps until `released` is notified (the
    /// caller notifies it when the lock's release is announced on
    /// `keys::lock_released`; `events.rs` does, for the sale locks) or its
    /// back-off pause ends, whichever comes first. With `released`, its
    /// attempts keep one place in line (see `lua/lock_acquire.lua`); without
    /// it, it only backs off, and asks for no place.
    ///
    /// `give_up` is asked before every attempt; when it returns true the wait
    /// ends with [`Acquire::GaveUp`]. The purchase path uses it to stop waiting
    /// as soon as another request found the sale sold out.
    #[doc(alias = "lock")]
    pub async fn acquire<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        wait: Duration,
        released: Option<&Notify>,
        give_up: impl FnMut() -> bool,
    ) -> redis::RedisResult<Acquire> {
        let (acquired, _) = self
            .acquire_and_read::<_, ()>(conn, wait, released, give_up, &redis::pipe())
            .await?;
        Ok(acquired)
    }

    /// [`acquire`](Self::acquire), with `reads` sent after every attempt in
    /// the same round trip; their answers come with the lock (`Some` only
    /// with [`Acquire::Held`]). They ran while the lock was held, so what
    /// they read stays true until the holder writes, and the holder saves
    /// the round trip it would spend reading after it took the lock. An
    /// attempt refused has read for nothing: reads are cheap, a round trip
    /// inside the lock is not.
    pub async fn acquire_and_read<C: ConnectionLike + Send, T: FromRedisValue>(
        &self,
        conn: &mut C,
        wait: Duration,
        released: Option<&Notify>,
        mut give_up: impl FnMut() -> bool,
        reads: &redis::Pipeline,
    ) -> redis::RedisResult<(Acquire, Option<T>)> {
        let deadline = Instant::now() + wait;
        // Only a waiter that will hear of the release asks for a place in
        // line: a free lock kept for one that sleeps out its back-off would
        // stand idle while everybody else is refused.
        let never = Notify::new();
        let (released, place) = match released {
            Some(released) => (
                released,
                format!("{}:{}", self.holder, uuid::Uuid::new_v4().simple()),
            ),
            None => (&never, String::new()),
        };
        for attempt in 0u32.. {
            if give_up() {
                self.leave_line(conn, &place).await;
                return Ok((Acquire::GaveUp, None));
            }
            // Listen before asking. The race this prevents is the lost
            // wake-up: a release announced after Redis refused this attempt
            // but before the sleep below began would wake nobody, and the
            // waiter would sleep out its whole pause beside a free lock.
            // An enabled `Notified` catches every notification from here on.
            let woken = released.notified();
            tokio::pin!(woken);
            woken.as_mut().enable();
            if let Some((guard, read)) = self.attempt(conn, &place, reads).await? {
                return Ok((Acquire::Held(guard), Some(read)));
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            // Sleep, but never past the deadline: one last attempt happens at it.
            let pause = backoff(attempt).min(deadline - now);
            tokio::select! {
                () = woken => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        self.leave_line(conn, &place).await;
        Ok((Acquire::TimedOut, None))
    }

    /// A waiter that stops waiting without the lock gives its place in
    /// line back, if it has one (`lua/lock_leave_line.lua`). A failure only
    /// means that the place lapses by itself, [`PLACE_KEPT`] later.
    async fn leave_line<C: ConnectionLike + Send>(&self, conn: &mut C, place: &str) {
        if place.is_empty() {
            return;
        }
        let _: redis::RedisResult<i64> = scripts::run(
            conn,
            &LEAVE_LINE,
            LEAVE_LINE.key(keys::lock_line(&self.key)).arg(place),
        )
        .await;
    }
}

/// The pause after failed attempt number `attempt` (0-based): exponential
/// growth capped at [`BACKOFF_CAP`], with "equal jitter": half of it fixed,
/// half random. The random half keeps waiters that failed together from
/// retrying together; the fixed half keeps a waiter from spinning.
fn backoff(attempt: u32) -> Duration {
    let ceiling = BACKOFF_BASE
        .saturating_mul(1u32 << attempt.min(16))
        .min(BACKOFF_CAP);
    let half = ceiling / 2;
    let jitter_micros = fastrand::u64(0..=u64::try_from(half.as_micros()).unwrap_or(0));
    half + Duration::from_micros(jitter_micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_stays_within_the_cap() {
        for attempt in 0..40 {
            let pause = backoff(attempt);
            let ceiling = BACKOFF_BASE
                .saturating_mul(1u32 << attempt.min(16))
                .min(BACKOFF_CAP);
            assert!(
                pause >= ceiling / 2,
                "attempt {attempt}: {pause:?} too short"
            );
            assert!(pause <= ceiling, "attempt {attempt}: {pause:?} too long");
        }
        assert!(backoff(30) <= BACKOFF_CAP);
    }

    #[test]
    fn backoff_is_jittered() {
        let pauses: std::collections::HashSet<Duration> = (0..50).map(|_| backoff(10)).collect();
        assert!(pauses.len() > 1, "fifty waiters would retry in lock-step");
    }
}
