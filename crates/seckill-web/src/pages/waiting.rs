//! The sale page's waiting room: what a buyer sees of it, the "Join the
//! line" form, and the stream that follows their place.
//!
//! On a sale with a room, the sale page shows, instead of the Buy button
//! until the buyer's turn has come, one of: a form to join the line; their
//! place, how many are ahead, the estimated wait and how many wait in all;
//! the Buy form carrying their admission, and how long it lasts; that they
//! bought; or that the room is closed, and why. The buyer is the one the
//! ticket cookie names (`seckill_ticket_<sale>`, set by a join); without a
//! good ticket they are outside.
//!
//! Everything goes through the API's room code (the web crate's
//! `door.rs`): a join here is the API's join, a purchase needs the same
//! admission (`pages::buy` checks it with `door::admit`), and the stream
//! sends the API's status answer. Without JavaScript the page reloads
//! itself every [`INTERVAL`] while its buyer waits; with it
//! (`static/sale.js`), the page follows [`events`] instead and never
//! reloads.

use std::sync::Arc;
use std::time::Duration;

use actix_web::http::StatusCode;
use actix_web::http::header::LOCATION;
use actix_web::web::Bytes;
use actix_web::{HttpRequest, HttpResponse, web};
use anyhow::Context;
use chrono::Utc;
use serde::Deserialize;
use tokio::sync::OwnedSemaphorePermit;

use super::{BoughtPage, html, set_buyer_cookie};
use crate::door::{self, Asking, HeldTicket};
use crate::error::{ApiError, PageError};
use crate::live::event_stream;
use crate::lookup::{SaleView, find_sale};
use crate::state::AppState;
use seckill_core::domain::{RoomSettings, Sale, UserId};
use seckill_core::waiting_room::Place;

/// How often a waiting buyer's page learns where they stand: the
/// stream's pace, and the reload of a page without JavaScript. As often
/// as a person looks (`seckill crowd`'s people ask at this pace too).
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// Where the page's buyer stands, in the order the page tells it: a buyer
/// who bought is told so even once the room has closed behind them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    Outside,
    Waiting,
    Admitted,
    Bought,
    Closed,
}

/// What the sale page shows of its room (`templates/sale.html`).
pub(super) struct RoomPanel {
    shown: Shown,
    /// The buyer the ticket names, or the page's buyer without one.
    pub(super) buyer: String,
    pub(super) position: u64,
    pub(super) ahead: u64,
    /// Buyers in line, in all.
    pub(super) waiting: u64,
    eta_secs: Option<f64>,
    /// The admission the Buy form carries; empty unless admitted.
    pub(super) admission: String,
    /// Whole seconds the admission has left.
    pub(super) admission_secs: u64,
    /// Whether the page's script follows the standing (a good ticket, and
    /// something left to follow).
    pub(super) follow: bool,
    /// Why a closed room is closed, in words.
    pub(super) closed_why: &'static str,
    /// The room draws lots among those who join before the open.
    pub(super) lottery: bool,
    /// The sale has opened (a lottery's places no longer move back as
    /// others join).
    pub(super) open: bool,
    /// Admitted buyers who may buy now, while they fill the room and this
    /// buyer waits: with the seconds until the first of their turns runs
    /// out (`door::StandingView::full_for_secs`).
    full: Option<(u64, f64)>,
}

impl RoomPanel {
    pub(super) fn outside(&self) -> bool {
        self.shown == Shown::Outside
    }
    pub(super) fn waiting(&self) -> bool {
        self.shown == Shown::Waiting
    }
    pub(super) fn admitted(&self) -> bool {
        self.shown == Shown::Admitted
    }
    pub(super) fn bought(&self) -> bool {
        self.shown == Shown::Bought
    }
    pub(super) fn closed(&self) -> bool {
        self.shown == Shown::Closed
    }

    /// The state as `sale.js` reads it from `data-state`.
    pub(super) fn state(&self) -> &'static str {
        match self.shown {
            Shown::Outside => "outside",
            Shown::Waiting => "waiting",
            Shown::Admitted => "admitted",
            Shown::Bought => "bought",
            Shown::Closed => "closed",
        }
    }

    pub(super) fn interval_ms(&self) -> u128 {
        INTERVAL.as_millis()
    }

    pub(super) fn refresh_secs(&self) -> u64 {
        INTERVAL.as_secs().max(1)
    }

    /// Why a room is closed, for the script to tell when it closes while
    /// the page is open.
    pub(super) fn why_ended(&self) -> &'static str {
        WHY_ENDED
    }
    pub(super) fn why_sold_out(&self) -> &'static str {
        WHY_SOLD_OUT
    }

    /// Why the line does not move, while the room is full of admitted
    /// buyers who have not bought; empty otherwise. `sale.js` writes the
    /// same words (`fullNote`) as the page follows the standing.
    pub(super) fn full_note(&self) -> String {
        let Some((active, secs)) = self.full else {
            return String::new();
        };
        let (buyers, one_of_them) = if active == 1 {
            ("buyer", "they buy or their")
        } else {
            ("buyers", "one of them buys or their")
        };
        format!(
            "{active} {buyers} may buy now, as many as the room lets in at once: the next place \
             opens when {one_of_them} turn runs out, at the latest in {} s.",
            secs.ceil()
        )
    }

    /// The estimated wait, for people.
    pub(super) fn eta(&self) -> String {
        match self.eta_secs {
            Some(secs) if secs < 90.0 => format!("about {} s", secs.ceil()),
            Some(secs) => format!("about {} min", (secs / 60.0).ceil()),
            None => "a moment".to_owned(),
        }
    }
}

/// Whether the sale has ended: for good, where a sell-out may not be.
fn has_ended(sale: &Sale) -> bool {
    sale.ends_at.is_some_and(|end| end <= Utc::now())
}

/// Why a sale's room is closed, in words.
fn closed_why(sale: &Sale) -> &'static str {
    if has_ended(sale) {
        WHY_ENDED
    } else {
        WHY_SOLD_OUT
    }
}

const WHY_ENDED: &str = "the sale has ended.";
const WHY_SOLD_OUT: &str = "every unit is taken. Units whose buyers do not pay in time \
     come back, and the room lets buyers in again then.";

/// The sale page's room for this request: the ticket's buyer where a
/// good ticket came with it, else `page_buyer`, who is outside.
pub(super) async fn panel(
    state: &AppState,
    request: &HttpRequest,
    sale: &Arc<Sale>,
    settings: &RoomSettings,
    page_buyer: &str,
) -> Result<RoomPanel, ApiError> {
    let held = match door::held_ticket(state, request, sale).await {
        Ok(held) => Some(held),
        // No ticket, or one that is no good here: outside, and asked to join.
        Err(ApiError::InvalidTicket(_)) => None,
        Err(other) => return Err(other),
    };
    let buyer = match &held {
        Some(held) => held.buyer.clone(),
        None => UserId::parse(page_buyer).map_err(ApiError::invalid)?,
    };
    // Asked even for a buyer outside: whether the room is closed, and how
    // many wait, are the room's to say. Both from this instance's look at
    // the room, as the API's status answers (`room_view.rs`): a page
    // reloading itself every second costs Redis no script of its own.
    let standing = match &held {
        Some(held) => held.standing(state, sale, settings).await?,
        None => state.room_views.room(&state.store, sale, settings).await?,
    };
    if !standing.confirmed {
        return Err(ApiError::RoomUnconfirmed);
    }
    let mut panel = RoomPanel {
        shown: Shown::Outside,
        buyer: buyer.as_str().to_owned(),
        position: 0,
        ahead: 0,
        waiting: standing.waiting,
        eta_secs: None,
        admission: String::new(),
        admission_secs: 0,
        follow: false,
        closed_why: closed_why(sale),
        lottery: settings.mode == seckill_core::domain::RoomMode::Lottery,
        open: sale.starts_at <= Utc::now(),
        full: None,
    };
    if let Some(HeldTicket { ticket, .. }) = held {
        let view =
            door::standing_view(state, sale, settings, &buyer, &standing, Some(ticket)).await?;
        panel.shown = match standing.place {
            Place::Bought => Shown::Bought,
            _ if standing.closed => Shown::Closed,
            Place::Admitted { .. } => Shown::Admitted,
            Place::Waiting { .. } => Shown::Waiting,
            Place::Outside => Shown::Outside,
        };
        panel.position = view.position.unwrap_or(0);
        panel.ahead = view.ahead;
        panel.eta_secs = view.eta_secs;
        panel.full = view.full_for_secs.map(|secs| (view.active, secs));
        panel.admission = view.admission.unwrap_or_default();
        panel.admission_secs = view
            .admission_expires_in_secs
            .map_or(0, |s| s.ceil() as u64);
        panel.follow = !matches!(panel.shown, Shown::Outside | Shown::Bought) && !has_ended(sale);
    } else if standing.closed {
        panel.shown = Shown::Closed;
    }
    Ok(panel)
}

/// `POST /sales/{id}/buy` refused at the door: a page saying why, `403`.
/// Any other error is answered as it is.
pub(super) async fn not_admitted(
    state: &AppState,
    sale: &Sale,
    refused: ApiError,
) -> Result<HttpResponse, ApiError> {
    let ApiError::NotAdmitted(reason) = refused else {
        return Err(refused);
    };
    let headline = match reason {
        "missing" => "This sale has a waiting room: join the line, and buy when your turn comes.",
        "expired" => "Your turn ran out before you bought. Join the line again.",
        "other_buyer" => "This turn is another buyer's: buy with your own buyer id.",
        "other_sale" => "This turn is for another sale.",
        "used" => "Your turn has bought already: one unit per turn.",
        door::NOT_HELD => "The waiting room no longer holds your turn. Join the line again.",
        _ => "This is not a turn the waiting room gave out. Join the line.",
    };
    refusal(state, sale, StatusCode::FORBIDDEN, headline.to_owned()).await
}

/// A page with the sale's figures, saying why a form was refused.
async fn refusal(
    state: &AppState,
    sale: &Sale,
    status: StatusCode,
    headline: String,
) -> Result<HttpResponse, ApiError> {
    let left = state.store.stock_left(sale.id).await?;
    let mut response = html(&BoughtPage {
        sale: SaleView::new(sale, left),
        won: false,
        headline,
        order_id: None,
    })?;
    *response.status_mut() = status;
    Ok(response)
}

/// The "Join the line" form.
#[derive(Debug, Deserialize)]
pub(crate) struct JoinForm {
    user_id: String,
}

/// `POST /sales/{id}/queue`: join the line as the API's join does, keep
/// the ticket in its cookie and go back to the sale page (a redirect, so
/// that reloading does not post again). A closed room is a page saying
/// so, `409`; every other refusal (a full line, too many joins, a bad
/// buyer id, a server down) is the API's status and words as a page, with
/// a link back to the sale: never raw JSON.
pub(crate) async fn join(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    form: web::Form<JoinForm>,
) -> Result<HttpResponse, PageError> {
    let back = |error: ApiError| match error {
        ApiError::SaleNotFound => PageError::from(error),
        error => PageError::back_to(
            error,
            format!("/sales/{}", path.as_str()),
            "Back to the sale",
        ),
    };
    let entered = match door::enter(&state, &request, &path, &form.user_id).await {
        Ok(entered) => entered,
        Err(ApiError::RoomClosed) => {
            let sale = find_sale(&state, &path).await.map_err(back)?;
            let headline = format!("The room is closed: {}", closed_why(&sale));
            return refusal(&state, &sale, StatusCode::CONFLICT, headline)
                .await
                .map_err(back);
        }
        Err(other) => return Err(back(other)),
    };
    let mut response = HttpResponse::SeeOther()
        .insert_header((LOCATION, format!("/sales/{}", entered.sale_id)))
        .finish();
    response
        .add_cookie(&entered.ticket_cookie())
        .context("setting the ticket cookie")?;
    set_buyer_cookie(&mut response, entered.buyer.as_str())?;
    Ok(response)
}

/// What one stream needs between events.
struct Follow {
    state: web::Data<AppState>,
    /// This stream's place among the instance's open streams (shared with
    /// the other event streams), given back when it ends.
    _slot: OwnedSemaphorePermit,
    /// Whose standing, in which sale's room.
    asking: Asking,
    ticks: tokio::time::Interval,
    /// The last standing sent was the last there is to follow.
    done: bool,
}

/// `GET /sales/{id}/queue/events`: the standing of the buyer the ticket
/// cookie names, as the API's status answers it, every [`INTERVAL`]
/// (`event: standing`). It ends after a standing with nothing more to
/// follow: bought, outside (an admission that ran out), or the sale
/// ended; a sold-out room says `"closed": true` and goes on, since units
/// may come back. Each visit also advances the room, as any status does.
pub(crate) async fn events(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let asking = Asking::read(&state, &request, &path).await?;
    // A place among the instance's open streams, or 503, as for the sale
    // page's units-left stream: they share the bound.
    let slot = Arc::clone(&state.streams)
        .try_acquire_owned()
        .map_err(|_| ApiError::TooManyStreams)?;
    let mut ticks = tokio::time::interval(INTERVAL);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // The first tick fires at once; the opening standing is read below.
    ticks.reset();
    let mut follow = Follow {
        state,
        _slot: slot,
        asking,
        ticks,
        done: false,
    };
    // Read before answering: with Redis down, the page is told `503` and
    // tries again, rather than opening a stream with nothing to say.
    let first = follow.standing().await?;
    let rest = futures_util::stream::unfold(follow, |mut follow| async move {
        let event = follow.next_event().await?;
        Some((event, follow))
    });
    Ok(event_stream(futures_util::StreamExt::chain(
        futures_util::stream::once(async { first }),
        rest,
    )))
}

impl Follow {
    /// The next event to send, or `None` when the stream should end.
    async fn next_event(&mut self) -> Option<Bytes> {
        if self.done {
            return None;
        }
        tokio::select! {
            () = self.state.shutdown.cancelled() => None,
            _ = self.ticks.tick() => Some(match self.standing().await {
                Ok(event) => event,
                // Redis is down: keep the stream open with a comment line,
                // and ask again at the next tick.
                Err(_) => Bytes::from_static(b": redis unavailable\n\n"),
            }),
        }
    }

    /// The buyer's standing now, as an event; notes whether it is the last.
    async fn standing(&mut self) -> Result<Bytes, ApiError> {
        let (standing, view) = self.asking.standing(&self.state).await?;
        self.done = matches!(standing.place, Place::Outside | Place::Bought)
            || has_ended(&self.asking.sale);
        let json = serde_json::to_string(&view).context("writing a standing")?;
        Ok(Bytes::from(format!("event: standing\ndata: {json}\n\n")))
    }
}
