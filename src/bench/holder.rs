//! `seckill hold-pages`, the bench's helper: sale pages' event streams held
//! open in a process of their own, and [`Watchers`], the bench's end of it.
//! 10,000 streams and the burst's 10,000 buyers would not fit in one
//! process under a hard limit of 20,000 open files.

use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpStream;
use tokio::process::{Child, ChildStdout};

use crate::cli::HoldPagesArgs;
use crate::cluster::seckill_binary;
use crate::startup;

/// How long the holder may take to open its streams, and to close them.
const HOLDER_LIMIT: Duration = Duration::from_secs(120);

/// `--pages` event streams of a sale, held open by `seckill hold-pages`
/// until [`Watchers::close`].
pub(super) struct Watchers {
    /// The instance's `host:port`.
    address: String,
    /// `seckill hold-pages`, killed if this is dropped unclosed.
    holder: Child,
    /// The holder's output: a count of open streams per line.
    said: Lines<BufReader<ChildStdout>>,
    /// How many streams it was asked to hold.
    pages: u32,
}

impl Watchers {
    /// Start the holder and wait until every stream is open and answered.
    pub(super) async fn open(url: &str, sale_id: i64, pages: u32) -> anyhow::Result<Self> {
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
    pub(super) async fn close(mut self) -> anyhow::Result<()> {
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
/// has been answered, then again when standard input ends, and exit. It
/// exits as soon as its input ends, opening or not: the bench closes it,
/// or dies.
pub async fn hold_pages(args: HoldPagesArgs) -> anyhow::Result<()> {
    startup::raise_open_files_limit();
    let address = host_port(&args.url)?;
    let mut input_ended = tokio::spawn(async {
        let mut input = Vec::new();
        let _ = tokio::io::stdin().read_to_end(&mut input).await;
    });
    let pages = tokio::select! {
        pages = open_all(address, &args) => pages?,
        _ = &mut input_ended => return Ok(()),
    };
    let open = || pages.iter().filter(|page| !page.is_finished()).count();
    let mut stdout = tokio::io::stdout();
    stdout
        .write_all(format!("open {}\n", open()).as_bytes())
        .await?;
    stdout.flush().await?;
    let _ = input_ended.await;
    stdout
        .write_all(format!("open {}\n", open()).as_bytes())
        .await?;
    stdout.flush().await?;
    for page in pages {
        page.abort();
    }
    Ok(())
}

/// Open `--pages` streams, and wait until each has been answered, or has
/// ended (refused), or the instance is too slow to tell.
async fn open_all(
    address: &str,
    args: &HoldPagesArgs,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let (heard, mut answers) = tokio::sync::mpsc::channel(1024);
    let mut pages = Vec::new();
    for _ in 0..args.pages {
        pages.push(open(address, args.sale, heard.clone()).await?);
    }
    drop(heard);
    let _ = tokio::time::timeout(HOLDER_LIMIT / 2, async {
        for _ in 0..args.pages {
            if answers.recv().await.is_none() {
                break;
            }
        }
    })
    .await;
    Ok(pages)
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
/// its own, until it ends or is aborted; say on `heard` when it has been
/// answered `200`.
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
        // The answer's first bytes: a page refused (503 beyond the
        // instance's cap) ends here, and does not count as open.
        match stream.read(&mut buffer).await {
            Ok(n) if buffer[..n].starts_with(b"HTTP/1.1 200") => {
                let _ = heard.send(()).await;
            }
            _ => return,
        }
        while matches!(stream.read(&mut buffer).await, Ok(n) if n > 0) {}
    }))
}
