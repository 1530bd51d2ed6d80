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
//! writes each command it runs to the watch too, a few microseconds each,
//! small beside a row's HTTP requests.
//!
//! In a Redis Cluster the watch monitors the master that owns the lock's
//! slot, the only node that runs commands on it.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use anyhow::Context;
use futures_util::StreamExt;

use crate::topology::RedisAt;

/// How long [`LockWatch::stop`] waits for the feed to catch up with the
/// run: a Redis that stopped answering does not hold the lab up.
const CATCH_UP: Duration = Duration::from_secs(2);

/// "No TTL was ever asked for the lock", as [`LockWatch::stop`] says it.
pub const NO_TTL: i64 = -2;

/// A watch on one key, running until [`LockWatch::stop`].
pub struct LockWatch {
    /// Where the monitored node is, to send the end marker there.
    node: redis::ConnectionInfo,
    /// The command that ends the watch, unique to it: once the feed shows
    /// it, it has shown every command the run sent before it.
    marker: String,
    /// The longest TTL asked for the key so far, in ms ([`NO_TTL`]: none).
    /// Shared with the reading task so a watch given up on still says
    /// what it saw.
    longest: Arc<AtomicI64>,
    task: tokio::task::JoinHandle<()>,
}

impl LockWatch {
    /// Start watching `key` on the server, or on the cluster master, that
    /// holds it. Returns once Redis has confirmed `MONITOR`: every command
    /// sent after that is seen.
    pub async fn start(redis: &RedisAt, key: &str) -> anyhow::Result<Self> {
        let node = redis
            .node_of(key)
            .await
            .context("finding the Redis node that holds the lock")?;
        let monitor = redis::Client::open(node.clone())?
            .get_async_monitor()
            .await
            .context("starting MONITOR for the lock watch")?;
        let marker = format!("seckill-lab-watch-done:{key}:{}", fastrand::u64(..));
        let longest = Arc::new(AtomicI64::new(NO_TTL));
        let task = tokio::spawn({
            let (key, marker, longest) = (key.to_owned(), marker.clone(), longest.clone());
            async move {
                let mut feed = monitor.into_on_message::<String>();
                while let Some(line) = feed.next().await {
                    let args = arguments(&line);
                    if args.get(1) == Some(&marker) {
                        return;
                    }
                    if let Some(ttl) = ttl_asked_ms(&args, &key) {
                        longest.fetch_max(ttl, Ordering::Relaxed);
                    }
                }
            }
        });
        Ok(Self {
            node,
            marker,
            longest,
            task,
        })
    }

    /// Stop watching: the longest TTL asked for the key during the run, in
    /// ms, or [`NO_TTL`]. Sends the marker (`ECHO`) to the monitored node
    /// after the run's last command and reads the feed up to it, giving up
    /// after [`CATCH_UP`] with what it has.
    pub async fn stop(self) -> i64 {
        let echoed = async {
            let client = redis::Client::open(self.node.clone())?;
            let mut conn = client.get_multiplexed_async_connection().await?;
            redis::cmd("ECHO")
                .arg(&self.marker)
                .query_async::<String>(&mut conn)
                .await
        };
        let abort = self.task.abort_handle();
        let _caught_up = tokio::time::timeout(CATCH_UP, async {
            if echoed.await.is_ok() {
                let _ = self.task.await;
            }
        })
        .await;
        // Finished, given up on, or the marker never sent: the task goes.
        abort.abort();
        self.longest.load(Ordering::Relaxed)
    }
}

/// The command and arguments of one `MONITOR` line, unquoted:
/// `1700000000.123456 [0 127.0.0.1:50312] "EXPIRE" "lock" "1764115200"`
/// gives `["EXPIRE", "lock", "1764115200"]`. Redis quotes each one and
/// escapes `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b` and other bytes as
/// `\xHH`.
fn arguments(line: &str) -> Vec<String> {
    let Some((_, quoted)) = line.split_once("] ") else {
        return Vec::new();
    };
    let mut args = Vec::new();
    let mut chars = quoted.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = Vec::new();
        while let Some(c) = chars.next() {
            match c {
                '"' => break,
                '\\' => match chars.next() {
                    Some('n') => arg.push(b'\n'),
                    Some('r') => arg.push(b'\r'),
                    Some('t') => arg.push(b'\t'),
                    Some('a') => arg.push(7),
                    Some('b') => arg.push(8),
                    Some('x') => {
                        let hex: String = chars.by_ref().take(2).collect();
                        arg.extend(u8::from_str_radix(&hex, 16).ok());
                    }
                    Some(other) => arg.extend(other.to_string().bytes()),
                    None => break,
                },
                other => arg.extend(other.to_string().bytes()),
            }
        }
        args.push(String::from_utf8_lossy(&arg).into_owned());
    }
    args
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

    fn line(args: &str) -> Vec<String> {
        arguments(&format!("1764115200.123456 [0 127.0.0.1:50312] {args}"))
    }

    #[test]
    fn a_monitor_line_is_read_back_into_its_arguments() {
        assert_eq!(
            line(r#""EXPIRE" "s:{sale:1}:lock" "1764115200""#),
            ["EXPIRE", "s:{sale:1}:lock", "1764115200"]
        );
        // A script's commands come from "lua", and Redis escapes what it quotes.
        assert_eq!(
            arguments(r#"1764115200.1 [0 lua] "SET" "a \"b\"\\c" "\x01\n" """#),
            ["SET", "a \"b\"\\c", "\u{1}\n", ""]
        );
        assert!(arguments("OK").is_empty());
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
