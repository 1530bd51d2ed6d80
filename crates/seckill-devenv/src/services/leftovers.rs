//! What a process killed outright leaves on the user's servers, and who
//! takes it away.
//!
//! A bench, and a run of the tests, work in databases and under key
//! prefixes of their own, named after their run, and drop them when they
//! end. One killed outright (`kill -9`, the OOM killer, a container
//! stopped, Ctrl-C on `cargo test`, which has no handler) never runs that
//! clean-up: its databases and keys stayed on the user's servers for good.
//!
//! So each such process holds, for as long as it lives, a PostgreSQL
//! advisory lock named after its run, on a session of its own to the
//! server's `postgres` database. PostgreSQL lets go of a session's lock
//! when the session ends, however its process ended. The next one of its
//! kind looks at every database of that kind on the server: one whose
//! run's lock it can take belongs to a process that is gone, and it drops
//! that database and the run's keys.
//!
//! The race this prevents: judged by its pid alone, a run looks gone from
//! another container (each has its pid 1) or after its pid was reused,
//! and a live run's database would be dropped under it. The lock is held
//! by the live process itself. A database still in use is never forced:
//! the drop waits a few seconds for the dead run's processes to go, then
//! leaves it for the next sweep.

use std::time::Duration;

use seckill_core::redis_pool::{RedisAt, connect_redis};

use super::postgres_server::ServerSession;

/// How long a dead run's database may still be in use (its processes
/// noticing their parent is gone) before it is left for the next sweep.
const STILL_IN_USE: Duration = Duration::from_secs(10);

/// One kind of run whose leftovers are swept: what its databases and
/// keys are called.
#[derive(Debug, Clone, Copy)]
pub struct Leftovers {
    /// What leaves them, for the messages ("bench", "test run").
    pub what: &'static str,
    /// The class of a run's advisory lock (the two-key form), so that no
    /// other use of advisory locks on the server can collide with it.
    pub lock_class: i32,
    /// Every database of the kind starts with this.
    pub databases: &'static str,
    /// The run a database of the kind belongs to, from its name; `None`
    /// for one that is not of the kind (left alone).
    pub run_of: fn(&str) -> Option<&str>,
    /// The glob of a run's keys, given the run.
    pub keys_of: fn(&str) -> String,
}

/// A run's hold on its leftovers: while it is alive, no sweep takes them.
/// Dropped, the session ends and the lock goes with it.
pub struct Held {
    _session: ServerSession,
}

impl Leftovers {
    /// Take `run`'s lock on the server of `database_url`, then sweep what
    /// dead runs of the kind left there and on `redis`. A sweep that fails
    /// is said and stops nothing; not holding the lock is an error.
    pub async fn hold_and_sweep(
        &self,
        database_url: &str,
        redis: &RedisAt,
        run: &str,
    ) -> anyhow::Result<Held> {
        let mut session = ServerSession::open(database_url).await?;
        let held = session.try_lock(self.lock_class, run).await?;
        anyhow::ensure!(
            held,
            "another {} holds the lock of its run ({run})",
            self.what
        );
        if let Err(error) = self.sweep(&mut session, redis, run).await {
            eprintln!(
                "{}: what earlier runs left was not all taken away: {error:#}",
                self.what
            );
        }
        Ok(Held { _session: session })
    }

    /// Drop the databases and keys of every run but `ours` whose lock is
    /// free.
    async fn sweep(
        &self,
        session: &mut ServerSession,
        redis: &RedisAt,
        ours: &str,
    ) -> anyhow::Result<()> {
        let databases = session.databases_starting(self.databases).await?;
        let mut runs: Vec<&str> = databases
            .iter()
            .filter_map(|name| (self.run_of)(name))
            .collect();
        runs.sort_unstable();
        runs.dedup();
        // Alive: its process holds the lock. Dead: ours now, until the
        // sweep of it is over, so that two sweeps at once do not take the
        // same run.
        let mut dead = Vec::new();
        for run in runs.into_iter().filter(|run| *run != ours) {
            if session.try_lock(self.lock_class, run).await? {
                dead.push(run);
            }
        }
        if dead.is_empty() {
            return Ok(());
        }
        let redis = connect_redis(redis, Duration::from_secs(5)).await;
        let mut failed = Vec::new();
        for run in dead {
            // The databases first: dropped once no session uses them, so
            // the dead run's processes are gone and write no key after the
            // keys are deleted. Not without Redis: a run is found by its
            // databases, and keys left behind a dropped one would be found
            // by no later sweep.
            let swept = async {
                let redis = redis
                    .as_ref()
                    .map_err(|error| anyhow::anyhow!("Redis: {error:#}"))?;
                for database in databases
                    .iter()
                    .filter(|name| (self.run_of)(name) == Some(run))
                {
                    session.drop_unused(database, STILL_IN_USE).await?;
                }
                redis.delete_matching(&(self.keys_of)(run)).await
            }
            .await;
            session.unlock(self.lock_class, run).await?;
            // One run that cannot be swept does not keep the others.
            match swept {
                Ok(()) => eprintln!(
                    "{what}: took away what a {what} killed outright left (run {run})",
                    what = self.what
                ),
                Err(error) => failed.push(format!("run {run}: {error:#}")),
            }
        }
        anyhow::ensure!(failed.is_empty(), "{}", failed.join("; "));
        Ok(())
    }
}
