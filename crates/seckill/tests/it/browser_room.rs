//! A sale's waiting room in a real browser (headless Chromium, driven as
//! `browser.rs` drives it): a buyer joins behind others, watches their
//! place fall without a reload, is let in and buys; a latecomer finds the
//! room closed. Screenshots go to `target/screenshots/`.

use std::cell::Cell;

use fantoccini::Client;
use serde_json::json;

use crate::browser::{ChromeDriver, PATIENCE, click, screenshot, text_of, wait_for_text};
use crate::helpers::{eventually, spawn_app};
use crate::waiting_room::{joined, sale_with_room};

/// The buyer's place in line as the page shows it; `None` while the page
/// shows no place (before joining, or once admitted).
async fn place(browser: &Client) -> Option<u64> {
    text_of(browser, "room-position").await.parse().ok()
}

/// Whether the page is still the one that was marked (a reload clears it).
async fn not_reloaded(browser: &Client) -> bool {
    browser
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .expect("read the marker")
        == json!(true)
}

#[tokio::test]
async fn a_browser_waits_its_turn_watching_its_place_fall_buys_and_a_latecomer_finds_the_room_closed()
 {
    let app = spawn_app().await;
    let driver = ChromeDriver::start().await;
    let profiles = tempfile::tempdir().expect("a temporary directory");
    let buyer = driver.browser(&profiles.path().join("buyer")).await;
    // One unit; one buyer let in a second, and room for all of them at
    // once (the ones ahead never buy): the browser's place falls by one a
    // second, for as long as there are buyers ahead of it.
    let room = json!({"mode": "fifo", "admit_per_sec": 1, "max_active": 100, "admission_secs": 60});
    let sale = sale_with_room(&app, 1, 0, room).await;
    for n in 0..5 {
        joined(&app, sale, &format!("ahead-{n}")).await;
    }
    let page = app.url(&format!("/sales/{sale}"));

    buyer.goto(&page).await.expect("open the sale page");
    wait_for_text(&buyer, "join", "Join the line").await;
    assert_eq!(
        text_of(&buyer, "buy").await,
        "",
        "Buy offered outside the line"
    );
    click(&buyer, "join").await;
    // The room admits only when asked, a second's worth at most: four of
    // the five are still ahead however long the browser took to start.
    let shown = Cell::new(None);
    eventually(PATIENCE, "a place in line", || async {
        shown.set(place(&buyer).await);
        shown.get().is_some()
    })
    .await;
    let first = shown.get().expect("a place");
    assert!(
        first >= 2,
        "too near the front to watch the place fall: {first}"
    );
    screenshot(&buyer, "room-1-waiting.png").await;
    // Set in the page's window: a reload would take it away.
    buyer
        .execute("window.__notReloaded = true;", vec![])
        .await
        .expect("set a marker");

    eventually(PATIENCE, "the place to fall", || async {
        place(&buyer).await.is_some_and(|now| now < first)
    })
    .await;
    assert!(not_reloaded(&buyer).await, "the page reloaded to move");
    wait_for_text(&buyer, "room-admitted", "Your turn has come").await;
    screenshot(&buyer, "room-2-admitted.png").await;
    click(&buyer, "buy").await;
    wait_for_text(&buyer, "outcome", "You got one!").await;
    wait_for_text(&buyer, "order-link", "Follow your order").await;
    wait_for_text(&buyer, "room-bought", "You have bought").await;
    assert!(not_reloaded(&buyer).await, "the page reloaded on its way");
    screenshot(&buyer, "room-3-bought.png").await;
    assert_eq!(app.redis_stock(sale).await, Some(0));

    // A second browser, after the sell-out.
    let latecomer = driver.browser(&profiles.path().join("latecomer")).await;
    latecomer.goto(&page).await.expect("open the sale page");
    wait_for_text(&latecomer, "room-closed", "The room is closed").await;
    wait_for_text(&latecomer, "room-closed-why", "every unit is taken").await;
    assert_eq!(
        text_of(&latecomer, "join").await,
        "",
        "a closed room offers to join"
    );
    screenshot(&latecomer, "room-4-closed.png").await;

    buyer.close().await.expect("close the buyer's browser");
    latecomer
        .close()
        .await
        .expect("close the latecomer's browser");
}

/// Where the element of `id` ends, from the top of the screen (px).
async fn bottom_of(browser: &Client, id: &str) -> f64 {
    browser
        .execute(
            "return document.getElementById(arguments[0]).getBoundingClientRect().bottom;",
            vec![json!(id)],
        )
        .await
        .expect("where the element is")
        .as_f64()
        .expect("px")
}

/// What a screen of 1024 by 768 shows of a page under the browser's own
/// bars (tabs, address, bookmarks: about 110 px of a common desktop
/// browser), in px from the page's top.
const FIRST_SCREEN: f64 = 650.0;

/// A buyer at 1024 by 768 behind a room full of admitted buyers who do
/// not buy: the place and why the line waits are on the first screen;
/// once admitted, so is the Buy button (it was 659 px down, under the
/// room's explanations), and the buyer id can no longer be changed (a
/// turn is one buyer's).
#[tokio::test]
async fn at_1024_by_768_the_place_the_reason_and_the_buy_button_are_on_the_first_screen() {
    let app = spawn_app().await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let buyer = crate::projector::projector(&driver, profile.path()).await;
    // One buyer may buy at a time, for 10 s: the holder's turn, then ours.
    let room =
        json!({"mode": "fifo", "admit_per_sec": 1000, "max_active": 1, "admission_secs": 10});
    let sale = sale_with_room(&app, 1, 0, room).await;
    let holder = crate::waiting_room::ticket(&joined(&app, sale, "holder").await);
    crate::waiting_room::admitted(&app, sale, &holder).await;

    buyer
        .goto(&app.url(&format!("/sales/{sale}")))
        .await
        .expect("open the sale page");
    click(&buyer, "join").await;
    wait_for_text(&buyer, "room-position", "1").await;
    wait_for_text(&buyer, "room-full", "1 buyer may buy now").await;
    screenshot(&buyer, "room-full-1024.png").await;
    for id in ["room-position", "room-full"] {
        let bottom = bottom_of(&buyer, id).await;
        assert!(
            bottom <= FIRST_SCREEN,
            "#{id} ends {bottom} px down, below the first screen"
        );
    }

    wait_for_text(&buyer, "room-admitted", "Your turn has come").await;
    screenshot(&buyer, "room-admitted-1024.png").await;
    let bottom = bottom_of(&buyer, "buy").await;
    assert!(
        bottom <= FIRST_SCREEN,
        "the Buy button ends {bottom} px down, below the first screen"
    );
    let readonly = buyer
        .execute(
            "return document.getElementById('user_id').readOnly;",
            vec![],
        )
        .await
        .expect("the buyer id's field");
    assert_eq!(
        readonly,
        json!(true),
        "the buyer id can be changed after the admission"
    );
    click(&buyer, "buy").await;
    wait_for_text(&buyer, "outcome", "You got one!").await;
    buyer.close().await.expect("close the browser");
}
