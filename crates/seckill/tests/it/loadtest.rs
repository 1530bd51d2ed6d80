//! The load test as its users run it: real processes, a few hundred
//! buyers, and then what the exit code, the reports and PostgreSQL say.
//! Runs that fail or are refused are in `loadtest_exit.rs`; the demo, in
//! `loadtest_demo.rs`.

use crate::helpers::{Scratch, loadtest_command};
use crate::processes::{finish, orders_by_status, read_json, text};

#[tokio::test]
async fn a_burst_on_two_spawned_instances_sells_each_unit_once_and_reports_it() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let (json, html) = (dir.path().join("run.json"), dir.path().join("run.html"));
    let output = finish(loadtest_command(
        &scratch,
        &[
            "--spawn",
            "2",
            "--users",
            "300",
            "--dup",
            "0.1",
            "--json",
            json.to_str().expect("a UTF-8 path"),
            "--html",
            html.to_str().expect("a UTF-8 path"),
        ],
        &[],
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("verdict: PASS"));

    let report = read_json(&json);
    assert_eq!(report["schema"], "seckill-loadtest/1");
    assert_eq!(report["verdict"], "pass");
    assert_eq!(report["config"]["planned_requests"], 330);
    let counts = &report["summary"]["counts"];
    assert_eq!(counts["won"], 10, "{counts}");
    let answered: u64 = counts
        .as_object()
        .expect("counts by outcome")
        .values()
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    assert_eq!(answered, 330, "every request is answered and classified");
    assert!(counts.get("error").is_none(), "{counts}");
    let by_instance = report["summary"]["won_by_instance"]
        .as_object()
        .expect("winners by instance");
    let winners: u64 = by_instance.values().map(|n| n.as_u64().expect("n")).sum();
    assert_eq!(winners, 10);
    let checks = report["invariants"].as_array().expect("the checks");
    assert!(checks.len() >= 10);
    assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    assert!(report["summary"]["launch_skew_us"].is_u64());
    let timeline: u64 = report["summary"]["timeline"]
        .as_array()
        .expect("the 100 ms timeline")
        .iter()
        .flat_map(|bucket| bucket["counts"].as_object().expect("counts").values())
        .map(|n| n.as_u64().expect("a count"))
        .sum();
    assert_eq!(timeline, 330, "every answer is in one timeline bucket");
    // Not a terminal: the progress is plain lines on stderr, phase by phase.
    let stderr = String::from_utf8_lossy(&output.stderr);
    for phase in [
        "connect: done",
        "release: done",
        "settle: done",
        "verify: done",
    ] {
        assert!(stderr.contains(phase), "no {phase:?} line in:\n{stderr}");
    }
    assert!(report["generator"]["cpu_ms"].as_f64().expect("CPU time") > 0.0);

    let page = std::fs::read_to_string(&html).expect("the HTML report");
    assert_eq!(page.matches("<svg").count(), 2, "two charts");
    assert!(page.contains("PASS"));
    assert!(
        !page.contains("<script"),
        "the report is self-contained and static"
    );

    // What PostgreSQL says, independently of the report.
    assert_eq!(orders_by_status(&scratch).await, [("confirmed".into(), 10)]);
}

#[tokio::test]
async fn the_naive_strategy_oversells_and_only_passes_when_that_is_expected() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("naive.json");
    // A wide race window, so that the oversell does not depend on luck.
    let env = [("SECKILL_NAIVE_DELAY_MS", "30")];
    let naive = |expect: &'static str| {
        loadtest_command(
            &scratch,
            &[
                "--spawn",
                "2",
                "--strategy",
                "naive",
                "--users",
                "200",
                "--expect",
                expect,
                "--json",
                json.to_str().expect("a UTF-8 path"),
            ],
            &env,
        )
    };

    let output = finish(naive("oversell")).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = read_json(&json);
    let won = report["summary"]["counts"]["won"].as_u64().expect("wins");
    assert!(won > 10, "the naive strategy sold {won} of 10 units");
    assert_eq!(report["oversold_by"].as_u64(), Some(won - 10));

    // Without --expect oversell the same run is a broken promise: exit 1,
    // and the failed check is named.
    let output = finish(naive("no-oversell")).await;
    assert_eq!(output.status.code(), Some(1), "{}", text(&output));
    let report = read_json(&json);
    let failed: Vec<&str> = report["invariants"]
        .as_array()
        .expect("checks")
        .iter()
        .filter(|c| c["passed"] == false)
        .map(|c| c["name"].as_str().expect("a name"))
        .collect();
    assert!(
        failed.contains(&"accepted purchases (202) <= units"),
        "{failed:?}"
    );

    // PostgreSQL had the last word both times: 10 confirmed per sale, the excess rejected.
    let by_status = orders_by_status(&scratch).await;
    assert_eq!(by_status[0], ("confirmed".into(), 20), "{by_status:?}");
    assert_eq!(by_status[1].0, "rejected", "{by_status:?}");
}

#[tokio::test]
async fn buyers_told_busy_do_not_count_as_buyers_left_without_a_unit() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("run.json");
    // Plenty of units, and no patience for the lock: many buyers are told
    // "busy" and never compete. The run must still pass. Each holder
    // pauses 20 ms in its critical section, so that the other instance
    // finds the lock held however fast the machine (without it, a run on a
    // busy machine once had every pass miss the other).
    let output = finish(loadtest_command(
        &scratch,
        &[
            "--spawn",
            "2",
            "--stock",
            "100000",
            "--users",
            "300",
            "--json",
            json.to_str().expect("a UTF-8 path"),
        ],
        &[
            ("SECKILL_LOCK_WAIT_MS", "0"),
            ("SECKILL_HOLD_PAUSE_MS", "20"),
        ],
    ))
    .await;
    let report = read_json(&json);
    let counts = &report["summary"]["counts"];
    assert!(
        counts["busy"].as_u64().unwrap_or(0) > 0,
        "nobody was busy: {counts}"
    );
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let won = counts["won"].as_u64().expect("wins");
    assert_eq!(report["stored"]["confirmed"].as_u64(), Some(won));
}

#[tokio::test]
async fn the_closed_and_rate_scenarios_keep_the_promise_too() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("run.json");
    let json_arg = json.to_str().expect("a UTF-8 path");

    // Closed: 8 connections, each planned request once.
    let output = finish(loadtest_command(
        &scratch,
        &[
            "--spawn",
            "2",
            "--scenario",
            "closed",
            "--connections",
            "8",
            "--users",
            "150",
            "--json",
            json_arg,
        ],
        &[],
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let report = read_json(&json);
    assert_eq!(report["config"]["scenario"], "closed");
    assert_eq!(report["summary"]["requests"], 157);
    assert_eq!(report["summary"]["counts"]["won"], 10);

    // Rate: 150 requests a second for one second. On a busy machine some
    // sends may leave late, which makes the run invalid (exit 2) but never
    // breaks a promise: the checks must pass either way.
    let output = finish(loadtest_command(
        &scratch,
        &[
            "--spawn",
            "2",
            "--scenario",
            "rate",
            "--rate",
            "150",
            "--duration",
            "1",
            "--users",
            "100",
            "--json",
            json_arg,
        ],
        &[],
    ))
    .await;
    let report = read_json(&json);
    assert_eq!(report["config"]["scenario"], "rate");
    let summary = &report["summary"];
    let (answered, dropped) = (
        summary["requests"].as_u64().expect("requests"),
        summary["dropped_sends"].as_u64().expect("dropped"),
    );
    assert_eq!(
        answered + dropped,
        150,
        "every arrival is answered or counted as dropped"
    );
    // Arrivals past the 105 planned requests start again at buyer 0: duplicates.
    assert_eq!(summary["counts"]["won"], 10);
    let checks = report["invariants"].as_array().expect("checks");
    assert!(checks.iter().all(|c| c["passed"] == true), "{checks:?}");
    match output.status.code() {
        Some(0) => assert_eq!(report["verdict"], "pass"),
        Some(2) => {
            let problems = report["problems"].as_array().expect("problems");
            assert!(
                problems.iter().all(|p| p
                    .as_str()
                    .is_some_and(|p| p.contains("late") || p.contains("dropped"))),
                "only lateness may invalidate this run: {problems:?}"
            );
        }
        other => panic!("exit {other:?}: {}", text(&output)),
    }
}

#[tokio::test]
async fn a_second_run_on_an_existing_sale_counts_the_units_sold_before_it() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let json = dir.path().join("run.json");
    let json_arg = json.to_str().expect("a UTF-8 path");
    let run = |args: Vec<String>| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        loadtest_command(&scratch, &args, &[])
    };

    // 20 units, 5 buyers: 5 sold, 15 left.
    let first = finish(run([
        "--spawn", "1", "--stock", "20", "--users", "5", "--dup", "0", "--json", json_arg,
    ]
    .map(String::from)
    .to_vec()))
    .await;
    assert_eq!(first.status.code(), Some(0), "{}", text(&first));
    let sale = read_json(&json)["config"]["sale_id"].to_string();

    // 30 more buyers on the same sale: the other 15 units go, and the 5
    // orders from before are neither "invented" nor double-counted.
    let second = finish(run([
        "--spawn", "1", "--sale", &sale, "--users", "30", "--json", json_arg,
    ]
    .map(String::from)
    .to_vec()))
    .await;
    assert_eq!(second.status.code(), Some(0), "{}", text(&second));
    let report = read_json(&json);
    assert_eq!(report["summary"]["counts"]["won"], 15);
    assert_eq!(report["stored"]["sold_before"], 5);
    assert_eq!(report["stored"]["confirmed"], 20);
    assert_eq!(orders_by_status(&scratch).await, [("confirmed".into(), 20)]);
}
