//! The Redis lock against a real Redis: the article's bugs stay fixed.

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use seckill_core::lock::{Acquire, HeldLocks, RedisLock, Release};

use crate::helpers::{Scratch, redis_at, spawn_this_test};

async fn redis(scratch: &Scratch) -> redis::aio::MultiplexedConnection {
    redis_at(scratch.redis_url()).await
}

fn lock(scratch: &Scratch, ttl: Duration) -> RedisLock {
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
async fn take_free(
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
async fn took(lock: &RedisLock, conn: &mut redis::aio::MultiplexedConnection) -> bool {
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

#[tokio::test]
async fn a_lock_always_has_a_ttl_from_the_moment_it_exists() {
    // The article's SETNX-then-EXPIRE left a window with no TTL; a crash there
    // locked the sale forever.
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(7));
    let _guard = take_free(&lock, &mut conn).await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(format!("{}:lock", scratch.prefix))
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    assert!(ttl > 0 && ttl <= 7_000, "PTTL was {ttl}");
}

#[tokio::test]
async fn a_crashed_holder_is_replaced_once_its_ttl_runs_out() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_millis(300));
    // The holder "crashes": it never releases.
    let crashed = take_free(&lock, &mut conn).await;
    assert!(
        !took(&lock, &mut conn).await,
        "the lock was handed out twice"
    );
    let next = take(&lock, &mut conn).await;
    assert!(next.fence() > crashed.fence());
}

#[tokio::test]
async fn an_expired_holder_can_neither_release_nor_extend_the_new_owners_lock() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_millis(50));
    let stale = take_free(&lock, &mut conn).await;
    tokio::time::sleep(Duration::from_millis(120)).await;

    // Nobody took it yet: the stale holder learns its lock expired.
    assert_eq!(
        stale
            .extend(&mut conn, Duration::from_secs(5))
            .await
            .expect("extend"),
        Release::Expired
    );

    let long = RedisLock::new(
        format!("{}:lock", scratch.prefix),
        format!("{}:fence", scratch.prefix),
        Duration::from_secs(30),
    );
    let owner = take_free(&long, &mut conn).await;
    assert_eq!(
        stale
            .extend(&mut conn, Duration::from_secs(60))
            .await
            .expect("extend"),
        Release::NotOwner
    );
    assert_eq!(
        stale.release(&mut conn).await.expect("release"),
        Release::NotOwner
    );
    // The owner's lock is untouched: nobody else can take it.
    assert!(!took(&long, &mut conn).await);
    assert_eq!(
        owner
            .extend(&mut conn, Duration::from_secs(30))
            .await
            .expect("extend"),
        Release::Released
    );
    assert_eq!(
        owner.release(&mut conn).await.expect("release"),
        Release::Released
    );
    assert!(took(&long, &mut conn).await);
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

/// The line key (`keys::lock_line`) of the test's lock.
fn line(scratch: &Scratch) -> String {
    seckill_core::keys::lock_line(&format!("{}:lock", scratch.prefix))
}

/// Who is next in line for the test's lock, if anybody.
async fn next_in_line(
    scratch: &Scratch,
    conn: &mut redis::aio::MultiplexedConnection,
) -> Option<String> {
    redis::cmd("GET")
        .arg(line(scratch))
        .query_async(conn)
        .await
        .expect("GET")
}

/// A waiter gives up at its deadline, or when told to, and gives back the
/// place in line it took: the lock is free for the next one at once.
#[tokio::test]
async fn a_waiter_gives_up_at_its_deadline_and_gives_its_place_in_line_back() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let held = take_free(&lock, &mut conn).await;
    // A waiter nobody tells of releases asks for no place: a lock kept for
    // it would stand idle while it sleeps.
    let deaf = lock
        .acquire(&mut conn, Duration::from_millis(50), None, || false)
        .await
        .expect("acquire");
    assert!(matches!(deaf, Acquire::TimedOut), "got {deaf:?}");
    assert_eq!(next_in_line(&scratch, &mut conn).await, None);
    let listening = tokio::sync::Notify::new();
    let mut attempts = 0;
    let waited = lock
        .acquire(
            &mut conn,
            Duration::from_millis(100),
            Some(&listening),
            || {
                attempts += 1;
                false
            },
        )
        .await
        .expect("acquire");
    assert!(matches!(waited, Acquire::TimedOut), "got {waited:?}");
    assert!(attempts > 1, "the waiter tried {attempts} time(s)");
    assert_eq!(next_in_line(&scratch, &mut conn).await, None);
    let gave_up = lock
        .acquire(&mut conn, Duration::from_secs(30), Some(&listening), || {
            true
        })
        .await
        .expect("acquire");
    assert!(matches!(gave_up, Acquire::GaveUp), "got {gave_up:?}");
    held.release(&mut conn).await.expect("release");
    assert!(
        took(&lock, &mut conn).await,
        "a waiter that stopped waiting kept the lock from the next one"
    );
}

/// A waiter that dies while in line (here: its task is dropped) cannot
/// give its place back; the place has a TTL, so it holds the lock back
/// from everybody for a moment, not for ever.
#[tokio::test]
async fn the_place_of_a_waiter_that_died_in_line_lapses() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let held = take_free(&lock, &mut conn).await;
    let waiter = tokio::spawn({
        let (lock, mut conn) = (lock.clone(), redis(&scratch).await);
        async move {
            let listening = tokio::sync::Notify::new();
            let _ = lock
                .acquire(&mut conn, Duration::from_secs(30), Some(&listening), || {
                    false
                })
                .await;
        }
    });
    wait_for_someone_in_line(&scratch, &mut conn).await;
    waiter.abort();
    let _ = waiter.await;
    let ttl: i64 = redis::cmd("PTTL")
        .arg(line(&scratch))
        .query_async(&mut conn)
        .await
        .expect("PTTL");
    let kept = i64::try_from(seckill_core::lock::PLACE_KEPT.as_millis()).expect("a few ms");
    assert!(ttl > 0 && ttl <= kept, "the place's PTTL was {ttl}");
    held.release(&mut conn).await.expect("release");
    assert!(
        !took(&lock, &mut conn).await,
        "the dead waiter's place was ignored"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
    while lock
        .try_acquire(&mut conn)
        .await
        .expect("acquire")
        .is_none()
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place of a waiter that died kept the lock from everybody"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Wait until a waiter holds the place in line of the test's lock.
async fn wait_for_someone_in_line(scratch: &Scratch, conn: &mut redis::aio::MultiplexedConnection) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while next_in_line(scratch, conn).await.is_none() {
        assert!(tokio::time::Instant::now() < deadline, "nobody got in line");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_released_lock_goes_to_the_waiter_next_in_line_not_to_a_newcomer() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let held = take_free(&lock, &mut conn).await;
    let held_fence = held.fence();
    // A waiter that listens for releases (nobody tells this one: it wakes
    // from its back-off), so it asks for a place in line.
    let waiter = tokio::spawn({
        let (lock, mut conn) = (lock.clone(), redis(&scratch).await);
        async move {
            let listening = tokio::sync::Notify::new();
            match lock
                .acquire(&mut conn, Duration::from_secs(30), Some(&listening), || {
                    false
                })
                .await
                .expect("acquire")
            {
                Acquire::Held(guard) => guard,
                other => panic!("expected the lock, got {other:?}"),
            }
        }
    });
    wait_for_someone_in_line(&scratch, &mut conn).await;
    assert_eq!(
        held.release(&mut conn).await.expect("release"),
        Release::Released
    );
    assert!(
        !took(&lock, &mut conn).await,
        "a newcomer took the lock from the waiter next in line"
    );
    let next = waiter.await.expect("the waiter got the lock");
    assert!(next.fence() > held_fence);
    assert_eq!(next_in_line(&scratch, &mut conn).await, None);
}

/// Reads sent with the attempts ran under the lock: here the lock key
/// itself, which holds the new holder's value only once the script that
/// took it has run. The round trip after taking a lock is saved, and the
/// answer is not one read before the lock was ours.
#[tokio::test]
async fn reads_sent_with_the_attempt_that_takes_the_lock_run_under_it() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let mut reads = redis::pipe();
    reads.get(format!("{}:lock", scratch.prefix));
    let held = take_free(&lock, &mut conn).await;
    let waiter = tokio::spawn({
        let (lock, mut conn) = (lock.clone(), redis(&scratch).await);
        async move {
            let listening = tokio::sync::Notify::new();
            lock.acquire_and_read::<_, (String,)>(
                &mut conn,
                Duration::from_secs(30),
                Some(&listening),
                || false,
                &reads,
            )
            .await
            .expect("acquire")
        }
    });
    wait_for_someone_in_line(&scratch, &mut conn).await;
    held.release(&mut conn).await.expect("release");
    match waiter.await.expect("the waiter") {
        (Acquire::Held(guard), Some((read,))) => assert_eq!(read, guard.value()),
        other => panic!("expected the lock and its read, got {other:?}"),
    }
}

/// A Redis that lost its scripts (restarted, or `SCRIPT FLUSH`) is given
/// the lock's script again, and the reads sent behind it still answer; the
/// attempt is not an error. A Redis of the test's own: the flush would
/// touch every other test's scripts.
#[tokio::test]
async fn a_lock_and_its_reads_are_taken_from_a_redis_that_forgot_its_scripts() {
    let redis = seckill_devenv::services::PrivateRedis::start()
        .await
        .expect("a private Redis");
    let mut conn = redis_at(&redis.url()).await;
    let lock = RedisLock::new("t:lock", "t:fence", Duration::from_secs(30));
    take_free(&lock, &mut conn)
        .await
        .release(&mut conn)
        .await
        .expect("release");
    let () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .expect("SCRIPT FLUSH");
    let mut reads = redis::pipe();
    reads.get("t:lock");
    let (acquired, read) = lock
        .acquire_and_read::<_, (String,)>(&mut conn, Duration::from_secs(1), None, || false, &reads)
        .await
        .expect("acquire");
    let Acquire::Held(guard) = acquired else {
        panic!("expected the lock, got {acquired:?}");
    };
    assert_eq!(guard.fence(), 2);
    assert_eq!(read, Some((guard.value().to_owned(),)));
}

/// A read sent behind the attempt that fails (here: a set command on a
/// string) is an error for the caller, who gets no guard; the lock that
/// the attempt took is released, not left to stand until its TTL runs out.
#[tokio::test]
async fn a_lock_taken_with_reads_that_failed_is_released() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let not_a_set = format!("{}:not-a-set", scratch.prefix);
    let () = redis::cmd("SET")
        .arg(&not_a_set)
        .arg("x")
        .query_async(&mut conn)
        .await
        .expect("SET");
    let mut reads = redis::pipe();
    reads.cmd("SMISMEMBER").arg(&not_a_set).arg("ann");
    let failed = lock
        .acquire_and_read::<_, (Vec<bool>,)>(
            &mut conn,
            Duration::from_secs(1),
            None,
            || false,
            &reads,
        )
        .await;
    assert!(failed.is_err(), "got {failed:?}");
    assert!(
        took(&lock, &mut conn).await,
        "the lock taken by the failed attempt was left held"
    );
}

/// Every release is announced on the lock's channel, for the waiters
/// (`events.rs` wakes them), and only a real one: a holder whose lock had
/// expired deletes nothing and announces nothing.
#[tokio::test]
async fn a_release_is_announced_once_and_only_when_it_happened() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let stale = take_free(&lock, &mut conn).await;
    let mut pubsub = redis::Client::open(scratch.redis_url())
        .expect("a Redis URL")
        .get_async_pubsub()
        .await
        .expect("a pub/sub connection");
    pubsub
        .subscribe(stale.released_channel())
        .await
        .expect("SUBSCRIBE");
    let mut announced = pubsub.into_on_message();
    // Make the stale holder's lock run out now, rather than racing a TTL.
    stale
        .extend(&mut conn, Duration::from_millis(1))
        .await
        .expect("extend");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        stale.release(&mut conn).await.expect("release"),
        Release::Expired
    );
    let owner = take_free(&lock, &mut conn).await;
    assert_eq!(
        owner.release(&mut conn).await.expect("release"),
        Release::Released
    );
    let mut messages = 0;
    while tokio::time::timeout(Duration::from_millis(300), announced.next())
        .await
        .is_ok()
    {
        messages += 1;
    }
    assert_eq!(messages, 1, "one release, {messages} announcements");
}

#[tokio::test]
async fn is_held_is_true_for_the_holder_and_false_once_its_lock_expired() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let lock = lock(&scratch, Duration::from_secs(30));
    let guard = take_free(&lock, &mut conn).await;
    assert!(guard.is_held(&mut conn).await.expect("GET"));
    // Make the lock run out now, rather than racing a short TTL.
    assert_eq!(
        guard
            .extend(&mut conn, Duration::from_millis(1))
            .await
            .expect("extend"),
        Release::Released
    );
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!guard.is_held(&mut conn).await.expect("GET"));
}

#[tokio::test]
async fn is_held_is_false_once_another_holder_of_the_same_name_took_the_lock() {
    // The article's isLocking compared expiry times (and, by a typo, did not
    // even compare): a successor that took the lock within the same second
    // looked like us. Two acquisitions under one holder name differ by
    // their nonce, and is_held tells them apart.
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let short = lock(&scratch, Duration::from_millis(50)).held_by("app-1");
    let stale = take_free(&short, &mut conn).await;
    tokio::time::sleep(Duration::from_millis(120)).await;
    let successor = take_free(
        &lock(&scratch, Duration::from_secs(30)).held_by("app-1"),
        &mut conn,
    )
    .await;
    assert!(!stale.is_held(&mut conn).await.expect("GET"));
    assert!(successor.is_held(&mut conn).await.expect("GET"));
}

/// A lock of its own under the scratch prefix: `{prefix}:lock:{name}`.
fn named(scratch: &Scratch, name: &str, ttl: Duration) -> RedisLock {
    RedisLock::new(
        format!("{}:lock:{name}", scratch.prefix),
        format!("{}:fence:{name}", scratch.prefix),
        ttl,
    )
}

#[tokio::test]
async fn release_all_releases_every_lock_the_process_holds() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let names = ["a", "b", "c"];
    let mut held = HeldLocks::new();
    for name in names {
        let guard = take_free(&named(&scratch, name, Duration::from_secs(30)), &mut conn).await;
        assert!(held.hold(guard).is_none());
    }
    assert_eq!(held.len(), names.len());

    let report = held.release_all(&mut conn).await;
    assert_eq!(report.len(), names.len());
    for unlocked in &report {
        assert_eq!(
            unlocked.outcome.as_ref().ok(),
            Some(&Release::Released),
            "{}",
            unlocked.key
        );
    }
    assert!(held.is_empty());
    for name in names {
        assert!(
            named(&scratch, name, Duration::from_secs(30))
                .try_acquire(&mut conn)
                .await
                .expect("acquire")
                .is_some(),
            "lock {name} is still held"
        );
    }
}

#[tokio::test]
async fn release_all_reports_lost_locks_and_never_deletes_another_holders() {
    let scratch = Scratch::new().await;
    let mut conn = redis(&scratch).await;
    let kept = named(&scratch, "kept", Duration::from_secs(30));
    let taken_over = named(&scratch, "taken-over", Duration::from_millis(50));
    let expired = named(&scratch, "expired", Duration::from_millis(50));
    let mut held = HeldLocks::new();
    for lock in [&kept, &taken_over, &expired] {
        let guard = take_free(lock, &mut conn).await;
        assert!(held.hold(guard).is_none());
    }
    tokio::time::sleep(Duration::from_millis(120)).await;
    // Another process takes over one of the two locks that expired.
    let other = take_free(
        &named(&scratch, "taken-over", Duration::from_secs(30)).held_by("another"),
        &mut conn,
    )
    .await;

    let report = held.release_all(&mut conn).await;
    let outcomes: Vec<(String, Release)> = report
        .into_iter()
        .map(|unlocked| (unlocked.key, unlocked.outcome.expect("Redis answered")))
        .collect();
    let key = |name: &str| format!("{}:lock:{name}", scratch.prefix);
    assert_eq!(
        outcomes,
        [
            (key("expired"), Release::Expired),
            (key("kept"), Release::Released),
            (key("taken-over"), Release::NotOwner),
        ]
    );
    assert!(held.is_empty(), "a lost lock is not ours to retry");
    assert!(
        other.is_held(&mut conn).await.expect("GET"),
        "release_all deleted another holder's lock"
    );
    assert_eq!(
        other.release(&mut conn).await.expect("release"),
        Release::Released
    );
}
