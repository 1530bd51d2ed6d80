//! The `lua` row's baseline: `redis-benchmark` running the purchase script
//! itself (`lua/purchase_lua.lua`, as the strategy sends it) on the same
//! Redis, with the same 64 connections, every call a new buyer, for about
//! as long as the purchases ran (`--secs`). It is what
//! Redis can do with no HTTP, no app and no instance in the way; the
//! target is that the whole purchase path reaches 80% of it.
//!
//! It runs on keys of a sale that does not exist in PostgreSQL (id 0), so
//! no worker ever drains its queue, and deletes them afterwards.

use anyhow::Context;
use redis::aio::ConnectionLike;

use seckill_core::domain::{OrderJob, UserId};
use seckill_core::keys::SaleKeys;
use seckill_core::redis_pool::RedisAt;
use seckill_core::store::Store;

/// Calls of the script per second of `--secs`: about as long a run as the
/// purchases' own.
const CALLS_PER_SECOND: f64 = 40_000.0;
/// redis-benchmark's connections: the load test's.
const CONNECTIONS: u64 = 64;

/// Script calls per second, as `redis-benchmark` measured them; `None`
/// when Redis is a cluster (redis-benchmark's cluster mode cannot keep
/// one sale's keys on one node) or `redis-benchmark` is not installed.
pub(super) async fn script_per_second(
    redis: &RedisAt,
    store: &Store,
    secs: f64,
) -> anyhow::Result<Option<f64>> {
    let RedisAt::Server(url) = redis else {
        return Ok(None);
    };
    let url = url::Url::parse(url).with_context(|| format!("{url} is not a URL"))?;
    let host = url.host_str().unwrap_or("127.0.0.1").to_owned();
    let port = url.port().unwrap_or(6379).to_string();
    let keys = SaleKeys::new(store.prefix(), 0);
    let mut conn = store.redis().await?;
    let () = redis::cmd("SET")
        .arg(&keys.stock)
        .arg(i64::MAX / 2)
        .query_async(&mut conn)
        .await?;
    let script = seckill_core::strategy::lua::script();
    script.prepare_invoke().load_async(&mut conn).await?;
    let payload = OrderJob::new(0, &UserId::parse("bench").expect("a valid id")).to_payload();
    let mut command = tokio::process::Command::new("redis-benchmark");
    command
        .args(["-h", &host, "-p", &port])
        .args(["-c", &CONNECTIONS.to_string()])
        .args([
            "-n",
            &((CALLS_PER_SECOND * secs) as u64).max(10_000).to_string(),
        ])
        // __rand_int__ becomes a random 12-digit number in each call.
        .args(["-r", "1000000000000", "--csv"])
        .args(["EVALSHA", script.get_hash(), "7"])
        .args([&keys.stock, &keys.holds, &keys.queue.due, &keys.queue.jobs])
        .args([&keys.room.admitted, &keys.room.bought, &keys.voided])
        // One buyer a call: the script as a pass of one sends it.
        .args([&keys.events, "0", "pass-__rand_int__"])
        .args(["buyer-__rand_int__", "order-__rand_int__", &payload]);
    let output = match command.output().await {
        Ok(output) => output,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error).context("running redis-benchmark"),
    };
    delete(&mut conn, &keys).await?;
    anyhow::ensure!(
        output.status.success(),
        "redis-benchmark failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    rate(&String::from_utf8_lossy(&output.stdout)).map(Some)
}

/// The requests per second of a `redis-benchmark --csv` report: its second
/// line is the test (the command, commas and all), then `rps` and six
/// latencies, so the rate is the seventh field from the end.
fn rate(csv: &str) -> anyhow::Result<f64> {
    csv.lines()
        .nth(1)
        .and_then(|line| line.rsplit(',').nth(6))
        .map(|field| field.trim_matches('"'))
        .and_then(|field| field.parse().ok())
        .with_context(|| format!("no rate in redis-benchmark's report: {csv:?}"))
}

/// The run's keys, gone.
async fn delete<C: ConnectionLike + Send>(conn: &mut C, keys: &SaleKeys) -> anyhow::Result<()> {
    let () = redis::cmd("DEL")
        .arg(&keys.stock)
        .arg(&keys.holds)
        .arg(&keys.queue.due)
        .arg(&keys.queue.jobs)
        .query_async(conn)
        .await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_redis_benchmarks_csv() {
        let csv = concat!(
            r#""test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms""#,
            "\n",
            r#""EVALSHA x 4 k {"a":1,"b":2} c","51234.50","0.6","0.2","0.5","1.0","1.7","9.2""#,
            "\n"
        );
        assert_eq!(rate(csv).unwrap(), 51_234.5);
        assert!(rate("nothing").is_err());
    }
}
