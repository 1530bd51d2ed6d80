//! Wiring: connection pools, the HTTP server, the in-process worker, and a
//! graceful shutdown.
//!
//! [`Application::build`] binds its listener before returning, so tests can
//! ask for port 0 and read the real port from [`Application::port`].

use std::net::SocketAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use sqlx::PgPool;
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::{PurchaseSettings, RateLimitSettings, STATEMENT_TIMEOUT, WorkerSettings};
use crate::events::SaleEvents;
use crate::purchase::Purchaser;
use crate::scoreboard::Scoreboard;
use crate::services::{redact, redact_redis};
use crate::store::Store;
use crate::strategy::Shop;
use crate::topology::{RedisAt, RedisPool};
use crate::web::{AdminToken, AppState, LiveSales, routes, security};
use crate::worker::Worker;

/// PostgreSQL connections per instance (page reads and the worker).
const PG_POOL_SIZE: u32 = 10;

/// Everything `seckill serve` needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// One Redis server, or a cluster.
    pub redis: RedisAt,
    pub database_url: String,
    pub redis_prefix: String,
    pub bind: SocketAddr,
    pub admin_token: Option<String>,
    pub instance_id: Option<String>,
    /// How long an admin session lasts.
    pub admin_session: Duration,
    /// Event streams served at once; one more is answered 503.
    pub max_event_streams: u32,
    /// Run the queue worker inside this process.
    pub run_worker: bool,
    pub purchase: PurchaseSettings,
    pub worker: WorkerSettings,
    pub limits: RateLimitSettings,
}

/// Connect to PostgreSQL and bring its schema up to date. Migrations are
/// compiled into the binary; running them twice, or from two instances at
/// once, is safe (sqlx takes an advisory lock).
pub async fn connect_postgres(url: &str) -> anyhow::Result<PgPool> {
    let options = PgConnectOptions::from_str(url)
        .with_context(|| format!("{} is not a PostgreSQL URL", redact(url)))?
        // No statement may hang on: a stuck one would hold a page's answer
        // (the worker's writes get a shorter limit, under their lease). It
        // fails as "try again later" (see probe.rs).
        .options([(
            "statement_timeout",
            format!("{}ms", STATEMENT_TIMEOUT.as_millis()),
        )]);
    let pool = PgPoolOptions::new()
        .max_connections(PG_POOL_SIZE)
        // Fail fast while PostgreSQL is down, so the worker can back off and
        // pages can answer 503 instead of hanging.
        .acquire_timeout(Duration::from_secs(3))
        .connect_with(options)
        .await
        .with_context(|| format!("connecting to PostgreSQL at {}", redact(url)))?;
    sqlx::migrate!("./migrations")
        .run(&pool)
        .await
        .context("running database migrations")?;
    Ok(pool)
}

/// A pool of Redis connections to wherever the data is; `wait` bounds how
/// long a caller queues for one.
pub async fn connect_redis(at: &RedisAt, wait: Duration) -> anyhow::Result<RedisPool> {
    let pool = RedisPool::new(at, wait).context("building the Redis pool")?;
    // Fail at start-up, not on the first request, when Redis is unreachable.
    let mut conn = pool
        .get()
        .await
        .with_context(|| format!("connecting to Redis at {}", redact_redis(at)))?;
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .context("pinging Redis")?;
    Ok(pool)
}

/// The listening socket, with a backlog deep enough for a flash crowd: the
/// default of 128 would make the kernel drop the connections of a burst and
/// the clients retry a second later.
fn bind(address: SocketAddr) -> anyhow::Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(address), Type::STREAM, None)
        .context("creating the listening socket")?;
    socket.set_reuse_address(true)?;
    socket
        .bind(&address.into())
        .with_context(|| format!("binding {address}"))?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Connections the kernel queues before the server accepts them.
const LISTEN_BACKLOG: i32 = 4096;

/// Raise this process' soft limit on open files to its hard limit. Every
/// buyer in a burst is one open connection, and the usual soft limit (1024)
/// is far below what thousands of concurrent buyers need.
pub fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(error) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        tracing::warn!(%error, soft, "could not raise the open files limit");
    }
}

/// One running `seckill serve`: the HTTP server, and the tasks that live
/// as long as it does. Owned by whoever runs it; nothing in it is shared.
pub struct Application {
    /// The address the listener is bound to (a real port, even when 0 was
    /// asked for). Set by `build`, read-only after.
    address: SocketAddr,
    /// The actix-web server; awaiting it serves until it stops. Consumed by
    /// `run_until_stopped`, the only thing that stops it.
    server: Server,
    /// The in-process queue worker, unless `--no-worker`. Awaited by
    /// `run_until_stopped` once `shutdown` is cancelled.
    worker: Option<JoinHandle<()>>,
    /// The task that forwards Redis pub/sub to the live pages. Awaited by
    /// `run_until_stopped` once `shutdown` is cancelled.
    events: JoinHandle<()>,
    /// The task that paces stock changes to the open sale pages. Awaited by
    /// `run_until_stopped` once `shutdown` is cancelled.
    live: JoinHandle<()>,
    /// The task that flushes the answer tally into Redis. Stopped (after a
    /// last flush) by `run_until_stopped` through `tally_stop`, and awaited.
    tally: JoinHandle<()>,
    /// Cancelled by `run_until_stopped` once the server has stopped, not
    /// with `shutdown`: requests still finishing after the signal count
    /// answers too, and the last flush must come after them.
    tally_stop: CancellationToken,
    /// Cancelled to stop, by `run_until_stopped` once its `stop` ends (a
    /// signal): ends the event streams, the worker and the events task.
    shutdown: CancellationToken,
}

impl Application {
    pub async fn build(settings: Settings) -> anyhow::Result<Self> {
        let pg = connect_postgres(&settings.database_url).await?;
        let redis = connect_redis(&settings.redis, settings.purchase.lock_wait()).await?;
        // Bind first, so that port 0 (tests) becomes a real port we can name.
        let listener = bind(settings.bind)?;
        let address = listener.local_addr().context("reading the bound address")?;
        let instance = settings
            .instance_id
            .clone()
            .unwrap_or_else(|| address.to_string());
        let instance_header = security::instance_header(&instance)
            .map_err(|error| anyhow::anyhow!("SECKILL_INSTANCE_ID: {error}"))?;

        let store = Store::new(pg, redis, settings.redis_prefix.clone());
        let shutdown = CancellationToken::new();
        let (events, events_task) =
            SaleEvents::start(&settings.redis, &settings.redis_prefix, shutdown.clone())
                .context("starting the sale events listener")?;

        // The in-process worker gets pools of its own: a flood of page
        // views or purchases holding every connection must not stop orders
        // from reaching PostgreSQL, nor a slow batch starve the handlers.
        let worker = if settings.run_worker {
            let pg = connect_postgres(&settings.database_url).await?;
            let redis = connect_redis(&settings.redis, settings.worker.poll()).await?;
            let worker = Worker::new(
                Store::new(pg, redis, settings.redis_prefix.clone()),
                settings.worker.clone(),
            );
            Some(tokio::spawn(
                worker.run_woken(shutdown.clone(), Some(events.subscribe())),
            ))
        } else {
            None
        };

        let purchaser = Purchaser::new(Shop::new(
            store.clone(),
            settings.purchase.clone(),
            &instance,
            settings.worker.payment_window(),
            events.lock_releases(),
        ));
        let tally_stop = CancellationToken::new();
        let tally = tokio::spawn(
            Arc::clone(purchaser.tally()).flush_until(store.clone(), tally_stop.clone()),
        );

        let live = Arc::new(LiveSales::default());
        let live_task =
            tokio::spawn(Arc::clone(&live).follow(events.subscribe(), shutdown.clone()));
        let state = web::Data::new(AppState {
            purchaser,
            scoreboard: Scoreboard::new(store.clone(), shutdown.clone()),
            store,
            admin: AdminToken::new(settings.admin_token.as_deref(), settings.admin_session),
            index: Default::default(),
            live: Arc::clone(&live),
            streams: Arc::new(Semaphore::new(settings.max_event_streams as usize)),
            max_streams: settings.max_event_streams as usize,
            limits: settings.limits.clone(),
            shutdown: shutdown.clone(),
        });
        let server = HttpServer::new(move || {
            App::new()
                .wrap(from_fn({
                    let instance = instance_header.clone();
                    move |request, next| security::guard(request, next, instance.clone())
                }))
                .app_data(state.clone())
                .configure(routes)
        })
        .listen(listener)
        .context("starting the HTTP server")?
        // Requests in flight get this long to finish on shutdown.
        .shutdown_timeout(5)
        // SIGINT and SIGTERM are ours (stop_requested, passed to
        // run_until_stopped), so that the live event streams end before the
        // server waits for them.
        .disable_signals()
        .run();
        tracing::info!(%address, strategy = ?settings.purchase.strategy, worker = settings.run_worker, "listening");
        Ok(Self {
            address,
            server,
            worker,
            events: events_task,
            live: live_task,
            tally,
            tally_stop,
            shutdown,
        })
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Serve until `stop` ends (the process' [`stop_requested`], or never,
    /// for a server inside a test) or the server is stopped; then end the
    /// live event streams, stop accepting, finish requests in flight, let
    /// the worker finish its batch, and return.
    pub async fn run_until_stopped(
        self,
        stop: impl Future<Output = ()> + Send + 'static,
    ) -> anyhow::Result<()> {
        let handle = self.server.handle();
        let shutdown = self.shutdown.clone();
        // Event streams never finish by themselves: cancelling the token
        // first ends them, so the graceful stop below does not wait its
        // whole timeout for every open sale page.
        let on_stop = tokio::spawn(async move {
            stop.await;
            tracing::info!("shutting down");
            shutdown.cancel();
            handle.stop(true).await;
        });
        let served = self.server.await.context("running the HTTP server");
        on_stop.abort();
        self.shutdown.cancel();
        if let Some(worker) = self.worker {
            worker.await.context("the worker task panicked")?;
        }
        self.events.await.context("the sale events task panicked")?;
        self.live.await.context("the live pages' task panicked")?;
        // After the server stopped, so that the answers of the last
        // requests are in the last flush.
        self.tally_stop.cancel();
        self.tally.await.context("the answer tally task panicked")?;
        served
    }
}

/// Ends at the first SIGINT (Ctrl-C) or SIGTERM (`docker stop`, `kill`)
/// the process gets from the moment this is called, not from the moment
/// the returned future is first awaited.
///
/// The race this prevents: a program prints "Press Ctrl-C to stop." (or
/// the address a supervisor waits for) and only then starts to wait. Once
/// tokio has a handler for a signal, a signal that arrives while nothing
/// listens is caught and dropped: a Ctrl-C pressed in that gap was ignored
/// and the program went on serving. Before the first handler, a SIGTERM in
/// the gap killed the process without its graceful stop. So call this
/// before saying the program may be stopped, and await it afterwards.
///
/// A process started through `cluster.rs` (`Deployment::command`) also
/// stops once the process that started it is gone ([`PARENT_PID_ENV`]).
pub fn stop_requested() -> impl Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut interrupt = signal(SignalKind::interrupt()).expect("installing a SIGINT handler");
    let mut terminate = signal(SignalKind::terminate()).expect("installing a SIGTERM handler");
    let parent = std::env::var(PARENT_PID_ENV)
        .ok()
        .and_then(|pid| pid.parse().ok());
    async move {
        tokio::select! {
            _ = interrupt.recv() => {}
            _ = terminate.recv() => {}
            () = parent_gone(parent) => {
                tracing::warn!("the process that started this one is gone; stopping");
            }
        }
    }
}

/// Set by `cluster.rs` on every process it starts: the starter's pid.
///
/// A starter killed with SIGKILL (a test's time limit, the OOM killer)
/// cannot stop its processes, and they served on, orphaned, holding ports
/// and Redis connections, for as long as the machine ran. Each now stops
/// itself once its parent is no longer that pid (an orphan is adopted by
/// init or a subreaper). Compared with the pid passed in, not with one read
/// at start, so a starter that died before the child looked is caught too.
/// (`PR_SET_PDEATHSIG` fires when the spawning thread exits, not the
/// process, and misses a parent that died before the call.)
pub const PARENT_PID_ENV: &str = "SECKILL_PARENT_PID";

/// Ends when this process' parent is no longer `parent` (never, for
/// `None`). Looked at twice a second.
async fn parent_gone(parent: Option<u32>) {
    let Some(parent) = parent else {
        return std::future::pending().await;
    };
    let mut tick = tokio::time::interval(Duration::from_millis(500));
    while std::os::unix::process::parent_id() == parent {
        tick.tick().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use nix::sys::signal::{Signal, raise};

    use super::stop_requested;

    /// The stop is seen though it came before the wait: the program had
    /// printed "Press Ctrl-C to stop." and was not yet waiting. (This
    /// leaves the unit tests' process listening for SIGINT and SIGTERM
    /// until it exits; the unit tests are over in well under a second.)
    #[tokio::test]
    async fn a_signal_between_the_prompt_and_the_wait_is_not_lost() {
        let stop = stop_requested();
        raise(Signal::SIGTERM).expect("SIGTERM to this process");
        // Time for the signal to be caught before anything waits for it.
        tokio::time::sleep(Duration::from_millis(50)).await;
        tokio::time::timeout(Duration::from_secs(5), stop)
            .await
            .expect("the SIGTERM sent before the wait ends it");
    }
}
