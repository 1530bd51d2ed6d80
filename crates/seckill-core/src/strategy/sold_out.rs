//! What an instance remembers of the sales it saw sold out: a purchase
//! of one within the refresh period is answered without Redis.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Per-instance memory of which sales were seen sold out, and when.
#[derive(Debug, Default)]
pub(crate) struct SoldOutFlags {
    /// A std Mutex, not a tokio one: it is held for a map lookup and never
    /// across an await.
    seen: Mutex<HashMap<i64, Instant>>,
}

/// What an instance knows about a sale's stock without asking Redis.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flag {
    /// No purchase here has seen it sold out.
    Unknown,
    /// Seen sold out within the refresh period: answer without Redis.
    SoldOut,
    /// Seen sold out, but long enough ago that a unit may have come back.
    Stale,
}

impl SoldOutFlags {
    pub(crate) fn check(&self, sale_id: i64, refresh: Duration) -> Flag {
        match self
            .seen
            .lock()
            .expect("sold-out flags poisoned")
            .get(&sale_id)
        {
            None => Flag::Unknown,
            Some(at) if at.elapsed() < refresh => Flag::SoldOut,
            Some(_) => Flag::Stale,
        }
    }

    pub(crate) fn set(&self, sale_id: i64) {
        self.seen
            .lock()
            .expect("sold-out flags poisoned")
            .insert(sale_id, Instant::now());
    }

    /// How many sales have a flag here.
    pub(crate) fn len(&self) -> usize {
        self.seen.lock().expect("sold-out flags poisoned").len()
    }

    pub(crate) fn clear(&self, sale_id: i64) {
        let mut seen = self.seen.lock().expect("sold-out flags poisoned");
        seen.remove(&sale_id);
        crate::map_memory::shrink_if_sparse(&mut seen);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sold_out_flag_is_trusted_only_within_the_refresh_period() {
        let flags = SoldOutFlags::default();
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::Unknown);
        flags.set(1);
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::SoldOut);
        assert_eq!(flags.check(1, Duration::ZERO), Flag::Stale);
        assert_eq!(flags.check(2, Duration::from_secs(60)), Flag::Unknown);
        flags.clear(1);
        assert_eq!(flags.check(1, Duration::from_secs(60)), Flag::Unknown);
    }
}
