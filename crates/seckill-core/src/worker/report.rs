//! What a worker step did, counted, and said in the log.

use crate::store::Written;

/// What one batch did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchReport {
    /// Work reserved from the queue: orders (a pass's job counts the
    /// orders it carries), or deadline jobs; a job that does not decode
    /// counts one.
    pub reserved: usize,
    /// Orders written as confirmed.
    pub confirmed: usize,
    /// Orders PostgreSQL refused (stored as rejected).
    pub rejected: usize,
    /// Orders already in PostgreSQL (a redelivery): no-ops.
    pub redelivered: usize,
    /// Jobs of crashed workers put back on the queue by this reserve.
    pub reclaimed: u64,
    /// Jobs that ran out of attempts and were dead-lettered by this reserve.
    pub(crate) dead_lettered: u64,
    /// Unpaid orders cancelled at their deadline (their unit is back on sale).
    pub cancelled: usize,
    /// Deadline jobs run to their end: their moment had passed (whether or
    /// not they found an order unpaid: a paid one needs nothing), or they
    /// named no order with a deadline.
    pub passed: usize,
    /// Deadlines that came before PostgreSQL's `pay_by` and wait again.
    pub not_due: usize,
    /// Payment deadlines put back in their queue by a sweep (Redis had lost
    /// them; `sweep.rs`).
    pub swept: u64,
    /// Orders that failed by themselves (their job charged an attempt, to
    /// run again later), or deadline jobs that did.
    pub failed: usize,
    /// Orders not written because the sale was loaded into Redis again
    /// after their batch was reserved (a wipe took them; see
    /// `Worker::superseded`).
    pub superseded: usize,
}

impl BatchReport {
    /// Add another report's counts to this one.
    pub fn add(&mut self, other: BatchReport) {
        self.reserved += other.reserved;
        self.confirmed += other.confirmed;
        self.rejected += other.rejected;
        self.redelivered += other.redelivered;
        self.reclaimed += other.reclaimed;
        self.dead_lettered += other.dead_lettered;
        self.cancelled += other.cancelled;
        self.passed += other.passed;
        self.not_due += other.not_due;
        self.swept += other.swept;
        self.failed += other.failed;
        self.superseded += other.superseded;
    }

    /// Count what became of each order of a write.
    pub(super) fn count(&mut self, written: &[Written]) {
        for outcome in written {
            match outcome {
                Written::Confirmed => self.confirmed += 1,
                Written::Rejected => self.rejected += 1,
                Written::AlreadyThere => self.redelivered += 1,
            }
        }
    }
}

/// Say what a reserve found besides work: jobs of dead workers, and jobs
/// out of attempts.
pub(super) fn log_reservation(report: &BatchReport) {
    if report.reclaimed > 0 {
        tracing::warn!(
            count = report.reclaimed,
            "redelivering jobs whose worker died"
        );
    }
    if report.dead_lettered > 0 {
        tracing::error!(
            count = report.dead_lettered,
            "jobs dead-lettered after too many attempts"
        );
    }
    if report.reserved > 0 {
        tracing::Span::current().record("reserved", report.reserved);
    }
}
