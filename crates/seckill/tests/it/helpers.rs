//! The test harness: real Redis and PostgreSQL, a fresh database and a fresh
//! Redis key prefix for every test, removed again when the test ends.
//!
//! The servers come from the same code the binary uses
//! ([`seckill_devenv::services::Services`]): the configured URLs, else the local
//! servers, else private ones started once for this test binary.

use std::process::Stdio;
use std::time::Duration;

use seckill_core::config::{PurchaseSettings, WorkerSettings};
use seckill_core::domain::OrderJob;
use seckill_core::keys::{QueueKeys, SaleKeys};
use seckill_core::queue::{Queue, QueueStats, Reservation};
use seckill_core::redis_pool::{RedisAt, RedisConn, RedisPool};
use seckill_core::store::Store;
use seckill_core::urls;
use seckill_core::worker::{BatchReport, Worker};
use seckill_devenv::processes::{Deployment, Fleet};
use seckill_devenv::services::{self, PrivateServers, Services};
use seckill_web::startup::{Application, Settings};
use serde_json::{Value, json};
use sqlx::PgPool;
use tokio::sync::OnceCell;
use uuid::Uuid;

/// The repository's root (the workspace), where `docs/`, `deploy/` and
/// `ARCHITECTURE.md` are.
pub fn repo_root() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub const ADMIN_TOKEN: &str = "test-admin-token";

/// The servers every test of this binary shares (each test gets its own
/// database and key prefix on them).
static SERVICES: OnceCell<Services> = OnceCell::const_new();

pub async fn services() -> &'static Services {
    SERVICES
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
            Services::resolve(redis, database.as_deref(), PrivateServers::Allowed)
                .await
                .expect("Redis and PostgreSQL for the tests")
        })
        .await
}

/// Held by the tests that saturate both cores for seconds (the bench's,
/// with wrk and redis-benchmark) and by those whose figures depend on
/// being scheduled every few milliseconds (the full lab's thirteen
/// races, the chaos run's paused lock holder), so that the two never run
/// at once. Within one test binary, where the tests run in parallel.
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
        let id = Uuid::new_v4().simple().to_string();
        let database_url = urls::with_database(database_url, &format!("seckill_test_{id}"))
            .expect("a database URL");
        services::ensure_database(&database_url)
            .await
            .expect("a scratch database");
        Self {
            database_url,
            redis: redis.clone(),
            prefix: format!("seckill-test-{id}"),
        }
    }

    /// The URL of the one Redis server this test uses (a test that talks
    /// to a cluster goes through a [`RedisPool`] instead).
    pub fn redis_url(&self) -> &str {
        match &self.redis {
            RedisAt::Server(url) => url,
            RedisAt::Cluster(_) => panic!("this test talks to one Redis server, not a cluster"),
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
    /// The app's Redis, when not the scratch one (a proxy in front of it);
    /// the test's own connections still go straight to the scratch Redis.
    pub app_redis_url: Option<String>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            purchase: PurchaseSettings::default(),
            worker: WorkerSettings::default(),
            admin_token: Some(ADMIN_TOKEN.to_owned()),
            max_event_streams: seckill_core::config::DEFAULT_MAX_EVENT_STREAMS,
            admin_session: Duration::from_secs(3_600),
            limits: seckill_core::config::RateLimitSettings::default(),
            app_redis_url: None,
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
    let store = Store::new(pg.clone(), redis.clone(), scratch.prefix.clone());
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

/// Start one more app instance on `scratch` (its database and prefix), as
/// `instance`, with `options`; returns its base URL. It runs until the
/// test's runtime ends. Its HTTP workers are threads of their own, but its
/// lock passes, sale reads and Redis connections run on the test's runtime
/// (`Store::runtime`): a test that blocks its thread stalls the app.
pub async fn start_instance(scratch: &Scratch, options: &Options, instance: &str) -> String {
    seckill_core::process::raise_open_files_limit();
    let app = Application::build(Settings {
        redis: options
            .app_redis_url
            .clone()
            .map_or_else(|| scratch.redis.clone(), RedisAt::Server),
        database_url: scratch.database_url.clone(),
        redis_prefix: scratch.prefix.clone(),
        bind: "127.0.0.1:0".parse().expect("an address"),
        admin_token: options.admin_token.clone(),
        instance_id: Some(instance.into()),
        max_event_streams: options.max_event_streams,
        admin_session: options.admin_session,
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

impl TestApp {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.address)
    }

    /// GET `path` and read the JSON body, whatever the status.
    pub async fn get_json(&self, path: &str) -> Value {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("GET")
            .json()
            .await
            .expect("a JSON body")
    }

    /// Open the sale page's event stream and wait for its first snapshot.
    pub async fn open_event_stream(&self, sale: i64) -> reqwest::Response {
        let mut stream = self
            .client
            .get(self.url(&format!("/api/sales/{sale}/events")))
            .send()
            .await
            .expect("GET events");
        assert_eq!(stream.status(), 200);
        read_first_snapshot(&mut stream).await;
        stream
    }

    /// Create a sale through the admin API; returns its id.
    pub async fn create_sale(&self, stock: i64) -> i64 {
        self.create_sale_with(json!({"name": "Phone", "stock": stock, "price_cents": 99_900}))
            .await
    }

    pub async fn create_sale_with(&self, body: Value) -> i64 {
        let response = self
            .client
            .post(self.url("/api/sales"))
            .bearer_auth(ADMIN_TOKEN)
            .json(&body)
            .send()
            .await
            .expect("POST /api/sales");
        assert_eq!(response.status(), 201, "creating a sale");
        let sale: Value = response.json().await.expect("a sale");
        sale["id"].as_i64().expect("a sale id")
    }

    pub async fn purchase(&self, sale_id: i64, user: &str) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/api/sales/{sale_id}/purchase")))
            .json(&json!({ "user_id": user }))
            .send()
            .await
            .expect("POST purchase")
    }

    /// Run worker batches until the queues are empty.
    pub async fn drain(&self) -> BatchReport {
        drain(&self.worker).await
    }

    pub fn keys(&self, sale_id: i64) -> SaleKeys {
        SaleKeys::new(&self.scratch.prefix, sale_id)
    }

    pub async fn redis_conn(&self) -> RedisConn {
        self.redis.get().await.expect("a Redis connection")
    }

    /// Forget a sale's units left and buyers in Redis, as a Redis restarted
    /// without persistence has.
    pub async fn wipe_sale_from_redis(&self, sale_id: i64) {
        let keys = self.keys(sale_id);
        let () = redis::cmd("DEL")
            .arg(&keys.stock)
            .arg(&keys.buyers)
            .query_async(&mut self.redis_conn().await)
            .await
            .expect("DEL");
    }

    /// Delete every key of a sale (its figures, its queues, its lock), as a
    /// Redis restarted without persistence has lost them.
    pub async fn wipe_all_of_sale(&self, sale_id: i64) {
        let mut conn = self.redis_conn().await;
        let pattern = format!("{}:{{sale:{sale_id}}}:*", self.scratch.prefix);
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(pattern)
            .query_async(&mut conn)
            .await
            .expect("KEYS");
        assert!(!keys.is_empty(), "the sale has no keys to wipe");
        let () = redis::cmd("DEL")
            .arg(keys)
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }

    /// Start loading a sale from PostgreSQL as a page would, and stop
    /// there: the load holds the sale's row until [`TestApp::finish_load`].
    pub async fn begin_load(&self, sale_id: i64) -> seckill_core::store::sales::Loading {
        seckill_core::store::sales::begin_load(&self.pg, sale_id)
            .await
            .expect("begin a load")
    }

    /// Write what a load read into Redis and let go of the sale's row.
    /// Returns whether it wrote.
    pub async fn finish_load(&self, loading: seckill_core::store::sales::Loading) -> bool {
        loading
            .write(&mut self.redis_conn().await, &self.scratch.prefix)
            .await
            .expect("finish the load")
    }

    /// Units left according to Redis.
    pub async fn redis_stock(&self, sale_id: i64) -> Option<i64> {
        redis::cmd("GET")
            .arg(&self.keys(sale_id).stock)
            .query_async(&mut self.redis_conn().await)
            .await
            .expect("GET stock")
    }

    pub async fn redis_buyers(&self, sale_id: i64) -> Vec<String> {
        redis::cmd("SMEMBERS")
            .arg(&self.keys(sale_id).buyers)
            .query_async(&mut self.redis_conn().await)
            .await
            .expect("SMEMBERS buyers")
    }

    pub async fn queue_stats(&self, sale_id: i64) -> QueueStats {
        Queue::new(self.keys(sale_id).queue)
            .stats(&mut self.redis_conn().await)
            .await
            .expect("queue stats")
    }

    /// Reserve up to ten jobs of `queue` as a worker that is about to die
    /// would: with a 20 ms lease, never to be acknowledged.
    pub async fn reserve_as_a_dying_worker(&self, queue: QueueKeys) -> Reservation {
        Queue::new(queue)
            .reserve(
                &mut self.redis_conn().await,
                10,
                Duration::from_millis(20),
                5,
            )
            .await
            .expect("reserve")
    }

    /// Write reserved order jobs to PostgreSQL, as the worker does, and
    /// then neither queue their deadlines nor acknowledge them: a worker
    /// that dies right after its commit.
    pub async fn commit_as_a_dying_worker(&self, taken: &Reservation) {
        let orders: Vec<OrderJob> = taken
            .jobs
            .iter()
            .map(|job| OrderJob::from_payload(&job.payload).expect("a payload"))
            .collect();
        let Some(first) = orders.first() else {
            return;
        };
        // The epoch a live worker would have read before it reserved.
        let epoch = seckill_core::store::sales::epoch(
            &mut self.redis_conn().await,
            &self.keys(first.sale_id),
        )
        .await
        .expect("the load epoch");
        let written = self
            .store
            .confirm_orders(&orders, &self.worker_settings, epoch.as_deref())
            .await
            .expect("write");
        assert!(
            matches!(written, seckill_core::store::Confirmation::Written(_)),
            "{written:?}"
        );
    }

    /// The sale's payment deadline queue.
    pub async fn deadline_stats(&self, sale_id: i64) -> QueueStats {
        Queue::new(self.keys(sale_id).deadlines)
            .stats(&mut self.redis_conn().await)
            .await
            .expect("deadline queue stats")
    }

    /// POST /api/orders/{id}/pay.
    pub async fn pay(&self, order_id: Uuid) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/api/orders/{order_id}/pay")))
            .send()
            .await
            .expect("POST pay")
    }

    /// GET /api/orders/{id}, as JSON.
    pub async fn order(&self, order_id: Uuid) -> Value {
        self.get_json(&format!("/api/orders/{order_id}")).await
    }

    /// Buy a unit for `user` and return the order id; panics unless 202.
    pub async fn buy(&self, sale_id: i64, user: &str) -> Uuid {
        let response = self.purchase(sale_id, user).await;
        assert_eq!(response.status(), 202, "buying for {user}");
        let body: Value = response.json().await.expect("a JSON body");
        body["order_id"]
            .as_str()
            .and_then(|id| Uuid::parse_str(id).ok())
            .expect("an order id")
    }

    /// `(order id, user id, status)` of every order of a sale in PostgreSQL.
    pub async fn orders(&self, sale_id: i64) -> Vec<(Uuid, String, String)> {
        orders(&self.pg, sale_id).await
    }

    /// How many sales PostgreSQL holds.
    pub async fn sale_count(&self) -> i64 {
        sqlx::query_scalar("SELECT count(*) FROM sales")
            .fetch_one(&self.pg)
            .await
            .expect("count sales")
    }

    /// The sale's `sold` counter in PostgreSQL.
    pub async fn sold(&self, sale_id: i64) -> i32 {
        sqlx::query_scalar("SELECT sold FROM sales WHERE id = $1")
            .bind(sale_id)
            .fetch_one(&self.pg)
            .await
            .expect("sold")
    }
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

/// The scratch database and prefix as a deployment of the real `seckill`
/// binary, with the tests' admin token and `env` added.
pub fn deployment(scratch: &Scratch, env: &[(&str, &str)]) -> Deployment {
    let deployment = Deployment::new(
        env!("CARGO_BIN_EXE_seckill"),
        &scratch.redis,
        &scratch.database_url,
        &scratch.prefix,
    )
    .env("SECKILL_ADMIN_TOKEN", ADMIN_TOKEN);
    env.iter().fold(deployment, |deployment, (name, value)| {
        deployment.env(name, *value)
    })
}

/// An empty cluster of `seckill` processes on the scratch database and prefix.
pub fn cluster(scratch: &Scratch, env: &[(&str, &str)]) -> Fleet {
    Fleet::new(deployment(scratch, env))
}

/// `seckill <args>` (the real binary) on the scratch database and prefix.
pub fn seckill_command(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    deployment(scratch, env).command(args)
}

/// `seckill-loadtest <args>` (the real binary) on the scratch database and prefix.
pub fn loadtest_command(
    scratch: &Scratch,
    args: &[&str],
    env: &[(&str, &str)],
) -> tokio::process::Command {
    deployment(scratch, env)
        .with_binary(env!("CARGO_BIN_EXE_seckill-loadtest"))
        .command(args)
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

/// Start this test binary again, running only `test` (its full path, such as
/// `lock::some_test`), with `env` set. Tests use it to get a second process
/// that they can run beside themselves, or kill.
pub fn spawn_this_test(test: &str, env: &[(&str, &str)]) -> tokio::process::Child {
    tokio::process::Command::new(std::env::current_exe().expect("the test binary"))
        .args([test, "--exact", "--nocapture", "--test-threads=1"])
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("starting a child test process")
}

/// Create a sale of `stock` units through the admin API of the instance at
/// `url` (a `seckill serve` process); returns its id.
pub async fn create_sale_at(url: &str, name: &str, stock: i64) -> i64 {
    let created: serde_json::Value = client()
        .post(format!("{url}/api/sales"))
        .bearer_auth(ADMIN_TOKEN)
        .json(&serde_json::json!({"name": name, "stock": stock, "price_cents": 99_900}))
        .send()
        .await
        .expect("POST /api/sales")
        .json()
        .await
        .expect("a sale");
    created["id"].as_i64().expect("a sale id")
}

/// Start app instance `name` without a worker, and a stand-alone worker
/// beside it; returns the instance's base URL.
pub async fn start_app_and_a_worker(processes: &mut Fleet, name: &str) -> String {
    let url = processes
        .start_app(name, &["--no-worker"])
        .await
        .expect("the instance starts");
    processes
        .start_worker("worker", &[])
        .expect("the worker starts");
    url
}
