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

    /// Whether it is due. It stays due until [`Now::done`]: a pass that
    /// failed half-way is due again on the next ask, not `every` later.
    pub(super) fn due(&self) -> bool {
        let last = self.last.lock().expect("a worker's clock poisoned");
        last.is_none_or(|at| at.elapsed() >= self.every)
    }

    /// Note that it was done, from `started` (when the caller asked).
    pub(super) fn done(&self, started: Instant) {
        *self.last.lock().expect("a worker's clock poisoned") = Some(started);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_due_stays_due_until_it_is_done() {
        let now = Now::every(Duration::from_secs(600));
        assert!(now.due());
        // A pass that failed half-way did not do it: due again.
        assert!(now.due());
        now.done(Instant::now());
        assert!(!now.due());
    }
}
