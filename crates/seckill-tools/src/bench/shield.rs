//! Every other process kept off the CPU a row gives its private Redis
//! (`own_core.rs`), and put back after. Linux only.
//!
//! Keeping the bench's own threads off Redis' CPU was not enough: the
//! machine's other processes still ran there, and one that did held the
//! command Redis was running. `perf record -e sched:sched_switch` on
//! Redis' CPU during a `room-scripts` run named them: a message broker's
//! scheduler thread, bound to that CPU, ran for as long as Redis' slowest
//! join took; PostgreSQL; Redis' own lazy-free thread (docs/bench.md, "A
//! Redis with a CPU of its own"). So, as `cset shield` does, every thread
//! of every other process that may run there is moved to the other CPUs
//! for the row, and put back to the CPUs it had. The kernel's threads
//! bound to each CPU cannot move, nor can another user's without the
//! rights: those stay, and are counted.
//!
//! Should the bench die before it puts them back (a `kill -9`, a Ctrl-C
//! that ends it at once), the others would stay off that CPU for good. So
//! a guard process, `sh` with `taskset` (util-linux), waits for the
//! bench's end and puts them back; the bench stops it once it has put
//! them back itself. Without `taskset` nothing else is moved, and the row
//! says so.

use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use anyhow::Context;
use nix::errno::Errno;
use nix::sched::{CpuSet, sched_getaffinity, sched_setaffinity};
use nix::unistd::Pid;

/// Threads of other processes moved off one CPU: each with the CPUs it
/// had, and the guard that puts them back should the bench die first.
pub(super) struct Others {
    moved: Vec<(Pid, CpuSet)>,
    /// Threads that could not leave the CPU: the kernel's own, bound to
    /// it, or another user's without the rights.
    stayed: usize,
    guard: Option<Child>,
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
            moved: Vec::new(),
            stayed: 0,
            guard: None,
        };
        if !on_path("taskset") {
            return Ok(others);
        }
        for _ in 0..passes {
            let (moved, stayed) = others.pass(cpu, rest, spared)?;
            others.stayed = stayed;
            if moved == 0 {
                break;
            }
        }
        let guard = guard(std::process::id(), &others.moved);
        others.guard = Some(guard.context("starting the guard that puts the others back")?);
        Ok(others)
    }

    /// One listing of every thread: returns how many it moved, and how
    /// many on `cpu` could not be.
    fn pass(
        &mut self,
        cpu: usize,
        rest: &CpuSet,
        spared: &[Pid],
    ) -> anyhow::Result<(usize, usize)> {
        let (mut moved, mut stayed) = (0, 0);
        for pid in numbered("/proc")? {
            if spared.contains(&pid) {
                continue;
            }
            // A process that ended since the listing has no threads left.
            let Ok(tids) = numbered(&format!("/proc/{pid}/task")) else {
                continue;
            };
            for tid in tids {
                let Ok(had) = sched_getaffinity(tid) else {
                    continue;
                };
                if !had.is_set(cpu).unwrap_or(false) {
                    continue;
                }
                let mut elsewhere = had;
                elsewhere.unset(cpu)?;
                if elsewhere == CpuSet::new() {
                    elsewhere = *rest;
                }
                match sched_setaffinity(tid, &elsewhere) {
                    Ok(()) => {
                        moved += 1;
                        // Moved back onto it by its own process since?
                        // The CPUs it had first are the ones to restore.
                        if !self.moved.iter().any(|(known, _)| *known == tid) {
                            self.moved.push((tid, had));
                        }
                    }
                    Err(Errno::ESRCH) => {}
                    Err(_) => stayed += 1,
                }
            }
        }
        Ok((moved, stayed))
    }

    /// For the row's lines.
    pub(super) fn shown(&self) -> String {
        match self.guard {
            None => {
                "other processes still run there (no taskset to put them back if the bench dies)"
                    .to_owned()
            }
            Some(_) => format!(
                "{} threads of other processes moved off it, {} the kernel keeps there",
                self.moved.len(),
                self.stayed
            ),
        }
    }

    /// Every moved thread back on the CPUs it had (one that ended is in
    /// nobody's way), then the guard stopped. Goes on past a thread it
    /// cannot move back and returns the first such failure.
    pub(super) fn restore(&mut self) -> anyhow::Result<()> {
        let mut first_failure = None;
        for (tid, had) in self.moved.drain(..) {
            match sched_setaffinity(tid, &had) {
                Ok(()) | Err(Errno::ESRCH) => {}
                Err(error) => {
                    first_failure.get_or_insert(
                        anyhow::Error::new(error).context(format!("putting thread {tid} back")),
                    );
                }
            }
        }
        if let Some(mut guard) = self.guard.take() {
            let _ = guard.kill();
            let _ = guard.wait();
        }
        first_failure.map_or(Ok(()), Err)
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

/// A process that waits for `watched` to end, then puts every thread of
/// `moved` back on the CPUs it had. In a process group of its own, so
/// that the Ctrl-C that ends the bench does not end it too.
pub(super) fn guard(watched: u32, moved: &[(Pid, CpuSet)]) -> anyhow::Result<Child> {
    let mut script = String::from("while kill -0 \"$0\" 2>/dev/null; do sleep 1; done\n");
    for (tid, had) in moved {
        script.push_str(&format!("taskset -p {} {tid} >/dev/null 2>&1\n", hex(had)));
    }
    Ok(Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg(watched.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?)
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

/// Whether `program` is an executable file on `PATH`.
fn on_path(program: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(program))
                .is_ok_and(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        })
    })
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
