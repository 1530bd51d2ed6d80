//! What a person sees at 1024 by 768 pixels when a page cannot be shown:
//! a page in the storefront's layout, the message in words and a link
//! back, with the status the API gives the same mistake; never raw JSON.
//! Screenshots go to `target/screenshots/error-*`.
//!
//! Like `browser.rs`, needs Debian's `chromium` and `chromium-driver`, and
//! fails, saying so, without them.

use fantoccini::{Client, Locator};
use serde_json::Value;

use crate::browser::{ChromeDriver, PATIENCE, screenshot, text_of};
use crate::helpers::{eventually, spawn_app};
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

/// The value of the input with this id.
async fn value_of(browser: &Client, id: &str) -> String {
    browser
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|error| panic!("#{id}: {error}"))
        .prop("value")
        .await
        .expect("a value")
        .unwrap_or_default()
}

/// Replace what the input with this id holds with `text`, as a person types.
async fn type_into(browser: &Client, id: &str, text: &str) {
    let input = browser
        .find(Locator::Id(id))
        .await
        .unwrap_or_else(|error| panic!("#{id}: {error}"));
    input.clear().await.expect("clear");
    input.send_keys(text).await.expect("type");
}

/// The admin signs in, types a sale with no units, and presses Create: the
/// form, on the first screen, comes back as typed, the units marked, the
/// reason above it; then a right figure creates the sale.
#[tokio::test]
async fn a_refused_admin_form_keeps_what_was_typed_at_1024_by_768() {
    let app = spawn_app().await;
    let driver = ChromeDriver::start().await;
    let profile = tempfile::tempdir().expect("a temporary directory");
    let browser = projector(&driver, profile.path()).await;
    browser.goto(&app.url("/admin")).await.expect("open /admin");
    type_into(&browser, "token", crate::helpers::ADMIN_TOKEN).await;
    crate::browser::click(&browser, "log-in").await;
    browser
        .wait()
        .for_element(Locator::Id("create-form"))
        .await
        .expect("the admin page");
    let top = browser
        .execute(
            "return document.getElementById('create-heading').getBoundingClientRect().top;",
            vec![],
        )
        .await
        .expect("where the form is")
        .as_f64()
        .expect("px");
    assert!(
        top < 384.0,
        "the form starts {top} px down: not in the top half of the first screen"
    );
    screenshot(&browser, "admin-form.png").await;
    // Its Create button too, under a browser's own bars (about 110 px of
    // the 768): a newcomer found it below the fold.
    let create = browser
        .execute(
            "return document.getElementById('create').getBoundingClientRect().bottom;",
            vec![],
        )
        .await
        .expect("where the button is")
        .as_f64()
        .expect("px");
    assert!(create <= 650.0, "the Create button ends {create} px down");

    type_into(&browser, "name", "Blue kettle").await;
    type_into(&browser, "stock", "0").await;
    type_into(&browser, "price_cents", "1250").await;
    type_into(&browser, "duration_secs", "600").await;
    // The browser's own check (min="1") would stop the post: the server's
    // is the one under test.
    browser
        .execute(
            "document.getElementById('create-form').noValidate = true;",
            vec![],
        )
        .await
        .expect("no browser check");
    crate::browser::click(&browser, "create").await;
    browser
        .wait()
        .for_element(Locator::Id("create-refused"))
        .await
        .expect("the refusal");
    screenshot(&browser, "admin-form-refused.png").await;
    assert!(
        text_of(&browser, "create-refused")
            .await
            .contains("Units must be between 1 and"),
        "{}",
        text_of(&browser, "create-refused").await
    );
    for (id, typed) in [
        ("name", "Blue kettle"),
        ("stock", "0"),
        ("price_cents", "1250"),
        ("duration_secs", "600"),
        ("starts_in_secs", "30"),
    ] {
        assert_eq!(value_of(&browser, id).await, typed, "#{id}");
    }
    let marked: Value = browser
        .execute(
            "return Array.from(document.querySelectorAll('[aria-invalid=true]')).map(e => e.id)
                .concat([document.activeElement.id,
                         document.getElementById('create-refused').getBoundingClientRect().bottom]);",
            vec![],
        )
        .await
        .expect("the marked fields");
    assert_eq!(marked[0], "stock", "{marked}");
    assert_eq!(
        marked[1], "stock",
        "the marked field has the focus: {marked}"
    );
    assert!(
        marked[2].as_f64().expect("px") < 768.0,
        "the reason is on the first screen: {marked}"
    );
    assert_eq!(marked.as_array().map(Vec::len), Some(3), "{marked}");

    type_into(&browser, "stock", "4").await;
    crate::browser::click(&browser, "create").await;
    eventually(PATIENCE, "the new sale's admin page", || async {
        browser
            .current_url()
            .await
            .is_ok_and(|url| url.path().starts_with("/admin/sales/"))
    })
    .await;
    assert_eq!(app.sale_count().await, 1);
}
