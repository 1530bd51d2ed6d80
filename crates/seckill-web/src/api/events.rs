//! `GET /api/sales/{id}/events`: a sale's units left as a server-sent
//! event stream, for the sale page. What the streams of one sale share on
//! this instance (one snapshot read, paced changes) is `live.rs`'s.

use std::sync::Arc;
use std::time::Instant;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use tokio::sync::{OwnedSemaphorePermit, watch};

use crate::error::ApiError;
use crate::live::{Change, LiveSale, SNAPSHOT_EVERY, event_stream};
use crate::lookup::find_sale;
use crate::state::AppState;

/// What one stream needs between events.
struct StockStream {
    state: web::Data<AppState>,
    /// This stream's place among the instance's open streams, given back
    /// when the stream ends (it is dropped with it).
    _slot: OwnedSemaphorePermit,
    sale_id: i64,
    /// What the sale's streams on this instance share.
    sale: Arc<LiveSale>,
    /// The sale's paced changes (a receiver of `sale.changes`).
    changes: watch::Receiver<Change>,
    snapshots: tokio::time::Interval,
    /// When the change this stream last sent was heard: a shared snapshot
    /// read before it is older than what the page shows, and is not sent.
    changed_at: Option<Instant>,
}

pub(crate) async fn sale_events(
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
    let (live, changes) = state.live.watch(sale.id);
    // The first tick fires at once: it is the opening snapshot.
    let snapshots = tokio::time::interval(SNAPSHOT_EVERY);
    let stream = StockStream {
        state,
        _slot: slot,
        sale_id: sale.id,
        sale: live,
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

impl StockStream {
    /// The next event to send, or `None` when the stream should end.
    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            tokio::select! {
                () = self.state.shutdown.cancelled() => return None,
                _ = self.snapshots.tick() => {
                    match self.sale.stock_left(&self.state.store, self.sale_id).await {
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
                changed = self.changes.changed() => {
                    if changed.is_err() {
                        // Never: the sender lives in the sale's entry,
                        // which this stream holds.
                        return None;
                    }
                    match *self.changes.borrow_and_update() {
                        Change::Stock { left, heard } => {
                            self.changed_at = Some(heard);
                            return Some(stock_event(left));
                        }
                        // Changes were missed: send a snapshot right away.
                        Change::Missed => {
                            self.changed_at = None;
                            self.snapshots.reset_immediately();
                        }
                    }
                }
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
