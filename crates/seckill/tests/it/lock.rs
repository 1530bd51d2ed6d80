//! The Redis lock against a real Redis: the article's bugs stay fixed.
//! Here: one holder at a time, a TTL from the moment the lock exists, and
//! fencing tokens. Waiting for the lock is in `lock_wait.rs`; what a
//! holder can do with its lock, and once it has lost it, in `lock_held.rs`.

use std::sync::Arc;
use std::time::Duration;

use seckill_core::lock::{Acquire, RedisLock, Release};

use crate::helpers::{Monitor, Scratch, redis_at, spawn_this_test};

pub async fn redis(scratch: &Scratch) -> redis::aio::MultiplexedConnection {
    redis_at(scratch.redis_url()).await
}

pub fn lock(scratch: &Scratch, ttl: Duration) -> RedisLock {
    RedisLock::new(
        format!("{}:lock", scratch.prefix),
        format!("{}:fence", scratch.prefix),
        ttl,
    )
}

/// The critical section every mutual-exclusion test runs: a read-modify-write
/// of a counter with a pause in the middle. Two holders at once would both
/// read the same value and one increment would be lost.
async fn increment_slowly(conn: &mut redis::aio::MultiplexedConnection, key: &str) {
    let value: i64 = redis::cmd("GET")
        .arg(key)
        .query_async::<Option<i64>>(conn)
        .await
        .expect("GET")
        .unwrap_or(0);
    tokio::time::sleep(Duration::from_millis(1)).await;
    redis::cmd("SET")
        .arg(key)
        .arg(value + 1)
        .query_async::<()>(conn)
        .await
        .expect("SET");
}

async fn take(
    lock: &RedisLock,
    conn: &mut redis::aio::MultiplexedConnection,
) -> seckill_core::lock::LockGuard {
    match lock
        .acquire(conn, Duration::from_secs(30), None, || false)
        .await
        .expect("acquire")
    {
        Acquire::Held(guard) => guard,
        other => panic!("expected the lock, got {other:?}"),
    }
}

/// One attempt at a lock the test knows is free.
pub async fn take_free(
    lock: &RedisLock,
    conn: &mut redis::aio::MultiplexedConnection,
) -> seckill_core::lock::LockGuard {
    lock.try_acquire(conn)
        .await
        .expect("acquire")
        .expect("the lock is free")
}

/// One attempt: whether it took the lock (then held until its TTL runs
/// out: the test only asks whether the lock was free).
pub async fn took(lock: &RedisLock, conn: &mut redis::aio::MultiplexedConnection) -> bool {
    lock.try_acquire(conn).await.expect("acquire").is_some()
}

#[tokio::test]
async fn only_one_of_many_tasks_holds_the_lock_at_a_time() {
    let scratch = Scratch::new().await;
    let lock = Arc::new(lock(&scratch, Duration::from_secs(5)));
    let counter = format!("{}:counter", scratch.prefix);
    let (tasks, rounds) = (20, 10);
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (lock, counter) = (Arc::clone(&lock), counter.clone());
        let mut conn = redis(&scratch).await;
        handles.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let guard = take(&lock, &mut conn).await;
                increment_slowly(&mut conn, &counter).await;
                assert_eq!(
                    guard.release(&mut conn).await.expect("release"),
                    Release::Released
                );
            }
        }));
    }
    for handle in handles {
        handle.await.expect("a task panicked");
    }
    let total: i64 = redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut redis(&scratch).await)
        .await
        .expect("GET");
    assert_eq!(
        total,
        tasks * rounds,
        "an increment was lost: two tasks held the lock at once"
    );
}

/// Set in the environment of the child processes of the next test.
const CHILD_PREFIX: &str = "SECKILL_TEST_LOCK_CHILD_PREFIX";
const CHILD_ROUNDS: i64 = 50;

#[tokio::test]
async fn only_one_of_two_processes_holds_the_lock_at_a_time() {
    // The same test binary, started twice by the test below, plays the two
    // processes: in them this variable is set.
    if let Ok(prefix) = std::env::var(CHILD_PREFIX) {
        let redis_url = std::env::var("SECKILL_REDIS_URL").expect("the parent passes the URL");
        let mut conn = redis::Client::open(redis_url.as_str())
            .expect("a Redis URL")
            .get_multiplexed_async_connection()
            .await
            .expect("a Redis connection");
        let lock = RedisLock::new(
            format!("{prefix}:lock"),
            format!("{prefix}:fence"),
            Duration::from_secs(5),
        );
        for _ in 0..CHILD_ROUNDS {
            let guard = take(&lock, &mut conn).await;
            increment_slowly(&mut conn, &format!("{prefix}:counter")).await;
            assert_eq!(
                guard.release(&mut conn).await.expect("release"),
                Release::Released
            );
        }
        return;
    }

    let scratch = Scratch::new().await;
    let this_test = "lock::only_one_of_two_processes_holds_the_lock_at_a_time";
    let env = [
        (CHILD_PREFIX, scratch.prefix.as_str()),
        ("SECKILL_REDIS_URL", scratch.redis_url()),
    ];
    let children: Vec<_> = (0..2).map(|_| spawn_this_test(this_test, &env)).collect();
    for child in children {
        let status = child
            .wait_with_output()
            .await
            .expect("waiting for a child")
            .status;
        assert!(status.success(), "a child process failed: {status}");
    }
    let total: i64 = redis::cmd("GET")
        .arg(format!("{}:counter", scratch.prefix))
        .query_async(&mut redis(&scratch).await)
        .await
        .expect("GET");
    assert_eq!(
        total,
        2 * CHILD_ROUNDS,
        "an increment was lost: both processes held the lock at once"
    );
}

/// The article's SETNX-then-EXPIRE left a window with no TTL; a crash
/// there locked the sale forever. The TTL read after the lock is taken
/// would not show that window, so the test reads what Redis ran
/// (`MONITOR`): the command that creates the key gives it its TTL.
#[tokio::test]
async fn a_lock_always_has_a_ttl_from_the_moment_it_exists() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let key = format!("{}:lock", scratch.prefix);
    let mut monitor = Monitor::start(scratch.redis_url(), &key).await;
    let lock = lock(&scratch, Duration::from_secs(7));
    let _guard = take_free(&lock, &mut conn).await;
    let ran = monitor.until_now().await;
    // The commands run on the key itself (not those that only name it,
    // such as the script's call), reads left out.
    let writes: Vec<&Vec<String>> = ran
        .iter()
        .filter(|command| command.get(1) == Some(&key))
        .filter(|command| {
            !matches!(
                command[0].to_ascii_uppercase().as_str(),
                "EXISTS" | "GET" | "PTTL" | "TTL"
            )
        })
        .collect();
    let first = writes
        .first()
        .unwrap_or_else(|| panic!("no write: {ran:?}"));
    let ttl_ms = match first[0].to_ascii_uppercase().as_str() {
        "SET" => first[3..].windows(2).find_map(|pair| {
            let n: u64 = pair[1].parse().ok()?;
            match pair[0].to_ascii_uppercase().as_str() {
                "PX" => Some(n),
                "EX" => Some(n * 1_000),
                _ => None,
            }
        }),
        "PSETEX" => first[2].parse().ok(),
        "SETEX" => first[2].parse().ok().map(|secs: u64| secs * 1_000),
        _ => None,
    };
    assert!(
        ttl_ms.is_some_and(|ms| ms > 0 && ms <= 7_000),
        "the lock was created without its TTL: {first:?} (then {writes:?})"
    );
    let ttl: i64 = redis::cmd("PTTL")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(ttl > 0 && ttl <= 7_000, "PTTL was {ttl}");
}

/// Redis' clock now, in ms, and `key`'s PTTL at that instant (one round
/// trip, run as one).
pub async fn pttl_now(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> (u64, i64) {
    let ((secs, micros), pttl): ((u64, u64), i64) = redis::pipe()
        .atomic()
        .cmd("TIME")
        .cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("TIME and PTTL");
    (secs * 1_000 + micros / 1_000, pttl)
}

/// Until when, on Redis' clock, `key` lives at least: `None` if it is gone
/// already, or has no TTL.
pub async fn lives_until(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<u64> {
    let (now, pttl) = pttl_now(conn, key).await;
    u64::try_from(pttl).ok().map(|pttl| now + pttl)
}

/// A newcomer's attempt at `lock`, made while `key` (the holder's lock, or
/// a waiter's place in line) may still live: `Ok(())` if it was refused;
/// `Err` with its guard if it took the lock after the key had lapsed (the
/// test stalled past its TTL, and learns nothing). Panics, saying
/// `wrong`, if it took the lock while the key still lived: the reading of
/// Redis' clock after the attempt is earlier than the key's end.
pub async fn refused_while_alive(
    lock: &RedisLock,
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    wrong: &str,
) -> Result<(), seckill_core::lock::LockGuard> {
    let until = lives_until(conn, key).await;
    let Some(taken) = lock.try_acquire(conn).await.expect("acquire") else {
        return Ok(());
    };
    let (now, _) = pttl_now(conn, key).await;
    assert!(until.is_none_or(|until| now >= until), "{wrong}");
    Err(taken)
}

#[tokio::test]
async fn a_crashed_holder_is_replaced_once_its_ttl_runs_out() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_millis(300));
    let key = format!("{}:lock", scratch.prefix);
    // The holder "crashes": it never releases. While its lock lives, it
    // is refused to everyone else.
    let mut rounds = 0;
    let crashed = loop {
        let crashed = take_free(&lock, &mut conn).await;
        match refused_while_alive(&lock, &mut conn, &key, "the lock was handed out twice").await {
            Ok(()) => break crashed,
            // Asked only after the TTL ran out: again.
            Err(newcomer) => {
                newcomer.release(&mut conn).await.expect("release");
                rounds += 1;
                assert!(rounds < 10, "every round stalled past the 300 ms TTL");
            }
        }
    };
    // And once the TTL has run out, somebody else takes it.
    let next = take(&lock, &mut conn).await;
    assert!(next.fence() > crashed.fence());
}

#[tokio::test]
async fn fencing_tokens_strictly_increase() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(5));
    let mut last = 0;
    for _ in 0..20 {
        let guard = take(&lock, &mut conn).await;
        assert!(guard.fence() > last, "token {} after {last}", guard.fence());
        last = guard.fence();
        guard.release(&mut conn).await.expect("release");
    }
}
