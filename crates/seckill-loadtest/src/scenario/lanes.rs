//! The machinery every scenario shares: lanes that send, the start signal
//! that releases them at one instant, and the counting of connections and
//! answers while they run.
//!
//! A lane is an OS thread running a single-threaded tokio runtime of its
//! own, as wrk runs one event loop per thread. Why lanes and not one
//! multi-threaded runtime: a socket's readiness then wakes a task on the
//! thread that polls it, with no work stealing and no hand-over between
//! threads. On two cores shared with the app under test, that is the
//! difference between keeping up with wrk and not.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;

use super::plan::Plan;
use super::sample::{Live, RunData, Sample};
use crate::http::{Connection, Target};
use crate::progress::{Phase, Progress};

/// How long a run waits for all its connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(120);

/// The start signal: `None` until the release, then the release instant.
pub(super) type Released = watch::Receiver<Option<Instant>>;

/// What one lane is given to work with.
pub(super) struct Runner {
    /// This lane's number, from 0.
    pub index: usize,
    /// How many lanes the run has.
    pub lanes: usize,
    /// How many connections this lane opens before the release.
    pub connections: usize,
    /// What to send, and to which target.
    pub plan: Arc<Plan>,
    /// Where the lane counts its connections and answers.
    pub live: Arc<Live>,
    /// The start signal every lane waits for.
    pub released: Released,
}

/// What one lane sent.
#[derive(Default)]
pub(super) struct RunnerResult {
    /// One per answered request.
    pub samples: Vec<Sample>,
    /// `rate` sends dropped for want of a free connection.
    pub dropped: u64,
    /// When each of them was due, in µs after the release.
    pub dropped_at: Vec<u64>,
}

/// How many connections each lane of a run opens, one lane per core:
/// `total` shared out, and at least `minimum` in every lane.
pub(super) fn connections_per_lane(total: usize, minimum: usize) -> Vec<usize> {
    let lanes = std::thread::available_parallelism().map_or(1, |n| n.get());
    lane_connections(total, lanes, minimum)
}

/// How many connections each lane opens: `total` shared out, and at least
/// `minimum` in every lane (a rate lane needs one per instance, so that it
/// can send to any of them; a closed lane's connections keep to theirs).
fn lane_connections(total: usize, lanes: usize, minimum: usize) -> Vec<usize> {
    (0..lanes)
        .map(|lane| (total / lanes + usize::from(lane < total % lanes)).max(minimum))
        .collect()
}

/// Send from one lane per entry of `connections` (how many connections
/// that lane opens). Each lane opens its connections, counts them in its
/// [`Live`], and waits for the release; this function waits until all of
/// them are open (or failed), releases every lane at one instant, shows
/// the `phase` (of `total` sends, when known) until they are done, and
/// gathers what they sent.
pub(super) async fn run_lanes<F, Fut>(
    plan: &Arc<Plan>,
    connections: Vec<usize>,
    progress: &Progress,
    phase: &str,
    total: Option<u64>,
    lane: F,
) -> anyhow::Result<RunData>
where
    F: Fn(Runner) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RunnerResult>,
{
    let live = Arc::new(Live::default());
    let opening: usize = connections.iter().sum();
    let connecting = progress.phase("connect", Some(opening as u64));
    let (release, released) = watch::channel::<Option<Instant>>(None);
    let results = start_lanes(plan, &live, &connections, &released, lane)?;
    // Returning early drops `release`, which tells every lane to give up.
    wait_for_connections(&live, opening, &connecting).await?;

    let sending = progress.phase(phase, total);
    let ticker = Ticker::start(sending.clone(), Arc::clone(&live));
    let start = Instant::now();
    release
        .send(Some(start))
        .context("every lane stopped waiting")?;
    let mut data = RunData::default();
    for result in results {
        let result = result.await.context("a lane thread panicked")?;
        data.samples.extend(result.samples);
        data.dropped += result.dropped;
        data.dropped_at_us.extend(result.dropped_at);
    }
    data.wall = start.elapsed();
    data.started = Some(start);
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

/// Start one thread per lane, each with its own single-threaded runtime;
/// each hands back its [`RunnerResult`] through the receiver returned for it.
fn start_lanes<F, Fut>(
    plan: &Arc<Plan>,
    live: &Arc<Live>,
    connections: &[usize],
    released: &Released,
    lane: F,
) -> anyhow::Result<Vec<oneshot::Receiver<RunnerResult>>>
where
    F: Fn(Runner) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = RunnerResult>,
{
    let run_lane = Arc::new(lane);
    let mut results = Vec::with_capacity(connections.len());
    for (index, &opens) in connections.iter().enumerate() {
        let run_lane = Arc::clone(&run_lane);
        let lane = Runner {
            index,
            lanes: connections.len(),
            connections: opens,
            plan: Arc::clone(plan),
            live: Arc::clone(live),
            released: released.clone(),
        };
        let (done, result) = oneshot::channel();
        std::thread::Builder::new()
            .name(format!("lane-{index}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for a lane");
                let _ = done.send(runtime.block_on(run_lane(lane)));
            })
            .context("starting a lane thread")?;
        results.push(result);
    }
    Ok(results)
}

/// Wait until `connections` connections are open (or failed), showing the
/// count in `connecting`; give up after [`CONNECT_TIMEOUT`].
async fn wait_for_connections(
    live: &Live,
    connections: usize,
    connecting: &Phase,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    loop {
        let (ok, failed) = (
            live.connected.load(Ordering::Relaxed),
            live.connect_failed.load(Ordering::Relaxed),
        );
        connecting.position(ok + failed);
        if ok + failed >= connections as u64 {
            connecting.finish(&format!("{ok} connections open, {failed} failed"));
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("only {ok} of {connections} connections opened in {CONNECT_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Wait for the release; `None` if the run was abandoned.
pub(super) async fn wait_for_release(mut released: Released) -> Option<Instant> {
    released
        .wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|start| *start)
}

/// Open a connection and count it in `live`.
pub(super) async fn connect(target: &Arc<Target>, live: &Live) -> Option<Connection> {
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

/// The samples of a lane's sends, in the order they were started; a send
/// that gave none (abandoned, dropped, or its task failed) is left out.
pub(super) async fn samples_of(sends: Vec<JoinHandle<Option<Sample>>>) -> Vec<Sample> {
    let mut samples = Vec::with_capacity(sends.len());
    for send in sends {
        if let Ok(Some(sample)) = send.await {
            samples.push(sample);
        }
    }
    samples
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_lane_gets_its_share_of_connections_and_one_per_target() {
        assert_eq!(lane_connections(64, 2, 2), vec![32, 32]);
        assert_eq!(lane_connections(5, 2, 1), vec![3, 2]);
        assert_eq!(lane_connections(1, 2, 3), vec![3, 3]);
        // A closed run opens exactly what was asked for.
        assert_eq!(lane_connections(1, 2, 0), vec![1, 0]);
    }
}
