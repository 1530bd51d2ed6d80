//! Asking a server whether it is there and how it stands: what finding
//! servers (`mod.rs`) and starting private ones (the files beside this)
//! wait on. The bottom of `services/`: it uses none of them.

use std::time::Duration;

use sqlx::Connection;
use sqlx::postgres::PgConnection;

use seckill_core::probe;
use seckill_core::urls::with_database;

/// How long a probe waits for a server's answer.
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(2);

/// Whether a Redis server answers PING at `url`.
pub(crate) async fn redis_answers(url: &str) -> bool {
    probe::within(PROBE_TIMEOUT, async {
        let client = redis::Client::open(url)?;
        let mut conn = client.get_multiplexed_async_connection().await?;
        probe::ping(&mut conn).await
    })
    .await
}

/// A plain connection to the Redis server at `url`, asked `command`,
/// within a second (the private servers' readiness checks).
pub(crate) async fn ask<T: redis::FromRedisValue>(
    url: &str,
    command: &redis::Cmd,
) -> redis::RedisResult<T> {
    let client = redis::Client::open(url)?;
    tokio::time::timeout(Duration::from_secs(1), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        command.query_async(&mut conn).await
    })
    .await
    .unwrap_or_else(|_| Err(std::io::Error::from(std::io::ErrorKind::TimedOut).into()))
}

/// Whether the server at `url` answers `command` with text holding every
/// one of `needles`.
pub(crate) async fn answer_says(url: &str, command: &redis::Cmd, needles: &[&str]) -> bool {
    ask::<String>(url, command)
        .await
        .is_ok_and(|text| needles.iter().all(|needle| text.contains(needle)))
}

/// Whether the primary at `url` has a write of its own acknowledged by
/// `replicas` replicas within 300 ms (a `WAIT`, as the app's `replica`
/// durability sends one). A replica whose link is up may still take
/// longer for its first acknowledgement on a loaded machine: the app's
/// first `WAIT` after it then confirms nothing.
pub(crate) async fn writes_acknowledged(url: &str, replicas: usize) -> bool {
    let mut probe = redis::pipe();
    probe
        .cmd("SET")
        .arg("seckill-devenv:replica-probe")
        .arg(1)
        .arg("PX")
        .arg(1_000)
        .ignore()
        .cmd("WAIT")
        .arg(replicas)
        .arg(300);
    let client = match redis::Client::open(url) {
        Ok(client) => client,
        Err(_) => return false,
    };
    let acked = tokio::time::timeout(Duration::from_secs(1), async {
        let mut conn = client.get_multiplexed_async_connection().await?;
        probe.query_async::<(usize,)>(&mut conn).await
    })
    .await;
    matches!(acked, Ok(Ok((count,))) if count >= replicas)
}

/// Whether the replica at `url` is linked to its primary and synced.
pub(crate) async fn replica_in_step(url: &str) -> bool {
    answer_says(
        url,
        redis::cmd("INFO").arg("replication"),
        &["role:slave", "master_link_status:up"],
    )
    .await
}

/// Whether a PostgreSQL server accepts a connection to its `postgres`
/// database at `server_url`.
pub async fn postgres_answers(server_url: &str) -> bool {
    postgres_refusal(server_url).await.is_none()
}

/// Why a PostgreSQL server does not accept a connection to its `postgres`
/// database at `server_url` (not there, a password it was not given, no
/// answer in time); `None` when it does.
pub(crate) async fn postgres_refusal(server_url: &str) -> Option<String> {
    let url = match with_database(server_url, "postgres") {
        Ok(url) => url,
        Err(error) => return Some(format!("{error:#}")),
    };
    let connected = tokio::time::timeout(PROBE_TIMEOUT, async {
        let conn = PgConnection::connect(&url).await?;
        // A connection was enough: a failed goodbye does not make it down.
        let _ = conn.close().await;
        Ok::<_, sqlx::Error>(())
    })
    .await;
    match connected {
        Ok(Ok(())) => None,
        Ok(Err(error)) => Some(error.to_string()),
        Err(_) => Some(format!("no answer within {PROBE_TIMEOUT:?}")),
    }
}
