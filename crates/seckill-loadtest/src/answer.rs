//! What a buyer got, by meaning rather than by status class: each answer
//! is classified as one [`AnswerKind`].
//!
//! A `409` can mean "sold out" or "you already have one"; a `503` is "busy,
//! try again"; a `500`, a connection reset or an answer we cannot read is an
//! error. The report counts each meaning separately, because a run that
//! answered 9,990 buyers "sold out" is healthy and a run that answered them
//! "error" is not, although both are "4xx/5xx".

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// The kind of answer one request got: how it ended, by meaning. Reports
/// call it the request's outcome, and name it in snake case (`sold_out`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AnswerKind {
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
    /// `503 busy`: the sale lock could not be had in time; or `503
    /// lock_lost`: it ran out before the commit, and the fence refused it;
    /// or `503 unconfirmed` (`--redis-durability replica`): no replica
    /// confirmed the decision in time.
    Busy,
    /// Anything else: a 5xx, an unexpected status or body, a failed connection.
    Error,
}

impl AnswerKind {
    /// Every outcome, in the order reports list them.
    pub const ALL: [AnswerKind; 7] = [
        AnswerKind::Won,
        AnswerKind::SoldOut,
        AnswerKind::Duplicate,
        AnswerKind::NotStarted,
        AnswerKind::Ended,
        AnswerKind::Busy,
        AnswerKind::Error,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            AnswerKind::Won => "won",
            AnswerKind::SoldOut => "sold_out",
            AnswerKind::Duplicate => "duplicate",
            AnswerKind::NotStarted => "not_started",
            AnswerKind::Ended => "ended",
            AnswerKind::Busy => "busy",
            AnswerKind::Error => "error",
        }
    }

    pub fn index(self) -> usize {
        AnswerKind::ALL
            .iter()
            .position(|o| *o == self)
            .expect("ALL lists every outcome")
    }
}

/// An answer's kind, and the order id when the buyer won (or, on a `503
/// unconfirmed`, the order no replica confirmed in time: it may yet go
/// through; on a `409 already_purchased`, the order the buyer holds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    pub outcome: AnswerKind,
    pub order_id: Option<Uuid>,
    /// A `503 unconfirmed` (a [`AnswerKind::Busy`] the server could not
    /// confirm: no replica held its pass in time, or its answer was lost
    /// with Redis): told apart from `busy` and `lock_lost`, which are
    /// about the sale's lock, because it is a server's trouble, which a
    /// judge of faults counts as an outage.
    pub unconfirmed: bool,
}

impl Classified {
    pub fn error() -> Self {
        Self {
            outcome: AnswerKind::Error,
            order_id: None,
            unconfirmed: false,
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
pub(crate) fn classify(status: u16, body: &[u8]) -> Classified {
    let Ok(body) = serde_json::from_slice::<Body>(body) else {
        return Classified::error();
    };
    let outcome = match (status, body.error) {
        (202, None) if body.order_id.is_some() => {
            return Classified {
                outcome: AnswerKind::Won,
                order_id: body.order_id,
                unconfirmed: false,
            };
        }
        (409, Some("sold_out")) => AnswerKind::SoldOut,
        // The order the buyer holds, when the server names it: a buyer
        // whose `202` was lost on its way learns it from a retry.
        (409, Some("already_purchased")) => {
            return Classified {
                outcome: AnswerKind::Duplicate,
                order_id: body.order_id,
                unconfirmed: false,
            };
        }
        (409, Some("not_started")) => AnswerKind::NotStarted,
        (409, Some("ended")) => AnswerKind::Ended,
        // `lock_lost`: the buyer's lock ran out before its commit and the
        // fence refused the write. Like `busy`: nothing taken, try again.
        (503, Some("busy" | "lock_lost")) => AnswerKind::Busy,
        // No replica confirmed the pass in time: try again, like busy;
        // the order it names, if any, may yet go through.
        (503, Some("unconfirmed")) => {
            return Classified {
                outcome: AnswerKind::Busy,
                order_id: body.order_id,
                unconfirmed: true,
            };
        }
        _ => AnswerKind::Error,
    };
    Classified {
        outcome,
        order_id: None,
        unconfirmed: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn outcome(status: u16, body: &str) -> AnswerKind {
        classify(status, body.as_bytes()).outcome
    }

    #[test]
    fn a_202_with_an_order_id_is_a_win_and_keeps_the_id() {
        let id = Uuid::now_v7();
        let won = classify(
            202,
            format!(r#"{{"order_id":"{id}","status":"pending"}}"#).as_bytes(),
        );
        assert_eq!(won.outcome, AnswerKind::Won);
        assert_eq!(won.order_id, Some(id));
    }

    #[test]
    fn an_already_purchased_answer_keeps_the_order_it_names() {
        let id = Uuid::new_v4();
        let again = classify(
            409,
            format!(r#"{{"error":"already_purchased","order_id":"{id}"}}"#).as_bytes(),
        );
        assert_eq!(again.outcome, AnswerKind::Duplicate);
        assert_eq!(again.order_id, Some(id));
    }

    #[test]
    fn conflicts_are_told_apart_by_their_error_code() {
        assert_eq!(
            outcome(409, r#"{"error":"sold_out","message":"x"}"#),
            AnswerKind::SoldOut
        );
        assert_eq!(
            outcome(409, r#"{"error":"already_purchased","message":"x"}"#),
            AnswerKind::Duplicate
        );
        assert_eq!(
            outcome(409, r#"{"error":"not_started"}"#),
            AnswerKind::NotStarted
        );
        assert_eq!(outcome(409, r#"{"error":"ended"}"#), AnswerKind::Ended);
        assert_eq!(
            outcome(503, r#"{"error":"busy","message":"x"}"#),
            AnswerKind::Busy
        );
        let busy = classify(503, br#"{"error":"lock_lost"}"#);
        assert_eq!((busy.outcome, busy.unconfirmed), (AnswerKind::Busy, false));
        let id = Uuid::new_v4();
        let unconfirmed = classify(
            503,
            format!(r#"{{"error":"unconfirmed","order_id":"{id}"}}"#).as_bytes(),
        );
        assert_eq!(
            (
                unconfirmed.outcome,
                unconfirmed.order_id,
                unconfirmed.unconfirmed
            ),
            (AnswerKind::Busy, Some(id), true)
        );
    }

    #[test]
    fn anything_unexpected_is_an_error() {
        // A 202 that does not say which order it accepted cannot be verified.
        assert_eq!(outcome(202, r#"{"status":"pending"}"#), AnswerKind::Error);
        assert_eq!(
            outcome(202, r#"{"order_id":"not-a-uuid"}"#),
            AnswerKind::Error
        );
        assert_eq!(outcome(500, r#"{"error":"internal"}"#), AnswerKind::Error);
        // A known code under the wrong status is not trusted either.
        assert_eq!(outcome(200, r#"{"error":"sold_out"}"#), AnswerKind::Error);
        assert_eq!(
            outcome(409, r#"{"error":"something_new"}"#),
            AnswerKind::Error
        );
        assert_eq!(outcome(409, "<html>proxy error</html>"), AnswerKind::Error);
        assert_eq!(outcome(502, ""), AnswerKind::Error);
    }

    #[test]
    fn every_outcome_has_its_own_index() {
        for (i, outcome) in AnswerKind::ALL.iter().enumerate() {
            assert_eq!(outcome.index(), i);
        }
    }
}
