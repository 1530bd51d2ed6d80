//! `seckill chaos` as people run it, short: a few hundred buyers, every
//! fault, and the promise checked per fault and overall.

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use crate::helpers::{Scratch, loadtest_command, seckill_command};

#[tokio::test]
async fn every_fault_keeps_the_promise_in_a_short_chaos_run() {
    // Not beside the tests that saturate both cores: the paused lock
    // holder, resumed, has about 250 ms left to read the reply that gave
    // it the lock (`chaos/faults.rs`).
    let _cores = crate::helpers::cores_alone().await;
    let (output, report, page) = chaos_run(
        &[
            "--users",
            "1600",
            "--stock",
            "1500",
            "--rate",
            "100",
            "--duration-secs",
            "28",
            "--postgres-down-secs",
            "2",
            "--seed",
            "7",
        ],
        Duration::from_secs(240),
    )
    .await;
    let stdout = exited_0(&output);
    assert!(stdout.contains("verdict: PASS"), "{stdout}");

    for fault in [
        "worker-kill",
        "app-kill",
        "lock-holder-pause",
        "postgres-down",
        "redis-kill",
        "redis-wipe",
        "redis-stall",
        "flood",
    ] {
        let row = row_of(&report, fault);
        assert!(
            row["requests"].as_u64() > Some(0),
            "{fault} saw no load: {row}"
        );
        assert_eq!(row["internal"], 0, "{fault} answered 500: {row}");
        assert_eq!(row["ok"], true, "{fault}: {row}");
    }
    // The wipe's losses are exactly accounted for: every 202 whose order
    // was waiting on the queue, and no order that was not on it.
    for name in [
        "202s waiting on the queue at the Redis wipe that were lost",
        "lost 202s that were not on the queue at the wipe",
        // The paused holder's write reached the fence, and the fence refused it.
        "writes of the paused lock holder the fence refused",
    ] {
        let check = check_of(&report, name);
        assert_eq!(check["ok"], true, "{check}");
    }
    let checks = report["checks"].as_array().expect("checks");
    assert!(checks.iter().all(|c| c["ok"] == true), "{stdout}");
    // The page: the timeline, each window shaded and named, the table.
    assert!(page.contains("<svg"), "no chart");
    for fault in ["redis-wipe", "postgres-down", "flood"] {
        assert!(
            page.contains(&format!(">{fault}</text>")),
            "{fault} not marked on the chart"
        );
    }
}

/// A few hundred buyers, enough units, and a gentle rate: the short runs
/// of one fault.
const SMALL: [&str; 6] = ["--users", "400", "--stock", "300", "--rate", "100"];

#[tokio::test]
async fn the_load_test_runs_the_same_chaos_scenario_with_faults() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("run.json");
    let output = loadtest_command(
        &scratch,
        &[
            &["--faults", "redis-wipe"][..],
            &SMALL,
            &[
                "--duration",
                "6",
                "--json",
                json.to_str().expect("a UTF-8 path"),
            ],
        ]
        .concat(),
        &[],
    )
    .output()
    .await
    .expect("seckill-loadtest --faults");
    let stdout = exited_0(&output);
    assert!(stdout.contains("redis-wipe"), "{stdout}");
    assert!(dir.path().join("chaos.json").exists());
}

#[tokio::test]
async fn a_chaos_run_too_short_for_its_faults_is_refused_before_it_starts() {
    let scratch = Scratch::new().await;
    let output = seckill_command(
        &scratch,
        &["chaos", "--duration-secs", "5", "--fault", "postgres-down"],
        &[],
    )
    .output()
    .await
    .expect("seckill chaos");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("--duration-secs 5 is too short"),
        "{stderr}"
    );
    // The scratch's servers, in SECKILL_* variables, are not chaos's.
    assert!(
        stderr
            .contains("the Redis and PostgreSQL given (flags or SECKILL_* variables) are not used"),
        "{stderr}"
    );
}

/// A run without the Redis wipe has no wipe to account for: no `202` may
/// be lost at all, and the checks say so rather than speak of a wipe.
#[tokio::test]
async fn a_run_without_the_wipe_lets_no_202_be_lost() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let output = seckill_command(
        &scratch,
        &[
            &["chaos", "--fault", "app-kill"][..],
            &SMALL,
            &[
                "--duration-secs",
                "6",
                "--report-dir",
                dir.path().to_str().expect("a UTF-8 path"),
            ],
        ]
        .concat(),
        &[],
    )
    .output()
    .await
    .expect("seckill chaos");
    exited_0(&output);
    let checks = report(dir.path())["checks"].clone();
    let checks = checks.as_array().expect("checks");
    let lost = checks
        .iter()
        .find(|check| check["name"] == "lost 202s (no Redis wipe in this run)")
        .unwrap_or_else(|| panic!("no check of lost 202s: {checks:?}"));
    assert_eq!(
        (lost["found"].as_str(), lost["ok"].as_bool()),
        (Some("0"), Some(true))
    );
    assert!(
        !checks.iter().any(|check| check["name"]
            .as_str()
            .is_some_and(|name| name.contains("the wipe") || name.contains("the Redis wipe"))),
        "{checks:?}"
    );
}

/// The command's stdout, once it is seen to have exited 0.
pub(crate) fn exited_0(output: &std::process::Output) -> String {
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(
        output.status.code(),
        Some(0),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The row of `fault` in a chaos run's JSON report.
pub(crate) fn row_of<'a>(report: &'a Value, fault: &str) -> &'a Value {
    report["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|row| row["fault"] == fault)
        .unwrap_or_else(|| panic!("no row for {fault}: {report}"))
}

/// The check named `name` in a chaos run's JSON report.
pub(crate) fn check_of<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["checks"]
        .as_array()
        .expect("checks")
        .iter()
        .find(|check| check["name"] == name)
        .unwrap_or_else(|| panic!("no check {name:?}: {report}"))
}

/// The chaos run's JSON report in `dir`.
pub(crate) fn report(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("chaos.json")).expect("the JSON report"))
        .expect("JSON")
}

/// `seckill chaos <args> --report-dir <a temp dir>`, within `limit`;
/// returns its output, its JSON report and its HTML page.
pub(crate) async fn chaos_run(
    args: &[&str],
    limit: Duration,
) -> (std::process::Output, Value, String) {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let all = [&["chaos"][..], args, &["--report-dir", dir_arg]].concat();
    let output = tokio::time::timeout(limit, seckill_command(&scratch, &all, &[]).output())
        .await
        .expect("the chaos run ends in time")
        .expect("seckill chaos");
    let page = std::fs::read_to_string(dir.path().join("chaos.html")).expect("the HTML report");
    (output, report(dir.path()), page)
}

/// `seckill chaos --compare-durability`, as the workshop guide's step 11
/// runs it (`workshop.rs` runs it, and checks it here; `dir` holds its
/// reports, `crowd` is its `--crowd`): the failover on a primary, a
/// replica and three sentinels, under `local` and then under `replica`.
/// `replica` keeps every `202`; `local` loses what the primary answered
/// while its replica was cut off, and the table says so: a lost `202`, or
/// units Redis has on sale again that PostgreSQL counts as sold. Beside
/// the load, a waiting crowd waits in a room through the failover:
/// under `replica` no place, admission or `202` it was told is taken back.
pub(crate) fn the_failover_comparison_holds(output: &std::process::Output, dir: &Path, crowd: u64) {
    let stdout = exited_0(output);
    assert!(stdout.contains("local against replica"), "{stdout}");
    let sides: Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("compare.json")).expect("compare.json"),
    )
    .expect("JSON");
    let [local, replica] = [0, 1].map(|i| sides[i].clone());
    assert_eq!(local["durability"], "local", "{sides}");
    assert_eq!(replica["durability"], "replica", "{sides}");
    for side in [&local, &replica] {
        assert!(side["accepted"].as_u64() > Some(0), "no 202 at all: {side}");
        assert_eq!(side["internal"], 0, "a 500 during the failover: {side}");
        // Each run wrote its own full report, with the failover's row.
        let name = side["durability"].as_str().expect("a name");
        let run = report(&dir.join(name));
        assert!(
            run["rows"]
                .as_array()
                .expect("rows")
                .iter()
                .any(|row| row["fault"] == "redis-failover" && row["requests"].as_u64() > Some(0)),
            "{run}"
        );
    }
    assert_eq!(replica["verdict"], "PASS", "{stdout}");
    the_crowd_kept_every_promise(&report(&dir.join("replica")), &replica, &stdout, crowd);
    for figure in ["lost", "sold_again", "forgotten"] {
        assert_eq!(replica[figure], 0, "{figure}: {replica}");
    }
    assert_eq!(local["verdict"], "FAIL", "{stdout}");
    assert!(
        local["lost"].as_u64() > Some(0) || local["sold_again"].as_i64() > Some(0),
        "local took nothing back: {local}"
    );
}

/// The waiting crowd of a failover run under `replica`: its row held, each
/// of its checks passed, and its figures say it waited, was admitted and
/// bought, with nothing taken back.
fn the_crowd_kept_every_promise(run: &Value, side: &Value, stdout: &str, buyers: u64) {
    let row = row_of(run, "crowd in failover");
    assert!(row["requests"].as_u64() > Some(0), "{row}");
    assert_eq!(row["internal"], 0, "{row}");
    assert_eq!(row["ok"], true, "{row}\n{stdout}");
    let checks = run["checks"].as_array().expect("checks");
    let crowds: Vec<&Value> = checks
        .iter()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("waiting crowd: "))
        })
        .collect();
    assert_eq!(crowds.len(), 10, "{checks:?}");
    for check in crowds {
        assert_eq!(check["ok"], true, "{check}\n{stdout}");
    }
    let crowd = &side["crowd"];
    assert_eq!(crowd["buyers"], buyers, "{side}");
    for figure in ["placed", "admitted", "accepted"] {
        assert!(crowd[figure].as_u64() > Some(0), "{figure}: {crowd}");
    }
    for figure in [
        "taken_back",
        "unadmitted",
        "readmitted",
        "told_cut_off",
        "lost",
        "doubled",
    ] {
        assert_eq!(crowd[figure], 0, "{figure}: {crowd}");
    }
    assert!(
        crowd["most_admitted"].as_u64() <= crowd["max_active"].as_u64(),
        "{crowd}"
    );
    assert!(
        stdout.contains("== the waiting crowd across the same failover"),
        "{stdout}"
    );
}
