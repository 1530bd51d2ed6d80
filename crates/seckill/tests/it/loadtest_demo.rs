//! `seckill demo` as its users run it: both strategies side by side, the
//! sale page served until SIGINT, and instances that stop by themselves
//! when the demo is killed outright.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{finish, interrupt, orders_by_status, read_json, start_until, text};

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
        .hlen(&keys.holds)
        .query_async(&mut redis)
        .await
        .expect("the naive sale in Redis");
    assert_eq!((stock, buyers), (Some(0), 10));
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
    assert!(body.contains("phone, lock strategy"), "{body}");
    let response = crate::helpers::client()
        .get(&live)
        .send()
        .await
        .expect("GET the live page");
    assert_eq!(response.status(), 200);
    let body = response.text().await.expect("the page");
    assert!(body.contains("the race, live"), "{body}");

    // The purchase printed to try, run as a person pastes it into a
    // shell: the demo sold its ten units, so it is answered 409 sold_out
    // (a malformed URL or body would be a 404 or a 400), and the answer
    // ends with a newline, so that the prompt starts a line of its own.
    assert!(buy.starts_with("curl "), "{buy}");
    let ran = tokio::process::Command::new("sh")
        .args(["-c", &buy])
        .output()
        .await
        .expect("sh runs the printed curl");
    let printed = String::from_utf8(ran.stdout).expect("UTF-8");
    assert!(ran.status.success(), "{buy}: {printed}");
    assert!(printed.ends_with("}\n"), "{buy} printed {printed:?}");
    let answer: serde_json::Value = serde_json::from_str(printed.trim()).expect("JSON");
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
