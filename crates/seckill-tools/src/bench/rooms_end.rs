//! Rooms end (`seckill bench --only rooms-end`): a waiting room's keys go
//! its grace after its sale's end (`--room-grace-secs`), so Redis' memory
//! after `--ended-rooms` rooms of `--room-buyers-each` buyers, all ended,
//! is back where it was before them.
//!
//! On a Redis server of the row's own (a private one: no other client's
//! keys move its `used_memory`), with a store whose rooms' grace is
//! [`GRACE`]: `used_memory` before; the sales created and their rooms
//! filled, every buyer's join run straight on Redis as an instance runs it
//! ([`VISITS_IN_FLIGHT`] at once, the rooms filling side by side);
//! `used_memory` at the peak; then the sales end, and nothing visits or
//! reads the rooms again: Redis expires their keys by itself (its active
//! expiry) once the end and the grace have passed. When its key count is
//! back to what the sales alone hold, `used_memory` after.
//!
//! The sales end once their rooms are full, whatever the filling took:
//! each is created ending in an hour, and once every room is full, one
//! look at each (a visit for nobody) with its end moved to [`ENDS_IN`]
//! from then. The script takes the end as an argument and moves the
//! keys' expiry with it, as it would for a sale whose end was moved; the
//! `room-scripts` row moves the open the same way.

use std::time::{Duration, Instant};

use anyhow::Context;
use chrono::Utc;
use futures_util::{StreamExt, TryStreamExt};

use super::compare::Figure;
use super::redis_info::info_field;
use super::{Bound, Row};
use crate::bench::BenchArgs;
use seckill_core::domain::{NewSale, RoomMode, RoomSettings, Sale, UserId};
use seckill_core::redis_pool::{RedisAt, RedisConn, RedisTimeouts, connect_redis_with};
use seckill_core::store::Store;
use seckill_core::waiting_room;
use seckill_devenv::services::PrivateRedis;

/// The rooms' grace here: short, so that the row waits seconds, not the
/// hour of `--room-grace-secs`' default.
const GRACE: Duration = Duration::from_secs(2);
/// How long after the last room is full the sales end.
const ENDS_IN: Duration = Duration::from_secs(2);
/// Joins in flight while the rooms fill (as `room_scripts.rs`).
const VISITS_IN_FLIGHT: usize = 128;
/// How long Redis may take, after the end and the grace, to expire every
/// key of the rooms by itself.
const EXPIRY_LIMIT: Duration = Duration::from_secs(60);
/// What Redis may hold after the rooms beyond what it held before them,
/// none of it the rooms': its latency histograms (`latency-tracking`, on
/// by default in Redis 7: one per command, about 24 KiB, made at the
/// command's first call and kept; the rooms' script runs some twenty
/// commands a fresh server has not run, 0.6 MiB), the sales' own keys
/// (their stock and load mark, kept while a sale exists, some hundred
/// bytes each) and the scripts cached. One room of 10,000 buyers left
/// behind is about 1.6 MiB: even one would miss it.
const ALLOWANCE_MIB: f64 = 1.0;

/// The row: Redis' `used_memory` before the rooms, at their peak, and
/// after they ended.
pub(super) async fn memory_after_ended_rooms(
    args: &BenchArgs,
    store: &Store,
) -> anyhow::Result<Row> {
    let redis = PrivateRedis::start().await?;
    let at = RedisAt::Server(redis.url());
    // Two pools, each waiting for a reply as long as it takes: the rooms
    // fill as fast as Redis takes the joins, and Redis frees the rooms'
    // keys in the foreground (a loaded machine, a slow reply: not a
    // failure).
    let patient = RedisTimeouts {
        connect: Duration::from_secs(5),
        response: Duration::from_secs(30),
        sends_wait: false,
    };
    // The measuring connection, a pool of its own: the rooms' pool is
    // dropped before the memory after is read, so that the two readings
    // count Redis' memory for one client alike.
    let measuring = connect_redis_with(&at, Duration::from_secs(5), patient).await?;
    let mut conn = measuring.get().await.context("a Redis connection")?;
    let before = info_field::<u64>(&mut conn, "memory", "used_memory").await?;
    log_memory(&mut conn, "before").await?;
    let pool = connect_redis_with(&at, Duration::from_secs(5), patient).await?;
    // Each buyer joins once and never asks again: a room that took them
    // for gone (`--room-abandon-secs`) would drop them as it admits, and
    // be smaller at its peak than it was filled.
    let rooms = Store::new(store.pg().clone(), pool, store.prefix())
        .with_room_grace(GRACE)
        .with_room_abandon(Duration::from_secs(86_400));
    let (room, sales) = create_sales(args.ended_rooms, &rooms).await?;
    let sales_keys = key_count(&mut conn).await?;
    let filling = Instant::now();
    fill(args, &rooms, &room, &sales).await?;
    let filled_in = filling.elapsed();
    let peak = info_field::<u64>(&mut conn, "memory", "used_memory").await?;
    log_memory(&mut conn, "peak").await?;
    let ends = Utc::now() + ENDS_IN;
    for sale in &sales {
        let ending = Sale {
            ends_at: Some(ends),
            ..sale.clone()
        };
        waiting_room::look(&rooms, &ending, &room, &[], &[]).await?;
    }
    drop(rooms);
    tokio::time::sleep(ENDS_IN + GRACE).await;
    let expiring = Instant::now();
    // The slowest answer while Redis expires: what freeing the rooms cost
    // every other client of the server.
    let mut slowest = Duration::ZERO;
    let left = loop {
        let asked = Instant::now();
        let left = key_count(&mut conn).await?.saturating_sub(sales_keys);
        slowest = slowest.max(asked.elapsed());
        if left == 0 || expiring.elapsed() >= EXPIRY_LIMIT {
            break left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let expired_in = expiring.elapsed();
    clients_gone(&mut conn).await?;
    let after = info_field::<u64>(&mut conn, "memory", "used_memory").await?;
    log_memory(&mut conn, "after").await?;
    let mib = |bytes: u64| bytes as f64 / 1_048_576.0;
    let grown = mib(after) - mib(before);
    let limit = Bound::AtMost(ALLOWANCE_MIB);
    let gone = if left == 0 {
        format!(
            "keys gone {:.1} s after the grace (DBSIZE answered within {} ms)",
            expired_in.as_secs_f64(),
            slowest.as_millis()
        )
    } else {
        format!(
            "{left} keys of the rooms still there {} s after the grace",
            EXPIRY_LIMIT.as_secs()
        )
    };
    Ok(Row {
        figure: "Redis memory after --ended-rooms ended rooms of --room-buyers-each buyers",
        measured: format!(
            "{} rooms of {} (filled in {:.0} s): {:.1} MiB before, {:.1} MiB at the peak, \
             {:.1} MiB after ({} MiB); {gone}",
            args.ended_rooms,
            args.room_buyers_each,
            filled_in.as_secs_f64(),
            mib(before),
            mib(peak),
            mib(after),
            signed(&limit.shown(grown, 2)),
        ),
        target: "<= before + 1 MiB",
        met: Some(left == 0 && limit.met(grown)),
        value: Figure::lower(grown),
    })
}

/// `--ended-rooms` sales, each with a `fifo` room, open now and ending in
/// an hour; their room's settings and the sales.
async fn create_sales(count: u32, store: &Store) -> anyhow::Result<(RoomSettings, Vec<Sale>)> {
    // Open, admitting: most of a room waits in line, some are admitted,
    // as in a sale under way.
    let room = RoomSettings {
        mode: RoomMode::Fifo,
        admit_per_sec: 100,
        max_active: 100,
        admission_secs: 60,
        max_line: None,
    };
    let sales = futures_util::stream::iter(0..count)
        .map(|n| async move {
            let new = NewSale::builder(format!("Bench ended room {n}"), 1_000)
                .lasts(3600)
                .waiting_room(room)
                .build(Utc::now())
                .context("a bench room")?;
            store.create_sale(&new).await
        })
        .buffer_unordered(32)
        .try_collect()
        .await?;
    Ok((room, sales))
}

/// `--room-buyers-each` buyers join each sale's room, the rooms side by
/// side.
async fn fill(
    args: &BenchArgs,
    store: &Store,
    room: &RoomSettings,
    sales: &[Sale],
) -> anyhow::Result<()> {
    let joins = u64::from(args.room_buyers_each) * sales.len() as u64;
    futures_util::stream::iter(0..joins)
        .map(|n| async move {
            let sale = &sales[(n % sales.len() as u64) as usize];
            let buyer =
                UserId::parse(&format!("waiting-{n}")).map_err(|e| anyhow::anyhow!("{e:?}"))?;
            waiting_room::visit(store, sale, room, &buyer, true).await
        })
        .buffer_unordered(VISITS_IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// A figure with its sign: "+0.05", "-0.01".
fn signed(shown: &str) -> String {
    if shown.starts_with('-') {
        shown.to_owned()
    } else {
        format!("+{shown}")
    }
}

/// Wait until the measuring connection is Redis' only client (the rooms'
/// pool, dropped, has closed its connections), for at most 5 s.
async fn clients_gone(conn: &mut RedisConn) -> anyhow::Result<()> {
    let waiting = Instant::now();
    while info_field::<u64>(conn, "clients", "connected_clients").await? > 1
        && waiting.elapsed() < Duration::from_secs(5)
    {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

/// Log what Redis' `used_memory` is made of now (`when`): its data (with
/// the latency histograms: `used_memory_dataset` is what the overhead
/// leaves), its overhead, its clients' buffers, its scripts.
async fn log_memory(conn: &mut RedisConn, when: &str) -> anyhow::Result<()> {
    let mut fields = Vec::new();
    for name in [
        "used_memory",
        "used_memory_dataset",
        "used_memory_overhead",
        "mem_clients_normal",
        "used_memory_scripts",
    ] {
        fields.push((name, info_field::<u64>(conn, "memory", name).await?));
    }
    tracing::info!(when, ?fields, "Redis' memory");
    Ok(())
}

/// The keys in Redis (`DBSIZE`: those expired and not yet freed count).
async fn key_count(conn: &mut RedisConn) -> anyhow::Result<u64> {
    redis::cmd("DBSIZE")
        .query_async(conn)
        .await
        .context("DBSIZE")
}
