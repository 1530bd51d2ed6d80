//! Where a waiting room is made and seen: `seckill sale create`, the
//! admin's form, and `/metrics`. (What a room does is `waiting_room.rs`.)

use std::time::Duration;

use serde_json::{Value, json};

use crate::helpers::spawn_app;
use crate::waiting_room::{buy, not_admitted};

/// `/metrics` of a `seckill serve` process (its own figures, not the test
/// binary's shared ones): the rooms' buyers by state.
#[tokio::test]
async fn metrics_count_the_buyers_waiting_admitted_and_bought_in_the_rooms() {
    let scratch = crate::helpers::Scratch::new().await;
    let (server, url, store) = crate::processes::serve_process(&scratch, &[]).await;
    let room = seckill_core::domain::RoomSettings {
        mode: seckill_core::domain::RoomMode::Fifo,
        admit_per_sec: 1_000,
        max_active: 1,
        admission_secs: 60,
        max_line: None,
    };
    let new = seckill_core::domain::NewSale::builder("Roomed", 5)
        .waiting_room(room)
        .build(chrono::Utc::now())
        .expect("a sale");
    let sale = store.create_sale(&new).await.expect("created").id;
    let http = crate::helpers::client();
    let mut tickets = Vec::new();
    for buyer in ["ann", "bob", "cid", "dee"] {
        tickets.push(crate::waiting_room::joined_at(&url, sale, buyer).await);
    }
    // ann was admitted at her join (max_active 1); she buys.
    let admission = tickets[0]["admission"]
        .as_str()
        .expect("ann admitted")
        .to_owned();
    let bought = http
        .post(format!("{url}/api/sales/{sale}/purchase"))
        .json(&json!({ "user_id": "ann", "admission": admission }))
        .send()
        .await
        .expect("a purchase");
    assert_eq!(bought.status(), 202);
    // bob is driven to admitted (ann's place among the active is free),
    // so that each figure is known exactly: cid and dee wait.
    let bobs = tickets[1]["ticket"].as_str().expect("a ticket").to_owned();
    let url = &url;
    crate::helpers::eventually(Duration::from_secs(10), "bob admitted", || {
        let (http, bobs) = (&http, &bobs);
        async move {
            let now: Value = http
                .get(format!("{url}/api/sales/{sale}/queue"))
                .header("Seckill-Ticket", bobs)
                .send()
                .await
                .expect("a status")
                .json()
                .await
                .expect("a standing");
            now["admitted"] == true
        }
    })
    .await;
    let scrape = http
        .get(format!("{url}/metrics"))
        .send()
        .await
        .expect("metrics")
        .text()
        .await
        .expect("a body");
    let figure = |state: &str| {
        let line = format!("seckill_room_buyers{{state=\"{state}\"}} ");
        scrape
            .lines()
            .find_map(|l| l.strip_prefix(line.as_str()))
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no {state} in {scrape}"))
    };
    // ann bought, bob is admitted, cid and dee wait: two admissions in
    // all. (Each figure apart: a sum would not see two swapped.)
    assert_eq!(figure("bought"), 1);
    assert_eq!(figure("admitted"), 1);
    assert_eq!(figure("waiting"), 2);
    assert_eq!(figure("admissions"), 2);
    assert_eq!(figure("expired"), 0);
    assert_eq!(figure("abandoned"), 0);
    assert_eq!(crate::processes::interrupt(server).await, Some(0));
}

/// `seckill sale create --waiting-room ...`: the room comes with the
/// sale; settings out of range, or given without a room, are refused
/// with a clear message and nothing is stored.
#[tokio::test]
async fn sale_create_puts_a_room_in_front_and_refuses_bad_room_settings() {
    let scratch = crate::helpers::Scratch::new().await;
    let create = async |extra: &[&str]| {
        let mut args = vec!["sale", "create", "--name", "Lamp", "--stock", "2"];
        args.extend_from_slice(extra);
        crate::helpers::seckill_command(&scratch, &args, &[])
            .output()
            .await
            .expect("seckill sale create")
    };
    for (extra, expected) in [
        (
            &["--waiting-room", "fifo", "--admit-per-sec", "0"][..],
            "waiting_room.admit_per_sec must be between 1 and 10000",
        ),
        (
            &["--waiting-room", "lottery", "--admission-secs", "5"][..],
            "waiting_room.admission_secs must be between 10 and 3600",
        ),
        (&["--waiting-room", "random"][..], "invalid value 'random'"),
        (&["--max-active", "5"][..], "--waiting-room"),
    ] {
        let output = create(extra).await;
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{extra:?} was accepted");
        assert!(stderr.contains(expected), "{extra:?}: {stderr}");
    }
    assert_eq!(crate::processes::sale_count(&scratch).await, 0);

    let output = create(&["--waiting-room", "lottery", "--admit-per-sec", "5"]).await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let sale: Value = serde_json::from_slice(&output.stdout).expect("the sale as JSON");
    assert_eq!(
        sale["waiting_room"],
        json!({"mode": "lottery", "admit_per_sec": 5, "max_active": 100, "admission_secs": 120})
    );
    let app = crate::helpers::spawn_app_on(scratch, Default::default()).await;
    let id = sale["id"].as_i64().expect("an id");
    assert_eq!(
        not_admitted(buy(&app, id, "ann", None).await).await,
        "missing"
    );
    assert_eq!(
        app.get_json(&format!("/api/sales/{id}")).await["waiting_room"]["mode"],
        "lottery"
    );
}

/// The admin's create-a-sale form puts a room in front of the sale, and
/// refuses a setting out of range with the page and its reason.
#[tokio::test]
async fn the_admin_form_creates_a_sale_with_a_room_and_refuses_a_bad_setting() {
    let app = spawn_app().await;
    let cookie = app.log_in().await;
    let post = async |admit_per_sec: &str| {
        crate::helpers::no_redirects()
            .post(app.url("/admin/sales"))
            .header(reqwest::header::COOKIE, &cookie)
            .form(&[
                ("name", "Roomed mug"),
                ("stock", "3"),
                ("price_cents", "100"),
                ("starts_in_secs", "0"),
                ("duration_secs", ""),
                ("waiting_room", "fifo"),
                ("admit_per_sec", admit_per_sec),
                ("max_active", "2"),
                ("admission_secs", "60"),
            ])
            .send()
            .await
            .expect("POST /admin/sales")
    };
    for bad in ["0", "many"] {
        let refused = post(bad).await;
        assert_eq!(refused.status(), 400, "{bad}");
        let page = refused.text().await.expect("HTML");
        // Named by the form's label, as the person typed it.
        assert!(
            page.contains("Not created: Room&#39;s admissions per second"),
            "{bad}: {page}"
        );
    }
    assert_eq!(app.sale_count().await, 0);
    let created = post("5").await;
    assert_eq!(created.status(), 303);
    let sale: i64 = created.headers()[reqwest::header::LOCATION]
        .to_str()
        .expect("ASCII")
        .trim_start_matches("/admin/sales/")
        .parse()
        .expect("a sale id");
    let room = app.get_json(&format!("/api/sales/{sale}")).await["waiting_room"].clone();
    assert_eq!(
        room,
        json!({"mode": "fifo", "admit_per_sec": 5, "max_active": 2, "admission_secs": 60})
    );
    assert_eq!(
        not_admitted(buy(&app, sale, "ann", None).await).await,
        "missing"
    );
}
