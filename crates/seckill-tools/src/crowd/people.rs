//! The two crowds of a flash sale, as HTTP clients: people, who arrive
//! around the open, look at the page once a second and buy once they may;
//! and bots, which are there before the open, ask ten times a second, fire
//! purchases without waiting their turn, and try each other's admissions.
//!
//! Every person and every bot sends from an address of its own on the
//! loopback network (`127.1.x.y` for people; bots share `--bot-addresses`
//! addresses, `127.2.0.k`), so that the server's per-address limits see
//! them as a real crowd would be seen.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

use crate::room_client::{admission_ends_ms, read, retry_after};

/// How often a person's page asks where they stand (the page's interval).
pub(crate) const PERSON_POLL: Duration = Duration::from_secs(1);
/// How often a bot asks, and fires a purchase.
pub(crate) const BOT_POLL: Duration = Duration::from_millis(100);

/// Who a buyer is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Person,
    Bot,
}

/// What happened to one buyer, in seconds from the run's start.
#[derive(Debug, Clone)]
pub(crate) struct Story {
    pub(crate) kind: Kind,
    /// When the join was answered (with a room), or the first purchase sent.
    pub(crate) arrived: Option<f64>,
    /// The number the join was given: the server's order of arrival,
    /// which the answers of joins sent at once may not keep.
    pub(crate) place: Option<u64>,
    /// When the room admitted them, on the server's word (the answer's
    /// `admission_expires_in_secs`, taken back from the admission's length).
    pub(crate) admitted: Option<f64>,
    /// When the room admitted them on Redis' clock (ms since the epoch),
    /// exact: the end written in their admission, less its length. Buyers
    /// admitted in one visit share it. What orders admissions, where the
    /// answer's arrival here, late by a loaded machine's whims, would not.
    pub(crate) admitted_ms: Option<i64>,
    /// The wait the room predicted at the first status after the open:
    /// `(when asked, eta_secs)`.
    pub(crate) predicted: Option<(f64, f64)>,
    pub(crate) won: bool,
    /// Every answer, as `status code` or `code/reason`.
    pub(crate) answers: Vec<String>,
}

/// What every buyer of a run shares.
pub(crate) struct Run {
    pub(crate) url: String,
    pub(crate) sale: i64,
    pub(crate) start: Instant,
    pub(crate) open: Instant,
    pub(crate) until: Instant,
    /// The room's `admission_secs`, if the sale has a room.
    pub(crate) room: Option<f64>,
    /// Admissions bots got, by the bot they were given to, which the
    /// other bots try as their own.
    pub(crate) stolen: Mutex<Vec<(String, String)>>,
}

impl Run {
    fn secs(&self, at: Instant) -> f64 {
        (at - self.start).as_secs_f64()
    }
}

/// An HTTP client sending from `address`.
pub(crate) fn client_from(address: Ipv4Addr) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(IpAddr::V4(address))
        // Long: an answer that comes late is still the answer (a `202`
        // given up on would count a unit nobody was told of).
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a client with a local address")
}

/// One person, arriving at `arrives` (from the run's start).
pub(crate) async fn person(
    run: Arc<Run>,
    http: reqwest::Client,
    id: String,
    arrives: Duration,
) -> Story {
    let mut story = Story::new(Kind::Person);
    tokio::time::sleep_until(run.start + arrives).await;
    if run.room.is_none() {
        // No door: a person clicks Buy once the page opens, a moment after.
        let reaction = Duration::from_millis(200 + fastrand::u64(0..800));
        tokio::time::sleep_until(run.start.max(run.open) + reaction).await;
        story.arrived = Some(run.secs(Instant::now()));
        buy_until_told(&run, &http, &id, None, &mut story, PERSON_POLL).await;
        return story;
    }
    wait_in_room(&run, &http, &id, &mut story, PERSON_POLL).await;
    story
}

/// One bot, there from the start.
pub(crate) async fn bot(run: Arc<Run>, http: reqwest::Client, id: String) -> Story {
    let mut story = Story::new(Kind::Bot);
    if run.room.is_none() {
        // Fire at the open, and on until something sticks.
        tokio::time::sleep_until(run.open - Duration::from_millis(20)).await;
        story.arrived = Some(run.secs(Instant::now()));
        buy_until_told(&run, &http, &id, None, &mut story, BOT_POLL / 2).await;
        return story;
    }
    // Beside its place in line, purchases without a turn, and with the
    // admissions other bots got.
    // Stopped by a flag, not aborted: a purchase it has sent is answered,
    // and a `202` it got is counted.
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let spam = {
        let (run, http, id, done) = (
            Arc::clone(&run),
            http.clone(),
            id.clone(),
            Arc::clone(&done),
        );
        tokio::spawn(async move {
            let mut answers = Vec::new();
            tokio::time::sleep_until(run.open).await;
            while Instant::now() < run.until && !done.load(std::sync::atomic::Ordering::Relaxed) {
                let stolen = run
                    .stolen
                    .lock()
                    .expect("never poisoned")
                    .iter()
                    .rev()
                    .find(|(owner, _)| *owner != id)
                    .map(|(_, admission)| admission.clone());
                let (code, _) = purchase(&run, &http, &id, stolen.as_deref()).await;
                let over = code == "202" || code == "409/sold_out";
                answers.push(code);
                if over {
                    break;
                }
                tokio::time::sleep(BOT_POLL).await;
            }
            answers
        })
    };
    wait_in_room(&run, &http, &id, &mut story, BOT_POLL).await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    if let Ok(answers) = spam.await {
        story.won |= answers.iter().any(|a| a == "202");
        story.answers.extend(answers);
    }
    story
}

impl Story {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            arrived: None,
            place: None,
            admitted: None,
            admitted_ms: None,
            predicted: None,
            won: false,
            answers: Vec::new(),
        }
    }
}

/// Join, ask every `poll` until admitted (then buy) or the room closes.
async fn wait_in_room(
    run: &Run,
    http: &reqwest::Client,
    id: &str,
    story: &mut Story,
    poll: Duration,
) {
    // A join refused by the limit per address (`429`) is sent again once
    // its `Retry-After` has passed, as a browser's page or a bot would.
    let (code, body) = loop {
        let joined = http
            .post(format!("{}/api/sales/{}/queue", run.url, run.sale))
            .json(&json!({ "user_id": id }))
            .send()
            .await;
        let retry_after = joined.as_ref().ok().and_then(retry_after);
        let Some((code, body)) = read(joined).await else {
            story.answers.push("error".into());
            return;
        };
        story.answers.push(format!("join {code}"));
        match retry_after {
            Some(wait) if code == "429" && Instant::now() + wait < run.until => {
                tokio::time::sleep(wait).await;
            }
            _ => break (code, body),
        }
    };
    if code != "200" {
        return;
    }
    story.arrived = Some(run.secs(Instant::now()));
    story.place = body["number"].as_u64();
    let Some(ticket) = body["ticket"].as_str().map(str::to_owned) else {
        return;
    };
    let mut standing = body;
    while Instant::now() < run.until {
        let now = Instant::now();
        if standing["closed"] == true {
            return;
        }
        if story.predicted.is_none()
            && now >= run.open
            && let Some(eta) = standing["eta_secs"].as_f64()
        {
            story.predicted = Some((run.secs(now), eta));
        }
        if let Some(admission) = standing["admission"].as_str().map(str::to_owned) {
            let left = standing["admission_expires_in_secs"]
                .as_f64()
                .unwrap_or(0.0);
            let lasts = run.room.unwrap_or(0.0);
            story.admitted = Some(run.secs(now) - (lasts - left).max(0.0));
            story.admitted_ms =
                admission_ends_ms(&admission).map(|expires| expires - (lasts * 1000.0) as i64);
            if story.kind == Kind::Bot {
                run.stolen
                    .lock()
                    .expect("never poisoned")
                    .push((id.to_owned(), admission.clone()));
            }
            buy_until_told(run, http, id, Some(&admission), story, poll).await;
            return;
        }
        tokio::time::sleep(poll).await;
        let asked = http
            .get(format!("{}/api/sales/{}/queue", run.url, run.sale))
            .header("Seckill-Ticket", &ticket)
            .send()
            .await;
        match read(asked).await {
            Some((code, body)) if code == "200" => standing = body,
            Some((code, _)) => story.answers.push(format!("status {code}")),
            None => story.answers.push("error".into()),
        }
    }
}

/// Purchase until the answer is final: a unit (`202`), or none left
/// (`409`), or a refusal that waiting will not change (`403`).
async fn buy_until_told(
    run: &Run,
    http: &reqwest::Client,
    id: &str,
    admission: Option<&str>,
    story: &mut Story,
    pause: Duration,
) {
    while Instant::now() < run.until {
        let (code, _) = purchase(run, http, id, admission).await;
        // Final: a unit, none left, one already held, the end, or a door
        // that will not open. `409 not_started` is worth another try.
        let over = code == "202"
            || (code.starts_with("409") && code != "409/not_started")
            || code.starts_with("403");
        story.won |= code == "202";
        story.answers.push(code);
        if over {
            return;
        }
        tokio::time::sleep(pause).await;
    }
}

/// One purchase; the answer as `202`, `409/sold_out`, `403/used`, ...
async fn purchase(
    run: &Run,
    http: &reqwest::Client,
    id: &str,
    admission: Option<&str>,
) -> (String, Value) {
    let mut body = json!({ "user_id": id });
    if let Some(admission) = admission {
        body["admission"] = json!(admission);
    }
    let sent = http
        .post(format!("{}/api/sales/{}/purchase", run.url, run.sale))
        .json(&body)
        .send()
        .await;
    match read(sent).await {
        Some((code, body)) => {
            let named = match (body["error"].as_str(), body["reason"].as_str()) {
                (Some(error), Some(reason)) => format!("{code}/{error}/{reason}"),
                (Some(error), None) => format!("{code}/{error}"),
                _ => code,
            };
            (named, body)
        }
        None => ("error".into(), Value::Null),
    }
}
