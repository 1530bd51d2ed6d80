//! A CPU kept for a private Redis while a row times its commands
//! (`room-scripts`).
//!
//! Redis' slow log times a command from its start to its end, on the
//! wall clock. On a machine of few CPUs the bench's own threads (the
//! buyers' visits) run beside Redis, and one that takes Redis' CPU for a
//! slice of the scheduler holds whatever command Redis was running for as
//! long: the slow log then times the bench, not the room (docs/bench.md,
//! "A Redis with a CPU of its own"). So, while the row runs, Redis'
//! threads run on the last CPU the bench's process may use, and the
//! bench's threads on the others, and so do every other process' threads
//! that may move (`shield.rs`), all put back as they were by
//! [`OwnCore::restore`]. The kernel's threads bound to each CPU still run
//! there.
//!
//! Linux only (`sched_setaffinity`); elsewhere the row runs shared, and
//! says so.

use nix::unistd::Pid;

/// Where a row's private Redis runs.
pub(super) enum Placement {
    /// On a CPU the bench's threads and the other processes' are kept
    /// off, until restored.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    Pinned(Box<OwnCore>),
    /// Beside the bench's threads, for the reason given.
    Shared(&'static str),
}

impl Placement {
    /// Where the row ran, for its lines.
    pub(super) fn shown(&self) -> String {
        match self {
            Self::Pinned(pinned) => pinned.shown(),
            Self::Shared(why) => format!("a private Redis sharing the bench's CPUs: {why}"),
        }
    }

    /// Put the threads moved back on all their CPUs, if any were.
    pub(super) fn restore(self) -> anyhow::Result<()> {
        match self {
            Self::Pinned(pinned) => pinned.restore(),
            Self::Shared(_) => Ok(()),
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(super) use elsewhere::*;
#[cfg(target_os = "linux")]
pub(super) use linux::*;

#[cfg(not(target_os = "linux"))]
mod elsewhere {
    use super::{Pid, Placement};

    /// Nothing to restore: nothing moves off Linux.
    pub(in crate::bench) struct OwnCore;

    impl OwnCore {
        /// Off Linux no thread is moved: the row runs shared.
        pub(in crate::bench) fn give(_redis: Pid) -> anyhow::Result<Placement> {
            Ok(Placement::Shared("threads are pinned on Linux only"))
        }

        pub(super) fn shown(&self) -> String {
            String::new()
        }

        pub(super) fn restore(self) -> anyhow::Result<()> {
            Ok(())
        }
    }
}

#[cfg(target_os = "linux")]
mod linux {
    use anyhow::Context;
    use nix::errno::Errno;
    use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};

    use super::{Pid, Placement};
    use crate::bench::shield::Others;

    /// Redis' threads on one CPU, the bench's and the other processes' on
    /// the others, until [`OwnCore::restore`] (or, should the row fail or
    /// be stopped, the drop) puts them back.
    pub(in crate::bench) struct OwnCore {
        /// The CPUs the bench's process could run on before.
        ours: CpuSet,
        /// The one CPU Redis runs on.
        redis: usize,
        /// The CPUs the bench's threads run on meanwhile.
        kept: Vec<usize>,
        /// The other processes' threads moved off Redis' CPU.
        others: Option<Others>,
        /// Put back already.
        restored: bool,
    }

    impl OwnCore {
        /// Give the Redis server `redis` the last CPU the bench's process
        /// may run on, and the bench's threads and every other process'
        /// that may move the others (`shield.rs`). Shared, and
        /// nothing moved, when the process may run on one CPU only, or
        /// the system does not let it read or move threads' CPUs
        /// (a sandbox's `EPERM`, a machine past the 1,024 CPUs a set
        /// holds); any other failure is an error, with the threads moved
        /// put back first.
        pub(in crate::bench) fn give(redis: Pid) -> anyhow::Result<Placement> {
            let ours = match sched_getaffinity(Pid::from_raw(0)) {
                Ok(ours) => ours,
                Err(Errno::EPERM | Errno::EINVAL | Errno::ENOSYS) => {
                    return Ok(Placement::Shared(
                        "this system does not tell a thread's CPUs",
                    ));
                }
                Err(error) => return Err(error).context("reading the bench's CPUs"),
            };
            let cpus: Vec<usize> = (0..CpuSet::count())
                .filter(|&cpu| ours.is_set(cpu).unwrap_or(false))
                .collect();
            let Some((&last, kept)) = cpus.split_last().filter(|(_, kept)| !kept.is_empty()) else {
                return Ok(Placement::Shared("the bench may run on one CPU only"));
            };
            let mut alone = CpuSet::new();
            alone.set(last)?;
            let mut rest = CpuSet::new();
            for &cpu in kept {
                rest.set(cpu)?;
            }
            // The guard first: from here on, a failure puts the bench's
            // threads back (the drop), whatever moved.
            let mut pinned = Self {
                ours,
                redis: last,
                kept: kept.to_vec(),
                others: None,
                restored: false,
            };
            let moved = pin_threads("self", &rest)
                .context("moving the bench's threads off Redis' CPU")
                .and_then(|()| {
                    pin_threads(&redis.to_string(), &alone).context("giving Redis a CPU")
                })
                .and_then(|()| {
                    Others::move_off(last, &rest, &[Pid::this(), redis], PASSES)
                        .context("moving other processes off Redis' CPU")
                });
            match moved {
                Ok(others) => {
                    pinned.others = Some(others);
                    Ok(Placement::Pinned(Box::new(pinned)))
                }
                Err(error) if not_allowed(&error) => {
                    pinned.restore()?;
                    Ok(Placement::Shared(
                        "this system does not let the bench move threads",
                    ))
                }
                Err(error) => {
                    pinned.restore()?;
                    Err(error)
                }
            }
        }

        pub(super) fn shown(&self) -> String {
            let kept: Vec<String> = self.kept.iter().map(usize::to_string).collect();
            let others = self.others.as_ref().map_or(String::new(), Others::shown);
            format!(
                "a private Redis on CPU {}, the bench's threads kept on CPU {}; {others}",
                self.redis,
                kept.join(", ")
            )
        }

        /// The other processes' threads, then the bench's, back on the
        /// CPUs they had.
        pub(super) fn restore(mut self) -> anyhow::Result<()> {
            self.restored = true;
            let others = self.others.as_mut().map_or(Ok(()), Others::restore);
            let ours = pin_threads("self", &self.ours).context("putting the bench's threads back");
            others.context("putting other processes back").and(ours)
        }
    }

    impl Drop for OwnCore {
        fn drop(&mut self) {
            if self.restored {
                return;
            }
            if let Err(error) = pin_threads("self", &self.ours) {
                tracing::warn!(
                    error = format!("{error:#}"),
                    "putting the bench's threads back on all their CPUs"
                );
            }
        }
    }

    /// Whether moving threads failed because the system does not allow it.
    fn not_allowed(error: &anyhow::Error) -> bool {
        matches!(
            error.root_cause().downcast_ref::<Errno>(),
            Some(Errno::EPERM | Errno::ENOSYS)
        )
    }

    /// Every thread of the process `pid` (or `self`) on `cpus`. Goes on past
    /// a thread it could not move (the others are moved all the same) and
    /// returns the first such failure.
    ///
    /// The race: a thread can start while the threads are listed. One
    /// started by a thread already moved runs where its parent does (a new
    /// thread gets its parent's CPUs); one started by a thread not yet
    /// moved keeps the old CPUs. So the threads are listed again until a
    /// pass finds every one on `cpus`. A thread whose start began before its
    /// parent was moved and shows in the list only after that last pass
    /// keeps the CPUs it had: it runs where it could before, no worse. A
    /// thread that ended meanwhile (`ESRCH`) is in nobody's way. At most
    /// [`PASSES`]: a kernel that keeps a thread's CPUs other than asked
    /// (a CPU taken away meanwhile) would otherwise be asked forever.
    fn pin_threads(pid: &str, cpus: &CpuSet) -> anyhow::Result<()> {
        let mut first_failure = None;
        for _ in 0..PASSES {
            let mut moved = 0;
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task"))
                .with_context(|| format!("listing the threads of {pid}"))?;
            for task in tasks {
                let name = task?.file_name();
                let Some(tid) = name.to_str().and_then(|tid| tid.parse::<i32>().ok()) else {
                    continue;
                };
                let tid = Pid::from_raw(tid);
                match sched_getaffinity(tid) {
                    Ok(now) if now == *cpus => continue,
                    Ok(_) => {}
                    Err(Errno::ESRCH) => continue,
                    Err(error) => {
                        first_failure.get_or_insert(anyhow::Error::new(error));
                        continue;
                    }
                }
                match sched_setaffinity(tid, cpus) {
                    Ok(()) => moved += 1,
                    Err(Errno::ESRCH) => {}
                    Err(error) => {
                        first_failure.get_or_insert(
                            anyhow::Error::new(error).context(format!("moving thread {tid}")),
                        );
                    }
                }
            }
            if moved == 0 {
                return first_failure.map_or(Ok(()), Err);
            }
        }
        Err(first_failure.unwrap_or_else(|| {
            anyhow::anyhow!("threads of {pid} still moving after {PASSES} passes")
        }))
    }

    /// How many times [`pin_threads`] lists the threads at most.
    const PASSES: usize = 10;
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::sync::Mutex;

    use super::*;

    /// The tests move this process' threads: one at a time.
    static MOVING: Mutex<()> = Mutex::new(());

    /// The lock that runs these tests one at a time, and this process'
    /// CPUs; `None`, nothing to test, on one CPU.
    fn alone_on_several_cpus() -> Option<(std::sync::MutexGuard<'static, ()>, Vec<usize>)> {
        let alone = MOVING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = allowed("self");
        (before.len() >= 2).then_some((alone, before))
    }

    /// The CPUs the kernel lets `task` (`self`, `self/task/<tid>`, a pid)
    /// run on, from `/proc/<task>/status`'s `Cpus_allowed_list` (`0-1`,
    /// `1`, `0,2-3`...).
    fn allowed(task: &str) -> Vec<usize> {
        allowed_if_running(task).unwrap_or_else(|| panic!("{task} is gone"))
    }

    /// [`allowed`], or `None` for a task that ended (its file is gone or
    /// unreadable).
    fn allowed_if_running(task: &str) -> Option<Vec<usize>> {
        let status = std::fs::read_to_string(format!("/proc/{task}/status")).ok()?;
        let list = status
            .lines()
            .find_map(|line| line.strip_prefix("Cpus_allowed_list:"))?
            .trim();
        Some(
            list.split(',')
                .flat_map(|range| {
                    let (from, to) = range.split_once('-').unwrap_or((range, range));
                    from.parse::<usize>().unwrap()..=to.parse::<usize>().unwrap()
                })
                .collect(),
        )
    }

    /// Every thread of the test's process, each with its CPUs. Other
    /// tests' threads run in the same process and may end while listed:
    /// those are left out.
    fn our_threads() -> Vec<(String, Vec<usize>)> {
        std::fs::read_dir("/proc/self/task")
            .unwrap()
            .map(|task| format!("self/task/{}", task.unwrap().file_name().to_string_lossy()))
            .filter_map(|task| {
                let cpus = allowed_if_running(&task)?;
                Some((task, cpus))
            })
            .collect()
    }

    /// A process given a CPU runs there alone of this process' threads
    /// and of other processes': every thread of this one runs elsewhere
    /// (one started after too), and so does another process, and the
    /// process it starts meanwhile; all are back where they were once
    /// restored.
    #[test]
    fn a_process_given_a_cpu_runs_there_without_other_threads_until_restored() {
        let _alone = MOVING
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = allowed("self");
        let child = Sleeper::start();
        // A shell that starts a process of its own once moved (not its
        // last command, so that the shell forks it rather than becoming it).
        let neighbour = Sleeper(
            std::process::Command::new("sh")
                .args(["-c", "sleep 0.5; sleep 30; true"])
                .spawn()
                .unwrap(),
        );
        let placement = OwnCore::give(child.pid()).unwrap();
        if before.len() < 2 {
            assert!(matches!(placement, Placement::Shared(_)));
            assert_eq!(allowed(&child.0.id().to_string()), before);
            return;
        }
        let Placement::Pinned(pinned) = placement else {
            panic!("not pinned on {} CPUs: {}", before.len(), placement.shown());
        };
        let redis = *before.last().unwrap();
        assert_eq!(allowed(&child.0.id().to_string()), vec![redis]);
        let later = std::thread::spawn(|| allowed("thread-self"))
            .join()
            .unwrap();
        assert!(!later.contains(&redis), "{later:?}");
        for (task, cpus) in our_threads() {
            assert!(!cpus.contains(&redis), "{task}: {cpus:?}");
        }
        let beside = allowed(&neighbour.0.id().to_string());
        assert!(!beside.contains(&redis), "{beside:?}: {}", pinned.shown());
        let started = child_of(neighbour.0.id(), "30");
        let meanwhile = allowed(&started.0.to_string());
        assert!(!meanwhile.contains(&redis), "{meanwhile:?}");
        pinned.restore().unwrap();
        for (task, cpus) in our_threads() {
            assert_eq!(cpus, before, "{task}");
        }
        assert_eq!(allowed(&neighbour.0.id().to_string()), before);
        assert_eq!(allowed(&started.0.to_string()), before);
    }

    /// A process that is not this one's child, killed when dropped.
    struct Killed(u32);

    impl Drop for Killed {
        fn drop(&mut self) {
            let pid = Pid::from_raw(i32::try_from(self.0).unwrap());
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
        }
    }

    /// The process `parent` starts with `argument` among its arguments,
    /// once it has (within 5 s).
    fn child_of(parent: u32, argument: &str) -> Killed {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            let found = std::fs::read_dir("/proc").unwrap().find_map(|entry| {
                let pid = entry.ok()?.file_name().to_str()?.parse::<u32>().ok()?;
                let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
                let ppid: u32 = stat
                    .rsplit_once(')')?
                    .1
                    .split_whitespace()
                    .nth(1)?
                    .parse()
                    .ok()?;
                let command = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).ok()?;
                let called = command.split('\0').any(|arg| arg == argument);
                (ppid == parent && called).then_some(pid)
            });
            if let Some(pid) = found {
                return Killed(pid);
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{parent} started nothing"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }

    /// Should the bench die before it puts the other processes back, its
    /// guard does.
    #[test]
    fn the_guard_puts_other_processes_back_when_the_bench_dies_first() {
        let Some((_alone, before)) = alone_on_several_cpus() else {
            return;
        };
        let other = Sleeper::start();
        let had = nix::sched::sched_getaffinity(other.pid()).unwrap();
        let mut first = nix::sched::CpuSet::new();
        first.set(before[0]).unwrap();
        nix::sched::sched_setaffinity(other.pid(), &first).unwrap();
        let mut bench = std::process::Command::new("sleep")
            .arg("1.5")
            .spawn()
            .unwrap();
        let moved = std::collections::HashMap::from([(other.pid(), had)]);
        let guard = crate::bench::shield::Guard::start(bench.id(), &moved).unwrap();
        // While the bench lives, the guard only waits.
        std::thread::sleep(std::time::Duration::from_millis(700));
        assert_eq!(allowed(&other.0.id().to_string()), vec![before[0]]);
        bench.wait().unwrap();
        // The guard looks once a second.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while allowed(&other.0.id().to_string()) != before {
            assert!(std::time::Instant::now() < deadline, "never put back");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Its work done, it ends and deletes its script.
        let script = guard.script().to_owned();
        guard.wait();
        assert!(!script.exists(), "{}", script.display());
    }

    /// A server that is gone by the time it is pinned fails the pinning,
    /// and the bench's threads, moved first, are back where they were.
    #[test]
    fn pinning_a_server_that_is_gone_fails_with_the_benchs_threads_put_back() {
        let Some((_alone, before)) = alone_on_several_cpus() else {
            return;
        };
        let mut gone = std::process::Command::new("true").spawn().unwrap();
        gone.wait().unwrap();
        let pid = Pid::from_raw(i32::try_from(gone.id()).unwrap());
        let error = OwnCore::give(pid).err().expect("a gone server pinned");
        assert!(
            format!("{error:#}").contains("giving Redis a CPU"),
            "{error:#}"
        );
        for (task, cpus) in our_threads() {
            assert_eq!(cpus, before, "{task}");
        }
    }

    /// A process that stands for Redis, killed and reaped when dropped,
    /// whatever failed.
    struct Sleeper(std::process::Child);

    impl Sleeper {
        fn start() -> Self {
            Self(
                std::process::Command::new("sleep")
                    .arg("30")
                    .spawn()
                    .unwrap(),
            )
        }

        fn pid(&self) -> Pid {
            Pid::from_raw(i32::try_from(self.0.id()).unwrap())
        }
    }

    impl Drop for Sleeper {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
