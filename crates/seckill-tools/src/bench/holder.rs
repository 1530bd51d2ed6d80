//! `seckill hold-pages`, the bench's helper: sale pages' event streams held
//! open in a process of their own, and [`Watchers`], the bench's end of it.
//! 10,000 streams and the burst's 10,000 buyers would not fit in one
//! process under a hard limit of 20,000 open files.

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::net::TcpSocket;
use tokio::process::{Child, ChildStdout};

use seckill_devenv::processes::seckill_binary;

/// `seckill hold-pages`: what the bench asks it to hold.
#[derive(Debug, Args)]
pub struct HoldPagesArgs {
    /// The instance's base URL, `http://host:port`.
    #[arg(long)]
    pub(crate) url: String,

    /// The sale whose page is open.
    #[arg(long)]
    pub(crate) sale: i64,

    /// How many of its event streams.
    #[arg(long)]
    pub(crate) pages: u32,
}

/// Where the pages' streams come from when the instance is on 127.0.0.1
/// (Linux routes all of 127.0.0.0/8 to the loopback device).
const PAGES_FROM: Ipv4Addr = Ipv4Addr::new(127, 0, 0, 2);

/// How long the holder may take to open its streams, and to close them.
const HOLDER_LIMIT: Duration = Duration::from_secs(120);

/// `--pages` event streams of a sale, held open by `seckill hold-pages`
/// until [`Watchers::close`].
pub(super) struct Watchers {
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
            holder,
            said: BufReader::new(stdout).lines(),
            pages,
        };
        watchers.expect_open("opening").await?;
        Ok(watchers)
    }

    /// Close the streams; an error if one of them ended before. The
    /// instance learns that a page is gone only when its next snapshot
    /// cannot be sent: stop it, rather than wait for that.
    pub(super) async fn close(mut self) -> anyhow::Result<()> {
        // The holder ends when its input does.
        drop(self.holder.stdin.take());
        self.expect_open("closing").await?;
        let status = tokio::time::timeout(HOLDER_LIMIT, self.holder.wait())
            .await
            .context("the holder did not stop")??;
        anyhow::ensure!(status.success(), "the holder ended with {status}");
        Ok(())
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
pub(crate) async fn hold_pages(args: HoldPagesArgs) -> anyhow::Result<()> {
    seckill_cli::process::raise_open_files_limit();
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
    let target = tokio::net::lookup_host(address)
        .await
        .with_context(|| format!("looking up {address}"))?
        .next()
        .with_context(|| format!("{address} has no address"))?;
    let (heard, mut answers) = tokio::sync::mpsc::channel(1024);
    let mut pages = Vec::new();
    for _ in 0..args.pages {
        pages.push(open((address, target), args.sale, heard.clone()).await?);
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

/// Open one sale page's event stream and keep reading it, in a task of
/// its own, until it ends or is aborted; say on `heard` when it has been
/// answered `200`.
async fn open(
    (address, target): (&str, SocketAddr),
    sale_id: i64,
    heard: tokio::sync::mpsc::Sender<()>,
) -> anyhow::Result<tokio::task::JoinHandle<()>> {
    let socket = match target {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    // The pages come from an address of their own, as browsers come from
    // hosts of their own. From the address the burst's buyers use, to the
    // same instance, each of the buyers' connects had to search past the
    // pages' 10,000 local ports for a free one (connecting took 0.6-0.9 s
    // where it took 0.2 s), and the watched bursts' last wins were 1.11 to
    // 3.00 times those of the bursts alone, against 1.05 to 1.23 (docs/bench-history.md).
    // Where the system does not route 127.0.0.2 (macOS), the bind fails
    // and the page connects from wherever the system chooses.
    if target.ip() == Ipv4Addr::LOCALHOST {
        let _ = socket.bind((PAGES_FROM, 0).into());
    }
    let mut stream = socket
        .connect(target)
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
