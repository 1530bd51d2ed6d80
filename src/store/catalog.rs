//! The sales a process has seen (a sale's row never changes after it is
//! created, apart from its `sold` counter, which is not kept here), the ids
//! it found missing, and the reads of a sale in flight. Filled by
//! `Store::sale` (`sales.rs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::OnceCell;

use crate::domain::Sale;

/// One read of a sale from PostgreSQL, shared by every request that misses
/// it meanwhile: the sale, or `None` when there is none by that id.
pub(super) type Loading = Arc<OnceCell<Option<Arc<Sale>>>>;

/// How long a process remembers that a sale id does not exist. Short: a
/// sale created on another instance is unknown here for at most this long.
const MISSING_FOR: Duration = Duration::from_secs(1);
/// The most unknown ids remembered at once; past it the memory starts over.
const MISSING_MAX: usize = 10_000;

/// The sales a process has seen, by id, and the ids it found missing.
#[derive(Debug, Default)]
pub struct Catalog {
    /// A std lock, not a tokio one: nothing awaits while it is held.
    /// Written once per sale, by the request that reads it.
    cache: RwLock<HashMap<i64, Arc<Sale>>>,
    /// The reads of a sale in flight, by id: requests that miss the cache
    /// while one is reading wait for its answer. A std Mutex, held for a
    /// lookup or an insert; an entry is removed when its read is over.
    loading: Mutex<HashMap<i64, Loading>>,
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

    pub(super) fn cache(&self, sale: Sale) -> Arc<Sale> {
        let sale = Arc::new(sale);
        self.cache
            .write()
            .expect("catalog lock poisoned")
            .insert(sale.id, Arc::clone(&sale));
        sale
    }

    /// The read of `id` in flight, or a new one to start.
    pub(super) fn loading(&self, id: i64) -> Loading {
        let mut loading = self.loading.lock().expect("catalog lock poisoned");
        Arc::clone(loading.entry(id).or_default())
    }

    /// `load` is over (read, or failed): a later miss starts its own.
    pub(super) fn loaded(&self, id: i64, load: &Loading) {
        let mut loading = self.loading.lock().expect("catalog lock poisoned");
        if loading
            .get(&id)
            .is_some_and(|current| Arc::ptr_eq(current, load))
        {
            loading.remove(&id);
        }
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
