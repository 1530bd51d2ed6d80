//! `seckill worker`'s wiring, as `seckill_web::startup` is the server's:
//! PostgreSQL and Redis, the stop signal, the optional `/metrics` listener,
//! the sale events that wake it, and the worker itself
//! (`seckill_core::worker`), until SIGINT or SIGTERM.

use std::io::Write;

use anyhow::Context;
use tokio_util::sync::CancellationToken;

use crate::cli::WorkerArgs;
use seckill_core::config::RedisDurability;
use seckill_core::store::{self, Store};
use seckill_core::worker::Worker;
use seckill_devenv::services::Services;

pub(super) async fn run(
    services: &Services,
    redis_prefix: String,
    durability: RedisDurability,
    args: WorkerArgs,
) -> anyhow::Result<()> {
    let worker = args.worker.settings();
    let pg = store::connect_postgres(&services.database_url).await?;
    let redis = seckill_core::redis_pool::connect_redis_with(
        &services.redis,
        worker.poll(),
        durability.timeouts(),
    )
    .await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on(
        seckill_cli::process::stop_requested(),
        shutdown.clone(),
    ));
    if let Some(bind) = args.metrics_bind {
        let address = seckill_web::metrics::serve_counts(bind, shutdown.clone())
            .with_context(|| format!("serving /metrics on {bind}"))?;
        tracing::info!(%address, "worker figures at /metrics");
    }
    // Woken by every purchase's stock change, not only by its poll.
    let (events, events_task) =
        seckill_core::events::SaleEvents::start(&services.redis, &redis_prefix, shutdown.clone())?;
    let wake = events.subscribe();
    // The one line on stdout: whoever started this worker waits for it.
    // (A reader gone already is an error, not a panic as `println!`'s.)
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", seckill_devenv::processes::WORKER_READY)
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    Worker::new(
        Store::new(pg, redis, redis_prefix).with_durability(durability),
        worker,
    )
    .run_woken(shutdown, Some(wake))
    .await;
    events_task.await.context("the sale events task panicked")?;
    Ok(())
}

/// Cancel `token` once `stop` ends (SIGINT or SIGTERM).
async fn cancel_on(stop: impl Future<Output = ()>, token: CancellationToken) {
    stop.await;
    tracing::info!("stopping after the batch in progress");
    token.cancel();
}
