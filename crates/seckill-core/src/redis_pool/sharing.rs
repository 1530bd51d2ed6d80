//! Handles on one multiplexed connection, as the `redis` crate intends its
//! connections to be used: every caller's commands go out on one socket,
//! pipelined, and the server reads them, and writes their replies, in a
//! few system calls where a connection each took two for every command.
//!
//! Measured (docs/bench.md, "One connection to one server"): `lua`
//! purchases, then one script per request, cost their instance and Redis
//! less CPU, Redis reading a dozen purchases at a time.
//!
//! Where a connection is not shared:
//! - one server's, while a `WAIT` is sent on it (`--redis-durability
//!   replica`). Redis holds a client in `WAIT` until its replicas answer,
//!   and every command pipelined behind it on the same connection waits
//!   too: one buyer's `WAIT` would hold up every other buyer's purchase;
//! - Sentinel's, never: after a failover each connection is checked for
//!   its server's role and dropped alone (`recycle_check.rs`).
//!
//! A cluster's connection is shared whatever the durability
//! (`timeouts.rs`: why each pooled cluster connection of its own went
//! wrong), one connection per node; so under `replica` a node's commands
//! queue behind each `WAIT` sent to it, a cost the cluster paid before
//! this file and that no bench row measures.
//!
//! What sharing costs:
//! - one socket carries every caller's commands, so one dropped socket
//!   (a `CLIENT KILL`, a proxy's reset, a client limit of Redis') fails
//!   every command in flight on it, up to a pool's worth of buyers, each
//!   told `503` or, for a purchase whose answer was lost, looked up
//!   (`strategy/mod.rs`): the price any multiplexed client pays;
//! - a stalled server holds `Sharing::create`'s lock for its check (up
//!   to a response timeout) and its connect (up to the connection
//!   timeout): callers that need a new connection meanwhile wait behind
//!   it, up to the pool's create timeout, and are told `503 unavailable`
//!   (`all_in_use`: not `busy`); `tests/it/stall.rs` holds every buyer of
//!   a stall to a bound;
//! - nothing may `WATCH` on a pooled connection: deadpool-redis' check
//!   sends `UNWATCH` on the socket every caller shares (nothing does).

use deadpool::managed::{self, Metrics, RecycleResult};

/// A manager whose connections are clones of one made by `inner`, or, not
/// sharing, `inner` itself.
pub struct Sharing<M: managed::Manager> {
    inner: M,
    /// The connection every handle is a clone of, once made; `None` when
    /// each handle is a connection of its own.
    shared: Option<tokio::sync::Mutex<Option<M::Type>>>,
}

impl<M: managed::Manager> Sharing<M> {
    /// One connection for every handle.
    pub(crate) fn one(inner: M) -> Self {
        Self {
            inner,
            shared: Some(tokio::sync::Mutex::default()),
        }
    }

    /// One connection per handle: `inner` as it is.
    pub(crate) fn each_its_own(inner: M) -> Self {
        Self {
            inner,
            shared: None,
        }
    }
}

impl<M> managed::Manager for Sharing<M>
where
    M: managed::Manager + Send + Sync,
    M::Type: Clone + Send + Sync,
    M::Error: Send,
{
    type Type = M::Type;
    type Error = M::Error;

    /// A clone of the shared connection, after `inner`'s check of it (a
    /// `PING` for one server, nothing for a cluster, whose client replaces
    /// a failed node's connection itself); a new one if none was made or
    /// it fails the check. The pool asks only when it grows, or when a
    /// handle failed its check: after a restart, the first handle's check
    /// fails, and the new connection is checked and shared by every handle
    /// replaced after it (one connection made, not one for each).
    async fn create(&self) -> Result<M::Type, M::Error> {
        let Some(shared) = &self.shared else {
            return self.inner.create().await;
        };
        // A tokio Mutex, held across the check and the connect (awaits):
        // the race it prevents is a burst, or every handle of a restarted
        // server, that finds none working and makes one each.
        let mut shared = shared.lock().await;
        if let Some(conn) = &*shared {
            let mut conn = conn.clone();
            if self
                .inner
                .recycle(&mut conn, &Metrics::default())
                .await
                .is_ok()
            {
                return Ok(conn);
            }
        }
        let conn = self.inner.create().await?;
        *shared = Some(conn.clone());
        Ok(conn)
    }

    async fn recycle(&self, conn: &mut M::Type, metrics: &Metrics) -> RecycleResult<M::Error> {
        self.inner.recycle(conn, metrics).await
    }
}
