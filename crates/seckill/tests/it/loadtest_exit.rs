//! The load test's runs that do not pass: an oversell expected of the lock
//! strategy (exit 1), a run whose connections are refused (exit 2), and bad
//! arguments refused before anything runs (exit 2).

use crate::helpers::{Scratch, loadtest_command, seckill_command};
use crate::processes::{finish, orders_by_status, sale_count, text};

#[tokio::test]
async fn expecting_an_oversell_from_the_lock_strategy_fails_with_exit_1() {
    let scratch = Scratch::new().await;
    let output = finish(loadtest_command(
        &scratch,
        &["--spawn", "1", "--users", "100", "--expect", "oversell"],
        &[],
    ))
    .await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("FAIL the naive strategy oversold (202s > units)"),
        "{stdout}"
    );
    assert!(stdout.contains("verdict: FAIL"));
}

#[tokio::test]
async fn a_run_whose_requests_fail_is_invalid_and_exits_2() {
    let scratch = Scratch::new().await;
    let created = finish(seckill_command(
        &scratch,
        &["sale", "create", "--name", "Lamp", "--stock", "3"],
        &[],
    ))
    .await;
    assert!(created.status.success(), "{}", text(&created));
    let sale: serde_json::Value = serde_json::from_slice(&created.stdout).expect("the sale");
    let sale = sale["id"].to_string();
    // A port nobody listens on: every connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("a free port")
        .local_addr()
        .expect("its address");
    let target = format!("http://{closed}");
    let output = finish(loadtest_command(
        &scratch,
        &["--target", &target, "--sale", &sale, "--users", "20"],
        &[],
    ))
    .await;
    assert_eq!(output.status.code(), Some(2), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("INVALID RUN: 21 connections could not be opened"),
        "{stdout}"
    );
    assert!(orders_by_status(&scratch).await.is_empty());
}

#[tokio::test]
async fn bad_arguments_are_refused_before_anything_runs() {
    let scratch = Scratch::new().await;
    for (args, expected) in [
        (vec!["--dup", "1.5"], "not between 0 and 1"),
        (vec!["--users", "0"], "--users"),
        (
            vec!["--target", "http://127.0.0.1:1", "--spawn", "2"],
            "cannot be used with",
        ),
        (vec!["--sale", "999999", "--users", "5"], "no sale 999999"),
        (vec!["--duration=-1"], "not a number of seconds above 0"),
        (vec!["--duration", "nan"], "not a number of seconds above 0"),
        (vec!["--scenario", "closed", "--duration", "0"], "above 0"),
        (
            vec!["--scenario", "rate", "--rate", "0"],
            "not a number above 0",
        ),
        (vec!["--rate", "inf"], "not a number above 0"),
    ] {
        let output = finish(loadtest_command(&scratch, &args, &[])).await;
        assert_eq!(output.status.code(), Some(2), "{args:?}: {}", text(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
    assert!(orders_by_status(&scratch).await.is_empty());
    assert_eq!(
        sale_count(&scratch).await,
        0,
        "a refused run created a sale"
    );
}
