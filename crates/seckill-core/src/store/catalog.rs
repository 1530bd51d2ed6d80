//! The sales a process has seen (a sale's row never changes after it is
//! created, apart from its `sold` counter, which is not kept here), the ids
//! it found missing, and the reads of a sale in flight. Filled by
//! `Store::sale` (`sales.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use futures_util::future::{self, BoxFuture, FutureExt, Shared};

use crate::domain::Sale;
use crate::failure::Judged;

/// One read of a sale from PostgreSQL, shared by every request that misses
/// it meanwhile: the sale, `None` when there is none by that id, or the
/// failure, judged once.
pub(super) type SharedRead = Shared<BoxFuture<'static, Result<Option<Arc<Sale>>, Judged>>>;

/// How long a process remembers that a sale id does not exist. Short: a
/// sale created on another instance is unknown here for at most this long.
const MISSING_FOR: Duration = Duration::from_secs(1);
/// The most unknown ids remembered at once; past it the memory starts over.
const MISSING_MAX: usize = 10_000;

/// The sales a process has seen, by id, the ids it found missing, and the
/// reads of a sale in flight.
#[derive(Debug, Default)]
pub(crate) struct Catalog {
    /// A std lock, not a tokio one: nothing awaits while it is held.
    /// Written once per sale, by the request that reads it.
    cache: RwLock<HashMap<i64, Arc<Sale>>>,
    /// The reads of a sale in flight, by id: requests that miss the cache
    /// while one is reading wait for its answer. A std Mutex, held for a
    /// lookup or an insert (the cache's lock is taken inside it, never the
    /// other way round); an entry is removed when its read is over.
    loading: Mutex<HashMap<i64, SharedRead>>,
    /// Reads of a sale from PostgreSQL started.
    reads: AtomicU64,
    /// Ids PostgreSQL had no sale for, and when it said so: a flood of
    /// lookups of made-up ids costs one query per id per [`MISSING_FOR`],
    /// not one each. A std Mutex, held for a lookup or an insert. Written by
    /// `Store::sale`; an id is forgotten when its sale is created here.
    missing: Mutex<HashMap<i64, Instant>>,
    /// The highest sale id PostgreSQL had, and when it said so: a made-up id
    /// above it is answered "no such sale" without a query for
    /// [`MISSING_FOR`], however many different ones come. Read after a
    /// miss; raised when a sale is created here.
    max_id: Mutex<Option<(i64, Instant)>>,
}

impl Catalog {
    pub(super) fn cached(&self, id: i64) -> Option<Arc<Sale>> {
        let cache = self.cache.read().expect("catalog lock poisoned");
        cache.get(&id).map(Arc::clone)
    }

    /// The ids of the sales cached here that ended before `before`.
    pub(crate) fn ended_before(&self, before: chrono::DateTime<chrono::Utc>) -> Vec<i64> {
        let cache = self.cache.read().expect("catalog lock poisoned");
        cache
            .values()
            .filter(|sale| sale.ends_at.is_some_and(|end| end < before))
            .map(|sale| sale.id)
            .collect()
    }

    /// Forget sale `id`: a later lookup reads it from PostgreSQL again.
    pub(crate) fn forget(&self, id: i64) {
        let mut cache = self.cache.write().expect("catalog lock poisoned");
        cache.remove(&id);
        crate::map_memory::shrink_if_sparse(&mut cache);
    }

    /// How many sales are cached.
    pub(crate) fn len(&self) -> usize {
        self.cache.read().expect("catalog lock poisoned").len()
    }

    pub(super) fn cache(&self, sale: Sale) -> Arc<Sale> {
        let sale = Arc::new(sale);
        self.cache
            .write()
            .expect("catalog lock poisoned")
            .insert(sale.id, Arc::clone(&sale));
        sale
    }

    /// The read of sale `id` in flight, or, when there is none, one that
    /// `read` starts. The read runs in a task of its own on `runtime` (the
    /// store's: not behind a burst's requests, see `Store::runtime`), so a
    /// request that stops waiting (its client went away) neither stops it
    /// nor leaves it behind; the task removes it once it has its answer
    /// (and has cached the sale it found), so an error or an absent sale is
    /// not remembered by it.
    pub(super) fn reading<F>(
        self: &Arc<Self>,
        runtime: &tokio::runtime::Handle,
        id: i64,
        read: impl FnOnce() -> F,
    ) -> SharedRead
    where
        F: Future<Output = anyhow::Result<Option<Arc<Sale>>>> + Send + 'static,
    {
        let mut loading = self.loading.lock().expect("catalog lock poisoned");
        // Cached while this request waited for the lock: the read that
        // cached it may be over and gone.
        if let Some(sale) = self.cached(id) {
            return future::ready(Ok(Some(sale))).boxed().shared();
        }
        let reading = loading.entry(id).or_insert_with(|| {
            let catalog = Arc::clone(self);
            let read = read();
            let task = runtime.spawn(async move {
                let answer = read.await.map_err(|error| Judged::of(&error));
                catalog.read_over(id);
                answer
            });
            let catalog = Arc::clone(self);
            async move {
                task.await.unwrap_or_else(|error| {
                    // The task did not finish (it panicked, or its runtime
                    // is shutting down): its entry goes here instead, so
                    // that the next lookup reads the sale again.
                    catalog.read_over(id);
                    Err(Judged::of(&anyhow::Error::new(error)))
                })
            }
            .boxed()
            .shared()
        });
        reading.clone()
    }

    /// The read of sale `id` is over: the next lookup that misses the
    /// cache starts another.
    fn read_over(&self, id: i64) {
        self.loading
            .lock()
            .expect("catalog lock poisoned")
            .remove(&id);
    }

    /// Reads of a sale from PostgreSQL this process started: one per sale
    /// it has not seen, however many requests missed it at once.
    #[cfg(feature = "test-support")]
    pub(crate) fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    pub(super) fn count_read(&self) {
        self.reads.fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn known_missing(&self, id: i64) -> bool {
        let missing = self.missing.lock().expect("catalog lock poisoned");
        missing
            .get(&id)
            .is_some_and(|at| at.elapsed() < MISSING_FOR)
    }

    pub(super) fn note_missing(&self, id: i64) {
        let mut missing = self.missing.lock().expect("catalog lock poisoned");
        if missing.len() >= MISSING_MAX {
            missing.clear();
        }
        missing.insert(id, Instant::now());
    }

    pub(super) fn forget_missing(&self, id: i64) {
        self.missing
            .lock()
            .expect("catalog lock poisoned")
            .remove(&id);
        let mut max_id = self.max_id.lock().expect("catalog lock poisoned");
        if let Some((max, _)) = max_id.as_mut() {
            *max = (*max).max(id);
        }
    }

    /// Whether `id` is above the highest id PostgreSQL had a moment ago.
    pub(super) fn beyond_max(&self, id: i64) -> bool {
        let max_id = self.max_id.lock().expect("catalog lock poisoned");
        max_id.is_some_and(|(max, at)| id > max && at.elapsed() < MISSING_FOR)
    }

    pub(super) fn note_max(&self, max: i64) {
        *self.max_id.lock().expect("catalog lock poisoned") = Some((max, Instant::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that panics answers its waiters with an error, and is not
    /// remembered: the next lookup reads again.
    #[tokio::test]
    async fn a_read_that_panicked_is_forgotten() {
        let catalog = Arc::new(Catalog::default());
        let runtime = tokio::runtime::Handle::current();
        let panicking = catalog.reading(&runtime, 7, || async {
            panic!("the read of sale 7 broke");
            #[allow(unreachable_code)]
            Ok(None)
        });
        assert!(panicking.await.is_err());
        let again = catalog.reading(&runtime, 7, || async { Ok(None) });
        assert!(
            matches!(again.await, Ok(None)),
            "the failure was remembered"
        );
        assert!(catalog.loading.lock().expect("unpoisoned").is_empty());
    }
}
