//! What the sales an instance served cost it once they ended: nothing.
//!
//! An instance keeps a few entries in memory per sale it serves (its copy
//! of the sale, the lock strategy's lane, the sold-out flag, the answer
//! counts, the sale page's shared state), and forgets them once the sale
//! has ended (`--forget-ended-after-secs`, 1 s here). So an instance that
//! has served 10,000 sales, all ended, must hold what one that served 10
//! holds, and answer a purchase on a live sale as fast.
//!
//! For each count, a fresh instance (and a worker), the two at once: that
//! many sales of one unit, each bought once through the API (and cancelled
//! unpaid a second later), all ending together; then, once its `/metrics`
//! say it keeps nothing of them, its resident memory; then, one instance
//! after the other, accepted purchases per second on a new sale for
//! `--secs`. Neither keeps anything of the other's sales: an instance
//! keeps a sale it was asked about, not one it only hears of (a stock
//! change of a sale nobody watches there is dropped, `live.rs`).

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use seckill_loadtest::progress::Progress;
use serde_json::json;

use super::Row;
use super::compare::Figure;
use crate::bench::{BenchArgs, Bound};
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::domain::NewSale;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// The few: what an instance that served little holds.
const FEW: u32 = 10;
/// Units of the sale the purchases/s are measured on.
const UNITS: u32 = 1_000_000;
/// Requests in flight while the sales are created and bought.
const IN_FLIGHT: usize = 32;
/// How long freed memory may stay with the process before the allocator
/// gives it back.
const ALLOCATOR_DECAY: Duration = Duration::from_secs(12);
/// How long the instance may take to forget the ended sales.
const FORGET_LIMIT: Duration = Duration::from_secs(60);

/// What one instance showed after serving its sales.
struct After {
    resident_mib: f64,
    per_second: f64,
}

/// The rows: memory, and accepted purchases/s, after `--ended-sales`
/// ended sales beside the same after [`FEW`].
pub(super) async fn ended_sales(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 2]> {
    // Their orders end too: a one-second payment window cancels them, so
    // that what is measured is sales that are over, not 10,000 orders
    // still waiting to be paid (which the payment sweep reads each minute).
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?
        .env("SECKILL_FORGET_ENDED_AFTER_SECS", "1")
        .env("SECKILL_PAYMENT_WINDOW_SECS", "1");
    let few = Fleet::start(deployment.clone(), FEW_NAME, 1).await?;
    let many = match Fleet::start(deployment, MANY_NAME, 1).await {
        Ok(many) => many,
        Err(error) => {
            few.stop().await;
            return Err(error);
        }
    };
    let measured = async {
        // Both serve and wait for their allocator at once (about half the
        // row's time); their purchases/s are then measured one at a time.
        let (few_mib, many_mib) = tokio::try_join!(
            served(FEW, &few, FEW_NAME, store),
            served(args.ended_sales, &many, MANY_NAME, store),
        )?;
        let few = After {
            resident_mib: few_mib,
            per_second: live_rate(args, &few, FEW_NAME, store).await?,
        };
        let many = After {
            resident_mib: many_mib,
            per_second: live_rate(args, &many, MANY_NAME, store).await?,
        };
        anyhow::Ok((few, many))
    }
    .await;
    few.stop().await;
    many.stop().await;
    let (few, many) = measured?;
    let memory = Bound::AtMost(1.25);
    let memory_ratio = many.resident_mib / few.resident_mib;
    let speed = Bound::AtLeast(0.85);
    let speed_ratio = many.per_second / few.per_second;
    let sales = args.ended_sales;
    Ok([
        Row {
            figure: "an instance's memory after ended sales: --ended-sales vs 10",
            measured: format!(
                "{:.1} MiB vs {:.1} MiB after {sales} ({}x)",
                many.resident_mib,
                few.resident_mib,
                memory.shown(memory_ratio, 2)
            ),
            target: "<= 1.25x",
            met: Some(memory.met(memory_ratio)),
            value: Figure::lower(memory_ratio),
        },
        Row {
            figure: "accepted purchases/s on a live sale after ended sales: --ended-sales vs 10",
            measured: format!(
                "{:.0}/s vs {:.0}/s after {sales} ({}x)",
                many.per_second,
                few.per_second,
                speed.shown(speed_ratio, 2)
            ),
            target: ">= 0.85x",
            met: Some(speed.met(speed_ratio)),
            value: Figure::higher(speed_ratio),
        },
    ])
}

/// The fleets of the instance that serves [`FEW`] sales and of the one
/// that serves `--ended-sales`.
const FEW_NAME: &str = "bench-ended-few";
const MANY_NAME: &str = "bench-ended-many";

/// The instance of `fleet` (named `name`) serves `sales` sales that end
/// and forgets them: its resident memory once its allocator had time to
/// give back what was freed, in MiB.
async fn served(sales: u32, fleet: &Fleet, name: &str, store: &Store) -> anyhow::Result<f64> {
    let instance = format!("{name}-1");
    let url = fleet.url(&instance)?;
    serve_sales_that_end(sales, store, &url).await?;
    forgotten(&url).await?;
    // What was freed goes back to the system after the allocator's
    // decay (jemalloc's, 10 s; see tests/it/memory.rs).
    tokio::time::sleep(ALLOCATOR_DECAY).await;
    Ok(fleet.resident_bytes(&instance)? as f64 / 1_048_576.0)
}

/// Accepted purchases/s on a new sale of the instance of `fleet`, for
/// `--secs`.
async fn live_rate(
    args: &BenchArgs,
    fleet: &Fleet,
    name: &str,
    store: &Store,
) -> anyhow::Result<f64> {
    let url = fleet.url(&format!("{name}-1"))?;
    let sale_id = loadrun::create_sale(store, "Bench live", UNITS, Some(3600)).await?;
    let mut subject = loadrun::subject(
        store,
        vec![url],
        Some(Strategy::Lock),
        sale_id,
        i64::from(UNITS),
    )
    .await?;
    let load = super::closed_load(args.secs, 64);
    let report =
        seckill_loadtest::load_test(&mut subject, &load, "bench", &Progress::stderr()).await?;
    Ok(super::accepted_rate(&report))
}

/// `sales` sales of one unit, each bought once through the API at `url`,
/// all ending together (time enough after the start for every purchase:
/// one that comes later is answered `409 ended`, which serves as well);
/// returns once they have ended.
async fn serve_sales_that_end(sales: u32, store: &Store, url: &str) -> anyhow::Result<()> {
    let ends = Utc::now() + chrono::Duration::milliseconds(5_000 + 2 * i64::from(sales));
    let created: Vec<i64> = futures_util::stream::iter(0..sales)
        .map(|n| async move {
            let new = NewSale::builder(format!("Bench ended {n}"), 1)
                .ends_at(ends)
                .build(Utc::now())
                .context("a bench sale")?;
            anyhow::Ok(store.create_sale(&new).await?.id)
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect()
        .await?;
    let http = reqwest::Client::new();
    futures_util::stream::iter(created)
        .map(|sale| {
            let http = &http;
            async move {
                let answer = http
                    .post(format!("{url}/api/sales/{sale}/purchase"))
                    .json(&json!({"user_id": format!("buyer-{sale}")}))
                    .send()
                    .await
                    .context("a purchase")?;
                anyhow::ensure!(
                    matches!(answer.status().as_u16(), 202 | 409),
                    "sale {sale}: {}",
                    answer.status()
                );
                Ok(())
            }
        })
        .buffer_unordered(IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    let left = (ends - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left).await;
    Ok(())
}

/// Wait until the instance at `url` keeps nothing in memory for any sale
/// (its `seckill_sales_in_memory` gauge is 0).
async fn forgotten(url: &str) -> anyhow::Result<()> {
    let http = reqwest::Client::new();
    let started = Instant::now();
    loop {
        let scrape = http
            .get(format!("{url}/metrics"))
            .send()
            .await?
            .text()
            .await?;
        let kept = scrape
            .lines()
            .find_map(|line| line.strip_prefix("seckill_sales_in_memory "))
            .context("no seckill_sales_in_memory in /metrics")?
            .trim()
            .parse::<u64>()?;
        if kept == 0 {
            return Ok(());
        }
        anyhow::ensure!(
            started.elapsed() < FORGET_LIMIT,
            "the instance still keeps {kept} entries for ended sales after {FORGET_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}
