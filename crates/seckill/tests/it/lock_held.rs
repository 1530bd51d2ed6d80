//! A holder and its lock: an expired holder can neither release nor
//! extend its successor's lock, `is_held` tells a holder from a successor
//! of the same name, and `release_all` gives back every lock a process
//! holds, reporting the ones it lost.

use std::time::Duration;

use seckill_core::lock::{HeldLocks, RedisLock, Release};

use crate::helpers::Scratch;
use crate::lock::{lock, redis, take_free, took};

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
