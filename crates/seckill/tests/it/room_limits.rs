//! What one client can cost a waiting room: joins per client address are
//! limited unless the limit is turned off, and a room can cap its line.

use serde_json::{Value, json};

use crate::helpers::{Options, spawn_app, spawn_app_with};
use crate::waiting_room::{join, joined, line_length, sale_with_room};
use seckill_core::config::RateLimitSettings;

#[tokio::test]
async fn joins_from_one_address_are_limited_by_default() {
    // The limits `seckill serve` starts with when none is set.
    let app = spawn_app_with(Options {
        limits: RateLimitSettings::default(),
        ..Options::default()
    })
    .await;
    let sale = sale_with_room(
        &app,
        10,
        60,
        json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 1, "admission_secs": 60}),
    )
    .await;
    let mut refused = 0;
    for n in 0..30 {
        let answer = join(&app, sale, &format!("made-up-{n}")).await;
        if answer.status() == 429 {
            let body: Value = answer.json().await.expect("an error");
            assert_eq!(body["error"], "rate_limited", "{body}");
            refused += 1;
        } else {
            assert_eq!(answer.status(), 200);
        }
    }
    // A burst of 10, then 2 a second: made-up ids from one address fill
    // the line no faster than that.
    assert!(refused >= 15, "{refused} of 30 joins refused");
    assert_eq!(line_length(&app, sale).await, 30 - refused);
}

#[tokio::test]
async fn a_full_line_answers_409_line_full_and_keeps_whoever_is_in_it() {
    let app = spawn_app().await;
    let room = json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 1,
                      "admission_secs": 60, "max_line": 2});
    let sale = sale_with_room(&app, 10, 60, room).await;
    joined(&app, sale, "ann").await;
    joined(&app, sale, "bob").await;
    let full = join(&app, sale, "cid").await;
    assert_eq!(full.status(), 409);
    let body: Value = full.json().await.expect("an error");
    assert_eq!(body["error"], "line_full", "{body}");
    // Who is in line keeps their place, refreshes and all.
    assert_eq!(joined(&app, sale, "ann").await["position"], 1);
    assert_eq!(line_length(&app, sale).await, 2);
    // The cap is the sale's: it reads back as it was set.
    let read: Value = app.get_json(&format!("/api/sales/{sale}")).await;
    assert_eq!(read["waiting_room"]["max_line"], 2, "{read}");
}
