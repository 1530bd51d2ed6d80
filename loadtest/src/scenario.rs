//! The three ways of sending load.
//!
//! - **burst** (the flash sale): every buyer opens a connection first, then
//!   all wait at one start signal and fire together. The spread between the
//!   first and the last send (the launch skew) is reported, so the audience
//!   can see that the race was real.
//! - **rate** (an open model): requests are due at a fixed rate whether or
//!   not earlier ones were answered. Latency runs from the moment a request
//!   was *due*, not from when it was finally sent, so a generator or server
//!   that falls behind shows up as latency instead of hiding it (the
//!   "coordinated omission" trap). Sends that start late are counted, and so
//!   are sends dropped because no connection came free in time.
//! - **closed**: C connections, each sending its next request as soon as the
//!   previous one is answered, like wrk or ab. Useful to compare with them.
//!
//! Every request is `POST /api/sales/{id}/purchase` for one buyer. Buyer `i`
//! goes to instance `i mod n`; a buyer's duplicate request (see
//! [`Plan::new`]) goes to the next instance, so duplicates race across
//! instances, where only the shared Redis can stop them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::sync::{Semaphore, watch};
use uuid::Uuid;

use crate::http::{Answer, Connection, Target};
use crate::outcome::Classified;
use crate::outcome::Outcome;
use crate::progress::{Phase, Progress};

/// How many connections a burst opens at once while it gets ready.
const CONNECT_CONCURRENCY: usize = 256;
/// How long a burst waits for all its connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);
/// A `rate` send that starts this much after it was due counts as late.
pub const LATE_AFTER: Duration = Duration::from_millis(10);
/// A `rate` send still waiting for a connection this long after it was due
/// is dropped (and counted): the generator cannot keep the rate.
pub const DROP_AFTER: Duration = Duration::from_secs(1);

/// How load is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// Open every connection, hold every buyer at one start signal, release all at once.
    Burst,
    /// A fixed arrival rate for a duration (open model).
    Rate,
    /// C connections sending back to back (closed model, like wrk).
    Closed,
}

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Burst => "burst",
            Scenario::Rate => "rate",
            Scenario::Closed => "closed",
        }
    }
}

/// One request of the plan: which buyer, to which instance.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub user: u32,
    pub target: usize,
}

/// Who sends what, to where.
pub struct Plan {
    pub sale_id: i64,
    /// `/api/sales/{sale_id}/purchase`.
    pub path: hyper::Uri,
    /// Makes this run's user ids unique, so runs on one sale do not collide.
    pub tag: String,
    pub users: u32,
    pub targets: Vec<Arc<Target>>,
    /// Every buyer once, then the duplicates.
    pub requests: Vec<Planned>,
}

impl Plan {
    /// `users` buyers spread round-robin over `targets`; a fraction `dup` of
    /// them, spread evenly, also send a second request at the same moment.
    pub fn new(sale_id: i64, users: u32, dup: f64, targets: Vec<Arc<Target>>) -> Self {
        let n = targets.len().max(1);
        let mut requests: Vec<Planned> = (0..users)
            .map(|user| Planned {
                user,
                target: user as usize % n,
            })
            .collect();
        requests.extend(
            (0..users)
                .filter(|&user| is_duplicate(user, dup))
                .map(|user| Planned {
                    user,
                    target: (user as usize + 1) % n,
                }),
        );
        let tag = Uuid::new_v4().simple().to_string()[..8].to_owned();
        Self {
            sale_id,
            path: crate::http::purchase_path(sale_id),
            tag,
            users,
            targets,
            requests,
        }
    }

    pub fn user_id(&self, user: u32) -> String {
        user_id(&self.tag, user)
    }
}

/// The user id of buyer `user` in the run tagged `tag`.
pub fn user_id(tag: &str, user: u32) -> String {
    format!("lt-{tag}-{user}")
}

/// Whether buyer `user` sends a duplicate: the fraction `dup` of buyers,
/// spread evenly (buyer `i` is one when `floor((i+1)·dup) > floor(i·dup)`).
fn is_duplicate(user: u32, dup: f64) -> bool {
    let (i, dup) = (f64::from(user), dup.clamp(0.0, 1.0));
    ((i + 1.0) * dup).floor() > (i * dup).floor()
}

/// One request, as the generator saw it. Times are microseconds from the
/// run's start (the release, for a burst).
#[derive(Debug, Clone)]
pub struct Sample {
    pub user: u32,
    pub outcome: Outcome,
    pub order_id: Option<Uuid>,
    pub instance: Option<Arc<str>>,
    /// When the request was due.
    pub intended_us: u64,
    /// When it was handed to the connection.
    pub sent_us: u64,
    /// When the whole answer was in.
    pub done_us: u64,
}

impl Sample {
    fn new(user: u32, answer: Answer, intended: Duration, sent: Duration, done: Duration) -> Self {
        Self {
            user,
            outcome: answer.classified.outcome,
            order_id: answer.classified.order_id,
            instance: answer.instance,
            intended_us: micros(intended),
            sent_us: micros(sent),
            done_us: micros(done),
        }
    }

    /// Latency as the buyer experiences it: from when the request was due.
    pub fn latency_us(&self) -> u64 {
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
    /// Start (release) to the last answer.
    pub wall: Duration,
}

/// Counters the progress display reads while a scenario runs.
#[derive(Debug, Default)]
pub struct Live {
    pub connected: AtomicU64,
    pub connect_failed: AtomicU64,
    pub answered: [AtomicU64; Outcome::ALL.len()],
}

impl Live {
    fn answer(&self, outcome: Outcome) {
        self.answered[outcome.index()].fetch_add(1, Ordering::Relaxed);
    }

    pub fn answers(&self) -> [u64; Outcome::ALL.len()] {
        std::array::from_fn(|i| self.answered[i].load(Ordering::Relaxed))
    }
}

fn micros(duration: Duration) -> u64 {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// How a scenario is run.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub scenario: Scenario,
    /// Requests per second (`rate`).
    pub rate: f64,
    /// How long to send (`rate`, `closed`); without it, each planned request is sent once.
    pub duration: Option<Duration>,
    /// Connections (`rate`, `closed`; a burst opens one per request).
    pub connections: usize,
}

/// Run the plan; progress goes to `progress`.
pub async fn run(plan: &Plan, shape: Shape, progress: &Progress) -> anyhow::Result<RunData> {
    if plan.targets.is_empty() {
        bail!("no target to send requests to");
    }
    if plan.requests.is_empty() {
        bail!("no buyers: --users must be at least 1");
    }
    let live = Arc::new(Live::default());
    match shape.scenario {
        Scenario::Burst => burst(plan, &live, progress).await,
        Scenario::Rate => rate(plan, shape, &live, progress).await,
        Scenario::Closed => closed(plan, shape, &live, progress).await,
    }
}

/// Shows the answers so far until dropped.
struct Ticker(tokio::task::JoinHandle<()>);

impl Ticker {
    fn start(phase: Phase, live: Arc<Live>) -> Self {
        Self(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                phase.answers(&live.answers());
            }
        }))
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn burst(plan: &Plan, live: &Arc<Live>, progress: &Progress) -> anyhow::Result<RunData> {
    let total = plan.requests.len();
    let connecting = progress.phase("connect", Some(total as u64));
    // The start signal: `None` until the release, then the release instant.
    let (release, released) = watch::channel::<Option<Instant>>(None);
    let limit = Arc::new(Semaphore::new(CONNECT_CONCURRENCY));
    let mut buyers = Vec::with_capacity(total);
    for planned in &plan.requests {
        let (target, live, limit, mut released) = (
            Arc::clone(&plan.targets[planned.target]),
            Arc::clone(live),
            Arc::clone(&limit),
            released.clone(),
        );
        let (path, user, user_id) = (plan.path.clone(), planned.user, plan.user_id(planned.user));
        buyers.push(tokio::spawn(async move {
            let connection = {
                let _permit = limit
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                Connection::open(target).await
            };
            match &connection {
                Ok(_) => live.connected.fetch_add(1, Ordering::Relaxed),
                Err(_) => live.connect_failed.fetch_add(1, Ordering::Relaxed),
            };
            // Everybody waits here until the release.
            let start = released
                .wait_for(Option::is_some)
                .await
                .map(|start| start.expect("waited for Some"));
            let Ok(start) = start else {
                return None; // the run was abandoned
            };
            let sent = start.elapsed();
            let answer = match connection {
                Ok(mut connection) => connection.purchase(&path, &user_id).await,
                Err(_) => Answer {
                    classified: Classified::error(),
                    instance: None,
                },
            };
            let done = start.elapsed();
            live.answer(answer.classified.outcome);
            Some(Sample::new(user, answer, Duration::ZERO, sent, done))
        }));
    }

    // Wait until every buyer holds a connection (or failed to get one).
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let (ok, failed) = (
            live.connected.load(Ordering::Relaxed),
            live.connect_failed.load(Ordering::Relaxed),
        );
        connecting.position(ok + failed);
        if ok + failed >= total as u64 {
            connecting.finish(&format!("{ok} connections open, {failed} failed"));
            break;
        }
        if Instant::now() > deadline {
            bail!("only {ok} of {total} connections opened in {CONNECT_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let racing = progress.phase("release", Some(total as u64));
    let ticker = Ticker::start(racing.clone(), Arc::clone(live));
    let start = Instant::now();
    release
        .send(Some(start))
        .context("every buyer stopped waiting")?;
    let mut samples = Vec::with_capacity(total);
    for buyer in buyers {
        if let Some(sample) = buyer.await.context("a buyer task panicked")? {
            samples.push(sample);
        }
    }
    let wall = start.elapsed();
    drop(ticker);
    racing.answers(&live.answers());
    racing.finish(&format!("{} answers in {wall:.2?}", samples.len()));
    Ok(RunData {
        samples,
        connect_errors: live.connect_failed.load(Ordering::Relaxed),
        dropped: 0,
        wall,
    })
}

/// Open connections, spread round-robin over the targets.
async fn open_connections(
    plan: &Plan,
    count: usize,
    progress: &Progress,
) -> anyhow::Result<Vec<Connection>> {
    let phase = progress.phase("connect", Some(count as u64));
    let mut connections = Vec::with_capacity(count);
    for i in 0..count {
        let target = Arc::clone(&plan.targets[i % plan.targets.len()]);
        connections.push(Connection::open(target).await?);
        phase.position(i as u64 + 1);
    }
    phase.finish(&format!("{count} connections open"));
    Ok(connections)
}

/// Connections to one target that `rate` sends borrow and give back.
struct Pool {
    idle: Mutex<Vec<Connection>>,
    /// One permit per idle connection.
    free: Semaphore,
}

async fn rate(
    plan: &Plan,
    shape: Shape,
    live: &Arc<Live>,
    progress: &Progress,
) -> anyhow::Result<RunData> {
    if !(shape.rate > 0.0 && shape.rate.is_finite()) {
        bail!("--rate must be a positive number of requests per second");
    }
    let arrivals = match shape.duration {
        Some(duration) => (shape.rate * duration.as_secs_f64()).round() as usize,
        None => plan.requests.len(),
    };
    let connections = shape.connections.max(plan.targets.len());
    let mut pools: Vec<Pool> = (0..plan.targets.len())
        .map(|_| Pool {
            idle: Mutex::new(Vec::new()),
            free: Semaphore::new(0),
        })
        .collect();
    for connection in open_connections(plan, connections, progress).await? {
        let i = plan
            .targets
            .iter()
            .position(|t| Arc::ptr_eq(t, connection.target()))
            .expect("a connection to one of the targets");
        pools[i]
            .idle
            .get_mut()
            .expect("not shared yet")
            .push(connection);
        pools[i].free.add_permits(1);
    }
    let pools = Arc::new(pools);
    let dropped = Arc::new(AtomicU64::new(0));

    let sending = progress.phase("send", Some(arrivals as u64));
    let ticker = Ticker::start(sending.clone(), Arc::clone(live));
    let start = tokio::time::Instant::now();
    let mut sends = Vec::with_capacity(arrivals);
    let mut next = 0usize;
    while next < arrivals {
        // Start every send that is due by now; then sleep until the next one.
        let now = start.elapsed();
        while next < arrivals {
            let due = Duration::from_secs_f64(next as f64 / shape.rate);
            if due > now {
                break;
            }
            let planned = plan.requests[next % plan.requests.len()];
            let (pools, live, dropped) =
                (Arc::clone(&pools), Arc::clone(live), Arc::clone(&dropped));
            let (path, user_id) = (plan.path.clone(), plan.user_id(planned.user));
            sends.push(tokio::spawn(async move {
                let pool = &pools[planned.target];
                // Wait for a free connection, but not forever: a send that
                // cannot start within DROP_AFTER of its due time is dropped.
                let permit =
                    tokio::time::timeout_at(start + due + DROP_AFTER, pool.free.acquire()).await;
                let Ok(Ok(permit)) = permit else {
                    dropped.fetch_add(1, Ordering::Relaxed);
                    return None;
                };
                permit.forget();
                let mut connection = pool
                    .idle
                    .lock()
                    .expect("pool lock")
                    .pop()
                    .expect("a permit means an idle connection");
                let sent = start.elapsed();
                let answer = connection.purchase(&path, &user_id).await;
                let done = start.elapsed();
                live.answer(answer.classified.outcome);
                if !connection.is_open()
                    && let Ok(fresh) = Connection::open(Arc::clone(connection.target())).await
                {
                    connection = fresh;
                }
                pool.idle.lock().expect("pool lock").push(connection);
                pool.free.add_permits(1);
                Some(Sample::new(planned.user, answer, due, sent, done))
            }));
            next += 1;
        }
        if next < arrivals {
            let due = Duration::from_secs_f64(next as f64 / shape.rate);
            tokio::time::sleep_until(start + due).await;
        }
    }
    let mut samples = Vec::with_capacity(arrivals);
    for send in sends {
        if let Some(sample) = send.await.context("a send task panicked")? {
            samples.push(sample);
        }
    }
    let wall = start.elapsed();
    drop(ticker);
    sending.answers(&live.answers());
    let dropped = dropped.load(Ordering::Relaxed);
    sending.finish(&format!(
        "{} answers, {dropped} dropped, in {wall:.2?}",
        samples.len()
    ));
    Ok(RunData {
        samples,
        connect_errors: 0,
        dropped,
        wall,
    })
}

async fn closed(
    plan: &Plan,
    shape: Shape,
    live: &Arc<Live>,
    progress: &Progress,
) -> anyhow::Result<RunData> {
    let connections = open_connections(plan, shape.connections.max(1), progress).await?;
    let total = plan.requests.len();
    let taken = Arc::new(AtomicUsize::new(0));
    let sending = progress.phase("send", shape.duration.is_none().then_some(total as u64));
    let ticker = Ticker::start(sending.clone(), Arc::clone(live));
    let start = Instant::now();
    let mut workers = Vec::with_capacity(connections.len());
    for mut connection in connections {
        let (taken, live) = (Arc::clone(&taken), Arc::clone(live));
        let (path, tag, requests) = (plan.path.clone(), plan.tag.clone(), plan.requests.clone());
        let duration = shape.duration;
        workers.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let k = taken.fetch_add(1, Ordering::Relaxed);
                let more = match duration {
                    Some(duration) => start.elapsed() < duration,
                    None => k < requests.len(),
                };
                if !more {
                    return samples;
                }
                let planned = requests[k % requests.len()];
                let sent = start.elapsed();
                let answer = connection
                    .purchase(&path, &user_id(&tag, planned.user))
                    .await;
                let done = start.elapsed();
                live.answer(answer.classified.outcome);
                samples.push(Sample::new(planned.user, answer, sent, sent, done));
                if !connection.is_open() {
                    match Connection::open(Arc::clone(connection.target())).await {
                        Ok(fresh) => connection = fresh,
                        Err(_) => return samples,
                    }
                }
            }
        }));
    }
    let mut samples = Vec::new();
    for worker in workers {
        samples.extend(worker.await.context("a sender task panicked")?);
    }
    let wall = start.elapsed();
    drop(ticker);
    sending.answers(&live.answers());
    sending.finish(&format!("{} answers in {wall:.2?}", samples.len()));
    Ok(RunData {
        samples,
        connect_errors: 0,
        dropped: 0,
        wall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duplicate_fraction_picks_that_share_of_buyers_spread_evenly() {
        let picked: Vec<u32> = (0..20).filter(|&u| is_duplicate(u, 0.25)).collect();
        assert_eq!(picked, vec![3, 7, 11, 15, 19]);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 0.05)).count(), 50);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 0.0)).count(), 0);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 1.0)).count(), 1000);
    }

    #[test]
    fn user_ids_are_valid_seckill_user_ids() {
        let id = user_id("0123abcd", u32::MAX);
        assert!(id.len() <= 64);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
