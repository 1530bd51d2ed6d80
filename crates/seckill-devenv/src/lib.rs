//! seckill's dev environment: what a newcomer, a test or a tool needs
//! around the app, and the app itself never does.
//!
//! - [`services`]: find Redis and PostgreSQL on their usual ports, or start
//!   private ones from the installed binaries (one Redis, a Redis Cluster,
//!   PostgreSQL), each stopped when its owner is dropped or dies.
//! - [`monitor`]: the lines of Redis' `MONITOR` feed, read back into
//!   commands (the lab's lock watch and the tests read the feed).
//! - [`processes`]: start, signal, kill and stop `seckill` processes by
//!   name, the way an operator would run a deployment.
//! - [`running`]: the `seckill` servers running on this machine on one
//!   database and prefix (`seckill reset` refuses while one runs).

pub mod monitor;
pub mod processes;
pub mod running;
pub mod services;
