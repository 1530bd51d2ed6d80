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

/// Whether Redis answers `PING` through `pool` within `limit`.
pub async fn redis_pool_answers(pool: &crate::redis_pool::RedisPool, limit: Duration) -> bool {
    within(limit, async {
        let mut conn = pool.get().await.map_err(|error| error.to_string())?;
        ping(&mut conn).await.map_err(|error| error.to_string())
    })
    .await
}

/// Whether PostgreSQL answers `SELECT 1` through `pool` within `limit`.
pub async fn postgres_pool_answers(pool: &PgPool, limit: Duration) -> bool {
    within(limit, sqlx::query("SELECT 1").execute(pool)).await
}
