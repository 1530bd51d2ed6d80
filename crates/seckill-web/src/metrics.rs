//! `GET /metrics`: the process' figures (`seckill_core::metrics`) in Prometheus'
//! text format, with the ones that are a state read now: the jobs in every
//! sale's queues, this instance's open event streams, and what it keeps in
//! memory for its sales.
//!
//! The counts never need a server. The queue depths do: while Redis or
//! PostgreSQL is down they are left out (a gauge that stops reporting is
//! what Prometheus calls "no data", which is true), and the scrape still
//! answers 200 with the rest: a monitor must not go blind in an outage.

use actix_web::{HttpResponse, web};

use crate::state::AppState;
use seckill_core::keys::{SaleKeys, SaleQueue};
use seckill_core::metrics::metrics;
use seckill_core::queue::{Queue, QueueStats};
use seckill_core::waiting_room::{self, RoomFigures};

/// One scrape's state reads at a time in the process. A scrape reads
/// every sale's queues and every room, one round trip after another on a
/// pooled Redis connection: anyone who can reach `/metrics` (it is served
/// on the storefront's port) could send a hundred at once and hold the
/// pool's connections, and Redis' time, that buyers need; and two at once
/// raced on the gauges each resets. Scrapes queue here instead, each
/// answered in turn.
static SCRAPING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(1);

pub(crate) async fn scrape(state: web::Data<AppState>) -> HttpResponse {
    // Never closed: a permit always comes.
    let _turn = SCRAPING.acquire().await;
    let metrics = metrics();
    let open = state
        .max_streams
        .saturating_sub(state.streams.available_permits());
    metrics.event_streams.set(open as i64);
    let in_memory = state.purchaser.sales_in_memory() + state.live.len() + state.room_views.len();
    metrics
        .sales_in_memory
        .set(i64::try_from(in_memory).unwrap_or(i64::MAX));
    metrics.queue_jobs.reset();
    match queue_depths(&state).await {
        Ok(depths) => {
            for (queue, stats) in depths {
                for (which, n) in [
                    ("waiting", stats.waiting),
                    ("in_flight", stats.in_flight),
                    ("dead", stats.dead),
                ] {
                    metrics
                        .queue_jobs
                        .with_label_values(&[queue, which])
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
            }
        }
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "queue depths left out of /metrics")
        }
    }
    metrics.room_buyers.reset();
    match room_figures(&state).await {
        Ok(sum) => {
            for (which, n) in [
                ("waiting", sum.waiting),
                ("admitted", sum.admitted),
                ("bought", sum.bought),
                ("admissions", sum.admissions),
                ("expired", sum.expired),
                ("abandoned", sum.abandoned),
            ] {
                metrics
                    .room_buyers
                    .with_label_values(&[which])
                    .set(i64::try_from(n).unwrap_or(i64::MAX));
            }
        }
        Err(error) => {
            tracing::warn!(error = %format!("{error:#}"), "waiting rooms left out of /metrics")
        }
    }
    HttpResponse::Ok()
        .content_type("text/plain; version=0.0.4; charset=utf-8")
        .body(metrics.render())
}

/// The figures of every waiting room worth reporting, summed.
async fn room_figures(state: &AppState) -> anyhow::Result<RoomFigures> {
    let mut sum = RoomFigures::default();
    for sale_id in state.store.room_sale_ids().await? {
        let one = waiting_room::figures(&state.store, sale_id).await?;
        sum.waiting += one.waiting;
        sum.admitted += one.admitted;
        sum.bought += one.bought;
        sum.admissions += one.admissions;
        sum.expired += one.expired;
        sum.abandoned += one.abandoned;
    }
    Ok(sum)
}

/// `GET /metrics` alone, for a `seckill worker` (`--metrics-bind`): its
/// counts, no queue depths (the app instances report those). Serves until
/// `shutdown` is cancelled; returns the address it listens on.
pub fn serve_counts(
    bind: std::net::SocketAddr,
    shutdown: tokio_util::sync::CancellationToken,
) -> std::io::Result<std::net::SocketAddr> {
    let server = actix_web::HttpServer::new(|| {
        actix_web::App::new().route(
            "/metrics",
            web::get().to(|| async {
                HttpResponse::Ok()
                    .content_type("text/plain; version=0.0.4; charset=utf-8")
                    .body(metrics().render())
            }),
        )
    })
    .workers(1)
    .bind(bind)?;
    let address = server.addrs()[0];
    let server = server.run();
    let handle = server.handle();
    tokio::spawn(async move {
        shutdown.cancelled().await;
        handle.stop(true).await;
    });
    tokio::spawn(server);
    Ok(address)
}

/// Jobs in every sale's order queues and deadline queues, summed.
async fn queue_depths(state: &AppState) -> anyhow::Result<[(&'static str, QueueStats); 2]> {
    let mut conn = state.store.redis().await?;
    let mut total = [
        (SaleQueue::Orders, QueueStats::default()),
        (SaleQueue::Deadlines, QueueStats::default()),
    ];
    for sale_id in state.store.sale_ids().await? {
        let keys = SaleKeys::new(state.store.prefix(), sale_id);
        for (which, sum) in &mut total {
            let stats = Queue::new(keys.queue_keys(*which).clone())
                .stats(&mut conn)
                .await?;
            sum.waiting += stats.waiting;
            sum.in_flight += stats.in_flight;
            sum.dead += stats.dead;
        }
    }
    Ok(total.map(|(which, stats)| (which.as_str(), stats)))
}
