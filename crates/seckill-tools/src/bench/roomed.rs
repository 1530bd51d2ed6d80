//! What a waiting room's door costs a purchase (`seckill bench --only
//! roomed`): accepted purchases per second on a sale with a room against
//! one without, with `lock` and with `lua`.
//!
//! A roomed purchase checks and spends its buyer's admission in the
//! commit itself (`lua/purchase_commit.lua`, `lua/purchase_lua.lua`), so
//! it costs no round trip more; what it adds is the admission's
//! signature, checked by the instance (`web/door.rs`, an HMAC of a short
//! string), and three set operations a buyer inside the script. The row
//! runs the purchases in this process, through the `Purchaser` an
//! instance runs, without HTTP: what both kinds of purchase share is left
//! out, so the ratio is the door's share of the strategy's own work, a
//! harsher ratio than over HTTP. The signature is not checked here.
//!
//! Each round: a new pair of sales, [`IN_FLIGHT`] buyers at a time, every
//! request a new buyer, for `--secs` on each, roomed first then not,
//! [`ROUNDS`] rounds alternated; the median ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;

use super::compare::Figure;
use super::{Bound, Row};
use crate::bench::BenchArgs;
use seckill_core::config::{PurchaseSettings, Strategy};
use seckill_core::domain::{NewSale, RoomMode, RoomSettings, Sale, UserId};
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::store::Store;
use seckill_core::strategy::Shop;

/// Purchases in flight: as a loaded instance has them.
const IN_FLIGHT: usize = 64;
/// Rounds, each strategy's ratio the median of them.
const ROUNDS: usize = 3;
/// Units of each sale: more than a round sells.
const UNITS: i64 = 1_000_000;

/// The row: roomed / unroomed accepted purchases/s, for `lock` and `lua`.
pub(super) async fn roomed_against_unroomed(
    args: &BenchArgs,
    store: &Store,
) -> anyhow::Result<Row> {
    let mut shown = Vec::new();
    let mut worst = f64::INFINITY;
    for strategy in [Strategy::Lock, Strategy::Lua] {
        let purchaser = Arc::new(purchaser(store, strategy));
        let mut ratios = Vec::new();
        let mut last = [0.0; 2];
        for round in 0..ROUNDS {
            let roomed = sale(store, true).await?;
            let roomed = rate(&purchaser, roomed, args.secs, &format!("r{round}")).await?;
            let plain = sale(store, false).await?;
            let plain = rate(&purchaser, plain, args.secs, &format!("p{round}")).await?;
            ratios.push(roomed / plain);
            last = [roomed, plain];
        }
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        worst = worst.min(median);
        shown.push(format!(
            "{} {median:.2}x (last round {:.0}/s vs {:.0}/s)",
            strategy.as_str(),
            last[0],
            last[1]
        ));
    }
    let target = Bound::AtLeast(0.95);
    Ok(Row {
        figure: "accepted purchases/s on a roomed sale / an unroomed one (in-process)",
        measured: format!(
            "{}x (median of {ROUNDS} alternated; {})",
            target.shown(worst, 2),
            shown.join(", ")
        ),
        target: ">= 0.95x",
        met: Some(target.met(worst)),
        value: Figure::higher(worst),
    })
}

/// A purchaser as an instance with `strategy` runs it.
fn purchaser(store: &Store, strategy: Strategy) -> Purchaser {
    let settings = PurchaseSettings {
        strategy,
        ..PurchaseSettings::default()
    };
    Purchaser::new(Shop::new(
        store.clone(),
        settings,
        "bench-roomed",
        Duration::from_secs(600),
        LockReleases::default(),
    ))
}

/// A sale open now, with a room (open, admitting every buyer) or without.
async fn sale(store: &Store, roomed: bool) -> anyhow::Result<Arc<Sale>> {
    let mut new = NewSale::builder("Bench roomed or not", UNITS).lasts(3600);
    if roomed {
        new = new.waiting_room(RoomSettings {
            mode: RoomMode::Fifo,
            admit_per_sec: 10_000,
            max_active: 1_000_000,
            admission_secs: 3600,
            max_line: None,
        });
    }
    let new = new.build(Utc::now()).context("the bench's sale")?;
    Ok(Arc::new(store.create_sale(&new).await?))
}

/// Accepted purchases per second on `sale` for `secs`, [`IN_FLIGHT`] at a
/// time, each a new buyer named after `round`.
async fn rate(
    purchaser: &Arc<Purchaser>,
    sale: Arc<Sale>,
    secs: f64,
    round: &str,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|lane| {
            let (purchaser, sale) = (Arc::clone(purchaser), Arc::clone(&sale));
            let round = round.to_owned();
            tokio::spawn(async move {
                let mut accepted = 0u64;
                while Instant::now() < until {
                    let buyer = UserId::parse(&format!("{round}-{lane}-{accepted}"))
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    let outcome = purchaser.purchase(&sale, &buyer).await?;
                    anyhow::ensure!(
                        matches!(outcome, Outcome::Accepted { .. }),
                        "a new buyer was answered {outcome:?}"
                    );
                    accepted += 1;
                }
                anyhow::Ok(accepted)
            })
        })
        .collect();
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.context("a buyer's task")??;
    }
    Ok(accepted as f64 / started.elapsed().as_secs_f64())
}
