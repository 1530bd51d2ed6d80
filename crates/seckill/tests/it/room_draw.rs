//! A lottery's draw can be checked by anyone told its seed, as
//! storefront.md promises: a real `seckill serve` logs the seed once, at
//! the open, and every place drawn at a join before it is 1 + the first 40
//! bits of SHA1("{seed}:{buyer}").

use std::time::Duration;

use serde_json::json;

use crate::helpers::{Scratch, client, create_sale_with_at, eventually, seckill_command};
use crate::waiting_room::{joined_at, standing_at, ticket};

#[tokio::test]
async fn the_seed_is_logged_at_the_open_and_every_drawn_place_follows_from_it() {
    let scratch = Scratch::new().await;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free port")
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let logs = tempfile::NamedTempFile::new().expect("a log file");
    // At `info`, as `seckill serve` logs by default (the tests' processes
    // log errors only).
    let mut serve = seckill_command(
        &scratch,
        &["serve", "--bind", &format!("127.0.0.1:{port}")],
        &[("RUST_LOG", "info")],
    );
    // One file, one offset: what either stream writes goes after the other.
    let file = logs.reopen().expect("the log file");
    serve
        .stdout(file.try_clone().expect("the log file"))
        .stderr(file)
        .kill_on_drop(true);
    let mut server = serve.spawn().expect("serve starts");
    eventually(Duration::from_secs(60), "serve to answer", || async {
        client().get(format!("{url}/healthz")).send().await.is_ok()
    })
    .await;

    // Opens in 3 s: the three join before it, and are drawn places.
    let starts_at = chrono::Utc::now() + chrono::Duration::seconds(3);
    let sale = create_sale_with_at(
        &url,
        &json!({"name": "Drawn", "stock": 3, "price_cents": 100, "starts_at": starts_at,
                "waiting_room": {"mode": "lottery", "admit_per_sec": 10, "max_active": 3,
                                 "admission_secs": 60}}),
    )
    .await;
    let mut drawn = Vec::new();
    for buyer in ["ann", "bob", "cid"] {
        let standing = joined_at(&url, sale, buyer).await;
        let number = standing["number"].as_u64().expect("a drawn number");
        drawn.push((buyer, number, ticket(&standing)));
    }
    let text = || std::fs::read_to_string(logs.path()).expect("the logs");
    assert!(
        !text().contains("lottery drawn"),
        "the seed told before the open"
    );

    // The first visit after the open tells the draw, once.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let told = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            standing_at(&url, sale, &drawn[0].2).await;
            if text().contains("lottery drawn") {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await;
    assert!(told.is_ok(), "no draw logged: {}", text());
    let logged = text();
    let line = logged
        .lines()
        .find(|line| line.contains("lottery drawn"))
        .expect("the line");
    assert_eq!(logged.matches("lottery drawn").count(), 1, "{logged}");
    let seed = line
        .split(|c: char| !c.is_ascii_alphanumeric() && c != '_')
        .filter(|word| !word.is_empty())
        .skip_while(|word| *word != "seed")
        .nth(1)
        .unwrap_or_else(|| panic!("no seed in {line}"));
    // 128 bits: a drawn place is told at the join, so a seed small enough
    // to try every one (a 31-bit seed: about 2^31 SHA1s) is found from one
    // place, and with it the ids that draw the front of the line.
    assert!(
        seed.len() == 32 && seed.bytes().all(|b| b.is_ascii_hexdigit()),
        "not a 128-bit seed: {line}"
    );
    assert!(
        line.contains("drawn=3") || line.contains(r#""drawn":3"#),
        "{line}"
    );

    // Anyone told the seed draws the same places (SHA1 from Redis' own
    // `redis.sha1hex`, as the script that drew them).
    let mut conn = crate::helpers::redis_at(scratch.redis_url()).await;
    for (buyer, number, _) in &drawn {
        let digest: String = redis::cmd("EVAL")
            .arg("return redis.sha1hex(ARGV[1])")
            .arg(0)
            .arg(format!("{seed}:{buyer}"))
            .query_async(&mut conn)
            .await
            .expect("SHA1");
        let place = 1 + u64::from_str_radix(&digest[..10], 16).expect("hex");
        assert_eq!(
            *number, place,
            "{buyer}'s place does not follow from seed {seed}"
        );
    }
    server.kill().await.expect("stop serve");
}
