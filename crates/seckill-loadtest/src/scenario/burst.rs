//! The burst: the flash sale itself. Every buyer opens a connection of its
//! own first; then all wait at one start signal and fire together, so the
//! race measures the app and not TCP handshakes. How far apart the first
//! and the last send left (the launch skew) is reported on its own, so the
//! audience can see that the race was real.

use std::sync::Arc;

use anyhow::{Context, bail};
use tokio::sync::Semaphore;

use super::lanes::{
    Released, Runner, RunnerResult, connect, connections_per_lane, run_lanes, samples_of,
    wait_for_release,
};
use super::plan::{Plan, Planned};
use super::sample::{Live, RunData, Sample};
use crate::http::PurchaseAnswer;
use crate::progress::Progress;

/// How many connections a burst opens at once (over all lanes) while it gets ready.
const CONNECT_CONCURRENCY: usize = 256;

/// Files this process keeps open besides its connections (Redis,
/// PostgreSQL, stdio, the runtime's own).
const SPARE_FILES: usize = 64;

/// Fire every planned request at once.
pub(super) async fn run(plan: &Arc<Plan>, progress: &Progress) -> anyhow::Result<RunData> {
    let total = plan.requests.len();
    check_open_files(total)?;
    // One connection per request: lane `i` opens those of requests `i`,
    // `i + lanes`, `i + 2·lanes`, ...
    let connections = connections_per_lane(total, 0);
    run_lanes(
        plan,
        connections,
        progress,
        "release",
        Some(total as u64),
        burst_lane,
    )
    .await
}

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

/// A burst lane: every `lanes`-th request, each on a connection of its own,
/// all fired at the release.
async fn burst_lane(lane: Runner) -> RunnerResult {
    let Runner {
        index,
        lanes,
        plan,
        live,
        released,
        ..
    } = lane;
    let limit = Arc::new(Semaphore::new((CONNECT_CONCURRENCY / lanes).max(1)));
    let mut buyers = Vec::new();
    for planned in plan.requests.iter().skip(index).step_by(lanes).copied() {
        buyers.push(tokio::spawn(buy_at_release(
            Arc::clone(&plan),
            Arc::clone(&live),
            Arc::clone(&limit),
            released.clone(),
            planned,
        )));
    }
    RunnerResult {
        samples: samples_of(buyers).await,
        ..RunnerResult::default()
    }
}

/// One buyer of a burst: connect (at most `limit` at once in this lane),
/// wait for the release, send, and say how it went. `None` if the run was
/// abandoned before the release.
async fn buy_at_release(
    plan: Arc<Plan>,
    live: Arc<Live>,
    limit: Arc<Semaphore>,
    released: Released,
    planned: Planned,
) -> Option<Sample> {
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
        None => PurchaseAnswer::error(),
    };
    let done = start.elapsed();
    live.answer(answer.classified.outcome);
    // Latency from the buyer's own send: how long the app took.
    // How late the send left after the release is the launch skew,
    // reported on its own.
    Some(Sample::new(planned.user, answer, sent, sent, done))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_larger_than_the_open_files_limit_is_refused_up_front() {
        assert!(check_open_files(1).is_ok());
        let refused = check_open_files(usize::MAX / 2).expect_err("far above any limit");
        assert!(
            refused.to_string().contains("use fewer --users"),
            "{refused}"
        );
    }
}
