//! The rows measured with `wrk` (one thread, 64 connections, `--secs` per
//! run), each beside its baseline in the same run:
//! - a sold-out purchase (answered from the instance's sold-out flag)
//!   against a bare actix-web handler that parses the same JSON body and
//!   answers the same `409`, served by this process, alternated
//!   [`ROUNDS`] times (`--rounds`);
//! - the storefront index with 20 sales against a sale page, and the index
//!   with 1,000 sales against itself with 20. These run on a database and a
//!   key prefix of their own, dropped afterwards, so that the index holds
//!   exactly the sales the row names.

use std::path::Path;

use actix_web::{App, HttpResponse, HttpServer, ResponseError, web};
use anyhow::Context;

use super::compare::Figure;
use super::{Bound, Row};
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_core::urls;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::{self, Services};
use seckill_web::ApiError;

/// The body every purchase of the sold-out row sends.
const BODY: &str = r#"{"user_id":"wrk-buyer"}"#;

/// Sold-out answers per second against the bare handler's.
pub(super) async fn sold_out(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let figure = "sold-out answers / bare actix handler (wrk)";
    if !wrk_installed().await {
        return Ok(not_installed(figure, TARGET));
    }
    let script = same_buyer_script()?;
    let deployment = super::deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-sold-out", &[]).await?;
    // Started last: nothing fallible comes between it and its stop.
    let bare = bare_server()?;
    let rounds = async {
        let (_, purchase) = sold_out_sale(store, &url, script.path()).await?;
        // What every request of the runs is told, or the row measures
        // something else.
        let told: serde_json::Value = reqwest::Client::new()
            .post(&purchase)
            .header("Content-Type", "application/json")
            .body(BODY)
            .send()
            .await?
            .json()
            .await?;
        anyhow::ensure!(
            told["error"] == "sold_out",
            "the runs' buyer is not told sold out: {told}"
        );
        let bare = format!("{}/buy", bare.url);
        alternated(args.rounds(ROUNDS), async |which| {
            wrk([&purchase, &bare][which], args.secs, Some(script.path())).await
        })
        .await
    }
    .await;
    bare.handle.stop(true).await;
    cluster.stop().await;
    let rounds = rounds?;
    let count = rounds.len();
    let target = Bound::AtLeast(0.95);
    // The target holds in every round, not only in the median one.
    let each: Vec<f64> = rounds.iter().map(|[rate, bare]| rate / bare).collect();
    let shown: Vec<String> = each.iter().map(|ratio| target.shown(*ratio, 2)).collect();
    let [rate, bare_rate] = median_round(rounds);
    let ratio = rate / bare_rate;
    Ok(Row {
        figure,
        measured: format!(
            "{} ({rate:.0}/s vs {bare_rate:.0}/s, the median of {count} alternated; every round: {})",
            target.shown(ratio, 2),
            shown.join(", ")
        ),
        target: TARGET,
        met: Some(each.iter().all(|ratio| target.met(*ratio))),
        value: Figure::higher(ratio),
    })
}

/// The sold-out row's target: in every round.
const TARGET: &str = ">= 0.95, every round";

/// wrk's script for the sold-out purchase, the same body every time, in
/// a file of its own for wrk's `-s`.
pub(super) fn same_buyer_script() -> anyhow::Result<tempfile::NamedTempFile> {
    script_file(&format!(
        "wrk.method = \"POST\"\nwrk.body = '{BODY}'\nwrk.headers[\"Content-Type\"] = \"application/json\"\n"
    ))
}

/// A wrk script in a file of its own, for wrk's `-s`.
pub(super) fn script_file(text: &str) -> anyhow::Result<tempfile::NamedTempFile> {
    let file = tempfile::NamedTempFile::new().context("a file for wrk's script")?;
    std::fs::write(file.path(), text)?;
    Ok(file)
}

/// A sale of one unit, bought by a buyer of its own, and known sold out
/// to the instance at `url` (`script`'s buyer sent for a second): its
/// purchase URL.
///
/// Not bought by `script`'s buyer: a buyer who holds a unit is answered
/// by Redis, which names their order (`strategy/sold_out.rs`), and every
/// request of the runs would have measured that instead of a sold-out
/// answer.
pub(super) async fn sold_out_sale(
    store: &Store,
    url: &str,
    script: &Path,
) -> anyhow::Result<(i64, String)> {
    let sale = loadrun::create_sale(store, "Bench sold out", 1, Some(3600)).await?;
    let purchase = format!("{url}/api/sales/{sale}/purchase");
    let took = reqwest::Client::new()
        .post(&purchase)
        .json(&serde_json::json!({ "user_id": "bench-winner" }))
        .send()
        .await
        .context("buying the sale's unit")?;
    anyhow::ensure!(
        took.status() == reqwest::StatusCode::ACCEPTED,
        "the sale's one unit was not sold: {}",
        took.status()
    );
    // Sets the instance's flag, and has it list the sale's holders.
    wrk_once(&purchase, script).await?;
    Ok((sale, purchase))
}

/// Runs of the sold-out purchase and of the bare handler, alternated: one
/// pair moved from 0.59 to 0.94 from one run to the next on this machine.
pub(super) const ROUNDS: usize = 3;

/// `rounds` rounds of two runs, `run(0)` and `run(1)`, each first in
/// every other round: neither always runs on a machine the other has just
/// warmed or loaded. Each round's two rates.
pub(super) async fn alternated(
    rounds: usize,
    mut run: impl AsyncFnMut(usize) -> anyhow::Result<f64>,
) -> anyhow::Result<Vec<[f64; 2]>> {
    let mut each = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let mut pair = [0.0; 2];
        for which in [round % 2, 1 - round % 2] {
            pair[which] = run(which).await?;
        }
        each.push(pair);
    }
    Ok(each)
}

/// The row of two alternated runs' ratio, the first's rate over the
/// second's, against a target of at least `at_least` (written `target`):
/// the round of the median ratio.
pub(super) fn median_ratio_row(
    figure: &'static str,
    rounds: Vec<[f64; 2]>,
    at_least: f64,
    target: &'static str,
) -> Row {
    let count = rounds.len();
    let [rate, baseline] = median_round(rounds);
    let ratio = rate / baseline;
    let bound = Bound::AtLeast(at_least);
    Row {
        figure,
        measured: format!(
            "{} ({rate:.0}/s vs {baseline:.0}/s; median of {count} alternated)",
            bound.shown(ratio, 2)
        ),
        target,
        met: Some(bound.met(ratio)),
        value: Figure::higher(ratio),
    }
}

/// The round whose ratio (seckill over the bare handler) is the median.
pub(super) fn median_round(mut rounds: Vec<[f64; 2]>) -> [f64; 2] {
    rounds.sort_by(|a, b| (a[0] / a[1]).total_cmp(&(b[0] / b[1])));
    rounds[rounds.len() / 2]
}

/// The index with 20 sales against a sale page, then with 1,000 sales.
pub(super) async fn index(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 2]> {
    let (first, second) = (
        "storefront index, 20 sales / sale page (wrk)",
        "storefront index, 1,000 sales / 20 sales (wrk)",
    );
    if !wrk_installed().await {
        return Ok([
            not_installed(first, ">= 50%"),
            not_installed(second, ">= 90% (flat)"),
        ]);
    }
    let database = urls::with_database(
        &services.database_url,
        &format!("seckill_bench_index_{}", *super::RUN),
    )?;
    services::ensure_database(&database).await?;
    let measured = index_on(args, services, store, token, &database).await;
    services::drop_database(&database).await?;
    let (twenty, page, thousand) = measured?;
    let (percent, flat) = (twenty / page * 100.0, thousand / twenty * 100.0);
    let (cheap, level) = (Bound::AtLeast(50.0), Bound::AtLeast(90.0));
    Ok([
        Row {
            figure: first,
            measured: format!(
                "{}% ({twenty:.0}/s vs {page:.0}/s)",
                cheap.shown(percent, 0)
            ),
            target: ">= 50%",
            met: Some(cheap.met(percent)),
            value: Figure::higher(percent),
        },
        Row {
            figure: second,
            measured: format!("{}% ({thousand:.0}/s)", level.shown(flat, 0)),
            target: ">= 90% (flat)",
            met: Some(level.met(flat)),
            value: Figure::higher(flat),
        },
    ])
}

/// The three rates on `database`: the index at 20 sales, a sale page, the
/// index at 1,000 sales.
async fn index_on(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
    database: &str,
) -> anyhow::Result<(f64, f64, f64)> {
    let prefix = format!("{}:bench-index", store.prefix());
    let pg = seckill_core::store::connect_postgres(database).await?;
    let own = Store::new(pg.clone(), store.redis_pool().clone(), prefix.clone());
    let deployment = super::deployment(services, &prefix, Strategy::Lock, token)?
        .env("SECKILL_DATABASE_URL", database);
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-index", &[]).await?;
    let rates = async {
        let mut sale = 0;
        for n in 0..20 {
            sale = loadrun::create_sale(&own, &format!("Sale {n}"), 100, Some(3600)).await?;
        }
        let twenty = wrk(&format!("{url}/"), args.secs, None).await?;
        let page = wrk(&format!("{url}/sales/{sale}"), args.secs, None).await?;
        for n in 20..1_000 {
            loadrun::create_sale(&own, &format!("Sale {n}"), 100, Some(3600)).await?;
        }
        let thousand = wrk(&format!("{url}/"), args.secs, None).await?;
        anyhow::Ok((twenty, page, thousand))
    }
    .await;
    cluster.stop().await;
    pg.close().await;
    own.redis_pool().delete_under(own.prefix()).await?;
    rates
}

/// The bare handler's server: this process, the port the kernel picks.
pub(super) struct Bare {
    pub(super) url: String,
    pub(super) handle: actix_web::dev::ServerHandle,
}

impl Bare {
    /// The bare handler under a purchase's path, as the bundled generator
    /// sends it (for sale 1).
    pub(super) fn purchase_url(&self) -> String {
        format!("{}/api/sales/1/purchase", self.url)
    }
}

/// Parse the purchase's JSON body and answer what seckill answers when the
/// sale is sold out: the least a purchase could cost over HTTP.
pub(super) fn bare_server() -> anyhow::Result<Bare> {
    async fn buy(body: web::Json<serde_json::Value>) -> HttpResponse {
        let _buyer = body.get("user_id").and_then(serde_json::Value::as_str);
        ApiError::SoldOut.error_response()
    }
    let server = HttpServer::new(|| {
        App::new()
            .route("/buy", web::post().to(buy))
            .route("/api/sales/{id}/purchase", web::post().to(buy))
    })
    .bind("127.0.0.1:0")
    .context("binding the bare handler")?;
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(server);
    Ok(Bare {
        url: format!("http://{address}"),
        handle,
    })
}

/// `wrk -t1 -c64 -d<secs>s [-s script] url`: its requests per second.
pub(super) async fn wrk(url: &str, secs: f64, script: Option<&Path>) -> anyhow::Result<f64> {
    let report = wrk_report(url, secs, script).await?;
    requests_per_second(&report).with_context(|| format!("no rate in wrk's report: {report}"))
}

/// wrk's report of `wrk -t1 -c64 -d<secs>s [-s script] url`.
async fn wrk_report(url: &str, secs: f64, script: Option<&Path>) -> anyhow::Result<String> {
    let mut command = tokio::process::Command::new("wrk");
    command.args(["-t1", "-c64", &format!("-d{}s", secs.ceil().max(1.0))]);
    if let Some(script) = script {
        command.arg("-s").arg(script);
    }
    let output = command.arg(url).output().await.context("running wrk")?;
    let report = String::from_utf8_lossy(&output.stdout).into_owned();
    anyhow::ensure!(output.status.success(), "wrk failed: {report}");
    Ok(report)
}

/// What one wrk run answered: requests, of which not 2xx or 3xx, over
/// its seconds.
pub(super) struct Answers {
    requests: f64,
    not_ok: f64,
    secs: f64,
}

impl Answers {
    /// The 2xx and 3xx answers per second (accepted purchases, on a sale
    /// that does not sell out).
    pub(super) fn ok_per_second(&self) -> f64 {
        (self.requests - self.not_ok) / self.secs
    }
}

/// [`wrk`] with `script`, its answers counted: `12345 requests in 5.00s`
/// and `Non-2xx or 3xx responses: 12` of its report.
pub(super) async fn wrk_answers(url: &str, secs: f64, script: &Path) -> anyhow::Result<Answers> {
    let report = wrk_report(url, secs, Some(script)).await?;
    answers(&report).with_context(|| format!("no request count in wrk's report: {report}"))
}

fn answers(report: &str) -> Option<Answers> {
    let (requests, secs) = report.lines().find_map(|line| {
        let (requests, rest) = line.trim().split_once(" requests in ")?;
        let secs = rest.split_once("s,")?.0;
        Some((requests.parse().ok()?, secs.parse().ok()?))
    })?;
    let not_ok = report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Non-2xx or 3xx responses:"))
        .map_or(Some(0.0), |count| count.trim().parse().ok())?;
    Some(Answers {
        requests,
        not_ok,
        secs,
    })
}

/// One request, through wrk's script, to set a sale up.
async fn wrk_once(url: &str, script: &Path) -> anyhow::Result<()> {
    let output = tokio::process::Command::new("wrk")
        .args(["-t1", "-c1", "-d1s", "-s"])
        .arg(script)
        .arg(url)
        .output()
        .await
        .context("running wrk")?;
    anyhow::ensure!(output.status.success(), "wrk failed");
    Ok(())
}

/// wrk's `Requests/sec:   12345.67` line.
fn requests_per_second(report: &str) -> Option<f64> {
    report
        .lines()
        .find_map(|line| line.trim().strip_prefix("Requests/sec:"))
        .and_then(|rate| rate.trim().parse().ok())
}

/// Whether wrk is installed (`wrk -v` prints its version, and exits 1).
pub(super) async fn wrk_installed() -> bool {
    tokio::process::Command::new("wrk")
        .arg("-v")
        .output()
        .await
        .is_ok_and(|output| String::from_utf8_lossy(&output.stdout).starts_with("wrk"))
}

pub(super) fn not_installed(figure: &'static str, target: &'static str) -> Row {
    Row {
        figure,
        measured: "wrk is not installed (apt-get install wrk)".into(),
        target,
        met: None,
        value: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_read_from_wrks_report() {
        let report = "Running 5s test\n  1 threads and 64 connections\nRequests/sec:  98765.43\nTransfer/sec:     12.34MB\n";
        assert_eq!(requests_per_second(report), Some(98_765.43));
        assert_eq!(requests_per_second("nothing"), None);
    }

    #[test]
    fn the_answers_that_are_not_2xx_are_counted_out() {
        let report = "Running 5s test\n  1 threads and 64 connections\n  100000 requests in 5.00s, 12.00MB read\n  Non-2xx or 3xx responses: 2000\nRequests/sec:  20000.00\n";
        let counted = answers(report).expect("the report's counts");
        assert!((counted.ok_per_second() - 19_600.0).abs() < 1e-6);
        let all_ok = "  50000 requests in 5.01s, 6.00MB read\nRequests/sec:  9980.04\n";
        assert!((answers(all_ok).expect("counts").ok_per_second() - 50_000.0 / 5.01).abs() < 1e-6);
        assert!(answers("nothing").is_none());
    }

    #[test]
    fn the_sold_out_row_shows_the_round_of_the_median_ratio() {
        // Ratios 0.5, 0.9 and 0.8: the median is 0.8, from the third
        // round, though neither of its rates is the median of its column
        // (50 and 100).
        let rounds = vec![[50.0, 100.0], [45.0, 50.0], [96.0, 120.0]];
        assert_eq!(median_round(rounds), [96.0, 120.0]);
    }
}
