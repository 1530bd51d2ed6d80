//! The live page for the projector: `GET /sales/{id}/live` (the page,
//! `templates/live.html` with `static/live.js`, its first figures written
//! in by the server: `first_paint.rs`) and
//! `GET /api/sales/{id}/live` (its server-sent events: one JSON snapshot of
//! the sale per event, about ten a second). A sale with a waiting room
//! gets a section for it, fed by the snapshot's `room`.
//!
//! The snapshots come from the instance's [`Scoreboard`](seckill_core::scoreboard),
//! which reads a watched sale once per tick however many streams show it;
//! a stream only passes on the newest one. Like the sale page's stream
//! (`live.rs`), each stream takes one of the instance's stream slots and
//! ends when the instance shuts down.

use std::sync::Arc;

use actix_web::web::Bytes;
use actix_web::{HttpResponse, web};
use askama::Template;
use tokio::sync::{OwnedSemaphorePermit, watch};

use super::first_paint::Figures;
use super::html;
use crate::error::{ApiError, PageError};
use crate::live::event_stream;
use crate::lookup::find_sale;
use crate::state::AppState;
use seckill_core::scoreboard::Board;

#[derive(Template)]
#[template(path = "live.html")]
struct LivePage {
    sale_id: i64,
    name: String,
    stock_total: i32,
    /// The sale has a waiting room: the page has a section for it.
    room: bool,
    /// The figures of the newest snapshot, for the first paint.
    figures: Figures,
}

/// `GET /sales/{id}/live`: the page, with the figures of the sale's newest
/// snapshot (`first_paint.rs`); its stream keeps them current.
pub(crate) async fn page(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, PageError> {
    let sale = find_sale(&state, &path).await?;
    Ok(html(&LivePage {
        sale_id: sale.id,
        name: sale.name.clone(),
        stock_total: sale.stock_total,
        room: sale.waiting_room.is_some(),
        figures: Figures::now(&state, sale.id).await,
    })?)
}

/// What one stream needs between events.
struct BoardStream {
    state: web::Data<AppState>,
    /// This stream's place among the instance's open streams, given back
    /// when the stream ends (it is dropped with it).
    _slot: OwnedSemaphorePermit,
    /// The sale's snapshots; dropping it tells the scoreboard one viewer left.
    boards: watch::Receiver<Arc<Board>>,
}

/// `GET /api/sales/{id}/live`: the sale's snapshots as server-sent events.
pub(crate) async fn stream(
    state: web::Data<AppState>,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sale = find_sale(&state, &path).await?;
    // A place among the instance's open streams, or 503, as for the sale
    // page's stream: they share the bound.
    let slot = Arc::clone(&state.streams)
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams)?;
    let mut boards = state.scoreboard.watch(sale.id);
    // A sale already watched has a snapshot to show now, not a tick later.
    boards.mark_changed();
    let stream = BoardStream {
        state,
        _slot: slot,
        boards,
    };
    Ok(event_stream(futures_util::stream::unfold(
        stream,
        |mut stream| async move {
            let event = stream.next_event().await?;
            Some((event, stream))
        },
    )))
}

impl BoardStream {
    /// The next snapshot to send, or `None` when the stream should end.
    async fn next_event(&mut self) -> Option<Bytes> {
        loop {
            tokio::select! {
                () = self.state.shutdown.cancelled() => return None,
                changed = self.boards.changed() => {
                    // Closed: the instance is shutting down.
                    changed.ok()?;
                    let board = Arc::clone(&self.boards.borrow_and_update());
                    // The placeholder before the first read has nothing to show.
                    if board.tick == 0 {
                        continue;
                    }
                    let json = serde_json::to_string(&*board)
                        .expect("a snapshot is plain numbers and strings");
                    return Some(Bytes::from(format!("event: snapshot\ndata: {json}\n\n")));
                }
            }
        }
    }
}
