//! `seckill lab` as an instructor runs it: the real binary, every row on
//! instances of its own, and then what the table, the JSON, PostgreSQL and
//! Redis say.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{confirmed_orders, finish, interrupt, read_json, start_until, text};

/// The rows of `lab.json`, by label (`article+hold-pause`).
fn rows_by_label(document: &Value) -> BTreeMap<String, Value> {
    document["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|row| {
            let strategy = row["row"]["strategy"].as_str().expect("a strategy");
            let label = match row["row"]["knob"].as_str().expect("a knob") {
                "none" => strategy.to_owned(),
                knob => format!("{strategy}+{knob}"),
            };
            (label, row.clone())
        })
        .collect()
}

/// The whole lesson with its default workload, the workshop guide's last
/// step (`workshop.rs` runs it as the guide does, serving, and checks it
/// here): every strategy, each bug made to happen by its knob, every row
/// as expected. `stdout` is what the lab printed, `dir` where its reports
/// went, `scratch` its database.
pub async fn the_full_lab_holds(scratch: &Scratch, dir: &Path, stdout: &str) {
    assert!(
        stdout.contains("lab verdict: every row as expected"),
        "{stdout}"
    );
    let document = read_json(&dir.join("lab.json"));
    assert_eq!(document["as_expected"], true);
    let rows = rows_by_label(&document);
    let strategies = [
        "naive", "article", "getset", "decr", "lock", "lua", "postgres",
    ];
    for strategy in strategies {
        assert!(rows.contains_key(strategy), "no {strategy} row");
        assert!(
            stdout.lines().any(|line| line.starts_with(strategy)),
            "{strategy} is not in the table:\n{stdout}"
        );
    }
    assert_eq!(rows.len(), 13);
    let figure = |label: &str, name: &str| rows[label]["figures"][name].clone();
    for label in [
        "naive",
        "article+hold-pause",
        "getset+hold-pause",
        "getset+clock-skew",
    ] {
        let oversold = figure(label, "oversold").as_u64().expect("a count");
        assert!(oversold > 0, "{label} did not oversell");
        // PostgreSQL refused exactly the excess.
        assert_eq!(figure(label, "rejected"), oversold, "{label}");
        // Every unit of the row's sale (one for the clock-skew row) sold.
        assert_eq!(
            figure(label, "confirmed"),
            figure(label, "units"),
            "{label}"
        );
    }
    assert!(
        figure("article+hold-pause", "stuck_lock")
            .as_str()
            .is_some_and(|s| s.contains("years"))
    );
    assert_eq!(
        figure("article+crash-after-setnx", "stuck_lock"),
        "no TTL, left"
    );
    assert_eq!(figure("article+crash-after-setnx", "crashed"), 1);
    assert_eq!(figure("decr+hold-pause", "duplicate_buyers"), 5);
    assert_eq!(figure("decr+hold-pause", "confirmed"), 5);
    assert!(
        figure("lock+hold-pause", "fenced")
            .as_u64()
            .expect("a count")
            > 0
    );
    assert_eq!(figure("lock+hold-pause", "accepted"), 0);
    // The buyers of the refused commits were told so, `503 lock_lost`.
    assert!(
        figure("lock+hold-pause", "lock_lost")
            .as_u64()
            .expect("a count")
            > 0
    );
    // The header is true of the rows under it.
    for differs in [
        "article+crash-after-setnx: 1 app instance",
        "getset+clock-skew: 1 unit",
        "decr+hold-pause: 5 buyers, each sending twice",
    ] {
        assert!(stdout.contains(differs), "{differs}:\n{stdout}");
    }
    for label in ["lock", "lua", "postgres"] {
        assert_eq!(figure(label, "accepted"), 10, "{label}");
        assert_eq!(figure(label, "oversold"), 0, "{label}");
        assert_eq!(figure(label, "rejected"), 0, "{label}");
        assert!(
            figure(label, "sell_out_ms").is_number(),
            "{label} did not sell out"
        );
    }
    for file in [
        "lab.html",
        "naive.html",
        "naive.json",
        "lock+hold-pause.html",
    ] {
        assert!(dir.join(file).exists(), "{file} missing");
    }
    // No row's sale holds more confirmed orders than it had units, and the
    // rows' counts are what PostgreSQL holds.
    for (label, row) in &rows {
        assert!(
            row["figures"]["confirmed"].as_u64() <= row["figures"]["units"].as_u64(),
            "{label}: more confirmed orders than units"
        );
    }
    // Each row's sale is named for its row and the run's time: two runs'
    // sales can be told apart on the storefront.
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM sales ORDER BY id")
        .fetch_all(&scratch.pg().await)
        .await
        .expect("the sales' names");
    assert_eq!(names.len(), 13);
    for name in &names {
        assert!(name.starts_with("Lab "), "{name}");
    }
    for label in rows.keys() {
        assert_eq!(
            names
                .iter()
                .filter(|n| n.ends_with(&format!(": {label}")))
                .count(),
            1,
            "{label}: {names:?}"
        );
    }
    let confirmed = confirmed_orders(scratch).await;
    let expected: u64 = rows
        .values()
        .map(|row| row["figures"]["confirmed"].as_u64().expect("a count"))
        .sum();
    assert_eq!(confirmed, i64::try_from(expected).expect("small"));
}

/// A row that does not show what it must fails the lab: `naive` with one
/// buyer cannot oversell, so the lab exits 1 and says which row and why.
/// A pairing the lesson does not teach runs, judged by PostgreSQL only.
#[tokio::test]
async fn a_row_not_as_expected_exits_1_and_an_untaught_pairing_runs() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let lonely = finish(seckill_command(
        &scratch,
        &[
            "lab",
            "--exit",
            "--strategy",
            "naive",
            "--users",
            "1",
            "--report-dir",
            dir_arg,
        ],
        &[],
    ))
    .await;
    assert_eq!(lonely.status.code(), Some(1), "{}", text(&lonely));
    let stdout = String::from_utf8_lossy(&lonely.stdout);
    assert!(stdout.contains("NO: nothing was oversold"), "{stdout}");
    assert!(
        stdout.contains("lab verdict: a row NOT as expected"),
        "{stdout}"
    );

    let untaught = finish(seckill_command(
        &scratch,
        &[
            "lab",
            "--exit",
            "--strategy",
            "lua",
            "--knob",
            "hold-pause",
            "--users",
            "50",
            "--report-dir",
            dir_arg,
        ],
        &[],
    ))
    .await;
    assert_eq!(untaught.status.code(), Some(0), "{}", text(&untaught));
    let rows = rows_by_label(&read_json(&dir.path().join("lab.json")));
    let row = &rows["lua+hold-pause"];
    assert_eq!(row["row"]["expect"], "postgres_holds");
    assert_eq!(row["figures"]["accepted"], 10);
}

/// Wrong flags are refused before anything starts.
#[tokio::test]
async fn the_lab_refuses_an_unknown_knob_and_a_bad_fraction() {
    let scratch = Scratch::new().await;
    for (args, says) in [
        (vec!["lab", "--knob", "gc-pause"], "gc-pause"),
        (vec!["lab", "--dup", "2"], "between 0 and 1"),
        (vec!["lab", "--strategy", "optimistic"], "optimistic"),
        // No row of the lesson uses this knob without a strategy named.
        (
            vec!["lab", "--exit", "--knob", "redis-delay"],
            "name a strategy too",
        ),
    ] {
        let output = finish(seckill_command(&scratch, &args, &[])).await;
        assert_eq!(output.status.code(), Some(2), "{}", text(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(says), "{args:?}: {stderr}");
    }
}

/// Without `--exit`, each row's sale is served by an instance with the
/// row's strategy until Ctrl-C, so the class can open the pages and buy.
#[tokio::test]
async fn without_exit_the_lab_serves_each_rows_sale_until_interrupted() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let dir_arg = dir.path().to_str().expect("a UTF-8 path");
    let args = [
        "lab",
        "--strategy",
        "lua",
        "--stock",
        "20",
        "--users",
        "10",
        "--report-dir",
        dir_arg,
    ];
    // The table's line starts with "lua" too; the page's line has the URL.
    let (lab, page) = start_until(
        seckill_command(&scratch, &args, &[]),
        "the lua page",
        |line| {
            let url = line.trim().strip_prefix("lua")?.split_whitespace().next()?;
            url.starts_with("http").then(|| url.to_owned())
        },
    )
    .await;

    let client = crate::helpers::client();
    let sale = page.rsplit('/').next().expect("a sale id").to_owned();
    let base = page.trim_end_matches(&format!("/sales/{sale}")).to_owned();
    let page_answer = client.get(&page).send().await.expect("GET the sale page");
    assert_eq!(page_answer.status(), 200);
    // 10 of 20 units went in the run; the class can buy one more.
    let bought = client
        .post(format!("{base}/api/sales/{sale}/purchase"))
        .json(&serde_json::json!({"user_id": "someone-in-the-room"}))
        .send()
        .await
        .expect("POST purchase");
    assert_eq!(bought.status(), 202);

    assert_eq!(interrupt(lab).await, Some(0));
    assert!(client.get(&page).send().await.is_err(), "still serving");
}
