//! What a waiting room's status answer costs, beside the cheapest answer
//! a sale gives: a buyer asking where they stand in line
//! (`GET /api/sales/{id}/queue`, one script on Redis and two signatures)
//! against a sold-out purchase (the instance's own flag, no Redis), on the
//! same instance, with `wrk` (one thread, 64 connections), alternated
//! [`wrk::ROUNDS`] times.
//!
//! The buyer waits behind another who is never admitted (the room admits
//! one a second, one at a time, and the one ahead never buys), so every
//! answer is a place in line, as a crowd polling before its turn gets.

use anyhow::Context;
use chrono::Utc;
use serde_json::json;

use super::wrk::{self, ROUNDS};
use super::{Bound, Row};
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::domain::{NewSale, RoomMode, RoomSettings};
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

const FIGURE: &str = "waiting room status answers / sold-out answers (wrk)";
const TARGET: &str = ">= 0.80";

/// Status answers per second against sold-out answers per second.
pub(super) async fn status_against_sold_out(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    if !wrk::wrk_installed().await {
        return Ok(wrk::not_installed(FIGURE, TARGET));
    }
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-room", &[]).await?;
    let rounds = measure(args, store, &url).await;
    cluster.stop().await;
    let [status, sold_out] = wrk::median_round(rounds?);
    let ratio = status / sold_out;
    let target = Bound::AtLeast(0.80);
    Ok(Row {
        figure: FIGURE,
        measured: format!(
            "{} ({status:.0}/s vs {sold_out:.0}/s; median of {ROUNDS} alternated)",
            target.shown(ratio, 2)
        ),
        target: TARGET,
        met: Some(target.met(ratio)),
    })
}

/// The rounds, each `[status, sold out]` in requests per second.
async fn measure(args: &BenchArgs, store: &Store, url: &str) -> anyhow::Result<Vec<[f64; 2]>> {
    let purchase_script = tempfile::NamedTempFile::new().context("a file for wrk's script")?;
    std::fs::write(
        purchase_script.path(),
        format!(
            "wrk.method = \"POST\"\nwrk.body = '{}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n",
            wrk::BODY
        ),
    )?;
    let sold_out = loadrun::create_sale(store, "Bench room: sold out", 1, Some(3600)).await?;
    let purchase = format!("{url}/api/sales/{sold_out}/purchase");
    // The first takes the one unit, the second sets the instance's flag.
    for _ in 0..2 {
        wrk::wrk_once(&purchase, purchase_script.path()).await?;
    }
    let ticket = waiting_ticket(store, url).await?;
    let status_script = tempfile::NamedTempFile::new().context("a file for wrk's script")?;
    std::fs::write(
        status_script.path(),
        format!("wrk.headers[\"Seckill-Ticket\"] = \"{}\"\n", ticket.1),
    )?;
    let status = format!("{url}/api/sales/{}/queue", ticket.0);
    let mut rounds = Vec::new();
    for round in 0..ROUNDS {
        // Each first in every other round, as the sold-out row does.
        let mut pair = [0.0; 2];
        for which in [round % 2, 1 - round % 2] {
            pair[which] = if which == 0 {
                wrk::wrk(&status, args.secs, Some(status_script.path())).await?
            } else {
                wrk::wrk(&purchase, args.secs, Some(purchase_script.path())).await?
            };
        }
        rounds.push(pair);
    }
    Ok(rounds)
}

/// A sale with a room, someone admitted ahead who never buys, and the
/// ticket of a buyer waiting behind them: `(sale id, ticket)`.
async fn waiting_ticket(store: &Store, url: &str) -> anyhow::Result<(i64, String)> {
    let room = RoomSettings {
        mode: RoomMode::Fifo,
        admit_per_sec: 1,
        max_active: 1,
        admission_secs: 3600,
    };
    let new = NewSale::builder("Bench room", 1_000)
        .lasts(3600)
        .waiting_room(room)
        .build(Utc::now())
        .context("the bench's room")?;
    let sale = store.create_sale(&new).await?.id;
    let http = reqwest::Client::new();
    let mut ticket = String::new();
    for buyer in ["ahead", "wrk-waiting"] {
        let answer: serde_json::Value = http
            .post(format!("{url}/api/sales/{sale}/queue"))
            .json(&json!({ "user_id": buyer }))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        ticket = answer["ticket"]
            .as_str()
            .context("a ticket in the join's answer")?
            .to_owned();
    }
    Ok((sale, ticket))
}
