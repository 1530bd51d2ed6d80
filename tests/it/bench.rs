//! `seckill bench` as a process: it runs, and says what it measured.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{RUN_LIMIT, confirmed_orders, finish, finish_within, text};

/// `seckill bench`, small: every row measured or said not to be, each
/// beside its target, and the drained orders really in PostgreSQL.
#[tokio::test]
async fn the_bench_measures_each_row_beside_its_target() {
    let _cores = crate::helpers::cores_alone().await;
    let scratch = Scratch::new().await;
    let args = [
        "bench",
        "--secs",
        "0.5",
        "--burst-users",
        "200",
        "--drain-orders",
        "300",
        "--pages",
        "200",
    ];
    // Every row: about a minute alone on 2 cores, two to three times that
    // on a slower machine beside the rest of the suite.
    let output = finish_within(2 * RUN_LIMIT, seckill_command(&scratch, &args, &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    for figure in [
        "burst, 10 units, 2 instances: first send to last win",
        "accepted purchases/s on one sale, lock",
        "accepted purchases/s on one sale, lua / redis-benchmark running the script",
        "accepted purchases/s, lock, 3 sales at once: 3-master cluster vs 1 Redis",
        "worker drain into PostgreSQL, orders/s",
        "worker drain / one server-side INSERT of as many rows",
        "idle worker: 202 to order confirmed, p50",
        "same burst: memory of the larger instance after it (VmRSS)",
        "sold-out answers / bare actix handler (wrk)",
        "storefront index, 20 sales / sale page (wrk)",
        "storefront index, 1,000 sales / 20 sales (wrk)",
        "open sale pages on one instance: Redis commands/s they add, RSS",
    ] {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(figure))
            .unwrap_or_else(|| panic!("no row {figure}:\n{stdout}"));
        assert!(
            line.split_whitespace()
                .any(|word| word.contains(|c: char| c.is_ascii_digit())),
            "{line}"
        );
    }
    // The drain's 300 orders, the burst's 10 and the idle run's 50 were
    // confirmed; the rolled-back baseline left nothing.
    let confirmed = confirmed_orders(&scratch).await;
    assert!(confirmed >= 360, "{confirmed} confirmed orders");
}

/// `seckill bench --only idle`: that row and no other, and only its orders.
#[tokio::test]
async fn the_bench_measures_only_the_rows_asked_for() {
    let scratch = Scratch::new().await;
    let output = finish(seckill_command(&scratch, &["bench", "--only", "idle"], &[])).await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows: Vec<&str> = stdout
        .lines()
        .skip(1)
        .filter(|line| !line.is_empty())
        .collect();
    assert_eq!(rows.len(), 1, "{stdout}");
    assert!(
        rows[0].starts_with("idle worker: 202 to order confirmed, p50"),
        "{stdout}"
    );
    assert_eq!(confirmed_orders(&scratch).await, 50);
}
