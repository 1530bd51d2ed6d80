//! How long to wait after failures in a row, for loops that retry a server:
//! the worker while PostgreSQL or Redis is down, the sale events listener
//! while its pub/sub connection is lost.
//!
//! Exponential: each failure doubles the pause, so a server that is down for
//! long is asked about rarely, and one that was down briefly is found again
//! quickly. Capped, so that a long outage does not turn into a long wait
//! after it ends.

use std::time::Duration;

/// The pause after the first failure.
const FIRST: Duration = Duration::from_millis(100);
/// The longest pause.
pub(crate) const MAX: Duration = Duration::from_secs(5);

/// The pause after `failures` failures in a row: 100 ms, 200 ms, 400 ms, ...
/// up to [`MAX`].
pub(crate) fn after(failures: u32) -> Duration {
    FIRST
        .saturating_mul(1u32 << failures.saturating_sub(1).min(10))
        .min(MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_backoff_doubles_up_to_the_cap() {
        assert_eq!(after(1), Duration::from_millis(100));
        assert_eq!(after(2), Duration::from_millis(200));
        assert_eq!(after(4), Duration::from_millis(800));
        assert_eq!(after(30), MAX);
    }
}
