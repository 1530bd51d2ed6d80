//! What a test asks of its [`TestApp`]: the HTTP calls a buyer or an admin
//! makes, the figures Redis and PostgreSQL hold behind them, and the steps
//! a worker that dies half-way leaves behind.

use std::time::Duration;

use seckill_core::domain::OrderJob;
use seckill_core::keys::{QueueKeys, SaleKeys};
use seckill_core::lock::{LockGuard, RedisLock};
use seckill_core::queue::{Queue, QueueStats, Reservation};
use seckill_core::redis_pool::RedisConn;
use seckill_core::worker::BatchReport;
use serde_json::{Value, json};
use uuid::Uuid;

use super::{ADMIN_TOKEN, TestApp, drain, orders, read_first_snapshot};

/// What a buyer was told, and when ([`TestApp::purchase_within`]).
#[derive(Debug)]
pub struct Told {
    pub status: u16,
    pub retry_after: bool,
    pub body: Value,
    pub took: Duration,
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

    /// GET `path` and read the body as text, whatever the status: a page,
    /// or the figures of `/metrics`.
    pub async fn get_text(&self, path: &str) -> String {
        self.client
            .get(self.url(path))
            .send()
            .await
            .expect("GET")
            .text()
            .await
            .expect("a text body")
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

    /// POST /api/sales with the admin token: the request, for the caller
    /// to add to, send and judge.
    pub fn post_sale(&self, body: &Value) -> reqwest::RequestBuilder {
        self.client
            .post(self.url("/api/sales"))
            .bearer_auth(ADMIN_TOKEN)
            .json(body)
    }

    pub async fn create_sale_with(&self, body: Value) -> i64 {
        let response = self.post_sale(&body).send().await.expect("POST /api/sales");
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

    /// One purchase and what its buyer was told, given up on (a test
    /// failure) past `limit`.
    pub async fn purchase_within(&self, sale_id: i64, user: &str, limit: Duration) -> Told {
        let started = std::time::Instant::now();
        let response = tokio::time::timeout(limit, self.purchase(sale_id, user))
            .await
            .unwrap_or_else(|_| panic!("{user} got no answer from sale {sale_id} in {limit:?}"));
        let took = started.elapsed();
        let status = response.status().as_u16();
        let retry_after = response.headers().contains_key("retry-after");
        let body = response.json().await.unwrap_or_default();
        Told {
            status,
            retry_after,
            body,
            took,
        }
    }

    /// The sale page's Buy form, posted without JavaScript as `user`.
    pub async fn buy_by_form(&self, sale_id: i64, user: &str) -> reqwest::Response {
        self.client
            .post(self.url(&format!("/sales/{sale_id}/buy")))
            .form(&[("user_id", user)])
            .send()
            .await
            .expect("POST the Buy form")
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

    /// Take sale `sale_id`'s lock for `ttl`, as a purchase's pass does,
    /// on a connection of its own; panics if another holds it.
    pub async fn take_lock(&self, sale_id: i64, ttl: Duration) -> (RedisConn, LockGuard) {
        let keys = self.keys(sale_id);
        let mut conn = self.redis_conn().await;
        let guard = RedisLock::new(&keys.lock, &keys.fence, ttl)
            .try_acquire(&mut conn)
            .await
            .expect("acquire")
            .expect("the lock is free");
        (conn, guard)
    }

    /// Forget a sale's units left and buyers in Redis, as a Redis restarted
    /// without persistence has.
    pub async fn wipe_sale_from_redis(&self, sale_id: i64) {
        let keys = self.keys(sale_id);
        let () = redis::cmd("DEL")
            .arg(&keys.stock)
            .arg(&keys.holds)
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
    pub async fn begin_load(&self, sale_id: i64) -> seckill_core::store::load::Loading {
        seckill_core::store::load::begin_load(&self.pg, sale_id)
            .await
            .expect("begin a load")
    }

    /// Write what a load read into Redis and let go of the sale's row.
    /// Returns whether it wrote.
    pub async fn finish_load(&self, loading: seckill_core::store::load::Loading) -> bool {
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
        redis::cmd("HKEYS")
            .arg(&self.keys(sale_id).holds)
            .query_async(&mut self.redis_conn().await)
            .await
            .expect("HKEYS holds")
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
            .flat_map(|job| seckill_core::domain::carried(&job.payload).expect("a payload"))
            .collect();
        let Some(first) = orders.first() else {
            return;
        };
        // The epoch a live worker would have read before it reserved.
        let epoch = seckill_core::store::load::epoch(
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
            matches!(written, seckill_core::store::Confirmation::Written { .. }),
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

    /// The ids of the jobs waiting on the sale's deadline queue, and those
    /// its confirmed orders call for: one per moment they are to be paid
    /// by (`DeadlineJob::id`), each sorted.
    pub async fn deadlines_queued_and_due(&self, sale_id: i64) -> (Vec<String>, Vec<String>) {
        let mut queued: Vec<String> = redis::cmd("ZRANGE")
            .arg(&self.keys(sale_id).deadlines.due)
            .arg(0)
            .arg(-1)
            .query_async(&mut self.redis_conn().await)
            .await
            .expect("the deadline queue");
        queued.sort();
        let moments: Vec<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
            "SELECT DISTINCT pay_by FROM orders WHERE sale_id = $1 AND status = 'confirmed'",
        )
        .bind(sale_id)
        .fetch_all(&self.pg)
        .await
        .expect("the confirmed orders' deadlines");
        let mut due: Vec<String> = moments
            .into_iter()
            .map(|pay_by| seckill_core::domain::DeadlineJob::new(sale_id, pay_by).id())
            .collect();
        due.sort();
        (queued, due)
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

/// A client that shows redirects instead of following them.
pub fn no_redirects() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("an HTTP client")
}

impl TestApp {
    /// Post an admin page's `form` to `path`, signed in with `cookie` (the
    /// `name=value` [`TestApp::log_in`] returns; `""` sends no cookie), with the
    /// `headers` a browser would add; redirects are shown, not followed.
    pub async fn post_admin_form(
        &self,
        path: &str,
        cookie: &str,
        form: &[(&str, &str)],
        headers: &[(&str, &str)],
    ) -> reqwest::Response {
        let mut request = no_redirects().post(self.url(path)).form(form);
        if !cookie.is_empty() {
            request = request.header(reqwest::header::COOKIE, cookie);
        }
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        request
            .send()
            .await
            .unwrap_or_else(|error| panic!("POST {path}: {error}"))
    }

    /// `GET /admin` with `cookie`: the status says whether the session is
    /// open (`200`) or not (`401`).
    pub async fn admin_status(&self, cookie: &str) -> u16 {
        no_redirects()
            .get(self.url("/admin"))
            .header(reqwest::header::COOKIE, cookie)
            .send()
            .await
            .expect("GET /admin")
            .status()
            .as_u16()
    }

    /// Log in through the admin form; returns the `name=value` of the
    /// admin cookie.
    pub async fn log_in(&self) -> String {
        let response = no_redirects()
            .post(self.url("/admin/login"))
            .form(&[("token", ADMIN_TOKEN)])
            .send()
            .await
            .expect("POST /admin/login");
        assert_eq!(response.status(), 303);
        let set_cookie = response.headers()[reqwest::header::SET_COOKIE]
            .to_str()
            .expect("ASCII");
        set_cookie.split(';').next().expect("name=value").to_owned()
    }
}
