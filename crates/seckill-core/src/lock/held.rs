//! The locks one process holds, released together: the article's `unlockAll`.
//!
//! The article kept every lock it took in `$lockedNames`, a field of its lock
//! object, and `unlockAll` called `unlock` on each. The idea is sound (a
//! process about to stop lets go of what it holds instead of making everyone
//! wait for the TTLs); the bug was in `unlock`, which deleted the key without
//! checking who held it. So `unlockAll` could delete, in one sweep, the locks
//! of every process that had taken over one of ours.
//!
//! Here a [`HeldLocks`] is a plain value that keeps [`LockGuard`]s, owned by
//! whoever took them: no global, so two parts of a process (or two tests)
//! never share one by accident. [`HeldLocks::release_all`] releases each
//! guard with the owner check of `lua/lock_release.lua` and reports what it
//! found for each lock, so a lock lost on the way is said, never deleted
//! from under its new holder.
//!
//! seckill itself does not need one: a purchase holds one lock at a time and
//! releases it at the end of its critical section. This is the article's API
//! for code that holds several (a batch job locking a few sales, say). A
//! `HeldLocks` is not shared between tasks; a task that needed to share one
//! would put it behind a `tokio::sync::Mutex`, because releasing awaits.

use std::collections::BTreeMap;

use redis::aio::ConnectionLike;

use super::{LockGuard, Release};

/// The guards of the locks this process holds, by lock key.
///
/// Dropping it releases nothing (a destructor cannot await): its locks then
/// expire with their TTLs, as a crashed holder's do.
#[derive(Debug, Default)]
pub struct HeldLocks {
    /// One guard per lock key. A map, not a list: a lock can have only one
    /// live holder, so a second guard for the same key means the first one's
    /// lock is gone (see [`HeldLocks::hold`]).
    guards: BTreeMap<String, LockGuard>,
}

/// What [`HeldLocks::release_all`] found for one lock.
#[derive(Debug)]
pub struct Unlocked {
    /// The lock key.
    pub key: String,
    /// What release found, or why it could not ask Redis. A lock whose
    /// release failed stays in the [`HeldLocks`], to be tried again.
    pub outcome: redis::RedisResult<Release>,
}

impl HeldLocks {
    pub fn new() -> Self {
        Self::default()
    }

    /// Keep a guard. Returns the guard it replaces for the same key, if any:
    /// that one's lock had already been lost (the new guard could not have
    /// been taken while it held), so there is nothing to release with it.
    pub fn hold(&mut self, guard: LockGuard) -> Option<LockGuard> {
        self.guards.insert(guard.key().to_owned(), guard)
    }

    /// The guard of `key`, to check or extend the lock without letting go.
    pub fn get(&self, key: &str) -> Option<&LockGuard> {
        self.guards.get(key)
    }

    /// Stop keeping the guard of `key` and hand it back (to release one
    /// lock on its own, as the article's `unlock` took the name off its list).
    pub fn take(&mut self, key: &str) -> Option<LockGuard> {
        self.guards.remove(key)
    }

    /// How many guards are kept.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// Release every lock kept here, each only if it is still ours, and say
    /// what each release found, in key order.
    ///
    /// Every lock is tried even if an earlier one failed. A guard whose
    /// release reached Redis is gone from the set whatever the outcome
    /// (released, expired or somebody else's: in no case is it ours any
    /// more). A guard whose release failed on the way (a network error)
    /// stays, because its lock may still be held; call again to retry.
    #[doc(alias = "unlockAll")]
    pub async fn release_all<C: ConnectionLike + Send>(&mut self, conn: &mut C) -> Vec<Unlocked> {
        let mut report = Vec::with_capacity(self.guards.len());
        for (key, guard) in std::mem::take(&mut self.guards) {
            let outcome = guard.compare_and_delete(conn).await;
            if outcome.is_err() {
                self.guards.insert(key.clone(), guard);
            }
            report.push(Unlocked { key, outcome });
        }
        report
    }
}

#[cfg(test)]
mod tests {
    use redis::{Cmd, ErrorKind, Pipeline, RedisError, RedisFuture, Value};

    use super::*;

    /// A connection that answers every script with `1` ("released"), except
    /// the calls numbered in `fail` (0-based), which fail as a dropped
    /// connection would.
    struct Flaky {
        calls: usize,
        fail: Vec<usize>,
    }

    impl Flaky {
        /// Whether this call fails; counts it.
        fn fails(&mut self) -> bool {
            let call = self.calls;
            self.calls += 1;
            self.fail.contains(&call)
        }
    }

    impl ConnectionLike for Flaky {
        fn req_packed_command<'a>(&'a mut self, _cmd: &'a Cmd) -> RedisFuture<'a, Value> {
            unreachable!("a script is called in a pipeline (`scripts.rs`)")
        }

        /// A release: the script's call, alone in its pipeline.
        fn req_packed_commands<'a>(
            &'a mut self,
            _pipeline: &'a Pipeline,
            _offset: usize,
            count: usize,
        ) -> RedisFuture<'a, Vec<Value>> {
            let fails = self.fails();
            Box::pin(async move {
                if fails {
                    Err(RedisError::from((ErrorKind::Io, "connection dropped")))
                } else {
                    Ok(vec![Value::Int(1); count])
                }
            })
        }

        fn get_db(&self) -> i64 {
            0
        }
    }

    fn guard(key: &str, fence: u64) -> LockGuard {
        LockGuard {
            key: key.to_owned(),
            value: format!("{fence}:test:nonce{fence}"),
            fence,
        }
    }

    #[tokio::test]
    async fn a_release_that_failed_on_the_way_keeps_its_guard_for_a_retry() {
        let mut held = HeldLocks::new();
        for (fence, key) in (1..).zip(["a", "b", "c"]) {
            assert!(held.hold(guard(key, fence)).is_none());
        }
        // The second release (key "b") fails; the others go through.
        let mut conn = Flaky {
            calls: 0,
            fail: vec![1],
        };
        let report = held.release_all(&mut conn).await;
        let keys: Vec<&str> = report
            .iter()
            .map(|unlocked| unlocked.key.as_str())
            .collect();
        assert_eq!(keys, ["a", "b", "c"], "every lock is tried, in key order");
        assert_eq!(report[0].outcome.as_ref().ok(), Some(&Release::Released));
        assert!(report[1].outcome.is_err());
        assert_eq!(report[2].outcome.as_ref().ok(), Some(&Release::Released));
        assert_eq!(held.len(), 1);
        assert!(held.get("b").is_some(), "the failed one is kept");

        let again = held.release_all(&mut conn).await;
        assert_eq!(again.len(), 1);
        assert_eq!(again[0].outcome.as_ref().ok(), Some(&Release::Released));
        assert!(held.is_empty());
    }

    #[test]
    fn a_second_guard_for_a_key_replaces_the_lost_one() {
        let mut held = HeldLocks::new();
        assert!(held.hold(guard("a", 1)).is_none());
        let replaced = held.hold(guard("a", 2)).expect("the first guard back");
        assert_eq!(replaced.fence(), 1);
        assert_eq!(held.get("a").map(LockGuard::fence), Some(2));
        assert_eq!(held.take("a").map(|guard| guard.fence()), Some(2));
        assert!(held.is_empty());
    }
}
