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
    /// `max_age`, otherwise `read`'s result (kept for the next callers; an
    /// error is not kept).
    pub async fn get<E>(
        &self,
        max_age: Duration,
        read: impl Future<Output = Result<T, E>>,
    ) -> Result<(Instant, T), E> {
        let mut last = self.last.lock().await;
        if let Some((taken, value)) = &*last
            && taken.elapsed() < max_age
        {
            return Ok((*taken, value.clone()));
        }
        let value = read.await?;
        let taken = Instant::now();
        *last = Some((taken, value.clone()));
        Ok((taken, value))
    }

    /// Forget the value: the next caller reads it again.
    pub async fn forget(&self) {
        *self.last.lock().await = None;
    }
}
