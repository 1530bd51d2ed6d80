//! Wiring: connection pools, the HTTP server, the in-process worker, and a
//! graceful shutdown.
//!
//! [`Application::build`] binds its listener before returning, so tests can
//! ask for port 0 and read the real port from [`Application::port`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use actix_web::dev::Server;
use actix_web::middleware::from_fn;
use actix_web::{App, HttpServer, web};
use anyhow::Context;
use tokio::sync::Semaphore;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::admin_token::AdminToken;
use crate::live::LiveSales;
use crate::state::AppState;
use crate::{routes, security};
use seckill_core::config::{PurchaseSettings, RateLimitSettings, RedisDurability, WorkerSettings};
use seckill_core::events::SaleEvents;
use seckill_core::purchase::Purchaser;
use seckill_core::redis_pool::{RedisAt, RedisTimeouts, connect_redis_with};
use seckill_core::scoreboard::Scoreboard;
use seckill_core::store::{Store, connect_postgres};
use seckill_core::strategy::Shop;
use seckill_core::worker::Worker;

/// Event streams one instance serves at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS: u32 = 10_000;

/// Everything `seckill serve` needs.
#[derive(Debug, Clone)]
pub struct Settings {
    /// One Redis server, or a cluster.
    pub redis: RedisAt,
    /// What a `202` waits for: the primary's write, or a replica's too.
    pub durability: RedisDurability,
    pub database_url: String,
    pub redis_prefix: String,
    pub bind: SocketAddr,
    pub admin_token: Option<String>,
    pub instance_id: Option<String>,
    /// How long an admin session lasts.
    pub admin_session: Duration,
    /// Event streams served at once; one more is answered 503.
    pub max_event_streams: u32,
    /// How long a buyer in a waiting room's line may go without asking
    /// before the room drops them as abandoned (`seckill_core::waiting_room`).
    pub room_abandon: Duration,
    /// How long a waiting room's keys outlive its sale's end
    /// (`seckill_core::waiting_room`).
    pub room_grace: Duration,
    /// Run the queue worker inside this process.
    pub run_worker: bool,
    pub purchase: PurchaseSettings,
    pub worker: WorkerSettings,
    pub limits: RateLimitSettings,
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
        // Settings built as values (tests, tools) meet the ranges the
        // command line enforces.
        settings.purchase.check()?;
        settings.worker.check()?;
        settings.limits.check()?;
        // Refused before anything is connected: a short admin token is a
        // mistake to fix, not a server to run.
        let admin = AdminToken::parse(settings.admin_token.as_deref(), settings.admin_session)?;
        let pg = connect_postgres(&settings.database_url).await?;
        // One timeout policy for every topology, long enough for the
        // replica wait (`redis_pool/timeouts.rs`).
        let timeouts: RedisTimeouts = settings.durability.timeouts();
        let redis =
            connect_redis_with(&settings.redis, settings.purchase.lock_wait(), timeouts).await?;
        // Bind first, so that port 0 (tests) becomes a real port we can name.
        let listener = bind(settings.bind)?;
        let address = listener.local_addr().context("reading the bound address")?;
        let instance = settings
            .instance_id
            .clone()
            .unwrap_or_else(|| address.to_string());
        let instance_header = security::instance_header(&instance)
            .map_err(|error| anyhow::anyhow!("SECKILL_INSTANCE_ID: {error}"))?;

        let store = Store::new(pg, redis, settings.redis_prefix.clone())
            .with_durability(settings.durability)
            .with_room_abandon(settings.room_abandon)
            .with_room_grace(settings.room_grace);
        // Read once now, while PostgreSQL answers: every pass of `lock`
        // and `lua` names its orders with the database's key, and the
        // rooms sign with it, so a purchase never waits on PostgreSQL
        // for it, nor fails while PostgreSQL is down.
        store.pass_key().await?;
        let shutdown = CancellationToken::new();
        let (events, events_task) =
            SaleEvents::start(&settings.redis, &settings.redis_prefix, shutdown.clone())
                .context("starting the sale events listener")?;

        // The in-process worker gets pools of its own: a flood of page
        // views or purchases holding every connection must not stop orders
        // from reaching PostgreSQL, nor a slow batch starve the handlers.
        let worker = if settings.run_worker {
            let pg = connect_postgres(&settings.database_url).await?;
            let redis =
                connect_redis_with(&settings.redis, settings.worker.poll(), timeouts).await?;
            let worker = Worker::new(
                Store::new(pg, redis, settings.redis_prefix.clone())
                    .with_durability(settings.durability),
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
            admin,
            index: Default::default(),
            live: Arc::clone(&live),
            streams: Arc::new(Semaphore::new(settings.max_event_streams as usize)),
            max_streams: settings.max_event_streams as usize,
            limits: settings.limits.clone(),
            room_views: Default::default(),
            shutdown: shutdown.clone(),
        });
        tokio::spawn(forget_ended_sales(
            state.clone(),
            settings.purchase.forget_ended_after(),
            shutdown.clone(),
        ));
        let server = HttpServer::new(move || {
            App::new()
                .wrap(from_fn({
                    let instance = instance_header.clone();
                    move |request, next| security::guard(request, next, instance.clone())
                }))
                .app_data(state.clone())
                .configure(routes::routes)
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

/// How often, at most, an instance forgets the sales that ended (more
/// often when `--forget-ended-after-secs` is shorter).
const FORGET_EVERY: Duration = Duration::from_secs(10);

/// Forget the sales that ended, and the sale pages' shared state of the
/// sales no page watches any more, every [`FORGET_EVERY`], until
/// `shutdown`: what an instance keeps of each sale stays bounded by the
/// sales that are live, not by every sale it ever served
/// (`Purchaser::forget_ended`, `LiveSales::forget_unwatched`).
async fn forget_ended_sales(
    state: web::Data<AppState>,
    after: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval(FORGET_EVERY.min(after));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let before = chrono::Utc::now() - after;
        let forgotten = state.purchaser.forget_ended(before);
        let unwatched = state.live.forget_unwatched() + state.room_views.forget_idle(after);
        if forgotten + unwatched > 0 {
            tracing::debug!(forgotten, unwatched, "ended and unwatched sales forgotten");
        }
    }
}
