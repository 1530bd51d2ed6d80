//! A bench's leftovers: what a bench killed outright leaves behind (its
//! `seckill_bench_<run>` database, `seckill_bench_index_<run>`, and its
//! keys under `<prefix>:bench-<run>`), and the next bench takes away
//! (`seckill-devenv`'s `services/leftovers.rs` says how: a lock per run,
//! held by the live bench). Its instances and worker stop by themselves:
//! they watch their parent.

use seckill_devenv::services::{Held, Leftovers, Services};

/// The class of a run's advisory lock (the two-key form), so that no other
/// use of advisory locks on the server can collide with it.
pub const LOCK_CLASS: i32 = 0x5ec_b3c;

/// A bench's databases and keys: `seckill_bench_<run>` and
/// `seckill_bench_index_<run>`, keys under `<prefix>:bench-<run>`.
const BENCH: Leftovers = Leftovers {
    what: "bench",
    lock_class: LOCK_CLASS,
    databases: "seckill_bench_",
    run_of,
    // Whatever the prefix they are under: a run's name is its own, a pid
    // and eight random hex digits.
    keys_of: |run| format!("*:bench-{}:*", seckill_core::keys::glob_literal(run)),
};

/// The names of a run's databases start with one of these.
const DATABASE_PREFIXES: [&str; 2] = ["seckill_bench_index_", "seckill_bench_"];

/// The run a bench database belongs to, from its name.
fn run_of(database: &str) -> Option<&str> {
    DATABASE_PREFIXES
        .iter()
        .find_map(|prefix| database.strip_prefix(prefix))
}

/// Take `run`'s lock, and then sweep what dead runs left: their databases
/// on the server of `services`, their keys on its Redis
/// ([`Leftovers::hold_and_sweep`]).
pub(super) async fn hold_and_sweep(services: &Services, run: &str) -> anyhow::Result<Held> {
    BENCH
        .hold_and_sweep(&services.database_url, &services.redis, run)
        .await
}
