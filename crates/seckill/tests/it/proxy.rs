//! A TCP proxy that loses one answer on purpose: the fault of a connection
//! that breaks after Redis ran a command and before its reply arrived.
//!
//! Every byte goes through unchanged until a client sends something that
//! contains the needle. That request is forwarded to the server; the reply
//! is swallowed and the client's connection is closed, once. Every other
//! connection, before and after, is passed through untouched.
//!
//! Started with [`LoseOneAnswer::delaying`], the request is held instead:
//! the client's connection is closed at once, and the request reaches the
//! server only after the delay (a command still on its way when its sender
//! gave up on it).
//!
//! Started with [`LoseOneAnswer::pausing`], the request is sent on and
//! its reply swallowed, and the client's connection is closed only when
//! the test says so ([`Pause::go`]): the test acts between the command's
//! run ([`Pause::ran`]) and its sender's loss of the answer, and must be
//! quick about it: the sender gives up by itself after its response
//! timeout (500 ms), and looks its answer up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;

/// The `host:port` a proxy forwards to, of a `redis://host:port[/db]` URL.
pub fn upstream_of(redis_url: &str) -> String {
    (redis_url.split('/').nth(2))
        .expect("host and port")
        .to_owned()
}

/// A running proxy; stops with the test's runtime.
pub struct LoseOneAnswer {
    /// `redis://` URL of the proxy.
    pub url: String,
    cut: Arc<AtomicU32>,
}

impl LoseOneAnswer {
    /// Proxy to `upstream` (`host:port`), losing the answer to the first
    /// request containing any of `needles`.
    pub async fn start(upstream: String, needles: Vec<Vec<u8>>) -> Self {
        Self::start_with(upstream, needles, Fault::Lose).await
    }

    /// Proxy to `upstream`, sending the first request containing any of
    /// `needles` on, swallowing its reply, and closing its client's
    /// connection when the returned [`Pause`] says [`Pause::go`].
    pub async fn pausing(upstream: String, needles: Vec<Vec<u8>>) -> (Self, Pause) {
        let pause = Pause {
            ran: Arc::new(Notify::new()),
            go: Arc::new(Notify::new()),
        };
        let proxy = Self::start_with(upstream, needles, Fault::Pause(pause.clone())).await;
        (proxy, pause)
    }

    /// Proxy to `upstream`, holding the first request containing any of
    /// `needles` for `delay` after closing its client's connection.
    pub async fn delaying(upstream: String, needles: Vec<Vec<u8>>, delay: Duration) -> Self {
        Self::start_with(upstream, needles, Fault::Delay(delay)).await
    }

    async fn start_with(upstream: String, needles: Vec<Vec<u8>>, fault: Fault) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("redis://{}", listener.local_addr().expect("address"));
        let cut = Arc::new(AtomicU32::new(0));
        let armed = Arc::new(AtomicBool::new(true));
        let needles = Arc::new(needles);
        let counter = cut.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(&upstream).await else {
                    continue;
                };
                tokio::spawn(pass(
                    client,
                    server,
                    needles.clone(),
                    armed.clone(),
                    counter.clone(),
                    fault.clone(),
                ));
            }
        });
        Self { url, cut }
    }

    /// How many answers were lost (0 or 1).
    pub fn answers_lost(&self) -> u32 {
        self.cut.load(Ordering::SeqCst)
    }
}

async fn pass(
    client: TcpStream,
    server: TcpStream,
    needles: Arc<Vec<Vec<u8>>>,
    armed: Arc<AtomicBool>,
    cut: Arc<AtomicU32>,
    fault: Fault,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    // Set before the fatal request goes out, so its reply is never relayed.
    let muted = Arc::new(AtomicBool::new(false));
    let replies_muted = muted.clone();
    // The swallowed reply says the caught request ran: what a pausing
    // proxy's test waits for.
    let ran = match &fault {
        Fault::Pause(pause) => Some(pause.ran.clone()),
        _ => None,
    };
    let replies = tokio::spawn(async move {
        let mut buffer = vec![0; 64 * 1024];
        while let Ok(n) = server_read.read(&mut buffer).await {
            if n == 0 {
                break;
            }
            // Swallowed: the client's connection stays open, unanswered,
            // until the request's fault closes it.
            if replies_muted.load(Ordering::SeqCst) {
                if let Some(ran) = &ran {
                    ran.notify_one();
                }
                continue;
            }
            if client_write.write_all(&buffer[..n]).await.is_err() {
                break;
            }
        }
        // Dropping the write half closes the client's connection.
    });
    let mut buffer = vec![0; 64 * 1024];
    // The end of the bytes read before: a needle may be split between two
    // reads when the client's writes come in pieces (a busy machine).
    let longest = needles.iter().map(Vec::len).max().unwrap_or(1);
    let mut seen: Vec<u8> = Vec::new();
    while let Ok(n) = client_read.read(&mut buffer).await {
        if n == 0 {
            break;
        }
        let request = &buffer[..n];
        seen.extend_from_slice(request);
        let fatal = needles.iter().any(|needle| contains(&seen, needle))
            && armed.swap(false, Ordering::SeqCst);
        let keep = seen.len().saturating_sub(longest - 1);
        seen.drain(..keep);
        if fatal {
            muted.store(true, Ordering::SeqCst);
            cut.fetch_add(1, Ordering::SeqCst);
        }
        if let (true, Fault::Delay(delay)) = (fatal, &fault) {
            let delay = *delay;
            // The client's connection closes now; the request is sent
            // late, on the server connection, which stays open for it.
            replies.abort();
            let request = request.to_vec();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = server_write.write_all(&request).await;
                tokio::time::sleep(Duration::from_secs(1)).await;
            });
            return;
        }
        if server_write.write_all(request).await.is_err() {
            break;
        }
        if fatal {
            // Let the server run it, then drop the connection unanswered.
            match &fault {
                Fault::Pause(pause) => pause.go.notified().await,
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
            replies.abort();
            return;
        }
    }
    replies.abort();
}

/// What the proxy does with the request it catches.
#[derive(Clone)]
enum Fault {
    /// Send it on, swallow the reply, close the client's connection.
    Lose,
    /// Close the client's connection, send the request on this late.
    Delay(Duration),
    /// As `Lose`, closing the client's connection only at the test's word.
    Pause(Pause),
}

/// The two signals of a [`LoseOneAnswer::pausing`] proxy.
#[derive(Clone)]
pub struct Pause {
    ran: Arc<Notify>,
    go: Arc<Notify>,
}

impl Pause {
    /// Until the server answered the caught request (its reply
    /// swallowed): it ran.
    pub async fn ran(&self) {
        self.ran.notified().await;
    }

    /// Close the caught request's client connection: its answer is lost.
    pub fn go(&self) {
        self.go.notify_one();
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}
