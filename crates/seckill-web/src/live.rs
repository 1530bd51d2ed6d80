//! `GET /api/sales/{id}/events`: a sale's units left, live, as server-sent
//! events (`text/event-stream`), for the sale page's `EventSource`.
//!
//! Each stream follows its sale's units left on this instance through a
//! `watch` channel of the sale ([`LiveSales`]), fed by one task that reads
//! the instance's broadcast of stock changes (see `events.rs`). It opens
//! with a snapshot read from Redis, and sends a fresh snapshot every
//! [`SNAPSHOT_EVERY`], so a client that missed a message (pub/sub drops
//! them while its connection is down; a receiver that lags skips some)
//! shows the right figure again within seconds. The snapshot doubles as
//! the heartbeat that lets proxies and the browser see the stream is alive.
//!
//! The changes are paced: a sale's streams hear of its units left at most
//! once per [`PACE`], the latest figure, sent [`PACE`] after the first
//! change of the window. A burst sells ten units in a few milliseconds:
//! sent change by change, every open page would get an event per unit
//! sold, written while the burst's buyers wait for their answers. Paced,
//! each page gets one, once the burst's answers are out (`seckill bench
//! --only pages` measures the burst while pages watch; docs/bench.md).
//!
//! The snapshots are shared: a sale's units left are read from Redis at
//! most once per [`SNAPSHOT_SHARED_FOR`] per instance, and every stream of
//! the sale that ticks within that time sends the same figure. Ten
//! thousand open pages cost Redis what one does.
//!
//! Every stream ends when the instance shuts down, so that an open page
//! never holds a graceful shutdown up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::HttpResponse;
use actix_web::web::Bytes;
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{broadcast, watch};
use tokio_util::sync::CancellationToken;

use crate::single_flight::SingleFlight;
use seckill_core::events::StockChange;
use seckill_core::store::Store;

/// How often a stream sends a snapshot read from Redis.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(5);
/// How long one read of a sale's units left serves every stream of it.
pub(crate) const SNAPSHOT_SHARED_FOR: Duration = Duration::from_secs(1);

/// How often, at most, a sale's streams are sent a change of its units
/// left: the latest, at the end of the window the first change opened. A
/// page's figure is a second old at most, as a shared snapshot is.
pub const PACE: Duration = Duration::from_secs(1);

/// The sales whose pages are open on this instance, each with what its
/// streams share. A sale's entry is made by its first stream and dropped
/// once no stream watches it ([`LiveSales::forget_unwatched`]): the map is
/// bounded by the pages open, not by every sale ever watched.
#[derive(Default)]
pub(crate) struct LiveSales {
    /// Sale id -> what its streams share. A std Mutex, held only to find or
    /// insert an entry, never across an await.
    sales: Mutex<HashMap<i64, Arc<LiveSale>>>,
}

/// What every open page of one sale shares.
pub(crate) struct LiveSale {
    /// The last snapshot read (one read at a time, see `single_flight.rs`).
    snapshot: SingleFlight<i64>,
    /// The paced changes; every stream of the sale holds a receiver.
    changes: watch::Sender<Change>,
    /// The latest change not yet sent, if a window is open (a std Mutex,
    /// never held across an await).
    waiting: Mutex<Option<Change>>,
}

/// What a sale's streams are told.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Change {
    /// The units left, as of a change heard at `heard`.
    Stock { left: i64, heard: Instant },
    /// Changes were missed: read a snapshot now.
    Missed,
}

impl LiveSales {
    /// Feed the sales' streams from the instance's stock changes until
    /// `shutdown`.
    pub(crate) async fn follow(
        self: Arc<Self>,
        mut changes: broadcast::Receiver<StockChange>,
        shutdown: CancellationToken,
    ) {
        loop {
            let change = tokio::select! {
                () = shutdown.cancelled() => return,
                change = changes.recv() => change,
            };
            match change {
                Ok(change) => self.changed(change),
                // Skipped some messages: every stream reads a snapshot.
                Err(RecvError::Lagged(_)) => {
                    for sale in self.all() {
                        sale.missed().await;
                    }
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Pace a change of a sale watched here: the first of a window sends
    /// the window's latest [`PACE`] later; the others only replace it.
    fn changed(&self, change: StockChange) {
        let Some(sale) = self.lock().get(&change.sale_id).cloned() else {
            return; // nobody watches it here
        };
        sale.pace(Change::Stock {
            left: change.stock_left,
            heard: Instant::now(),
        });
    }

    /// The sale's shared state, made on its first watcher, and a receiver
    /// of its changes. The receiver is made under the map's lock: the race
    /// it prevents is [`LiveSales::forget_unwatched`] dropping the entry
    /// between the two, which would leave this stream on an entry that no
    /// change reaches any more.
    pub(crate) fn watch(&self, sale_id: i64) -> (Arc<LiveSale>, watch::Receiver<Change>) {
        let mut sales = self.lock();
        let sale = sales.entry(sale_id).or_insert_with(|| {
            Arc::new(LiveSale {
                snapshot: SingleFlight::default(),
                changes: watch::Sender::new(Change::Missed),
                waiting: Mutex::new(None),
            })
        });
        (Arc::clone(sale), sale.changes.subscribe())
    }

    /// Drop the entries of the sales no stream watches on this instance
    /// (each stream holds a receiver of its sale's changes until it ends);
    /// returns how many. The next page of such a sale makes a new one.
    pub(crate) fn forget_unwatched(&self) -> usize {
        let mut sales = self.lock();
        let before = sales.len();
        sales.retain(|_, sale| sale.changes.receiver_count() > 0);
        seckill_core::map_memory::shrink_if_sparse(&mut sales);
        before - sales.len()
    }

    /// How many sales have an entry here.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn all(&self) -> Vec<Arc<LiveSale>> {
        self.lock().values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Arc<LiveSale>>> {
        self.sales
            .lock()
            .expect("the live sales' lock is never poisoned")
    }
}

impl LiveSale {
    /// Send `latest` to the sale's streams at the end of the window it
    /// opens, or in place of the one waiting in the window under way.
    fn pace(self: Arc<Self>, latest: Change) {
        // The race this lock settles: a change arriving while the window's
        // send takes the waiting one must either be taken by it or open
        // the next window, never be left waiting with no send to come.
        let opens_window = self.waiting().replace(latest).is_none();
        if opens_window {
            // Not tracked for shutdown: it ends a pace later by itself,
            // and what it sends after the streams have ended reaches none.
            tokio::spawn(async move {
                tokio::time::sleep(PACE).await;
                // Taken and sent under the lock, so that a `Missed` sent
                // meanwhile (`missed`) cannot fall between the two and be
                // overwritten by this older figure.
                let mut waiting = self.waiting();
                if let Some(latest) = waiting.take() {
                    self.changes.send_replace(latest);
                }
            });
        }
    }

    /// Changes were missed: the waiting one, older than what was missed,
    /// is dropped, and every stream reads a snapshot taken from now on.
    async fn missed(&self) {
        self.snapshot.forget();
        let mut waiting = self.waiting();
        waiting.take();
        self.changes.send_replace(Change::Missed);
    }

    fn waiting(&self) -> std::sync::MutexGuard<'_, Option<Change>> {
        self.waiting
            .lock()
            .expect("the waiting change's lock is never poisoned")
    }

    /// The sale's units left and when they were read: from Redis, unless a
    /// read of the last [`SNAPSHOT_SHARED_FOR`] can serve.
    pub(crate) async fn stock_left(
        &self,
        store: &Store,
        sale_id: i64,
    ) -> anyhow::Result<(Instant, i64)> {
        self.snapshot
            .get(store.runtime(), SNAPSHOT_SHARED_FOR, || {
                let store = store.clone();
                async move { store.stock_left(sale_id).await }
            })
            .await
    }
}

/// A `text/event-stream` response that sends `events` (each a whole
/// event, ending in a blank line) until they end. Shared with the live
/// page's stream (`pages/scoreboard.rs`).
pub(crate) fn event_stream(
    events: impl futures_util::Stream<Item = Bytes> + 'static,
) -> HttpResponse {
    // The browser reconnects by itself if the stream breaks; tell it not
    // to wait long before it does.
    let opening = futures_util::stream::once(async { Bytes::from_static(b"retry: 2000\n\n") });
    let body = futures_util::StreamExt::map(
        futures_util::StreamExt::chain(opening, events),
        Ok::<_, std::convert::Infallible>,
    );
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header(("Cache-Control", "no-cache"))
        // Ask proxies such as nginx not to buffer the stream.
        .insert_header(("X-Accel-Buffering", "no"))
        .streaming(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A watched sale (1) and an unwatched one (2) fed through `follow` by
    /// a broadcast of `capacity`, on a paused clock: the test decides when
    /// the feeding task runs (at each `settle`) and when time passes.
    fn fed(capacity: usize) -> (broadcast::Sender<StockChange>, watch::Receiver<Change>) {
        let live = Arc::new(LiveSales::default());
        let (_, changes) = live.watch(1);
        let (sender, receiver) = broadcast::channel(capacity);
        tokio::spawn(live.follow(receiver, CancellationToken::new()));
        (sender, changes)
    }

    fn change(sale_id: i64, stock_left: i64) -> StockChange {
        StockChange {
            sale_id,
            stock_left,
        }
    }

    /// Let the feeding task take what was sent.
    async fn settle() {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }

    fn stock(changes: &mut watch::Receiver<Change>) -> Option<i64> {
        match *changes.borrow_and_update() {
            Change::Stock { left, .. } => Some(left),
            Change::Missed => None,
        }
    }

    #[test]
    fn a_sale_is_forgotten_once_its_last_stream_ends_and_not_before() {
        let live = LiveSales::default();
        let (sale, first) = live.watch(1);
        let (_, second) = live.watch(1);
        drop(live.watch(2));
        assert_eq!(live.len(), 2);
        assert_eq!(live.forget_unwatched(), 1, "sale 2 has no stream left");
        drop(first);
        assert_eq!(live.forget_unwatched(), 0, "sale 1 has a stream left");
        drop(second);
        assert_eq!(live.forget_unwatched(), 1);
        assert_eq!(live.len(), 0);
        // A stream that still holds the forgotten entry hears nothing more
        // from the map; a new one gets a new entry.
        let (again, _stream) = live.watch(1);
        assert!(!Arc::ptr_eq(&sale, &again));
    }

    #[tokio::test(start_paused = true)]
    async fn changes_within_a_pace_reach_the_streams_once_as_the_latest() {
        let (sender, mut changes) = fed(16);
        for left in [9, 8, 7] {
            sender.send(change(1, left)).expect("a receiver");
        }
        sender.send(change(2, 3)).expect("a receiver");
        settle().await;
        tokio::time::sleep(PACE / 2).await;
        assert!(
            !changes.has_changed().expect("open"),
            "sent before the pace"
        );
        tokio::time::sleep(PACE / 2).await;
        assert!(changes.has_changed().expect("open"));
        assert_eq!(stock(&mut changes), Some(7));
        // The window is over: the next change opens another.
        sender.send(change(1, 6)).expect("a receiver");
        settle().await;
        tokio::time::sleep(PACE).await;
        assert_eq!(stock(&mut changes), Some(6));
    }

    /// The feeding task fell behind: the change waiting in its window is
    /// older than the ones it missed, and must not follow the call to read
    /// a snapshot (the page would show it until the next snapshot).
    #[tokio::test(start_paused = true)]
    async fn a_lag_drops_the_waiting_change_and_sends_the_streams_to_a_snapshot() {
        let (sender, mut changes) = fed(2);
        sender.send(change(1, 9)).expect("a receiver");
        settle().await;
        // Three more while the task does not run: the first is lost.
        for missed in [change(1, 8), change(2, 1), change(2, 2)] {
            sender.send(missed).expect("a receiver");
        }
        settle().await;
        assert!(changes.has_changed().expect("open"));
        assert_eq!(stock(&mut changes), None, "a call to read a snapshot");
        tokio::time::sleep(2 * PACE).await;
        assert!(
            !changes.has_changed().expect("open"),
            "the figure from before the lag was sent after it"
        );
    }
}
