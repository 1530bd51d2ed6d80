//! The reserves whose answer was lost, kept to be asked again.
//!
//! A reserve that ran in Redis and whose answer never came back (a
//! timeout, a dropped connection) holds its jobs under a lease, and nobody
//! runs them. Asked again with the same token, the reserve hands out the
//! same jobs, leased anew and uncharged (`lua/queue_reserve.lua`); without
//! it they came back when the lease ran out, each charged an attempt, and
//! a job whose reserves lost their answers often enough was dead-lettered
//! with its buyers' orders. So the worker keeps each such token, by
//! queue, and its next reserve of that queue uses it. A token kept past
//! its lease finds no record and reserves afresh: nothing is lost by
//! keeping one too long.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use crate::queue::ReserveToken;

/// How many tokens are kept for one queue: a worker has a few batches of
/// a sale in flight at once (`run.rs`), each reserved on its own.
const KEPT_PER_QUEUE: usize = 8;

/// The tokens of reserves whose answer was lost, by queue (its `due`
/// key). A std Mutex: held only to push or pop, never across an await.
#[derive(Default)]
pub(super) struct Unanswered(Mutex<HashMap<String, Vec<ReserveToken>>>);

impl Unanswered {
    /// A token whose reserve of `queue` lost its answer, or a new one.
    pub(super) fn take(&self, queue: &str) -> ReserveToken {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(tokens) = kept.get_mut(queue) else {
            return ReserveToken::new();
        };
        let token = tokens.pop().unwrap_or_default();
        if tokens.is_empty() {
            kept.remove(queue);
        }
        token
    }

    /// Keep `token`, whose reserve of `queue` lost its answer. The race it
    /// closes: two batches of one queue reserved at once, both answers
    /// lost; each token is asked again by a later reserve.
    pub(super) fn keep(&self, queue: String, token: ReserveToken) {
        let mut kept = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        let tokens = kept.entry(queue).or_default();
        if tokens.len() < KEPT_PER_QUEUE {
            tokens.push(token.again());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_token_is_taken_once_by_its_own_queue() {
        let unanswered = Unanswered::default();
        let lost = ReserveToken::new();
        unanswered.keep("a".into(), lost.clone());
        assert_ne!(unanswered.take("b"), lost.clone().again());
        assert_eq!(unanswered.take("a"), lost.clone().again());
        assert_ne!(unanswered.take("a"), lost.again());
    }
}
