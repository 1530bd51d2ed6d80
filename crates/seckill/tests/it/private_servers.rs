//! A private server does not outlive the process that started it, however
//! that process ends: here, of a signal its terminal sends to its whole
//! process group (Ctrl-C's SIGINT in `cargo test`, which has no handler;
//! SIGHUP when the terminal closes). The server and its reaper are in no
//! group of the starter's, so the signal ends the starter alone, and the
//! reaper stops the server and removes its files
//! (`crates/seckill-devenv/src/services/supervise.rs`).

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use seckill_devenv::services::PrivateRedis;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::eventually;

/// Set in the child: start a private Redis, say where, and wait.
const CHILD: &str = "SECKILL_TEST_PRIVATE_SERVER_CHILD";

/// The child: a private Redis, its port and folder printed, then a wait
/// until a signal ends the process.
async fn hold_a_private_redis() {
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let port = redis.url().rsplit(':').next().expect("a port").to_owned();
    // On a line of its own: the test harness has written the test's name
    // without ending its line.
    println!("\nredis {port} {}", redis.dir().display());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

/// Start this test again as a child in a process group of its own, as a
/// shell starts a command in the foreground; end the group with `signal`,
/// as the terminal would; the child's private Redis must stop and its
/// folder go.
async fn a_signal_to_the_starters_group_leaves_no_server(this_test: &str, signal: Signal) {
    if std::env::var_os(CHILD).is_some() {
        return hold_a_private_redis().await;
    }
    let mut child = tokio::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([this_test, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, "1")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("a child test process");
    let group = Pid::from_raw(i32::try_from(child.id().expect("a pid")).expect("a pid"));
    let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
    let (port, dir) = loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the child's private Redis within a minute")
            .expect("the child's output")
            .expect("the child says where its Redis is");
        if let Some(rest) = line.strip_prefix("redis ") {
            let (port, dir) = rest.split_once(' ').expect("a port and a folder");
            let port: u16 = port.trim_end_matches('/').parse().expect("a port");
            break (port, PathBuf::from(dir));
        }
    };
    assert!(dir.exists(), "{dir:?}");

    killpg(group, signal).expect("the signal to the child's group");
    let status = child.wait().await.expect("the child ends");
    assert!(!status.success(), "the child died of {signal}: {status}");
    // Its port, not its pid: an orphan's pid stays taken until something
    // reaps it, which a container's first process may never do.
    eventually(Duration::from_secs(10), "the server stopped", || async {
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
    })
    .await;
    eventually(Duration::from_secs(10), "its folder removed", || async {
        !dir.exists()
    })
    .await;
}

#[tokio::test]
async fn ctrl_c_on_the_starter_leaves_no_private_server_behind() {
    a_signal_to_the_starters_group_leaves_no_server(
        "private_servers::ctrl_c_on_the_starter_leaves_no_private_server_behind",
        Signal::SIGINT,
    )
    .await;
}

#[tokio::test]
async fn a_closed_terminal_leaves_no_private_server_behind() {
    a_signal_to_the_starters_group_leaves_no_server(
        "private_servers::a_closed_terminal_leaves_no_private_server_behind",
        Signal::SIGHUP,
    )
    .await;
}
