//! The Redis lock: the article's `RedisLock`, every method of it, with its bugs fixed.
//!
//! A lock is one Redis key holding the name of its holder, with a time to live.
//! Taking it, releasing it and extending it are each one Lua script (in
//! `lua/lock_*.lua`), because each is a check followed by a write, and a
//! check and a write sent as two commands can be interleaved with another
//! client's.
//!
//! The article's methods, and where each one is here:
//! - `lock(name, wait, ttl)` is [`RedisLock::acquire`] (or one attempt,
//!   [`RedisLock::try_acquire`]); the TTL is the lock's, set by [`RedisLock::new`].
//! - `unlock(name)` is [`LockGuard::release`].
//! - `expire(name, ttl)` is [`LockGuard::extend`]: the same owner check, under
//!   the name of what it does.
//! - `isLocking(name)` is [`LockGuard::is_held`].
//! - `unlockAll()` is [`HeldLocks::release_all`] (in `lock/held.rs`): the
//!   article's `$lockedNames`, as a value its owner keeps, not a global.
//!
//! What this module fixes, compared with the article:
//! - **SETNX then EXPIRE** were two steps; a crash between them left a lock
//!   that never expired. Here the key is set with its TTL in one `SET ... PX`.
//! - **unlock deleted without checking the owner**; a holder whose lock had
//!   expired would delete its successor's lock. Here release compares the
//!   holder's value first and says what it found: [`Release::Released`],
//!   [`Release::Expired`] or [`Release::NotOwner`]. `unlockAll` and `expire`
//!   went through the same broken check; here they use the same fixed one.
//! - **isLocking assigned instead of comparing** (`=` for `==`), and what it
//!   meant to compare was the expiry time, which two holders can share. It
//!   said "yes" whenever anybody held the lock. Here [`LockGuard::is_held`]
//!   compares the whole value, which carries a nonce of this acquisition.
//! - **waiting polled every 100 ms** forever-ish; here every release is
//!   announced on the lock's channel (`keys::lock_released`), and a waiter
//!   given the announcements ([`RedisLock::acquire`]'s `released`) tries
//!   again the moment one comes, as Redisson's lock does. Between
//!   announcements (one may be lost: pub/sub keeps nothing) it backs off
//!   exponentially with jitter, so waiters do not retry in lock-step, and
//!   gives up at a deadline.
//! - **nothing was fair**: the article's lock goes to whoever asks first
//!   after a release, which is the holder's own next request far more
//!   often than anybody else's. Here the first waiter who finds the lock
//!   held takes the place next in line (`keys::lock_line`), and a released
//!   lock goes to it first (`lua/lock_acquire.lua` says why one place is
//!   enough).
//!
//! Every acquisition also gets a **fencing token**: a number from a counter
//! that only grows. A lock with a TTL can expire while its holder still
//! believes it holds it (a long pause); the token lets whatever the holder
//! writes to check that it is still the current holder (see
//! `lua/purchase_commit.lua`).
//!
//! Nothing is released in `Drop`: a destructor cannot await, and blocking the
//! executor there would stall every other request on the thread. A guard that
//! is dropped without [`LockGuard::release`] simply expires with its TTL, the
//! same as a holder that crashed.

mod held;
mod wait;

pub use held::{HeldLocks, Unlocked};
pub use wait::PLACE_KEPT;

use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{FromRedisValue, Script, ScriptInvocation, ServerErrorKind, Value};

use crate::keys;
use crate::redis_pool::RedisPool;
use crate::scripts;

static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lock_acquire.lua")));
static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lock_release.lua")));
/// Sent whole ([`RedisLock::abandon_cmd`]).
const ABANDON: &str = include_str!("lua/lock_abandon.lua");
/// How long an abandon is sent again, in the background, until Redis
/// answers it: past that, a late attempt's lock is left to its TTL.
const ABANDON_RETRIED: Duration = Duration::from_secs(30);
/// How many abandons a process sends again at once (`RedisLock::abandon`).
const ABANDONS_AT_ONCE: usize = 4;
static ABANDONS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(ABANDONS_AT_ONCE);
/// How long an abandoned attempt's mark is kept (`keys::lock_abandoned`):
/// an attempt held up on its way longer than this is no longer refused,
/// and holds the lock for its TTL.
const ABANDONED_KEPT: Duration = Duration::from_secs(60);
static EXTEND: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("lua/lock_extend.lua")));

/// A named lock in Redis. Cheap to build; holds no connection.
#[derive(Clone)]
pub struct RedisLock {
    /// The key that exists while the lock is held.
    key: String,
    /// Who takes it, written into the key's value so that an operator (or
    /// the chaos run) can see which instance holds it; empty if unnamed.
    holder: String,
    /// The counter the fencing tokens come from.
    fence_key: String,
    /// How long a holder keeps the lock if it never releases it (it crashed).
    ttl: Duration,
    /// Where the abandon of an attempt whose answer was lost is sent
    /// again, until Redis answers it ([`RedisLock::abandons_through`]).
    pool: Option<RedisPool>,
}

/// Proof of holding a lock, returned by [`RedisLock::try_acquire`].
#[must_use = "a lock that is never released blocks everyone until its TTL runs out"]
#[derive(Debug)]
pub struct LockGuard {
    key: String,
    /// What the lock key holds while we own it:
    /// `"<token>:<holder>:<nonce>"` (see [`holder_in`]).
    value: String,
    fence: u64,
}

/// What release or extend found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// We held the lock, and the operation was done.
    Released,
    /// The lock had already expired; nobody holds it.
    Expired,
    /// The lock expired and somebody else holds it now; it was left alone.
    NotOwner,
}

/// The result of waiting for a lock.
#[derive(Debug)]
pub enum Acquire {
    Held(LockGuard),
    /// The deadline passed while somebody else held the lock.
    TimedOut,
    /// The caller's `give_up` check said waiting was pointless.
    GaveUp,
}

impl RedisLock {
    pub fn new(key: impl Into<String>, fence_key: impl Into<String>, ttl: Duration) -> Self {
        Self {
            key: key.into(),
            holder: String::new(),
            fence_key: fence_key.into(),
            ttl,
            pool: None,
        }
    }

    /// Send the abandon of an attempt whose answer was lost again on
    /// connections from `pool`, until Redis answers it
    /// ([`RedisLock::abandon`]). Without a pool it goes out once, on the
    /// attempt's own connection, and a connection that broke leaves a late
    /// attempt's lock to its TTL.
    pub fn abandons_through(mut self, pool: &RedisPool) -> Self {
        self.pool = Some(pool.clone());
        self
    }

    /// Name who takes the lock (an instance id). It is only a label: each
    /// acquisition still gets its own nonce, and release and extend compare
    /// the whole value.
    pub fn held_by(mut self, holder: impl Into<String>) -> Self {
        self.holder = holder.into();
        self
    }

    /// One attempt: the lock if it is free now (and nobody is next in line
    /// for it), `None` if not.
    pub async fn try_acquire<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> redis::RedisResult<Option<LockGuard>> {
        let taken = self.attempt::<_, ()>(conn, "", &redis::pipe()).await?;
        Ok(taken.map(|(guard, ())| guard))
    }

    /// One attempt as the waiter `place` (`""`: a single attempt, which asks
    /// for no place in line), with `reads` sent after it in the same round
    /// trip: the guard and their answers if it took the lock. If the reads
    /// failed, the lock is released and their error returned.
    async fn attempt<C: ConnectionLike + Send, T: FromRedisValue>(
        &self,
        conn: &mut C,
        place: &str,
        reads: &redis::Pipeline,
    ) -> redis::RedisResult<Option<(LockGuard, T)>> {
        let nonce = format!("{}:{}", self.holder, uuid::Uuid::new_v4().simple());
        // The script by its hash (EVALSHA), in a pipeline with the reads.
        // Redis runs a connection's commands in the order they were sent,
        // so when the script took the lock, the reads ran while it was held.
        // Errors come back one per command: a read that failed must not
        // hide that the script took the lock.
        let mut invocation = ACQUIRE.prepare_invoke();
        invocation
            .key(&self.key)
            .key(&self.fence_key)
            .key(keys::lock_line(&self.key))
            .key(keys::lock_abandoned(&self.key, &nonce))
            .arg(ttl_millis(self.ttl))
            .arg(&nonce)
            .arg(place)
            .arg(ttl_millis(PLACE_KEPT));
        let with_reads = |load| {
            let mut pipe = scripts::call(&ACQUIRE, &invocation, load);
            for read in reads.cmd_iter() {
                pipe.add_command(read.clone());
            }
            pipe
        };
        let mut answers: Vec<Value> = self.sent(conn, &with_reads(false), &nonce).await?;
        if let Some(Value::ServerError(error)) = answers.first()
            && error.kind() == Some(ServerErrorKind::NoScript)
        {
            // A server that does not have the script yet (it restarted):
            // the script did not run; send it all again behind the
            // script's load, on the same node (`scripts.rs`).
            answers = self.sent(conn, &with_reads(true), &nonce).await?;
        }
        let mut answers = answers.into_iter();
        let taken = answers.next().unwrap_or(Value::Nil).extract_error()?;
        let Some(fence) = Option::<u64>::from_redis_value(taken)? else {
            return Ok(None);
        };
        let guard = LockGuard {
            key: self.key.clone(),
            value: format!("{fence}:{nonce}"),
            fence,
        };
        let read = Value::Array(answers.collect())
            .extract_error()
            .and_then(|read| Ok(T::from_redis_value(read)?));
        match read {
            Ok(read) => Ok(Some((guard, read))),
            // The lock is ours, and the caller gets no guard to release it
            // with: release it here, or it stands held until its TTL ends.
            Err(error) => {
                let _ = guard.release(conn).await;
                Err(error)
            }
        }
    }
}

impl RedisLock {
    /// `pipe`, the attempt of `nonce` and its reads, sent; abandoned
    /// ([`RedisLock::abandon`]) if its answer was lost.
    async fn sent<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        pipe: &redis::Pipeline,
        nonce: &str,
    ) -> redis::RedisResult<Vec<Value>> {
        let sent = pipe.query_async(conn).await;
        if let Err(error) = &sent
            && crate::failure::answer_lost(error)
        {
            self.abandon(conn, nonce).await;
        }
        sent
    }

    /// An attempt whose answer was lost may still run (sent into a stalled
    /// server, it runs when the server goes on) and take the lock for a
    /// caller that gave up: name it abandoned, and delete the lock if it
    /// took it (`lua/lock_abandon.lua`, which says why either order of the
    /// two is safe).
    ///
    /// First on the attempt's own connection, without waiting for the
    /// answer (`set_no_response`): the redis crate's connection reads that
    /// answer and drops it. The race this prevents: a request whose caller
    /// stopped waiting before the connection's task wrote it is never
    /// written (redis 1.8, `PipelineSink::start_send` skips a request
    /// whose receiver is closed), so an abandon awaited past the response
    /// timeout, on a connection busy enough that its task had not yet
    /// written it, was dropped. And the pass's buyers are told at once,
    /// not a second response timeout later.
    ///
    /// That send reaches Redis only while the connection lives: one that
    /// broke fails it, and a cluster client refreshing its slot map hands
    /// nothing on and drops what its caller gave up on. So, given a pool
    /// ([`RedisLock::abandons_through`]), the abandon is sent again in
    /// the background on a connection from it, its answer awaited, and
    /// sent again after a pause until Redis answers, for at most
    /// [`ABANDON_RETRIED`]: always, since a send handed to a connection
    /// says nothing of whether it reached Redis. At most
    /// [`ABANDONS_AT_ONCE`] sends at a time in a process, each taking its
    /// turn for one send, not for its retries: a long outage that loses
    /// many answers does not take the pool's connections from the buyers,
    /// nor hold up the abandons meant for a Redis that answers.
    async fn abandon<C: ConnectionLike + Send>(&self, conn: &mut C, nonce: &str) {
        let mut abandon = self.abandon_cmd(nonce);
        abandon.set_no_response(true);
        if let Err(error) = conn.req_packed_command(&abandon).await {
            tracing::debug!(%error, "a lost lock attempt not abandoned on its own connection");
        }
        let Some(pool) = self.pool.clone() else {
            return;
        };
        let abandon = self.abandon_cmd(nonce);
        tokio::spawn(async move {
            let started = tokio::time::Instant::now();
            for failures in 1u32.. {
                let sent = {
                    // A turn for this one send: a Redis that does not
                    // answer holds a turn one send long, not its retries.
                    let Ok(_turn) = ABANDONS.acquire().await else {
                        return;
                    };
                    match pool.get().await {
                        Ok(mut conn) => conn.req_packed_command(&abandon).await.map(drop),
                        Err(error) => Err(redis::RedisError::from((
                            redis::ErrorKind::Io,
                            "no connection",
                            error.to_string(),
                        ))),
                    }
                };
                let Err(error) = sent else {
                    return;
                };
                if started.elapsed() >= ABANDON_RETRIED {
                    tracing::warn!(%error, "a lost lock attempt not abandoned; its TTL ends it");
                    return;
                }
                tokio::time::sleep(crate::backoff::after(failures)).await;
            }
        });
    }

    /// The abandon of the attempt `nonce` (`lua/lock_abandon.lua`). Sent
    /// whole (`EVAL`), never by its hash: it goes into a server that may
    /// never have run it, and a `NOSCRIPT` then would come back to a
    /// caller that no longer waits, and send nothing again.
    fn abandon_cmd(&self, nonce: &str) -> redis::Cmd {
        let mut abandon = redis::cmd("EVAL");
        abandon
            .arg(ABANDON)
            .arg(2)
            .arg(&self.key)
            .arg(keys::lock_abandoned(&self.key, nonce))
            .arg(nonce)
            .arg(keys::lock_released(&self.key))
            .arg(ttl_millis(ABANDONED_KEPT));
        abandon
    }
}

impl LockGuard {
    /// The fencing token: larger than the token of every earlier holder.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// What the lock key holds while this guard owns it.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The lock key this guard is for.
    pub(crate) fn key(&self) -> &str {
        &self.key
    }

    /// The channel its release is announced on (`keys::lock_released`).
    pub fn released_channel(&self) -> String {
        keys::lock_released(&self.key)
    }

    /// Does this guard still own the lock? The article's `isLocking`.
    ///
    /// One `GET`, compared with our whole value (token, holder and nonce): a
    /// later holder with the same name still has another nonce, so its lock
    /// is never mistaken for ours.
    ///
    /// The answer is a snapshot, not a promise: the TTL can run out, and
    /// somebody else take the lock, the moment after Redis answered `true`.
    /// Do not check this and then write as if it still held; a write that
    /// must happen only under the lock checks the lock itself, in the same
    /// step (the fence: `lua/purchase_commit.lua`). A `false`, on the other
    /// hand, is final: a lost lock never comes back to this guard, so it is
    /// a safe reason to stop early.
    #[doc(alias = "isLocking")]
    pub async fn is_held<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> redis::RedisResult<bool> {
        let current: Option<String> = redis::cmd("GET").arg(&self.key).query_async(conn).await?;
        Ok(current.as_deref() == Some(self.value.as_str()))
    }

    /// Release the lock if we still hold it. Consumes the guard either way.
    /// The article's `unlock`.
    #[doc(alias = "unlock")]
    pub async fn release<C: ConnectionLike + Send>(
        self,
        conn: &mut C,
    ) -> redis::RedisResult<Release> {
        self.compare_and_delete(conn).await
    }

    /// What [`LockGuard::release`] does, keeping the guard: [`HeldLocks`]
    /// keeps a guard whose release failed on the way to Redis, to try again.
    pub(crate) async fn compare_and_delete<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> redis::RedisResult<Release> {
        let (script, call) = self.release_call();
        let found: i64 = scripts::run(conn, script, &call).await?;
        Ok(Release::from_script(found))
    }

    /// The release script (`lua/lock_release.lua`) and its call on this
    /// lock, for a caller that sends it with more behind it (a `WAIT`:
    /// `strategy/under_lock.rs`).
    pub(crate) fn release_call(&self) -> (&'static Script, ScriptInvocation<'static>) {
        let mut call = RELEASE.prepare_invoke();
        call.key(&self.key)
            .arg(&self.value)
            .arg(self.released_channel());
        (&RELEASE, call)
    }

    /// Push the lock's expiry to `ttl` from now, if we still hold it. The
    /// article's `expire`, which extended whoever's lock had the name.
    #[doc(alias = "expire")]
    pub async fn extend<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ttl: Duration,
    ) -> redis::RedisResult<Release> {
        let mut call = EXTEND.prepare_invoke();
        call.key(&self.key).arg(&self.value).arg(ttl_millis(ttl));
        let found: i64 = scripts::run(conn, &EXTEND, &call).await?;
        Ok(Release::from_script(found))
    }
}

impl Release {
    pub(crate) fn from_script(found: i64) -> Self {
        match found {
            1 => Release::Released,
            0 => Release::Expired,
            _ => Release::NotOwner,
        }
    }
}

/// The holder named in a lock key's value (`"<token>:<holder>:<nonce>"`),
/// or `None` if the value is not a lock's or names nobody.
pub fn holder_in(value: &str) -> Option<&str> {
    let (rest, _nonce) = value.rsplit_once(':')?;
    let (_token, holder) = rest.split_once(':')?;
    (!holder.is_empty()).then_some(holder)
}

/// The fencing token in a lock key's value (`"<token>:<holder>:<nonce>"`),
/// or `None` if the value is not a lock's.
pub fn fence_in(value: &str) -> Option<u64> {
    holder_in(value)?;
    value.split_once(':')?.0.parse().ok()
}

/// Redis rejects a PX of 0, so the shortest TTL is one millisecond.
fn ttl_millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_holder_is_read_back_from_the_value() {
        assert_eq!(holder_in("17:app-2:3f9a"), Some("app-2"));
        assert_eq!(holder_in("17:127.0.0.1:8080:3f9a"), Some("127.0.0.1:8080"));
        assert_eq!(holder_in("17::3f9a"), None);
        assert_eq!(holder_in("garbage"), None);
    }

    #[test]
    fn the_fence_is_read_back_from_the_value() {
        assert_eq!(fence_in("17:app-2:3f9a"), Some(17));
        assert_eq!(fence_in("17:127.0.0.1:8080:3f9a"), Some(17));
        assert_eq!(fence_in("x:app-2:3f9a"), None);
        assert_eq!(fence_in("17::3f9a"), None);
        assert_eq!(fence_in("garbage"), None);
    }

    #[test]
    fn ttl_is_never_zero() {
        assert_eq!(ttl_millis(Duration::ZERO), 1);
        assert_eq!(ttl_millis(Duration::from_millis(1500)), 1500);
    }
}
