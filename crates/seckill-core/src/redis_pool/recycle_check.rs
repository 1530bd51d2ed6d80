//! The pool's check of a connection it hands out, made cheap when it can
//! be.
//!
//! deadpool-redis checks every connection each time it is taken from the
//! pool: it sends `UNWATCH` and `PING` and waits for the answer. That is one
//! round trip more for every purchase, whose own work is one script: the
//! `lua` strategy's accepted purchases/s rose from about 11,100 to 13,900
//! (three alternated pairs of `seckill bench --only accepted`) without it.
//!
//! Here a connection that answered within the last [`TRUSTED_FOR`] is
//! handed out unchecked, as HikariCP does for SQL connections
//! (`aliveBypassWindowMs`, 500 ms): under load every connection answers
//! all the time, and none is checked. Any other is checked as before: one
//! idle longer, one whose last reply timed out (it is still in step, since
//! the connections are multiplexed and a late reply goes to nobody, but
//! its server may be gone), and every connection to the same server (the
//! same URL), in any pool of the process, that last answered before a
//! command, a check or a new connection to it failed without the server's
//! answer (its socket failed, closed or was refused, or a reply could not
//! be read). A restarted Redis has closed them all, so the first failure
//! makes the process check the rest; a check that fails drops its
//! connection.
//!
//! What this gives up: a connection closed by the server (a restart, a
//! `CLIENT KILL`, a proxy's reset) within [`TRUSTED_FOR`] of sending the
//! last command it answered can be handed out before the pool has seen any failure, and the
//! command sent on it fails (its buyer gets the `503` of a Redis that
//! cannot be reached) where the check would have replaced it unseen: every
//! request that takes such a connection until the first of them fails.
//! One server's handles share one connection (`sharing.rs`): when it is
//! closed, every command in flight on it fails with it.
//! `UNWATCH` is not needed: nothing here uses `WATCH`, and a `MULTI ...
//! EXEC` is always sent whole, as one atomic pipeline.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, PoisonError};
use std::time::{Duration, Instant};

use deadpool::managed::{self, Metrics, RecycleError, RecycleResult};
use redis::aio::ConnectionLike;
use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

/// How long after its last answer a connection is handed out unchecked.
pub const TRUSTED_FOR: Duration = Duration::from_millis(500);

/// A deadpool-redis manager (one server's, or a cluster's) whose check is
/// skipped for a connection that answered within [`TRUSTED_FOR`].
pub struct Trusting<M> {
    inner: Arc<M>,
    losses: Arc<Losses>,
    /// Where new connections are made: the runtime the pool was built on
    /// (in `serve`, the process' own, not an HTTP worker's). A connection
    /// is driven by a task of the runtime that made it, which reads every
    /// reply; made by a request on an HTTP worker, in a burst its replies
    /// would wait there behind thousands of new requests (see
    /// `Store::runtime`).
    runtime: tokio::runtime::Handle,
    /// Whether a connection checked before it is handed out must also be
    /// to a primary (`ROLE`): under Sentinel, where the server a
    /// connection was made to may since have become a replica.
    primary_only: bool,
}

impl<M> Trusting<M> {
    /// A manager of connections to `server` (a URL, or a cluster's list of
    /// nodes): every pool of the process to the same server hears of a
    /// loss on any of them (the worker's and the purchases' alike, when a
    /// restart closes them all). Panics outside a runtime.
    pub(crate) fn new(inner: M, server: &str) -> Self {
        static SERVERS: LazyLock<Mutex<HashMap<String, Arc<Losses>>>> =
            LazyLock::new(Mutex::default);
        let losses = Arc::clone(
            SERVERS
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(server.to_owned())
                .or_insert_with(|| Arc::new(Losses::new())),
        );
        Self {
            inner: Arc::new(inner),
            losses,
            runtime: tokio::runtime::Handle::current(),
            primary_only: false,
        }
    }

    /// The same manager, whose check also drops a connection to a server
    /// that is no longer a primary. The race it closes: a failover demotes
    /// the old primary while the pool holds connections to it; each would
    /// answer every write `READONLY` for as long as it lives. A `READONLY`
    /// reply counts as a loss (below), so every connection is checked
    /// before its next use, and a check that finds a replica drops it; its
    /// replacement asks the sentinels where the primary is now.
    pub(crate) fn primary_only(mut self) -> Self {
        self.primary_only = true;
        self
    }
}

/// When a connection to one server last failed unanswered.
struct Losses {
    since: Instant,
    /// Nanoseconds after `since`; 0: never.
    last: AtomicU64,
}

impl Losses {
    fn new() -> Self {
        Self {
            since: Instant::now(),
            last: AtomicU64::new(0),
        }
    }

    /// `at` as nanoseconds after `since`, at least 1.
    fn stamp(&self, at: Instant) -> u64 {
        u64::try_from(at.saturating_duration_since(self.since).as_nanos())
            .unwrap_or(u64::MAX)
            .max(1)
    }

    fn record(&self) {
        self.last
            .fetch_max(self.stamp(Instant::now()), Ordering::Relaxed);
    }

    /// Whether no loss was recorded at or after `at`.
    fn none_since(&self, at: Instant) -> bool {
        self.stamp(at) > self.last.load(Ordering::Relaxed)
    }
}

/// A pooled connection, with what is known of its health.
pub struct Tracked<C> {
    pub conn: C,
    /// When the last command the server answered on it was sent (an
    /// answer proves the socket was alive at or after that moment); `None`
    /// when it must be checked before it is handed out again.
    answered: Option<Instant>,
    losses: Arc<Losses>,
}

impl<M> managed::Manager for Trusting<M>
where
    M: managed::Manager<Error = RedisError> + Send + Sync + 'static,
    M::Type: ConnectionLike + Send,
{
    type Type = Tracked<M::Type>;
    type Error = RedisError;

    async fn create(&self) -> Result<Self::Type, RedisError> {
        let sent = Instant::now();
        let inner = Arc::clone(&self.inner);
        // Not cancelled with the request that asked for it: a connect under
        // way finishes (within redis' connection timeout) and is dropped.
        let made = match self
            .runtime
            .spawn(async move { inner.create().await })
            .await
        {
            Ok(made) => made,
            // The runtime is shutting down (or the connect panicked): no
            // news of the server, so no loss is recorded.
            Err(gone) => return Err(RedisError::from(std::io::Error::other(gone))),
        };
        match made {
            Ok(conn) => Ok(Tracked {
                conn,
                answered: Some(sent),
                losses: Arc::clone(&self.losses),
            }),
            Err(error) => {
                // Refused or reset: the server is gone, and the others may
                // be closed too. (A slow connect is not news of that.)
                if said_by(&error) == Heard::Lost {
                    self.losses.record();
                }
                Err(error)
            }
        }
    }

    async fn recycle(
        &self,
        tracked: &mut Self::Type,
        metrics: &Metrics,
    ) -> RecycleResult<RedisError> {
        if tracked.trusted() {
            return Ok(());
        }
        let sent = Instant::now();
        let mut checked = self.inner.recycle(&mut tracked.conn, metrics).await;
        if self.primary_only && checked.is_ok() {
            checked = match redis::cmd("ROLE")
                .query_async::<Vec<Value>>(&mut tracked.conn)
                .await
            {
                Ok(role) if role.first() == Some(&Value::BulkString(b"master".to_vec())) => Ok(()),
                Ok(_) => Err(RecycleError::message("no longer the primary")),
                Err(error) => Err(error.into()),
            };
        }
        match checked {
            Ok(()) => {
                tracked.answered = Some(sent);
                Ok(())
            }
            Err(error) => {
                // News only from a connection that answered after the last
                // loss: after a restart every dead connection's check fails
                // in turn, and each would distrust the new ones again.
                if let RecycleError::Backend(error) = &error
                    && said_by(error) == Heard::Lost
                    && tracked
                        .answered
                        .is_some_and(|at| self.losses.none_since(at))
                {
                    self.losses.record();
                }
                Err(error)
            }
        }
    }
}

/// Whether `cmd` was sent without waiting for its answer
/// (`Cmd::set_no_response`, as `lock.rs` sends an abandon): its `Ok` says
/// only that it went into the connection's queue, nothing of the server.
/// Taken as an answer, it would make a connection whose last command
/// timed out trusted again at once, and the pool would hand it out
/// unchecked to a server that may still be stalled (tested:
/// `pool::a_command_sent_unheard_after_a_timeout_leaves_the_connection_to_be_checked`).
fn sent_unheard(cmd: &Cmd) -> bool {
    cmd.is_no_response()
}

/// What a command's outcome says of its connection.
#[derive(Debug, PartialEq, Eq)]
enum Heard {
    /// The server answered (a reply, or an error reply).
    Answered,
    /// No answer in time: the connection is in step, its server unknown.
    Unsure,
    /// The connection failed: its socket, or what came over it.
    Lost,
    /// Nothing: the client refused the command before sending it.
    Nothing,
}

/// What came back over a connection: a reply, or a pipeline's replies.
/// The redis crate hands an error reply back as a value
/// (`Value::ServerError`), not as an error: the caller's `query` turns it
/// into one later, past this check.
pub(crate) trait Replies {
    /// Whether a reply is `READONLY`: the server became a replica.
    fn readonly(&self) -> bool;
}

/// Replies already taken apart by `query`: an error reply is an error.
impl Replies for () {
    fn readonly(&self) -> bool {
        false
    }
}

impl Replies for Value {
    fn readonly(&self) -> bool {
        matches!(self, Value::ServerError(error) if error.code() == "READONLY")
    }
}

impl Replies for Vec<Value> {
    fn readonly(&self) -> bool {
        self.iter().any(Replies::readonly)
    }
}

fn said<T: Replies>(outcome: &Result<T, RedisError>) -> Heard {
    match outcome {
        // As `said_by` takes the same reply given as an error.
        Ok(replies) if replies.readonly() => Heard::Lost,
        Ok(_) => Heard::Answered,
        Err(error) => said_by(error),
    }
}

fn said_by(error: &RedisError) -> Heard {
    if error.is_timeout() {
        Heard::Unsure
    } else if error.code() == Some("READONLY") {
        // An answer, but from a server that has become a replica: every
        // connection to it is as good as lost (see `primary_only`).
        Heard::Lost
    } else if matches!(error.kind(), ErrorKind::Server(_) | ErrorKind::Extension) {
        Heard::Answered
    } else if error.is_io_error() || error.is_unrecoverable_error() {
        Heard::Lost
    } else {
        Heard::Nothing
    }
}

impl<C> Tracked<C> {
    /// Whether it may be handed out unchecked: it answered within
    /// [`TRUSTED_FOR`], and no connection to its server failed since.
    fn trusted(&self) -> bool {
        self.answered
            .is_some_and(|at| at.elapsed() < TRUSTED_FOR && self.losses.none_since(at))
    }

    /// Take in the outcome of a command sent at `sent`.
    pub(crate) fn note<T: Replies>(&mut self, sent: Instant, outcome: &Result<T, RedisError>) {
        match said(outcome) {
            Heard::Answered => self.answered = Some(sent),
            Heard::Unsure => self.answered = None,
            Heard::Lost => {
                self.answered = None;
                self.losses.record();
            }
            Heard::Nothing => {}
        }
    }
}

impl<C: ConnectionLike + Send> ConnectionLike for Tracked<C> {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let sent = Instant::now();
            let outcome = self.conn.req_packed_command(cmd).await;
            if !sent_unheard(cmd) {
                self.note(sent, &outcome);
            }
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
            let sent = Instant::now();
            let outcome = self.conn.req_packed_commands(pipeline, offset, count).await;
            self.note(sent, &outcome);
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
    fn an_error_reply_is_an_answer_a_timeout_is_not_and_a_broken_socket_is_a_loss() {
        let reply = redis::make_extension_error("NOSCRIPT".into(), None);
        assert_eq!(said_by(&reply), Heard::Answered);
        let io = |kind| RedisError::from(std::io::Error::new(kind, "x"));
        assert_eq!(said_by(&io(std::io::ErrorKind::TimedOut)), Heard::Unsure);
        assert_eq!(
            said_by(&io(std::io::ErrorKind::ConnectionReset)),
            Heard::Lost
        );
        assert_eq!(said_by(&io(std::io::ErrorKind::BrokenPipe)), Heard::Lost);
    }

    /// A server demoted to a replica without its clients cut off (a
    /// `REPLICAOF`, a `FAILOVER`) answers every write `READONLY`, as a
    /// reply the redis crate hands back as a value. That reply is a loss:
    /// every connection to the server is checked before its next use, and
    /// the check drops those to a replica. (Before, only an error carrying
    /// `READONLY` was, which the connections never give: the pool went on
    /// handing out connections to the replica, and every write failed.)
    #[test]
    fn a_readonly_reply_is_a_loss_alone_or_in_a_pipeline() {
        let reply = |code: &str| {
            let error = redis::make_extension_error(code.into(), Some("a reply".into()));
            Value::ServerError(redis::ServerError::try_from(error).expect("a server error"))
        };
        assert_eq!(said(&Ok(reply("READONLY"))), Heard::Lost);
        assert_eq!(said(&Ok(vec![Value::Okay, reply("READONLY")])), Heard::Lost);
        assert_eq!(said(&Ok(reply("NOSCRIPT"))), Heard::Answered);
        assert_eq!(said(&Ok(vec![Value::Okay, reply("BUSY")])), Heard::Answered);
    }

    #[test]
    fn a_loss_distrusts_what_answered_before_it_and_not_after() {
        let losses = Losses::new();
        let before = Instant::now();
        assert!(losses.none_since(before));
        std::thread::sleep(Duration::from_millis(2));
        losses.record();
        assert!(!losses.none_since(before));
        std::thread::sleep(Duration::from_millis(2));
        assert!(losses.none_since(Instant::now()));
    }
}
