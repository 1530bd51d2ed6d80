//! A CPU of its own for a private Redis while a row times its commands
//! (`room-scripts`).
//!
//! Redis' slow log times a command from its start to its end, on the
//! wall clock. On a machine of two cores, the bench's threads (the
//! buyers' visits, 128 in flight) run beside Redis, and one that takes
//! Redis' core for a slice of the scheduler holds whatever command Redis
//! was running for as long: a `ZADD` that takes microseconds was logged at
//! 3 to 12 ms that way (docs/bench.md). A production Redis runs on a core
//! of its own; so does the bench's, while the row runs: Redis' threads on
//! the last CPU this process may use, this process' threads on the others,
//! and ours put back as they were when the [`OwnCore`] is dropped.
//!
//! Linux only (`sched_setaffinity`), as the bench's private servers are.

use anyhow::Context;
use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// Redis' threads on one CPU, this process' on the others, until dropped.
pub(super) struct OwnCore {
    /// The CPUs this process could run on before.
    ours: CpuSet,
    /// The one CPU Redis runs on.
    redis: usize,
    /// How many CPUs this process keeps.
    kept: usize,
}

impl OwnCore {
    /// Give the Redis server `redis` the last CPU this process may run
    /// on, and this process the others. `None` when this process may run
    /// on one CPU only (there is no other to give), or may not move
    /// threads: then nothing moved.
    pub(super) fn give(redis: Pid) -> anyhow::Result<Option<Self>> {
        let ours = sched_getaffinity(Pid::from_raw(0)).context("reading this process' CPUs")?;
        let cpus: Vec<usize> = (0..CpuSet::count())
            .filter(|&cpu| ours.is_set(cpu).unwrap_or(false))
            .collect();
        let Some((&last, others)) = cpus.split_last() else {
            return Ok(None);
        };
        if others.is_empty() {
            return Ok(None);
        }
        let mut alone = CpuSet::new();
        alone.set(last)?;
        let mut rest = CpuSet::new();
        for &cpu in others {
            rest.set(cpu)?;
        }
        // Ours first: once the guard exists, dropping it puts ours back,
        // whatever fails after.
        let pinned = Self {
            ours,
            redis: last,
            kept: others.len(),
        };
        let pinning = pin_threads("self", &rest)
            .context("moving the bench's threads off Redis' CPU")
            .and_then(|()| {
                pin_threads(&redis.to_string(), &alone).context("giving Redis a CPU of its own")
            });
        match pinning {
            Ok(()) => Ok(Some(pinned)),
            // Not allowed here (a container may forbid it): the row runs
            // shared, and its line says so.
            Err(error) => {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "running the row with Redis sharing the bench's CPUs"
                );
                Ok(None)
            }
        }
    }

    /// Where the row ran, for its line.
    pub(super) fn shown(this: Option<&Self>) -> String {
        match this {
            Some(pinned) => format!(
                "a private Redis alone on CPU {}, the bench on the other {}",
                pinned.redis, pinned.kept
            ),
            None => "a private Redis sharing the bench's CPUs".to_owned(),
        }
    }
}

impl Drop for OwnCore {
    fn drop(&mut self) {
        if let Err(error) = pin_threads("self", &self.ours) {
            tracing::warn!(%error, "putting the bench's threads back on all their CPUs");
        }
    }
}

/// Every thread of the process `pid` (or `self`) on `cpus`.
///
/// The race: a thread can start while the list is read. One started by a
/// thread already moved runs where its parent does (Linux copies a
/// thread's CPUs to the threads it starts); one started by a thread not
/// yet moved may be missed. So the list is read again until a pass moves
/// no thread it had not moved before. A thread that ended meanwhile
/// (`ESRCH`) is no longer in anyone's way.
fn pin_threads(pid: &str, cpus: &CpuSet) -> anyhow::Result<()> {
    let mut moved = std::collections::HashSet::new();
    loop {
        let mut new = 0;
        let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
            .with_context(|| format!("listing the threads of {pid}"))?;
        for task in tasks {
            let name = task?.file_name();
            let Some(tid) = name.to_str().and_then(|tid| tid.parse::<i32>().ok()) else {
                continue;
            };
            if !moved.insert(tid) {
                continue;
            }
            new += 1;
            match sched_setaffinity(Pid::from_raw(tid), cpus) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(error) => return Err(error).with_context(|| format!("moving thread {tid}")),
            }
        }
        if new == 0 {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the kernel lets `pid` (or `self`) run on, as
    /// `/proc/<pid>/status` says them (`0-1`, `1`...).
    fn allowed(pid: &str) -> String {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))
            .unwrap()
            .trim()
            .to_owned()
    }

    /// A process given a CPU of its own runs there alone, every thread of
    /// this one runs elsewhere (one started after too), and all of this
    /// process' threads are back where they were once the guard drops.
    #[test]
    fn a_process_given_a_cpu_runs_there_alone_until_the_guard_drops() {
        let before = allowed("self");
        let child = Sleeper(
            std::process::Command::new("sleep")
                .arg("30")
                .spawn()
                .unwrap(),
        );
        let child = &child.0;
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        let pinned = OwnCore::give(pid).unwrap();
        let Some(pinned) = pinned else {
            // One CPU, or no leave to move threads: nothing moved.
            assert_eq!(allowed(&child.id().to_string()), before);
            return;
        };
        let redis = pinned.redis.to_string();
        assert_eq!(allowed(&child.id().to_string()), redis);
        let later = std::thread::spawn(|| allowed("thread-self"))
            .join()
            .unwrap();
        for ours in [allowed("self"), later] {
            assert!(!ours.split([',', '-']).any(|cpu| cpu == redis), "{ours}");
        }
        drop(pinned);
        let tasks: Vec<String> = std::fs::read_dir("/proc/self/task")
            .unwrap()
            .map(|task| format!("self/task/{}", task.unwrap().file_name().to_string_lossy()))
            .collect();
        for task in tasks {
            assert_eq!(allowed(&task), before, "{task}");
        }
    }

    /// A process that stands for Redis, killed and reaped when dropped,
    /// whatever failed.
    struct Sleeper(std::process::Child);

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
