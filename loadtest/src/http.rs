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

use anyhow::{Context, bail};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{SendRequest, handshake};
use hyper::header::{CONTENT_TYPE, HOST, HeaderValue};
use hyper::{Method, Request};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use crate::outcome::{Classified, classify};

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
        }))
    }
}

/// What one request got back.
#[derive(Debug, Clone)]
pub struct Answer {
    pub classified: Classified,
    /// The `X-Seckill-Instance` header, if the answer had one.
    pub instance: Option<Arc<str>>,
}

impl Answer {
    /// No answer: the connection failed.
    pub fn error() -> Self {
        Self {
            classified: Classified::error(),
            instance: None,
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
        })
    }

    pub fn target(&self) -> &Arc<Target> {
        &self.target
    }

    /// `POST /api/sales/{sale_id}/purchase` for `user`. A connection the
    /// server closed while it sat idle (its keep-alive timer ran out) is
    /// opened again first, as any HTTP client would. A transport failure
    /// is an [`Outcome::Error`](crate::outcome::Outcome::Error), not a Rust
    /// error: it is one of the things the run measures.
    pub async fn purchase(&mut self, path: &hyper::Uri, user: &str) -> Answer {
        if self.ended_while_idle() {
            match Self::open(Arc::clone(&self.target)).await {
                Ok(fresh) => *self = fresh,
                Err(_) => return Answer::error(),
            }
        }
        self.try_purchase(path, user)
            .await
            .unwrap_or_else(|_| Answer::error())
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

    async fn try_purchase(&mut self, path: &hyper::Uri, user: &str) -> anyhow::Result<Answer> {
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
            if let Some(name) = response
                .headers()
                .get(INSTANCE_HEADER)
                .and_then(|value| value.to_str().ok())
                && instance.as_deref() != Some(name)
            {
                *instance = Some(Arc::from(name));
            }
            let body = response.into_body().collect().await?.to_bytes();
            anyhow::Ok((status, body))
        };
        // The exchange makes progress only while the connection is polled.
        let (status, body) = tokio::select! {
            exchanged = exchange => exchanged?,
            ended = driver.as_mut() => {
                *io = None;
                bail!("the connection ended mid-request: {ended:?}");
            }
        };
        Ok(Answer {
            classified: classify(status, &body),
            instance: self.instance.clone(),
        })
    }
}
