//! A value read once and served for a while: the storefront's index
//! (`index.rs`) and each sale's snapshot for its open pages (`live.rs`).
//!
//! The race it prevents is the stampede: when the value goes stale, every
//! caller arriving at that moment would read it again (a PostgreSQL query,
//! a Redis read each). The value sits behind a tokio Mutex that is held
//! across the read on purpose, so that they wait for the one read under
//! way and share its result.

use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// The last read of a value, and when it was taken.
pub struct Fresh<T> {
    last: Mutex<Option<(Instant, T)>>,
}

impl<T> Default for Fresh<T> {
    fn default() -> Self {
        Self {
            last: Mutex::new(None),
        }
    }
}

impl<T: Clone> Fresh<T> {
    /// The value and when it was read: the last read if it is younger than
    /// `max_age`, otherwise the result of `read()` (kept for the next
    /// callers; an error is not kept).
    ///
    /// `read` makes the read's future only once the lock is held, so that
    /// this future never holds both at once: every open sale page waits in
    /// one, and ten thousand of them made it 70 MiB larger.
    pub async fn get<E, F: Future<Output = Result<T, E>>>(
        &self,
        max_age: Duration,
        read: impl FnOnce() -> F,
    ) -> Result<(Instant, T), E> {
        let mut last = self.last.lock().await;
        if let Some((taken, value)) = &*last
            && taken.elapsed() < max_age
        {
            return Ok((*taken, value.clone()));
        }
        let value = read().await?;
        let taken = Instant::now();
        *last = Some((taken, value.clone()));
        Ok((taken, value))
    }

    /// Forget the value: the next caller reads it again.
    pub async fn forget(&self) {
        *self.last.lock().await = None;
    }
}
