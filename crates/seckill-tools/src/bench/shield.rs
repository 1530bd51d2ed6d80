//! Every other process kept off the CPU a row gives its private Redis
//! (`own_core.rs`), and put back after. Linux only.
//!
//! Keeping the bench's own threads off Redis' CPU was not enough: the
//! machine's other processes still ran there, and one that did held the
//! command Redis was running. `perf record -e sched:sched_switch` on
//! Redis' CPU during a `room-scripts` run named them: a message broker's
//! scheduler thread, bound to that CPU, ran for most of Redis' slowest
//! join; PostgreSQL ran there too (docs/bench.md, "A Redis with a CPU of
//! its own"). So, as `cset shield` does, every thread of every other
//! process that may run there is moved to the other CPUs for the row, and
//! put back to the CPUs it had. Threads the kernel binds to each CPU
//! cannot move, nor can another user's without root (or `CAP_SYS_NICE`):
//! those stay, and are counted.
//!
//! The race: a thread or process started during the row gets the CPUs of
//! the thread that started it, which were moved. At the end, one started
//! since the move (its start time, in `/proc`) whose CPUs are still
//! exactly what its moved parent's became gets that parent's first CPUs
//! back. The kernel's threads are left to the kernel.
//!
//! Should the bench die before it puts them back (a `kill -9`, a Ctrl-C
//! that ends it at once), the others would stay off that CPU for good. So
//! a guard process, `sh` running a script of `taskset` (util-linux) lines,
//! waits for the bench's end and puts back the threads moved; the bench
//! stops it once it has put them back itself. Without `taskset` nothing
//! else is moved, and the row says so.

use std::collections::HashMap;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;
use seckill_devenv::services::find_on_path;

/// Threads of other processes moved off one CPU: each with the CPUs it
/// had, and the guard that puts them back should the bench die first.
pub(super) struct Others {
    cpu: usize,
    rest: CpuSet,
    moved: HashMap<Pid, CpuSet>,
    /// Threads that may not leave the CPU (`EINVAL`): the kernel's bound
    /// to it, or a cpuset's that holds that CPU only. They stay.
    bound: usize,
    /// Threads the bench may not move (another user's, without root).
    refused: usize,
    guard: Option<Guard>,
    /// Why nothing else was moved, if so.
    unguarded: Option<String>,
    passes: usize,
    /// When the move began, in the ticks since boot `/proc` counts a
    /// thread's start in.
    since: u64,
}

impl Others {
    /// Move every thread of every process but `spared` (this one, Redis)
    /// off `cpu`, onto the CPUs it had but that one, or `rest` if it had
    /// that one only. A process that starts meanwhile gets its parent's
    /// CPUs; the processes are listed again until a pass moves nothing
    /// (at most `passes`), so one started by a parent not yet moved is
    /// found by the next pass.
    pub(super) fn move_off(
        cpu: usize,
        rest: &CpuSet,
        spared: &[Pid],
        passes: usize,
    ) -> anyhow::Result<Self> {
        let mut others = Self {
            cpu,
            rest: *rest,
            moved: HashMap::new(),
            bound: 0,
            refused: 0,
            guard: None,
            unguarded: None,
            passes,
            since: now_in_ticks().context("reading the clock of threads' starts")?,
        };
        if find_on_path("taskset").is_none() {
            others.unguarded = Some("no taskset to put them back if the bench dies".to_owned());
            return Ok(others);
        }
        for _ in 0..passes {
            if others.pass(spared)? == 0 {
                break;
            }
        }
        match Guard::start(std::process::id(), &others.moved) {
            Ok(guard) => others.guard = Some(guard),
            // Not left moved with nothing to put them back: back now.
            Err(error) => {
                others.restore()?;
                others.unguarded = Some(format!(
                    "the guard that would put them back did not start: {error:#}"
                ));
            }
        }
        Ok(others)
    }

    /// One listing of every thread: returns how many it moved.
    fn pass(&mut self, spared: &[Pid]) -> anyhow::Result<usize> {
        let (mut moved, mut bound, mut refused) = (0, 0, 0);
        for pid in numbered("/proc")? {
            if spared.contains(&pid) {
                continue;
            }
            for tid in threads(pid) {
                let Ok(had) = sched_getaffinity(tid) else {
                    continue;
                };
                if !had.is_set(self.cpu).unwrap_or(false) {
                    continue;
                }
                match sched_setaffinity(tid, &self.narrowed(&had)) {
                    Ok(()) => {
                        moved += 1;
                        // Moved back onto it by its own process since?
                        // The CPUs it had first are the ones to restore.
                        self.moved.entry(tid).or_insert(had);
                    }
                    Err(Errno::ESRCH) => {}
                    Err(Errno::EINVAL) => bound += 1,
                    Err(_) => refused += 1,
                }
            }
        }
        (self.bound, self.refused) = (bound, refused);
        Ok(moved)
    }

    /// The CPUs a thread that had `had` runs on meanwhile.
    fn narrowed(&self, had: &CpuSet) -> CpuSet {
        let mut elsewhere = *had;
        // `cpu` is below `CpuSet::count()`: it came from a set.
        let _ = elsewhere.unset(self.cpu);
        if elsewhere == CpuSet::new() {
            elsewhere = self.rest;
        }
        elsewhere
    }

    /// For the row's lines.
    pub(super) fn shown(&self) -> String {
        if let Some(why) = &self.unguarded {
            return format!("other processes still run there ({why})");
        }
        let mut shown = format!(
            "{} threads of other processes moved off it, {} that may not leave it left there",
            self.moved.len(),
            self.bound
        );
        if self.refused > 0 {
            shown.push_str(&format!(
                ", {} not the bench's to move (another user's)",
                self.refused
            ));
        }
        shown
    }

    /// Every moved thread back on the CPUs it had (one that ended is in
    /// nobody's way), then those started meanwhile by a moved one, then
    /// the guard stopped. Goes on past a thread it cannot move back and
    /// returns the first such failure.
    pub(super) fn restore(&mut self) -> anyhow::Result<()> {
        let mut first_failure = None;
        // `EINVAL`: a thread the kernel has bound to a CPU since; it is
        // the kernel's to place.
        let mut put_back = |tid: Pid, had: &CpuSet| match sched_setaffinity(tid, had) {
            Ok(()) | Err(Errno::ESRCH | Errno::EINVAL) => {}
            Err(error) => {
                first_failure.get_or_insert(
                    anyhow::Error::new(error).context(format!("putting thread {tid} back")),
                );
            }
        };
        for (tid, had) in &self.moved {
            put_back(*tid, had);
        }
        for (tid, had) in self.started_meanwhile() {
            put_back(tid, &had);
        }
        self.moved.clear();
        if let Some(guard) = self.guard.take() {
            guard.stop();
        }
        first_failure.map_or(Ok(()), Err)
    }

    /// Threads started during the row by a moved thread's process, or
    /// processes started by one, still on the CPUs that process was moved
    /// to: each with the CPUs to put it back on. Their own children are
    /// found by the next pass, at most `passes`.
    fn started_meanwhile(&self) -> Vec<(Pid, CpuSet)> {
        let mut origins: HashMap<Pid, CpuSet> = self.moved.clone();
        let mut found = Vec::new();
        for _ in 0..self.passes {
            let mut more = 0;
            let Ok(pids) = numbered("/proc") else {
                break;
            };
            for pid in pids {
                let Some(stat) = Stat::of(pid, pid) else {
                    continue;
                };
                // A process gets its parent's CPUs only if it started
                // since the move: an older one's CPUs are its own.
                let origin = origins.get(&pid).or_else(|| {
                    (stat.started >= self.since)
                        .then(|| origins.get(&stat.parent))
                        .flatten()
                });
                let Some(had) = origin.copied().filter(|_| !stat.kernel) else {
                    continue;
                };
                let narrowed = self.narrowed(&had);
                for tid in threads(pid) {
                    if origins.contains_key(&tid)
                        || Stat::of(pid, tid).is_none_or(|thread| thread.started < self.since)
                    {
                        continue;
                    }
                    if sched_getaffinity(tid).is_ok_and(|now| now == narrowed) {
                        origins.insert(tid, had);
                        found.push((tid, had));
                        more += 1;
                    }
                }
            }
            if more == 0 {
                break;
            }
        }
        found
    }
}

impl Drop for Others {
    fn drop(&mut self) {
        if let Err(error) = self.restore() {
            tracing::warn!(
                error = format!("{error:#}"),
                "putting other processes back on all their CPUs"
            );
        }
    }
}

/// A process that waits for the bench to end, then puts every thread it
/// was told of back on the CPUs it had. Its script is a file (one line a
/// thread: thousands of threads would pass the limit of one argument),
/// which it deletes when done. In a process group of its own, so that
/// the Ctrl-C that ends the bench does not end it too.
pub(super) struct Guard {
    process: Child,
    script: PathBuf,
}

impl Guard {
    /// Watching the process `watched`, for the threads of `moved`.
    pub(super) fn start(watched: u32, moved: &HashMap<Pid, CpuSet>) -> anyhow::Result<Self> {
        let mut script = String::from("while kill -0 \"$1\" 2>/dev/null; do sleep 1; done\n");
        for (tid, had) in moved {
            script.push_str(&format!("taskset -p {} {tid} >/dev/null 2>&1\n", hex(had)));
        }
        script.push_str("rm -f -- \"$0\"\n");
        // A new file of a name of its own (never one someone put there
        // first), kept: the guard deletes it when done.
        let mut file = tempfile::Builder::new()
            .prefix("seckill-cpus-")
            .suffix(".sh")
            .tempfile()
            .context("creating the guard's script")?;
        std::io::Write::write_all(&mut file, script.as_bytes())
            .context("writing the guard's script")?;
        let path = file
            .into_temp_path()
            .keep()
            .context("keeping the guard's script")?;
        let process = Command::new("sh")
            .arg(&path)
            .arg(watched.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match process {
            Ok(process) => Ok(Self {
                process,
                script: path,
            }),
            Err(error) => {
                let _ = std::fs::remove_file(&path);
                Err(error).context("starting sh")
            }
        }
    }

    /// Stop it, its work done by the bench, and delete its script. Its
    /// whole process group: the `sleep` it waits in goes with it.
    pub(super) fn stop(mut self) {
        if let Ok(id) = i32::try_from(self.process.id()) {
            let _ = nix::sys::signal::killpg(Pid::from_raw(id), nix::sys::signal::Signal::SIGKILL);
        }
        let _ = self.process.kill();
        let _ = self.process.wait();
        let _ = std::fs::remove_file(&self.script);
    }

    /// Its script, for tests.
    #[cfg(test)]
    pub(super) fn script(&self) -> &std::path::Path {
        &self.script
    }

    /// Wait for it to end by itself, for tests.
    #[cfg(test)]
    pub(super) fn wait(mut self) {
        let _ = self.process.wait();
    }
}

/// `cpus` as the hexadecimal mask `taskset -p` takes (CPU 0 the lowest bit).
fn hex(cpus: &CpuSet) -> String {
    let highest = (0..CpuSet::count())
        .rev()
        .find(|&cpu| cpus.is_set(cpu).unwrap_or(false))
        .unwrap_or(0);
    (0..=highest / 4)
        .rev()
        .map(|nibble| {
            let bits = (0..4).fold(0u32, |bits, bit| {
                let set = cpus.is_set(nibble * 4 + bit).unwrap_or(false);
                bits | (u32::from(set) << bit)
            });
            char::from_digit(bits, 16).expect("a nibble is a hex digit")
        })
        .collect()
}

/// The numbered entries of a `/proc` directory: processes, or threads.
fn numbered(dir: &str) -> anyhow::Result<Vec<Pid>> {
    Ok(std::fs::read_dir(dir)
        .with_context(|| format!("listing {dir}"))?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .map(Pid::from_raw)
        .collect())
}

/// The threads of process `pid`: none if it ended.
fn threads(pid: Pid) -> Vec<Pid> {
    numbered(&format!("/proc/{pid}/task")).unwrap_or_default()
}

/// What `/proc/<pid>/task/<tid>/stat` says of a thread.
struct Stat {
    /// Its process' parent.
    parent: Pid,
    /// A kernel thread (`PF_KTHREAD` in its flags).
    kernel: bool,
    /// When it started, in ticks since boot.
    started: u64,
}

impl Stat {
    fn of(pid: Pid, tid: Pid) -> Option<Self> {
        Self::read(&format!("/proc/{pid}/task/{tid}/stat"))
    }

    /// The fields after the command's closing parenthesis: the state
    /// first, then the parent, and so on (`man 5 proc`).
    fn read(path: &str) -> Option<Self> {
        const PF_KTHREAD: u64 = 0x0020_0000;
        let stat = std::fs::read_to_string(path).ok()?;
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        Some(Self {
            parent: Pid::from_raw(fields.get(1)?.parse().ok()?),
            kernel: fields.get(6)?.parse::<u64>().ok()? & PF_KTHREAD != 0,
            started: fields.get(19)?.parse().ok()?,
        })
    }
}

/// Now, in the ticks since boot `/proc` counts threads' starts in: the
/// start of a thread begun for the purpose.
fn now_in_ticks() -> Option<u64> {
    std::thread::spawn(|| Stat::read("/proc/thread-self/stat").map(|stat| stat.started))
        .join()
        .ok()?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_written_as_taskset_reads_them() {
        let set = |cpus: &[usize]| {
            let mut set = CpuSet::new();
            for &cpu in cpus {
                set.set(cpu).unwrap();
            }
            set
        };
        assert_eq!(hex(&set(&[0])), "1");
        assert_eq!(hex(&set(&[0, 1])), "3");
        assert_eq!(hex(&set(&[1])), "2");
        assert_eq!(hex(&set(&[4])), "10");
        assert_eq!(hex(&set(&[0, 2, 3, 9])), "20d");
    }
}
