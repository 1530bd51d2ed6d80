//! The CPU clocks of the four processes a sale runs on, read together:
//! an instance, Redis, PostgreSQL and the worker. The capacity rows
//! (`capacity.rs`) read them before and after runs of a known number of
//! requests, and divide.
//!
//! - **an instance and the worker**: `/proc/<pid>/stat`, `utime` +
//!   `stime`, every thread of the process, in steps of 10 ms;
//! - **Redis**: its own clock, `INFO cpu` (`used_cpu_user` +
//!   `used_cpu_sys`, the server process and its threads, in µs), so that
//!   it need not run on this machine;
//! - **PostgreSQL**, many processes (a backend per connection, the WAL
//!   writer, the checkpointer...): the sum over every process whose
//!   `comm` is `postgres`, except the backends that `pg_stat_activity`
//!   shows serving another database. The server's own background
//!   processes are counted whole, though other databases' writes keep
//!   them busy too: run alone on the server, they are the sale's. A
//!   backend that ended between two readings is lost with its time; the
//!   instances and the worker keep theirs open.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use sqlx::PgPool;

use seckill_core::redis_pool::RedisConn;

use super::redis_info::info_field;
use seckill_devenv::processes::{Fleet, ProcessCpu};

/// The processes, in the order the rows show them.
pub(super) const PROCESSES: [&str; 4] = ["instance", "Redis", "PostgreSQL", "worker"];

/// One reading of every clock.
pub(super) struct Reading {
    /// The instance's, Redis' and the worker's CPU time so far, in
    /// [`PROCESSES`]' order (PostgreSQL's place left at zero).
    single: [Duration; 4],
    /// Each PostgreSQL process counted, by pid and start.
    postgres: HashMap<(i32, u64), Duration>,
}

/// The processes of one deployment: an app instance and a worker of
/// `fleet`, by name, and the servers behind them.
pub(super) struct Clocks<'a> {
    pub(super) fleet: &'a Fleet,
    pub(super) instance: &'a str,
    pub(super) worker: &'a str,
    pub(super) redis: &'a mut RedisConn,
    pub(super) pg: &'a PgPool,
}

impl Clocks<'_> {
    pub(super) async fn read(&mut self) -> anyhow::Result<Reading> {
        let redis = redis_cpu(self.redis).await?;
        let postgres = postgres_cpu(self.pg).await?;
        Ok(Reading {
            single: [
                self.fleet.cpu_time(self.instance)?,
                redis,
                Duration::ZERO,
                self.fleet.cpu_time(self.worker)?,
            ],
            postgres,
        })
    }
}

impl Reading {
    /// The CPU time each process used from `earlier` to this reading, in
    /// [`PROCESSES`]' order. A PostgreSQL process that started between
    /// the two counts whole.
    pub(super) fn since(&self, earlier: &Reading) -> [Duration; 4] {
        let mut used: [Duration; 4] =
            std::array::from_fn(|i| self.single[i].saturating_sub(earlier.single[i]));
        used[2] = self
            .postgres
            .iter()
            .map(|(process, now)| {
                let before = earlier.postgres.get(process).copied().unwrap_or_default();
                now.saturating_sub(before)
            })
            .sum();
        used
    }
}

/// Redis' CPU time so far, by its own count (`INFO cpu`).
async fn redis_cpu(redis: &mut RedisConn) -> anyhow::Result<Duration> {
    let user: f64 = info_field(redis, "cpu", "used_cpu_user").await?;
    let sys: f64 = info_field(redis, "cpu", "used_cpu_sys").await?;
    Ok(Duration::from_secs_f64(user + sys))
}

/// The CPU time so far of every process of this machine named
/// `postgres`, but the backends of other databases. PostgreSQL on
/// another machine is not seen: its figures would read zero, and
/// [`postgres_is_here`] says so first.
async fn postgres_cpu(pg: &PgPool) -> anyhow::Result<HashMap<(i32, u64), Duration>> {
    // Another database's backends, and autovacuum workers: theirs are the
    // other databases' costs, not this sale's.
    let others: Vec<i32> = sqlx::query_scalar(
        "SELECT pid FROM pg_stat_activity WHERE datname IS NOT NULL AND datname <> current_database()",
    )
    .fetch_all(pg)
    .await
    .context("reading pg_stat_activity")?;
    let mut counted = HashMap::new();
    for entry in std::fs::read_dir("/proc").context("listing /proc")? {
        let Some(pid) = entry?
            .file_name()
            .to_str()
            .and_then(|name| name.parse::<i32>().ok())
        else {
            continue;
        };
        // A process that ended since the listing is simply not counted.
        let Ok(process) = ProcessCpu::read(pid) else {
            continue;
        };
        if process.comm == "postgres" && !others.contains(&pid) {
            counted.insert((pid, process.started), process.cpu);
        }
    }
    Ok(counted)
}

/// Whether PostgreSQL runs on this machine: one of its processes holds
/// the bench's own connection (`pg_backend_pid()`).
pub(super) async fn postgres_is_here(pg: &PgPool) -> anyhow::Result<bool> {
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(pg)
        .await
        .context("asking PostgreSQL for its pid")?;
    Ok(ProcessCpu::read(pid).is_ok_and(|process| process.comm == "postgres"))
}
