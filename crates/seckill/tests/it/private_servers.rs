//! Nothing a process makes outlives it for good, however it ends. A
//! private server: here its starter dies of a signal its terminal sends
//! to its whole process group (Ctrl-C's SIGINT in `cargo test`, which has
//! no handler; SIGHUP when the terminal closes). The server and its reaper
//! are in no group of the starter's, so the signal ends the starter alone,
//! and the reaper stops the server and removes its files
//! (`crates/seckill-devenv/src/services/supervise.rs`). A test's database
//! and keys on the shared servers: a run killed outright leaves them, and
//! the next run takes them away (`services/leftovers.rs`).

use std::path::PathBuf;
use std::time::Duration;

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use seckill_devenv::services::PrivateRedis;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::helpers::{Scratch, TEST_RUNS, eventually, services, spawn_this_test};

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

/// The rest of the first line the child prints that starts with `what`
/// (its first lines are the test harness'), within a minute.
async fn child_says(child: &mut tokio::process::Child, what: &str) -> String {
    let mut lines = BufReader::new(child.stdout.take().expect("its stdout")).lines();
    loop {
        let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the child says {what:?} within a minute"))
            .expect("the child's output")
            .unwrap_or_else(|| panic!("the child ended before it said {what:?}"));
        if let Some(rest) = line.strip_prefix(what) {
            return rest.to_owned();
        }
    }
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
    let said = child_says(&mut child, "redis ").await;
    let (port, dir) = said.split_once(' ').expect("a port and a folder");
    let (port, dir): (u16, _) = (port.parse().expect("a port"), PathBuf::from(dir));
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

/// Set in the child: make a scratch database and key, say which, wait.
const SCRATCH_CHILD: &str = "SECKILL_TEST_LEFTOVERS_CHILD";

/// A test run killed outright (here SIGKILL; Ctrl-C on `cargo test` is the
/// same: it has no handler) leaves its tests' databases and keys on the
/// shared servers; the next run's sweep drops them, and leaves those of a
/// run still alive (this one's).
#[tokio::test]
async fn what_a_test_run_killed_outright_left_is_taken_away_by_the_next() {
    if std::env::var_os(SCRATCH_CHILD).is_some() {
        let scratch = Scratch::new().await;
        let database = scratch.database_url.rsplit('/').next().expect("a name");
        let _: () = redis::cmd("SET")
            .arg(format!("{}:left", scratch.prefix))
            .arg(1)
            .query_async(&mut crate::helpers::redis_at(scratch.redis_url()).await)
            .await
            .expect("SET");
        println!("\nscratch {database} {}", scratch.prefix);
        tokio::time::sleep(Duration::from_secs(120)).await;
        return;
    }
    let ours = Scratch::new().await;
    let this_test =
        "private_servers::what_a_test_run_killed_outright_left_is_taken_away_by_the_next";
    let mut child = spawn_this_test(this_test, &[(SCRATCH_CHILD, "1")]);
    let said = child_says(&mut child, "scratch ").await;
    let (database, prefix) = said.split_once(' ').expect("a database and a prefix");
    let (database, prefix) = (database.to_owned(), prefix.to_owned());
    child.kill().await.expect("SIGKILL");

    let shared = services().await;
    let mut session = seckill_devenv::services::ServerSession::open(&shared.database_url)
        .await
        .expect("PostgreSQL");
    let ours_name = ours
        .database_url
        .rsplit('/')
        .next()
        .expect("a name")
        .to_owned();
    let left = session
        .databases_starting("seckill_test_")
        .await
        .expect("list");
    assert!(left.contains(&database), "{database} in {left:?}");

    let next_run = uuid::Uuid::new_v4().simple().to_string();
    let _held = TEST_RUNS
        .hold_and_sweep(&shared.database_url, &shared.redis, &next_run)
        .await
        .expect("the next run's lock");
    let left = session
        .databases_starting("seckill_test_")
        .await
        .expect("list");
    assert!(!left.contains(&database), "{database} still in {left:?}");
    assert!(
        left.contains(&ours_name),
        "a live run's database was dropped"
    );
    let key: Option<String> = redis::cmd("GET")
        .arg(format!("{prefix}:left"))
        .query_async(&mut crate::helpers::redis_at(ours.redis_url()).await)
        .await
        .expect("GET");
    assert_eq!(key, None, "the dead run's key");
}
