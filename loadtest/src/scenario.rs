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
//!   Each connection keeps to one instance (connections are spread
//!   round-robin), whatever instance the plan gave the buyer.
//!
//! Every request is `POST /api/sales/{id}/purchase` for one buyer. Buyer `i`
//! goes to instance `i mod n`; a buyer's duplicate request (see
//! [`Plan::new`]) goes to the next instance, so duplicates race across
//! instances, where only the shared Redis can stop them.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;
use tokio::sync::{Semaphore, oneshot, watch};
use uuid::Uuid;

use crate::http::{Answer, Connection, Target};
use crate::outcome::Outcome;
use crate::progress::{Phase, Progress};

/// How many connections a burst opens at once (over all lanes) while it gets ready.
const CONNECT_CONCURRENCY: usize = 256;
/// How long a run waits for all its connections.
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
    /// Every buyer once, each duplicate right after its original.
    pub requests: Vec<Planned>,
}

impl Plan {
    /// `users` buyers spread round-robin over `targets`; a fraction `dup` of
    /// them, spread evenly, also send a second request at the same moment.
    pub fn new(sale_id: i64, users: u32, dup: f64, targets: Vec<Arc<Target>>) -> Self {
        let n = targets.len().max(1);
        // A duplicate right after its original: in a burst both leave in the
        // same moment, and a rate or closed run that stops early sends both.
        let mut requests = Vec::with_capacity(users as usize);
        for user in 0..users {
            let target = user as usize % n;
            requests.push(Planned { user, target });
            if is_duplicate(user, dup) {
                requests.push(Planned {
                    user,
                    target: (target + 1) % n,
                });
            }
        }
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
pub async fn run(plan: &Arc<Plan>, shape: Shape, progress: &Progress) -> anyhow::Result<RunData> {
    if plan.targets.is_empty() {
        bail!("no target to send requests to");
    }
    if plan.requests.is_empty() {
        bail!("no buyers: --users must be at least 1");
    }
    if shape.scenario == Scenario::Rate && !(shape.rate > 0.0 && shape.rate.is_finite()) {
        bail!("--rate must be a positive number of requests per second");
    }
    let lanes = std::thread::available_parallelism().map_or(1, |n| n.get());
    let live = Arc::new(Live::default());
    let (plan, live_for_lanes) = (Arc::clone(plan), Arc::clone(&live));
    match shape.scenario {
        Scenario::Burst => {
            let total = plan.requests.len();
            check_open_files(total)?;
            run_lanes(
                lanes,
                total,
                &live,
                progress,
                "release",
                Some(total as u64),
                move |lane, released| {
                    burst_lane(
                        Arc::clone(&plan),
                        Arc::clone(&live_for_lanes),
                        lanes,
                        lane,
                        released,
                    )
                },
            )
            .await
        }
        Scenario::Rate => {
            let arrivals = match shape.duration {
                Some(duration) => (shape.rate * duration.as_secs_f64()).round() as usize,
                None => plan.requests.len(),
            };
            let counts = lane_connections(shape.connections, lanes, plan.targets.len());
            let total = counts.iter().sum();
            run_lanes(
                lanes,
                total,
                &live,
                progress,
                "send",
                Some(arrivals as u64),
                move |lane, released| {
                    rate_lane(
                        Arc::clone(&plan),
                        Arc::clone(&live_for_lanes),
                        shape,
                        arrivals,
                        (lane, lanes, counts[lane]),
                        released,
                    )
                },
            )
            .await
        }
        Scenario::Closed => {
            // A closed loop keeps to one instance per connection: no lane
            // needs one of each.
            let counts = lane_connections(shape.connections, lanes, 0);
            let total = counts.iter().sum();
            let taken = Arc::new(AtomicUsize::new(0));
            let sends = shape
                .duration
                .is_none()
                .then_some(plan.requests.len() as u64);
            run_lanes(
                lanes,
                total,
                &live,
                progress,
                "send",
                sends,
                move |lane, released| {
                    closed_lane(
                        Arc::clone(&plan),
                        Arc::clone(&live_for_lanes),
                        shape.duration,
                        Arc::clone(&taken),
                        (lane, lanes, counts[lane]),
                        released,
                    )
                },
            )
            .await
        }
    }
}

/// Files this process keeps open besides its connections (Redis,
/// PostgreSQL, stdio, the runtime's own).
const SPARE_FILES: usize = 64;

/// A burst holds one connection per request at once: refuse one that the
/// open-files limit would cut short, before any connection is opened.
fn check_open_files(connections: usize) -> anyhow::Result<()> {
    use nix::sys::resource::{Resource, getrlimit};
    let (soft, _) = getrlimit(Resource::RLIMIT_NOFILE).context("reading the open-files limit")?;
    let allowed = usize::try_from(soft).unwrap_or(usize::MAX);
    if connections + SPARE_FILES > allowed {
        bail!(
            "a burst of {connections} requests holds {connections} connections at once, but this \
             process may open only {allowed} files (`ulimit -n`; the hard limit is the most it \
             can raise itself to): use fewer --users or --dup, or raise the limit"
        );
    }
    Ok(())
}

/// How many connections each lane opens: `total` shared out, and at least
/// `minimum` in every lane (a rate lane needs one per instance, so that it
/// can send to any of them; a closed lane's connections keep to theirs).
fn lane_connections(total: usize, lanes: usize, minimum: usize) -> Vec<usize> {
    (0..lanes)
        .map(|lane| (total / lanes + usize::from(lane < total % lanes)).max(minimum))
        .collect()
}

/// The start signal: `None` until the release, then the release instant.
type Released = watch::Receiver<Option<Instant>>;

/// What one lane sent.
#[derive(Default)]
struct LaneResult {
    samples: Vec<Sample>,
    dropped: u64,
}

/// Send from `lanes` threads, each running a single-threaded tokio runtime
/// of its own (as wrk runs one event loop per thread). Each lane opens its
/// connections, counts them in `live`, and waits for the release; this
/// function waits until all `connections` are open (or failed), releases
/// every lane at one instant, and gathers what they sent.
///
/// Why lanes and not one multi-threaded runtime: a socket's readiness then
/// wakes a task on the thread that polls it, with no work stealing and no
/// hand-over between threads. On two cores shared with the app under test,
/// that is the difference between keeping up with wrk and not.
async fn run_lanes<F, Fut>(
    lanes: usize,
    connections: usize,
    live: &Arc<Live>,
    progress: &Progress,
    phase: &str,
    total: Option<u64>,
    lane: F,
) -> anyhow::Result<RunData>
where
    F: Fn(usize, Released) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = LaneResult>,
{
    let connecting = progress.phase("connect", Some(connections as u64));
    let (release, released) = watch::channel::<Option<Instant>>(None);
    let lane = Arc::new(lane);
    let mut results = Vec::with_capacity(lanes);
    for i in 0..lanes {
        let (lane, released) = (Arc::clone(&lane), released.clone());
        let (done, result) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("lane-{i}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for a lane");
                let _ = done.send(runtime.block_on(lane(i, released)));
            })
            .context("starting a lane thread")?;
        results.push(result);
    }

    // Wait until every connection is open (or failed).
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let (ok, failed) = (
            live.connected.load(Ordering::Relaxed),
            live.connect_failed.load(Ordering::Relaxed),
        );
        connecting.position(ok + failed);
        if ok + failed >= connections as u64 {
            connecting.finish(&format!("{ok} connections open, {failed} failed"));
            break;
        }
        if Instant::now() > deadline {
            // Dropping `release` tells every lane to give up.
            bail!("only {ok} of {connections} connections opened in {CONNECT_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let sending = progress.phase(phase, total);
    let ticker = Ticker::start(sending.clone(), Arc::clone(live));
    let start = Instant::now();
    release
        .send(Some(start))
        .context("every lane stopped waiting")?;
    let mut data = RunData::default();
    for result in results {
        let result = result.await.context("a lane thread panicked")?;
        data.samples.extend(result.samples);
        data.dropped += result.dropped;
    }
    data.wall = start.elapsed();
    data.connect_errors = live.connect_failed.load(Ordering::Relaxed);
    drop(ticker);
    sending.answers(&live.answers());
    sending.finish(&format!(
        "{} answers, {} dropped, in {:.2?}",
        data.samples.len(),
        data.dropped,
        data.wall
    ));
    Ok(data)
}

/// Wait for the release; `None` if the run was abandoned.
async fn wait_for_release(mut released: Released) -> Option<Instant> {
    released
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|start| *start)
}

/// Open a connection and count it in `live`.
async fn connect(target: &Arc<Target>, live: &Live) -> Option<Connection> {
    match Connection::open(Arc::clone(target)).await {
        Ok(connection) => {
            live.connected.fetch_add(1, Ordering::Relaxed);
            Some(connection)
        }
        Err(_) => {
            live.connect_failed.fetch_add(1, Ordering::Relaxed);
            None
        }
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

/// A burst lane: every `lanes`-th request, each on a connection of its own,
/// all fired at the release.
async fn burst_lane(
    plan: Arc<Plan>,
    live: Arc<Live>,
    lanes: usize,
    lane: usize,
    released: Released,
) -> LaneResult {
    let limit = Arc::new(Semaphore::new((CONNECT_CONCURRENCY / lanes).max(1)));
    let mut buyers = Vec::new();
    for planned in plan.requests.iter().skip(lane).step_by(lanes).copied() {
        let (plan, live, limit, released) = (
            Arc::clone(&plan),
            Arc::clone(&live),
            Arc::clone(&limit),
            released.clone(),
        );
        buyers.push(tokio::spawn(async move {
            let connection = {
                let _permit = limit
                    .acquire()
                    .await
                    .expect("the semaphore is never closed");
                connect(&plan.targets[planned.target], &live).await
            };
            let user_id = plan.user_id(planned.user);
            // Everybody waits here until the release.
            let start = wait_for_release(released).await?;
            let sent = start.elapsed();
            let answer = match connection {
                Some(mut connection) => connection.purchase(&plan.path, &user_id).await,
                None => Answer::error(),
            };
            let done = start.elapsed();
            live.answer(answer.classified.outcome);
            // Latency from the buyer's own send: how long the app took.
            // How late the send left after the release is the launch skew,
            // reported on its own.
            Some(Sample::new(planned.user, answer, sent, sent, done))
        }));
    }
    let mut result = LaneResult::default();
    for buyer in buyers {
        if let Ok(Some(sample)) = buyer.await {
            result.samples.push(sample);
        }
    }
    result
}

/// Connections to one target that a rate lane's sends borrow and give back.
struct Pool {
    idle: Mutex<VecDeque<Connection>>,
    /// One permit per idle connection.
    free: Semaphore,
}

/// A rate lane: arrivals `lane`, `lane + lanes`, ... each due at `k / rate`
/// seconds after the release, sent on a pooled connection.
async fn rate_lane(
    plan: Arc<Plan>,
    live: Arc<Live>,
    shape: Shape,
    arrivals: usize,
    (lane, lanes, connections): (usize, usize, usize),
    released: Released,
) -> LaneResult {
    let pools: Arc<Vec<Pool>> = Arc::new(
        (0..plan.targets.len())
            .map(|_| Pool {
                idle: Mutex::new(VecDeque::new()),
                free: Semaphore::new(0),
            })
            .collect(),
    );
    for c in 0..connections {
        let target = c % plan.targets.len();
        if let Some(connection) = connect(&plan.targets[target], &live).await {
            pools[target]
                .idle
                .lock()
                .expect("pool lock")
                .push_back(connection);
            pools[target].free.add_permits(1);
        }
    }
    let Some(start) = wait_for_release(released).await else {
        return LaneResult::default();
    };
    let start = tokio::time::Instant::from_std(start);
    let dropped = Arc::new(AtomicU64::new(0));
    let mut sends = Vec::new();
    for k in (lane..arrivals).step_by(lanes) {
        let due = Duration::from_secs_f64(k as f64 / shape.rate);
        if start + due > tokio::time::Instant::now() {
            tokio::time::sleep_until(start + due).await;
        }
        let planned = plan.requests[k % plan.requests.len()];
        let (plan, pools, live, dropped) = (
            Arc::clone(&plan),
            Arc::clone(&pools),
            Arc::clone(&live),
            Arc::clone(&dropped),
        );
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
            // The longest idle first: every connection stays in use, so
            // none sits idle long enough for the server to close it.
            let mut connection = pool
                .idle
                .lock()
                .expect("pool lock")
                .pop_front()
                .expect("a permit means an idle connection");
            let user_id = plan.user_id(planned.user);
            let sent = start.elapsed();
            let answer = connection.purchase(&plan.path, &user_id).await;
            let done = start.elapsed();
            live.answer(answer.classified.outcome);
            pool.idle.lock().expect("pool lock").push_back(connection);
            pool.free.add_permits(1);
            Some(Sample::new(planned.user, answer, due, sent, done))
        }));
    }
    let mut result = LaneResult::default();
    for send in sends {
        if let Ok(Some(sample)) = send.await {
            result.samples.push(sample);
        }
    }
    result.dropped = dropped.load(Ordering::Relaxed);
    result
}

/// A closed lane: `connections` loops, each sending the next planned
/// request (shared across lanes through `taken`) as soon as its previous
/// one is answered.
async fn closed_lane(
    plan: Arc<Plan>,
    live: Arc<Live>,
    duration: Option<Duration>,
    taken: Arc<AtomicUsize>,
    (lane, lanes, connections): (usize, usize, usize),
    released: Released,
) -> LaneResult {
    let mut opened = Vec::with_capacity(connections);
    for c in 0..connections {
        // Connection `lane + c·lanes` of the run, spread round-robin.
        let target = (lane + c * lanes) % plan.targets.len();
        if let Some(connection) = connect(&plan.targets[target], &live).await {
            opened.push(connection);
        }
    }
    let Some(start) = wait_for_release(released).await else {
        return LaneResult::default();
    };
    let mut loops = Vec::with_capacity(opened.len());
    for mut connection in opened {
        let (plan, live, taken) = (Arc::clone(&plan), Arc::clone(&live), Arc::clone(&taken));
        loops.push(tokio::spawn(async move {
            let mut samples = Vec::new();
            loop {
                let k = taken.fetch_add(1, Ordering::Relaxed);
                let more = match duration {
                    Some(duration) => start.elapsed() < duration,
                    None => k < plan.requests.len(),
                };
                if !more {
                    return samples;
                }
                let planned = plan.requests[k % plan.requests.len()];
                let user_id = plan.user_id(planned.user);
                let sent = start.elapsed();
                let answer = connection.purchase(&plan.path, &user_id).await;
                let done = start.elapsed();
                live.answer(answer.classified.outcome);
                samples.push(Sample::new(planned.user, answer, sent, sent, done));
            }
        }));
    }
    let mut result = LaneResult::default();
    for samples in loops {
        result.samples.extend(samples.await.unwrap_or_default());
    }
    result
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
    fn every_lane_gets_its_share_of_connections_and_one_per_target() {
        assert_eq!(lane_connections(64, 2, 2), vec![32, 32]);
        assert_eq!(lane_connections(5, 2, 1), vec![3, 2]);
        assert_eq!(lane_connections(1, 2, 3), vec![3, 3]);
        // A closed run opens exactly what was asked for.
        assert_eq!(lane_connections(1, 2, 0), vec![1, 0]);
    }

    #[test]
    fn a_burst_larger_than_the_open_files_limit_is_refused_up_front() {
        assert!(check_open_files(1).is_ok());
        let refused = check_open_files(usize::MAX / 2).expect_err("far above any limit");
        assert!(
            refused.to_string().contains("use fewer --users"),
            "{refused}"
        );
    }

    #[test]
    fn user_ids_are_valid_seckill_user_ids() {
        let id = user_id("0123abcd", u32::MAX);
        assert!(id.len() <= 64);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
