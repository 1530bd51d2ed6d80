//! The lab's watch on a sale's lock during a run: the longest TTL any
//! command gave the lock key, read from Redis's `MONITOR` feed.
//!
//! It is there for the article's bug 2: `EXPIRE` given a timestamp, a
//! lock with a TTL of decades (`strategy/article.rs`). Under contention
//! that TTL lives only from one holder's `EXPIRE` to the next robber's
//! `SET` or holder's `DEL`, often less than a millisecond. The lab's first
//! watch read the lock's `PTTL` every millisecond and, on a busy machine,
//! now and then read nothing in that gap: the row said "stuck lock: no"
//! for a lock that had been given 56 years. `MONITOR` hands over every
//! command the server runs, in order, scripts' commands included, so the
//! `EXPIRE` cannot fall between two reads. What it costs: the server
//! formats every command it runs, anyone's, for the watch, and the lab
//! passes over each line that does not name the lock; on a Redis shared
//! with other work (the tests' server) the others pay a little too. A
//! watch that could not read the feed to the end of the run is an error,
//! not a figure.
//!
//! In a Redis Cluster the watch monitors the master that owns the lock's
//! slot, the only node that runs commands on it.

use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;
use tokio_util::task::AbortOnDropHandle;

use seckill_core::redis_pool::RedisAt;
use seckill_devenv::monitor::{arguments, is_echo_of, quoted};

/// How long starting the watch, and [`LockWatch::stop`] waiting for the
/// feed to catch up with the run, may take before the lab gives up: a
/// Redis that stopped answering does not hold the lab up.
const WITHIN: Duration = Duration::from_secs(5);

/// "No TTL was ever asked for the lock", as [`LockWatch::stop`] says it.
pub(crate) const NO_TTL: i64 = -2;

/// A watch on one key, running until [`LockWatch::stop`].
pub(crate) struct LockWatch {
    /// Where the monitored node is, to send the end marker there.
    node: redis::ConnectionInfo,
    /// The argument of the `ECHO` that ends the watch, unique to it: once
    /// the feed shows it, it has shown every command the node ran before.
    marker: String,
    /// The reading task: the longest TTL asked for the key, in ms
    /// ([`NO_TTL`]: none), once it has read up to the marker. Aborted when
    /// the watch is dropped (a lab interrupted mid-row), so that no feed
    /// of every command outlives its row.
    task: AbortOnDropHandle<anyhow::Result<i64>>,
}

impl LockWatch {
    /// Start watching `key` on the server, or on the cluster master, that
    /// holds it. Returns once Redis has confirmed `MONITOR`: every command
    /// it runs after that is seen.
    pub(crate) async fn start(redis: &RedisAt, key: &str) -> anyhow::Result<Self> {
        let node = redis
            .node_of(key)
            .await
            .context("finding the Redis node that holds the lock")?;
        let monitor = tokio::time::timeout(
            WITHIN,
            redis::Client::open(node.clone())?.get_async_monitor(),
        )
        .await
        .context("MONITOR for the lock watch did not start in time")?
        .context("starting MONITOR for the lock watch")?;
        let marker = format!("seckill-lab-watch-done:{}", fastrand::u64(..));
        // The feed carries every command the node runs, every client's:
        // the lines that do not name the key (as Redis quotes it) or the
        // marker are passed over before they are taken apart.
        let (quoted_key, key) = (quoted(key), key.to_owned());
        let task = AbortOnDropHandle::new(tokio::spawn({
            let marker = marker.clone();
            async move {
                let mut longest = NO_TTL;
                let mut feed = monitor.into_on_message::<String>();
                while let Some(line) = feed.next().await {
                    if line.contains(&quoted_key) {
                        if let Some(ttl) = ttl_asked_ms(&arguments(&line), &key) {
                            longest = longest.max(ttl);
                        }
                    } else if line.contains(&marker) && is_echo_of(&arguments(&line), &marker) {
                        return Ok(longest);
                    }
                }
                anyhow::bail!("the MONITOR feed ended before the end of the run")
            }
        }));
        Ok(Self { node, marker, task })
    }

    /// Stop watching: the longest TTL asked for the key during the run, in
    /// ms, or [`NO_TTL`]. Sends the marker (`ECHO`) to the monitored node
    /// after the run's last command and reads the feed up to it. An error
    /// when it cannot: a watch that missed part of the run has no figure
    /// to give (it would say "no stuck lock" for a lock it did not see).
    /// The task goes with the watch, finished or given up on.
    pub(crate) async fn stop(self) -> anyhow::Result<i64> {
        tokio::time::timeout(WITHIN, async {
            let client = redis::Client::open(self.node.clone())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            let _: String = redis::cmd("ECHO")
                .arg(&self.marker)
                .query_async(&mut conn)
                .await
                .context("sending the lock watch's end marker")?;
            self.task.await.context("the lock watch's task")?
        })
        .await
        .context("the lock watch did not catch up with the run in time")?
        .context("the lock watch could not read to the end of the run")
    }
}

/// The TTL, in ms, that the command `args` gives `key`, if it gives it
/// one: `EXPIRE` and `PEXPIRE`, `SETEX` and `PSETEX`, and `SET` with `EX`
/// or `PX`, the ways the strategies set a lock's TTL. A TTL too large to
/// count in ms counts as the largest.
fn ttl_asked_ms(args: &[String], key: &str) -> Option<i64> {
    let (command, rest) = args.split_first()?;
    let (named, rest) = rest.split_first()?;
    if named != key {
        return None;
    }
    let secs = |n: &String| n.parse::<i64>().ok().map(|s| s.saturating_mul(1000));
    let ms = |n: &String| n.parse::<i64>().ok();
    match (command.to_ascii_uppercase().as_str(), rest) {
        ("EXPIRE", [n, ..]) | ("SETEX", [n, _]) => secs(n),
        ("PEXPIRE", [n, ..]) | ("PSETEX", [n, _]) => ms(n),
        ("SET", [_, options @ ..]) => {
            options
                .windows(2)
                .find_map(|pair| match pair[0].to_ascii_uppercase().as_str() {
                    "EX" => secs(&pair[1]),
                    "PX" => ms(&pair[1]),
                    _ => None,
                })
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use seckill_devenv::services::PrivateRedis;

    async fn send(redis: &PrivateRedis, command: &redis::Cmd) {
        let client = redis::Client::open(redis.url()).expect("a URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        let () = command.query_async(&mut conn).await.expect("the command");
    }

    #[tokio::test]
    async fn the_watch_reports_the_longest_ttl_asked_even_once_it_is_gone() {
        let redis = PrivateRedis::start().await.expect("a private Redis");
        let at = RedisAt::Server(redis.url());
        let watch = LockWatch::start(&at, "t:lock").await.expect("watching");
        send(&redis, redis::cmd("SET").arg("t:lock").arg("1")).await;
        // The article's EXPIRE, then the robber's SET that drops the TTL
        // at once: nothing is left to read, and the watch saw it anyway.
        send(
            &redis,
            redis::cmd("EXPIRE").arg("t:lock").arg(1_764_115_200),
        )
        .await;
        send(&redis, redis::cmd("SET").arg("t:lock").arg("2")).await;
        send(
            &redis,
            redis::cmd("PEXPIRE").arg("t:other").arg(i64::MAX / 2),
        )
        .await;
        assert_eq!(watch.stop().await.expect("a figure"), 1_764_115_200_000);

        let watch = LockWatch::start(&at, "t:lock").await.expect("watching");
        send(&redis, redis::cmd("SET").arg("t:lock").arg("3")).await;
        assert_eq!(watch.stop().await.expect("a figure"), NO_TTL);
    }

    #[tokio::test]
    async fn a_watch_dropped_unstopped_lets_its_feed_go() {
        let redis = PrivateRedis::start().await.expect("a private Redis");
        let at = RedisAt::Server(redis.url());
        let client = redis::Client::open(redis.url()).expect("a URL");
        let mut conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("a connection");
        // `flags=O`: a client in MONITOR mode.
        let monitors = async |conn: &mut redis::aio::MultiplexedConnection| {
            let clients: String = redis::cmd("CLIENT")
                .arg("LIST")
                .query_async(conn)
                .await
                .expect("CLIENT LIST");
            clients.lines().filter(|c| c.contains(" flags=O ")).count()
        };
        let watch = LockWatch::start(&at, "t:lock").await.expect("watching");
        assert_eq!(monitors(&mut conn).await, 1);
        drop(watch);
        let deadline = tokio::time::Instant::now() + WITHIN;
        while monitors(&mut conn).await > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the feed outlived its watch"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn a_watch_whose_redis_went_away_has_no_figure() {
        let mut redis = PrivateRedis::start().await.expect("a private Redis");
        let at = RedisAt::Server(redis.url());
        let watch = LockWatch::start(&at, "t:lock").await.expect("watching");
        redis.kill();
        let error = watch.stop().await.expect_err("no figure from half a run");
        assert!(format!("{error:#}").contains("lock watch"), "{error:#}");
    }

    fn line(args: &str) -> Vec<String> {
        arguments(&format!("1764115200.123456 [0 127.0.0.1:50312] {args}"))
    }

    #[test]
    fn the_ttl_asked_is_read_from_each_way_of_setting_one() {
        let ttl = |args: &str| ttl_asked_ms(&line(args), "lock");
        // The article's bug 2: a timestamp as a number of seconds.
        assert_eq!(
            ttl(r#""EXPIRE" "lock" "1764115200""#),
            Some(1_764_115_200_000)
        );
        assert_eq!(ttl(r#""pexpire" "lock" "15000""#), Some(15_000));
        assert_eq!(
            ttl(r#""SET" "lock" "token" "NX" "PX" "15000""#),
            Some(15_000)
        );
        assert_eq!(ttl(r#""SET" "lock" "token" "ex" "15""#), Some(15_000));
        assert_eq!(ttl(r#""SETEX" "lock" "15" "token""#), Some(15_000));
        assert_eq!(ttl(r#""PSETEX" "lock" "15" "token""#), Some(15));
        // No TTL, another key, or a value that happens to read "PX".
        assert_eq!(ttl(r#""SET" "lock" "1764115200""#), None);
        assert_eq!(ttl(r#""SETNX" "lock" "1764115200""#), None);
        assert_eq!(ttl(r#""EXPIRE" "other" "15""#), None);
        assert_eq!(ttl(r#""SET" "lock" "PX""#), None);
        assert_eq!(
            ttl(r#""EXPIRE" "lock" "99999999999999999""#),
            Some(i64::MAX)
        );
    }
}
