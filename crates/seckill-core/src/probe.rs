//! Is Redis answering? Is PostgreSQL? One probe each, with a time limit.
//!
//! `GET /healthz` asks through the app's pools (a `PING`, a `SELECT 1`);
//! service discovery (`seckill-devenv`) asks a URL before deciding to use
//! the server behind it (a `PING`; for PostgreSQL, a connection). Each
//! waits only so long ([`within`]).

use std::time::Duration;

use redis::aio::ConnectionLike;
use sqlx::PgPool;

/// Whether `check` succeeds within `limit`.
pub async fn within<T, E>(limit: Duration, check: impl Future<Output = Result<T, E>>) -> bool {
    matches!(tokio::time::timeout(limit, check).await, Ok(Ok(_)))
}

/// `PING` on a Redis connection.
pub async fn ping<C: ConnectionLike + Send>(conn: &mut C) -> redis::RedisResult<String> {
    redis::cmd("PING").query_async(conn).await
}

/// What `/healthz` says of Redis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RedisHealth {
    /// It took a write.
    Ok,
    /// It answers, but refuses writes for now: out of memory, a replica,
    /// a cluster without a master (see `failure.rs`). Purchases are
    /// answered `503` meanwhile.
    RefusesWrites,
    /// It did not answer within the limit.
    Down,
}

impl RedisHealth {
    /// The word `/healthz` shows.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::RefusesWrites => "refuses writes",
            Self::Down => "down",
        }
    }
}

/// Whether Redis takes a write through `pool` within `limit`: a `SET` of
/// `key` that expires by itself. A `PING` is not enough: a server out of
/// memory, or a replica, answers it and refuses every purchase.
pub async fn redis_pool_health(
    pool: &crate::redis_pool::RedisPool,
    key: &str,
    limit: Duration,
) -> RedisHealth {
    let write = async {
        let mut conn = pool.get().await.ok()?;
        let set: redis::RedisResult<()> = redis::cmd("SET")
            .arg(key)
            .arg(1)
            .arg("PX")
            .arg(1000)
            .query_async(&mut conn)
            .await;
        Some(match set {
            Ok(()) => RedisHealth::Ok,
            Err(error) if crate::failure::refused_for_now(&error) => RedisHealth::RefusesWrites,
            Err(_) => RedisHealth::Down,
        })
    };
    match tokio::time::timeout(limit, write).await {
        Ok(Some(health)) => health,
        _ => RedisHealth::Down,
    }
}

/// Whether PostgreSQL answers `SELECT 1` through `pool` within `limit`.
pub async fn postgres_pool_answers(pool: &PgPool, limit: Duration) -> bool {
    within(limit, sqlx::query("SELECT 1").execute(pool)).await
}
