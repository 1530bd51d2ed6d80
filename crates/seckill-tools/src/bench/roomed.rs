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
//! The door also checks that the room holds each buyer as admitted: each
//! lane of the roomed sale seats its next [`SEATED`] buyers among the
//! admitted in one command when it needs them, past the line, whose pace
//! is not what this row measures. That write is counted in the round:
//! a room's visit writes a chunk of admissions with the same one `ZADD`.
//!
//! Each round: a new pair of sales, [`IN_FLIGHT`] buyers at a time, every
//! request a new buyer, for `--secs` on each, which goes first alternated,
//! each sale's keys deleted after it; [`ROUNDS`] rounds, the median ratio.

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
use seckill_core::waiting_room;

/// Purchases in flight: as a loaded instance has them.
const IN_FLIGHT: usize = 64;
/// Rounds, each strategy's ratio the median of them.
const ROUNDS: usize = 5;
/// Units of each sale: more than a round sells.
const UNITS: i64 = 1_000_000;
/// Buyers a lane of the roomed sale seats among the admitted at once.
const SEATED: u64 = 256;

/// The row: roomed / unroomed accepted purchases/s, for `lock` and `lua`.
pub(super) async fn roomed_against_unroomed(
    args: &BenchArgs,
    store: &Store,
) -> anyhow::Result<Row> {
    let rounds = args.rounds(ROUNDS);
    let mut shown = Vec::new();
    let mut worst = f64::INFINITY;
    for strategy in [Strategy::Lock, Strategy::Lua] {
        let purchaser = Arc::new(purchaser(store, strategy));
        let mut ratios = Vec::new();
        for round in 0..rounds {
            // Which goes first alternates, so that neither always meets
            // the other's leftovers.
            let mut rates = [0.0; 2];
            for roomed in [round % 2 == 0, round % 2 == 1] {
                let sale = sale(store, roomed).await?;
                let buyers = format!("{}{round}", if roomed { "r" } else { "p" });
                let rated = rate(&purchaser, store, &sale, args.secs, &buyers).await?;
                rates[usize::from(!roomed)] = rated;
                forget(store, &sale).await?;
            }
            ratios.push(rates[0] / rates[1]);
        }
        ratios.sort_by(f64::total_cmp);
        let median = ratios[ratios.len() / 2];
        worst = worst.min(median);
        shown.push(format!(
            "{} {median:.2}x, rounds {:.2} to {:.2}",
            strategy.as_str(),
            ratios[0],
            ratios[ratios.len() - 1]
        ));
    }
    let target = Bound::AtLeast(0.95);
    Ok(Row {
        figure: "accepted purchases/s on a roomed sale / an unroomed one (in-process)",
        measured: format!(
            "{}x (median of {rounds} alternated; {})",
            target.shown(worst, 2),
            shown.join(", ")
        ),
        target: ">= 0.95x",
        met: Some(target.met(worst)),
        value: Figure::higher(worst),
    })
}

/// A purchaser as an instance with `strategy` runs it (with the
/// defaults' lock settings): what the bench's in-process rows buy with.
pub(super) fn purchaser(store: &Store, strategy: Strategy) -> Purchaser {
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
    let sale = store.create_sale(&new).await?;
    // The room's state made, with its expiry, as the first visit of a
    // real room makes it: what a purchase's door reads.
    if let Some(room) = &sale.waiting_room {
        waiting_room::look(store, &sale, room, &[], &[]).await?;
    }
    Ok(Arc::new(sale))
}

/// Delete what `sale` left in Redis (its orders stay queued there, the
/// worker not running): the next sale's writes then reuse Redis' memory
/// rather than wait for new pages.
async fn forget(store: &Store, sale: &Sale) -> anyhow::Result<()> {
    let keys = format!("{}:{{sale:{}}}", store.prefix(), sale.id);
    store.redis_pool().delete_under(&keys).await
}

/// The `n`th buyer of `lane` in the round `round`.
fn buyer_name(round: &str, lane: usize, n: u64) -> String {
    format!("{round}-{lane}-{n}")
}

/// Accepted purchases per second on `sale` for `secs`, [`IN_FLIGHT`] at a
/// time, each a new buyer named after `round` (seated among the admitted
/// first, [`SEATED`] at a time, if `sale` has a room).
async fn rate(
    purchaser: &Arc<Purchaser>,
    store: &Store,
    sale: &Arc<Sale>,
    secs: f64,
    round: &str,
) -> anyhow::Result<f64> {
    let until_ms = Utc::now().timestamp_millis() + 3_600_000;
    let started = Instant::now();
    let until = started + Duration::from_secs_f64(secs);
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|lane| {
            let (purchaser, sale) = (Arc::clone(purchaser), Arc::clone(sale));
            let (round, store) = (round.to_owned(), store.clone());
            tokio::spawn(async move {
                let mut accepted = 0u64;
                while Instant::now() < until {
                    if sale.waiting_room.is_some() && accepted.is_multiple_of(SEATED) {
                        let next: Vec<String> = (accepted..accepted + SEATED)
                            .map(|n| buyer_name(&round, lane, n))
                            .collect();
                        waiting_room::seat(&store, sale.id, &next, until_ms).await?;
                    }
                    let buyer = UserId::parse(&buyer_name(&round, lane, accepted))
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
