//! The process' own life: its limit on open files, and when it should stop
//! (a signal, or the process that started it gone).

use std::time::Duration;

/// Raise this process' soft limit on open files to its hard limit. Every
/// buyer in a burst is one open connection, and the usual soft limit (1024)
/// is far below what thousands of concurrent buyers need.
pub fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, "could not raise the open files limit");
    }
}

/// Ends at the first SIGINT (Ctrl-C), SIGTERM (`docker stop`, `kill`) or
/// SIGHUP (its terminal closed, an SSH session dropped) the process gets
/// from the moment this is called, not from the moment the returned
/// future is first awaited. SIGHUP's default ends the process without its
/// graceful stop: its instances' lanes unanswered, its private servers
/// left to their reapers. Unless the process was started ignoring SIGHUP
/// (`nohup seckill serve &`): a handler would undo what was asked, and it
/// serves on when its terminal closes.
///
/// The race this prevents: a program prints "Press Ctrl-C to stop." (or
/// the address a supervisor waits for) and only then starts to wait. Once
/// tokio has a handler for a signal, a signal that arrives while nothing
/// listens is caught and dropped: a Ctrl-C pressed in that gap was ignored
/// and the program went on serving. Before the first handler, a SIGTERM in
/// the gap killed the process without its graceful stop. So call this
/// before saying the program may be stopped, and await it afterwards.
///
/// A process started through `seckill-devenv`'s `processes` (`Deployment::command`) also
/// stops once the process that started it is gone ([`PARENT_PID_ENV`]).
pub fn stop_requested() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    let mut terminate = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let mut hangup = (!started_ignoring_sighup())
        .then(|| signal(SignalKind::hangup()).expect("installing a SIGHUP handler"));
    let parent = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|pid| pid.parse().ok());
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            Some(_) = async {
                match &mut hangup {
                    Some(hangup) => hangup.recv().await,
                    None => std::future::pending().await,
                }
            } => {}
            () = parent_gone(parent) => {
                tracing::warn!("the process that started this one is gone; stopping");
            }
        }
    }
}

/// Whether this process was started with SIGHUP ignored (`nohup`, a
/// shell's `trap '' HUP`): the kernel's `SigIgn` mask in
/// `/proc/self/status`, read before any handler of ours is installed.
fn started_ignoring_sighup() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .is_some_and(|status| ignores_sighup(&status))
}

/// Whether a `/proc/<pid>/status` text says SIGHUP (signal 1, the mask's
/// lowest bit) is ignored.
fn ignores_sighup(status: &str) -> bool {
    status
        .lines()
        .find_map(|line| line.strip_prefix("SigIgn:"))
        .and_then(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .is_some_and(|mask| mask & 1 == 1)
}

/// Set by `seckill-devenv`'s `processes` on every process it starts: the starter's pid.
///
/// A starter killed with SIGKILL (a test's time limit, the OOM killer)
/// cannot stop its processes, and they served on, orphaned, holding ports
/// and Redis connections, for as long as the machine ran. Each now stops
/// itself once its parent is no longer that pid (an orphan is adopted by
/// init or a subreaper). Compared with the pid passed in, not with one read
/// at start, so a starter that died before the child looked is caught too.
/// (`PR_SET_PDEATHSIG` fires when the spawning thread exits, not the
/// process, and misses a parent that died before the call.)
pub const PARENT_PID_ENV: &str = "SECKILL_PARENT_PID";

/// Ends when this process' parent is no longer `parent` (never, for
/// `None`). Looked at twice a second.
async fn parent_gone(parent: Option<u32>) {
    let Some(parent) = parent else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while std::os::unix::process::parent_id() == parent {
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::stop_requested;

    /// `signal`, sent after [`stop_requested`] and before its wait, ends
    /// the wait. (This leaves the unit tests' process listening for the
    /// stop signals until it exits; the unit tests are over in well under
    /// a second.)
    async fn stops_on(signal: Signal) {
        let stop = stop_requested();
        raise(signal).expect("a signal to this process");
        // Time for the signal to be caught before anything waits for it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .unwrap_or_else(|_| panic!("the {signal} sent before the wait ends it"));
    }

    /// The stop is seen though it came before the wait: the program had
    /// printed "Press Ctrl-C to stop." and was not yet waiting.
    #[tokio::test]
    async fn a_signal_between_the_prompt_and_the_wait_is_not_lost() {
        stops_on(Signal::SIGTERM).await;
    }

    /// A terminal that closes (an SSH session dropped) stops the program
    /// gracefully too: its default would end it with nothing cleaned up.
    #[tokio::test]
    async fn a_closed_terminal_is_a_stop_request() {
        stops_on(Signal::SIGHUP).await;
    }

    /// Under `nohup` (SIGHUP ignored from the start) a closed terminal is
    /// no stop request: the mask read is the one the kernel shows for a
    /// process started so.
    #[test]
    fn a_process_started_under_nohup_is_seen_ignoring_sighup() {
        let status = |shell: &str| {
            let output = std::process::Command::new("sh")
                .args(["-c", shell])
                .output()
                .expect("sh");
            String::from_utf8(output.stdout).expect("text")
        };
        assert!(super::ignores_sighup(&status(
            "trap '' HUP; exec cat /proc/self/status"
        )));
        assert!(!super::ignores_sighup(&status(
            "trap - HUP; exec cat /proc/self/status"
        )));
    }
}
