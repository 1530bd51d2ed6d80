//! A value read once and served for a while: the storefront's index
//! (`index.rs`) and each sale's snapshot for its open pages (`live.rs`).
//!
//! The race it prevents is the stampede: when the value goes stale, every
//! caller arriving at that moment would read it again (a PostgreSQL query,
//! a Redis read each). The value sits behind a tokio Mutex that is held
//! across the read on purpose, so that they wait for the one read under
//! way and share its result.
//!
//! The read runs as a task on the runtime the caller names (the store's,
//! see `Store::runtime`), and that task holds the lock, keeps the value
//! and lets the lock go. Not the first caller's request: its HTTP worker
//! runs one task at a time, and in a burst it has thousands of new
//! connections ahead of it, while every other caller, on every worker,
//! waits for the lock (`tests/it/runtimes.rs`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Mutex;

/// The last read of a value, and when it was taken.
pub struct Fresh<T> {
    last: Arc<Mutex<Option<(Instant, T)>>>,
}

impl<T> Default for Fresh<T> {
    fn default() -> Self {
        Self {
            last: Arc::new(Mutex::new(None)),
        }
    }
}

impl<T: Clone + Send + Sync + 'static> Fresh<T> {
    /// The value and when it was read: the last read if it is younger than
    /// `max_age`, otherwise the result of `read()`, run as a task on
    /// `runtime` that keeps it for the next callers (an error is not
    /// kept). A caller that stops waiting leaves the read to finish, and
    /// its value is kept all the same.
    ///
    /// `read` makes the read's future only once the lock is held, and the
    /// task holds it, so that this future never holds both at once: every
    /// open sale page waits in one, and ten thousand of them made it 70 MiB
    /// larger.
    pub async fn get<E, F>(
        &self,
        runtime: &tokio::runtime::Handle,
        max_age: Duration,
        read: impl FnOnce() -> F,
    ) -> Result<(Instant, T), E>
    where
        F: Future<Output = Result<T, E>> + Send + 'static,
        E: From<anyhow::Error> + Send + 'static,
    {
        let mut last = Arc::clone(&self.last).lock_owned().await;
        if let Some((taken, value)) = &*last
            && taken.elapsed() < max_age
        {
            return Ok((*taken, value.clone()));
        }
        let read = read();
        runtime
            .spawn(async move {
                let value = read.await?;
                let taken = Instant::now();
                *last = Some((taken, value.clone()));
                Ok((taken, value))
            })
            .await
            .map_err(|error| E::from(anyhow::Error::new(error).context("the read's task")))?
    }

    /// Forget the value: the next caller reads it again.
    pub async fn forget(&self) {
        *self.last.lock().await = None;
    }
}
