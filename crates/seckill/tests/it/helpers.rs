//! The test harness: real Redis and PostgreSQL, a fresh database and a fresh
//! Redis key prefix for every test, removed again when the test ends.
//!
//! The servers come from the same code the binary uses
//! ([`seckill_devenv::services::Services`]): the configured URLs, else the local
//! servers, else private ones started once for this test binary. What a
//! test asks of its [`TestApp`] is in `helpers/app.rs`; the real binaries,
//! started on a test's database and prefix, in `helpers/binaries.rs`;
//! Redis' `MONITOR` feed, for commands that leave no trace, in
//! `helpers/monitor.rs`.

use std::sync::LazyLock;
use std::time::Duration;

use seckill_core::config::{PurchaseSettings, WorkerSettings};
use seckill_core::redis_pool::{RedisAt, RedisPool};
use seckill_core::store::Store;
use seckill_core::urls;
use seckill_core::worker::{BatchReport, Worker};
use seckill_devenv::services::{
    self, Held, Leftovers, PrivatePostgres, PrivateRedis, PrivateServers, Services,
};
use seckill_web::startup::{Application, Settings};
use sqlx::PgPool;
use tokio::sync::OnceCell;
use uuid::Uuid;

mod app;
mod binaries;
mod monitor;
mod raw_buyers;
pub mod source;

pub use app::{Told, no_redirects};

pub use binaries::{
    cluster, create_sale_at, create_sale_with_at, loadtest_command, seckill_command,
    spawn_this_test, start_app_and_a_worker,
};
pub use monitor::Monitor;
pub use raw_buyers::RawBuyers;

/// The repository's root (the workspace), where `docs/`, `deploy/` and
/// `ARCHITECTURE.md` are.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The servers every test of this binary shares (each test gets its own
/// database and key prefix on them), and this run's hold on what it
/// leaves there ([`TEST_RUNS`]).
static SERVICES: OnceCell<(Services, Held)> = OnceCell::const_new();

/// This run of the test binary: 32 hex digits, in the name of every
/// database and key prefix its tests make on the shared servers.
static RUN: LazyLock<String> = LazyLock::new(|| Uuid::new_v4().simple().to_string());

/// What a run of the tests leaves on the shared servers when it is killed
/// outright (Ctrl-C on `cargo test`, which has no handler, a time limit):
/// its `seckill_test_<run>_<test>` databases and `seckill-test-<run>-<test>`
/// keys, each test's [`Scratch`] that was never dropped. The next run takes
/// them away (`seckill-devenv`'s `services/leftovers.rs`). Databases named
/// otherwise (an older build's, `seckill_test_<test>`) are left alone.
pub const TEST_RUNS: Leftovers = Leftovers {
    what: "test run",
    lock_class: 0x5ec_7e5,
    databases: "seckill_test_",
    run_of: |database| {
        let (run, _test) = database.strip_prefix("seckill_test_")?.split_once('_')?;
        (run.len() == 32).then_some(run)
    },
    keys_of: |run| format!("seckill-test-{run}-*"),
};

pub async fn services() -> &'static Services {
    let (services, _held) = SERVICES
        .get_or_init(|| async {
            // One server: `cluster.rs` starts a cluster of its own.
            let redis = std::env::var("SECKILL_REDIS_URL").ok().map(RedisAt::Server);
            // Every test works in a database of its own on this server. On a
            // local server found by discovery, the base is the server's own
            // `postgres` database: discovery's default, the app's `seckill`,
            // would be created for nothing and left behind.
            let database = match std::env::var("SECKILL_DATABASE_URL").ok() {
                Some(url) => Some(url),
                None if services::postgres_answers(services::DEFAULT_POSTGRES_SERVER).await => {
                    Some(
                        urls::with_database(services::DEFAULT_POSTGRES_SERVER, "postgres")
                            .expect("a database URL"),
                    )
                }
                None => None,
            };
            let services = Services::resolve(redis, database.as_deref(), PrivateServers::Allowed)
                .await
                .expect("Redis and PostgreSQL for the tests");
            let held = TEST_RUNS
                .hold_and_sweep(&services.database_url, &services.redis, &RUN)
                .await
                .expect("this test run's lock");
            (services, held)
        })
        .await;
    services
}

/// Held by the tests that saturate both cores for seconds (the bench's,
/// with wrk and redis-benchmark) and by those whose figures depend on
/// being scheduled every few milliseconds (the full lab's thirteen
/// races, the chaos run's paused lock holder, `/healthz`'s second under
/// a flood in `hostile.rs`), so that the two never run at once. Within
/// one test binary, where the tests run in parallel.
pub async fn cores_alone() -> tokio::sync::MutexGuard<'static, ()> {
    static CORES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    CORES.lock().await
}

/// A database and a Redis key prefix of one test's own. Dropping it deletes
/// both, so tests can run in parallel and leave nothing behind.
pub struct Scratch {
    pub database_url: String,
    /// One Redis server, or a cluster (`tests/it/cluster.rs`).
    pub redis: RedisAt,
    pub prefix: String,
}

impl Scratch {
    /// A pool on the scratch database (migrated).
    pub async fn pg(&self) -> sqlx::PgPool {
        seckill_core::store::connect_postgres(&self.database_url)
            .await
            .expect("the scratch database")
    }

    pub async fn new() -> Self {
        Self::on(&services().await.database_url, &services().await.redis).await
    }

    /// A scratch database and prefix on the given servers (fault tests pass
    /// their private ones).
    pub async fn on(database_url: &str, redis: &RedisAt) -> Self {
        // 16 hex digits a test: with the run's 32, the name fills
        // PostgreSQL's 63 bytes and is not cut.
        let (run, id) = (&*RUN, &Uuid::new_v4().simple().to_string()[..16]);
        let database_url = urls::with_database(database_url, &format!("seckill_test_{run}_{id}"))
            .expect("a database URL");
        services::ensure_database(&database_url)
            .await
            .expect("a scratch database");
        Self {
            database_url,
            redis: redis.clone(),
            prefix: format!("seckill-test-{run}-{id}"),
        }
    }

    /// The URL of the one Redis server this test uses (a test that talks
    /// to a cluster goes through a [`RedisPool`] instead).
    pub fn redis_url(&self) -> &str {
        match &self.redis {
            RedisAt::Server(url) => url,
            other => panic!("this test talks to one Redis server, not to {other:?}"),
        }
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let (database_url, redis, prefix) = (
            self.database_url.clone(),
            self.redis.clone(),
            self.prefix.clone(),
        );
        // Drop cannot await; clean up on a thread with a runtime of its own.
        let cleanup = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for clean-up");
            runtime.block_on(async {
                let _ = services::drop_database(&database_url).await;
                if let Ok(pool) = RedisPool::new(&redis, Duration::from_secs(5)) {
                    let _ = pool.delete_under(&prefix).await;
                }
            });
        });
        let _ = cleanup.join();
    }
}

/// An app instance running inside the test process, with no background
/// worker: tests drain the queue themselves with [`TestApp::drain`].
pub struct TestApp {
    pub address: String,
    pub client: reqwest::Client,
    /// The app's data, for the steps a test plays itself.
    pub store: Store,
    pub pg: PgPool,
    pub redis: RedisPool,
    pub worker: Worker,
    /// The worker's settings (the payment window of `commit_as_a_dying_worker`).
    pub worker_settings: WorkerSettings,
    pub scratch: Scratch,
}

/// What a test may change about the app it spawns.
#[derive(Clone)]
pub struct Options {
    pub purchase: PurchaseSettings,
    pub worker: WorkerSettings,
    pub admin_token: Option<String>,
    pub max_event_streams: u32,
    pub admin_session: Duration,
    pub limits: seckill_core::config::RateLimitSettings,
    /// The app's Redis, when not the scratch one (a proxy in front of it,
    /// or sentinels); the test's own connections still go to the scratch
    /// Redis.
    pub app_redis: Option<RedisAt>,
    /// What the app's `202` waits for.
    pub durability: seckill_core::config::RedisDurability,
    /// How long a buyer in a waiting room's line may go without asking
    /// (`--room-abandon-secs`): tests of abandonment set it short.
    pub room_abandon: Duration,
    /// How long a room's keys outlive its sale's end
    /// (`--room-grace-secs`).
    pub room_grace: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            purchase: PurchaseSettings::default(),
            worker: WorkerSettings::default(),
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            max_event_streams: seckill_web::startup::DEFAULT_MAX_EVENT_STREAMS,
            admin_session: Duration::from_secs(3_600),
            // The join limit off: every test's buyers come from 127.0.0.1
            // (`room_limits.rs` tests it on, as `seckill serve` starts).
            limits: seckill_core::config::RateLimitSettings {
                room_joins_per_ip: 0,
                ..Default::default()
            },
            app_redis: None,
            durability: seckill_core::config::RedisDurability::Local,
            room_abandon: Duration::from_secs(seckill_core::config::DEFAULT_ROOM_ABANDON_SECS),
            room_grace: Duration::from_secs(seckill_core::config::DEFAULT_ROOM_GRACE_SECS),
        }
    }
}

impl Options {
    /// The defaults, with purchases made by `strategy`.
    pub fn with_strategy(strategy: seckill_core::config::Strategy) -> Self {
        Self {
            purchase: PurchaseSettings {
                strategy,
                ..PurchaseSettings::default()
            },
            ..Self::default()
        }
    }
}

pub async fn spawn_app() -> TestApp {
    spawn_app_with(Options::default()).await
}

pub async fn spawn_app_with(options: Options) -> TestApp {
    spawn_app_on(Scratch::new().await, options).await
}

pub async fn spawn_app_on(scratch: Scratch, options: Options) -> TestApp {
    let address = start_instance(&scratch, &options, "test").await;
    let pg = scratch.pg().await;
    let redis = seckill_core::redis_pool::connect_redis(&scratch.redis, Duration::from_secs(5))
        .await
        .expect("Redis");
    let store = Store::new(pg.clone(), redis.clone(), scratch.prefix.clone())
        .with_durability(options.durability)
        .with_room_abandon(options.room_abandon)
        .with_room_grace(options.room_grace);
    let worker = Worker::new(store.clone(), options.worker.clone());
    TestApp {
        address,
        client: client(),
        store,
        pg,
        redis,
        worker,
        worker_settings: options.worker,
        scratch,
    }
}

/// An app on a Redis server of the test's own (and the shared
/// PostgreSQL), for a test that kills that server: no other test's Redis
/// goes down with it. The server lives as long as the handle returned.
pub async fn spawn_app_on_private_redis() -> (PrivateRedis, TestApp) {
    spawn_app_on_private_redis_with(Options::default()).await
}

/// [`spawn_app_on_private_redis`], the app started with `options`.
pub async fn spawn_app_on_private_redis_with(options: Options) -> (PrivateRedis, TestApp) {
    let redis = PrivateRedis::start().await.expect("a private Redis");
    let scratch = Scratch::on(
        &services().await.database_url,
        &RedisAt::Server(redis.url()),
    )
    .await;
    (redis, spawn_app_on(scratch, options).await)
}

/// An app on a private PostgreSQL server that the test may stop and start
/// (`PrivatePostgres::stop`, `restart`), and the shared Redis.
pub async fn spawn_app_on_private_postgres() -> (PrivatePostgres, TestApp) {
    let postgres = PrivatePostgres::start()
        .await
        .expect("a private PostgreSQL");
    let scratch = Scratch::on(&postgres.url("postgres"), &services().await.redis).await;
    (postgres, spawn_app_on(scratch, Options::default()).await)
}

/// Start one more app instance on `scratch` (its database and prefix), as
/// `instance`, with `options`; returns its base URL. It runs until the
/// test's runtime ends. Its HTTP workers are threads of their own, but its
/// lock passes, sale reads and Redis connections run on the test's runtime
/// (`Store::runtime`): a test that blocks its thread stalls the app.
pub async fn start_instance(scratch: &Scratch, options: &Options, instance: &str) -> String {
    seckill_cli::process::raise_open_files_limit();
    let app = Application::build(Settings {
        redis: options
            .app_redis
            .clone()
            .unwrap_or_else(|| scratch.redis.clone()),
        durability: options.durability,
        database_url: scratch.database_url.clone(),
        redis_prefix: scratch.prefix.clone(),
        bind: "127.0.0.1:0".parse().expect("an address"),
        admin_token: options.admin_token.clone(),
        instance_id: Some(instance.into()),
        max_event_streams: options.max_event_streams,
        admin_session: options.admin_session,
        room_abandon: options.room_abandon,
        room_grace: options.room_grace,
        run_worker: false,
        purchase: options.purchase.clone(),
        worker: options.worker.clone(),
        limits: options.limits.clone(),
    })
    .await
    .expect("the app starts");
    let address = format!("http://{}", app.address());
    // Stopped with the test's runtime, never by a signal: Ctrl-C on
    // `cargo test` is the test binary's.
    tokio::spawn(app.run_until_stopped(std::future::pending()));
    address
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("an HTTP client")
}

pub async fn orders(pg: &PgPool, sale_id: i64) -> Vec<(Uuid, String, String)> {
    sqlx::query_as("SELECT id, user_id, status FROM orders WHERE sale_id = $1 ORDER BY id")
        .bind(sale_id)
        .fetch_all(pg)
        .await
        .expect("orders")
}

/// Run worker batches until a pass reserves nothing.
pub async fn drain(worker: &Worker) -> BatchReport {
    let mut total = BatchReport::default();
    for _ in 0..1_000 {
        let report = worker.run_once().await.expect("a worker pass");
        if report.reserved == 0 {
            return total;
        }
        total.add(report);
    }
    panic!("the queue did not drain in 1000 passes");
}

/// Read a sale page's event stream until its first snapshot: it is open.
pub async fn read_first_snapshot(stream: &mut reqwest::Response) {
    let mut seen = String::new();
    while !seen.contains("stock_left") {
        let chunk = stream.chunk().await.expect("a chunk").expect("more");
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
}

/// A connection of the test's own to the Redis server at `url`.
pub async fn redis_at(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("a Redis URL")
        .get_multiplexed_async_connection()
        .await
        .expect("a Redis connection")
}

/// Poll `check` every 20 ms until it returns true; panic after `limit`.
pub async fn eventually<F, Fut>(limit: Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("timed out after {limit:?} waiting for: {what}");
}
