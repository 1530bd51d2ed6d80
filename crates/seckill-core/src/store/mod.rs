//! The store: the one owner of each table, and the only place with SQL.
//!
//! [`sales`] owns the `sales` table and a sale's figures in Redis (units
//! left, buyers): creating a sale, the per-instance cache of sales (kept in
//! [`catalog`]), and reading its stock with a reload when Redis lost it;
//! [`load`] loads a sale into Redis from PostgreSQL, under its load epoch. [`orders`] owns the `orders` table: confirming a
//! batch from the queue, paying, cancelling an unpaid order, finding an
//! order wherever it is (PostgreSQL or a queue), and the admin's list.
//!
//! Everything here goes through a [`Store`]: the PostgreSQL pool, the Redis
//! pool and the key prefix, shared by the web handlers, the purchase path
//! and the worker of one process. The conditional statements that decide
//! races (pay against cancel, the CHECK that refuses an oversell) live in
//! these files, each with the race it decides named beside it; the names of
//! the constraints they rely on are in [`schema`], next to the migration
//! that creates them.

pub(crate) mod admin;
pub(crate) mod catalog;
pub(crate) mod confirm;
pub mod load;
pub(crate) mod orders;
pub(crate) mod pass_key;
pub mod sales;
pub(crate) mod schema;

use std::sync::Arc;

use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};

use crate::config::{
    DEFAULT_ROOM_ABANDON_SECS, DEFAULT_ROOM_GRACE_SECS, RedisDurability, STATEMENT_TIMEOUT,
};
use crate::redis_pool::{RedisConn, RedisPool};
use crate::urls::redact;

pub(crate) use catalog::Catalog;
pub use confirm::{Confirmation, Taken, Written};
pub use orders::{Deadline, OrderRow};
pub(crate) use orders::{OrderCounts, PayOutcome};
pub use sales::Snapshot;

/// PostgreSQL connections per instance (page reads and the worker).
const PG_POOL_SIZE: u32 = 10;

/// Connect to PostgreSQL and bring its schema up to date. Migrations are
/// compiled into the binary; running them twice, or from two instances at
/// once, is safe (sqlx takes an advisory lock).
pub async fn connect_postgres(url: &str) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(url)
        .with_context(|| format!("{} is not a PostgreSQL URL", redact(url)))?
        // No statement may hang on: a stuck one would hold a page's answer
        // (the worker's writes get a shorter limit, under their lease). It
        // fails as "try again later" (see probe.rs).
        .options([(
            "statement_timeout",
            format!("{}ms", STATEMENT_TIMEOUT.as_millis()),
        )]);
    let pool = PgPoolOptions::new()
        .max_connections(PG_POOL_SIZE)
        // Fail fast while PostgreSQL is down, so the worker can back off and
        // pages can answer 503 instead of hanging.
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {}", redact(url)))?;
    sqlx::migrate!("./migrations")
        .run(&pool)
        .await
        .context("running database migrations")?;
    Ok(pool)
}

/// The app's handle on its data. Cheap to clone: every field is shared.
#[derive(Clone)]
pub struct Store {
    /// PostgreSQL, which has the last word on every order. Set at start;
    /// the pool itself is shared by every clone.
    pg: PgPool,
    /// Redis (one server or a cluster): the sale's stock and buyers, the
    /// lock, the queues. Set at start; the pool is shared by every clone.
    redis: RedisPool,
    /// Prefix of every Redis key (see `keys.rs`); fixed for the process.
    prefix: String,
    /// The sales this process has read, by id. Shared by every clone; a sale
    /// never changes after it is created, so nothing ever evicts it.
    catalog: Arc<Catalog>,
    /// The runtime the store was made on: in `serve`, the process' own
    /// (`main`), not one of the HTTP workers'. What many requests wait on
    /// runs here, in a task of its own: a sale's one read (`catalog.rs`),
    /// the passes of a sale's lane and the looks of those whose answer
    /// was lost (`strategy/lanes.rs`), a
    /// live page's reading task (`scoreboard.rs`) and the single-flight
    /// reads of the index and the sale pages (`web/single_flight.rs`); the Redis pool opens its
    /// connections on the same runtime (`redis_pool/recycle_check.rs`). Each HTTP worker runs
    /// its tasks on one thread, first come first served, and in a burst the
    /// thousands of new connections of an instance are ready at once: a
    /// task woken there (by Redis' reply) would wait for all of them to be
    /// served before it ran again, at every round trip (docs/bench.md). Fixed at start.
    runtime: tokio::runtime::Handle,
    /// What an answer waits for: the primary's write, or a replica's too
    /// (`replicas.rs`). Fixed at start.
    durability: RedisDurability,
    /// How long a buyer in a waiting room's line may go without asking
    /// before the room drops them as abandoned (`lua/room_visit.lua`).
    /// Fixed at start: every visit this store makes passes it.
    room_abandon: Duration,
    /// How long a waiting room's keys outlive its sale's end: every visit
    /// this store makes gives them that expiry (`lua/room_visit.lua`).
    /// Fixed at start.
    room_grace: Duration,
    /// The key the waiting rooms' passes are signed with, read once from
    /// PostgreSQL (`pass_key.rs`). Shared by every clone.
    pass_key: Arc<tokio::sync::OnceCell<crate::domain::PassKey>>,
}

impl Store {
    /// A store whose tasks run on the current runtime (see
    /// [`Store::runtime`]). Panics outside a runtime.
    pub fn new(pg: PgPool, redis: RedisPool, prefix: impl Into<String>) -> Self {
        Self {
            pg,
            redis,
            prefix: prefix.into(),
            catalog: Arc::default(),
            runtime: tokio::runtime::Handle::current(),
            durability: RedisDurability::Local,
            room_abandon: Duration::from_secs(DEFAULT_ROOM_ABANDON_SECS),
            room_grace: Duration::from_secs(DEFAULT_ROOM_GRACE_SECS),
            pass_key: Arc::default(),
        }
    }

    /// The same store, whose purchases and worker wait for `durability`.
    pub fn with_durability(mut self, durability: RedisDurability) -> Self {
        self.durability = durability;
        self
    }

    /// What an answer waits for (`replicas.rs`).
    pub fn durability(&self) -> RedisDurability {
        self.durability
    }

    /// The same store, whose waiting rooms drop a buyer in line who has
    /// not asked for `after` (`--room-abandon-secs`).
    pub fn with_room_abandon(mut self, after: Duration) -> Self {
        self.room_abandon = after;
        self
    }

    /// How long a buyer in line may go without asking (`waiting_room.rs`).
    pub fn room_abandon(&self) -> Duration {
        self.room_abandon
    }

    /// The same store, whose waiting rooms' keys go `grace` after their
    /// sale's end (`--room-grace-secs`).
    pub fn with_room_grace(mut self, grace: Duration) -> Self {
        self.room_grace = grace;
        self
    }

    /// How long a room's keys outlive its sale's end (`waiting_room.rs`).
    pub fn room_grace(&self) -> Duration {
        self.room_grace
    }

    /// The PostgreSQL pool.
    pub fn pg(&self) -> &PgPool {
        &self.pg
    }

    /// The Redis pool.
    pub fn redis_pool(&self) -> &RedisPool {
        &self.redis
    }

    /// The prefix of every Redis key of this store.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The sales this process has read ([`Store::catalog`]'s field doc).
    pub(crate) fn catalog(&self) -> &Catalog {
        &self.catalog
    }

    /// Reads of a sale from PostgreSQL this process started: what the
    /// tests of the catalog's single flight count.
    #[cfg(feature = "test-support")]
    pub fn catalog_reads(&self) -> u64 {
        self.catalog.reads()
    }

    /// The runtime the store's own tasks run on (see the field).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// A connection from the Redis pool.
    pub async fn redis(&self) -> anyhow::Result<RedisConn> {
        self.redis.get().await.context("getting a Redis connection")
    }
}
