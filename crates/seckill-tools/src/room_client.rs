//! What a client of the waiting room's HTTP API reads from its answers:
//! `seckill crowd`'s people and bots (`crowd/people.rs`) and the chaos
//! run's waiting crowd (`chaos/crowd.rs`) read them the same way.

use std::time::Duration;

use serde_json::Value;

/// When an admission runs out, on Redis' clock (ms since the epoch): the
/// end written in it. An admission is
/// `kind.sale.buyer.number.expires_ms.signature`, the buyer in hex
/// (`domain/room_rules.rs`).
pub(crate) fn admission_ends_ms(admission: &str) -> Option<i64> {
    admission.split('.').nth(4)?.parse().ok()
}

/// An answer's `Retry-After`, in whole seconds as the server writes it.
pub(crate) fn retry_after(answer: &reqwest::Response) -> Option<Duration> {
    let secs = answer.headers().get("retry-after")?.to_str().ok()?;
    secs.parse().ok().map(Duration::from_secs)
}

/// An answer's status code and JSON body; `None` if there was none.
pub(crate) async fn read(sent: reqwest::Result<reqwest::Response>) -> Option<(String, Value)> {
    let answer = sent.ok()?;
    let code = answer.status().as_u16().to_string();
    let body = answer.json().await.unwrap_or(Value::Null);
    Some((code, body))
}
