//! A payment deadline job: the orders of one sale whose payment window
//! closes at one moment.

use chrono::{DateTime, Utc};

/// The job on a sale's deadline queue (the article's delay queue, see
/// `payment.rs`), due when its orders' payment window closes.
///
/// One job per moment, not per order: the orders one transaction confirms
/// share their `pay_by` (that transaction's `now()` plus the window), so
/// the worker queues one job for a whole batch, and the job cancels every
/// order of the sale still unpaid at that moment with one statement
/// (`Store::cancel_unpaid`). Its queue id is the moment, so queueing it
/// again (a redelivered batch, the sweep) keeps one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DeadlineJob {
    pub sale_id: i64,
    /// `pay_by` in microseconds since the epoch: PostgreSQL's own
    /// precision, so that the job names the moment exactly.
    pay_by_us: i64,
}

impl DeadlineJob {
    /// The deadline of `sale_id`'s orders to be paid by `pay_by`.
    pub fn new(sale_id: i64, pay_by: DateTime<Utc>) -> Self {
        Self {
            sale_id,
            pay_by_us: pay_by.timestamp_micros(),
        }
    }

    /// When the orders' payment window closes.
    pub fn pay_by(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.pay_by_us)
            .expect("a DeadlineJob holds a moment chrono can name (checked when decoded)")
    }

    /// The job's id on its sale's deadline queue.
    pub fn id(&self) -> String {
        self.pay_by_us.to_string()
    }

    pub fn to_payload(&self) -> String {
        serde_json::to_string(self).expect("a DeadlineJob always serializes")
    }

    /// The job a payload names; a moment out of chrono's range is refused
    /// as any other payload that does not decode.
    pub fn from_payload(payload: &str) -> Result<Self, serde_json::Error> {
        let job: Self = serde_json::from_str(payload)?;
        match DateTime::from_timestamp_micros(job.pay_by_us) {
            Some(_) => Ok(job),
            None => Err(serde::de::Error::custom("pay_by_us out of range")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_names_its_moment_to_the_microsecond() {
        let pay_by = DateTime::from_timestamp_micros(1_765_000_000_123_456).unwrap();
        let job = DeadlineJob::new(7, pay_by);
        assert_eq!(job.pay_by(), pay_by);
        assert_eq!(job.id(), "1765000000123456");
        assert_eq!(DeadlineJob::from_payload(&job.to_payload()).unwrap(), job);
        // An order's payload (the format before one job per moment) is not a deadline.
        assert!(
            DeadlineJob::from_payload(r#"{"order_id":"x","sale_id":7,"user_id":"ann"}"#).is_err()
        );
        // Nor a moment chrono cannot name.
        let far = format!(r#"{{"sale_id":7,"pay_by_us":{}}}"#, i64::MAX);
        assert!(DeadlineJob::from_payload(&far).is_err());
    }
}
