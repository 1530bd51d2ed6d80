//! Open sale pages: `--pages` event streams of one sale held open on one
//! instance, and what they cost:
//! - the Redis commands per second the server counts (`INFO stats`) while
//!   they watch, against the same window before they opened, and the
//!   instance's memory (an instance with no worker in it, so that nothing
//!   else of its asks Redis; Redis counts every client's commands: run the
//!   bench alone on its server);
//! - the burst's figures while they watch the burst's sale on one of its
//!   two instances, against the same burst with no page open, alternated.
//!
//! The streams are held by a process of their own ([`Watchers`], `seckill
//! hold-pages`): 10,000 of them and the burst's 10,000 buyers would not fit
//! in one process under a hard limit of 20,000 open files.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use seckill_loadtest::report::Report;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};

use super::Row;
use crate::cli::{BenchArgs, HoldPagesArgs};
use crate::cluster::{Cluster, seckill_binary};
use crate::config::Strategy;
use crate::harness;
use crate::services::Services;
use crate::startup;
use crate::store::Store;

/// How long the Redis commands are counted, each time: two snapshot ticks
/// of every stream.
const WINDOW: Duration = Duration::from_secs(10);

/// Bursts alone and bursts watched, alternated: one burst's figures move
/// several times over from one run to the next on this machine, so one
/// pair would say little.
const ROUNDS: usize = 5;

/// How long the holder may take to open its streams, and to close them.
const HOLDER_LIMIT: Duration = Duration::from_secs(120);

pub(super) async fn open_pages(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    let deployment = harness::deployment(services, &store.prefix, Strategy::Lock, token)?;
    let mut cluster = Cluster::new(deployment);
    let cap = stream_cap(args);
    let url = cluster
        .start_app("bench-pages", &["--no-worker", "--max-event-streams", &cap])
        .await?;
    let measured = async {
        let sale_id = harness::create_sale(store, "Bench pages", 10, Some(3600)).await?;
        let idle = commands_per_second(store).await?;
        let watchers = Watchers::open(&url, sale_id, args.pages).await?;
        let watched = commands_per_second(store).await?;
        let resident = cluster.resident_bytes("bench-pages")?;
        watchers.close().await?;
        anyhow::Ok((idle, watched, resident))
    }
    .await;
    cluster.stop().await;
    let (idle, watched, resident) = measured?;
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

/// The burst of the burst rows, [`ROUNDS`] times alone and as many times
/// while `--pages` pages of its sale are open on its first instance,
/// alternated, on the same two instances: the medians side by side.
pub(super) async fn watched_burst(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<[Row; 2]> {
    let deployment = harness::deployment(services, &store.prefix, Strategy::Lock, token)?;
    let cap = stream_cap(args);
    let cluster = Cluster::start_each(deployment, "bench-watched", 2, |_| {
        vec!["--max-event-streams".to_owned(), cap.clone()]
    })
    .await?;
    let first = cluster.urls()[0].clone();
    let measured = async {
        let (mut alone, mut watched) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            alone.push(one_burst(args, store, &cluster, None).await?);
            watched.push(one_burst(args, store, &cluster, Some(&first)).await?);
        }
        anyhow::Ok((Figures::of(&alone)?, Figures::of(&watched)?))
    }
    .await;
    cluster.stop().await;
    let (alone, watched) = measured?;
    let row = |figure, alone: f64, watched: f64, pages: String| {
        let ratio = watched / alone;
        Row {
            figure,
            measured: format!("{watched:.0} ms vs {alone:.0} ms alone ({ratio:.2}x){pages}"),
            target: "unchanged: <= 1.25x the burst alone",
            met: Some(ratio <= UNCHANGED),
        }
    };
    Ok([
        row(
            "burst while the pages watch one instance: last win (median)",
            alone.last_win_ms,
            watched.last_win_ms,
            format!(", {} pages", args.pages),
        ),
        row(
            "burst while the pages watch one instance: p99 (median)",
            alone.p99_ms,
            watched.p99_ms,
            String::new(),
        ),
    ])
}

/// Watched over alone, at most, for a figure to count as unchanged. The
/// medians narrow what one burst's figures move by on this machine (a
/// last win of 6 ms in one run, 119 ms in the next), they do not remove
/// it: two sets of bursts alone can differ by more than this (README).
const UNCHANGED: f64 = 1.25;

/// One burst of the burst rows on a sale of its own, with `--pages` pages
/// of it open on `watched` (an instance's URL) if given.
async fn one_burst(
    args: &BenchArgs,
    store: &Store,
    cluster: &Cluster,
    watched: Option<&str>,
) -> anyhow::Result<Report> {
    let sale_id = harness::create_sale(store, "Bench watched", 10, Some(3600)).await?;
    let watchers = match watched {
        Some(url) => Some(Watchers::open(url, sale_id, args.pages).await?),
        None => None,
    };
    let load = super::burst_load(args);
    let report = harness::burst(
        store,
        cluster,
        Strategy::Lock,
        (sale_id, 10),
        ("bench", &load),
    )
    .await?;
    if let Some(watchers) = watchers {
        watchers.close().await?;
    }
    // Each run's figures, for the spread behind the medians.
    let summary = &report.summary;
    eprintln!(
        "bench: burst {}: last win {}, p99 {:.0} ms",
        if watched.is_some() {
            "watched"
        } else {
            "alone"
        },
        summary
            .time_to_sell_out_ms
            .map_or("none".into(), |ms| format!("{ms:.0} ms")),
        summary.p99_us as f64 / 1000.0,
    );
    Ok(report)
}

/// The medians of a few bursts' figures.
struct Figures {
    last_win_ms: f64,
    p99_ms: f64,
}

impl Figures {
    fn of(reports: &[Report]) -> anyhow::Result<Self> {
        let last_wins = reports
            .iter()
            .map(|report| {
                report
                    .summary
                    .time_to_sell_out_ms
                    .context("a burst did not sell out")
            })
            .collect::<anyhow::Result<Vec<f64>>>()?;
        let p99s = reports
            .iter()
            .map(|report| report.summary.p99_us as f64 / 1000.0)
            .collect();
        Ok(Self {
            last_win_ms: median(last_wins),
            p99_ms: median(p99s),
        })
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The instance's cap on streams, with room above the pages.
fn stream_cap(args: &BenchArgs) -> String {
    (args.pages + 100).to_string()
}

/// `--pages` event streams of a sale, held open by `seckill hold-pages`
/// until [`Watchers::close`].
struct Watchers {
    /// The instance's `host:port`.
    address: String,
    holder: Child,
    said: Lines<BufReader<ChildStdout>>,
    pages: u32,
}

impl Watchers {
    /// Start the holder and wait until every stream is open and answered.
    async fn open(url: &str, sale_id: i64, pages: u32) -> anyhow::Result<Self> {
        let mut holder = tokio::process::Command::new(seckill_binary()?)
            .args(["hold-pages", "--url", url])
            .args([
                "--sale",
                &sale_id.to_string(),
                "--pages",
                &pages.to_string(),
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("starting seckill hold-pages")?;
        let stdout = holder.stdout.take().context("the holder's output")?;
        let mut watchers = Self {
            address: host_port(url)?.to_owned(),
            holder,
            said: BufReader::new(stdout).lines(),
            pages,
        };
        watchers.expect_open("opening").await?;
        Ok(watchers)
    }

    /// Close the streams, and wait until the instance has let them go; an
    /// error if one of them ended before.
    async fn close(mut self) -> anyhow::Result<()> {
        // The holder ends when its input does.
        drop(self.holder.stdin.take());
        self.expect_open("closing").await?;
        let status = tokio::time::timeout(HOLDER_LIMIT, self.holder.wait())
            .await
            .context("the holder did not stop")??;
        anyhow::ensure!(status.success(), "the holder ended with {status}");
        // The instance learns that a page is gone when its next snapshot
        // cannot be sent: until then the stream holds a file descriptor,
        // and the next round's pages and buyers would not all fit.
        tokio::time::timeout(HOLDER_LIMIT, async {
            while streams_open(&self.address).await? > 0 {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            anyhow::Ok(())
        })
        .await
        .context("the instance held the closed pages' streams")?
    }

    /// Read the holder's next count of open streams: all of them, or an error.
    async fn expect_open(&mut self, when: &str) -> anyhow::Result<()> {
        let line = tokio::time::timeout(HOLDER_LIMIT, self.said.next_line())
            .await
            .with_context(|| format!("the holder took too long {when} its streams"))??
            .with_context(|| format!("the holder ended before {when} its streams"))?;
        let open: u32 = line
            .strip_prefix("open ")
            .and_then(|count| count.parse().ok())
            .with_context(|| format!("the holder said {line:?}"))?;
        anyhow::ensure!(
            open == self.pages,
            "{when}: only {open} of {} streams were open",
            self.pages
        );
        Ok(())
    }
}

/// `seckill hold-pages`: open the streams, say how many are open once each
/// has been answered, then again when standard input ends, and exit.
pub async fn hold_pages(args: HoldPagesArgs) -> anyhow::Result<()> {
    startup::raise_open_files_limit();
    let address = host_port(&args.url)?;
    let (heard, mut answers) = tokio::sync::mpsc::channel(1024);
    let mut pages = Vec::new();
    for _ in 0..args.pages {
        pages.push(open(address, args.sale, heard.clone()).await?);
    }
    drop(heard);
    // Every stream has been answered, or has ended (refused), or the
    // instance is too slow to tell.
    let _ = tokio::time::timeout(HOLDER_LIMIT / 2, async {
        for _ in 0..args.pages {
            if answers.recv().await.is_none() {
                break;
            }
        }
    })
    .await;
    let open = || pages.iter().filter(|page| !page.is_finished()).count();
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("open {}\n", open()).as_bytes())
        .await?;
    stdout.flush().await?;
    // Until the bench closes our input, or dies.
    let mut input = Vec::new();
    tokio::io::stdin().read_to_end(&mut input).await?;
    stdout
        .write_all(format!("open {}\n", open()).as_bytes())
        .await?;
    stdout.flush().await?;
    for page in pages {
        page.abort();
    }
    Ok(())
}

/// `host:port` of `http://host:port`.
fn host_port(url: &str) -> anyhow::Result<&str> {
    url.strip_prefix("http://")
        .with_context(|| format!("{url} is not http://host:port"))
}

/// The event streams the instance at `address` holds open, by its
/// `/metrics`.
async fn streams_open(address: &str) -> anyhow::Result<u64> {
    let mut stream = TcpStream::connect(address)
        .await
        .context("asking for /metrics")?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await?;
    answer
        .lines()
        .find_map(|line| line.strip_prefix("seckill_event_streams "))
        .and_then(|count| count.trim().parse().ok())
        .context("no seckill_event_streams in /metrics")
}

/// Open one sale page's event stream and keep reading it, in a task of
/// its own, until it ends or is aborted; say on `heard` when its answer
/// begins.
async fn open(
    address: &str,
    sale_id: i64,
    heard: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let mut stream = TcpStream::connect(address)
        .await
        .context("opening a page's stream")?;
    let request = format!(
        "GET /api/sales/{sale_id}/events HTTP/1.1\r\nHost: {address}\r\nAccept: text/event-stream\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await?;
    Ok(tokio::spawn(async move {
        let mut buffer = [0u8; 512];
        let mut heard = Some(heard);
        while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {
            if let Some(heard) = heard.take() {
                let _ = heard.send(()).await;
            }
        }
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
