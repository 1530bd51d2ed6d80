//! `seckill demo --waiting-room`: who gets the units?
//!
//! First the crowd of `seckill crowd` (people against bots, with the
//! waiting room off, `fifo` and `lottery`, on the same sale settings) and
//! its table. Then, unless `--exit`, one instance and a worker serve a
//! sale with a lottery room that opens a minute later: the audience joins
//! from the sale page before the open, the lottery draws their order at
//! the open, and each watches their place go down until their turn.

use std::pin::pin;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::Utc;
use clap::Parser;
use seckill_loadtest::report::Verdict;

use super::DemoArgs;
use crate::crowd::{self, CrowdArgs};
use crate::loadrun::{self, admin_token};
use seckill_core::config::Strategy;
use seckill_core::domain::{NewSale, RoomMode, RoomSettings};
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// How long after the crowd the audience's sale opens: time to open the
/// page and join before the lottery is drawn.
const OPENS_IN: Duration = Duration::from_secs(60);
/// The audience's room: one admission a second, each lasting a minute, so
/// that a room of people sees the line move and has time to buy.
const AUDIENCE_ROOM: (u32, u32) = (1, 60);

/// `seckill crowd`'s defaults, from its own command line, so that the
/// demo's crowd is the documented one (but for the units, the demo's).
#[derive(Parser)]
struct CrowdDefaults {
    #[command(flatten)]
    crowd: CrowdArgs,
}

/// Run the crowd, print its table and the verdict; then serve the
/// audience's sale until Ctrl-C (or end, with `--exit`).
pub(crate) async fn demo_room(
    args: &DemoArgs,
    services: &Services,
    prefix: &str,
) -> anyhow::Result<Verdict> {
    let mut crowd_args = CrowdDefaults::parse_from(["crowd"]).crowd;
    crowd_args.stock = args.stock;
    // One listener from start to end, as in the demo's other show.
    let mut stop = pin!(seckill_cli::process::stop_requested());
    let held = tokio::select! {
        held = crowd::crowd(crowd_args, services, prefix) => held?,
        () = &mut stop => bail!("interrupted; the app instances were stopped"),
    };
    let verdict = if held { Verdict::Pass } else { Verdict::Fail };
    println!("demo verdict: {}", verdict.as_str());
    if args.exit {
        return Ok(verdict);
    }
    let store = loadrun::connect(services, prefix).await?;
    let token = admin_token();
    // The join limit off: the demo's audience joins from this one address.
    let deployment = loadrun::deployment(services, prefix, Strategy::Lock, &token)?
        .env(
            "SECKILL_PAYMENT_WINDOW_SECS",
            args.payment_window_secs.to_string(),
        )
        .env("SECKILL_ROOM_JOINS_PER_IP", "0");
    let fleet = Fleet::start(deployment, "room", 1).await?;
    let (admit_per_sec, admission_secs) = AUDIENCE_ROOM;
    let sale = NewSale::builder(
        format!(
            "Demo {}: phone, lottery room",
            chrono::Local::now().format("%b %-d %H:%M")
        ),
        i64::from(args.stock),
    )
    .price_cents(loadrun::PRICE_CENTS)
    .starts_at(Utc::now() + chrono::Duration::from_std(OPENS_IN).expect("a minute"))
    .lasts(3600)
    .waiting_room(RoomSettings {
        mode: RoomMode::Lottery,
        admit_per_sec,
        max_active: args.stock,
        admission_secs,
        max_line: None,
    })
    .build(Utc::now())
    .context("the audience's sale")?;
    let sale_id = store.create_sale(&sale).await?.id;
    let url = fleet.url("room-1")?;
    println!(
        "\nYour turn: a sale of {stock} units with a lottery room opens in {opens} s.\n\
         Join the line from the sale page before it opens: {url}/sales/{sale_id}\n\
         At the open the lottery draws everyone who joined; then the room admits {admit_per_sec} a second,\n\
         and an admission lasts {admission_secs} s. The room, live: {url}/sales/{sale_id}/live\n\
         Press Ctrl-C to stop.",
        stock = args.stock,
        opens = OPENS_IN.as_secs(),
    );
    stop.await;
    fleet.stop().await;
    Ok(verdict)
}
