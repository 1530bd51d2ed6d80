//! The waiting crowd of `redis-failover`: a second sale, behind a FIFO
//! waiting room that admits a few buyers a second, and a few hundred
//! buyers who wait in it while Redis fails over beside the first sale's
//! purchases. Each buyer joins through the instances, asks where they
//! stand about once a second (as the sale page does), buys when told they
//! may, and goes on asking after that; one told they are outside joins
//! again, as the page's "Join the line" form would have them. Every answer
//! is kept with its times, for the judge (`judge/crowd.rs`): a failover
//! must take back no place, no admission and no `202` a buyer was told.
//!
//! The people of `seckill crowd` (`crowd/people.rs`) wait in a room the
//! same way, but keep a story of each buyer, not every answer with its
//! moment, which is what a fault's judge needs; both read answers with
//! `room_client.rs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::room_client::{admission_ends_ms, read, retry_after};
use seckill_core::domain::{NewSale, RoomMode, RoomSettings};
use seckill_core::store::Store;

/// The crowd's room: FIFO, 4 admitted a second and 4 at once at most, so
/// that a crowd of a few hundred mostly waits through the failover; the
/// shortest admission a room takes (10 s), so that one told before the
/// failover can run out across it.
pub(crate) const ROOM: RoomSettings = RoomSettings {
    mode: RoomMode::Fifo,
    admit_per_sec: 4,
    max_active: 4,
    admission_secs: 10,
    max_line: None,
};
/// How often a buyer asks where they stand: the sale page's interval.
const POLL: Duration = Duration::from_secs(1);
/// How long a buyer takes to press Buy once told they may, at most.
const REACTION_MS: u64 = 1_500;
/// A request's answer is waited for this long: longer than any outage the
/// failover makes, so that a request that is never answered is the
/// deployment's doing, not the client's patience.
const ANSWER_WITHIN: Duration = Duration::from_secs(30);

/// What a crowd's request asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    Join,
    Status,
    Purchase,
}

/// Where a `200` said the buyer stands (the door's `StandingView`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Standing {
    pub(crate) position: Option<u64>,
    pub(crate) admission: Option<String>,
    /// When the admission runs out, from the run's start (ms): the end
    /// written in it, on Redis' clock, which is this machine's.
    pub(crate) admission_ends_ms: Option<i64>,
    pub(crate) bought: bool,
    pub(crate) closed: bool,
}

impl Standing {
    /// Outside the room: no place, no admission, nothing bought, and the
    /// room still open. The page then shows "Join the line".
    pub(crate) fn outside(&self) -> bool {
        self.position.is_none() && self.admission.is_none() && !self.bought && !self.closed
    }
}

/// One request of the crowd and its answer, with its times.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) buyer: u32,
    pub(crate) asked: Asked,
    /// When it was sent and answered, in ms from the run's start.
    pub(crate) sent_ms: i64,
    pub(crate) done_ms: i64,
    /// `None`: no answer at all (the connection failed, or no answer
    /// within [`ANSWER_WITHIN`]).
    pub(crate) status: Option<u16>,
    pub(crate) retry_after: bool,
    /// A refusal's `error` code (`unconfirmed`, `already_purchased`, ...).
    pub(crate) error: Option<String>,
    /// A `200`'s standing.
    pub(crate) standing: Option<Standing>,
    /// The order an answer names (a `202`, a `409 already_purchased`, a
    /// `503 unconfirmed` that took a unit).
    pub(crate) order_id: Option<Uuid>,
    /// The admission a purchase carried.
    pub(crate) admission: Option<String>,
}

/// The crowd's buyer `n`, by the id it buys as.
pub(crate) fn buyer_id(n: u32) -> String {
    format!("crowd-{n}")
}

/// The crowd's sale: as many units as buyers, so that the room never
/// closes for want of them, behind [`ROOM`].
pub(crate) async fn create_sale(store: &Store, buyers: u32) -> anyhow::Result<i64> {
    let new = NewSale::builder("Chaos, waiting crowd", i64::from(buyers))
        .price_cents(99_900)
        .waiting_room(ROOM)
        .build(Utc::now())
        .context("the waiting crowd's sale")?;
    Ok(store.create_sale(&new).await?.id)
}

/// What every buyer of the crowd shares.
pub(crate) struct Crowd {
    http: reqwest::Client,
    urls: Vec<String>,
    sale_id: i64,
    /// The run's start, on both clocks: the answers' times are counted
    /// from it, and an admission's end (ms since the Unix epoch) too.
    epoch: Instant,
    epoch_unix_ms: i64,
    /// No request is sent after this, in ms from the run's start: the
    /// load's end, or later (see [`Crowd::stay_until`]). An atomic, as
    /// the run moves it while the buyers read it; no other value hangs on
    /// it, so `Relaxed` is enough.
    until_ms: AtomicI64,
}

impl Crowd {
    /// The crowd of `sale_id` on the instances at `urls`, from `epoch`
    /// for `lasts`.
    pub(crate) fn new(urls: Vec<String>, sale_id: i64, epoch: Instant, lasts: Duration) -> Self {
        let since = epoch.elapsed();
        Self {
            http: reqwest::Client::builder()
                .timeout(ANSWER_WITHIN)
                .build()
                .expect("an HTTP client with a timeout"),
            urls,
            sale_id,
            epoch,
            epoch_unix_ms: Utc::now().timestamp_millis()
                - i64::try_from(since.as_millis()).unwrap_or(0),
            until_ms: AtomicI64::new(i64::try_from(lasts.as_millis()).unwrap_or(i64::MAX)),
        }
    }

    /// Go on until `at` at least: a failover that ends late (a slow
    /// election) still has buyers asking after it.
    pub(crate) fn stay_until(&self, at: Instant) {
        self.until_ms.fetch_max(self.ms(at), Ordering::Relaxed);
    }

    /// Whether buyers may still send.
    fn going_on(&self) -> bool {
        self.ms(Instant::now()) < self.until_ms.load(Ordering::Relaxed)
    }

    /// `buyers` buyers, each from its arrival to the end: every answer.
    /// Half arrive in the first second, the other half spread over the
    /// first half of the run, so that joins fall before, during and after
    /// the failover. `seed` decides the arrivals and the reactions.
    pub(crate) async fn run(
        self: Arc<Self>,
        buyers: u32,
        seed: u64,
    ) -> anyhow::Result<Vec<Answer>> {
        let mut rng = fastrand::Rng::with_seed(seed);
        let half_run = u64::try_from(self.until_ms.load(Ordering::Relaxed) / 2).unwrap_or(0);
        let mut tasks = Vec::new();
        for n in 0..buyers {
            let arrives = if n % 2 == 0 {
                rng.u64(0..1_000)
            } else {
                rng.u64(0..half_run.max(1))
            };
            let buyer = Buyer {
                crowd: Arc::clone(&self),
                n,
                sent: 0,
                answers: Vec::new(),
                reaction: Duration::from_millis(rng.u64(0..REACTION_MS)),
            };
            tasks.push(tokio::spawn(
                buyer.wait_and_buy(self.epoch + Duration::from_millis(arrives)),
            ));
        }
        let mut answers = Vec::new();
        for task in tasks {
            // A buyer's task only sends and records; a panic there is a
            // bug of the crowd's, and its answers must not go missing.
            answers.extend(task.await.context("a buyer of the waiting crowd")?);
        }
        Ok(answers)
    }

    fn ms(&self, at: Instant) -> i64 {
        i64::try_from(at.saturating_duration_since(self.epoch).as_millis()).unwrap_or(i64::MAX)
    }
}

/// One buyer of the crowd, and the answers they got.
struct Buyer {
    crowd: Arc<Crowd>,
    n: u32,
    /// Requests sent: each goes to the next instance, as a load balancer
    /// would send them.
    sent: usize,
    answers: Vec<Answer>,
    reaction: Duration,
}

impl Buyer {
    /// Join at `arrives`, then ask once a second until the end: buy when
    /// admitted, join again when told outside.
    async fn wait_and_buy(mut self, arrives: Instant) -> Vec<Answer> {
        tokio::time::sleep_until(arrives.into()).await;
        let mut ticket = None;
        let mut bought = false;
        while self.crowd.going_on() {
            let Some(held) = ticket.clone() else {
                ticket = self.join().await;
                continue;
            };
            tokio::time::sleep(POLL).await;
            if !self.crowd.going_on() {
                break;
            }
            let Some(standing) = self.status(&held).await else {
                continue;
            };
            if standing.closed {
                break;
            }
            if standing.outside() {
                ticket = None;
            } else if let (Some(admission), false) = (standing.admission, bought) {
                tokio::time::sleep(self.reaction).await;
                bought = self.buy(&held, &admission).await;
            }
        }
        self.answers
    }

    /// Join until a ticket is handed out (or the end); any other answer
    /// is sent again a second later (a `503`'s `Retry-After` is 1 s).
    async fn join(&mut self) -> Option<String> {
        let body = json!({ "user_id": buyer_id(self.n) });
        while self.crowd.going_on() {
            let url = format!("{}/api/sales/{}/queue", self.next_url(), self.crowd.sale_id);
            let request = self.crowd.http.post(url).json(&body);
            let (answer, value) = self.send(Asked::Join, request, None).await;
            if answer.status == Some(200)
                && let Some(ticket) = value["ticket"].as_str()
            {
                return Some(ticket.to_owned());
            }
            tokio::time::sleep(POLL).await;
        }
        None
    }

    /// Where the buyer stands, as a `200` says; `None` for any other answer.
    async fn status(&mut self, ticket: &str) -> Option<Standing> {
        let url = format!("{}/api/sales/{}/queue", self.next_url(), self.crowd.sale_id);
        let request = self.crowd.http.get(url).header("Seckill-Ticket", ticket);
        self.send(Asked::Status, request, None).await.0.standing
    }

    /// Buy with `admission` until the answer is final: whether the buyer
    /// holds a unit (a `202`, or a `409 already_purchased`). A `503` is
    /// sent again a second later, its `Retry-After`, once the page has
    /// asked where the buyer stands and still shows the Buy form for the
    /// same admission (a room that forgot it says so then).
    async fn buy(&mut self, ticket: &str, admission: &str) -> bool {
        let body = json!({ "user_id": buyer_id(self.n), "admission": admission });
        while self.crowd.going_on() {
            let url = format!(
                "{}/api/sales/{}/purchase",
                self.next_url(),
                self.crowd.sale_id
            );
            let request = self.crowd.http.post(url).json(&body);
            let (answer, _) = self.send(Asked::Purchase, request, Some(admission)).await;
            match answer.status {
                Some(202) => return true,
                Some(409) => return answer.error.as_deref() == Some("already_purchased"),
                Some(403) => return false,
                _ => tokio::time::sleep(POLL).await,
            }
            let standing = self.status(ticket).await;
            if standing.is_some_and(|s| s.admission.as_deref() != Some(admission)) {
                return false;
            }
        }
        false
    }

    fn next_url(&mut self) -> String {
        self.sent += 1;
        let urls = &self.crowd.urls;
        urls[(self.n as usize + self.sent) % urls.len()].clone()
    }

    /// Send `request`, record its answer; the answer and its JSON body.
    async fn send(
        &mut self,
        asked: Asked,
        request: reqwest::RequestBuilder,
        admission: Option<&str>,
    ) -> (Answer, Value) {
        let sent = Instant::now();
        let response = request.send().await;
        let retry = response.as_ref().ok().and_then(retry_after).is_some();
        let read = read(response).await;
        let done = Instant::now();
        let status = read.as_ref().and_then(|(code, _)| code.parse().ok());
        let value = read.map(|(_, value)| value).unwrap_or(Value::Null);
        let standing = (status == Some(200) && asked != Asked::Purchase).then(|| {
            let admission = value["admission"].as_str().map(str::to_owned);
            Standing {
                position: value["position"].as_u64(),
                admission_ends_ms: admission
                    .as_deref()
                    .and_then(admission_ends_ms)
                    .map(|end| end - self.crowd.epoch_unix_ms),
                admission,
                bought: value["bought"] == true,
                closed: value["closed"] == true,
            }
        });
        let answer = Answer {
            buyer: self.n,
            asked,
            sent_ms: self.crowd.ms(sent),
            done_ms: self.crowd.ms(done),
            status,
            retry_after: retry,
            error: value["error"].as_str().map(str::to_owned),
            standing,
            order_id: value["order_id"]
                .as_str()
                .and_then(|id| Uuid::parse_str(id).ok()),
            admission: admission.map(str::to_owned),
        };
        self.answers.push(answer.clone());
        (answer, value)
    }
}
