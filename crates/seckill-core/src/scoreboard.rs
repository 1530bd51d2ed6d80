//! The scoreboard: what the live page on the projector shows of one sale,
//! read every [`TICK`] while someone watches.
//!
//! A snapshot ([`Board`]) holds the sale lock's holder and its fence, the
//! fence counter, the writes the fence refused, Redis' stock and buyers,
//! the order queue, every instance's answers (`tally.rs`), and PostgreSQL's
//! orders by status. Redis is read in one round trip per tick; PostgreSQL,
//! which is slower and changes only as the worker writes, at most every
//! [`POSTGRES_EVERY`].
//!
//! A sale with a waiting room adds the room's figures ([`RoomBoard`]): who
//! waits, is admitted, bought, ran out, left; whether it is closed; and
//! the rate it admits at, observed here from its total of admissions over
//! the last [`RATE_WINDOW`].
//!
//! However many browsers watch a sale, one instance reads it once per tick:
//! the first viewer starts a task that reads and publishes on a
//! `tokio::sync::watch` channel, every later viewer subscribes to that
//! channel, and the task stops when the last viewer leaves. A watch channel
//! keeps only the newest snapshot, which is all a slow viewer needs.
//!
//! A server that does not answer shows as `"status": "unavailable"` in its
//! part of the snapshot; the task goes on and reads again at the next tick.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::Serialize;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::domain::Sale;
use crate::keys::SaleKeys;
use crate::lock;
use crate::queue::QueueStats;
use crate::store::{OrderCounts, Store};
use crate::tally;
use crate::waiting_room::{self, RoomFigures};

/// How often a watched sale is read from Redis.
pub(crate) const TICK: Duration = Duration::from_millis(100);
/// How often a watched sale's orders are counted in PostgreSQL.
pub(crate) const POSTGRES_EVERY: Duration = Duration::from_millis(500);
/// How long one read may take before its server counts as unavailable for
/// this tick (a server that hangs must not freeze the board).
const READ_LIMIT: Duration = Duration::from_secs(1);
/// The window a room's admission rate is observed over: long enough to
/// hold several admissions of a slow room, short enough to show a room
/// that stopped admitting within seconds.
pub(crate) const RATE_WINDOW: Duration = Duration::from_secs(5);

/// One snapshot of a sale.
#[derive(Debug, Clone, Serialize)]
pub struct Board {
    pub sale_id: i64,
    /// The snapshot's number, from 1 (0: nothing read yet).
    pub tick: u64,
    /// When it was read, in ms since the epoch (this instance's clock).
    pub at_ms: i64,
    pub redis: Reading<RedisFigures>,
    pub(crate) postgres: Reading<OrderCounts>,
    /// The waiting room's figures; `None` for a sale without a room (or
    /// before the sale itself could be read).
    pub room: Option<Reading<RoomBoard>>,
}

/// What the live page shows of a sale's waiting room.
#[derive(Debug, Clone, Serialize)]
pub struct RoomBoard {
    /// Waiting, active (`admitted`), bought, admissions, expired, abandoned.
    #[serde(flatten)]
    pub figures: RoomFigures,
    /// Admissions per second over the last [`RATE_WINDOW`], from the
    /// room's total as read here tick by tick; `None` until a second of
    /// readings.
    pub per_sec: Option<f64>,
    /// The sale sold out or ended: the room admits nobody (`waiting_room::closed`).
    pub closed: bool,
}

/// A server's part of a snapshot: its figures, or word that it did not
/// answer. Serialized as `{"status": "ok", ...figures}` or
/// `{"status": "unavailable"}`.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Reading<T> {
    Ok(T),
    Unavailable,
}

/// What Redis says of a sale, all of one moment.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RedisFigures {
    /// Who holds the sale lock now, if anyone.
    pub(crate) lock: Option<Holder>,
    /// The fence counter: how many times the lock was ever taken.
    pub(crate) fence: u64,
    /// Commits the fence refused (a holder whose lock had run out).
    pub(crate) fenced: u64,
    /// Units left (`None`: the sale is not loaded).
    pub stock: Option<i64>,
    /// Buyers holding a unit.
    pub(crate) buyers: u64,
    /// The order queue on its way to PostgreSQL.
    pub(crate) queue: QueueStats,
    /// Every instance's answers to purchases, by answer (`tally.rs`); every
    /// answer is present, 0 if none was given.
    pub(crate) answers: BTreeMap<&'static str, u64>,
}

/// The sale lock's holder, read from the lock's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub(crate) struct Holder {
    /// The instance that holds it (its name, or its address).
    pub(crate) instance: String,
    /// Its fencing token; 0 for a lock of a broken strategy, which has none.
    pub(crate) fence: u64,
    /// How long the lock has left, in ms.
    pub(crate) pttl_ms: i64,
}

/// The instance's watched sales. Cheap to clone: every clone shares them.
#[derive(Clone)]
pub struct Scoreboard {
    inner: Arc<Inner>,
}

struct Inner {
    /// Where the figures are read. Fixed at start.
    store: Store,
    /// Cancelled when the instance shuts down: every reading task stops,
    /// and with it every stream of its snapshots.
    shutdown: CancellationToken,
    /// The sender of each watched sale's snapshots, while someone watches.
    /// A std Mutex, not a tokio one: nothing awaits while it is held. It
    /// also decides the race between a viewer arriving and the last one
    /// leaving: see [`Inner::forget_if_unwatched`].
    watched: Mutex<HashMap<i64, Arc<watch::Sender<Arc<Board>>>>>,
    /// Redis reads made so far, all sales together: tests check that it
    /// grows with time, not with viewers.
    redis_reads: AtomicU64,
}

impl Scoreboard {
    pub fn new(store: Store, shutdown: CancellationToken) -> Self {
        Self {
            inner: Arc::new(Inner {
                store,
                shutdown,
                watched: Mutex::default(),
                redis_reads: AtomicU64::new(0),
            }),
        }
    }

    /// Watch a sale: a receiver of its snapshots, the first one within a
    /// tick. Starts the sale's reading task for the first viewer. The
    /// receiver sees the channel close when the instance shuts down.
    pub fn watch(&self, sale_id: i64) -> watch::Receiver<Arc<Board>> {
        let mut watched = self.inner.watched.lock().expect("scoreboard poisoned");
        if let Some(sender) = watched.get(&sale_id) {
            return sender.subscribe();
        }
        let (sender, receiver) = watch::channel(Arc::new(Board::empty(sale_id)));
        let sender = Arc::new(sender);
        watched.insert(sale_id, Arc::clone(&sender));
        // On the store's runtime, not the HTTP worker of the first viewer's
        // request: every viewer waits for its snapshots (`Store::runtime`).
        let reading = Arc::clone(&self.inner).read_while_watched(sale_id, sender);
        self.inner.store.runtime().spawn(reading);
        receiver
    }

    /// Redis reads made so far, all watched sales together.
    pub fn redis_reads(&self) -> u64 {
        self.inner.redis_reads.load(Ordering::Relaxed)
    }

    /// How many sales are watched now (each has one reading task).
    pub fn watched(&self) -> usize {
        self.inner
            .watched
            .lock()
            .expect("scoreboard poisoned")
            .len()
    }
}

impl Inner {
    /// One sale's reading task: a snapshot every tick, until nobody
    /// watches or the instance shuts down.
    async fn read_while_watched(
        self: Arc<Self>,
        sale_id: i64,
        sender: Arc<watch::Sender<Arc<Board>>>,
    ) {
        let keys = SaleKeys::new(self.store.prefix(), sale_id);
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut postgres = Reading::Unavailable;
        let mut postgres_read: Option<Instant> = None;
        // The sale, for its room: read once (the catalog usually has it).
        let mut sale: Option<Arc<Sale>> = None;
        let mut admissions = Admissions::default();
        let mut tick = 0;
        loop {
            tokio::select! {
                () = self.shutdown.cancelled() => break,
                () = sender.closed() => {
                    if self.forget_if_unwatched(sale_id) {
                        return;
                    }
                    continue;
                }
                _ = ticks.tick() => {}
            }
            let redis = self.read_redis(&keys).await;
            if sale.is_none() {
                sale = self.store.sale(sale_id).await.ok().flatten();
            }
            let room = match sale.as_deref() {
                Some(sale) if sale.waiting_room.is_some() => {
                    Some(self.read_room(sale, &redis, &mut admissions).await)
                }
                _ => None,
            };
            if postgres_read.is_none_or(|at| at.elapsed() >= POSTGRES_EVERY) {
                postgres = self.read_postgres(sale_id).await;
                postgres_read = Some(Instant::now());
            }
            tick += 1;
            sender.send_replace(Arc::new(Board {
                sale_id,
                tick,
                at_ms: chrono::Utc::now().timestamp_millis(),
                redis,
                postgres: postgres.clone(),
                room,
            }));
        }
        // Shutting down: dropping the map's sender and ours closes the
        // channel, which ends every stream of this sale.
        self.watched
            .lock()
            .expect("scoreboard poisoned")
            .remove(&sale_id);
    }

    /// Called when the last receiver is gone: stop watching the sale unless
    /// a viewer subscribed meanwhile. The race this prevents: a viewer
    /// arrives just as the last one leaves, finds the sender in the map and
    /// subscribes to a channel whose task is exiting, and never gets a
    /// snapshot. Subscribing and this check both hold the map's lock, so
    /// either the viewer subscribes first (and the task goes on) or the
    /// sale is gone from the map first (and the viewer starts a new task).
    fn forget_if_unwatched(&self, sale_id: i64) -> bool {
        let mut watched = self.watched.lock().expect("scoreboard poisoned");
        let unwatched = watched
            .get(&sale_id)
            .is_none_or(|sender| sender.receiver_count() == 0);
        if unwatched {
            watched.remove(&sale_id);
        }
        unwatched
    }

    async fn read_redis(&self, keys: &SaleKeys) -> Reading<RedisFigures> {
        self.redis_reads.fetch_add(1, Ordering::Relaxed);
        within_limit("Redis", async {
            read_redis(&self.store, keys).await.map(Some)
        })
        .await
    }

    /// The sale's room: its figures, the rate observed, whether it is
    /// closed (by the units left in this tick's `redis` reading).
    async fn read_room(
        &self,
        sale: &Sale,
        redis: &Reading<RedisFigures>,
        admissions: &mut Admissions,
    ) -> Reading<RoomBoard> {
        self.redis_reads.fetch_add(1, Ordering::Relaxed);
        let figures = within_limit("Redis", async {
            waiting_room::figures(&self.store, sale.id).await.map(Some)
        })
        .await;
        let Reading::Ok(figures) = figures else {
            return Reading::Unavailable;
        };
        let stock = match redis {
            Reading::Ok(redis) => redis.stock,
            Reading::Unavailable => None,
        };
        Reading::Ok(RoomBoard {
            figures,
            per_sec: admissions.observe(Instant::now(), figures.admissions),
            closed: waiting_room::closed(sale, stock, chrono::Utc::now()),
        })
    }

    async fn read_postgres(&self, sale_id: i64) -> Reading<OrderCounts> {
        within_limit("PostgreSQL", self.store.order_counts(sale_id)).await
    }
}

/// What a read found, or `Unavailable` if it failed, found nothing or took
/// longer than [`READ_LIMIT`]. The failure is only logged at debug level:
/// the board itself says it, ten times a second.
async fn within_limit<T>(
    server: &'static str,
    read: impl Future<Output = anyhow::Result<Option<T>>>,
) -> Reading<T> {
    match tokio::time::timeout(READ_LIMIT, read).await {
        Ok(Ok(Some(figures))) => Reading::Ok(figures),
        Ok(Ok(None)) | Err(_) => Reading::Unavailable,
        Ok(Err(error)) => {
            tracing::debug!(
                server,
                error = format!("{error:#}"),
                "scoreboard: read failed"
            );
            Reading::Unavailable
        }
    }
}

impl Board {
    /// The placeholder a channel starts with, before the first read.
    fn empty(sale_id: i64) -> Self {
        Self {
            sale_id,
            tick: 0,
            at_ms: 0,
            redis: Reading::Unavailable,
            postgres: Reading::Unavailable,
            room: None,
        }
    }
}

/// A room's total of admissions as read tick by tick, for the rate over
/// the last [`RATE_WINDOW`]. Owned by the sale's reading task alone.
#[derive(Debug, Default)]
struct Admissions {
    /// (when read, the total then), oldest first, spanning the window.
    readings: VecDeque<(Instant, u64)>,
}

impl Admissions {
    /// Note the total read `at`; the admissions per second since the
    /// oldest reading within the window, once they span a second.
    fn observe(&mut self, at: Instant, total: u64) -> Option<f64> {
        if self.readings.back().is_some_and(|(_, last)| total < *last) {
            // The room's keys were wiped: what came before is another room.
            self.readings.clear();
        }
        self.readings.push_back((at, total));
        // Keep the newest reading that is at least a window old, as the start.
        while self
            .readings
            .get(1)
            .is_some_and(|(read, _)| at.duration_since(*read) >= RATE_WINDOW)
        {
            self.readings.pop_front();
        }
        let (since, first) = *self.readings.front().expect("one was just pushed");
        let span = at.duration_since(since).as_secs_f64();
        (span >= 1.0).then(|| (total - first) as f64 / span)
    }
}

/// Every Redis figure of a sale in one round trip. `MULTI`, so that they
/// are of one moment: the lock's value and its time to live belong to the
/// same holder, and the queue's three counts add up. Only reads: nothing
/// here needs a script.
async fn read_redis(store: &Store, keys: &SaleKeys) -> anyhow::Result<RedisFigures> {
    let mut conn = store.redis().await?;
    #[allow(clippy::type_complexity)]
    let (lock_value, pttl, fence, fenced, stock, buyers, waiting, in_flight, dead, answers): (
        Option<String>,
        i64,
        Option<u64>,
        Option<u64>,
        Option<i64>,
        u64,
        u64,
        u64,
        u64,
        HashMap<String, u64>,
    ) = redis::pipe()
        .atomic()
        .get(&keys.lock)
        .pttl(&keys.lock)
        .get(&keys.fence)
        .get(&keys.fenced)
        .get(&keys.stock)
        .hlen(&keys.holds)
        .zcard(&keys.queue.due)
        .zcard(&keys.queue.inflight)
        .zcard(&keys.queue.dead)
        .hgetall(&keys.answers)
        .query_async(&mut conn)
        .await
        .context("reading a sale's figures")?;
    // The broken strategies' locks (`article`, `getset`) hold a time, not
    // an owner: shown as held, by nobody named, with no fence (0).
    let lock =
        lock_value.as_deref().map(
            |value| match (lock::holder_in(value), lock::fence_in(value)) {
                (Some(instance), Some(fence)) => Holder {
                    instance: instance.to_owned(),
                    fence,
                    pttl_ms: pttl,
                },
                _ => Holder {
                    instance: format!("nobody named (the lock's value is {value})"),
                    fence: 0,
                    pttl_ms: pttl,
                },
            },
        );
    Ok(RedisFigures {
        lock,
        fence: fence.unwrap_or(0),
        fenced: fenced.unwrap_or(0),
        stock,
        buyers,
        queue: QueueStats {
            waiting,
            in_flight,
            dead,
        },
        answers: tally::FIELDS
            .iter()
            .map(|field| (*field, answers.get(*field).copied().unwrap_or(0)))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_admission_rate_is_observed_over_the_last_seconds_only() {
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        let mut admissions = Admissions::default();
        assert_eq!(admissions.observe(at(0), 0), None);
        assert_eq!(admissions.observe(at(500), 5), None, "under a second");
        // Ten a second for ten seconds.
        for second in 1..=10 {
            admissions.observe(at(second * 1000), second * 10);
        }
        let rate = admissions.observe(at(10_100), 101).expect("a rate");
        assert!((rate - 10.0).abs() < 0.5, "{rate}");
        // Then none for six seconds: the window holds only those.
        admissions.observe(at(13_000), 101);
        assert_eq!(admissions.observe(at(16_200), 101), Some(0.0));
    }
}
