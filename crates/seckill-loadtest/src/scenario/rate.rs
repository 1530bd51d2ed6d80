//! The rate scenario, an open model: requests fall due at a fixed rate,
//! whether or not earlier ones were answered, and go out on pooled
//! connections.
//!
//! Latency runs from the moment a request was *due*, not from when it was
//! finally sent, so a generator or server that falls behind shows up as
//! latency instead of hiding it (the "coordinated omission" trap). A send
//! that starts more than [`LATE_AFTER`] after its due time is counted as
//! late; one that finds no free connection within [`DROP_AFTER`] is
//! dropped and counted. Either makes the run invalid when there are many.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::lanes::{
    Runner, RunnerResult, connect, connections_per_lane, run_lanes, samples_of, wait_for_release,
};
use super::plan::{Plan, Planned, Shape};
use super::sample::{Live, RunData, Sample, micros_of};
use crate::http::{Connection, PurchaseAnswer};
use crate::progress::Progress;

/// A `rate` send that starts this much after it was due counts as late.
pub(crate) const LATE_AFTER: Duration = Duration::from_millis(10);
/// A `rate` send still waiting for a connection this long after it was due
/// is dropped (and counted): the generator cannot keep the rate.
const DROP_AFTER: Duration = Duration::from_secs(1);

/// Send `shape.rate` requests a second, for `shape.duration` or until
/// every planned request was sent once.
pub(super) async fn run(
    plan: &Arc<Plan>,
    shape: Shape,
    progress: &Progress,
) -> anyhow::Result<RunData> {
    let arrivals = match shape.duration {
        Some(duration) => (shape.rate * duration.as_secs_f64()).round() as usize,
        None => plan.requests.len(),
    };
    let connections = connections_per_lane(shape.connections, plan.targets.len());
    run_lanes(
        plan,
        connections,
        progress,
        "send",
        Some(arrivals as u64),
        move |lane| rate_lane(lane, shape.rate, arrivals),
    )
    .await
}

/// Connections to one target that a rate lane's sends borrow and give back.
struct Pool {
    /// Idle connections, the most recently used last. A std Mutex, not a tokio
    /// one: nothing awaits while it is held.
    idle: Mutex<VecDeque<Connection>>,
    /// One permit per idle connection.
    free: Semaphore,
}

impl Pool {
    fn new() -> Self {
        Self {
            idle: Mutex::new(VecDeque::new()),
            free: Semaphore::new(0),
        }
    }

    /// Put a connection (back) at the end of the idle queue.
    fn give_back(&self, connection: Connection) {
        self.idle.lock().expect("pool lock").push_back(connection);
        self.free.add_permits(1);
    }

    /// Borrow the connection used most recently, waiting for one until
    /// `deadline`; `None` if none came free in time.
    async fn borrow_by(&self, deadline: Instant) -> Option<Connection> {
        let permit = tokio::time::timeout_at(deadline, self.free.acquire()).await;
        let Ok(Ok(permit)) = permit else {
            return None;
        };
        permit.forget();
        // The most recently used first: the connections the rate needs stay
        // warm, and the rest sit idle. (The longest idle first kept every
        // connection in use only while the rate was high: at 100 sends/s
        // over 512 connections each one idled past the server's 5 s
        // keep-alive.) One borrowed after idling long is opened again by
        // `Connection::purchase`.
        let connection = self
            .idle
            .lock()
            .expect("pool lock")
            .pop_back()
            .expect("a permit means an idle connection");
        Some(connection)
    }
}

/// What the sends of one rate lane share.
struct Sends {
    /// What to send, and to which target.
    plan: Arc<Plan>,
    /// Where each answer is counted as it comes.
    live: Arc<Live>,
    /// One pool per target.
    pools: Vec<Pool>,
    /// When each send dropped for want of a free connection was due, in
    /// µs after the release. A std Mutex: held for one push, never across
    /// an await.
    dropped: Mutex<Vec<u64>>,
    /// The release.
    start: Instant,
}

impl Sends {
    /// Send `planned`, due `due` after the release, on a connection of its
    /// target's pool; `None` if it was dropped.
    async fn send(self: Arc<Self>, planned: Planned, due: Duration) -> Option<Sample> {
        let pool = &self.pools[planned.target];
        // Wait for a free connection, but not forever: a send that cannot
        // start within DROP_AFTER of its due time is dropped.
        let Some(mut connection) = pool.borrow_by(self.start + due + DROP_AFTER).await else {
            self.dropped
                .lock()
                .expect("dropped sends poisoned")
                .push(micros_of(due));
            return None;
        };
        let user_id = self.plan.user_id(planned.user);
        // A reconnect is the generator's time, not the server's; one that
        // failed is an error answer, not tried again on the server's time.
        let fresh = connection.freshen().await;
        let sent = self.start.elapsed();
        let answer = if fresh {
            connection.purchase(&self.plan.path, &user_id).await
        } else {
            PurchaseAnswer::error()
        };
        let done = self.start.elapsed();
        self.live.answer(answer.classified.outcome);
        pool.give_back(connection);
        Some(Sample::new(planned.user, answer, due, sent, done))
    }
}

/// A rate lane: arrivals `lane`, `lane + lanes`, ... each due at `k / rate`
/// seconds after the release, sent on a pooled connection.
async fn rate_lane(lane: Runner, rate: f64, arrivals: usize) -> RunnerResult {
    let pools = open_pools(&lane).await;
    let Some(start) = wait_for_release(lane.released).await else {
        return RunnerResult::default();
    };
    let sends = Arc::new(Sends {
        plan: lane.plan,
        live: lane.live,
        pools,
        dropped: Mutex::new(Vec::new()),
        start: Instant::from_std(start),
    });
    let mut started = Vec::new();
    for k in (lane.index..arrivals).step_by(lane.lanes) {
        let due = Duration::from_secs_f64(k as f64 / rate);
        if sends.start + due > Instant::now() {
            tokio::time::sleep_until(sends.start + due).await;
        }
        let planned = sends.plan.requests[k % sends.plan.requests.len()];
        started.push(tokio::spawn(Arc::clone(&sends).send(planned, due)));
    }
    let samples = samples_of(started).await;
    let dropped_at = std::mem::take(&mut *sends.dropped.lock().expect("dropped sends poisoned"));
    RunnerResult {
        samples,
        dropped: dropped_at.len() as u64,
        dropped_at,
    }
}

/// Open the lane's connections, spread round-robin over the targets, each
/// into its target's pool.
async fn open_pools(lane: &Runner) -> Vec<Pool> {
    let targets = &lane.plan.targets;
    let pools: Vec<Pool> = targets.iter().map(|_| Pool::new()).collect();
    for c in 0..lane.connections {
        let target = c % targets.len();
        if let Some(connection) = connect(&targets[target], &lane.live).await {
            pools[target].give_back(connection);
        }
    }
    pools
}
