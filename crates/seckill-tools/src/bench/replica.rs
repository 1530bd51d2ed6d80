//! What `--redis-durability replica` costs: accepted purchases per second
//! on one sale with `replica` (one `WAIT 1` per lock pass), against the
//! same with `local`, on the same private primary and replica (under three
//! sentinels), alternated: local, replica, local, replica.
//!
//! On one machine the replica answers `WAIT` within a fraction of a
//! millisecond; over a network each pass waits one round trip more.

use std::time::Duration;

use super::Row;
use super::compare::Figure;
use crate::bench::{BenchArgs, Bound};
use crate::loadrun;
use seckill_cli::Durability;
use seckill_core::config::DEFAULT_REPLICA_WAIT_MS;
use seckill_core::store::Store;
use seckill_devenv::services::{PrivateRedisSentinel, Services};

/// Units of each run's sale: more than any run sells.
const UNITS: u32 = 1_000_000;
/// Runs of each setting.
const ROUNDS: usize = 2;

/// The row: `replica` beside `local`.
pub(super) async fn replica_against_local(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let redis = PrivateRedisSentinel::start().await?;
    let at = redis.at();
    let pool = seckill_core::redis_pool::connect_redis(&at, Duration::from_secs(5)).await?;
    let on_replicated = Store::new(store.pg().clone(), pool, store.prefix());
    let (mut local, mut replica) = (0.0, 0.0);
    let rounds = args.rounds(ROUNDS);
    for round in 0..rounds {
        for (durability, total) in [
            (Durability::Local, &mut local),
            (Durability::Replica, &mut replica),
        ] {
            let sale = loadrun::create_sale(
                &on_replicated,
                &format!("Bench {durability:?} {round}"),
                UNITS,
                Some(3600),
            )
            .await?;
            let env = durability.env(DEFAULT_REPLICA_WAIT_MS);
            let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
            *total += super::cluster::accepted(
                args,
                services,
                (&at, &env),
                &on_replicated,
                token,
                &[sale],
            )
            .await?;
        }
    }
    let ratio = replica / local;
    let target = Bound::AtLeast(0.7);
    Ok(Row {
        figure: "accepted purchases/s on one sale, lock: --redis-durability replica vs local",
        measured: format!(
            "{:.0}/s vs {:.0}/s ({}x)",
            replica / rounds as f64,
            local / rounds as f64,
            target.shown(ratio, 2)
        ),
        target: ">= 0.7x",
        met: Some(target.met(ratio)),
        value: Figure::higher(ratio),
    })
}
