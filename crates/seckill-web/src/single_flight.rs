//! A value read once and served for a while: the storefront's index
//! (`pages/index.rs`) and each sale's snapshot for its open pages (`live.rs`).
//!
//! The race it prevents is the stampede: when the value goes stale, every
//! caller arriving at that moment would read it again (a PostgreSQL query,
//! a Redis read each). A read holds the value's turn (a tokio Mutex), so
//! that callers who find the value stale wait for the one read under way
//! and take its result; callers who find it fresh take it at once, from a
//! plain lock held for a clone, without queueing for the turn.
//!
//! The read runs as a task on the runtime the caller names (the store's,
//! see `Store::runtime`), and that task holds the turn, keeps the value
//! and lets the turn go. Not the first caller's request: its HTTP worker
//! runs one task at a time, and in a burst it has thousands of new
//! connections ahead of it (`tests/it/runtimes.rs`). The turn still passes
//! from one waiting caller to the next, each on its own worker: that queue
//! forms only while a read is under way.

use std::any::Any;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// The last read of a value, and when it began.
pub struct SingleFlight<T> {
    /// The last read, taken by callers without waiting.
    last: Arc<Mutex<Last<T>>>,
    /// Held across a read, by the read's task: one read at a time.
    turn: Arc<tokio::sync::Mutex<()>>,
}

/// What the last read left.
struct Last<T> {
    /// Its value, and when its read began.
    value: Option<(Instant, T)>,
    /// Its failure, and when it failed, for the callers who waited for it
    /// (an error of the caller's own type, see [`Shared`]).
    failed: Option<(Instant, Box<dyn Any + Send>)>,
    /// Raised by [`SingleFlight::forget`]: a read that started before keeps
    /// nothing.
    generation: u64,
}

/// An error that can be handed to every caller that waited for the one
/// read that failed, each its own copy, judged as the original was (a
/// server that is down stays "try again" for each).
pub trait Shared: Sized {
    fn share(&self) -> Self;
}

impl Shared for anyhow::Error {
    fn share(&self) -> Self {
        seckill_core::failure::Judged::of(self).to_error()
    }
}

impl<T> Default for SingleFlight<T> {
    fn default() -> Self {
        Self {
            last: Arc::new(Mutex::new(Last {
                value: None,
                failed: None,
                generation: 0,
            })),
            turn: Arc::default(),
        }
    }
}

impl<T: Clone + Send + 'static> SingleFlight<T> {
    /// The value and when its read began: the last read if it is younger
    /// than `max_age`, otherwise the result of `read()`, run as a task on
    /// `runtime` that keeps it for the next callers. A caller that stops
    /// waiting leaves the read to finish, and its value is kept all the
    /// same.
    ///
    /// A failed read is not kept for later callers, but it is shared with
    /// every caller that was already waiting for it. The race this closes:
    /// while PostgreSQL or Redis is down, each waiting caller would read in
    /// turn, each waiting out the pool's timeout (the n-th caller about n
    /// times 3 s), with sockets piling up for the whole outage.
    ///
    /// A value is as old as the moment its read began, not the moment it
    /// came back: what it says may have changed since the read was sent,
    /// and a read that took long (a busy machine, a slow `WAIT`) must not
    /// make it look fresher than it is. (The race this closes: a waiting
    /// room's look, kept 200 ms from its answer, told a place read before
    /// a replica stopped up to 200 ms plus the read's own time after.)
    ///
    /// `read` makes the read's future only once the turn is taken, and the
    /// task owns it: a caller's future holds neither while it waits, so the
    /// many callers waiting (every open sale page waits in one) stay small.
    pub async fn get<E, F>(
        &self,
        runtime: &tokio::runtime::Handle,
        max_age: Duration,
        read: impl FnOnce() -> F,
    ) -> Result<(Instant, T), E>
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        E: From<anyhow::Error> + Shared + Send + 'static,
    {
        let arrived = Instant::now();
        if let Some(fresh) = self.fresh(max_age) {
            return Ok(fresh);
        }
        let turn = Arc::clone(&self.turn).lock_owned().await;
        // Read by the caller ahead of this one in the queue.
        if let Some(fresh) = self.fresh(max_age) {
            return Ok(fresh);
        }
        // Or failed, after this caller arrived: the same answer.
        if let Some(failure) = self.failed_since::<E>(arrived) {
            return Err(failure);
        }
        let last = Arc::clone(&self.last);
        let generation = lock(&last).generation;
        let read = read();
        runtime
            .spawn(async move {
                let _turn = turn;
                let began = Instant::now();
                let outcome = read.await;
                let mut last = lock(&last);
                if last.generation == generation {
                    match &outcome {
                        Ok(value) => last.value = Some((began, value.clone())),
                        // A failure counts from when it came back: it is
                        // shared with the callers who arrived before that.
                        Err(error) => {
                            last.failed = Some((Instant::now(), Box::new(error.share())));
                        }
                    }
                }
                outcome.map(|value| (began, value))
            })
            .await
            .map_err(|error| E::from(anyhow::Error::new(error).context("the read's task")))?
    }

    /// The last read, if younger than `max_age`.
    fn fresh(&self, max_age: Duration) -> Option<(Instant, T)> {
        lock(&self.last)
            .value
            .as_ref()
            .filter(|(taken, _)| taken.elapsed() < max_age)
            .cloned()
    }

    /// A copy of the last read's failure, if it failed after `arrived`.
    fn failed_since<E: Shared + 'static>(&self, arrived: Instant) -> Option<E> {
        let last = lock(&self.last);
        let (at, failure) = last.failed.as_ref()?;
        (*at >= arrived)
            .then(|| failure.downcast_ref::<E>().map(E::share))
            .flatten()
    }

    /// Forget the value: the next caller reads it again, and a read under
    /// way keeps nothing of what it read. Does not wait for that read
    /// (nor, with Redis down, for the pool's timeout): a caller that
    /// forgets many values, one after the other, is not held up by any.
    pub(crate) fn forget(&self) {
        let mut last = lock(&self.last);
        last.value = None;
        last.generation += 1;
    }
}

fn lock<T>(last: &Mutex<Last<T>>) -> MutexGuard<'_, Last<T>> {
    last.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};

    use super::*;

    const AGE: Duration = Duration::from_secs(60);

    /// A read that counts itself and takes a round trip's time.
    fn counted(reads: &Arc<AtomicU32>) -> impl Future<Output = anyhow::Result<u32>> + use<> {
        let reads = Arc::clone(reads);
        async move {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(reads.fetch_add(1, Ordering::SeqCst) + 1)
        }
    }

    /// Ten callers asking for the value at once, each by `read`; their
    /// answers.
    async fn ten_callers_at_once<F>(
        fresh: &Arc<SingleFlight<u32>>,
        reads: &Arc<AtomicU32>,
        read: fn(&Arc<AtomicU32>) -> F,
    ) -> Vec<anyhow::Result<(Instant, u32)>>
    where
        F: Future<Output = anyhow::Result<u32>> + Send + 'static,
    {
        let runtime = tokio::runtime::Handle::current();
        let callers: Vec<_> = (0..10)
            .map(|_| {
                let (fresh, reads, runtime) =
                    (Arc::clone(fresh), Arc::clone(reads), runtime.clone());
                tokio::spawn(async move { fresh.get(&runtime, AGE, || read(&reads)).await })
            })
            .collect();
        let mut answers = Vec::new();
        for caller in callers {
            answers.push(caller.await.expect("a caller"));
        }
        answers
    }

    #[tokio::test]
    async fn callers_arriving_together_share_one_read() {
        let (fresh, reads) = (
            Arc::new(SingleFlight::<u32>::default()),
            Arc::new(AtomicU32::new(0)),
        );
        for answer in ten_callers_at_once(&fresh, &reads, counted).await {
            assert_eq!(answer.expect("read").1, 1);
        }
        assert_eq!(reads.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_read_whose_caller_left_is_kept() {
        let fresh = SingleFlight::<u32>::default();
        let reads = Arc::new(AtomicU32::new(0));
        let runtime = tokio::runtime::Handle::current();
        let leaving = tokio::time::timeout(
            Duration::from_millis(1),
            fresh.get(&runtime, AGE, || counted(&reads)),
        );
        assert!(
            leaving.await.is_err(),
            "the caller left before the read ended"
        );
        let (_, value) = fresh
            .get(&runtime, AGE, || counted(&reads))
            .await
            .expect("read");
        assert_eq!(
            (value, reads.load(Ordering::SeqCst)),
            (1, 1),
            "one read, kept"
        );
    }

    /// A value is as old as its read's start: a read that took longer
    /// than the value may be kept is stale the moment it comes back, and
    /// the next caller reads again. (Timed from the answer, it was kept
    /// for a whole `max_age` more: 2 reads here would be 1.)
    #[tokio::test]
    async fn a_value_is_as_old_as_its_reads_start() {
        let runtime = tokio::runtime::Handle::current();
        let (fresh, reads) = (SingleFlight::default(), Arc::new(AtomicU32::new(0)));
        let slow = || {
            let reads = Arc::clone(&reads);
            async move {
                tokio::time::sleep(Duration::from_millis(300)).await;
                anyhow::Ok(reads.fetch_add(1, Ordering::SeqCst) + 1)
            }
        };
        let max_age = Duration::from_millis(200);
        let (began, first) = fresh.get(&runtime, max_age, slow).await.expect("read");
        assert!(began.elapsed() >= Duration::from_millis(300));
        let (_, second) = fresh.get(&runtime, max_age, slow).await.expect("read");
        assert_eq!((first, second), (1, 2), "the slow read's value was kept");
    }

    #[tokio::test]
    async fn a_fresh_value_is_taken_without_waiting_for_the_turn() {
        let fresh = SingleFlight::<u32>::default();
        let runtime = tokio::runtime::Handle::current();
        let read = || async { Ok::<_, anyhow::Error>(7) };
        fresh.get(&runtime, AGE, read).await.expect("read");
        // The turn held, as by a read under way, or a caller whose worker
        // is busy.
        let _turn = fresh.turn.lock().await;
        let taken = tokio::time::timeout(Duration::from_secs(1), fresh.get(&runtime, AGE, read));
        assert_eq!(
            taken
                .await
                .expect("not queued for the turn")
                .expect("read")
                .1,
            7
        );
    }

    /// A read that counts itself and fails after a slow round trip (a
    /// pool waiting out its timeout while the server is down).
    fn failing(reads: &Arc<AtomicU32>) -> impl Future<Output = anyhow::Result<u32>> + use<> {
        let reads = Arc::clone(reads);
        async move {
            tokio::time::sleep(Duration::from_millis(50)).await;
            reads.fetch_add(1, Ordering::SeqCst);
            Err(anyhow::anyhow!("the server is down"))
        }
    }

    #[tokio::test]
    async fn callers_waiting_for_a_read_that_fails_share_its_failure() {
        let (fresh, reads) = (
            Arc::new(SingleFlight::<u32>::default()),
            Arc::new(AtomicU32::new(0)),
        );
        let runtime = tokio::runtime::Handle::current();
        for answer in ten_callers_at_once(&fresh, &reads, failing).await {
            let failure = answer.expect_err("the read failed");
            assert!(
                failure.to_string().contains("the server is down"),
                "{failure}"
            );
        }
        assert_eq!(
            reads.load(Ordering::SeqCst),
            1,
            "one read for every waiting caller"
        );
        // A caller who comes after the failure tries again.
        fresh
            .get(&runtime, AGE, || failing(&reads))
            .await
            .expect_err("still down");
        assert_eq!(reads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_read_under_way_when_the_value_is_forgotten_keeps_nothing() {
        let fresh = Arc::new(SingleFlight::<u32>::default());
        let reads = Arc::new(AtomicU32::new(0));
        let runtime = tokio::runtime::Handle::current();
        let under_way = {
            let (fresh, reads, runtime) = (Arc::clone(&fresh), Arc::clone(&reads), runtime.clone());
            tokio::spawn(async move { fresh.get(&runtime, AGE, || counted(&reads)).await })
        };
        tokio::time::sleep(Duration::from_millis(5)).await;
        // Does not wait for the read under way.
        fresh.forget();
        assert_eq!(under_way.await.expect("a caller").expect("read").1, 1);
        let (_, value) = fresh
            .get(&runtime, AGE, || counted(&reads))
            .await
            .expect("read");
        assert_eq!(value, 2, "the read that started before the forget was kept");
    }

    #[tokio::test]
    async fn a_forgotten_value_is_read_again() {
        let fresh = SingleFlight::<u32>::default();
        let reads = Arc::new(AtomicU32::new(0));
        let runtime = tokio::runtime::Handle::current();
        fresh
            .get(&runtime, AGE, || counted(&reads))
            .await
            .expect("read");
        fresh.forget();
        let (_, value) = fresh
            .get(&runtime, AGE, || counted(&reads))
            .await
            .expect("read");
        assert_eq!(value, 2);
    }
}
