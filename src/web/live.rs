//! `GET /api/sales/{id}/events`: a sale's units left, live, as server-sent
//! events (`text/event-stream`), for the sale page's `EventSource`.
//!
//! Each stream is a receiver of the instance's one broadcast of stock
//! changes (see `events.rs`), filtered to its sale. It opens with a
//! snapshot read from Redis, and sends a fresh snapshot every
//! [`SNAPSHOT_EVERY`], so a client that missed a message (pub/sub drops
//! them while its connection is down; a receiver that lags skips some)
//! shows the right figure again within seconds. The snapshot doubles as
//! the heartbeat that lets proxies and the browser see the stream is alive.
//!
//! The snapshots are shared: a sale's units left are read from Redis at
//! most once per [`SNAPSHOT_SHARED_FOR`] per instance ([`Snapshots`]), and
//! every stream of the sale that ticks within that time sends the same
//! figure. Ten thousand open pages cost Redis what one does.
//!
//! Every stream ends when the instance shuts down, so that an open page
//! never holds a graceful shutdown up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use tokio::sync::broadcast::error::RecvError;
use tokio::sync::{OwnedSemaphorePermit, broadcast};

use super::AppState;
use super::api::find_sale;
use super::error::ApiError;
use super::fresh::Fresh;
use crate::events::StockChange;

/// How often a stream sends a snapshot read from Redis.
pub const SNAPSHOT_EVERY: Duration = Duration::from_secs(5);
/// How long one read of a sale's units left serves every stream of it.
pub const SNAPSHOT_SHARED_FOR: Duration = Duration::from_secs(1);

/// Each sale's last snapshot, shared by its streams on this instance.
#[derive(Default)]
pub struct Snapshots {
    /// Sale id -> its last read (one read at a time, see `fresh.rs`). A std
    /// Mutex, held only to find or insert a sale's entry, never across an
    /// await. An entry is never removed: one small entry per sale ever
    /// watched.
    sales: Mutex<HashMap<i64, Arc<Fresh<i64>>>>,
}

impl Snapshots {
    /// The sale's units left and when they were read: from Redis, unless a
    /// read of the last [`SNAPSHOT_SHARED_FOR`] can serve.
    async fn stock_left(&self, state: &AppState, sale_id: i64) -> anyhow::Result<(Instant, i64)> {
        let sale = Arc::clone(
            self.sales
                .lock()
                .expect("the snapshots' lock is never poisoned")
                .entry(sale_id)
                .or_default(),
        );
        sale.get(SNAPSHOT_SHARED_FOR, || state.store.stock_left(sale_id))
            .await
    }
}

/// What one stream needs between events.
struct Stream {
    state: web::Data<AppState>,
    /// This stream's place among the instance's open streams, given back
    /// when the stream ends (it is dropped with it).
    _slot: OwnedSemaphorePermit,
    sale_id: i64,
    changes: broadcast::Receiver<StockChange>,
    snapshots: tokio::time::Interval,
    /// When this stream last sent a change from pub/sub: a shared snapshot
    /// read before it is older than what the page shows, and is not sent.
    changed_at: Option<Instant>,
}

pub async fn sale_events(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sale: Arc<_> = find_sale(&state, &path).await?;
    // A place among the instance's open streams, or 503: an unbounded
    // number of streams would hold unbounded memory and snapshot reads.
    let slot = Arc::clone(&state.streams)
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams)?;
    // Subscribe before the first snapshot is read, so that no change can
    // fall between the two.
    let changes = state.events.subscribe();
    // The first tick fires at once: it is the opening snapshot.
    let snapshots = tokio::time::interval(SNAPSHOT_EVERY);
    let stream = Stream {
        state,
        _slot: slot,
        sale_id: sale.id,
        changes,
        snapshots,
        changed_at: None,
    };
    Ok(event_stream(futures_util::stream::unfold(
        stream,
        |mut stream| async move {
            let event = stream.next_event().await?;
            Some((event, stream))
        },
    )))
}

/// A `text/event-stream` response that sends `events` (each a whole
/// event, ending in a blank line) until they end. Shared with the live
/// page's stream (`scoreboard.rs`).
pub(super) fn event_stream(
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

impl Stream {
    /// The next event to send, or `None` when the stream should end.
    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            tokio::select! {
                () = self.state.shutdown.cancelled() => return None,
                _ = self.snapshots.tick() => {
                    match self.state.snapshots.stock_left(&self.state, self.sale_id).await {
                        // Older than the change last sent: a heartbeat only.
                        Ok((read, _)) if self.changed_at.is_some_and(|changed| changed > read) => {
                            return Some(Bytes::from_static(b": alive\n\n"));
                        }
                        Ok((_, left)) => return Some(stock_event(left)),
                        // Redis is down: keep the stream open with a
                        // comment line, and try again at the next tick.
                        Err(_) => return Some(Bytes::from_static(b": redis unavailable\n\n")),
                    }
                }
                change = self.changes.recv() => match change {
                    Ok(change) if change.sale_id == self.sale_id => {
                        self.changed_at = Some(Instant::now());
                        return Some(stock_event(change.stock_left));
                    }
                    Ok(_) => {}
                    // Skipped some messages: send a snapshot right away.
                    Err(RecvError::Lagged(_)) => {
                        self.changed_at = None;
                        self.snapshots.reset_immediately();
                    }
                    Err(RecvError::Closed) => return None,
                },
            }
        }
    }
}

fn stock_event(stock_left: i64) -> Bytes {
    Bytes::from(format!(
        "event: stock\ndata: {{\"stock_left\":{}}}\n\n",
        stock_left.max(0)
    ))
}
