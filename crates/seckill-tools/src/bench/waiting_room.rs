//! What a waiting room's status answer costs, beside the cheapest answer
//! a sale gives: a buyer asking where they stand in line
//! (`GET /api/sales/{id}/queue`) against a sold-out purchase (the
//! instance's own flag, no Redis), on the same instance, with `wrk` (one
//! thread, 64 connections), alternated [`wrk::ROUNDS`] times. Three times,
//! for each place a buyer can ask from: with a thousand ahead (answered
//! from their number and the instance's look at the room, one signature
//! checked), next in line, and admitted (both from the look's own answer
//! for them, `web/room_view.rs`; an admitted buyer's answer carries an
//! admission signed anew).
//!
//! Everyone waits behind a buyer who is admitted and never buys (the room
//! admits one at a time), so every answer but theirs is a place in line,
//! as a crowd polling before its turn gets.
//!
//! And a room that holds `--room-buyers` waiting (100,000): what it costs
//! Redis (`MEMORY USAGE` of its keys) and the instance (VmRSS), and the
//! rate it then admits at, asked as fast as one client asks, against its
//! `admit_per_sec`.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};
use serde_json::json;

use super::compare::Figure;
use super::wrk::{self, ROUNDS};
use super::{Bound, Row};
use crate::bench::BenchArgs;
use seckill_core::config::Strategy;
use seckill_core::domain::{NewSale, RoomMode, RoomSettings};
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// The figures of the status rows, by the buyer's place.
const FIGURES: [&str; 3] = [
    "waiting room status, far back in line / sold-out answers (wrk)",
    "waiting room status, next in line / sold-out answers (wrk)",
    "waiting room status, admitted / sold-out answers (wrk)",
];
const TARGET: &str = ">= 0.80";
/// Buyers ahead of the far-back buyer: as most of a crowd stands.
const FAR_BACK: usize = 1_000;

/// Status answers per second against sold-out answers per second, for a
/// buyer far back in line, the next in line and an admitted buyer, each
/// with its target.
pub(super) async fn status_against_sold_out(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 3]> {
    if !wrk::wrk_installed().await {
        return Ok(FIGURES.map(|figure| wrk::not_installed(figure, TARGET)));
    }
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-room", &[]).await?;
    let rounds = measure(args, store, &url).await;
    cluster.stop().await;
    let target = Bound::AtLeast(0.80);
    let mut rows = rounds?.into_iter().zip(FIGURES).map(|(rounds, figure)| {
        let count = rounds.len();
        let [status, sold_out] = wrk::median_round(rounds);
        let ratio = status / sold_out;
        Row {
            figure,
            measured: format!(
                "{} ({status:.0}/s vs {sold_out:.0}/s; median of {count} alternated)",
                target.shown(ratio, 2)
            ),
            target: TARGET,
            met: Some(target.met(ratio)),
            value: Figure::higher(ratio),
        }
    });
    Ok([(); 3].map(|()| rows.next().expect("a row for each place")))
}

/// Rounds of `[status, sold out]` in requests per second: for the buyer
/// far back, the next in line, and the admitted one, in that order.
async fn measure(args: &BenchArgs, store: &Store, url: &str) -> anyhow::Result<Vec<Vec<[f64; 2]>>> {
    let purchase_script = wrk::same_buyer_script()?;
    let (_, purchase) = wrk::sold_out_sale(store, url, purchase_script.path()).await?;
    let (sale, [far, near, admitted]) = waiting_tickets(store, url).await?;
    let status = format!("{url}/api/sales/{sale}/queue");
    let mut each = Vec::new();
    for ticket in [far, near, admitted] {
        let status_script =
            wrk::script_file(&format!("wrk.headers[\"Seckill-Ticket\"] = \"{ticket}\"\n"))?;
        let rounds = wrk::alternated(args.rounds(ROUNDS), async |which| {
            if which == 0 {
                wrk::wrk(&status, args.secs, Some(status_script.path())).await
            } else {
                wrk::wrk(&purchase, args.secs, Some(purchase_script.path())).await
            }
        })
        .await?;
        each.push(rounds);
    }
    Ok(each)
}

/// A sale named `name` whose waiting room admits one buyer an hour, for
/// an hour: whoever joins after the first stays in line.
pub(super) async fn still_room(store: &Store, name: &str) -> anyhow::Result<i64> {
    let room = RoomSettings {
        mode: RoomMode::Fifo,
        admit_per_sec: 1,
        max_active: 1,
        admission_secs: 3600,
        max_line: None,
    };
    let new = NewSale::builder(name, 1_000)
        .lasts(3600)
        .waiting_room(room)
        .build(Utc::now())
        .with_context(|| format!("the sale {name:?}"))?;
    Ok(store.create_sale(&new).await?.id)
}

/// A sale with a room, someone admitted ahead who never buys (the room
/// admits one at a time), and [`FAR_BACK`] buyers waiting behind them:
/// `(sale id, [ticket of one behind them all, of the next in line, of the
/// admitted one])`. An admission lasts an hour, so nobody moves during
/// the run.
async fn waiting_tickets(store: &Store, url: &str) -> anyhow::Result<(i64, [String; 3])> {
    let sale = still_room(store, "Bench room").await?;
    let http = reqwest::Client::new();
    let mut tickets = Vec::new();
    for n in 0..FAR_BACK + 2 {
        let answer: serde_json::Value = http
            .post(format!("{url}/api/sales/{sale}/queue"))
            .json(&json!({ "user_id": format!("wrk-{n}") }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        tickets.push(
            answer["ticket"]
                .as_str()
                .context("a ticket in the join's answer")?
                .to_owned(),
        );
    }
    // The room admits its first a second after the open: the first
    // joiner is admitted by then, asked as a page asks.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let standing: serde_json::Value = http
            .get(format!("{url}/api/sales/{sale}/queue"))
            .header("Seckill-Ticket", &tickets[0])
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        if standing["admitted"] == true {
            break;
        }
        anyhow::ensure!(
            Instant::now() < deadline,
            "the room's first buyer was not admitted within 10 s: {standing}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let far = tickets.pop().expect("joined");
    let near = tickets.swap_remove(1);
    Ok((sale, [far, near, tickets.swap_remove(0)]))
}

/// The big room's pace: admissions per second, and how long it is watched.
const BIG_RATE: u32 = 100;
const BIG_WATCH: Duration = Duration::from_secs(5);
/// Joins in flight while the big room fills.
const JOINS_IN_FLIGHT: usize = 64;

/// A room with `--room-buyers` waiting: its memory, and its pace.
pub(super) async fn crowded_room(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 2]> {
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    // Joined once and never asked again, the crowd would be taken for gone
    // after the default half minute and dropped as the room admits: the
    // row measures a room that holds them all.
    let url = cluster
        .start_app("bench-crowded", &["--room-abandon-secs", "86400"])
        .await?;
    let measured = async {
        let room = RoomSettings {
            mode: RoomMode::Fifo,
            admit_per_sec: BIG_RATE,
            max_active: 1_000_000,
            admission_secs: 3600,
            max_line: None,
        };
        // Open from the start: the room admits at its pace while the
        // crowd joins, as a real one would (a few thousand of the
        // hundred thousand, in the half minute the joins take here).
        let new = NewSale::builder("Bench crowded room", 1_000_000)
            .lasts(3600)
            .waiting_room(room)
            .build(Utc::now())
            .context("the bench's crowded room")?;
        let sale = store.create_sale(&new).await?.id;
        let http = reqwest::Client::new();
        futures_util::stream::iter(0..args.room_buyers)
            .map(|n| {
                let (http, url) = (&http, &url);
                async move {
                    http.post(format!("{url}/api/sales/{sale}/queue"))
                        .json(&json!({ "user_id": format!("waiting-{n}") }))
                        .send()
                        .await?
                        .error_for_status()?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(JOINS_IN_FLIGHT)
            .try_collect::<()>()
            .await?;
        let keys = seckill_core::keys::SaleKeys::new(store.prefix(), sale);
        let mut conn = store.redis().await?;
        let mut redis_bytes = 0;
        for key in keys.room.all() {
            let bytes: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(key)
                .query_async(&mut conn)
                .await?;
            redis_bytes += bytes.unwrap_or(0);
        }
        let resident = cluster.resident_bytes("bench-crowded")?;
        let rate = pace(store, &http, &url, sale).await?;
        anyhow::Ok((redis_bytes, resident, rate))
    }
    .await;
    cluster.stop().await;
    let (redis_bytes, resident, rate) = measured?;
    let n = args.room_buyers;
    let mib = |bytes: u64| bytes as f64 / 1_048_576.0;
    let small = Bound::AtMost(128.0);
    let near = Bound::AtMost(5.0);
    let off_by = (rate - f64::from(BIG_RATE)).abs() / f64::from(BIG_RATE) * 100.0;
    Ok([
        Row {
            figure: "a waiting room --room-buyers joined: Redis, instance VmRSS",
            measured: format!(
                "{n} joined: Redis {:.1} MiB ({:.0} bytes a buyer), instance {} MiB",
                mib(redis_bytes),
                redis_bytes as f64 / f64::from(n.max(1)),
                small.shown(mib(resident), 1)
            ),
            target: "instance < 128 MiB",
            met: Some(small.met(mib(resident))),
            value: Figure::lower(mib(resident)),
        },
        Row {
            figure: "the same room's admissions/s against its admit_per_sec (100)",
            measured: format!("{rate:.1}/s ({}% off)", near.shown(off_by, 1)),
            target: "within 5%",
            met: Some(near.met(off_by)),
            value: Figure::lower(off_by),
        },
    ])
}

/// The rate the room admits at once open, asked by one client as fast as
/// it can for [`BIG_WATCH`]: admissions counted from the room's own total.
async fn pace(store: &Store, http: &reqwest::Client, url: &str, sale: i64) -> anyhow::Result<f64> {
    let keys = seckill_core::keys::SaleKeys::new(store.prefix(), sale);
    let first: serde_json::Value = http
        .post(format!("{url}/api/sales/{sale}/queue"))
        .json(&json!({ "user_id": "waiting-0" }))
        .send()
        .await?
        .json()
        .await?;
    let ticket = first["ticket"].as_str().context("a ticket")?.to_owned();
    let admitted = async || -> anyhow::Result<u64> {
        let mut conn = store.redis().await?;
        let total: Option<u64> = redis::cmd("HGET")
            .arg(&keys.room.state)
            .arg("admitted")
            .query_async(&mut conn)
            .await?;
        Ok(total.unwrap_or(0))
    };
    // Past the first second's burst, then watched.
    let settle = Instant::now() + Duration::from_secs(2);
    let ask = async |until: Instant| -> anyhow::Result<()> {
        while Instant::now() < until {
            http.get(format!("{url}/api/sales/{sale}/queue"))
                .header("Seckill-Ticket", &ticket)
                .send()
                .await?
                .error_for_status()?;
        }
        Ok(())
    };
    ask(settle).await?;
    let (before, started) = (admitted().await?, Instant::now());
    ask(started + BIG_WATCH).await?;
    let after = admitted().await?;
    Ok((after - before) as f64 / started.elapsed().as_secs_f64())
}
