//! What a person sees at 1024 by 768 pixels when a page cannot be shown:
//! a page in the storefront's layout, the message in words and a link
//! back, with the status the API gives the same mistake; never raw JSON.
//! Screenshots go to `target/screenshots/error-*`.
//!
//! Like `browser.rs`, needs Debian's `chromium` and `chromium-driver`, and
//! fails, saying so, without them.

use fantoccini::{Client, Locator};
use serde_json::Value;

use crate::browser::{ChromeDriver, screenshot, text_of};
use crate::helpers::spawn_app;
use crate::projector::projector;

/// The page the browser shows: its HTTP status, its heading, its text,
/// and where its link back goes.
async fn shown(browser: &Client) -> (u64, String, String, String) {
    let seen: Value = browser
        .execute(
            "const back = document.getElementById('back');
             return [performance.getEntriesByType('navigation')[0].responseStatus,
                     document.body.innerText,
                     back ? back.getAttribute('href') : ''];",
            vec![],
        )
        .await
        .expect("the page");
    (
        seen[0].as_u64().expect("a status"),
        text_of(browser, "error-heading").await,
        seen[1].as_str().expect("text").to_owned(),
        seen[2].as_str().expect("a link").to_owned(),
    )
}

#[tokio::test]
async fn error_pages_show_words_a_link_back_and_the_status_at_1024_by_768() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let browser = projector(&driver, profile.path()).await;
    for (path, status, heading, back, shot) in [
        ("/sales/999999", 404, "No such sale", "/", "error-sale.png"),
        ("/sales/abc", 404, "No such sale", "/", "error-sale-abc.png"),
        (
            "/orders/garbage",
            404,
            "No such order",
            "/",
            "error-order.png",
        ),
        (
            "/?page=99",
            404,
            "No such page",
            "/",
            "error-index-page.png",
        ),
    ] {
        browser.goto(&app.url(path)).await.expect("open the page");
        let (got, got_heading, text, link) = shown(&browser).await;
        screenshot(&browser, shot).await;
        assert_eq!(
            (got, got_heading.as_str(), link.as_str()),
            (status, heading, back),
            "{path}: {text}"
        );
        assert!(!text.contains("\"error\""), "{path} shows JSON: {text}");
    }

    // The buy form posted as a browser without JavaScript posts it (the
    // form's own submit, which the page's script does not see), with a
    // buyer id of spaces only.
    browser
        .goto(&app.url(&format!("/sales/{sale}")))
        .await
        .expect("open the sale");
    browser
        .execute(
            "document.getElementById('user_id').value = '   ';
             document.getElementById('buy-form').submit();",
            vec![],
        )
        .await
        .expect("post the form");
    browser
        .wait()
        .for_element(Locator::Id("error-heading"))
        .await
        .expect("the refusal's page");
    let (got, heading, text, link) = shown(&browser).await;
    screenshot(&browser, "error-buy-form.png").await;
    assert_eq!(
        (got, heading.as_str(), link),
        (400, "That did not work", format!("/sales/{sale}")),
        "{text}"
    );
    assert!(text.contains("must not be empty"), "{text}");
    assert!(!text.contains("\"error\""), "{text}");
}
