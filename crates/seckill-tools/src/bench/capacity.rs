//! What one request costs each process a sale runs on, for docs/capacity.md:
//! CPU time per request in an instance, in Redis, in PostgreSQL and in the
//! worker, read from their own clocks (`cpu.rs`) before and after runs of
//! a known number of requests, and the ceilings that follow.
//!
//! One `lock` instance and one `seckill worker`, each a process of its
//! own, on a private Redis (nothing else runs on it: its clock is the
//! sale's alone) and the PostgreSQL the bench found. Four runs of
//! `--capacity-requests` requests each, every request a new buyer, 64
//! at a time:
//! 1. **accepted purchases**: a sale of exactly that many units, bought
//!    out; the reading after it waits until PostgreSQL holds every order
//!    confirmed, so the worker's and PostgreSQL's share is the drain's too;
//! 2. **refused purchases**: the same sale, now sold out (`409 sold_out`);
//! 3. **room joins**: buyers joining a sale's waiting room that admits
//!    nobody more, so that they all stay in line;
//! 4. **room status answers**: each of them asking once where it stands,
//!    far back in line, as a crowd asks every second or two.
//!
//! Every process spends some CPU doing nothing (timers, the worker's
//! poll of each sale in play, PostgreSQL's background writers): measured
//! first for a few seconds, the two sales created and nobody buying, and
//! that rate times each run's length is taken off its figure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::json;

use super::compare::Figure;
use super::cpu::{Clocks, PROCESSES, Reading, postgres_is_here};
use super::{BenchArgs, Row};
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::redis_pool::{RedisAt, connect_redis};
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::{PrivateRedis, Services};
use seckill_loadtest::answer::AnswerKind;
use seckill_loadtest::http::Target;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::scenario::{self, Plan, Scenario, Shape};

/// How long the processes are watched doing nothing.
const IDLE: Duration = Duration::from_secs(3);
/// Requests in flight in every run.
const IN_FLIGHT: usize = 64;
/// How long the worker may take to drain the accepted purchases.
const DRAIN_LIMIT: Duration = Duration::from_secs(300);
/// The instance's and the worker's names.
const INSTANCE: &str = "bench-capacity-1";
const WORKER: &str = "bench-capacity-worker";
/// Buyers at the head of the room's line, left out of the status run:
/// the rest stand far back, answered from the instance's look at the room.
const HEAD: usize = 10;

/// The runs, in the order the rows list them.
const KINDS: [&str; 4] = [
    "accepted purchase",
    "refused (sold out)",
    "room join",
    "room status",
];

/// What the runs measured.
struct Costs {
    /// Requests in each run.
    requests: u32,
    /// µs of CPU per request, `[kind][process]`, the idle rate taken off.
    per_request: [[f64; 4]; 4],
    /// ms of CPU per second each process spends doing nothing.
    idle: [f64; 4],
}

/// The rows: each process' CPU per request of each kind, their idle
/// rates, and the ceilings of one Redis primary and one PostgreSQL.
pub(super) async fn capacity(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Vec<Row>> {
    anyhow::ensure!(
        postgres_is_here(store.pg()).await?,
        "the capacity rows read PostgreSQL's processes in /proc: run the bench on its machine"
    );
    let redis = PrivateRedis::start().await?;
    let at = RedisAt::Server(redis.url());
    let pool = connect_redis(&at, Duration::from_secs(5)).await?;
    let store = Store::new(store.pg().clone(), pool, store.prefix());
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?
        .on_redis(&at)
        // Nobody in line is dropped for not asking while the runs go on.
        .env("SECKILL_ROOM_ABANDON_SECS", "86400");
    let fleet = Fleet::start(deployment, "bench-capacity", 1).await?;
    let costs = measure(args.capacity_requests, &fleet, &store).await;
    fleet.stop().await;
    // The private Redis stops here, after the processes that used it.
    drop(redis);
    Ok(rows(&costs?))
}

/// The idle rates, then the four runs.
async fn measure(requests: u32, fleet: &Fleet, store: &Store) -> anyhow::Result<Costs> {
    let url = fleet.url(INSTANCE)?;
    let mut redis = store.redis().await?;
    let mut clocks = Clocks {
        fleet,
        instance: INSTANCE,
        worker: WORKER,
        redis: &mut redis,
        pg: store.pg(),
    };
    // Both sales first: what the processes do for a sale in play that
    // nobody buys from (the worker looks at each in turn) is idle work.
    let sale = loadrun::create_sale(store, "Bench capacity", requests, Some(3600)).await?;
    let room = super::waiting_room::still_room(store, "Bench capacity room").await?;
    let started = clocks.read().await?;
    tokio::time::sleep(IDLE).await;
    let idle = clocks.read().await?.since(&started);
    let idle_rate: [f64; 4] = std::array::from_fn(|p| idle[p].as_secs_f64() / IDLE.as_secs_f64());
    let mut per_request = [[0.0; 4]; 4];
    let mut cost = |kind: usize, before: &Reading, after: &Reading, took: Duration| {
        let used = after.since(before);
        per_request[kind] = std::array::from_fn(|p| {
            let busy = used[p].as_secs_f64() - idle_rate[p] * took.as_secs_f64();
            busy.max(0.0) / f64::from(requests) * 1e6
        });
    };

    eprintln!("bench: capacity: {requests} accepted purchases, drained");
    let (before, at) = (clocks.read().await?, Instant::now());
    let won = purchases(&url, sale, requests, AnswerKind::Won).await?;
    anyhow::ensure!(won == requests, "{won} of {requests} purchases accepted");
    drained(store, sale, requests).await?;
    cost(0, &before, &clocks.read().await?, at.elapsed());

    eprintln!("bench: capacity: {requests} refused purchases");
    let (before, at) = (clocks.read().await?, Instant::now());
    let refused = purchases(&url, sale, requests, AnswerKind::SoldOut).await?;
    anyhow::ensure!(
        refused == requests,
        "{refused} of {requests} refused as sold out"
    );
    cost(1, &before, &clocks.read().await?, at.elapsed());

    eprintln!("bench: capacity: {requests} room joins");
    let (before, at) = (clocks.read().await?, Instant::now());
    let tickets = joins(&url, room, requests).await?;
    cost(2, &before, &clocks.read().await?, at.elapsed());

    eprintln!("bench: capacity: {requests} room status answers");
    let (before, at) = (clocks.read().await?, Instant::now());
    statuses(&url, room, &tickets, requests).await?;
    cost(3, &before, &clocks.read().await?, at.elapsed());

    Ok(Costs {
        requests,
        per_request,
        idle: idle_rate.map(|rate| rate * 1000.0),
    })
}

/// `requests` new buyers, each buying once on `sale` through the load
/// generator, 64 at a time: how many were answered `expected`.
pub(super) async fn purchases(
    url: &str,
    sale: i64,
    requests: u32,
    expected: AnswerKind,
) -> anyhow::Result<u32> {
    let plan = Arc::new(Plan::new(
        sale,
        requests,
        0.0,
        vec![Target::resolve(url).await?],
    ));
    let shape = Shape {
        scenario: Scenario::Closed,
        rate: 0.0,
        duration: None,
        connections: IN_FLIGHT,
    };
    let run = scenario::run(&plan, shape, &Progress::stderr()).await?;
    let answered = run
        .samples
        .iter()
        .filter(|sample| sample.outcome == expected)
        .count();
    Ok(u32::try_from(answered).expect("no more answers than requests"))
}

/// Wait until PostgreSQL counts `units` sold on `sale`: the worker has
/// drained every accepted purchase.
pub(super) async fn drained(store: &Store, sale: i64, units: u32) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let sold = store.sold(sale).await?;
        if i64::from(sold) >= i64::from(units) {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < DRAIN_LIMIT,
            "the worker confirmed {sold} of {units} orders in {DRAIN_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// How long the worker may take to empty a sale's order queue.
const EMPTY_LIMIT: Duration = Duration::from_secs(60);

/// Wait until `sale`'s order queue holds nothing, waiting or in flight:
/// the worker has acknowledged every order (after PostgreSQL holds it,
/// and after scheduling its payment deadline).
pub(super) async fn emptied(store: &Store, sale: i64) -> anyhow::Result<()> {
    let started = Instant::now();
    loop {
        let queue = store.sale_inside(sale, 0).await?.order_queue;
        if queue.waiting == 0 && queue.in_flight == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < EMPTY_LIMIT,
            "the order queue still holds {} waiting and {} in flight",
            queue.waiting,
            queue.in_flight
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `requests` new buyers join `sale`'s room, 64 at a time: their tickets.
async fn joins(url: &str, sale: i64, requests: u32) -> anyhow::Result<Vec<String>> {
    let http = reqwest::Client::new();
    futures_util::stream::iter(0..requests)
        .map(|n| {
            let http = &http;
            async move {
                let answer: serde_json::Value = http
                    .post(format!("{url}/api/sales/{sale}/queue"))
                    .json(&json!({ "user_id": format!("capacity-{n}") }))
                    .send()
                    .await?
                    .error_for_status()?
                    .json()
                    .await?;
                let ticket = answer["ticket"]
                    .as_str()
                    .context("a ticket in the join's answer")?;
                anyhow::Ok(ticket.to_owned())
            }
        })
        .buffered(IN_FLIGHT)
        .try_collect()
        .await
}

/// `requests` status questions on `sale`'s room, 64 at a time, each with
/// the ticket of a buyer far back in line, in turn.
async fn statuses(url: &str, sale: i64, tickets: &[String], requests: u32) -> anyhow::Result<()> {
    let far_back = tickets
        .get(HEAD.min(tickets.len() - 1)..)
        .unwrap_or(tickets);
    let http = reqwest::Client::new();
    futures_util::stream::iter(far_back.iter().cycle().take(requests as usize))
        .map(|ticket| {
            let http = &http;
            async move {
                http.get(format!("{url}/api/sales/{sale}/queue"))
                    .header("Seckill-Ticket", ticket)
                    .send()
                    .await?
                    .error_for_status()?;
                anyhow::Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await
}

/// One core's second, over what one request costs it; `None` when the run
/// saw no cost at all: a small run can spend less than the 10 ms steps of
/// `/proc`'s clock (a ceiling of "inf/s" would say nothing).
fn per_core(micros: f64) -> Option<f64> {
    (micros > 0.0).then(|| 1e6 / micros)
}

/// The row of a ceiling its run was too small to measure.
fn unmeasured(requests: u32) -> String {
    format!("not measured: no CPU time seen in {requests} requests (the clocks count 10 ms steps)")
}

/// The figures of the rows, each process' in its own.
const PER_PROCESS: [&str; 4] = [
    "capacity: an instance's CPU per request (µs)",
    "capacity: Redis' CPU per request (µs)",
    "capacity: PostgreSQL's CPU per request (µs, its processes summed)",
    "capacity: the worker's CPU per request (µs, its drain included)",
];
const NO_TARGET: &str = "measured, no target (docs/capacity.md)";

fn rows(costs: &Costs) -> Vec<Row> {
    let mut rows: Vec<Row> = (0..4)
        .map(|p| {
            let each: Vec<String> = KINDS
                .iter()
                .enumerate()
                .map(|(kind, name)| format!("{name} {:.1}", costs.per_request[kind][p]))
                .collect();
            Row {
                figure: PER_PROCESS[p],
                measured: format!("{} ({} of each)", each.join(", "), costs.requests),
                target: NO_TARGET,
                met: None,
                value: Figure::lower(costs.per_request[0][p]),
            }
        })
        .collect();
    let idle: Vec<String> = PROCESSES
        .iter()
        .zip(costs.idle)
        .map(|(process, rate)| format!("{process} {rate:.1}"))
        .collect();
    rows.push(Row {
        figure: "capacity: each one's idle CPU, taken off the above (ms per s)",
        measured: format!("{} (over {} s)", idle.join(", "), IDLE.as_secs()),
        target: NO_TARGET,
        met: None,
        value: None,
    });
    let [accepted, _, join, _] = costs.per_request.map(|process| process[1]);
    let redis = per_core(accepted).zip(per_core(join));
    rows.push(Row {
        figure: "capacity: one sale on one Redis primary (one core): accepted purchases/s, room joins/s",
        measured: redis.map_or_else(
            || unmeasured(costs.requests),
            |(accepted, join)| format!("{accepted:.0}/s, {join:.0}/s"),
        ),
        target: NO_TARGET,
        met: None,
        value: redis.and_then(|(accepted, _)| Figure::higher(accepted)),
    });
    let order = per_core(costs.per_request[0][2]);
    rows.push(Row {
        figure: "capacity: one PostgreSQL for the drain: orders/s per core",
        measured: order.map_or_else(|| unmeasured(costs.requests), |o| format!("{o:.0}/s")),
        target: NO_TARGET,
        met: None,
        value: order.and_then(Figure::higher),
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run too small for the clocks (every cost 0): its ceilings say
    /// they were not measured, and carry no figure to compare; the full
    /// bench test's 500 requests once printed "inf/s".
    #[test]
    fn a_ceiling_the_clocks_did_not_see_is_not_measured() {
        let costs = Costs {
            requests: 500,
            per_request: [[0.0; 4]; 4],
            idle: [0.0; 4],
        };
        let ceilings: Vec<Row> = rows(&costs)
            .into_iter()
            .filter(|row| {
                row.figure.contains("one sale on one") || row.figure.contains("for the drain")
            })
            .collect();
        assert_eq!(ceilings.len(), 2);
        for row in ceilings {
            assert!(row.measured.starts_with("not measured"), "{}", row.measured);
            assert!(row.value.is_none(), "{}", row.figure);
        }
        let measured = Costs {
            per_request: [[50.0; 4]; 4],
            ..costs
        };
        let drain = rows(&measured).pop().expect("the drain's row");
        assert_eq!(drain.measured, "20000/s");
    }
}
