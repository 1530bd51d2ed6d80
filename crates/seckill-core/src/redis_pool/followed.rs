//! A cluster connection that follows a failover its client cannot see.
//!
//! The redis crate's cluster client (1.8, read in its source:
//! `cluster_handling/async_connection/request.rs`) asks the cluster for
//! its slot map again when a node answers `MOVED` or `READONLY`, and
//! reconnects a node whose connection dropped. A reply that does not come
//! changes nothing: a timeout is `RetryMethod::RetryImmediately`, which
//! with the retries off (`timeouts.rs`) only hands the error back. So a
//! primary that stops answering without closing its connections (stopped
//! by its host, or cut off by the network, where no reset ever arrives)
//! keeps its slots in the client's map after the cluster has promoted its
//! replica: every command for them times out, and their sales answer
//! `503`, until the old primary comes back or TCP gives up, minutes later.
//! The crate has no call that asks for the map again.
//!
//! So the pool's one cluster connection ([`FollowedCluster`]) is made
//! anew, in the background, when a command on it goes unanswered (a
//! timeout, a dropped or refused connection): a new connection asks the
//! nodes that answer for the map. Each handle taken from the pool sends
//! on the connection that was current when it was taken, so the next
//! caller after the swap goes to the promoted replica. Not the next
//! command: a caller's step and the `WAIT` that confirms it are sent one
//! after the other, and each must reach the same node (`replicas.rs`).
//! On two connections, a step run by the old primary (resumed, not yet
//! told it was replaced) would be "confirmed" by the new primary's
//! replicas. At most one is made at a time, and [`REBUILD_EVERY`]
//! apart: while a primary is stopped and not yet replaced, one new
//! connection a second (each connects to every node and asks for the map,
//! in about two seconds while a node does not answer), none while every
//! node answers. Commands already sent finish on the connection they went
//! out on, which closes when the last of them is done.
//!
//! What it does not do: re-send anything. A command whose answer was lost
//! is still the caller's to judge (`strategy/mod.rs`).

use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use redis::aio::ConnectionLike;
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::{Cmd, Pipeline, RedisError, RedisFuture, RedisResult, Value};

/// The shortest time between two new connections, counted from the end
/// of the last one's making.
pub(crate) const REBUILD_EVERY: Duration = Duration::from_secs(1);

/// The longest a new connection may take to make.
const MAKING_LIMIT: Duration = Duration::from_secs(10);

/// The pool's cluster connection, made anew when a node stops answering
/// (module notes). Cheap to clone. A handle sends on the connection it
/// was pinned to ([`FollowedCluster::pin`], at each checkout).
#[derive(Clone)]
pub struct FollowedCluster {
    shared: Arc<Followed>,
    /// The connection this handle sends on, until pinned again.
    pinned: ClusterConnection,
}

struct Followed {
    /// Makes each connection, with the pool's timeouts and no retries.
    client: ClusterClient,
    /// The connection commands go out on. A std lock, not a tokio one:
    /// held only to clone or to swap it, never across an await.
    current: RwLock<ClusterConnection>,
    /// Whether a new connection is being made, and when the last was
    /// done; a std Mutex for the same reason. The race it prevents: a
    /// burst of buyers timing out at once on a stopped node, each making a
    /// connection to every node of the cluster.
    making: Mutex<Making>,
    /// Where the new connection is made and driven: the pool's runtime,
    /// not the request's (`recycle_check.rs`, `Trusting::runtime`).
    runtime: tokio::runtime::Handle,
}

struct Making {
    /// A new connection is being made, or waits for its turn.
    under_way: bool,
    /// When the last was made (or failed to be).
    last_done: Option<Instant>,
}

impl FollowedCluster {
    /// The first connection, made now (the caller's timeouts bound it).
    pub(crate) async fn connect(client: ClusterClient) -> RedisResult<Self> {
        let conn = client.get_async_connection().await?;
        Ok(Self {
            shared: Arc::new(Followed {
                client,
                current: RwLock::new(conn.clone()),
                making: Mutex::new(Making {
                    under_way: false,
                    last_done: None,
                }),
                runtime: tokio::runtime::Handle::current(),
            }),
            pinned: conn,
        })
    }

    /// Send on the connection current now, until pinned again: the pool
    /// pins each handle as it hands it out (`RedisPool::get`).
    pub(crate) fn pin(&mut self) {
        self.pinned = self
            .shared
            .current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
    }

    /// Take in a command's outcome: one that went unanswered starts a new
    /// connection, unless one is under way, and not before
    /// [`REBUILD_EVERY`] has passed since the last.
    fn heard<T>(&self, outcome: &RedisResult<T>) {
        if outcome.as_ref().is_err_and(unanswered) {
            self.rebuild_soon();
        }
    }

    fn rebuild_soon(&self) {
        let wait = {
            let mut making = self
                .shared
                .making
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            if making.under_way {
                return;
            }
            making.under_way = true;
            // Too soon after the last: made when the gap has passed, not
            // dropped (a silence seen once, then no more commands to that
            // node, would leave its sales on the old map).
            REBUILD_EVERY.saturating_sub(making.last_done.map_or(REBUILD_EVERY, |at| at.elapsed()))
        };
        let followed = Arc::clone(&self.shared);
        self.shared.runtime.spawn(async move {
            tokio::time::sleep(wait).await;
            // Bounded by the client's own timeouts too; this bound keeps a
            // connect that never ended from stopping every later one.
            let made =
                tokio::time::timeout(MAKING_LIMIT, followed.client.get_async_connection()).await;
            match made {
                Ok(Ok(conn)) => {
                    *followed
                        .current
                        .write()
                        .unwrap_or_else(PoisonError::into_inner) = conn;
                    tracing::info!("a Redis Cluster node went unanswered: connected anew");
                }
                Ok(Err(error)) => {
                    tracing::warn!(%error, "a Redis Cluster node went unanswered: no new connection");
                }
                Err(_) => {
                    tracing::warn!(limit = ?MAKING_LIMIT, "a Redis Cluster node went unanswered: no new connection in time");
                }
            }
            let mut making = followed
                .making
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            making.under_way = false;
            making.last_done = Some(Instant::now());
        });
    }
}

/// Whether an error says a node did not answer: no reply in time, or no
/// connection to it (dropped, refused, or none the client could find).
/// An error reply (`MOVED`, a script's error) is an answer.
fn unanswered(error: &RedisError) -> bool {
    error.is_timeout()
        || error.is_io_error()
        || error.is_unrecoverable_error()
        || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
}

impl ConnectionLike for FollowedCluster {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        Box::pin(async move {
            let outcome = self.pinned.req_packed_command(cmd).await;
            self.heard(&outcome);
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
            let outcome = self
                .pinned
                .req_packed_commands(pipeline, offset, count)
                .await;
            self.heard(&outcome);
            outcome
        })
    }

    fn get_db(&self) -> i64 {
        self.pinned.get_db()
    }
}

#[cfg(test)]
mod tests {
    use super::unanswered;
    use redis::{ErrorKind, RedisError};

    /// A reply of any kind is an answer: only silence makes a new
    /// connection, or every `MOVED` and script error would.
    #[test]
    fn only_silence_makes_a_new_connection() {
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        let reset = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let none = RedisError::from((ErrorKind::ClusterConnectionNotFound, "no connection"));
        for error in [timeout, reset, none] {
            assert!(unanswered(&error), "{error:?}");
        }
        let moved = RedisError::from((
            ErrorKind::Server(redis::ServerErrorKind::Moved),
            "3999 127.0.0.1:6381",
        ));
        let script = redis::make_extension_error("ERR".into(), Some("user script".into()));
        for error in [moved, script] {
            assert!(!unanswered(&error), "{error:?}");
        }
    }
}
