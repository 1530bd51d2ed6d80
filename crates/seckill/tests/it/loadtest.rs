//! The load test and the demo as their users run them: real processes, a
//! few hundred buyers, and then what the exit code, the reports and
//! PostgreSQL say.

use crate::helpers::{Scratch, loadtest_command, seckill_command};
use crate::processes::{
    finish, interrupt, orders_by_status, read_json, sale_count, start_until, text,
};

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
async fn the_demo_runs_both_strategies_side_by_side_and_exits_0() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let output = finish(seckill_command(
        &scratch,
        &[
            "demo",
            "--exit",
            "--users",
            "300",
            "--report-dir",
            dir.path().to_str().expect("a UTF-8 path"),
        ],
        &[("SECKILL_NAIVE_DELAY_MS", "30")],
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(stdout.contains("== side by side =="), "{stdout}");
    assert!(stdout.contains("demo verdict: PASS"), "{stdout}");
    for file in ["lock.json", "lock.html", "naive.json", "naive.html"] {
        let path = dir.path().join(file);
        assert!(path.exists(), "{file} missing");
        assert!(
            stdout.contains(&path.display().to_string()),
            "{file}'s path is not printed"
        );
    }
    let (lock, naive) = (
        read_json(&dir.path().join("lock.json")),
        read_json(&dir.path().join("naive.json")),
    );
    assert_eq!(lock["summary"]["counts"]["won"], 10);
    assert_eq!(lock["oversold_by"], 0);
    assert!(naive["oversold_by"].as_u64().expect("oversold_by") > 0);
    // Two sales of 10: 20 confirmed orders, and the naive excess rejected.
    let by_status = orders_by_status(&scratch).await;
    assert_eq!(by_status[0], ("confirmed".into(), 20), "{by_status:?}");

    // Both sales close after an hour, so repeated demos do not pile up as live sales.
    let pg = scratch.pg().await;
    let closing_in_an_hour: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM sales WHERE ends_at = starts_at + interval '1 hour'",
    )
    .fetch_one(&pg)
    .await
    .expect("count sales");
    assert_eq!(closing_in_an_hour, 2);

    // The naive run left Redis wrong; the demo put PostgreSQL's figures
    // back, so the page shows the truth: no unit left, ten buyers.
    let naive_sale = naive["config"]["sale_id"].as_i64().expect("a sale id");
    let keys = seckill_core::keys::SaleKeys::new(&scratch.prefix, naive_sale);
    let mut redis = redis::Client::open(scratch.redis_url())
        .expect("URL")
        .get_multiplexed_async_connection()
        .await
        .expect("Redis");
    let (stock, buyers): (Option<i64>, u64) = redis::pipe()
        .get(&keys.stock)
        .scard(&keys.buyers)
        .query_async(&mut redis)
        .await
        .expect("the naive sale in Redis");
    assert_eq!((stock, buyers), (Some(0), 10));
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

#[tokio::test]
async fn the_demo_keeps_serving_the_sale_page_until_interrupted() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let mut live = None;
    let (demo, buy) = start_until(
        seckill_command(
            &scratch,
            // The winners' orders stay unpaid for an hour, so that the
            // units are still sold when the printed purchase is tried.
            &[
                "demo",
                "--users",
                "100",
                "--payment-window-secs",
                "3600",
                "--report-dir",
                dir_arg,
            ],
            &[],
        ),
        "its live page, then a purchase to try",
        |line| {
            if let Some(url) = line.strip_prefix("The race, live, for a projector: ") {
                live = Some(url.to_owned());
            }
            Some(line.strip_prefix("Buy from a terminal: ")?.to_owned())
        },
    )
    .await;
    let live = live.expect("the live page is printed before the purchase");
    // The live page is the sale page's, for the projector.
    let page = live
        .strip_suffix("/live")
        .expect("the live page is under the sale page")
        .to_owned();

    let response = crate::helpers::client()
        .get(&page)
        .send()
        .await
        .expect("GET the sale page");
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("the page");
    assert!(body.contains("Phone, lock strategy"), "{body}");
    let response = crate::helpers::client()
        .get(&live)
        .send()
        .await
        .expect("GET the live page");
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("the page");
    assert!(body.contains("the race, live"), "{body}");

    // The purchase printed to try, as curl sends it: the demo sold its
    // ten units, so it is answered 409 sold_out (a malformed URL or body
    // would be a 404 or a 400).
    let (url, body) = buy
        .strip_prefix("curl -s -X POST ")
        .and_then(|rest| rest.split_once(" -d '"))
        .expect("a curl POST with a body");
    let response = crate::helpers::client()
        .post(url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body.strip_suffix('\'').expect("a quoted body").to_owned())
        .send()
        .await
        .expect("POST the purchase");
    assert_eq!(response.status(), 409);
    let answer: serde_json::Value = response.json().await.expect("JSON");
    assert_eq!(answer["error"], "sold_out");

    assert_eq!(interrupt(demo).await, Some(0));
    // Its instances are gone with it.
    assert!(crate::helpers::client().get(&page).send().await.is_err());
}

/// A demo killed with SIGKILL cannot stop its instances: they see that
/// their parent is gone and stop by themselves, rather than serving on,
/// orphaned.
#[tokio::test]
async fn the_instances_of_a_demo_killed_outright_stop_by_themselves() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let (mut demo, page) = start_until(
        seckill_command(
            &scratch,
            &["demo", "--users", "100", "--report-dir", dir_arg],
            &[],
        ),
        "its sale page",
        |line| Some(line.strip_prefix("The sale page stays up: ")?.to_owned()),
    )
    .await;
    let client = crate::helpers::client();
    let response = client.get(&page).send().await.expect("GET the sale page");
    assert_eq!(response.status(), 200);

    demo.kill().await.expect("SIGKILL the demo");
    crate::helpers::eventually(
        std::time::Duration::from_secs(20),
        "the instances of the killed demo to stop serving its sale page",
        || async { client.get(&page).send().await.is_err() },
    )
    .await;
}
