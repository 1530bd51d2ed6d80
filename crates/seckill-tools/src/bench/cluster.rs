//! Past one Redis: accepted purchases per second on three sales at once,
//! first on the one Redis the bench uses, then on a private 3-master Redis
//! Cluster with each sale's hash tag on another master; the same instances
//! (2, `lock`), the same load, one after the other in one run.
//!
//! On one machine the three masters share the cores with everything else,
//! so the ratio says what the cluster costs or gains here, not what three
//! machines would do: there, each master would have a core of its own.

use anyhow::Context;
use seckill_loadtest::progress::Progress;

use super::Row;
use super::compare::Figure;
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::redis_pool::RedisAt;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::{PrivateRedisCluster, Services};

/// Sales run at once, one per master on the cluster.
const SALES: usize = 3;
/// Connections of each sale's load test.
const CONNECTIONS: u64 = 32;
/// Units of each sale: more than any run sells.
const UNITS: u32 = 1_000_000;

/// The row: the cluster's figure beside the one Redis'.
pub(super) async fn spread_over_masters(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let mut sales = Vec::new();
    for n in 0..SALES {
        sales
            .push(loadrun::create_sale(store, &format!("Bench one {n}"), UNITS, Some(3600)).await?);
    }
    let one = accepted(args, services, (&services.redis, &[]), store, token, &sales).await?;

    let redis = PrivateRedisCluster::start(SALES).await?;
    let pool =
        seckill_core::redis_pool::connect_redis(&redis.at(), std::time::Duration::from_secs(5))
            .await?;
    let on_cluster = Store::new(store.pg().clone(), pool, store.prefix());
    let sales = one_sale_per_master(&redis, &on_cluster).await?;
    let spread = accepted(
        args,
        services,
        (&redis.at(), &[]),
        &on_cluster,
        token,
        &sales,
    )
    .await?;
    Ok(Row {
        figure: "accepted purchases/s, lock, 3 sales at once: 3-master cluster vs 1 Redis",
        measured: format!("{spread:.0}/s vs {one:.0}/s ({:.2}x)", spread / one),
        target: "measured, no target (one machine's cores)",
        met: None,
        value: Figure::either(spread / one),
    })
}

/// Create sales on the cluster until one lives on each master.
async fn one_sale_per_master(
    redis: &PrivateRedisCluster,
    store: &Store,
) -> anyhow::Result<Vec<i64>> {
    let mut by_master = std::collections::BTreeMap::new();
    for n in 0..64 {
        let sale =
            loadrun::create_sale(store, &format!("Bench spread {n}"), UNITS, Some(3600)).await?;
        let stock = seckill_core::keys::SaleKeys::new(store.prefix(), sale).stock;
        by_master
            .entry(redis.master_of(&stock).await?)
            .or_insert(sale);
        if by_master.len() == SALES {
            return Ok(by_master.into_values().collect());
        }
    }
    anyhow::bail!("64 sales and still a master without one")
}

/// 2 `lock` instances (and their worker) on `redis`, with `env` set on
/// them too, a closed load on every sale at once for `--secs`: accepted
/// purchases per second, summed.
pub(super) async fn accepted(
    args: &BenchArgs,
    services: &Services,
    (redis, env): (&RedisAt, &[(&str, &str)]),
    store: &Store,
    token: &str,
    sales: &[i64],
) -> anyhow::Result<f64> {
    let deployment = env.iter().fold(
        super::deployment(services, store.prefix(), Strategy::Lock, token)?.on_redis(redis),
        |deployment, (name, value)| deployment.env(name, *value),
    );
    let cluster = Fleet::start(deployment, "bench-spread", 2).await?;
    let load = super::closed_load(args.secs, CONNECTIONS);
    let runs = sales.iter().map(|&sale_id| {
        let (load, urls) = (&load, cluster.urls());
        async move {
            let mut subject =
                loadrun::subject(store, urls, Some(Strategy::Lock), sale_id, i64::from(UNITS))
                    .await?;
            seckill_loadtest::load_test(&mut subject, load, "bench", &Progress::stderr()).await
        }
    });
    let reports = futures_util::future::join_all(runs).await;
    cluster.stop().await;
    let mut per_second = 0.0;
    for report in reports {
        per_second += super::accepted_rate(&report.context("a sale's load test")?);
    }
    Ok(per_second)
}
