//! What the sending produces: one [`Sample`] per answered request, the
//! [`RunData`] of a whole run, and the [`Live`] counters the progress
//! display reads while the lanes are still sending. Times are kept as
//! plain microseconds from the start, which is all the statistics need.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use uuid::Uuid;

use crate::answer::AnswerKind;
use crate::http::PurchaseAnswer;

/// One request, as the generator saw it. Times are microseconds from the
/// run's start (the release, for a burst).
#[derive(Debug, Clone)]
pub struct Sample {
    pub user: u32,
    pub outcome: AnswerKind,
    pub order_id: Option<Uuid>,
    /// A `503 unconfirmed` ([`crate::answer::Classified::unconfirmed`]).
    pub unconfirmed: bool,
    pub instance: Option<Arc<str>>,
    /// The HTTP status; `None` when no answer came.
    pub status: Option<u16>,
    /// Whether the answer carried `Retry-After`.
    pub retry_after: bool,
    /// When the request was due.
    pub intended_us: u64,
    /// When it was handed to the connection.
    pub sent_us: u64,
    /// When the whole answer was in.
    pub done_us: u64,
}

impl Sample {
    pub(super) fn new(
        user: u32,
        answer: PurchaseAnswer,
        intended: Duration,
        sent: Duration,
        done: Duration,
    ) -> Self {
        Self {
            user,
            outcome: answer.classified.outcome,
            order_id: answer.classified.order_id,
            unconfirmed: answer.classified.unconfirmed,
            instance: answer.instance,
            status: answer.status,
            retry_after: answer.retry_after,
            intended_us: micros_of(intended),
            sent_us: micros_of(sent),
            done_us: micros_of(done),
        }
    }

    /// Latency as the buyer experiences it: from when the request was due.
    pub(crate) fn latency_us(&self) -> u64 {
        self.done_us.saturating_sub(self.intended_us)
    }
}

/// What a scenario produced.
#[derive(Debug, Default)]
pub struct RunData {
    pub samples: Vec<Sample>,
    /// Connections that could not be opened before the start.
    pub connect_errors: u64,
    /// `rate` sends dropped because no connection came free in time.
    pub dropped: u64,
    /// When each of them was due, in µs after the release.
    pub dropped_at_us: Vec<u64>,
    /// Start (release) to the last answer.
    pub wall: Duration,
    /// When the lanes were released: every sample's times count from here.
    pub started: Option<Instant>,
}

/// Counters the progress display reads while a scenario runs.
///
/// Atomics, not a lock: every lane thread adds to them, and nobody needs
/// the counts to agree with each other at one instant.
#[derive(Debug, Default)]
pub struct Live {
    /// Connections opened so far.
    pub connected: AtomicU64,
    /// Connections that could not be opened.
    pub connect_failed: AtomicU64,
    /// Answers so far, by kind in the order of [`AnswerKind::ALL`].
    pub answered: [AtomicU64; AnswerKind::ALL.len()],
}

impl Live {
    pub(super) fn answer(&self, outcome: AnswerKind) {
        self.answered[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn answers(&self) -> [u64; AnswerKind::ALL.len()] {
        std::array::from_fn(|i| self.answered[i].load(Ordering::Relaxed))
    }
}

/// A duration in whole microseconds, the unit of a [`Sample`]'s times.
pub(crate) fn micros_of(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}
