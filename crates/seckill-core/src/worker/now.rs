//! A worker's clocks for what it does now and then (the payment sweep, the
//! pass over every sale ever made).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Something a worker does now and then: due on the first ask, then once
/// `every` has passed since it was last due.
pub(super) struct Now {
    every: Duration,
    /// When it was last due; `None` until the first ask. A std Mutex: held
    /// for a read and a write, never across an await.
    last: Mutex<Option<Instant>>,
}

impl Now {
    pub(super) fn every(every: Duration) -> Self {
        Self {
            every,
            last: Mutex::new(None),
        }
    }

    /// Whether it is due (and, if so, note that it is being done).
    pub(super) fn due(&self) -> bool {
        let mut last = self.last.lock().expect("a worker's clock poisoned");
        let due = last.is_none_or(|at| at.elapsed() >= self.every);
        if due {
            *last = Some(Instant::now());
        }
        due
    }
}
