//! What many requests wait on runs on the runtime that made the store or
//! the pool (in `serve`, the process' own), never on the HTTP worker whose
//! request started it: a sale's one read, a pass through a sale's lock,
//! a live page's reading task, a single-flight read (the index's rebuild,
//! a sale page's shared snapshot), and the task that reads a Redis
//! connection's replies.
//!
//! An HTTP worker runs its tasks on one thread, and in a burst its
//! thousands of new requests keep that thread busy. Each test asks from a
//! runtime of its own whose one thread it then holds, as such a burst
//! would, and watches the work get done meanwhile. Where the work ran on
//! the asking runtime, it waited for the thread, and the test times out.

use std::future::Future;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use seckill_core::domain::UserId;
use seckill_core::events::LockReleases;
use seckill_core::purchase::{Outcome, Purchaser};
use seckill_core::scoreboard::{Reading, Scoreboard};
use seckill_core::store::Store;
use seckill_core::strategy::Shop;
use seckill_web::single_flight::SingleFlight;
use tokio_util::sync::CancellationToken;

use crate::helpers::{eventually, spawn_app};

/// How long the asking runtime's thread is held, at most: well past
/// [`LIMIT`], so that work stuck on it is never let go in time.
const HELD_FOR: Duration = Duration::from_secs(60);
/// How long the work may take while it is held. It takes milliseconds;
/// the margin is for a machine loaded far past its cores (a CI run
/// beside the chaos tests once failed this file's lane test at 5 s).
const LIMIT: Duration = Duration::from_secs(15);

/// A runtime of its own, on a thread of its own, whose thread is held
/// (blocked, running nothing) until [`Held::release`]: a stand-in for an
/// HTTP worker's runtime whose thread a burst keeps busy.
struct Held<T> {
    release: mpsc::Sender<()>,
    thread: JoinHandle<T>,
}

impl<T: Send + 'static> Held<T> {
    /// Poll `work` once on the new runtime (far enough to start what it
    /// starts), then hold its thread; once released, finish `work` there.
    async fn after_starting<F>(work: F) -> Self
    where
        F: Future<Output = T> + Send + 'static,
    {
        Self::after(async move {
            let mut work = Box::pin(work);
            assert!(futures::poll!(work.as_mut()).is_pending(), "done at once");
            move || work
        })
        .await
    }

    /// Run `first` to its end on the new runtime, then hold its thread;
    /// once released, run the rest `first` gave. (What `first` waits for
    /// may run on the caller's runtime: this waits without holding it.)
    async fn after<F, R, G>(first: F) -> Self
    where
        F: Future<Output = R> + Send + 'static,
        R: FnOnce() -> G,
        G: Future<Output = T>,
    {
        let (started, ready) = tokio::sync::oneshot::channel();
        let (release, held) = mpsc::channel::<()>();
        let thread = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let rest = first.await;
                started.send(()).expect("the test waits");
                // Held: nothing of this runtime runs meanwhile.
                let _ = held.recv_timeout(HELD_FOR);
                rest().await
            })
        });
        ready.await.expect("the runtime started");
        Self { release, thread }
    }

    /// Let the held runtime go, and wait for what it finishes, without
    /// holding the caller's runtime: the rest of the work may need it.
    async fn release(self) -> T {
        let _ = self.release.send(());
        let thread = self.thread;
        tokio::time::timeout(LIMIT, tokio::task::spawn_blocking(move || thread.join()))
            .await
            .expect("the held runtime finished its work")
            .expect("a thread to wait on it")
            .expect("the held runtime's thread")
    }
}

#[tokio::test]
async fn a_sale_is_read_while_the_http_worker_that_asked_is_busy() {
    let app = spawn_app().await;
    let sale_id = app.create_sale(10).await;
    // A store that has not seen the sale yet.
    let store = Store::new(
        app.pg.clone(),
        app.redis.clone(),
        app.scratch.prefix.clone(),
    );
    // The table locked, the read cannot end before the asking runtime is
    // held: on a loaded machine the store's runtime could otherwise finish
    // it between the first poll's start and its end.
    let mut lock = app.pg.begin().await.expect("a transaction");
    sqlx::query("LOCK TABLE sales IN ACCESS EXCLUSIVE MODE")
        .execute(&mut *lock)
        .await
        .expect("the sales table locked");
    let asking = store.clone();
    let held = Held::after_starting(async move { asking.sale(sale_id).await }).await;
    lock.commit().await.expect("the table let go");
    // Another request for it waits for that read, which must come.
    let sale = tokio::time::timeout(LIMIT, store.sale(sale_id))
        .await
        .expect("the read done while the runtime that asked is held")
        .expect("read")
        .expect("found");
    assert_eq!(sale.id, sale_id);
    assert_eq!(
        held.release().await.expect("read").expect("found").id,
        sale_id
    );
    assert_eq!(store.catalog_reads(), 1, "one read for both");
}

#[tokio::test]
async fn passes_through_the_lock_go_on_while_the_http_worker_that_started_them_is_busy() {
    let app = spawn_app().await;
    let sale_id = app.create_sale(10).await;
    let sale = app.store.sale(sale_id).await.expect("read").expect("found");
    let shop = Shop::new(
        app.store.clone(),
        Default::default(),
        "runtimes-test",
        Duration::from_secs(60),
        LockReleases::default(),
    );
    let purchaser = Arc::new(Purchaser::new(shop));
    let ann = UserId::parse("ann").expect("a buyer id");
    let held = Held::after_starting({
        let (purchaser, sale) = (Arc::clone(&purchaser), Arc::clone(&sale));
        async move { purchaser.purchase(&sale, &ann).await }
    })
    .await;
    eventually(LIMIT, "ann's unit taken in Redis", || async {
        app.redis_stock(sale_id).await == Some(9) && app.redis_buyers(sale_id).await == ["ann"]
    })
    .await;
    // A buyer who queues in the same lane meanwhile is taken through by
    // the pass's own task: not by ann's request, whose thread is held.
    let bob = UserId::parse("bob").expect("a buyer id");
    let outcome = tokio::time::timeout(LIMIT, purchaser.purchase(&sale, &bob))
        .await
        .expect("bob answered while ann's request is held")
        .expect("an answer");
    assert!(matches!(outcome, Outcome::Accepted { .. }), "{outcome:?}");
    assert_eq!(app.redis_stock(sale_id).await, Some(8));
    let outcome = held.release().await.expect("an answer");
    assert!(matches!(outcome, Outcome::Accepted { .. }), "{outcome:?}");
}

#[tokio::test]
async fn a_connection_answers_while_the_http_worker_that_opened_it_is_busy() {
    let app = spawn_app().await;
    let pool = seckill_core::redis_pool::connect_redis(&app.scratch.redis, Duration::from_secs(5))
        .await
        .expect("a pool");
    // The pool's one connection, taken here, so that the held runtime has
    // to open one.
    let _first = pool.get().await.expect("a connection");
    let (opened, mut taken) = tokio::sync::mpsc::unbounded_channel();
    let opening = pool.clone();
    let held = Held::after(async move {
        let conn = opening.get().await.expect("a second connection");
        opened.send(conn).expect("the test waits");
        || async {}
    })
    .await;
    let mut conn = taken.recv().await.expect("the held runtime's connection");
    let pong: String = tokio::time::timeout(LIMIT, redis::cmd("PING").query_async(&mut conn))
        .await
        .expect("an answer while the runtime that opened it is held")
        .expect("PONG");
    assert_eq!(pong, "PONG");
    held.release().await;
}

#[tokio::test]
async fn a_live_page_gets_its_snapshots_while_the_http_worker_of_its_first_viewer_is_busy() {
    let app = spawn_app().await;
    let sale_id = app.create_sale(10).await;
    let board = Scoreboard::new(app.store.clone(), CancellationToken::new());
    let (watching, mut watched) = tokio::sync::mpsc::unbounded_channel();
    let held = Held::after(async move {
        watching.send(board.watch(sale_id)).expect("the test waits");
        || async {}
    })
    .await;
    let mut snapshots = watched.recv().await.expect("the first viewer's receiver");
    tokio::time::timeout(LIMIT, snapshots.changed())
        .await
        .expect("a snapshot while the runtime of the first viewer is held")
        .expect("the reading task runs");
    let board = Arc::clone(&snapshots.borrow());
    assert_eq!((board.sale_id, board.tick), (sale_id, 1));
    assert!(
        matches!(&board.redis, Reading::Ok(figures) if figures.stock == Some(10)),
        "{:?}",
        board.redis
    );
    held.release().await;
}

#[tokio::test]
async fn a_single_flight_read_is_shared_while_the_http_worker_of_its_first_caller_is_busy() {
    let fresh = Arc::new(SingleFlight::<u32>::default());
    let runtime = tokio::runtime::Handle::current();
    let max_age = Duration::from_secs(60);
    let asking = Arc::clone(&fresh);
    let first = runtime.clone();
    // The read's answer comes when the test says: the read is under way
    // when the first caller's runtime is held, however loaded the machine.
    let (answer, answered) = tokio::sync::oneshot::channel::<()>();
    let held = Held::after_starting(async move {
        let read = move || async move {
            answered.await.expect("the test answers");
            Ok::<_, anyhow::Error>(7)
        };
        asking.get(&first, max_age, read).await.expect("read").1
    })
    .await;
    answer.send(()).expect("the read waits");
    // Another caller waits for that read, which must come and be kept.
    let (_, value) = tokio::time::timeout(
        LIMIT,
        fresh.get(&runtime, max_age, || async { Ok::<_, anyhow::Error>(8) }),
    )
    .await
    .expect("the read done and kept while the runtime that asked is held")
    .expect("read");
    assert_eq!(value, 7, "the first caller's read, shared");
    assert_eq!(held.release().await, 7);
}
