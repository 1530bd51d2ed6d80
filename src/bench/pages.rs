//! Open sale pages: `--pages` event streams of one sale held open on one
//! instance (no worker in it, so that nothing else of its asks Redis), and
//! what they cost: the Redis commands per second the server counts
//! (`INFO stats`) while they watch, against the same window before they
//! opened, and the instance's memory. Redis counts every client's
//! commands: run the bench alone on its server.

use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::Row;
use crate::cli::BenchArgs;
use crate::cluster::Cluster;
use crate::config::Strategy;
use crate::harness;
use crate::services::Services;
use crate::store::Store;
use crate::web::SNAPSHOT_EVERY;

/// How long the Redis commands are counted, each time: two snapshot ticks
/// of every stream.
const WINDOW: Duration = Duration::from_secs(10);

pub(super) async fn open_pages(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let deployment = harness::deployment(services, &store.prefix, Strategy::Lock, token)?;
    let mut cluster = Cluster::new(deployment);
    let cap = (args.pages + 100).to_string();
    let url = cluster
        .start_app("bench-pages", &["--no-worker", "--max-event-streams", &cap])
        .await?;
    let measured = async {
        let sale_id = harness::create_sale(store, "Bench pages", 10, Some(3600)).await?;
        let idle = commands_per_second(store).await?;
        let address = url.trim_start_matches("http://").to_owned();
        let mut pages = Vec::new();
        for _ in 0..args.pages {
            pages.push(open(&address, sale_id).await?);
        }
        // Every stream has read its opening snapshot before the count.
        tokio::time::sleep(SNAPSHOT_EVERY).await;
        let watched = commands_per_second(store).await?;
        let resident = cluster.resident_bytes("bench-pages")?;
        let open = pages.iter().filter(|page| !page.is_finished()).count();
        for page in pages {
            page.abort();
        }
        anyhow::Ok((idle, watched, resident, open))
    }
    .await;
    cluster.stop().await;
    let (idle, watched, resident, open) = measured?;
    anyhow::ensure!(
        open == args.pages as usize,
        "only {open} of {} streams stayed open",
        args.pages
    );
    let mib = resident as f64 / 1024.0 / 1024.0;
    let extra = (watched - idle).max(0.0);
    Ok(Row {
        figure: "open sale pages on one instance: Redis commands/s they add, RSS",
        measured: format!(
            "{} pages: +{extra:.1}/s ({watched:.1}/s vs {idle:.1}/s before), {mib:.1} MiB",
            args.pages
        ),
        target: "independent of the pages (a read per page would be pages/5 per s); < 256 MiB",
        // One read per second per sale, at most, whatever the pages.
        met: Some(extra <= 2.0 && mib < 256.0),
    })
}

/// Open one sale page's event stream and keep reading it, in a task of
/// its own, until it ends or is aborted.
async fn open(address: &str, sale_id: i64) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut stream = TcpStream::connect(address)
        .await
        .context("opening a page's stream")?;
    let request = format!(
        "GET /api/sales/{sale_id}/events HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(tokio::spawn(async move {
        let mut buffer = [0u8; 512];
        while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
    }))
}

/// Commands per second Redis processed over [`WINDOW`], by its own count.
async fn commands_per_second(store: &Store) -> anyhow::Result<f64> {
    let before = commands_processed(store).await?;
    tokio::time::sleep(WINDOW).await;
    let after = commands_processed(store).await?;
    Ok(after.saturating_sub(before) as f64 / WINDOW.as_secs_f64())
}

/// `total_commands_processed` from `INFO stats`.
async fn commands_processed(store: &Store) -> anyhow::Result<u64> {
    let info: String = redis::cmd("INFO")
        .arg("stats")
        .query_async(&mut store.redis().await?)
        .await
        .context("INFO stats")?;
    info.lines()
        .find_map(|line| line.strip_prefix("total_commands_processed:"))
        .and_then(|count| count.trim().parse().ok())
        .context("no total_commands_processed in INFO stats")
}
