//! Clients behind a proxy: the per-IP rate limit and the admin lock-out
//! count each client under its own address when a trusted proxy forwards
//! for it (`X-Forwarded-For`), and a header from anyone else changes
//! nothing. The rule itself is `seckill_web::client_ip`, tested here by
//! its cases first.
//!
//! The test client connects from 127.0.0.1, so "through a trusted proxy"
//! below means an app that trusts 127.0.0.1, and each request's header
//! plays the client the proxy forwards for.

use std::net::IpAddr;
use std::time::Duration;

use reqwest::header::SET_COOKIE;
use seckill_core::config::{RateLimitSettings, TrustedProxies};
use seckill_web::client_ip::from_forwarded_for;

use crate::helpers::{ADMIN_TOKEN, Options, Scratch, TestApp, seckill_command, spawn_app_with};

fn ip(address: &str) -> IpAddr {
    address.parse().expect("an IP address")
}

fn trusting(list: &str) -> TrustedProxies {
    TrustedProxies::parse(list).expect("a valid list")
}

#[test]
fn the_client_is_the_right_most_forwarded_address_that_is_not_a_trusted_proxy() {
    let trusted = trusting("127.0.0.1, 10.0.0.0/8");
    let peer = ip("127.0.0.1");
    let client = |lines: &[&str]| from_forwarded_for(peer, lines, &trusted);
    // What the client wrote itself (left of the address the first proxy
    // saw) is never believed.
    assert_eq!(
        client(&["198.51.100.1, 203.0.113.7, 10.1.2.3"]),
        ip("203.0.113.7")
    );
    assert_eq!(client(&["forged, 203.0.113.7"]), ip("203.0.113.7"));
    // Several header lines are one list, in order.
    assert_eq!(
        client(&["198.51.100.1", "203.0.113.7 ,10.1.2.3"]),
        ip("203.0.113.7")
    );
    assert_eq!(client(&["2001:db8::7"]), ip("2001:db8::7"));
    // No header: the peer.
    assert_eq!(client(&[]), peer);
}

#[test]
fn when_every_forwarded_address_is_trusted_the_farthest_hop_is_the_client() {
    let trusted = trusting("127.0.0.1,10.0.0.0/8");
    let peer = ip("127.0.0.1");
    assert_eq!(
        from_forwarded_for(peer, &["10.0.0.5, 10.1.2.3"], &trusted),
        ip("10.0.0.5")
    );
}

#[test]
fn a_malformed_header_from_a_trusted_proxy_leaves_the_peer_as_the_client() {
    let trusted = trusting("127.0.0.1,10.0.0.0/8");
    let peer = ip("127.0.0.1");
    for lines in [
        &["203.0.113.7, not-an-address"][..],
        &["203.0.113.7:4711"],
        &[""],
        &["203.0.113.7,,10.1.2.3"],
        &["203.0.113.7", "10.1.2.3, unknown"],
        &["[2001:db8::7]"],
    ] {
        assert_eq!(from_forwarded_for(peer, lines, &trusted), peer, "{lines:?}");
    }
}

#[test]
fn only_a_peer_inside_a_trusted_range_is_believed() {
    let trusted = trusting("10.0.0.0/8,fd00::/8");
    let header = ["203.0.113.7"];
    for believed in ["10.200.3.4", "10.0.0.0", "fd12:3456::1", "::ffff:10.9.9.9"] {
        assert_eq!(
            from_forwarded_for(ip(believed), &header, &trusted),
            ip("203.0.113.7"),
            "{believed}"
        );
    }
    for ignored in ["11.0.0.1", "127.0.0.1", "fe80::1"] {
        assert_eq!(
            from_forwarded_for(ip(ignored), &header, &trusted),
            ip(ignored),
            "{ignored}"
        );
    }
    // Nothing trusted (the default): nobody's header is believed.
    assert_eq!(
        from_forwarded_for(ip("127.0.0.1"), &header, &TrustedProxies::default()),
        ip("127.0.0.1")
    );
    // An IPv4 peer on a dual-stack socket is answered as IPv4.
    assert_eq!(
        from_forwarded_for(ip("::ffff:11.0.0.1"), &header, &trusted),
        ip("11.0.0.1")
    );
}

#[test]
fn a_trusted_proxy_that_is_not_an_address_or_a_range_is_refused_by_name() {
    assert_eq!(TrustedProxies::parse(""), Ok(TrustedProxies::default()));
    for (list, named) in [
        ("127.0.0.1,10.0.0.300", "10.0.0.300"),
        ("10.0.0.0/33", "10.0.0.0/33"),
        ("proxy.internal", "proxy.internal"),
        ("127.0.0.1 10.0.0.1", "127.0.0.1 10.0.0.1"),
    ] {
        let error = TrustedProxies::parse(list).expect_err(list);
        assert!(error.contains(&format!("`{named}`")), "{list}: {error}");
    }
}

#[tokio::test]
async fn serve_refuses_a_trusted_proxy_that_is_not_an_address_or_a_range() {
    let scratch = Scratch::new().await;
    let mut serve = seckill_command(
        &scratch,
        &["serve", "--bind", "127.0.0.1:0"],
        &[("SECKILL_TRUSTED_PROXIES", "127.0.0.1,10.0.0.0/33")],
    );
    // A serve that accepted the list would run until killed: the bound
    // only turns that into a failure (a refusal takes milliseconds).
    let output = tokio::time::timeout(Duration::from_secs(60), serve.kill_on_drop(true).output())
        .await
        .expect("serve started instead of refusing the list")
        .expect("serve runs");
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "it printed an address");
    let errors = String::from_utf8_lossy(&output.stderr);
    assert!(
        errors.contains("--trusted-proxies") && errors.contains("`10.0.0.0/33`"),
        "{errors}"
    );
}

/// One purchase a second per client IP with a burst of two (three at
/// once), behind the proxies `trusted`.
fn limited_behind(trusted: &str) -> Options {
    Options {
        limits: RateLimitSettings {
            rate_limit_per_ip: 1,
            rate_limit_burst: 2,
            trusted_proxies: trusting(trusted),
            ..RateLimitSettings::default()
        },
        ..Options::default()
    }
}

/// Purchases of `sale` sent all at once, one per `(buyer, X-Forwarded-For)`;
/// their statuses.
async fn purchase_at_once(app: &TestApp, sale: i64, requests: &[(String, String)]) -> Vec<u16> {
    let sent: Vec<_> = requests
        .iter()
        .map(|(buyer, forwarded_for)| {
            let request = app
                .client
                .post(app.url(&format!("/api/sales/{sale}/purchase")))
                .header("x-forwarded-for", forwarded_for)
                .json(&serde_json::json!({ "user_id": buyer }));
            tokio::spawn(async move { request.send().await.expect("POST").status().as_u16() })
        })
        .collect();
    let mut statuses = Vec::new();
    for request in sent {
        statuses.push(request.await.expect("a task"));
    }
    statuses
}

#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_rate_limit() {
    let app = spawn_app_with(limited_behind("127.0.0.1")).await;
    let sale = app.create_sale(100).await;
    // Ten at once from 203.0.113.7, each with a different address forged
    // in front of the one the proxy saw: over its burst, so some are
    // refused.
    let greedy: Vec<_> = (0..10)
        .map(|i| {
            (
                format!("greedy-{i}"),
                format!("198.51.100.{i}, 203.0.113.7"),
            )
        })
        .collect();
    let statuses = purchase_at_once(&app, sale, &greedy).await;
    assert!(statuses.contains(&202), "{statuses:?}");
    assert!(statuses.contains(&429), "{statuses:?}");
    // Another client behind the same proxy still has its whole burst.
    let other: Vec<_> = (0..3)
        .map(|i| (format!("other-{i}"), "192.0.2.44".to_owned()))
        .collect();
    let statuses = purchase_at_once(&app, sale, &other).await;
    assert_eq!(statuses, [202, 202, 202]);
}

#[tokio::test]
async fn with_no_trusted_proxy_a_forged_forwarded_address_shares_its_peers_limit() {
    let app = spawn_app_with(limited_behind("")).await;
    let sale = app.create_sale(100).await;
    let forged: Vec<_> = (0..10)
        .map(|i| (format!("forger-{i}"), format!("203.0.113.{i}")))
        .collect();
    let statuses = purchase_at_once(&app, sale, &forged).await;
    assert!(statuses.contains(&429), "{statuses:?}");
}

/// `POST /admin/login` with `token`, as the client a trusted proxy
/// forwards for (`forwarded_for`); the status and whether a cookie was set.
async fn log_in_as(app: &TestApp, forwarded_for: &str, token: &str) -> (u16, bool) {
    let response = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
        .post(app.url("/admin/login"))
        .header("x-forwarded-for", forwarded_for)
        .form(&[("token", token)])
        .send()
        .await
        .expect("POST /admin/login");
    (
        response.status().as_u16(),
        response.headers().contains_key(SET_COOKIE),
    )
}

#[tokio::test]
async fn wrong_admin_tokens_through_a_trusted_proxy_lock_out_only_their_client() {
    let app = spawn_app_with(Options {
        limits: RateLimitSettings {
            trusted_proxies: trusting("127.0.0.1"),
            ..RateLimitSettings::default()
        },
        ..Options::default()
    })
    .await;
    for _ in 0..5 {
        assert_eq!(log_in_as(&app, "203.0.113.7", "guess").await, (401, false));
    }
    assert_eq!(
        log_in_as(&app, "203.0.113.7", ADMIN_TOKEN).await,
        (429, false)
    );
    // Forging a fresh address in front of its own does not get it out.
    assert_eq!(
        log_in_as(&app, "198.51.100.1, 203.0.113.7", ADMIN_TOKEN).await,
        (429, false)
    );
    let api = app
        .post_sale(&serde_json::json!({"name": "Lamp", "stock": 1, "price_cents": 1}))
        .header("x-forwarded-for", "203.0.113.7")
        .send()
        .await
        .expect("POST /api/sales");
    assert_eq!(api.status(), 429);
    // Another admin behind the same proxy logs in.
    assert_eq!(
        log_in_as(&app, "192.0.2.44", ADMIN_TOKEN).await,
        (303, true)
    );
}
