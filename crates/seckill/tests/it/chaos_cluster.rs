//! `seckill chaos --cluster`, short: a Redis Cluster of three shards, each
//! a primary and two replicas, two instances with `--redis-durability
//! replica`, a few seconds of load, and three of the cluster's faults:
//! the sale's primary killed after its replicas fell behind (a failover);
//! the sale's primary stopped past the node timeout and past the answer
//! bound (a stall that ends in a failover too, and catches a request that
//! waits for a stopped node); and the sale's replicas stopped while its
//! primary drops its clients (answers lost on the way: orders in doubt). Every `202` must survive both, every request be
//! answered within the bound, and every order in PostgreSQL have been
//! told to its buyer.

use std::time::Duration;

use crate::chaos::{chaos_run, check_of, exited_0, row_of};

#[tokio::test]
async fn on_a_cluster_with_replicas_a_failover_and_a_stall_take_back_no_202() {
    // Not beside the tests that saturate both cores: the cluster calls a
    // node failing after 1.5 s without an answer.
    let _cores = crate::helpers::cores_alone().await;
    let (output, report, _) = chaos_run(
        &[
            "--cluster",
            "--fault",
            "cluster-failover",
            "--fault",
            "sale-shard-stall",
            "--fault",
            "connection-drops",
            "--redis-durability",
            "replica",
            "--users",
            "1200",
            "--stock",
            "1000",
            "--rate",
            "100",
            "--duration-secs",
            "27",
        ],
        Duration::from_secs(150),
    )
    .await;
    let stdout = exited_0(&output);
    assert!(stdout.contains("verdict: PASS"), "{stdout}");

    for fault in ["cluster-failover", "sale-shard-stall", "connection-drops"] {
        let row = row_of(&report, fault);
        assert!(
            row["requests"].as_u64() > Some(0),
            "{fault} saw no load: {row}"
        );
        assert_eq!(row["ok"], true, "{fault}: {row}");
    }
    // The failover and the stall really failed the sale's shard over.
    let windows = report["windows"].as_array().expect("windows");
    assert_eq!(windows.len(), 3, "{stdout}");
    for window in windows.iter().filter(|w| w["fault"] != "connection-drops") {
        let note = window["note"].as_str().unwrap_or_default();
        assert!(note.contains("the cluster promoted"), "{note}");
    }
    for name in [
        "lost 202s (no Redis wipe in this run)",
        "requests with no answer",
        "answers later than the bound",
        "202s sent and answered while the sale's replicas were stopped",
        "orders in PostgreSQL not told to their buyer (a 202, or a 503 or 409 naming it)",
        "Redis stock = units - sold",
        "Redis buyers = PostgreSQL buyers",
        "answers 500 internal",
    ] {
        assert_eq!(check_of(&report, name)["ok"], true, "{name}: {stdout}");
    }
    assert!(report["summary"]["accepted"].as_u64() > Some(0), "{stdout}");
}
