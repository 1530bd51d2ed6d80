//! What an instructor does in front of a class, beyond the guide's commands
//! (`workshop.rs` runs those): a storefront made new with `seckill reset`,
//! which asks first; the demo holding its race until the class has the
//! live page open, then printing winners' orders ready to pay. (Elsewhere
//! a "room" is a sale's waiting room.)

use std::process::Stdio;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

use crate::helpers::{Options, TestApp, client, seckill_command, spawn_app_with};
use crate::processes::{RUN_LIMIT, interrupt, text};

/// `seckill reset` with `answer` typed at its question: its output.
async fn reset(app: &TestApp, answer: &str) -> std::process::Output {
    crate::processes::answered(seckill_command(&app.scratch, &["reset"], &[]), answer).await
}

/// Redis keys under the app's prefix.
async fn keys_under_prefix(app: &TestApp) -> Vec<String> {
    let mut conn = app.redis_conn().await;
    redis::cmd("KEYS")
        .arg(format!("{}:*", app.scratch.prefix))
        .query_async(&mut conn)
        .await
        .expect("KEYS")
}

#[tokio::test]
async fn reset_deletes_every_sale_order_and_key_only_when_told_yes() {
    let app = spawn_app_with(Options::default()).await;
    let sale = app.create_sale(10).await;
    app.buy(sale, "ann").await;
    app.drain().await;
    // The running instance counts its answers in memory and adds them to
    // Redis every 100 ms; wait for that, or its flush could land after
    // the reset and write the answers hash again.
    let answers = format!("{}:{{sale:{sale}}}:answers", app.scratch.prefix);
    crate::helpers::eventually(
        std::time::Duration::from_secs(10),
        "the answer to ann counted in Redis",
        || async {
            let mut conn = app.redis_conn().await;
            let accepted: Option<u64> = redis::cmd("HGET")
                .arg(&answers)
                .arg("accepted")
                .query_async(&mut conn)
                .await
                .expect("HGET");
            accepted == Some(1)
        },
    )
    .await;
    assert!(!keys_under_prefix(&app).await.is_empty());

    // Anything but "yes" deletes nothing, and says so.
    let refused = reset(&app, "y\n").await;
    assert_eq!(refused.status.code(), Some(1), "{}", text(&refused));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("nothing was deleted"),
        "{}",
        text(&refused)
    );
    assert_eq!(app.sale_count().await, 1);

    let done = reset(&app, "yes\n").await;
    assert_eq!(done.status.code(), Some(0), "{}", text(&done));
    assert!(
        String::from_utf8_lossy(&done.stdout).contains("deleted 1 sales and 1 orders"),
        "{}",
        text(&done)
    );
    assert_eq!(app.sale_count().await, 0);
    assert_eq!(keys_under_prefix(&app).await, Vec::<String>::new());
    // A new sale after the reset is a sale like any other, under a new id
    // (a running instance's cache may still hold the old one).
    let again = app.create_sale(1).await;
    assert_ne!(again, sale);
    app.buy(again, "bob").await;
}

/// `demo --wait-for-enter`: the live page's address first, then nothing
/// sold until Enter; afterwards, links to winners' orders that a volunteer
/// opens without a token.
#[tokio::test]
async fn the_demo_waits_for_enter_before_its_race_and_prints_orders_to_pay() {
    let app = spawn_app_with(Options::default()).await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let mut command = seckill_command(
        &app.scratch,
        &[
            "demo",
            "--users",
            "100",
            "--wait-for-enter",
            "--payment-window-secs",
            "180",
            "--report-dir",
            dir.path().to_str().expect("a UTF-8 path"),
        ],
        &[("SECKILL_NAIVE_DELAY_MS", "30")],
    );
    command.stdin(Stdio::piped());
    let mut demo = command.spawn().expect("the demo started");
    let mut lines = BufReader::new(demo.stdout.take().expect("stdout is piped")).lines();
    let live = tokio::time::timeout(RUN_LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("reading stdout") {
            if let Some(url) = line.split_whitespace().last()
                && url.starts_with("http")
                && url.ends_with("/live")
            {
                return url.to_owned();
            }
        }
        panic!("the demo ended before the live page's address");
    })
    .await
    .expect("the live page's address in time");
    let sale: i64 = live
        .trim_end_matches("/live")
        .rsplit('/')
        .next()
        .and_then(|id| id.parse().ok())
        .expect("a sale id in the live page's address");
    let base = live
        .split("/sales/")
        .next()
        .expect("the instance's address")
        .to_owned();

    // The race waits for the class: the page is there, nothing is sold.
    let page = client().get(&live).send().await.expect("GET the live page");
    assert_eq!(page.status(), 200);
    tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    let before = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(before["stock_left"], 10, "sold before Enter: {before}");

    let mut stdin = demo.stdin.take().expect("stdin is piped");
    stdin.write_all(b"\n").await.expect("pressing Enter");
    // The rest of the output: the orders' links come before the prompt.
    let mut orders = Vec::new();
    tokio::time::timeout(RUN_LIMIT, async {
        while let Some(line) = lines.next_line().await.expect("reading stdout") {
            if let Some(order) = line.trim().strip_prefix(&format!("{base}/orders/")) {
                orders.push(order.to_owned());
            }
            if line.contains("Press Ctrl-C to stop.") {
                return;
            }
        }
        panic!("the demo ended before its prompt");
    })
    .await
    .expect("the demo's prompt in time");
    assert_eq!(orders.len(), 3, "{orders:?}");
    let order = client()
        .get(format!("{base}/orders/{}", orders[0]))
        .send()
        .await
        .expect("GET an order's page");
    assert_eq!(order.status(), 200);
    let html = order.text().await.expect("HTML");
    assert!(html.contains("Pay"), "{html}");
    // Keep reading: a closed pipe would fail the demo's next print.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    assert_eq!(interrupt(demo).await, Some(0));
}
