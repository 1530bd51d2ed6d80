//! seckill's tools: the commands that start a deployment of their own,
//! drive it and report on it. None of this runs in a server.
//!
//! - [`loadrun`]: the load test (the `seckill-loadtest` crate's generator and
//!   verifier) against app instances it starts, shared by the others;
//! - `demo`: the whole show, `lock` against `naive`, side by side; with
//!   `--waiting-room` (`demo/waiting_room.rs`), the crowd's table, then a sale with a
//!   lottery room for the audience to join;
//! - `lab`: every purchase strategy with the fault that breaks it, in one
//!   table;
//! - [`chaos`]: the promise under a schedule of faults;
//! - `bench`: the speed figures, each beside its baseline and target;
//! - `crowd`: people against bots, with a sale's waiting room off, `fifo`
//!   and `lottery`.
//!
//! Each tool keeps its own vocabulary (its options, its faults or knobs,
//! its SQL) in its own module. What they draw, they draw with the load
//! test's report module, as the load test's own report does: one terminal
//! table ([`Table`](seckill_loadtest::report::Table)) and one set of charts
//! ([`charts`](seckill_loadtest::report::charts)). Their HTML pages are
//! askama templates (`templates/`), which escape what they show.
//!
//! Only what the `seckill` package uses is public: [`Tool`], [`chaos::chaos`]
//! (for `seckill-loadtest --faults`), and from [`loadrun`] the
//! `seckill-loadtest` command line and the Redis keys its verifier reads.

mod bench;
/// The class of a bench run's advisory lock, which keeps its database and
/// keys from the next bench's sweep while it lives (`bench/leftovers.rs`).
pub use bench::leftovers::LOCK_CLASS as BENCH_RUN_LOCK_CLASS;
pub mod chaos;
mod crowd;
mod demo;
mod lab;
pub mod loadrun;
mod room_client;

use std::process::ExitCode;

use clap::Subcommand;
use seckill_cli::ServiceArgs;
use seckill_devenv::services::{PrivateServers, Services};

use crate::bench::{BenchArgs, HoldPagesArgs};
use crate::chaos::ChaosArgs;
use crate::crowd::CrowdArgs;
use crate::demo::DemoArgs;
use crate::lab::LabArgs;

/// The tools' subcommands of `seckill`.
#[derive(Debug, Subcommand)]
pub enum Tool {
    /// The whole show: start two app instances and a worker, let 10,000 buyers
    /// race for 10 units, verify, report; then again with the deliberately
    /// broken `naive` strategy, side by side.
    Demo(DemoArgs),
    /// The promise under a schedule of faults: a private deployment (durable
    /// Redis, PostgreSQL, 2 app instances, 2 workers), steady purchases, and
    /// one fault after another (workers and an instance killed, a lock
    /// holder paused, PostgreSQL down, Redis killed and wiped, a hostile
    /// flood); then every promise checked, per fault and overall.
    Chaos(ChaosArgs),
    /// The concurrency lab: every purchase strategy, each with the fault knob
    /// that exposes its bug (and once without), raced by the same burst and
    /// measured in one table (also JSON and HTML). Exit 0 when every row
    /// shows what it must: the broken ones break as documented, the correct
    /// ones hold.
    Lab(LabArgs),
    /// Speed, each figure beside its target: the burst, accepted purchases
    /// per second (lock, lua, a cluster), the worker's drain against
    /// PostgreSQL's own bulk insert, an idle worker's delay, sold-out answers
    /// and the index under wrk, open sale pages. Starts its own instances and
    /// sales, in a database and key prefix of its own.
    Bench(BenchArgs),
    /// Who gets the units? People arriving around the open against bots that
    /// are there first and ask ten times a second, with the waiting room off,
    /// fifo and lottery, on the same sale settings: units won by each against
    /// their share of the buyers, admission order, the estimated wait's error,
    /// what the bots were told. Exit 0 when every run kept the promise.
    Crowd(CrowdArgs),
    /// The bench's own helper: hold sale pages' event streams open in a
    /// process of their own (past the bench's open-files limit) until
    /// standard input ends. Not for users.
    #[command(hide = true)]
    HoldPages(HoldPagesArgs),
}

impl Tool {
    /// Run the tool, on the servers `services` names (or its own: chaos
    /// starts servers it may kill and wipe, the bench works in a database
    /// of its own). The exit code: 0 when the tool's promise held, 1 when
    /// it broke, 2 when the run could not be trusted or could not run.
    pub async fn run(self, services: &ServiceArgs, prefix: &str) -> ExitCode {
        match self.run_inner(services, prefix).await {
            Ok(code) => code,
            Err(error) => {
                eprintln!("seckill: {error:#}");
                ExitCode::from(2)
            }
        }
    }

    async fn run_inner(self, given: &ServiceArgs, prefix: &str) -> anyhow::Result<ExitCode> {
        Ok(match self {
            Tool::Chaos(args) => {
                if given.redis_url.is_some()
                    || given.redis_cluster_nodes.is_some()
                    || given.database_url.is_some()
                {
                    eprintln!(
                        "seckill chaos: the Redis and PostgreSQL given (flags or SECKILL_* variables) \
                         are not used: chaos starts servers of its own, which it kills and wipes"
                    );
                }
                let args = args.with_durability(given);
                ExitCode::from(chaos::chaos(args).await?.exit_code())
            }
            // The bench's helper talks to an instance only.
            Tool::HoldPages(args) => {
                bench::hold_pages(args).await?;
                ExitCode::SUCCESS
            }
            Tool::Demo(args) => {
                let services = servers(given, Database::Named).await?;
                ExitCode::from(demo::demo(args, &services, prefix).await?.exit_code())
            }
            // 0 when every row showed what it must, 1 when one did not.
            Tool::Lab(args) => {
                let services = servers(given, Database::Named).await?;
                if lab::lab(args, &services, prefix).await? {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Tool::Bench(args) => {
                let services = servers(given, Database::OfItsOwn).await?;
                bench::bench(args, &services, prefix).await?;
                ExitCode::SUCCESS
            }
            Tool::Crowd(args) => {
                let services = servers(given, Database::Named).await?;
                if crowd::crowd(args, &services, prefix).await? {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
        })
    }
}

/// Which database a tool works in.
enum Database {
    /// The one named (or found, or started), created if missing.
    Named,
    /// Databases the tool creates and drops itself (the bench): the server
    /// only is found.
    OfItsOwn,
}

/// The servers a tool runs on, said in the log. Private servers live as
/// long as the command: each tool starts its own instances on them and
/// stops them before it ends.
async fn servers(given: &ServiceArgs, database: Database) -> anyhow::Result<Services> {
    let (redis, url) = (given.redis()?, given.database_url.as_deref());
    let services = match database {
        Database::Named => Services::resolve(redis, url, PrivateServers::Allowed).await?,
        Database::OfItsOwn => Services::find(redis, url, PrivateServers::Allowed).await?,
    };
    services.log();
    Ok(services)
}
