//! Live units-left for the sale pages, and the sale locks' releases for
//! their waiters: Redis pub/sub in, one broadcast out.
//!
//! Every script that changes a sale's stock (a purchase, a unit given back)
//! publishes the new units left on the sale's channel (`keys::SaleKeys::events`).
//! Each app instance holds ONE Redis pub/sub connection, pattern-subscribed
//! to every sale's channel, and re-broadcasts what arrives on a
//! `tokio::sync::broadcast` channel. Its receivers are the worker, which
//! wakes on new orders, and one task of `web::live`, which paces each
//! watched sale's changes to every browser's server-sent-event stream of
//! it. So a thousand watching browsers cost one Redis connection, not a
//! thousand.
//!
//! In a Redis Cluster, a plain `PUBLISH` (from the scripts, on whichever
//! master owns the sale's slot) is carried to every node over the cluster
//! bus, so the instance subscribes on any one node, and on the next one
//! when that one fails (`redis_pool.rs`). Sharded pub/sub (`SSUBSCRIBE`)
//! would keep each message on its shard's nodes, but it has no pattern
//! form: an instance would have to follow every sale's channel by name.
//!
//! The same connection follows every sale lock's release channel
//! (`keys::lock_released`, published by `lua/lock_release.lua` and
//! `lua/purchase_commit.lua`), and wakes the instance's waiters for that
//! sale's lock ([`LockReleases`]): a waiter learns of a release one message
//! after it happened, instead of at its next poll.
//!
//! Pub/sub is fire-and-forget: a message published while the connection is
//! down, or one a slow receiver lags behind on, is lost. The streams
//! therefore also send a fresh snapshot, read from Redis, every few
//! seconds, so a page that missed a message catches up by itself; and a
//! lock's waiter still backs off and tries again by itself (`lock.rs`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures_util::StreamExt;
use tokio::sync::{Notify, broadcast};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::keys::{self, SaleChannel};
use crate::redis_pool::RedisAt;

/// Messages a slow receiver may fall behind by before it skips ahead (it
/// then relies on the next snapshot).
const CAPACITY: usize = 1024;

/// A sale's units left changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StockChange {
    pub sale_id: i64,
    pub stock_left: i64,
}

/// The instance's fan-out of stock changes. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SaleEvents {
    sender: broadcast::Sender<StockChange>,
    releases: LockReleases,
}

/// Where each sale lock's announced releases wake this instance's waiters.
/// Cheap to clone: the clones share the map.
#[derive(Debug, Clone, Default)]
pub struct LockReleases {
    /// Sale id -> what the waiters for its lock listen on. A std Mutex: held
    /// for a lookup, never across an await. An entry is never removed: one
    /// small entry per sale ever waited for on this instance.
    by_sale: Arc<Mutex<HashMap<i64, Arc<Notify>>>>,
    /// Whether the listener is subscribed to the releases now. A hint read
    /// before a wait, so relaxed: a release missed around the change is
    /// one a waiter's back-off catches.
    listening: Arc<AtomicBool>,
}

impl LockReleases {
    /// What a waiter for the sale's lock listens on (`RedisLock::acquire`),
    /// or `None` while this instance hears no releases (its listener is
    /// connecting, or Redis is down): a waiter that will not hear of a
    /// release must not ask for a place in line, or the lock would stand
    /// idle while it sleeps out its back-off.
    pub fn of(&self, sale_id: i64) -> Option<Arc<Notify>> {
        if !self.listening.load(Ordering::Relaxed) {
            return None;
        }
        Some(Arc::clone(
            self.by_sale
                .lock()
                .expect("the lock releases' map is never poisoned")
                .entry(sale_id)
                .or_default(),
        ))
    }

    /// Forget sale `sale_id` (it has ended): a waiter still listening on
    /// its old entry hears no more releases, and its back-off takes over.
    pub(crate) fn forget(&self, sale_id: i64) {
        let mut by_sale = self
            .by_sale
            .lock()
            .expect("the lock releases' map is never poisoned");
        by_sale.remove(&sale_id);
        crate::map_memory::shrink_if_sparse(&mut by_sale);
    }

    /// How many sales have an entry here.
    pub(crate) fn len(&self) -> usize {
        self.by_sale
            .lock()
            .expect("the lock releases' map is never poisoned")
            .len()
    }

    /// The sale's lock was released: wake every waiter listening now.
    fn announce(&self, sale_id: i64) {
        let by_sale = self
            .by_sale
            .lock()
            .expect("the lock releases' map is never poisoned");
        if let Some(released) = by_sale.get(&sale_id) {
            released.notify_waiters();
        }
    }
}

impl SaleEvents {
    /// Start listening on Redis for every sale under `prefix`, until
    /// `shutdown` is cancelled. The returned task reconnects by itself.
    pub fn start(
        redis: &RedisAt,
        prefix: &str,
        shutdown: CancellationToken,
    ) -> anyhow::Result<(Self, JoinHandle<()>)> {
        // Malformed URLs fail here, at start-up, not in the loop.
        for url in redis.node_urls() {
            redis::Client::open(url.as_str())?;
        }
        let (sender, _) = broadcast::channel(CAPACITY);
        let releases = LockReleases::default();
        let task = tokio::spawn(listen(
            redis.clone(),
            prefix.to_owned(),
            Forward {
                sender: sender.clone(),
                releases: releases.clone(),
            },
            shutdown,
        ));
        Ok((Self { sender, releases }, task))
    }

    /// The sale locks' releases, as this instance hears them.
    pub fn lock_releases(&self) -> LockReleases {
        self.releases.clone()
    }

    /// A receiver of every stock change from now on, for every sale.
    pub fn subscribe(&self) -> broadcast::Receiver<StockChange> {
        self.sender.subscribe()
    }
}

/// Where what arrives goes.
struct Forward {
    sender: broadcast::Sender<StockChange>,
    releases: LockReleases,
}

/// Connect, subscribe, forward; on any failure, pause and start over on
/// the next node (a single server is its own next node; under Sentinel,
/// the next is the primary the sentinels name then).
async fn listen(redis: RedisAt, prefix: String, to: Forward, shutdown: CancellationToken) {
    let mut failures: u32 = 0;
    for attempt in 0.. {
        if shutdown.is_cancelled() {
            break;
        }
        let session = async {
            match redis.subscriber(attempt).await {
                Ok(client) => forward(&client, &prefix, &to, &mut failures).await,
                Err(error) => anyhow::Error::new(error).context("finding the primary"),
            }
        };
        let error = tokio::select! {
            () = shutdown.cancelled() => break,
            error = session => error,
        };
        failures = failures.saturating_add(1);
        // 100 ms, doubling, at most 5 s (see backoff.rs).
        let pause = crate::backoff::after(failures);
        tracing::warn!(
            error = format!("{error:#}"),
            ?pause,
            "sale events: Redis pub/sub lost; reconnecting"
        );
        tokio::select! {
            () = shutdown.cancelled() => break,
            () = tokio::time::sleep(pause) => {}
        }
    }
}

/// One pub/sub session: returns only when it fails.
async fn forward(
    client: &redis::Client,
    prefix: &str,
    to: &Forward,
    failures: &mut u32,
) -> anyhow::Error {
    let mut pubsub = match client.get_async_pubsub().await {
        Ok(pubsub) => pubsub,
        Err(error) => return anyhow::Error::new(error).context("connecting"),
    };
    let patterns = SaleChannel::ALL.map(|which| keys::channel_pattern(prefix, which));
    if let Err(error) = pubsub.psubscribe(&patterns).await {
        return anyhow::Error::new(error).context("subscribing");
    }
    *failures = 0;
    to.releases.listening.store(true, Ordering::Relaxed);
    let error = follow(pubsub, prefix, to).await;
    to.releases.listening.store(false, Ordering::Relaxed);
    error
}

/// Forward what a subscribed connection receives, until it closes.
async fn follow(pubsub: redis::aio::PubSub, prefix: &str, to: &Forward) -> anyhow::Error {
    let mut messages = pubsub.into_on_message();
    while let Some(message) = messages.next().await {
        match keys::sale_of_channel(prefix, message.get_channel_name()) {
            Some((sale_id, SaleChannel::Events)) => {
                if let Ok(stock_left) = message.get_payload::<i64>() {
                    // An error only means that nobody is watching right now.
                    let _ = to.sender.send(StockChange {
                        sale_id,
                        stock_left: stock_left.max(0),
                    });
                }
            }
            Some((sale_id, SaleChannel::LockReleased)) => to.releases.announce(sale_id),
            None => {}
        }
    }
    anyhow::anyhow!("the pub/sub connection closed")
}
