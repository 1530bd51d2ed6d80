//! The pool's check of a connection it hands out, made cheap when it can
//! be.
//!
//! deadpool-redis checks every connection each time it is taken from the
//! pool: it sends `UNWATCH` and `PING` and waits for the answer. That is one
//! round trip more for every purchase, whose own work is one script: the
//! `lua` strategy's accepted purchases/s rose from about 11,500 to 13,900
//! (three alternated pairs of `seckill bench --only accepted`) without it.
//!
//! Here a connection that answered within the last [`TRUSTED_FOR`] is
//! handed out unchecked, as HikariCP does for SQL connections
//! (`aliveBypassWindowMs`, 500 ms): under load every connection answers
//! all the time, and none is checked. One that has been idle longer is
//! checked as before. One on which a command failed without the server's
//! answer (its socket failed or closed, a reply timed out or could not be
//! read) is dropped when it comes back, never handed out again; and since
//! that is what every connection sees when Redis goes away, every
//! connection of the process that last answered before that failure is
//! checked again before it is trusted (a restarted Redis has closed them
//! all, and the first to find out tells the rest).
//!
//! What this gives up: if Redis restarts within [`TRUSTED_FOR`] of a
//! connection's last answer and no connection of the process noticed, the
//! first command to notice fails (its buyer gets the `503` of a Redis that
//! cannot be reached) where the check would have replaced the connection
//! unseen. `UNWATCH` is not needed: nothing here uses `WATCH`, and a
//! `MULTI ... EXEC` is always sent whole, as one atomic pipeline.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::aio::ConnectionLike;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, Value};

/// How long after its last answer a connection is handed out unchecked.
pub const TRUSTED_FOR: Duration = Duration::from_millis(500);

/// When a connection of this process last failed unanswered, in
/// nanoseconds after [`EPOCH`] (0: never). A connection that last answered
/// before then is checked before it is handed out.
static LAST_LOST: AtomicU64 = AtomicU64::new(0);
static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

/// `at` as nanoseconds after [`EPOCH`], at least 1.
fn stamp(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(*EPOCH).as_nanos())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// A deadpool-redis manager (one server's, or a cluster's) whose check is
/// skipped for a connection that answered within [`TRUSTED_FOR`].
pub struct Trusting<M>(pub M);

/// A pooled connection, with what is known of its health.
pub struct Tracked<C> {
    pub conn: C,
    /// When the server last answered on it (a reply, or an error reply).
    answered: Instant,
    /// A command on it failed without an answer: drop it.
    lost: bool,
}

impl<M> managed::Manager for Trusting<M>
where
    M: managed::Manager<Error = RedisError>,
{
    type Type = Tracked<M::Type>;
    type Error = RedisError;

    async fn create(&self) -> Result<Self::Type, RedisError> {
        Ok(Tracked {
            conn: self.0.create().await?,
            answered: Instant::now(),
            lost: false,
        })
    }

    async fn recycle(
        &self,
        tracked: &mut Self::Type,
        metrics: &Metrics,
    ) -> RecycleResult<RedisError> {
        if tracked.lost {
            return Err(RecycleError::message("a command on it failed unanswered"));
        }
        if tracked.trusted() {
            return Ok(());
        }
        self.0.recycle(&mut tracked.conn, metrics).await?;
        tracked.answered = Instant::now();
        Ok(())
    }
}

impl<C> Tracked<C> {
    /// Whether it may be handed out unchecked: it answered within
    /// [`TRUSTED_FOR`], and after the process last lost a connection.
    fn trusted(&self) -> bool {
        self.answered.elapsed() < TRUSTED_FOR
            && stamp(self.answered) > LAST_LOST.load(Ordering::Relaxed)
    }

    /// What a command's outcome says of the connection.
    fn note<T>(&mut self, outcome: &Result<T, RedisError>) {
        match outcome {
            Err(error) if unanswered(error) => {
                self.lost = true;
                LAST_LOST.fetch_max(stamp(Instant::now()), Ordering::Relaxed);
            }
            _ => self.answered = Instant::now(),
        }
    }
}

/// An error that did not come from the server's answer: the connection
/// cannot be trusted with the next command.
fn unanswered(error: &RedisError) -> bool {
    error.is_io_error() || error.is_timeout() || error.is_unrecoverable_error()
}

impl<C: ConnectionLike + Send> ConnectionLike for Tracked<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let outcome = self.conn.req_packed_command(cmd).await;
            self.note(&outcome);
            outcome
        })
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        Box::pin(async move {
            let outcome = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.note(&outcome);
            outcome
        })
    }

    fn get_db(&self) -> i64 {
        self.conn.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_error_without_the_servers_answer_loses_the_connection() {
        let reply = redis::make_extension_error("NOSCRIPT".into(), None);
        assert!(!unanswered(&reply));
        let socket: RedisError =
            std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset").into();
        assert!(unanswered(&socket));
    }
}
