//! What the chaos run must show, per fault window and overall, read from
//! the answers the buyers got (`windows.rs`: the table's rows and the
//! timeline) and from PostgreSQL and Redis afterwards (`checks.rs`).
//!
//! The promise, under faults: no unit sold twice; nobody holding two; every
//! `202` an order in PostgreSQL, except the orders a Redis wipe took while
//! they still waited on the queue (counted exactly: they are the ids read
//! from the queue at the wipe); no order nobody was told about, except for
//! buyers whose request got no answer (an instance killed after its commit);
//! Redis equal to PostgreSQL; no lock without a TTL; no dead letter; and no
//! `500` ever: while a server is down the answer is `503`. And for the
//! waiting crowd of a failover, what its buyers were told (`crowd.rs`).

mod checks;
pub(super) mod crowd;
mod windows;

pub(super) use checks::{ANSWER_BOUND, ChaosCheck, Summary, checks};
pub(super) use crowd::{CrowdSummary, ROW as CROWD_ROW};

use std::collections::{BTreeSet, HashSet};
use std::time::Instant;

use anyhow::Context;

use super::Rig;
use super::crowd::{Answer, buyer_id};
use seckill_core::keys::SaleKeys;
use seckill_core::waiting_room;
pub(super) use windows::{BETWEEN, FaultRow, Tick, rows, timeline, unreplicated_202s};

/// What the waiting crowd was told, and whom its room held once it had
/// stopped.
pub(super) struct Waited {
    answers: Vec<Answer>,
    /// The buyers (by number) the room has in line, admitted or bought.
    held: HashSet<u32>,
    /// When that was read, in ms from the run's start.
    read_ms: i64,
}

impl Waited {
    /// The crowd's `answers`, and whom the room of `keys` holds now.
    pub(super) async fn read(
        rig: &Rig,
        keys: &SaleKeys,
        answers: Vec<Answer>,
        epoch: Instant,
    ) -> anyhow::Result<Self> {
        let buyers: BTreeSet<u32> = answers.iter().map(|a| a.buyer).collect();
        let mut pipe = redis::pipe();
        for n in &buyers {
            let id = buyer_id(*n);
            pipe.zscore(&keys.room.line, &id)
                .zscore(&keys.room.admitted, &id);
            waiting_room::bought_reads(&mut pipe, keys, &id);
        }
        let mut conn = rig.store.redis().await?;
        let found: Vec<redis::Value> = pipe
            .query_async(&mut conn)
            .await
            .context("reading the waiting crowd's room")?;
        let read_ms = i64::try_from(epoch.elapsed().as_millis()).unwrap_or(i64::MAX);
        let held = buyers
            .iter()
            .zip(found.chunks(4))
            .filter(|(_, places)| {
                // A score (in line, admitted) or a 1 (bought).
                places
                    .iter()
                    .any(|place| !matches!(place, redis::Value::Nil | redis::Value::Int(0)))
            })
            .map(|(n, _)| *n)
            .collect();
        Ok(Self {
            answers,
            held,
            read_ms,
        })
    }
}

/// The waiting crowd's checks, row and figures: what its `buyers` were
/// told, against the room and the orders PostgreSQL has of its sale,
/// `sale`.
pub(super) async fn crowd(
    rig: &Rig,
    sale: i64,
    buyers: u32,
    waited: &Waited,
    windows: &[super::faults::FaultWindow],
) -> anyhow::Result<(Vec<ChaosCheck>, FaultRow, CrowdSummary)> {
    let orders: Vec<(uuid::Uuid, String)> = (rig.store.orders_of_sale(sale, i64::MAX).await?)
        .into_iter()
        .map(|order| (order.id, order.user_id))
        .collect();
    let failover = windows
        .iter()
        .find(|w| w.fault == super::Fault::RedisFailover);
    let room = crowd::Room {
        held: &waited.held,
        read_ms: waited.read_ms,
    };
    Ok(crowd::judge(
        &waited.answers,
        &orders,
        room,
        failover,
        buyers,
    ))
}
