//! A sale's waiting room over HTTP: `POST /api/sales/{id}/queue` joins it,
//! `GET /api/sales/{id}/queue` says where the buyer stands, and a purchase
//! on a sale with a room needs the admission those answers hand out.
//!
//! A join answers a signed ticket, also set as a cookie
//! (`seckill_ticket_<sale>`), which names the buyer: a status request
//! sends it back (the cookie, or a `Seckill-Ticket` header) instead of a
//! buyer id, so a refresh or a second tab finds the same place. When the
//! buyer's turn has come, the answer holds their admission. The line, the
//! pace and the admissions are `seckill_core::room`'s.

use actix_web::cookie::{Cookie, SameSite};
use actix_web::{HttpRequest, HttpResponse, web};
use chrono::Utc;
use serde::{Deserialize, Serialize};

use super::AppState;
use super::body::Object;
use super::error::ApiError;
use super::limits;
use super::lookup::find_sale;
use seckill_core::domain::{Pass, PassKind, RoomSettings, Sale, UserId};
use seckill_core::room::{self, Place, Standing};

/// The header a client without cookies sends its ticket in.
pub(crate) const TICKET_HEADER: &str = "Seckill-Ticket";
/// How long a ticket keeps a place: a day, or until the sale ends.
const TICKET_MS: i64 = 24 * 3600 * 1000;

/// `POST /api/sales/{id}/queue` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinRequest {
    user_id: String,
}

/// Where a buyer stands, as both endpoints answer it.
#[derive(Debug, Serialize)]
struct StandingView {
    ticket: String,
    /// Place in line (1-based) while waiting; `null` otherwise.
    position: Option<u64>,
    /// The buyer's number in the line: the order the room serves in, set
    /// when they joined (redrawn once by a lottery at the open).
    number: Option<u64>,
    /// Buyers before this one in line.
    ahead: u64,
    /// Seconds until this buyer's turn, at the rate the room is actually
    /// admitting (its setting until it has admitted for a second).
    eta_secs: Option<f64>,
    admitted: bool,
    /// What the purchase must carry, while admitted.
    admission: Option<String>,
    /// Seconds the admission has left.
    admission_expires_in_secs: Option<f64>,
    /// This buyer's admission bought already.
    bought: bool,
    /// The sale sold out or ended: nobody more is admitted.
    closed: bool,
    /// Buyers in line.
    waiting: u64,
}

pub(crate) async fn join(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Json<Object<JoinRequest>>,
) -> Result<HttpResponse, ApiError> {
    let Object(body) = body.into_inner();
    let buyer = UserId::parse(&body.user_id).map_err(ApiError::invalid)?;
    // The purchase's limits: per client address and per buyer, so that a
    // few addresses cannot fill a room with made-up buyers.
    limits::check(&state, &request, Some(&buyer)).await?;
    let sale = find_sale(&state, &path).await?;
    let settings = sale.waiting_room.ok_or(ApiError::NoWaitingRoom)?;
    let standing = room::visit(&state.store, &sale, &settings, &buyer, true).await?;
    if standing.closed && standing.place == Place::Outside {
        return Err(ApiError::RoomClosed);
    }
    answer(&state, &sale, &settings, &buyer, &standing, None).await
}

pub(crate) async fn status(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let sale = find_sale(&state, &path).await?;
    let settings = sale.waiting_room.ok_or(ApiError::NoWaitingRoom)?;
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
    let standing = room::visit(&state.store, &sale, &settings, &pass.buyer, false).await?;
    answer(
        &state,
        &sale,
        &settings,
        &pass.buyer,
        &standing,
        Some(ticket),
    )
    .await
}

/// The purchase's door: `admission` must be this sale's, this buyer's, not
/// run out, and not spent. Nothing is written when it refuses.
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
    if room::has_bought(&state.store, sale.id, buyer).await? {
        return Err(ApiError::NotAdmitted("used"));
    }
    Ok(())
}

/// The buyer's admission bought: spend it. The unit is taken whatever
/// happens here, so a failure is logged, not answered: the buyer is told
/// `202`, and cannot buy a second unit anyway (one per buyer); only the
/// place among the active is freed later, when the admission runs out.
pub(crate) async fn spend(state: &AppState, sale: &Sale, buyer: &UserId) {
    if let Err(error) = room::bought(&state.store, sale.id, buyer).await {
        tracing::warn!(
            sale_id = sale.id,
            error = format!("{error:#}"),
            "an admission could not be marked spent"
        );
    }
}

async fn answer(
    state: &AppState,
    sale: &Sale,
    settings: &RoomSettings,
    buyer: &UserId,
    standing: &Standing,
    held: Option<String>,
) -> Result<HttpResponse, ApiError> {
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
            },
        )
    });
    let (admission, expires_in) = match standing.place {
        Place::Admitted { until_ms } => (
            Some(room::admission(&key, sale.id, buyer, until_ms)),
            Some((until_ms - standing.now_ms).max(0) as f64 / 1000.0),
        ),
        _ => (None, None),
    };
    let view = StandingView {
        ticket: ticket.clone(),
        position,
        number,
        ahead,
        eta_secs: standing.eta_secs(settings),
        admitted: admission.is_some(),
        admission,
        admission_expires_in_secs: expires_in,
        bought: standing.place == Place::Bought,
        closed: standing.closed,
        waiting: standing.waiting,
    };
    let cookie = Cookie::build(cookie_name(sale.id), ticket)
        .path("/")
        .http_only(true)
        .same_site(SameSite::Lax)
        .finish();
    Ok(HttpResponse::Ok().cookie(cookie).json(view))
}

fn cookie_name(sale_id: i64) -> String {
    format!("seckill_ticket_{sale_id}")
}
