//! Waiting for the Redis lock: a waiter's deadline, its place in line and
//! what becomes of it, the release announcement that wakes the waiters,
//! and the reads sent with the attempt that takes the lock.

use std::time::Duration;

use futures_util::StreamExt;

use seckill_core::lock::{Acquire, RedisLock, Release};

use crate::helpers::{Scratch, eventually, redis_at};
use crate::lock::{lock, pttl_now, redis, refused_while_alive, take_free, took};

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
    let kept = i64::try_from(seckill_core::lock::PLACE_KEPT.as_millis()).expect("a few ms");
    // The place lives [`PLACE_KEPT`] after the waiter's last attempt: a
    // round in which the test stalled longer than that learns nothing
    // about who the place kept out, and is played again.
    for _ in 0..10 {
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
        // A TTL, and a short one (-2: it has lapsed already).
        let (_, ttl) = pttl_now(&mut conn, &line(&scratch)).await;
        assert!(
            ttl == -2 || (ttl > 0 && ttl <= kept),
            "the place's PTTL was {ttl}"
        );
        held.release(&mut conn).await.expect("release");
        let wrong = "the dead waiter's place was ignored";
        match refused_while_alive(&lock, &mut conn, &line(&scratch), wrong).await {
            Ok(()) => {
                eventually(
                    Duration::from_secs(10),
                    "the place of a waiter that died to lapse and the lock to be free",
                    || async { took(&lock, &mut conn.clone()).await },
                )
                .await;
                return;
            }
            Err(newcomer) => newcomer.release(&mut conn).await.expect("release"),
        };
    }
    panic!("every round stalled past the place's {kept} ms");
}

/// Wait until a waiter holds the place in line of the test's lock.
async fn wait_for_someone_in_line(scratch: &Scratch, conn: &mut redis::aio::MultiplexedConnection) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
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
    // The waiter keeps its place by coming back for it every few ms; a
    // round in which it was kept from running longer than [`PLACE_KEPT`]
    // (a stalled machine) lost the place fairly, and is played again.
    for _ in 0..10 {
        let held = take_free(&lock, &mut conn).await;
        let held_fence = held.fence();
        // A waiter that listens for releases (nobody tells this one: it
        // wakes from its back-off), so it asks for a place in line.
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
        let wrong = "a newcomer took the lock from the waiter next in line";
        match refused_while_alive(&lock, &mut conn, &line(&scratch), wrong).await {
            Ok(()) => {
                let next = waiter.await.expect("the waiter got the lock");
                assert!(next.fence() > held_fence);
                assert_eq!(next_in_line(&scratch, &mut conn).await, None);
                return;
            }
            Err(newcomer) => {
                newcomer.release(&mut conn).await.expect("release");
                let next = waiter.await.expect("the waiter got the lock");
                next.release(&mut conn).await.expect("release");
            }
        }
    }
    panic!(
        "every round stalled past the place's {:?}",
        seckill_core::lock::PLACE_KEPT
    );
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
    let channel = stale.released_channel();
    pubsub.subscribe(&channel).await.expect("SUBSCRIBE");
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
    // A marker on the same channel, after both releases: Redis delivers a
    // channel's messages in order, so every announcement comes before it.
    let () = redis::cmd("PUBLISH")
        .arg(&channel)
        .arg("marker")
        .query_async(&mut conn)
        .await
        .expect("PUBLISH");
    let mut messages = Vec::new();
    loop {
        let message = tokio::time::timeout(Duration::from_secs(30), announced.next())
            .await
            .expect("the marker came")
            .expect("the subscription lasts");
        let payload: String = message.get_payload().expect("a text message");
        if payload == "marker" {
            break;
        }
        messages.push(payload);
    }
    assert_eq!(messages, ["released"], "one release, its announcements");
}
