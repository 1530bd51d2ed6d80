//! The waiting room's door: how a buyer joins a sale's room, learns where
//! they stand, and buys with the admission those answers hand out. The
//! API (`api/queue.rs`) and the sale page (`pages/waiting.rs`,
//! `pages::buy`) both go through it.
//!
//! A join answers a signed ticket, also set as a cookie
//! (`seckill_ticket_<sale>`), which names the buyer: a status request
//! sends it back (the cookie, or a `Seckill-Ticket` header) instead of a
//! buyer id, so a refresh or a second tab finds the same place. When the
//! buyer's turn has come, the answer holds their admission. The line, the
//! pace and the admissions are `seckill_core::waiting_room`'s.
//!
//! The functions: [`enter`] to join, [`Asking`] (or [`held_ticket`] and
//! [`standing_view`]) to tell a buyer where they stand, [`admit`] and
//! [`spend`] around a purchase. There is one door, whichever way a buyer
//! comes. With `lock` and `lua` (the correct strategies) the door's
//! Redis half is in the purchase's own commit: the admission's spent
//! check and mark are one atomic step with the take
//! (`lua/purchase_commit.lua`, `lua/purchase_lua.lua`), so a roomed
//! purchase costs no round trip more than another; [`admit`] then only
//! checks the signature, and [`spend`] does nothing.

use actix_web::cookie::{Cookie, SameSite};
use std::sync::Arc;

use actix_web::HttpRequest;
use chrono::Utc;
use serde::Serialize;

use crate::error::ApiError;
use crate::limits;
use crate::lookup::{find_sale, parse_sale_id};
use crate::state::AppState;
use seckill_core::domain::{Pass, PassKind, RoomSettings, Sale, UserId};
use seckill_core::waiting_room::{self, AtTheDoor, Place, Standing};

/// The header a client without cookies sends its ticket in.
pub(crate) const TICKET_HEADER: &str = "Seckill-Ticket";
/// How long a ticket keeps a place: a day, or until the sale ends.
const TICKET_MS: i64 = 24 * 3600 * 1000;

/// Where a buyer stands, as both endpoints answer it.
#[derive(Debug, Serialize)]
pub(crate) struct StandingView {
    pub(crate) ticket: String,
    /// Place in line (1-based) while waiting; `null` otherwise.
    pub(crate) position: Option<u64>,
    /// The buyer's number in the line: the order the room serves in, set
    /// when they joined (in a lottery, drawn at a join before the open).
    pub(crate) number: Option<u64>,
    /// Buyers before this one in line.
    pub(crate) ahead: u64,
    /// Seconds until this buyer's turn: the time to the open, then their
    /// place at the rate the room is actually admitting (its setting until
    /// it has admitted for a second).
    pub(crate) eta_secs: Option<f64>,
    pub(crate) admitted: bool,
    /// What the purchase must carry, while admitted.
    pub(crate) admission: Option<String>,
    /// Seconds the admission has left.
    pub(crate) admission_expires_in_secs: Option<f64>,
    /// This buyer's admission bought already.
    pub(crate) bought: bool,
    /// The sale sold out or ended: nobody more is admitted.
    pub(crate) closed: bool,
    /// Buyers in line.
    pub(crate) waiting: u64,
    /// Admitted buyers who may buy now (they have neither bought nor run
    /// out), and how many the room lets be at once.
    pub(crate) active: u64,
    pub(crate) max_active: u32,
    /// While all `max_active` places are taken and this buyer waits: the
    /// seconds until the first of those turns runs out, the latest a place
    /// opens (sooner, when one of them buys). `null` otherwise.
    pub(crate) full_for_secs: Option<f64>,
}

/// A buyer who joined (or was in the room already), as [`enter`] found them.
pub(crate) struct Entered {
    pub(crate) sale_id: i64,
    pub(crate) buyer: UserId,
    /// Where they stand, with a ticket signed for them.
    pub(crate) view: StandingView,
}

impl Entered {
    /// The cookie that keeps the new ticket.
    pub(crate) fn ticket_cookie(&self) -> Cookie<'static> {
        ticket_cookie(self.sale_id, self.view.ticket.clone())
    }
}

/// Join the room of the sale `raw_sale_id` names as `user_id`: the API's
/// join and the sale page's "Join the line" form, one way, answered with
/// the same standing and ticket. Refused as the API answers: a bad id, a
/// rate limit, no such sale, no room, or `room_closed` for a newcomer
/// once the room has closed.
pub(crate) async fn enter(
    state: &AppState,
    request: &HttpRequest,
    raw_sale_id: &str,
    user_id: &str,
) -> Result<Entered, ApiError> {
    let buyer = UserId::parse(user_id).map_err(ApiError::invalid)?;
    // The join limit per client address (on unless turned off), so that
    // a few addresses cannot fill a room with made-up buyers; and the
    // purchase's limits, when set.
    let sale_id = parse_sale_id(raw_sale_id)?;
    limits::check_join(state, request, sale_id).await?;
    let on = limits::On::Sale {
        sale_id,
        buyer: &buyer,
    };
    limits::check(state, request, on).await?;
    let sale = find_sale(state, raw_sale_id).await?;
    let settings = sale.waiting_room.ok_or(ApiError::NoWaitingRoom)?;
    let standing = waiting_room::visit(&state.store, &sale, &settings, &buyer, true).await?;
    // Under `replica`, nothing is told from a visit no replica confirmed,
    // a refusal no more than a place: a room closed or a line full on
    // data a failover takes back (the last unit's take, joins) would be
    // open again after it. A sale that has ended is closed by the clock,
    // which no failover takes back.
    let ended = sale.ends_at.is_some_and(|end| Utc::now() >= end);
    let told_by_the_clock = ended && standing.place == Place::Outside;
    if !(standing.confirmed || told_by_the_clock) {
        return Err(ApiError::RoomUnconfirmed);
    }
    if standing.closed && standing.place == Place::Outside {
        return Err(ApiError::RoomClosed);
    }
    if standing.line_full && standing.place == Place::Outside {
        return Err(ApiError::LineFull);
    }
    let view = standing_view(state, &sale, &settings, &buyer, &standing, None).await?;
    Ok(Entered {
        sale_id: sale.id,
        buyer,
        view,
    })
}

/// A ticket a request carried, checked: its text and the buyer it names.
pub(crate) struct HeldTicket {
    pub(crate) ticket: String,
    pub(crate) buyer: UserId,
    /// The buyer's number in line when the ticket was signed (0: none).
    pub(crate) number: u64,
    /// The generation of the line that number is a place in.
    pub(crate) generation: i64,
}

impl HeldTicket {
    /// Where its buyer stands in `sale`'s room: from this instance's look
    /// at the room when it can tell, else from Redis (`room_view.rs`).
    pub(crate) async fn standing(
        &self,
        state: &AppState,
        sale: &Arc<Sale>,
        settings: &RoomSettings,
    ) -> anyhow::Result<Standing> {
        (state.room_views)
            .standing(
                &state.store,
                (sale, settings),
                &self.buyer,
                (self.number, self.generation),
            )
            .await
    }
}

/// The ticket `request` carries for `sale` (its `Seckill-Ticket` header,
/// else its cookie), checked: `invalid_ticket` with the reason if it is
/// missing, forged, another sale's or run out.
pub(crate) async fn held_ticket(
    state: &AppState,
    request: &HttpRequest,
    sale: &Sale,
) -> Result<HeldTicket, ApiError> {
    let ticket = request
        .headers()
        .get(TICKET_HEADER)
        .and_then(|value| value.to_str().ok())
        .map(str::to_owned)
        .or_else(|| {
            request
                .cookie(&cookie_name(sale.id))
                .map(|c| c.value().to_owned())
        })
        .ok_or(ApiError::InvalidTicket("missing"))?;
    let key = state.store.pass_key().await?;
    let pass = key
        .check(
            PassKind::Ticket,
            &ticket,
            sale.id,
            None,
            Utc::now().timestamp_millis(),
        )
        .map_err(|refused| ApiError::InvalidTicket(refused.code()))?;
    Ok(HeldTicket {
        ticket,
        buyer: pass.buyer,
        number: u64::try_from(pass.number).unwrap_or(0),
        generation: pass.generation,
    })
}

/// A buyer asking where they stand, by the ticket they hold: a status
/// request, or the sale page's standing stream at each tick.
pub(crate) struct Asking {
    pub(crate) sale: Arc<Sale>,
    settings: RoomSettings,
    held: HeldTicket,
}

impl Asking {
    /// The sale `raw_sale_id` names, its room, and the ticket `request`
    /// carries for it. Refused as the API's status answers: a bad id, no
    /// such sale, no room, or `invalid_ticket`.
    pub(crate) async fn read(
        state: &AppState,
        request: &HttpRequest,
        raw_sale_id: &str,
    ) -> Result<Self, ApiError> {
        let sale = find_sale(state, raw_sale_id).await?;
        let settings = sale.waiting_room.ok_or(ApiError::NoWaitingRoom)?;
        let held = held_ticket(state, request, &sale).await?;
        Ok(Self {
            sale,
            settings,
            held,
        })
    }

    /// Where the buyer stands now, and that as the API answers it (their
    /// ticket answered back as it came): from this instance's look at the
    /// room when that can tell, else from Redis (`room_view.rs`).
    pub(crate) async fn standing(
        &self,
        state: &AppState,
    ) -> Result<(Standing, StandingView), ApiError> {
        let (sale, settings, held) = (&self.sale, &self.settings, &self.held);
        let standing = held.standing(state, sale, settings).await?;
        let view = standing_view(
            state,
            sale,
            settings,
            &held.buyer,
            &standing,
            Some(held.ticket.clone()),
        )
        .await?;
        Ok((standing, view))
    }
}

/// The purchase's door: `admission` must be this sale's, this buyer's, not
/// run out, not spent, and held by the room among its admitted (the last
/// two checked in the commit with `lock` and `lua`). Nothing is written
/// when it refuses.
pub(crate) async fn admit(
    state: &AppState,
    sale: &Sale,
    buyer: &UserId,
    admission: Option<&str>,
) -> Result<(), ApiError> {
    let admission = admission.ok_or(ApiError::NotAdmitted("missing"))?;
    let key = state.store.pass_key().await?;
    key.check(
        PassKind::Admission,
        admission,
        sale.id,
        Some(buyer),
        Utc::now().timestamp_millis(),
    )
    .map_err(|refused| ApiError::NotAdmitted(refused.code()))?;
    // Spent or not, and held by the room or not: in the purchase's
    // commit, with `lock` and `lua`. With the other strategies, checked
    // here, then bought, as two steps: two purchases with one admission
    // both pass here, and the purchase's own one-unit-per-buyer check lets
    // only one of them take a unit.
    if !state.purchaser.spends_admissions() {
        match waiting_room::at_the_door(&state.store, sale.id, buyer.as_str()).await? {
            (AtTheDoor::MayBuy, _) => {}
            // Under `replica`, a refusal no replica confirmed is no answer.
            (_, false) => return Err(ApiError::Unconfirmed(None)),
            (AtTheDoor::Spent, true) => return Err(ApiError::NotAdmitted("used")),
            (AtTheDoor::NotHeld, true) => return Err(ApiError::NotAdmitted(NOT_HELD)),
        }
    }
    Ok(())
}

/// The reason of a `403 not_admitted` for an admission the room does not
/// hold (`Outcome::NotAdmitted`): signed and not run out by the instance's
/// clock, but run out on Redis' or lost with Redis' data.
pub(crate) const NOT_HELD: &str = "withdrawn";

/// The buyer's admission bought: spend it. The unit is taken whatever
/// happens here, so a failure is logged, not answered: the buyer is told
/// `202`, and cannot buy a second unit anyway (one per buyer); only the
/// place among the active is freed later, when the admission runs out.
pub(crate) async fn spend(state: &AppState, sale: &Sale, buyer: &UserId) {
    // Before the `202` goes: this instance's look at the room, taken
    // before the purchase, would show the buyer admitted still.
    state.room_views.bought(sale.id);
    if state.purchaser.spends_admissions() {
        return; // spent in the purchase's commit
    }
    if let Err(error) = waiting_room::bought(&state.store, sale.id, buyer).await {
        tracing::warn!(
            sale_id = sale.id,
            error = format!("{error:#}"),
            "an admission could not be marked spent"
        );
    }
}

/// Where `buyer` stands, as the API answers it: `held`, the ticket a
/// status request carried, is answered back; a join is signed a new one.
pub(crate) async fn standing_view(
    state: &AppState,
    sale: &Sale,
    settings: &RoomSettings,
    buyer: &UserId,
    standing: &Standing,
    held: Option<String>,
) -> Result<StandingView, ApiError> {
    // Under `replica`: no place, ticket or admission is told on writes a
    // failover could take back.
    if !standing.confirmed {
        return Err(ApiError::RoomUnconfirmed);
    }
    let key = state.store.pass_key().await?;
    let (position, number, ahead) = match standing.place {
        Place::Waiting { number, ahead } => (Some(ahead + 1), Some(number), ahead),
        _ => (None, None, 0),
    };
    // A status request's ticket is good (it was just checked) and names
    // the same buyer: it is answered back as it came, unsigned again.
    let ticket = held.unwrap_or_else(|| {
        let now_ms = Utc::now().timestamp_millis();
        let expires_ms = sale
            .ends_at
            .map_or(now_ms + TICKET_MS, |end| {
                end.timestamp_millis().min(now_ms + TICKET_MS)
            })
            .max(now_ms + 1);
        key.sign(
            PassKind::Ticket,
            &Pass {
                sale_id: sale.id,
                buyer: buyer.clone(),
                number: number.map_or(0, |p| i64::try_from(p).unwrap_or(i64::MAX)),
                expires_ms,
                generation: standing.born_ms,
            },
        )
    });
    let (admission, expires_in) = match standing.place {
        Place::Admitted { until_ms } => (
            Some(waiting_room::admission(key, sale.id, buyer, until_ms)),
            Some((until_ms - standing.now_ms).max(0) as f64 / 1000.0),
        ),
        _ => (None, None),
    };
    Ok(StandingView {
        ticket,
        position,
        number,
        ahead,
        eta_secs: standing.eta_secs(settings, sale.starts_at.timestamp_millis()),
        admitted: admission.is_some(),
        admission,
        admission_expires_in_secs: expires_in,
        bought: standing.place == Place::Bought,
        closed: standing.closed,
        waiting: standing.waiting,
        active: standing.active,
        max_active: settings.max_active,
        full_for_secs: match standing.place {
            Place::Waiting { .. } => standing.full_for_secs(settings),
            _ => None,
        },
    })
}

/// The cookie that keeps a buyer's ticket for one sale's room: sent back
/// by the same site only (`Lax`), never read by a script.
pub(crate) fn ticket_cookie(sale_id: i64, ticket: String) -> Cookie<'static> {
    Cookie::build(cookie_name(sale_id), ticket)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .finish()
}

fn cookie_name(sale_id: i64) -> String {
    format!("seckill_ticket_{sale_id}")
}
