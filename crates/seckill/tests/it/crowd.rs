//! `seckill crowd`: people against bots, with the waiting room off, fifo
//! and lottery; every run keeps the promise, fifo admits everyone in the
//! order they joined, the lottery shuffles those who joined before the
//! open, and the join limit per address, on as in a shop, holds back the
//! bots that share one.

use crate::helpers::{Scratch, seckill_command};
use crate::processes::{finish, text};

#[tokio::test]
async fn the_crowd_runs_each_setting_keeps_the_promise_and_fifo_keeps_arrival_order() {
    let scratch = Scratch::new().await;
    let args = [
        "crowd",
        "--humans",
        "30",
        // 14 bots on one address: the join limit (on, as in a shop: 10
        // at once, then 2 a second) refuses 4 of their joins, which they
        // send again after the Retry-After.
        "--bots",
        "14",
        "--bot-addresses",
        "1",
        // Units for the buyers who join after the open too: at 6, the
        // early joiners took every place and every unit, and a room that
        // shuffled its later joiners passed.
        "--stock",
        "30",
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
        assert_eq!(won(&cells[1]) + won(&cells[2]), 30, "{cells:?}");
    }
    // Inversions, after the open (and among all): none at all under fifo;
    // the lottery's shuffle among all, and none after the open, where it
    // serves in arrival order too.
    let fifo = row("fifo");
    assert_eq!(
        (fifo[5].as_str(), fifo[6].as_str()),
        ("0", "(0)"),
        "{fifo:?}"
    );
    let lottery = row("lottery");
    assert_eq!(lottery[5], "0", "{lottery:?}");
    assert_ne!(
        lottery[6], "(0)",
        "the lottery kept arrival order: {lottery:?}"
    );
    assert!(
        stdout.contains("joins limited: 2/s an address, a burst of 10"),
        "{stdout}"
    );
    for room in ["fifo", "lottery"] {
        let told = stdout
            .lines()
            .find(|line| line.starts_with(&format!("bots were told, room {room}:")))
            .unwrap_or_else(|| panic!("no bots' answers for {room}: {stdout}"));
        assert!(
            told.contains("join 429"),
            "the join limit refused no bot: {told}"
        );
        assert!(told.contains("join 200 x14"), "a bot never joined: {told}");
    }
    assert!(stdout.contains("verdict: PASS"), "{stdout}");
}
