//! seckill: a flash sale that never oversells.
//!
//! A purchase request reaches the storefront (`seckill-web`), which asks the
//! purchase path ([`purchase`]) whether the buyer gets a unit. The purchase
//! path decides under the sale's Redis lock ([`lock`]), takes the unit in
//! Redis and puts the order on the sale's Redis task queue ([`queue`]). The
//! worker ([`worker`]) drains the queue into PostgreSQL, whose constraints
//! (see `migrations/`) have the last word. Every read and write of a table
//! goes through the store ([`store`]), its one owner.
//!
//! A confirmed order must then be paid within a window ([`payment`]): the
//! worker queues a delayed deadline job for the orders it confirmed
//! together (they share their deadline), and cancels those still unpaid
//! when it comes due, giving their units back. Every change of
//! a sale's units left is published on Redis pub/sub, and [`events`] fans it
//! out to the browsers watching the sale page.
//!
//! Reading order for newcomers: `ARCHITECTURE.md` (the map), `migrations/`,
//! [`keys`], [`lock`] with `lua/lock_*.lua`, [`queue`] with
//! `lua/queue_*.lua`, [`store`], [`purchase`] with
//! `lua/purchase_commit.lua`, [`worker`], [`payment`] with
//! `lua/unit_return.lua`, [`events`], then the storefront (`seckill-web`).
//!
//! This crate is the bottom of the workspace: no HTTP, no tools. The
//! storefront (`seckill-web`), the dev environment (`seckill-devenv`) and
//! the tools (`seckill-tools`) stand on it.

// The layers inside the crate, bottom up (ARCHITECTURE.md draws them;
// tests/it/layers.rs keeps every `use crate::` pointing down):
// 0: the vocabulary and the knobs, no I/O of their own but probes.
pub(crate) mod backoff;
pub mod config;
pub mod domain;
pub mod failure;
pub mod keys;
pub mod map_memory;
pub mod metrics;
pub mod probe;

pub mod redis_pool;
pub mod replicas;
pub(crate) mod scripts;

pub mod urls;
// 1: the article's two tools, fixed.
pub mod lock;
pub mod queue;
pub mod ratelimit;
// 2: the one owner of each table.
pub mod store;
// 3: the use cases.
pub mod events;
pub mod payment;
pub mod purchase;
pub mod scoreboard;
pub mod strategy;
pub mod tally;
pub mod waiting_room;
pub mod worker;
