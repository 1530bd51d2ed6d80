//! An instance's memory after a burst: what the burst's connections took is
//! given back to the system once it is over (the server's allocator,
//! jemalloc with its background purge: see `Cargo.toml`). With glibc's
//! malloc an instance kept it for as long as it ran.

use std::time::{Duration, Instant};

use nix::unistd::Pid;

use crate::helpers::{Scratch, cores_alone, loadtest_command, seckill_command};
use crate::processes::{finish, interrupt, start_until, text};

/// Buyers in the burst: enough connections to grow a debug-build instance
/// by well over `GROWN_AT_LEAST`.
const BUYERS: &str = "3000";
/// Less than this, and the test would say nothing about giving it back.
const GROWN_AT_LEAST: u64 = 8 * 1024 * 1024;
/// jemalloc's decay is 10 s; it purges on its own thread, idle or not.
const GIVEN_BACK_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_instance_gives_a_bursts_memory_back_once_it_is_over() {
    let _cores = cores_alone().await;
    let scratch = Scratch::new().await;
    let serve = seckill_command(&scratch, &["serve", "--bind", "127.0.0.1:0"], &[]);
    let (server, url) = start_until(serve, "its address", |line| {
        line.strip_prefix("seckill listening on ")
            .map(str::to_owned)
    })
    .await;
    let pid = server.id().expect("running");
    let before = resident_bytes(pid);

    let burst = ["--target", &url, "--users", BUYERS, "--stock", "10"];
    let output = finish(loadtest_command(&scratch, &burst, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let after = resident_bytes(pid);
    let grown = after.saturating_sub(before);
    assert!(
        grown >= GROWN_AT_LEAST,
        "the burst grew the instance by only {grown} bytes ({before} to {after})"
    );

    // Half of what the burst took, back within the decay: jemalloc gave
    // back 73-87% of it here, glibc's malloc none (70.64 MB at the end of
    // the burst, 70.68 MB 30 s later).
    let target = before + grown / 2;
    let started = Instant::now();
    let mut now = after;
    while now > target && started.elapsed() < GIVEN_BACK_WITHIN {
        tokio::time::sleep(Duration::from_millis(500)).await;
        now = resident_bytes(pid);
    }
    assert!(
        now <= target,
        "{now} bytes resident {:?} after the burst: {before} before it, {after} at its end",
        started.elapsed()
    );
    assert_eq!(interrupt(server).await, Some(0));
}

/// VmRSS of the server, in bytes.
fn resident_bytes(pid: u32) -> u64 {
    let pid = Pid::from_raw(i32::try_from(pid).expect("a pid"));
    seckill_devenv::processes::resident_bytes(pid).expect("its memory")
}
