//! The rate limits a handler applies before it does any work of its own
//! (see `ratelimit.rs`): per client IP (as `client_ip.rs` tells it) on
//! purchases and admin logins, per buyer id on purchases. A purchase's and
//! a join's limits count on their sale (`keys::rate_limit`): on a cluster
//! they live on the sale's shard, with the rest of the sale.

use actix_web::HttpRequest;
use anyhow::Context;

use crate::client_ip;
use crate::error::ApiError;
use crate::state::AppState;
use seckill_core::config::RateLimit;
use seckill_core::domain::UserId;
use seckill_core::keys;
use seckill_core::ratelimit::{self, Allowance};

/// Who a limit counts: a buyer on a sale, or a client of the shop (an
/// admin login), which has no buyer.
#[derive(Clone, Copy)]
pub(crate) enum On<'a> {
    Sale { sale_id: i64, buyer: &'a UserId },
    Shop,
}

impl On<'_> {
    fn sale_id(self) -> Option<i64> {
        match self {
            On::Sale { sale_id, .. } => Some(sale_id),
            On::Shop => None,
        }
    }
}

/// `Err(RateLimited)` if the request's client IP, or its buyer, went over
/// its limit; `Ok` when no limit is set.
pub(crate) async fn check(
    state: &AppState,
    request: &HttpRequest,
    on: On<'_>,
) -> Result<(), ApiError> {
    // The address is written out only for a limit that needs it: with no
    // limit set (the default), a purchase pays nothing here.
    if let Some(limit) = state.limits.per_ip()
        && let Some(address) = client_ip::of(request, &state.limits.trusted_proxies)
    {
        one(state, limit, on.sale_id(), "ip", &address.to_string()).await?;
    }
    if let (Some(limit), On::Sale { sale_id, buyer }) = (state.limits.per_buyer(), on) {
        one(state, limit, Some(sale_id), "buyer", buyer.as_str()).await?;
    }
    Ok(())
}

/// `Err(RateLimited)` if the request's client IP went over its limit on
/// waiting-room joins (on by default: each join adds a buyer to a line in
/// Redis, so one address must not add them without end).
pub(crate) async fn check_join(
    state: &AppState,
    request: &HttpRequest,
    sale_id: i64,
) -> Result<(), ApiError> {
    if let Some(limit) = state.limits.room_joins_per_ip()
        && let Some(address) = client_ip::of(request, &state.limits.trusted_proxies)
    {
        one(state, limit, Some(sale_id), "join-ip", &address.to_string()).await?;
    }
    Ok(())
}

async fn one(
    state: &AppState,
    limit: RateLimit,
    sale_id: Option<i64>,
    kind: &str,
    client: &str,
) -> Result<(), ApiError> {
    let mut conn = state.store.redis().await?;
    let key = keys::rate_limit(state.store.prefix(), sale_id, kind, client);
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
