//! The storefront in a real browser: headless Chromium, driven over
//! WebDriver (`chromedriver`) with the `fantoccini` crate.
//!
//! One browser watches the countdown, buys, follows its order to
//! "confirmed" and pays; a second browser, never reloaded, sees the units
//! left fall. Screenshots of each step go to `target/screenshots/`.
//!
//! Needs Debian's `chromium` and `chromium-driver` packages (`.ci/run`
//! installs them). Without them the test fails, saying so: a browser test
//! that skips itself would pass without testing anything.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use seckill_core::config::WorkerSettings;
use seckill_core::worker::Worker;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::helpers::{
    Options, Scratch, TestApp, cluster, create_sale_at, eventually, spawn_app_with,
};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// How long a page may take to show what a step expects. Generous: the
/// test checks behaviour, never speed.
pub(crate) const PATIENCE: Duration = Duration::from_secs(30);

/// A `chromedriver` of this test's own, on a free port. Dropping it kills
/// its whole process group, the browsers it started included.
pub(crate) struct ChromeDriver {
    child: tokio::process::Child,
    url: String,
}

impl ChromeDriver {
    pub(crate) async fn start() -> Self {
        for program in [CHROMIUM, CHROMEDRIVER] {
            assert!(
                Path::new(program).exists(),
                "{program} is missing: the browser tests need Debian's Chromium and ChromeDriver; \
                 install them with `apt-get install chromium chromium-driver` (.ci/run does)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let child = tokio::process::Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            // Its own process group, so that Drop can kill the browsers too.
            .process_group(0)
            .kill_on_drop(true)
            .spawn()
            .expect("starting chromedriver");
        let url = format!("http://127.0.0.1:{port}");
        let status = format!("{url}/status");
        eventually(PATIENCE, "chromedriver to answer", || async {
            reqwest::get(&status)
                .await
                .is_ok_and(|r| r.status().is_success())
        })
        .await;
        Self { child, url }
    }

    /// A new headless browser with a profile of its own, phone-sized.
    pub(crate) async fn browser(&self, profile: &Path) -> Client {
        self.browser_sized(profile, (412, 915), &[]).await
    }

    /// A new headless browser with a profile of its own, its window
    /// `width` by `height` pixels, with Chromium's `extra` arguments.
    pub(crate) async fn browser_sized(
        &self,
        profile: &Path,
        (width, height): (u32, u32),
        extra: &[&str],
    ) -> Client {
        let mut args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--disable-dev-shm-usage".to_owned(),
            format!("--user-data-dir={}", profile.display()),
            format!("--window-size={width},{height}"),
        ];
        args.extend(extra.iter().map(|arg| (*arg).to_owned()));
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".to_owned(),
            json!({ "binary": CHROMIUM, "args": args }),
        );
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a Chromium session")
    }
}

impl Drop for ChromeDriver {
    fn drop(&mut self) {
        if let Some(pid) = self.child.id() {
            let _ = killpg(Pid::from_raw(pid as i32), Signal::SIGKILL);
        }
    }
}

fn screenshots_dir() -> PathBuf {
    let dir = crate::helpers::repo_root().join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("target/screenshots");
    dir
}

pub(crate) async fn screenshot(browser: &Client, name: &str) {
    let png = browser.screenshot().await.expect("a screenshot");
    std::fs::write(screenshots_dir().join(name), png).expect("saving a screenshot");
}

/// The text of the element with this id, or "" while there is none.
pub(crate) async fn text_of(browser: &Client, id: &str) -> String {
    match browser.find(Locator::Id(id)).await {
        Ok(element) => element.text().await.unwrap_or_default(),
        Err(_) => String::new(),
    }
}

pub(crate) async fn wait_for_text(browser: &Client, id: &str, wanted: &str) {
    eventually(PATIENCE, &format!("#{id} to say {wanted:?}"), || async {
        text_of(browser, id).await.contains(wanted)
    })
    .await;
}

pub(crate) async fn is_enabled(browser: &Client, id: &str) -> bool {
    match browser.find(Locator::Id(id)).await {
        Ok(element) => element.is_enabled().await.unwrap_or(false),
        Err(_) => false,
    }
}

pub(crate) async fn click(browser: &Client, id: &str) {
    browser
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|error| panic!("#{id}: {error}"))
        .click()
        .await
        .unwrap_or_else(|error| panic!("clicking #{id}: {error}"));
}

/// The app with a worker running in the background, as `seckill serve` has,
/// giving buyers `window_secs` to pay.
async fn app_with_worker(window_secs: u64) -> (TestApp, CancellationToken) {
    let settings = WorkerSettings {
        payment_window_secs: window_secs,
        poll_ms: 20,
        ..WorkerSettings::default()
    };
    let app = spawn_app_with(Options {
        worker: settings.clone(),
        ..Options::default()
    })
    .await;
    let stop = CancellationToken::new();
    let worker = Worker::new(app.store.clone(), settings);
    tokio::spawn(worker.run(stop.clone()));
    (app, stop)
}

#[tokio::test]
async fn a_buyer_watches_the_countdown_buys_and_pays_while_another_browser_sees_units_fall() {
    let (app, stop_worker) = app_with_worker(120).await;
    let driver = ChromeDriver::start().await;
    let profiles = tempfile::tempdir().expect("a temporary directory");
    let buyer = driver.browser(&profiles.path().join("buyer")).await;
    let watcher = driver.browser(&profiles.path().join("watcher")).await;

    // Far enough ahead that a browser slowed by the rest of the suite (two
    // shared cores) still loads the page before the opening.
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(12);
    let sale = app
        .create_sale_with(json!({
            "name": "Workshop phone", "stock": 3, "price_cents": 19_900, "starts_at": starts_at,
        }))
        .await;
    let page = app.url(&format!("/sales/{sale}"));

    // Before the opening: a countdown, and a Buy button that does nothing.
    buyer.goto(&page).await.expect("open the sale page");
    wait_for_text(&buyer, "countdown", "Opens in").await;
    assert!(
        !is_enabled(&buyer, "buy").await,
        "Buy is enabled before the start"
    );
    screenshot(&buyer, "1-countdown.png").await;

    // The second browser opens the page once, and is never reloaded: a
    // marker set in its window would vanish with a reload.
    watcher.goto(&page).await.expect("open the sale page");
    wait_for_text(&watcher, "stock-left", "3").await;
    watcher
        .execute("window.__notReloaded = true;", vec![])
        .await
        .expect("set a marker");

    // The countdown runs out, the button comes alive.
    eventually(PATIENCE, "the Buy button to come alive", || async {
        is_enabled(&buyer, "buy").await
    })
    .await;
    wait_for_text(&buyer, "countdown", "The sale is open.").await;
    click(&buyer, "buy").await;
    wait_for_text(&buyer, "outcome", "You got one!").await;
    screenshot(&buyer, "2-bought.png").await;
    let order_link = buyer
        .find(Locator::Id("order-link"))
        .await
        .expect("a link to the order")
        .attr("href")
        .await
        .expect("its href")
        .expect("an href");
    assert!(order_link.starts_with("/orders/"), "{order_link}");

    // Units left fall in the other browser, live.
    wait_for_text(&watcher, "stock-left", "2").await;
    app.buy(sale, "someone-else").await;
    wait_for_text(&watcher, "stock-left", "1").await;
    wait_for_text(&watcher, "sold", "2").await;
    let marker = watcher
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .expect("read the marker");
    assert_eq!(marker, json!(true), "the watching page was reloaded");
    screenshot(&watcher, "3-units-falling.png").await;

    // Buying again in the same browser is refused in words.
    eventually(PATIENCE, "the Buy button to be ready again", || async {
        is_enabled(&buyer, "buy").await
    })
    .await;
    click(&buyer, "buy").await;
    wait_for_text(&buyer, "outcome", "You already have one").await;

    // Follow the order: pending, then confirmed by the worker; pay; paid.
    buyer
        .goto(&app.url(&order_link))
        .await
        .expect("open the order page");
    wait_for_text(&buyer, "status", "confirmed").await;
    wait_for_text(&buyer, "time-left", "left to pay").await;
    screenshot(&buyer, "4-confirmed.png").await;
    click(&buyer, "pay").await;
    wait_for_text(&buyer, "status", "paid").await;
    screenshot(&buyer, "5-paid.png").await;

    let statuses: Vec<String> = app
        .orders(sale)
        .await
        .into_iter()
        .map(|(_, _, status)| status)
        .collect();
    assert!(statuses.contains(&"paid".to_owned()), "{statuses:?}");

    buyer.close().await.expect("close the buyer's browser");
    watcher.close().await.expect("close the watcher's browser");
    stop_worker.cancel();
}

#[tokio::test]
async fn the_order_page_turns_cancelled_when_the_window_closes_unpaid() {
    // A window far longer than the browser takes to start, closed by hand
    // once the page shows the order confirmed.
    let (app, stop_worker) = app_with_worker(600).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let browser = driver.browser(profile.path()).await;
    let sale = app.create_sale(1).await;
    let order = app.buy(sale, "slow-payer").await;

    browser
        .goto(&app.url(&format!("/orders/{order}")))
        .await
        .expect("open the order page");
    wait_for_text(&browser, "status", "confirmed").await;
    browser
        .execute("window.__notReloaded = true;", vec![])
        .await
        .expect("set a marker");
    crate::payment::make_deadlines_due(&app, sale, &[order]).await;
    // Nobody pays: the page follows the order to its end, unreloaded.
    wait_for_text(&browser, "status", "cancelled").await;
    wait_for_text(&browser, "headline", "went back on sale").await;
    assert!(
        !browser
            .find(Locator::Id("pay"))
            .await
            .expect("the pay button")
            .is_displayed()
            .await
            .expect("is it shown"),
        "the Pay button is still offered"
    );
    let marker = browser
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .expect("read the marker");
    assert_eq!(marker, json!(true), "the order page was reloaded");
    screenshot(&browser, "7-cancelled.png").await;
    eventually(PATIENCE, "the unit to be back on sale", || async {
        app.redis_stock(sale).await == Some(1)
    })
    .await;
    browser.close().await.expect("close the browser");
    stop_worker.cancel();
}

/// Fill the input with this id.
async fn type_into(browser: &Client, id: &str, text: &str) {
    let input = browser
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|error| panic!("#{id}: {error}"));
    input.clear().await.expect("clear the input");
    input.send_keys(text).await.expect("type into the input");
}

#[tokio::test]
async fn an_admin_logs_in_through_the_form_and_creates_a_sale_in_a_real_browser() {
    // Real form posts from Chromium: they carry Origin and Sec-Fetch-Site,
    // which the cross-site check must accept; and the Secure login cookie
    // must come back over plain HTTP to 127.0.0.1.
    let app = spawn_app_with(Options::default()).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let admin = driver.browser(profile.path()).await;

    admin.goto(&app.url("/admin")).await.expect("open /admin");
    type_into(&admin, "token", "wrong").await;
    click(&admin, "log-in").await;
    eventually(PATIENCE, "the wrong token to be refused", || async {
        admin
            .source()
            .await
            .is_ok_and(|html| html.contains("missing or wrong admin token"))
    })
    .await;

    type_into(&admin, "token", crate::helpers::ADMIN_TOKEN).await;
    click(&admin, "log-in").await;
    wait_for_text(&admin, "create-heading", "Create a sale").await;
    type_into(&admin, "name", "Browser lamp").await;
    type_into(&admin, "stock", "7").await;
    type_into(&admin, "starts_in_secs", "0").await;
    click(&admin, "create").await;
    wait_for_text(&admin, "redis-stock", "7").await;
    wait_for_text(&admin, "pg-stock", "7").await;
    screenshot(&admin, "6-admin-sale.png").await;
    assert_eq!(app.sale_count().await, 1);
    admin.close().await.expect("close the browser");
}

#[tokio::test]
async fn the_live_page_counts_a_purchase_and_names_the_lock_holder_as_they_happen() {
    let app = spawn_app_with(Options::default()).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let projector = driver.browser(profile.path()).await;
    // A projector's screen, not a phone's.
    projector
        .set_window_size(1280, 800)
        .await
        .expect("a projector-sized window");
    let sale = app.create_sale(5).await;

    projector
        .goto(&app.url(&format!("/sales/{sale}/live")))
        .await
        .expect("open the live page");
    wait_for_text(&projector, "connection", "Live").await;
    wait_for_text(&projector, "stock", "5").await;
    assert_eq!(text_of(&projector, "accepted").await, "0");

    app.buy(sale, "ann").await;
    wait_for_text(&projector, "accepted", "1").await;
    wait_for_text(&projector, "buyers", "1").await;

    // A holder, set as an instance named "projector-demo" would take the
    // lock: the next fence number, and a value in the lock's format.
    let keys = app.keys(sale);
    let mut conn = app.redis_conn().await;
    let fence: u64 = redis::cmd("INCR")
        .arg(&keys.fence)
        .query_async(&mut conn)
        .await
        .expect("INCR the fence");
    let () = redis::cmd("SET")
        .arg(&keys.lock)
        .arg(format!("{fence}:projector-demo:3f9a"))
        .arg("PX")
        .arg(20_000)
        .query_async(&mut conn)
        .await
        .expect("SET the lock");
    wait_for_text(&projector, "holder", "projector-demo").await;
    wait_for_text(&projector, "holder-fence", &fence.to_string()).await;
    wait_for_text(
        &projector,
        "holders",
        &format!("fence {fence} · projector-demo"),
    )
    .await;
    screenshot(&projector, "8-live.png").await;
    projector.close().await.expect("close the browser");
}

/// The value of the accepted-purchases series on the admin page's figures
/// table, as the browser shows it (0 before the first purchase).
async fn accepted_on_admin_page(admin: &Client) -> f64 {
    text_of(admin, "figures")
        .await
        .lines()
        .find(|line| line.contains(r#"answer="accepted",strategy="lock""#))
        .and_then(|line| line.split_whitespace().last())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0.0)
}

/// The instance is a process of its own: its figures are its own, where
/// this test binary's are shared with every test running beside it, so
/// the page must show exactly the two purchases made here.
#[tokio::test]
async fn the_admin_page_shows_the_instances_figures_and_follows_them_without_a_reload() {
    let scratch = Scratch::new().await;
    let mut processes = cluster(&scratch, &[]);
    let url = processes
        .start_app("admin", &[])
        .await
        .expect("the instance starts");
    let sale = create_sale_at(&url, "Lamp", 5).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let admin = driver.browser(profile.path()).await;
    admin
        .goto(&format!("{url}/admin"))
        .await
        .expect("open /admin");
    type_into(&admin, "token", crate::helpers::ADMIN_TOKEN).await;
    click(&admin, "log-in").await;
    wait_for_text(&admin, "figures", "seckill_event_streams").await;
    // Set in the page's window: a reload would take it away.
    admin
        .execute("window.__notReloaded = true;", vec![])
        .await
        .expect("set a marker");
    assert_eq!(accepted_on_admin_page(&admin).await, 0.0);
    for buyer in ["ann", "bob"] {
        let answer = crate::helpers::client()
            .post(format!("{url}/api/sales/{sale}/purchase"))
            .json(&json!({ "user_id": buyer }))
            .send()
            .await
            .expect("POST purchase");
        assert_eq!(answer.status(), 202, "{buyer}");
    }
    eventually(
        PATIENCE,
        "the page to show 2 accepted purchases",
        || async { accepted_on_admin_page(&admin).await == 2.0 },
    )
    .await;
    let marker = admin
        .execute("return window.__notReloaded === true;", vec![])
        .await
        .expect("read the marker");
    assert_eq!(marker, json!(true), "the admin page was reloaded");
    screenshot(&admin, "7-admin-figures.png").await;
    admin.close().await.expect("close the browser");
    processes.stop().await;
}
