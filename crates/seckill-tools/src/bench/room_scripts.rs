//! A lottery room's slowest Redis command while it fills, opens and
//! admits (`seckill bench --only room-scripts`): no step of a room may
//! pass over the whole line, at any size. And the slowest purchase of
//! another sale on the same Redis across the open: a room's open must not
//! stall the sales beside it.
//!
//! The row runs on a private Redis, on a CPU the bench's own threads and
//! every other process' that may move are kept off while it runs
//! (`own_core.rs`, `shield.rs`): so that the slow log times Redis running
//! a room's commands, not another thread holding Redis' CPU.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};

use super::compare::Figure;
use super::own_core::OwnCore;
use super::{Bound, Row};
use crate::bench::BenchArgs;
use seckill_core::config::Strategy;
use seckill_core::domain::{NewSale, RoomMode, RoomSettings, Sale, UserId};
use seckill_core::purchase::Outcome;
use seckill_core::redis_pool::{RedisAt, connect_redis};
use seckill_core::store::Store;
use seckill_core::waiting_room;
use seckill_devenv::services::PrivateRedis;
use tokio_util::sync::CancellationToken;

/// Visits in flight while the lottery room fills: run straight on Redis,
/// as an instance runs them, so that the room fills at Redis' pace rather
/// than HTTP's.
const VISITS_IN_FLIGHT: usize = 128;
/// How long the opened lottery room is watched admitting.
const OPEN_WATCH: Duration = Duration::from_secs(3);
/// Commands at least this slow are logged while the row runs (µs).
const SLOW_MICROS: u64 = 1_000;
/// How long before the open the other sale's buyers start.
const BEFORE_OPEN: Duration = Duration::from_secs(1);

/// A lottery room of `--room-buyers` who all join before the open, then
/// opened and admitting at 10,000 a second, looked at as an instance
/// tracking its most buyers looks: Redis' slowest command in
/// each phase, from its `SLOWLOG` (this run's commands only). A script
/// that passed over the line at the open would show here as one command
/// of hundreds of milliseconds.
///
/// Beside it, from [`BEFORE_OPEN`] before the open to the end of the
/// watch, purchases of another sale (no room, `lock`, as an instance
/// runs them), one after another, each a new buyer: the slowest answer.
///
/// Both on a private Redis, on a CPU the other threads are kept off
/// while the row runs ([`OwnCore`]); the sales in `store`'s database.
pub(super) async fn slowest_command(args: &BenchArgs, store: &Store) -> anyhow::Result<[Row; 2]> {
    let redis = PrivateRedis::start().await?;
    let pool = connect_redis(&RedisAt::Server(redis.url()), Duration::from_secs(5)).await?;
    let store = &Store::new(store.pg().clone(), pool, store.prefix());
    let pid = redis.pid().context("the private Redis has no process")?;
    let placement = OwnCore::give(pid)?;
    let rows = measure(args, store, placement.shown()).await;
    placement.restore()?;
    rows
}

/// The row's two figures, measured on `store`, which runs as `shown`.
async fn measure(args: &BenchArgs, store: &Store, shown: String) -> anyhow::Result<[Row; 2]> {
    let room = RoomSettings {
        mode: RoomMode::Lottery,
        admit_per_sec: 10_000,
        max_active: 1_000_000,
        admission_secs: 3600,
        max_line: None,
    };
    let new = NewSale::builder("Bench lottery room", 1_000_000)
        .starts_in(3600)
        .lasts(3600)
        .waiting_room(room)
        .build(Utc::now())
        .context("the bench's lottery room")?;
    let sale = store.create_sale(&new).await?;
    let mut conn = store.redis().await?;
    let log = SlowLog::start(&mut conn).await?;
    let measured = async {
        let joining = Instant::now();
        futures_util::stream::iter(0..args.room_buyers)
            .map(|n| {
                let sale = &sale;
                async move {
                    let buyer = UserId::parse(&format!("waiting-{n}"))
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    waiting_room::visit(store, sale, &room, &buyer, true).await
                }
            })
            .buffer_unordered(VISITS_IN_FLIGHT)
            .try_collect::<Vec<_>>()
            .await?;
        let joined_in = joining.elapsed();
        let joins = log.slowest(&mut conn, store.prefix()).await?;
        let beside = Beside::start(store).await?;
        tokio::time::sleep(BEFORE_OPEN).await;
        // The open: the same sale, its open moved to now (the script takes
        // the open as an argument, so the room opens at the next visit).
        let opened = Sale {
            starts_at: Utc::now(),
            ..sale.clone()
        };
        let first = UserId::parse("waiting-0").map_err(|e| anyhow::anyhow!("{e:?}"))?;
        // An instance's look reads the places of the buyers it tracks (the
        // admitted and the next in line who ask it): as many as it may.
        let tracked: Vec<String> = (0..waiting_room::TRACKED_MAX)
            .map(|n| format!("waiting-{n}"))
            .collect();
        let watching = Instant::now();
        while watching.elapsed() < OPEN_WATCH {
            waiting_room::look(store, &opened, &room, &[], &tracked).await?;
            waiting_room::visit(store, &opened, &room, &first, false).await?;
        }
        let beside = beside.stop().await?;
        let figures = waiting_room::figures(store, sale.id).await?;
        let open = log.slowest(&mut conn, store.prefix()).await?;
        anyhow::Ok((joined_in, joins, open, figures.admissions, beside))
    }
    .await;
    let (joined_in, joins, open, admissions, beside) = measured?;
    let limit = Bound::AtMost(5.0);
    let in_ms = |slowest: Option<u64>| match slowest {
        Some(micros) => format!("{} ms", limit.shown(micros as f64 / 1000.0, 1)),
        None => format!("< {} ms", SLOW_MICROS / 1000),
    };
    let worst = joins.max(open).map_or(0.0, |micros| micros as f64 / 1000.0);
    Ok([
        Row {
            figure: "a lottery room of --room-buyers: Redis' slowest command (SLOWLOG)",
            measured: format!(
                "{} joined in {:.0} s: join {}, open and admitting {} ({admissions} admitted in {} s, looks reading {} tracked; {shown})",
                args.room_buyers,
                joined_in.as_secs_f64(),
                in_ms(joins),
                in_ms(open),
                OPEN_WATCH.as_secs(),
                waiting_room::TRACKED_MAX,
            ),
            target: "<= 5 ms",
            met: Some(limit.met(worst)),
            value: Figure::lower(worst),
        },
        beside.row(&shown),
    ])
}

/// Purchases of another sale, one after another, while a room opens.
struct Beside {
    stop: CancellationToken,
    task: tokio::task::JoinHandle<anyhow::Result<Answered>>,
}

/// What the purchases beside the room were answered.
struct Answered {
    /// Purchases answered `202`.
    accepted: u64,
    /// The slowest of them.
    slowest: Duration,
}

impl Beside {
    /// A sale of its own (open now, no room) and a task buying it.
    async fn start(store: &Store) -> anyhow::Result<Self> {
        let new = NewSale::builder("Bench sale beside a room", 1_000_000)
            .lasts(3600)
            .build(Utc::now())
            .context("the sale beside the room")?;
        let sale = std::sync::Arc::new(store.create_sale(&new).await?);
        let purchaser = super::roomed::purchaser(store, Strategy::Lock);
        let stop = CancellationToken::new();
        let task = tokio::spawn({
            let stop = stop.clone();
            async move {
                let mut answered = Answered {
                    accepted: 0,
                    slowest: Duration::ZERO,
                };
                while !stop.is_cancelled() {
                    let buyer = UserId::parse(&format!("beside-{}", answered.accepted))
                        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
                    let asked = Instant::now();
                    let outcome = purchaser.purchase(&sale, &buyer).await?;
                    anyhow::ensure!(
                        matches!(outcome, Outcome::Accepted { .. }),
                        "a purchase beside the room was answered {outcome:?}"
                    );
                    answered.slowest = answered.slowest.max(asked.elapsed());
                    answered.accepted += 1;
                }
                Ok(answered)
            }
        });
        Ok(Self { stop, task })
    }

    async fn stop(self) -> anyhow::Result<Answered> {
        self.stop.cancel();
        self.task.await.context("the purchases beside the room")?
    }
}

impl Answered {
    /// The row, its Redis run as `shown`.
    fn row(&self, shown: &str) -> Row {
        let limit = Bound::AtMost(50.0);
        let slowest = self.slowest.as_secs_f64() * 1000.0;
        Row {
            figure: "a purchase of another sale across a lottery room's open: the slowest",
            measured: format!(
                "{} ms ({} bought one after another, {} s before the open to {} s after; {shown})",
                limit.shown(slowest, 1),
                self.accepted,
                BEFORE_OPEN.as_secs(),
                OPEN_WATCH.as_secs()
            ),
            target: "<= 50 ms",
            met: Some(limit.met(slowest)),
            value: Figure::lower(slowest),
        }
    }
}

/// Redis' slow log, set to keep every command of [`SLOW_MICROS`] or more.
/// The row's Redis is its own and goes with the row: nothing to put back.
struct SlowLog;

impl SlowLog {
    async fn start(conn: &mut impl redis::aio::ConnectionLike) -> anyhow::Result<Self> {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(SLOW_MICROS)
            .arg("slowlog-max-len")
            .arg(10_000)
            .query_async::<()>(conn)
            .await
            .context("setting Redis' slow log")?;
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async::<()>(conn)
            .await?;
        Ok(Self)
    }

    /// The slowest command logged since the last call that names a key
    /// under `prefix`, in µs (the row's own reading of the log, a
    /// `SLOWLOG GET` of up to 10,000 entries, names none: it is not a
    /// room's); `None` when none was as slow as [`SLOW_MICROS`]. The log
    /// is emptied.
    async fn slowest(
        &self,
        conn: &mut impl redis::aio::ConnectionLike,
        prefix: &str,
    ) -> anyhow::Result<Option<u64>> {
        let entries: Vec<redis::Value> = redis::cmd("SLOWLOG")
            .arg("GET")
            .arg(-1)
            .query_async(conn)
            .await
            .context("reading Redis' slow log")?;
        redis::cmd("SLOWLOG")
            .arg("RESET")
            .query_async::<()>(conn)
            .await?;
        let ours = |args: &redis::Value| match args {
            redis::Value::Array(args) => args.iter().any(|arg| {
                matches!(arg, redis::Value::BulkString(bytes)
                    if String::from_utf8_lossy(bytes).contains(prefix))
            }),
            _ => false,
        };
        let command = |args: &redis::Value| match args {
            redis::Value::Array(args) => args
                .iter()
                .take(4)
                .map(|arg| match arg {
                    redis::Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
                    _ => String::new(),
                })
                .collect::<Vec<_>>()
                .join(" "),
            _ => String::new(),
        };
        let mut slow: Vec<(u64, String)> = entries
            .iter()
            .filter_map(|entry| match entry {
                redis::Value::Array(fields) if fields.len() >= 4 && ours(&fields[3]) => {
                    match fields[2] {
                        redis::Value::Int(micros) => u64::try_from(micros)
                            .ok()
                            .map(|micros| (micros, command(&fields[3]))),
                        _ => None,
                    }
                }
                _ => None,
            })
            .collect();
        slow.sort_unstable_by_key(|entry| std::cmp::Reverse(entry.0));
        tracing::info!(
            logged = slow.len(),
            at_least_micros = SLOW_MICROS,
            slowest = ?slow.iter().take(5).collect::<Vec<_>>(),
            "this run's commands in Redis' slow log"
        );
        Ok(slow.first().map(|(micros, _)| *micros))
    }
}
