//! The live page's first paint: the figures of the sale's newest snapshot,
//! written into the page by the server, so that a projector caught in the
//! page's first moment shows numbers, not dashes; the page's event stream
//! (`static/live.js`) keeps them current from its first snapshot on.
//!
//! [`Figures::of`] reads a snapshot as `live.js`'s `show` does: from the
//! same JSON, by the same names, in the same words ("none taken", "never
//! (no TTL)"), element by element, so that the stream's first snapshot
//! changes nothing it does not have to. A change to one is a change to the
//! other.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::state::AppState;
use seckill_core::scoreboard::Board;

/// How long the page waits for a sale's first snapshot when nobody
/// watches it yet (its first read takes milliseconds; a server that does
/// not answer takes the scoreboard a second to give up on). Past it, the
/// page shows dashes until its stream's first snapshot.
const WAIT: Duration = Duration::from_secs(2);

/// What the figures' elements say, by id; an id without a figure shows a
/// dash.
#[derive(Debug)]
pub(super) struct Figures {
    text: HashMap<String, String>,
    /// The `class` of the two status elements (`redis-status`, `pg-status`).
    class: HashMap<&'static str, &'static str>,
    /// The holder's name is long: shown smaller, on one line.
    pub(super) long_holder: bool,
}

/// No snapshot: dashes, as the page showed before its stream's first.
impl Default for Figures {
    fn default() -> Self {
        let mut figures = Self {
            text: HashMap::new(),
            class: HashMap::from([("redis-status", "status-live")]),
            long_holder: false,
        };
        figures.put("redis-status", "Redis —".to_owned());
        figures
    }
}

impl Figures {
    /// The figures of the sale's newest snapshot: the scoreboard's, or
    /// its first read for this page; none if that takes past [`WAIT`].
    pub(super) async fn now(state: &AppState, sale_id: i64) -> Self {
        let mut boards = state.scoreboard.watch(sale_id);
        // Tick 0 is the placeholder before the first read.
        let newest = tokio::time::timeout(WAIT, boards.wait_for(|board| board.tick > 0))
            .await
            .ok()
            .and_then(Result::ok)
            .map(|board| Arc::clone(&board));
        // Dropping `boards` here tells the scoreboard this viewer left; the
        // page's stream watches the sale again.
        newest.map_or_else(Self::default, |board| Self::of(&board))
    }

    /// What the element `id` says.
    pub(super) fn text(&self, id: &str) -> &str {
        self.text.get(id).map_or("—", String::as_str)
    }

    /// The class of the status element `id`, as `live.js` sets it.
    pub(super) fn class(&self, id: &str) -> &'static str {
        self.class.get(id).copied().unwrap_or("small")
    }

    /// A snapshot's figures, as `live.js`'s `show` puts them.
    fn of(board: &Board) -> Self {
        let board = serde_json::to_value(board).expect("a snapshot is plain numbers and strings");
        let mut figures = Self::default();
        let redis = &board["redis"];
        figures.status("redis-status", "Redis ", redis);
        figures.status("pg-status", "", &board["postgres"]);
        if redis["status"] == "ok" {
            let lock = &redis["lock"];
            let fence = redis["fence"].as_u64().unwrap_or(0);
            let ever_taken = !lock.is_null() || fence > 0;
            let holder = match lock["instance"].as_str() {
                Some(instance) => {
                    figures.long_holder = instance.chars().count() > 24;
                    instance.to_owned()
                }
                None if ever_taken => "free".to_owned(),
                None => "none taken".to_owned(),
            };
            figures.put("holder", holder);
            if !lock.is_null() {
                let lock_fence = lock["fence"].as_u64().unwrap_or(0);
                let lock_fence = if lock_fence > 0 {
                    lock_fence.to_string()
                } else {
                    "none".to_owned()
                };
                figures.put("holder-fence", lock_fence);
                figures.put("pttl", expires(lock["pttl_ms"].as_i64().unwrap_or(-1)));
            }
            figures.put("fence", fence.to_string());
            if let Some(answers) = redis["answers"].as_object() {
                for (answer, count) in answers {
                    figures.put(answer, count.to_string());
                }
            }
            // Raw, not clamped at 0: a negative stock is what a broken
            // strategy leaves.
            let stock = match &redis["stock"] {
                Value::Null => "not loaded".to_owned(),
                left => left.to_string(),
            };
            figures.put("stock", stock);
            for (id, value) in [
                ("fenced", &redis["fenced"]),
                ("buyers", &redis["buyers"]),
                ("waiting", &redis["queue"]["waiting"]),
                ("in_flight", &redis["queue"]["in_flight"]),
                ("dead", &redis["queue"]["dead"]),
            ] {
                figures.put(id, value.to_string());
            }
        }
        let room = &board["room"];
        if room["status"] == "ok" {
            for (id, name) in [
                ("room-waiting", "waiting"),
                ("room-active", "admitted"),
                ("room-bought", "bought"),
                ("room-expired", "expired"),
                ("room-abandoned", "abandoned"),
            ] {
                figures.put(id, room[name].to_string());
            }
            if let Some(rate) = room["per_sec"].as_f64() {
                figures.put("room-rate", format!("{rate:.1}"));
            }
            let closed = if room["closed"] == true {
                "closed: sold out or ended"
            } else {
                "open"
            };
            figures.put("room-closed", closed.to_owned());
        } else if !room.is_null() {
            figures.put("room-closed", "unavailable".to_owned());
        }
        let pg = &board["postgres"];
        if pg["status"] == "ok" {
            for (id, name) in [
                ("pg-confirmed", "confirmed"),
                ("pg-paid", "paid"),
                ("pg-rejected", "rejected"),
                ("pg-cancelled", "cancelled"),
                ("pg-sold", "sold"),
            ] {
                figures.put(id, pg[name].to_string());
            }
        }
        figures
    }

    fn put(&mut self, id: &str, text: String) {
        self.text.insert(id.to_owned(), text);
    }

    /// A server's status: "ok" or "unavailable", after `label`.
    fn status(&mut self, id: &'static str, label: &str, reading: &Value) {
        let ok = reading["status"] == "ok";
        let said = if ok { "ok" } else { "unavailable" };
        self.put(id, format!("{label}{said}"));
        self.class
            .insert(id, if ok { "status-live" } else { "unavailable" });
    }
}

/// A lock's time to live in words, as `live.js`'s `expires`: Redis says
/// -1 for a key with no TTL, which is "never", not "just expired" (the
/// article's crash leaves one); the article's lock asks for decades.
fn expires(pttl_ms: i64) -> String {
    const YEAR: i64 = 365 * 24 * 3600 * 1000;
    if pttl_ms < 0 {
        "never (no TTL)".to_owned()
    } else if pttl_ms >= YEAR {
        format!("in {} years", pttl_ms / YEAR)
    } else if pttl_ms >= 10_000 {
        format!("in {} s", (pttl_ms as f64 / 1000.0).round())
    } else {
        format!("in {pttl_ms} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::expires;

    #[test]
    fn a_locks_time_to_live_reads_as_the_live_pages_script_words_it() {
        assert_eq!(expires(-1), "never (no TTL)");
        assert_eq!(expires(1_500), "in 1500 ms");
        assert_eq!(expires(12_600), "in 13 s");
        assert_eq!(
            expires(56 * 365 * 24 * 3600 * 1000 + 3_600_000),
            "in 56 years"
        );
    }
}
