//! What a buyer got, by meaning rather than by status class.
//!
//! A `409` can mean "sold out" or "you already have one"; a `503` is "busy,
//! try again"; a `500`, a connection reset or an answer we cannot read is an
//! error. The report counts each meaning separately, because a run that
//! answered 9,990 buyers "sold out" is healthy and a run that answered them
//! "error" is not, although both are "4xx/5xx".

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// How one request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// `202`: the buyer got a unit (an order id came back).
    Won,
    /// `409 sold_out`.
    SoldOut,
    /// `409 already_purchased`: this buyer's other request won, or will.
    Duplicate,
    /// `409 not_started`.
    NotStarted,
    /// `409 ended`.
    Ended,
    /// `503 busy`: the sale lock could not be had in time.
    Busy,
    /// Anything else: a 5xx, an unexpected status or body, a failed connection.
    Error,
}

impl Outcome {
    /// Every outcome, in the order reports list them.
    pub const ALL: [Outcome; 7] = [
        Outcome::Won,
        Outcome::SoldOut,
        Outcome::Duplicate,
        Outcome::NotStarted,
        Outcome::Ended,
        Outcome::Busy,
        Outcome::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Won => "won",
            Outcome::SoldOut => "sold_out",
            Outcome::Duplicate => "duplicate",
            Outcome::NotStarted => "not_started",
            Outcome::Ended => "ended",
            Outcome::Busy => "busy",
            Outcome::Error => "error",
        }
    }

    pub fn index(self) -> usize {
        Outcome::ALL
            .iter()
            .position(|o| *o == self)
            .expect("ALL lists every outcome")
    }
}

/// An outcome, and the order id when the buyer won.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub outcome: Outcome,
    pub order_id: Option<Uuid>,
}

impl Classified {
    pub fn error() -> Self {
        Self {
            outcome: Outcome::Error,
            order_id: None,
        }
    }
}

/// The parts of seckill's answers that carry meaning: `{"order_id"}` on a
/// `202`, `{"error": "<code>"}` otherwise.
#[derive(Deserialize)]
struct Body<'a> {
    order_id: Option<Uuid>,
    #[serde(borrow)]
    error: Option<&'a str>,
}

/// Classify a purchase answer from its status and body.
pub fn classify(status: u16, body: &[u8]) -> Classified {
    let Ok(body) = serde_json::from_slice::<Body>(body) else {
        return Classified::error();
    };
    let outcome = match (status, body.error) {
        (202, None) if body.order_id.is_some() => {
            return Classified {
                outcome: Outcome::Won,
                order_id: body.order_id,
            };
        }
        (409, Some("sold_out")) => Outcome::SoldOut,
        (409, Some("already_purchased")) => Outcome::Duplicate,
        (409, Some("not_started")) => Outcome::NotStarted,
        (409, Some("ended")) => Outcome::Ended,
        (503, Some("busy")) => Outcome::Busy,
        _ => Outcome::Error,
    };
    Classified {
        outcome,
        order_id: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: u16, body: &str) -> Outcome {
        classify(status, body.as_bytes()).outcome
    }

    #[test]
    fn a_202_with_an_order_id_is_a_win_and_keeps_the_id() {
        let id = Uuid::now_v7();
        let won = classify(
            202,
            format!(r#"{{"order_id":"{id}","status":"pending"}}"#).as_bytes(),
        );
        assert_eq!(won.outcome, Outcome::Won);
        assert_eq!(won.order_id, Some(id));
    }

    #[test]
    fn conflicts_are_told_apart_by_their_error_code() {
        assert_eq!(
            outcome(409, r#"{"error":"sold_out","message":"x"}"#),
            Outcome::SoldOut
        );
        assert_eq!(
            outcome(409, r#"{"error":"already_purchased","message":"x"}"#),
            Outcome::Duplicate
        );
        assert_eq!(
            outcome(409, r#"{"error":"not_started"}"#),
            Outcome::NotStarted
        );
        assert_eq!(outcome(409, r#"{"error":"ended"}"#), Outcome::Ended);
        assert_eq!(
            outcome(503, r#"{"error":"busy","message":"x"}"#),
            Outcome::Busy
        );
    }

    #[test]
    fn anything_unexpected_is_an_error() {
        // A 202 that does not say which order it accepted cannot be verified.
        assert_eq!(outcome(202, r#"{"status":"pending"}"#), Outcome::Error);
        assert_eq!(outcome(202, r#"{"order_id":"not-a-uuid"}"#), Outcome::Error);
        assert_eq!(outcome(500, r#"{"error":"internal"}"#), Outcome::Error);
        // A known code under the wrong status is not trusted either.
        assert_eq!(outcome(200, r#"{"error":"sold_out"}"#), Outcome::Error);
        assert_eq!(outcome(409, r#"{"error":"something_new"}"#), Outcome::Error);
        assert_eq!(outcome(409, "<html>proxy error</html>"), Outcome::Error);
        assert_eq!(outcome(502, ""), Outcome::Error);
    }

    #[test]
    fn every_outcome_has_its_own_index() {
        for (i, outcome) in Outcome::ALL.iter().enumerate() {
            assert_eq!(outcome.index(), i);
        }
    }
}
