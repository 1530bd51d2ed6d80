//! What a bench killed outright leaves behind, and who takes it away.
//!
//! A bench works in a database and under a key prefix of its own, named
//! after its run (`bench.rs`: `RUN`), and drops them when it ends, failed
//! or interrupted. A bench killed outright (`kill -9`, the OOM killer, a
//! container stopped) never runs that clean-up: its `seckill_bench_<run>`
//! database (and `seckill_bench_index_<run>`) and its keys under
//! `<prefix>:bench-<run>` stayed on the user's servers for good. (Its
//! instances and worker stop by themselves: they watch their parent.)
//!
//! So every bench holds, for as long as it lives, a PostgreSQL advisory
//! lock named after its run, on a session of its own to the server's
//! `postgres` database. PostgreSQL lets go of a session's lock when the
//! session ends, however its process ended. The next bench looks at every
//! bench database on the server: one whose run's lock it can take belongs
//! to a bench that is gone, and it drops that database and the run's keys,
//! whatever the prefix they are under (`*:bench-<run>:*`: a run's name is
//! its own, a pid and eight random hex digits).
//!
//! The race this prevents: judged by its pid alone, a run looks gone from
//! another container (each has its pid 1) or after its pid was reused,
//! and a live bench's database would be dropped under it. The lock is
//! held by the live process itself. A database still in use is never
//! forced: the drop waits a few seconds for the dead bench's instances
//! to go, then leaves it (a bench of a build without this lock).

use std::time::Duration;

use seckill_devenv::services::{ServerSession, Services};

/// The names of a run's databases start with one of these.
const DATABASE_PREFIXES: [&str; 2] = ["seckill_bench_index_", "seckill_bench_"];
/// How long a dead run's database may still be in use (its instances
/// noticing their parent is gone) before it is left for the next bench.
const STILL_IN_USE: Duration = Duration::from_secs(10);
/// The class of a run's advisory lock (the two-key form), so that no other
/// use of advisory locks on the server can collide with it.
pub const LOCK_CLASS: i32 = 0x5ec_b3c;

/// This run's hold on its leftovers: while it is alive, no other bench
/// takes them. Dropped, the session ends and the lock goes with it.
pub(super) struct Held {
    _session: ServerSession,
}

/// The run a bench database belongs to, from its name.
fn run_of(database: &str) -> Option<&str> {
    DATABASE_PREFIXES
        .iter()
        .find_map(|prefix| database.strip_prefix(prefix))
}

/// Take `run`'s lock, and then sweep what dead runs left: their databases
/// on the server of `services`, their keys on its Redis. A sweep that
/// fails is said and does not stop the bench; not holding the lock does.
pub(super) async fn hold_and_sweep(services: &Services, run: &str) -> anyhow::Result<Held> {
    let mut session = ServerSession::open(&services.database_url).await?;
    let held = session.try_lock(LOCK_CLASS, run).await?;
    anyhow::ensure!(held, "another bench holds the lock of this run ({run})");
    if let Err(error) = sweep(&mut session, services, run).await {
        eprintln!("bench: what earlier benches left was not all taken away: {error:#}");
    }
    Ok(Held { _session: session })
}

/// Drop the databases and keys of every bench run but `ours` whose lock
/// is free.
async fn sweep(session: &mut ServerSession, services: &Services, ours: &str) -> anyhow::Result<()> {
    let databases = session.databases_starting("seckill_bench_").await?;
    let mut runs: Vec<&str> = databases.iter().filter_map(|name| run_of(name)).collect();
    runs.sort_unstable();
    runs.dedup();
    // Alive: its bench holds the lock. Dead: ours now, until the sweep of
    // it is over, so that two benches starting at once do not sweep the
    // same run.
    let mut dead = Vec::new();
    for run in runs.into_iter().filter(|run| *run != ours) {
        if session.try_lock(LOCK_CLASS, run).await? {
            dead.push(run);
        }
    }
    if dead.is_empty() {
        return Ok(());
    }
    let redis =
        seckill_core::redis_pool::connect_redis(&services.redis, Duration::from_secs(5)).await;
    let mut failed = Vec::new();
    for run in dead {
        // The databases first: dropped once no session uses them, so the
        // dead bench's instances are gone and write no key after the keys
        // are deleted. Not without Redis: a run is found by its databases,
        // and keys left behind a dropped one would be found by no later
        // bench.
        let swept = async {
            let redis = redis
                .as_ref()
                .map_err(|error| anyhow::anyhow!("Redis: {error:#}"))?;
            for database in databases.iter().filter(|name| run_of(name) == Some(run)) {
                session.drop_unused(database, STILL_IN_USE).await?;
            }
            let run_glob = seckill_core::keys::glob_literal(run);
            redis
                .delete_matching(&format!("*:bench-{run_glob}:*"))
                .await
        }
        .await;
        session.unlock(LOCK_CLASS, run).await?;
        // One run that cannot be swept does not keep the others.
        match swept {
            Ok(()) => eprintln!("bench: took away what a bench killed outright left (run {run})"),
            Err(error) => failed.push(format!("run {run}: {error:#}")),
        }
    }
    anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
    Ok(())
}
