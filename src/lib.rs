//! seckill: a flash sale that never oversells.
//!
//! A purchase request reaches the web layer ([`web`]), which asks the
//! purchase path ([`purchase`]) whether the buyer gets a unit. The purchase
//! path decides under the sale's Redis lock ([`lock`]), takes the unit in
//! Redis and puts the order on the sale's Redis task queue ([`queue`]). The
//! worker ([`worker`]) drains the queue into PostgreSQL, whose constraints
//! (see `migrations/`) have the last word.
//!
//! A confirmed order must then be paid within a window ([`payment`]): the
//! worker queues a delayed deadline job per order, and cancels the orders
//! still unpaid when it comes due, giving their units back. Every change of
//! a sale's units left is published on Redis pub/sub, and [`events`] fans it
//! out to the browsers watching the sale page.
//!
//! Reading order for newcomers: `migrations/`, [`keys`], [`lock`] with
//! `src/lua/lock_*.lua`, [`queue`] with `src/lua/queue_*.lua`, [`purchase`]
//! with `src/lua/purchase_commit.lua`, [`worker`], [`payment`] with
//! `src/lua/unit_return.lua`, [`events`], then [`web`] and [`startup`].
//! [`demo`] runs the load test (the `loadtest/` crate) against app instances
//! it starts.

pub mod catalog;
pub mod config;
pub mod demo;
pub mod domain;
pub mod events;
pub mod keys;
pub mod lock;
pub mod payment;
pub mod purchase;
pub mod queue;
pub mod services;
pub mod startup;
pub mod telemetry;
pub mod web;
pub mod worker;
