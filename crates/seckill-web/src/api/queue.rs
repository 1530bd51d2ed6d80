//! The waiting room's JSON API: `POST /api/sales/{id}/queue` joins it,
//! `GET /api/sales/{id}/queue` says where the buyer stands. Both go
//! through the room's door (`door.rs`), as the sale page does.

use actix_web::{HttpRequest, HttpResponse, web};
use serde::Deserialize;

use crate::body::{Object, field};
use crate::door::{Asking, enter};
use crate::error::ApiError;
use crate::state::AppState;

/// `POST /api/sales/{id}/queue` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinRequest {
    #[serde(deserialize_with = "field::user_id")]
    user_id: String,
}

pub(crate) async fn join(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
    body: web::Json<Object<JoinRequest>>,
) -> Result<HttpResponse, ApiError> {
    let Object(body) = body.into_inner();
    let entered = enter(&state, &request, &path, &body.user_id).await?;
    Ok(HttpResponse::Ok()
        .cookie(entered.ticket_cookie())
        .json(entered.view))
}

pub(crate) async fn status(
    state: web::Data<AppState>,
    request: HttpRequest,
    path: web::Path<String>,
) -> Result<HttpResponse, ApiError> {
    let asking = Asking::read(&state, &request, &path).await?;
    let (_, view) = asking.standing(&state).await?;
    // The ticket came with the request, unchanged: no cookie to set again.
    Ok(HttpResponse::Ok().json(view))
}
