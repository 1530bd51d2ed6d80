//! When a call failed: was the failure the server's (try again later) or
//! the request's?
//!
//! The classification ([`transient`]) decides two honest answers: the API
//! says `503 unavailable` with `Retry-After` instead of `500` while a server
//! is down, and the worker gives jobs back without charging them an attempt,
//! so that an outage does not dead-letter healthy orders.

/// Whether a PostgreSQL failure is the server's state rather than the
/// statement's fault: it cannot be reached, it is shutting down or starting,
/// it is out of connections, disk or memory, it is a read-only standby (a
/// failover in progress), the statement ran out of time, or it lost a
/// deadlock or a serialization check. Trying the same statement later may
/// well succeed, so nobody is charged for it.
pub(crate) fn transient_postgres(error: &sqlx::Error) -> bool {
    match error {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // Class 08: connection exceptions. 57P01 admin_shutdown, 57P02
            // crash_shutdown, 57P03 cannot_connect_now.
            code.starts_with("08")
                || code.starts_with("57P")
                || matches!(
                    code.as_ref(),
                    // too_many_connections, disk_full, out_of_memory
                    "53300" | "53100" | "53200"
                    // read_only_sql_transaction: a standby, or a database
                    // made read-only
                    | "25006"
                    // query_canceled: statement_timeout
                    | "57014"
                    // deadlock_detected, serialization_failure
                    | "40P01" | "40001"
                )
        }),
        _ => false,
    }
}

/// The error replies with which a Redis server refuses work it may do
/// later, whatever the command: out of memory under `noeviction` (`OOM`),
/// a replica or a demoted primary (`READONLY`), a replica whose primary
/// is gone (`MASTERDOWN`), a cluster without a slot's master
/// (`CLUSTERDOWN`, `TRYAGAIN`), a failed RDB save (`MISCONF`), too few
/// replicas for `min-replicas-to-write` (`NOREPLICAS`), a script running
/// too long (`BUSY`), a dataset still loading (`LOADING`), a slot that
/// moved to another cluster node (`MOVED`, `ASK`: the cluster client
/// refreshes its map but, its retries off, does not re-send the command;
/// `redis_pool/timeouts.rs`).
const REFUSALS: [&str; 11] = [
    "OOM",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "TRYAGAIN",
    "MISCONF",
    "NOREPLICAS",
    "BUSY",
    "LOADING",
    "MOVED",
    "ASK",
];

/// Whether a Redis failure is the server's state rather than the
/// command's fault: it could not be reached, went away mid-call, or
/// refused the work for now ([`REFUSALS`]). A buyer is told `503` with
/// `Retry-After`, and a job is given back uncharged.
pub(crate) fn transient_redis(error: &redis::RedisError) -> bool {
    error.is_io_error()
        || error.is_connection_dropped()
        || error.is_connection_refusal()
        || error.is_timeout()
        // A cluster node the client has no connection to now (it failed,
        // and the client reconnects it on the next request).
        || error.kind() == redis::ErrorKind::ClusterConnectionNotFound
        || refused_for_now(error)
}

/// Whether a command may have run though its answer never came: its
/// connection failed, or the reply timed out, after it was sent. A refused
/// connection sent nothing, and an error reply is an answer.
pub(crate) fn answer_lost(error: &redis::RedisError) -> bool {
    (error.is_io_error() || error.is_connection_dropped() || error.is_timeout())
        && !error.is_connection_refusal()
}

/// Whether Redis answered, refusing the work for now ([`REFUSALS`]).
pub(crate) fn refused_for_now(error: &redis::RedisError) -> bool {
    error.code().is_some_and(|code| REFUSALS.contains(&code))
}

/// A transient failure passed on, as text, to every caller that waited on
/// the one call that failed (a batch of purchases shares its round trips
/// to Redis): judged once by [`transient`], it stays transient for each.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Unavailable(pub String);

/// A failure judged once ([`transient`] or not), to pass on to every
/// caller that waited on the one call that failed: each gets an error that
/// is judged the same way.
#[derive(Debug, Clone)]
pub struct Judged {
    message: String,
    transient: bool,
}

impl Judged {
    pub fn of(error: &anyhow::Error) -> Self {
        Self {
            message: format!("{error:#}"),
            transient: transient(error),
        }
    }

    /// The failure, for one of the callers.
    pub fn to_error(&self) -> anyhow::Error {
        if self.transient {
            anyhow::Error::new(Unavailable(self.message.clone()))
        } else {
            anyhow::anyhow!("{}", self.message)
        }
    }
}

/// Whether any cause of `error` is a transient failure of Redis, of
/// PostgreSQL, or of a connection pool waiting for either.
pub fn transient(error: &anyhow::Error) -> bool {
    error.chain().any(|cause| {
        if cause.is::<Unavailable>() {
            true
        } else if let Some(error) = cause.downcast_ref::<sqlx::Error>() {
            transient_postgres(error)
        } else if let Some(error) = cause.downcast_ref::<redis::RedisError>() {
            transient_redis(error)
        } else {
            cause.downcast_ref::<deadpool_redis::PoolError>().is_some()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_timeout_means_postgres_is_unavailable() {
        assert!(transient_postgres(&sqlx::Error::PoolTimedOut));
        assert!(!transient_postgres(&sqlx::Error::RowNotFound));
    }

    #[test]
    fn a_failure_judged_once_is_judged_the_same_for_every_caller() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let judged = Judged::of(&anyhow::Error::new(refused).context("reading a sale"));
        for _ in 0..2 {
            let error = judged.to_error();
            assert!(transient(&error));
            assert!(format!("{error}").contains("reading a sale"), "{error}");
        }
        assert!(!transient(
            &Judged::of(&anyhow::anyhow!("a bug")).to_error()
        ));
    }

    #[test]
    fn a_failure_anywhere_in_the_cause_chain_counts() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let wrapped = anyhow::Error::new(refused).context("reading the stock");
        assert!(transient(&wrapped));
        assert!(!transient(&anyhow::anyhow!("a bug")));
    }
}
