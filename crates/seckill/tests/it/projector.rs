//! What a room sees on a projector of 1024 by 768 pixels: the live page
//! and the lab's HTML page, in headless Chromium at that size, must show
//! their figures whole, at a size read from the back of the room, with no
//! sideways scrolling. Screenshots go to `target/screenshots/projector-*`.
//!
//! Like `browser.rs`, needs Debian's `chromium` and `chromium-driver`, and
//! fails, saying so, without them.

use std::path::Path;

use fantoccini::Client;
use serde_json::{Value, json};

use crate::browser::{ChromeDriver, PATIENCE, screenshot, text_of};
use crate::helpers::{Options, Scratch, eventually, seckill_command, spawn_app_with};
use crate::processes::{finish, text};

/// The projector: a common resolution of the rooms that have one.
const WIDTH: u32 = 1024;
const HEIGHT: u32 = 768;

/// A headless browser whose page is the projector's screen.
pub(crate) async fn projector(driver: &ChromeDriver, profile: &Path) -> Client {
    let browser = driver
        .browser_sized(profile, (WIDTH, HEIGHT), &["--hide-scrollbars"])
        .await;
    // The window's size counts the browser's own bars, even headless:
    // grow it by them, so that the page gets the whole screen.
    let viewport = |browser: Client| async move {
        browser
            .execute("return [window.innerWidth, window.innerHeight];", vec![])
            .await
            .expect("the viewport")
    };
    let inner = viewport(browser.clone()).await;
    let bars = |i: usize, of: u32| of - u32::try_from(inner[i].as_u64().expect("px")).expect("px");
    browser
        .set_window_size(WIDTH + bars(0, WIDTH), HEIGHT + bars(1, HEIGHT))
        .await
        .expect("a projector-sized page");
    assert_eq!(
        viewport(browser.clone()).await,
        json!([WIDTH, HEIGHT]),
        "the projector's screen"
    );
    browser
}

/// Wait until the element with this id says exactly `wanted` (a figure
/// `1` must not pass for `10`, as it would with `browser.rs`'s
/// `wait_for_text`, which looks for words in longer text).
async fn wait_for_text(browser: &Client, id: &str, wanted: &str) {
    eventually(PATIENCE, &format!("#{id} to say {wanted:?}"), || async {
        text_of(browser, id).await == wanted
    })
    .await;
}

/// Where each element of `selector` is on the screen, and the size of its
/// text: `[{text, left, right, top, bottom, px}]`; and how wide the page
/// is (wider than the screen: the room would have to scroll sideways).
async fn layout(browser: &Client, selector: &str) -> (Vec<Value>, f64) {
    let found = browser
        .execute(
            "const boxes = Array.from(document.querySelectorAll(arguments[0])).map(function (e) {
               const r = e.getBoundingClientRect();
               return { id: e.id, text: e.textContent.trim().slice(0, 40), left: r.left, right: r.right,
                        top: r.top, bottom: r.bottom,
                        px: parseFloat(getComputedStyle(e).fontSize) };
             });
             return [boxes, document.documentElement.scrollWidth];",
            vec![json!(selector)],
        )
        .await
        .expect("the layout");
    let boxes = found[0].as_array().expect("boxes").clone();
    assert!(!boxes.is_empty(), "nothing matches {selector}");
    (boxes, found[1].as_f64().expect("a width"))
}

/// Every element of `selector` whole on the first screen, its text at
/// least `min_px` high, and nothing wider than the screen.
async fn assert_on_screen(browser: &Client, selector: &str, min_px: f64) {
    let (boxes, page_width) = layout(browser, selector).await;
    assert!(
        page_width <= f64::from(WIDTH),
        "the page is {page_width} px wide: the room scrolls sideways"
    );
    for found in boxes {
        let at = |side: &str| found[side].as_f64().expect("a number");
        assert!(
            at("left") >= 0.0
                && at("right") <= f64::from(WIDTH)
                && at("top") >= 0.0
                && at("bottom") <= f64::from(HEIGHT),
            "{selector} is not whole on a {WIDTH}x{HEIGHT} screen: {found}"
        );
        assert!(
            at("px") >= min_px,
            "{selector} is too small to read: {found}"
        );
    }
}

/// The live page on the projector: every figure on the first screen, in
/// big digits; and words that say what a lock's state is (a lock with no
/// TTL never expires; a sale no lock ever guarded has no holder, not a
/// "free" lock).
#[tokio::test]
async fn the_live_page_shows_every_figure_on_one_projector_screen_in_words_that_teach() {
    let app = spawn_app_with(Options::default()).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let projector = projector(&driver, profile.path()).await;
    let sale = app.create_sale(10).await;
    projector
        .goto(&app.url(&format!("/sales/{sale}/live")))
        .await
        .expect("open the live page");
    wait_for_text(&projector, "connection", "Live").await;
    wait_for_text(&projector, "stock", "10").await;
    // No lock was ever taken here (as under `naive`, `lua`, `postgres`).
    wait_for_text(&projector, "holder", "none taken").await;
    app.buy(sale, "ann").await;
    wait_for_text(&projector, "accepted", "1").await;

    // The article's crash: a lock whose value is a time, not an owner,
    // left with no TTL (`SETNX` done, `EXPIRE` never).
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let () = redis::cmd("SET")
        .arg(&keys.lock)
        .arg("1764168000123")
        .query_async(&mut conn)
        .await
        .expect("SET the lock");
    wait_for_text(&projector, "pttl", "never (no TTL)").await;
    wait_for_text(&projector, "holder-fence", "none").await;
    screenshot(&projector, "projector-live.png").await;

    // The holder, the lock's line, each counter and its name.
    assert_on_screen(&projector, "#holder, #pttl, #fence", 20.0).await;
    assert_on_screen(&projector, ".counters td", 24.0).await;
    assert_on_screen(&projector, ".counters th", 16.0).await;
    assert_on_screen(&projector, "h2", 16.0).await;

    // A lock of the article's 56 years reads in years.
    let () = redis::cmd("SET")
        .arg(&keys.lock)
        .arg("1764168000123")
        .arg("PX")
        .arg(56_i64 * 365 * 24 * 3600 * 1000 + 3_600_000)
        .query_async(&mut conn)
        .await
        .expect("SET the lock");
    wait_for_text(&projector, "pttl", "in 56 years").await;
    projector.close().await.expect("close the browser");
}

/// A sale with a waiting room on the projector: the room's counters on
/// the first screen, each figure under its own name (the names were left,
/// the figures right: Active's figure read as Bought's).
#[tokio::test]
async fn the_live_pages_room_counters_sit_under_their_names_on_the_projector() {
    let app = spawn_app_with(Options::default()).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let projector = projector(&driver, profile.path()).await;
    let sale =
        crate::waiting_room::sale_with_room(&app, 10, 0, crate::waiting_room::fifo(10, 4)).await;
    for buyer in ["ann", "bob"] {
        crate::waiting_room::joined(&app, sale, buyer).await;
    }
    projector
        .goto(&app.url(&format!("/sales/{sale}/live")))
        .await
        .expect("open the live page");
    wait_for_text(&projector, "connection", "Live").await;
    wait_for_text(&projector, "room-closed", "open").await;
    screenshot(&projector, "projector-room.png").await;
    assert_on_screen(&projector, "#room .counters td", 24.0).await;
    assert_on_screen(&projector, "#room .counters th", 16.0).await;
    let (names, _) = layout(&projector, "#room .counters th").await;
    let (figures, _) = layout(&projector, "#room .counters td").await;
    assert_eq!(names.len(), figures.len());
    let middle = |found: &Value| {
        (found["left"].as_f64().expect("px") + found["right"].as_f64().expect("px")) / 2.0
    };
    for (name, figure) in names.iter().zip(&figures) {
        let text_middle = text_centre(&projector, &figure["id"]).await;
        assert!(
            (text_middle - middle(name)).abs() < 8.0,
            "{figure} is not under {name}: its text's middle at {text_middle} px"
        );
    }
    projector.close().await.expect("close the browser");
}

/// The middle of the text (not the box) of the element with this id.
async fn text_centre(browser: &Client, id: &Value) -> f64 {
    browser
        .execute(
            "const range = document.createRange();
             range.selectNodeContents(document.getElementById(arguments[0]));
             const r = range.getBoundingClientRect();
             return (r.left + r.right) / 2;",
            vec![id.clone()],
        )
        .await
        .expect("where the text is")
        .as_f64()
        .expect("px")
}

/// The lab's page on the projector: its table no wider than the screen,
/// its figures and each row's lesson at a readable size, each heading on
/// one line and named as the terminal's table names it, neighbouring
/// figures apart. Every row, as the
/// workshop runs it (the widest row name, a lock of 56 years, one left
/// with no TTL, four-digit latencies), on few buyers.
#[tokio::test]
async fn the_labs_page_fits_a_projector_screen_wide() {
    let scratch = Scratch::new().await;
    let dir = tempfile::tempdir().expect("a temp dir");
    let output = finish(seckill_command(
        &scratch,
        &[
            "lab",
            "--exit",
            "--users",
            "200",
            "--report-dir",
            dir.path().to_str().expect("a UTF-8 path"),
        ],
        &[],
    ))
    .await;
    assert_eq!(output.status.code(), Some(0), "{}", text(&output));

    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let projector = projector(&driver, profile.path()).await;
    projector
        .goto(&format!("file://{}", dir.path().join("lab.html").display()))
        .await
        .expect("open the lab's page");
    screenshot(&projector, "projector-lab.png").await;
    let (cells, page_width) = layout(&projector, "td, th").await;
    assert!(
        page_width <= f64::from(WIDTH),
        "the lab's page is {page_width} px wide: the room scrolls sideways"
    );
    for cell in cells {
        let right = cell["right"].as_f64().expect("a number");
        let px = cell["px"].as_f64().expect("a number");
        assert!(right <= f64::from(WIDTH), "off the screen: {cell}");
        assert!(px >= 15.0, "too small to read: {cell}");
    }
    let (lessons, _) = layout(&projector, "tr.lesson td").await;
    assert!(lessons.len() >= 12, "a lesson under each row: {lessons:?}");
    // The charts' labels as the page shows them, scaled to its width: a
    // line of text at least 13 px high, about 12 px letters (their
    // 12-pixel labels were shown about 10 px high, 11 px a line).
    let (labels, _) = layout(&projector, "svg text").await;
    for label in labels {
        let high = label["bottom"].as_f64().expect("px") - label["top"].as_f64().expect("px");
        assert!(high >= 13.0, "a chart's label too small to read: {label}");
    }

    // The room reads the terminal's table and the page side by side: one
    // name for each column, in the same order (the page adds some).
    let stdout = String::from_utf8_lossy(&output.stdout);
    let terminal: Vec<&str> = stdout
        .lines()
        .find(|line| line.starts_with("row "))
        .unwrap_or_else(|| panic!("no table on stdout: {stdout}"))
        .split("  ")
        .map(str::trim)
        .filter(|heading| !heading.is_empty())
        .collect();
    let (page, gaps) = headings_and_gaps(&projector).await;
    let shared: Vec<&str> = page
        .iter()
        .map(|(heading, _)| heading.as_str())
        .filter(|heading| terminal.contains(heading))
        .collect();
    assert_eq!(shared, terminal, "the page's headings: {page:?}");
    // Each heading on one line (they wrapped onto two at 1024 px).
    for (heading, lines) in &page {
        assert_eq!(*lines, 1, "{heading:?} wraps onto {lines} lines");
    }
    // Room between neighbours: "531 3326 ms" read as one figure.
    for gap in gaps {
        assert!(
            gap["gap"].as_f64().expect("px") >= 10.0,
            "two cells' texts too close: {gap}"
        );
    }
    projector.close().await.expect("close the browser");
}

/// The page's headings, each with the lines its text takes; and between
/// each two neighbouring cells of a row (headings too), the space from
/// the end of one's text to the start of the next's: `{left, right, gap}`.
async fn headings_and_gaps(browser: &Client) -> (Vec<(String, u64)>, Vec<Value>) {
    let found = browser
        .execute(
            "function text(e) {
               const range = document.createRange();
               range.selectNodeContents(e);
               const rects = Array.from(range.getClientRects()).filter(function (r) { return r.width > 0; });
               if (rects.length === 0) return null;
               return { left: Math.min.apply(null, rects.map(function (r) { return r.left; })),
                        right: Math.max.apply(null, rects.map(function (r) { return r.right; })),
                        lines: new Set(rects.map(function (r) { return Math.round(r.top); })).size };
             }
             const headings = Array.from(document.querySelectorAll('th')).map(function (th) {
               return [th.textContent.trim(), text(th).lines];
             });
             const gaps = [];
             document.querySelectorAll('tr:not(.lesson)').forEach(function (tr) {
               const cells = Array.from(tr.children);
               for (let i = 0; i + 1 < cells.length; i++) {
                 const a = text(cells[i]), b = text(cells[i + 1]);
                 if (a && b) gaps.push({ left: cells[i].textContent.trim(), right: cells[i + 1].textContent.trim(),
                                         gap: b.left - a.right });
               }
             });
             return [headings, gaps];",
            vec![],
        )
        .await
        .expect("the headings and the gaps");
    let headings = found[0]
        .as_array()
        .expect("headings")
        .iter()
        .map(|pair| {
            (
                pair[0].as_str().expect("a heading").to_owned(),
                pair[1].as_u64().expect("lines"),
            )
        })
        .collect();
    (headings, found[1].as_array().expect("gaps").clone())
}
