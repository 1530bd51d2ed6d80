//! `seckill crowd`: who gets the units? People against bots, with the
//! waiting room off, `fifo` and `lottery`, on the same sale settings.
//!
//! Each setting gets a fresh sale on one instance (and a worker) with
//! per-address rate limits: `--humans` people arrive at random around the
//! open and look once a second; `--bots` bots on `--bot-addresses`
//! addresses are there before the open, ask ten times a second, fire
//! purchases without a turn and try each other's admissions
//! (`people.rs`). Then the figures side by side (`report.rs`), and the
//! usual checks on PostgreSQL: nobody twice, nothing oversold, every
//! `202` an order.

pub(crate) mod people;
mod report;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use chrono::Utc;
use clap::Args;
use tokio::time::Instant;

use crate::loadrun::{self, admin_token};
use people::{Kind, Run, Story};
use seckill_core::config::{RateLimitSettings, Strategy};
use seckill_core::domain::{NewSale, OrderStatus, RoomMode, RoomSettings};
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// `seckill crowd`'s options: all have defaults.
#[derive(Debug, Clone, Args)]
pub struct CrowdArgs {
    /// People: each arrives at a random moment from 2 s before the open to 4 s after it.
    #[arg(long, default_value_t = 200, value_parser = clap::value_parser!(u32).range(1..=5_000))]
    pub(crate) humans: u32,
    /// Bots: there before the open, asking ten times a second.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(0..=5_000))]
    pub(crate) bots: u32,
    /// Addresses the bots share (the people have one each).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=250))]
    pub(crate) bot_addresses: u32,
    /// Units for sale.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) stock: u32,
    /// The room's admissions per second (at most `--stock` admitted at once).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) admit_per_sec: u32,
    /// Seed of the people's arrival times: the same seed, the same crowd.
    #[arg(long, default_value_t = 1)]
    pub(crate) seed: u64,
    /// The server's waiting-room joins per second from one address (the
    /// burst is 10), as `serve --room-joins-per-ip` takes it; 0 turns the limit off.
    #[arg(long, default_value_t = RateLimitSettings::default().room_joins_per_ip, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub(crate) room_joins_per_ip: u32,
}

/// From the start of a run to the open: the bots' head start.
const OPEN_IN: Duration = Duration::from_secs(3);
/// How long after the open a run may go on.
const RUN_FOR: Duration = Duration::from_secs(25);
/// Purchases (and joins) per second one address may send, and at once.
const PER_ADDRESS: (&str, &str) = ("20", "10");
/// How long an admission lasts.
const ADMISSION_SECS: u32 = 10;

/// The settings compared, in the table's order.
const SETTINGS: [Option<RoomMode>; 3] = [None, Some(RoomMode::Fifo), Some(RoomMode::Lottery)];

/// Run the crowd against each setting, print the table; whether every
/// run kept the promise (nobody twice, nothing oversold, nothing lost).
pub(crate) async fn crowd(
    args: CrowdArgs,
    services: &Services,
    prefix: &str,
) -> anyhow::Result<bool> {
    seckill_cli::process::raise_open_files_limit();
    let store = loadrun::connect(services, prefix).await?;
    let token = admin_token();
    let join_limit = match args.room_joins_per_ip {
        0 => "off".to_owned(),
        per_sec => format!("{per_sec}/s an address, a burst of {}", PER_ADDRESS.1),
    };
    println!(
        "seckill crowd: {} people and {} bots (on {} addresses) for {} units; the room admits {}/s; joins limited: {join_limit}",
        args.humans, args.bots, args.bot_addresses, args.stock, args.admit_per_sec
    );
    let mut rows = Vec::new();
    for setting in SETTINGS {
        let deployment = loadrun::deployment(services, prefix, Strategy::Lock, &token)?
            .env("SECKILL_RATE_LIMIT_PER_IP", PER_ADDRESS.0)
            .env("SECKILL_RATE_LIMIT_BURST", PER_ADDRESS.1)
            // The join limit as a shop runs it (on by default): every
            // person joins from an address of their own, the bots from
            // theirs (`people.rs`), so it counts what it counts in a shop.
            .env(
                "SECKILL_ROOM_JOINS_PER_IP",
                args.room_joins_per_ip.to_string(),
            );
        let fleet = Fleet::start(deployment, "crowd", 1).await?;
        let outcome = async {
            let url = fleet.url("crowd-1")?;
            let stories = run_setting(&args, &store, &url, setting).await?;
            anyhow::Ok(stories)
        }
        .await;
        fleet.stop().await;
        let (sale, stories) = outcome?;
        let kept = checks(&store, sale, args.stock, &stories).await?;
        rows.push(report::Row::of(setting, &stories, kept));
    }
    println!("{}", report::table(&rows, &args));
    let held = rows.iter().all(|row| row.kept.is_ok());
    println!(
        "verdict: {}",
        if held {
            "PASS (every setting: nobody twice, nothing oversold, every 202 an order)"
        } else {
            "FAIL"
        }
    );
    Ok(held)
}

/// One setting: a fresh sale, the crowd, every buyer's story.
async fn run_setting(
    args: &CrowdArgs,
    store: &Store,
    url: &str,
    setting: Option<RoomMode>,
) -> anyhow::Result<(i64, Vec<Story>)> {
    let start = Instant::now();
    let opens = Utc::now() + chrono::Duration::from_std(OPEN_IN).expect("a few seconds");
    let mut new = NewSale::builder(
        format!("Crowd, room {}", setting.map_or("off", RoomMode::as_str)),
        i64::from(args.stock),
    )
    .price_cents(loadrun::PRICE_CENTS)
    .starts_at(opens)
    .lasts(3600);
    if let Some(mode) = setting {
        new = new.waiting_room(RoomSettings {
            mode,
            admit_per_sec: args.admit_per_sec,
            max_active: args.stock,
            admission_secs: ADMISSION_SECS,
            max_line: None,
        });
    }
    let sale = store
        .create_sale(&new.build(Utc::now()).context("the crowd's sale")?)
        .await?
        .id;
    let run = Arc::new(Run {
        url: url.to_owned(),
        sale,
        start,
        open: start + OPEN_IN,
        until: start + OPEN_IN + RUN_FOR,
        room: setting.map(|_| f64::from(ADMISSION_SECS)),
        stolen: Mutex::new(Vec::new()),
    });
    let mut rng = fastrand::Rng::with_seed(args.seed);
    let mut tasks = Vec::new();
    for n in 0..args.humans {
        let arrives = OPEN_IN.saturating_sub(Duration::from_secs(2))
            + Duration::from_millis(rng.u64(0..6_000));
        let address = Ipv4Addr::new(127, 1, (n / 250) as u8, (n % 250 + 1) as u8);
        tasks.push(tokio::spawn(people::person(
            Arc::clone(&run),
            people::client_from(address),
            format!("person-{n}"),
            arrives,
        )));
    }
    let bot_clients: Vec<reqwest::Client> = (0..args.bot_addresses)
        .map(|k| people::client_from(Ipv4Addr::new(127, 2, 0, (k + 1) as u8)))
        .collect();
    for n in 0..args.bots {
        let http = bot_clients[(n % args.bot_addresses) as usize].clone();
        tasks.push(tokio::spawn(people::bot(
            Arc::clone(&run),
            http,
            format!("bot-{n}"),
        )));
    }
    let mut stories = Vec::new();
    for task in tasks {
        stories.push(task.await.context("a buyer's task")?);
    }
    Ok((sale, stories))
}

/// The promise, on PostgreSQL once the worker has written every order:
/// `Err` says what broke.
async fn checks(
    store: &Store,
    sale: i64,
    stock: u32,
    stories: &[Story],
) -> anyhow::Result<Result<(), String>> {
    let winners = stories.iter().filter(|s| s.won).count();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let orders = store.orders_of_sale(sale, 100_000).await?;
        let holding: Vec<&str> = orders
            .iter()
            .filter(|o| matches!(o.status, OrderStatus::Confirmed | OrderStatus::Paid))
            .map(|o| o.user_id.as_str())
            .collect();
        if holding.len() >= winners || Instant::now() >= deadline {
            let mut distinct = holding.clone();
            distinct.sort_unstable();
            distinct.dedup();
            return Ok(if holding.len() > stock as usize {
                Err(format!("{} units held of {stock}", holding.len()))
            } else if distinct.len() != holding.len() {
                Err("a buyer holds two units".into())
            } else if holding.len() != winners {
                Err(format!("{winners} told 202, {} orders held", holding.len()))
            } else {
                Ok(())
            });
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

impl Story {
    pub(crate) fn is(&self, kind: Kind) -> bool {
        self.kind == kind
    }
}
