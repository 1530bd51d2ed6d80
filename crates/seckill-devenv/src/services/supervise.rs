//! Keeping a started server on a leash.
//!
//! A process that is killed (`kill -9`, a crashed test) cannot run its
//! destructors. So that its private servers do not outlive it, each one has a
//! tiny "reaper" shell process that checks every second whether the parent
//! still lives and stops the server when it does not.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
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
        let server = command
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
            .spawn()
            .context("starting the reaper of a private server")?;
        Ok(Self { server, reaper })
    }

    /// Send `signal` and go on (SIGSTOP and SIGCONT, to freeze a server
    /// and let it go again).
    pub(super) fn signal(&self, signal: Signal) {
        let pid = Pid::from_raw(i32::try_from(self.server.id()).expect("pids fit in i32"));
        let _ = kill(pid, signal);
    }

    /// Send `signal`, wait up to 10 s for the server to exit, then SIGKILL it.
    /// Blocks the calling thread for that long at most: it runs at shutdown
    /// and in tests, never on a request path.
    pub(super) fn stop(mut self, signal: Signal) {
        let _ = self.reaper.kill();
        let _ = self.reaper.wait();
        let pid = Pid::from_raw(i32::try_from(self.server.id()).expect("pids fit in i32"));
        let _ = kill(pid, signal);
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

/// A TCP port that was free a moment ago. Another process could take it
/// before the server binds it; the server then fails to start and says so.
pub(super) fn free_port() -> anyhow::Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("looking for a free port")?;
    Ok(listener.local_addr()?.port())
}

pub(super) fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}
