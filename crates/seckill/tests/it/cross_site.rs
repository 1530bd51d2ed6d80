//! Every form post another site starts is refused (`403
//! cross_site_request`) and changes nothing: the pay form, the admin's
//! create-a-sale, re-drive and logout forms (`pages.rs` checks the buy form
//! and the login). The same posts from the app's own pages go through.

use std::time::Duration;

use reqwest::header::CONTENT_TYPE;
use seckill_core::queue::Queue;

use crate::helpers::{TestApp, eventually, spawn_app};

/// What another site's page makes a browser send with its form post.
const FORGED: [(&str, &str); 2] = [
    ("origin", "https://evil.example"),
    ("sec-fetch-site", "cross-site"),
];

/// Post `form` to `path` as the admin signed in with `cookie`, with the
/// extra header `from` (who started the post, as a browser says it).
async fn post_form(
    app: &TestApp,
    path: &str,
    cookie: &str,
    form: &[(&str, &str)],
    from: (&str, &str),
) -> reqwest::Response {
    app.post_admin_form(path, cookie, form, &[from]).await
}

/// A form post refused as cross-site: `403`, as a page (a form is posted
/// from a page), its code named for whoever reads the source.
pub(crate) async fn refused_as_cross_site(response: reqwest::Response, what: &str) {
    assert_eq!(response.status(), 403, "{what}");
    let kind = response.headers()[CONTENT_TYPE]
        .to_str()
        .expect("ASCII")
        .to_owned();
    let page = response.text().await.expect("a page");
    assert!(kind.starts_with("text/html"), "{what}: {kind} {page}");
    assert!(
        page.contains(r#"data-error="cross_site_request""#),
        "{what}: {page}"
    );
}

#[tokio::test]
async fn the_pay_and_admin_forms_refuse_a_cross_site_post_and_change_nothing() {
    let app = spawn_app().await;
    let sale = app.create_sale(3).await;
    let order = app.buy(sale, "ann").await;
    app.drain().await;
    let cookie = app.log_in().await;
    // One dead-lettered order job, for the re-drive form: one attempt
    // allowed, and a lease that has run out when it is next reserved.
    let queue = Queue::new(app.keys(sale).queue);
    let mut conn = app.redis_conn().await;
    queue
        .enqueue(&mut conn, &[("broken", "{not json")], Duration::ZERO)
        .await
        .expect("enqueue");
    eventually(Duration::from_secs(10), "a dead-lettered job", || async {
        let lease = Duration::from_millis(1);
        let mut conn = app.redis_conn().await;
        let _ = queue
            .reserve(&mut conn, 1, lease, 1)
            .await
            .expect("reserve");
        queue.stats(&mut conn).await.expect("stats").dead == 1
    })
    .await;
    let sales_before = app.sale_count().await;
    let new_sale = [
        ("name", "Lamp"),
        ("stock", "1"),
        ("price_cents", "1"),
        ("starts_in_secs", "0"),
        ("duration_secs", ""),
    ];
    let pay = format!("/orders/{order}/pay");
    let redrive = format!("/admin/sales/{sale}/redrive");

    for from in FORGED {
        let what = |form: &str| format!("{form} with {from:?}");
        refused_as_cross_site(post_form(&app, &pay, "", &[], from).await, &what("pay")).await;
        refused_as_cross_site(
            post_form(&app, "/admin/sales", &cookie, &new_sale, from).await,
            &what("a new sale"),
        )
        .await;
        refused_as_cross_site(
            post_form(&app, &redrive, &cookie, &[("queue", "orders")], from).await,
            &what("a re-drive"),
        )
        .await;
        refused_as_cross_site(
            post_form(&app, "/admin/logout", &cookie, &[], from).await,
            &what("a logout"),
        )
        .await;
    }
    assert_eq!(
        app.order(order).await["status"],
        "confirmed",
        "paid by a forgery"
    );
    assert_eq!(
        app.sale_count().await,
        sales_before,
        "a sale created by a forgery"
    );
    assert_eq!(
        app.admin_status(&cookie).await,
        200,
        "logged out by a forgery"
    );
    assert_eq!(
        app.queue_stats(sale).await.dead,
        1,
        "re-driven by a forgery"
    );

    // From the app's own pages, each goes through.
    let own = ("origin", app.address.as_str());
    let paid = post_form(&app, &pay, "", &[], own).await;
    assert!(
        paid.status().is_redirection() || paid.status().is_success(),
        "{paid:?}"
    );
    assert_eq!(app.order(order).await["status"], "paid");
    let created = post_form(&app, "/admin/sales", &cookie, &new_sale, own).await;
    assert!(
        created.status().is_redirection() || created.status().is_success(),
        "{created:?}"
    );
    assert_eq!(app.sale_count().await, sales_before + 1);
    let redriven = post_form(&app, &redrive, &cookie, &[("queue", "orders")], own).await;
    assert!(
        redriven.status().is_redirection() || redriven.status().is_success(),
        "{redriven:?}"
    );
    assert_eq!(app.queue_stats(sale).await.dead, 0, "not re-driven");
    let logout = post_form(&app, "/admin/logout", &cookie, &[], own).await;
    assert_eq!(logout.status(), 303);
    assert_eq!(app.admin_status(&cookie).await, 401, "still signed in");
}
