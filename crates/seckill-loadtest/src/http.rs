//! A lean HTTP/1.1 client: one hyper connection, one request at a time.
//!
//! The generator shares two cores with the app it measures, so every
//! microsecond it spends is one the app does not get. A full client
//! (reqwest) would add a connection pool, redirects and decompression we do
//! not need; here each simulated buyer owns a bare `hyper` connection, which
//! also lets the burst open every connection *before* the start signal, so
//! that the race measures the app and not TCP handshakes.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue, RETRY_AFTER};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::answer::{Classified, classify};

/// The header in which seckill names the instance that answered.
pub const INSTANCE_HEADER: &str = "x-seckill-instance";

/// One app instance, resolved once.
#[derive(Debug)]
pub struct Target {
    /// `http://host:port`, as given.
    pub url: String,
    /// `host:port`, for the Host header.
    authority: HeaderValue,
    address: SocketAddr,
    /// How long a connection to it may sit idle and still be reused:
    /// [`MAX_IDLE`], shorter in tests.
    max_idle: Duration,
}

impl Target {
    /// Parse and resolve `http://host:port`. Only plain HTTP: the app does
    /// not terminate TLS itself.
    pub async fn resolve(url: &str) -> anyhow::Result<Arc<Self>> {
        let uri: hyper::Uri = url
            .parse()
            .with_context(|| format!("{url:?} is not a URL"))?;
        if uri.scheme_str() != Some("http") {
            bail!("{url:?}: only http:// targets are supported");
        }
        if uri.path() != "/" && !uri.path().is_empty() {
            bail!("{url:?}: give the instance's base URL, without a path");
        }
        let authority = uri
            .authority()
            .with_context(|| format!("{url:?} has no host"))?
            .to_string();
        let with_port = if uri.port().is_some() {
            authority.clone()
        } else {
            format!("{authority}:80")
        };
        let address = tokio::net::lookup_host(&with_port)
            .await
            .with_context(|| format!("resolving {with_port}"))?
            .next()
            .with_context(|| format!("{with_port} resolves to no address"))?;
        Ok(Arc::new(Self {
            url: url.trim_end_matches('/').to_owned(),
            authority: HeaderValue::from_str(&authority).context("a Host header")?,
            address,
            max_idle: MAX_IDLE,
        }))
    }
}

/// What one request got back.
#[derive(Debug, Clone)]
pub struct PurchaseAnswer {
    pub classified: Classified,
    /// The HTTP status; `None` when no answer came (the connection failed).
    pub status: Option<u16>,
    /// The `X-Seckill-Instance` header, if the answer had one.
    pub instance: Option<Arc<str>>,
    /// Whether the answer said when to try again (`Retry-After`): every
    /// `503` seckill gives must (the chaos run's judge checks it).
    pub retry_after: bool,
}

impl PurchaseAnswer {
    /// No answer: the connection failed.
    pub fn error() -> Self {
        Self {
            classified: Classified::error(),
            status: None,
            instance: None,
            retry_after: false,
        }
    }
}

/// The path of a sale's purchase endpoint, parsed once per run (cloning a
/// `Uri` is cheap; parsing one per request is not).
pub fn purchase_path(sale_id: i64) -> hyper::Uri {
    format!("/api/sales/{sale_id}/purchase")
        .parse()
        .expect("a sale id makes a valid path")
}

/// How long a connection may sit idle and still carry the next request.
///
/// actix-web closes a connection idle for 5 s (its default keep-alive). A
/// request sent just as the server closes is lost with no answer, and the
/// client cannot tell whether the server read it: the keep-alive race every
/// HTTP client has. Looking for the close before sending does not settle it
/// (the close may still be on its way), so, like a client pool's idle
/// timeout, a connection idle this long is not reused: a fresh one is opened.
/// (At 100 sends/s over 512 connections, each one idles about 5.1 s.)
const MAX_IDLE: Duration = Duration::from_secs(4);

/// hyper's half of a connection that does the socket I/O.
type Io = hyper::client::conn::http1::Connection<TokioIo<TcpStream>, Full<Bytes>>;

/// One open connection to one instance.
pub struct Connection {
    target: Arc<Target>,
    sender: SendRequest<Full<Bytes>>,
    /// Driven by the task that sends, only while it waits for an answer,
    /// rather than spawned as a task of its own: one task per buyer instead
    /// of two, and no wake-up handed between them for every answer. `None`
    /// once the connection has ended.
    io: Option<Pin<Box<Io>>>,
    /// The instance name last seen on this connection: shared by every
    /// sample it answers, instead of one string per answer.
    instance: Option<Arc<str>>,
    /// When the last exchange ended (or the connection opened).
    idle_since: Instant,
}

impl Connection {
    pub async fn open(target: Arc<Target>) -> anyhow::Result<Self> {
        let stream = TcpStream::connect(target.address)
            .await
            .with_context(|| format!("connecting to {}", target.url))?;
        // Requests are small and answered at once; do not let Nagle hold them.
        stream.set_nodelay(true)?;
        let (sender, io) = handshake(TokioIo::new(stream))
            .await
            .context("HTTP handshake")?;
        Ok(Self {
            target,
            sender,
            io: Some(Box::pin(io)),
            instance: None,
            idle_since: Instant::now(),
        })
    }

    /// `POST /api/sales/{sale_id}/purchase` for `user`, on a connection
    /// [`Connection::freshen`]ed first, as any HTTP client would. A
    /// transport failure is an
    /// [`AnswerKind::Error`](crate::answer::AnswerKind::Error), not a Rust
    /// error: it is one of the things the run measures.
    pub async fn purchase(&mut self, path: &hyper::Uri, user: &str) -> PurchaseAnswer {
        if !self.freshen().await {
            return PurchaseAnswer::error();
        }
        let answer = self
            .try_purchase(path, user)
            .await
            .unwrap_or_else(|_| PurchaseAnswer::error());
        self.idle_since = Instant::now();
        answer
    }

    /// Open the connection again if the server closed it while it sat idle
    /// (its keep-alive timer ran out), or if it sat idle long enough that
    /// the server may be closing it now ([`MAX_IDLE`]). `false` if it could
    /// not be opened. A caller that times its requests calls this before it
    /// starts the clock, so that a reconnect is not counted as the server's
    /// time; `purchase` calls it anyway.
    pub(crate) async fn freshen(&mut self) -> bool {
        if self.idle_since.elapsed() < self.target.max_idle && !self.ended_while_idle() {
            return true;
        }
        match Self::open(Arc::clone(&self.target)).await {
            Ok(fresh) => {
                *self = fresh;
                true
            }
            Err(_) => false,
        }
    }

    /// Whether the connection ended since it last carried a request. hyper's
    /// side is only driven during a request, so look once, without waiting:
    /// a close from the server is then read as the end of the stream.
    fn ended_while_idle(&mut self) -> bool {
        let Some(driver) = self.io.as_mut() else {
            return true;
        };
        let mut context = std::task::Context::from_waker(std::task::Waker::noop());
        if driver.as_mut().poll(&mut context).is_ready() || self.sender.is_closed() {
            self.io = None;
            return true;
        }
        false
    }

    async fn try_purchase(
        &mut self,
        path: &hyper::Uri,
        user: &str,
    ) -> anyhow::Result<PurchaseAnswer> {
        // User ids are generated by the load test from [A-Za-z0-9-]; no
        // escaping needed, and no serializer in the hot path.
        let body = format!(r#"{{"user_id":"{user}"}}"#);
        let request = Request::builder()
            .method(Method::POST)
            .uri(path.clone())
            .header(HOST, self.target.authority.clone())
            .header(CONTENT_TYPE, "application/json")
            .body(Full::new(Bytes::from(body)))?;
        let Self {
            sender,
            io,
            instance,
            ..
        } = self;
        let Some(driver) = io else {
            bail!("the connection has ended");
        };
        let exchange = async {
            sender.ready().await?;
            let response = sender.send_request(request).await?;
            let status = response.status().as_u16();
            let retry_after = response.headers().contains_key(RETRY_AFTER);
            if let Some(name) = response
                .headers()
                .get(INSTANCE_HEADER)
                .and_then(|value| value.to_str().ok())
                && instance.as_deref() != Some(name)
            {
                *instance = Some(Arc::from(name));
            }
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, retry_after, body))
        };
        // The exchange makes progress only while the connection is polled.
        // The connection may also end first with the whole answer already
        // read (`Connection: close`): then the exchange finishes from what
        // hyper buffered, or fails if the answer never came.
        let (status, retry_after, body) = {
            let mut exchange = std::pin::pin!(exchange);
            tokio::select! {
                exchanged = &mut exchange => exchanged?,
                _ = driver.as_mut() => {
                    *io = None;
                    exchange.await?
                }
            }
        };
        Ok(PurchaseAnswer {
            classified: classify(status, &body),
            status: Some(status),
            instance: self.instance.clone(),
            retry_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    use super::*;
    use crate::answer::AnswerKind;

    /// A server that answers the first request of every connection with
    /// `response`, then closes the connection (`close`), or keeps it open
    /// and drops any later request on it unanswered: what a client sees
    /// when its request crosses the server's keep-alive close.
    async fn first_request_server(response: String, close: bool) -> String {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("a port");
        let address = listener.local_addr().expect("an address");
        let response: Arc<str> = response.into();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let response = Arc::clone(&response);
                tokio::spawn(async move {
                    let mut request = vec![0; 4096];
                    let _ = socket.read(&mut request).await;
                    let _ = socket.write_all(response.as_bytes()).await;
                    if close {
                        let _ = socket.shutdown().await;
                    } else {
                        let _ = socket.read(&mut request).await;
                    }
                });
            }
        });
        format!("http://{address}")
    }

    /// An HTTP/1.1 answer with a JSON body; `headers` end with `\r\n`.
    fn answer(status: &str, headers: &str, body: &str) -> String {
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{headers}\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
    }

    #[tokio::test]
    async fn a_whole_answer_on_a_connection_the_server_closes_is_still_an_answer() {
        let response = answer(
            "409 Conflict",
            "Connection: close\r\nX-Seckill-Instance: solo\r\n",
            r#"{"error":"sold_out","message":"the sale is sold out"}"#,
        );
        let target = Target::resolve(&first_request_server(response, true).await)
            .await
            .expect("a target");
        let mut connection = Connection::open(Arc::clone(&target)).await.expect("open");
        let path = purchase_path(1);
        for _ in 0..3 {
            // The second and third purchases find the connection closed and reopen it.
            let answer = connection.purchase(&path, "ann").await;
            assert_eq!(answer.classified.outcome, AnswerKind::SoldOut);
            assert_eq!(answer.instance.as_deref(), Some("solo"));
        }
    }

    #[tokio::test]
    async fn a_connection_idle_past_the_keep_alive_margin_is_not_reused() {
        let accepted = answer(
            "202 Accepted",
            "",
            r#"{"order_id":"00000000-0000-0000-0000-000000000001"}"#,
        );
        let target = Target::resolve(&first_request_server(accepted, false).await)
            .await
            .expect("a target");
        let target = Arc::new(Target {
            max_idle: Duration::from_millis(50),
            ..Arc::into_inner(target).expect("the only reference")
        });
        let mut connection = Connection::open(target).await.expect("open");
        let path = purchase_path(1);
        for user in ["ann", "bob"] {
            let answer = connection.purchase(&path, user).await;
            assert_eq!(answer.status, Some(202), "{user}: {answer:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Whether a `503` said when to try again is read off the answer:
    /// the chaos judge holds every `503` to it.
    #[tokio::test]
    async fn an_answer_says_whether_it_carried_retry_after() {
        for (headers, carried) in [("Retry-After: 1\r\n", true), ("", false)] {
            let unavailable = answer(
                "503 Service Unavailable",
                &format!("Connection: close\r\n{headers}"),
                r#"{"error":"unavailable","message":"Redis does not answer"}"#,
            );
            let target = Target::resolve(&first_request_server(unavailable, true).await)
                .await
                .expect("a target");
            let mut connection = Connection::open(target).await.expect("open");
            let told = connection.purchase(&purchase_path(1), "ann").await;
            assert_eq!(told.status, Some(503));
            assert_eq!(told.retry_after, carried, "{headers:?}: {told:?}");
        }
    }

    #[tokio::test]
    async fn a_connection_closed_before_any_answer_is_an_error() {
        let target = Target::resolve(&first_request_server(String::new(), true).await)
            .await
            .expect("a target");
        let mut connection = Connection::open(target).await.expect("open");
        let answer = connection.purchase(&purchase_path(1), "ann").await;
        assert_eq!(answer.classified.outcome, AnswerKind::Error);
    }
}
