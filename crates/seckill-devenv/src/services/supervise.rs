//! Keeping a started server on a leash.
//!
//! A process that is killed (`kill -9`, a crashed test) cannot run its
//! destructors. So that its private servers do not outlive it, each one has a
//! tiny "reaper" shell process that checks every second whether the parent
//! still lives and stops the server when it does not.
//!
//! Neither is in the process group of the process that started them: each
//! is the leader of a group of its own. A terminal sends its signals to
//! its foreground group: Ctrl-C's SIGINT, and SIGHUP when it closes (an
//! SSH session dropped). In the starter's group, the reaper died of them
//! with its parent, before its clean-up, and a server that ignores SIGHUP
//! (Redis) or reloads on it (PostgreSQL) served on, orphaned, holding its
//! port and its files; one that stops on SIGINT left its files. Out of
//! the group, the server hears only its starter (a graceful stop) or its
//! reaper (the starter gone, however it went).

use std::collections::BTreeSet;
use std::hash::{BuildHasher, Hasher, RandomState};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use anyhow::{Context, bail};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;

/// How long a private server may take to answer after it was started.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// A server process plus the reaper that stops it if this process dies first.
#[derive(Debug)]
pub(super) struct Supervised {
    server: Child,
    reaper: Child,
}

impl Supervised {
    pub(super) fn spawn(mut command: Command, dir: &Path, polite: Signal) -> anyhow::Result<Self> {
        let mut server = command
            .process_group(0)
            .spawn()
            .with_context(|| format!("starting {command:?}"))?;
        // $0 = our pid, $1 = the server's, $2 = its directory. While we live,
        // sleep; once we are gone, stop the server and remove its files.
        let script = format!(
            r#"while kill -0 "$0" 2>/dev/null; do sleep 1; done
kill -{sig} "$1" 2>/dev/null; sleep 5; kill -KILL "$1" 2>/dev/null; rm -rf "$2""#,
            sig = polite.as_str().trim_start_matches("SIG"),
        );
        let reaper = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg(std::process::id().to_string())
            .arg(server.id().to_string())
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        match reaper {
            Ok(reaper) => Ok(Self { server, reaper }),
            Err(error) => {
                // Nothing would stop the server once this process is gone.
                let _ = server.kill();
                let _ = server.wait();
                Err(error).context("starting the reaper of a private server")
            }
        }
    }

    /// Whether the server has exited, and how.
    fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.server.try_wait().ok().flatten()
    }

    /// Wait until `answers` says the server (`what`, writing to `log`)
    /// answers, for [`STARTUP_TIMEOUT`] at most, and no longer than it
    /// runs: a server that exits at once (a bad option, a port taken) is
    /// reported then, not 30 s later. A failure quotes the end of the log:
    /// the log goes with the server's folder when the caller drops the
    /// server, so a path to it would name a file already gone.
    pub(super) async fn wait_ready<F, Fut>(
        &mut self,
        what: &str,
        log: &Path,
        mut answers: F,
    ) -> anyhow::Result<()>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = bool>,
    {
        let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
        let why = loop {
            if answers().await {
                return Ok(());
            }
            if let Some(status) = self.exited() {
                break format!("it exited ({status})");
            }
            if tokio::time::Instant::now() >= deadline {
                break format!("no answer within {STARTUP_TIMEOUT:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        bail!(
            "{what} did not start: {why}; its log ends:\n{}",
            log_tail(log)
        )
    }

    /// End a start that failed, before another is tried: the server is
    /// killed if it still runs, and its reaper goes too. Left, the reaper
    /// would, once this process ends, signal a pid the system may have
    /// handed to another process by then, and remove the folder the next
    /// start uses.
    pub(super) fn abandon(mut self) {
        if self.exited().is_none() {
            let _ = self.server.kill();
            let _ = self.server.wait();
        }
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
    }

    /// The server's process id.
    pub(super) fn pid(&self) -> Pid {
        Pid::from_raw(i32::try_from(self.server.id()).expect("pids fit in i32"))
    }

    /// Send `signal` and go on (SIGSTOP and SIGCONT, to freeze a server
    /// and let it go again).
    pub(super) fn signal(&self, signal: Signal) {
        let _ = kill(self.pid(), signal);
    }

    /// Send `signal`, wait up to 10 s for the server to exit, then SIGKILL it.
    /// Blocks the calling thread for that long at most: it runs at shutdown
    /// and in tests, never on a request path.
    pub(super) fn stop(mut self, signal: Signal) {
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
        let _ = kill(self.pid(), signal);
        for _ in 0..200 {
            if matches!(self.server.try_wait(), Ok(Some(_))) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.server.kill();
        let _ = self.server.wait();
    }
}

/// The last lines of the log at `path`, or why there are none.
fn log_tail(path: &Path) -> String {
    const LINES: usize = 15;
    match std::fs::read_to_string(path) {
        Ok(log) if log.trim().is_empty() => "(nothing)".to_owned(),
        Ok(log) => {
            let lines: Vec<&str> = log.lines().collect();
            lines[lines.len().saturating_sub(LINES)..].join("\n")
        }
        Err(error) => format!("(unreadable: {error})"),
    }
}

/// Poll `check` until it says yes or [`STARTUP_TIMEOUT`] passes.
pub(super) async fn wait_until<F, Fut>(mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + STARTUP_TIMEOUT;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    bail!("no answer within {STARTUP_TIMEOUT:?}")
}

/// A port nothing listens on, for a private server to listen on.
///
/// The race this prevents: a port the kernel picks (a bind to port 0)
/// comes from its ephemeral range, where every outgoing connection also
/// draws its local port. Between this check and the server's own bind,
/// one of the suite's thousands of client connections could take it: the
/// server could not listen, and was reported as "did not answer" 30 s
/// later. So the port is drawn below the ephemeral range, where no
/// connection takes one, and never twice in one process (two servers
/// started at once could draw the same). Where the range starts too low
/// to leave room below it, the kernel picks.
pub(super) fn free_port() -> anyhow::Result<u16> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    const LOWEST: u16 = 10_000;
    let ephemeral = ephemeral_start().unwrap_or(32_768);
    if ephemeral <= LOWEST + 1_000 {
        let listener = TcpListener::bind("127.0.0.1:0").context("looking for a free port")?;
        return Ok(listener.local_addr()?.port());
    }
    let mut given = GIVEN
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..1_000 {
        // A random number from std alone: each `RandomState` is keyed anew.
        let draw = RandomState::new().build_hasher().finish();
        let port = LOWEST + u16::try_from(draw % u64::from(ephemeral - LOWEST))?;
        if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
            given.insert(port);
            return Ok(port);
        }
    }
    bail!("no free port below {ephemeral} after 1,000 draws")
}

/// How often a private server is started on a new port after another
/// process took the one drawn for it ([`port_taken`]).
pub(super) const PORT_TRIES: u32 = 3;

/// Whether a server's start failed because its port was taken: the race
/// [`free_port`] cannot close across processes. Two test runs or a bench
/// beside them draw from the same range; one can bind the port another
/// drew between the draw's check and its server's own bind. Redis says
/// "bind: Address already in use", PostgreSQL "could not bind IPv4
/// address ...: Address already in use"; [`Supervised::wait_ready`]'s
/// error quotes the end of the log.
pub(super) fn port_taken(error: &anyhow::Error) -> bool {
    format!("{error:#}").contains("Address already in use")
}

/// Where Linux's ephemeral ports start (`ip_local_port_range`).
fn ephemeral_start() -> Option<u16> {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The file `program` names on `PATH`, if any.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::{ephemeral_start, free_port, port_taken};

    /// What each server logs when its port is taken, as the start's error
    /// quotes it (its log's end): both are started again elsewhere; any
    /// other failure is not.
    #[test]
    fn a_taken_port_is_told_apart_from_other_failures() {
        let said = |log: &str| anyhow::anyhow!("{log}").context("Redis exited");
        for log in [
            "# Warning: Could not create server TCP listening socket 127.0.0.1:12345: bind: Address already in use",
            "LOG:  could not bind IPv4 address \"127.0.0.1\": Address already in use",
        ] {
            assert!(port_taken(&said(log)), "{log}");
        }
        assert!(!port_taken(&said(
            "*** FATAL CONFIG FILE ERROR: Bad directive"
        )));
    }

    /// No port drawn is one an outgoing connection could take (the
    /// ephemeral range), and none is drawn twice.
    #[test]
    fn free_ports_are_below_the_ephemeral_range_and_never_the_same() {
        let ephemeral = ephemeral_start().expect("Linux says its ephemeral range");
        let drawn: Vec<u16> = (0..500).map(|_| free_port().expect("a port")).collect();
        let distinct: BTreeSet<u16> = drawn.iter().copied().collect();
        assert_eq!(distinct.len(), drawn.len(), "a port drawn twice");
        assert!(drawn.iter().all(|port| *port < ephemeral), "{drawn:?}");
    }
}
