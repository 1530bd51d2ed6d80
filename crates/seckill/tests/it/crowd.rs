//! `seckill crowd`: people against bots, with the waiting room off, fifo
//! and lottery; every run keeps the promise, and fifo admits in the order
//! buyers joined once the sale is open.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{finish, text};

#[tokio::test]
async fn the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order() {
    let scratch = Scratch::new().await;
    let args = [
        "crowd",
        "--humans",
        "30",
        "--bots",
        "6",
        "--bot-addresses",
        "2",
        "--stock",
        "6",
        "--admit-per-sec",
        "5",
    ];
    let output = finish(seckill_command(&scratch, &args, &[])).await;
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));
    let header = stdout
        .lines()
        .find(|line| line.starts_with("room "))
        .unwrap_or_else(|| panic!("no table: {stdout}"));
    assert!(header.contains("inversions"), "{header}");
    let row = |setting: &str| -> Vec<String> {
        let line = stdout
            .lines()
            .find(|line| line.starts_with(&format!("{setting} ")))
            .unwrap_or_else(|| panic!("no {setting} row: {stdout}"));
        line.split_whitespace().map(str::to_owned).collect()
    };
    for setting in ["off", "fifo", "lottery"] {
        let cells = row(setting);
        assert_eq!(cells.last().map(String::as_str), Some("held"), "{cells:?}");
        // Every unit went to somebody: bots' and people's shares add up.
        let won = |cell: &str| -> u32 {
            cell.split('/')
                .next()
                .and_then(|n| n.parse().ok())
                .expect("won/units")
        };
        assert_eq!(won(&cells[1]) + won(&cells[2]), 6, "{cells:?}");
    }
    // Inversions "after the open (all)": none after the open under fifo.
    let fifo = row("fifo");
    assert_eq!(fifo[5], "0", "{fifo:?}");
    assert!(stdout.contains("verdict: PASS"), "{stdout}");
}
