//! The rate limits a handler applies before it does any work (see
//! `ratelimit.rs`): per client IP (as `client_ip.rs` tells it) on
//! purchases and admin logins, per buyer id on purchases.

use actix_web::HttpRequest;
use anyhow::Context;

use crate::client_ip;
use crate::error::ApiError;
use crate::state::AppState;
use seckill_core::config::RateLimit;
use seckill_core::domain::UserId;
use seckill_core::keys;
use seckill_core::ratelimit::{self, Allowance};

/// `Err(RateLimited)` if the request's client IP, or `buyer`, went over its
/// limit; `Ok` when no limit is set.
pub(crate) async fn check(
    state: &AppState,
    request: &HttpRequest,
    buyer: Option<&UserId>,
) -> Result<(), ApiError> {
    // The address is written out only for a limit that needs it: with no
    // limit set (the default), a purchase pays nothing here.
    if let Some(limit) = state.limits.per_ip()
        && let Some(address) = client_ip::of(request, &state.limits.trusted_proxies)
    {
        one(state, limit, "ip", &address.to_string()).await?;
    }
    if let (Some(limit), Some(buyer)) = (state.limits.per_buyer(), buyer) {
        one(state, limit, "buyer", buyer.as_str()).await?;
    }
    Ok(())
}

/// `Err(RateLimited)` if the request's client IP went over its limit on
/// waiting-room joins (on by default: each join adds a buyer to a line in
/// Redis, so one address must not add them without end).
pub(crate) async fn check_join(state: &AppState, request: &HttpRequest) -> Result<(), ApiError> {
    if let Some(limit) = state.limits.room_joins_per_ip()
        && let Some(address) = client_ip::of(request, &state.limits.trusted_proxies)
    {
        one(state, limit, "join-ip", &address.to_string()).await?;
    }
    Ok(())
}

async fn one(state: &AppState, limit: RateLimit, kind: &str, client: &str) -> Result<(), ApiError> {
    let mut conn = state.store.redis().await?;
    let key = keys::rate_limit(state.store.prefix(), kind, client);
    match ratelimit::check(&mut conn, &key, limit)
        .await
        .context("checking a rate limit")?
    {
        Allowance::Allowed => Ok(()),
        Allowance::Wait(wait) => {
            tracing::warn!(kind, client, ?wait, "rate limited");
            Err(ApiError::RateLimited(wait))
        }
    }
}
