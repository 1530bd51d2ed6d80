//! The closed scenario, like wrk or ab: C connections, each sending its
//! next request as soon as the previous one is answered. Useful to compare
//! with those tools; it cannot show coordinated omission, since a slow
//! answer also delays the next send. Each connection keeps to one instance
//! (connections are spread round-robin), whatever instance the plan gave
//! the buyer.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::lanes::{
    Runner, RunnerResult, connect, connections_per_lane, run_lanes, wait_for_release,
};
use super::plan::{Plan, Shape};
use super::sample::{Live, RunData, Sample};
use crate::http::{Connection, PurchaseAnswer};
use crate::progress::Progress;

/// Send back to back on `shape.connections` connections, for
/// `shape.duration` or until every planned request was sent once.
pub(super) async fn run(
    plan: &Arc<Plan>,
    shape: Shape,
    progress: &Progress,
) -> anyhow::Result<RunData> {
    // A closed loop keeps to one instance per connection: no lane needs
    // one of each.
    let connections = connections_per_lane(shape.connections, 0);
    // The next planned request to send, shared by every loop of every lane.
    let taken = Arc::new(AtomicUsize::new(0));
    let sends = shape
        .duration
        .is_none()
        .then_some(plan.requests.len() as u64);
    run_lanes(plan, connections, progress, "send", sends, move |lane| {
        closed_lane(lane, shape.duration, Arc::clone(&taken))
    })
    .await
}

/// A closed lane: its connections' loops, each sending the next planned
/// request (shared across lanes through `taken`) as soon as its previous
/// one is answered.
async fn closed_lane(
    lane: Runner,
    duration: Option<Duration>,
    taken: Arc<AtomicUsize>,
) -> RunnerResult {
    let Runner {
        index,
        lanes,
        connections,
        plan,
        live,
        released,
    } = lane;
    let mut opened = Vec::with_capacity(connections);
    for c in 0..connections {
        // Connection `lane + c·lanes` of the run, spread round-robin.
        let target = (index + c * lanes) % plan.targets.len();
        if let Some(connection) = connect(&plan.targets[target], &live).await {
            opened.push(connection);
        }
    }
    let Some(start) = wait_for_release(released).await else {
        return RunnerResult::default();
    };
    let mut loops = Vec::with_capacity(opened.len());
    for connection in opened {
        loops.push(tokio::spawn(send_back_to_back(
            Arc::clone(&plan),
            Arc::clone(&live),
            Arc::clone(&taken),
            duration,
            start,
            connection,
        )));
    }
    let mut result = RunnerResult::default();
    for samples in loops {
        result.samples.extend(samples.await.unwrap_or_default());
    }
    result
}

/// One connection's loop: take the next planned request, send it, wait
/// for the answer, again, until `duration` is over since `start` or, without
/// one, every planned request has been taken.
async fn send_back_to_back(
    plan: Arc<Plan>,
    live: Arc<Live>,
    taken: Arc<AtomicUsize>,
    duration: Option<Duration>,
    start: Instant,
    mut connection: Connection,
) -> Vec<Sample> {
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
        // A reconnect is the generator's time, not the server's; one that
        // failed is an error answer, not tried again on the server's time.
        let fresh = connection.freshen().await;
        let sent = start.elapsed();
        let answer = if fresh {
            connection.purchase(&plan.path, &user_id).await
        } else {
            PurchaseAnswer::error()
        };
        let done = start.elapsed();
        live.answer(answer.classified.outcome);
        samples.push(Sample::new(planned.user, answer, sent, sent, done));
    }
}
