//! The `seckill` binary: parse the command line, find Redis and PostgreSQL,
//! run the chosen subcommand. Everything else lives in the library.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use seckill::cli::{Cli, Command, CreateSaleArgs, CreatedSale, SaleCommand, ServeArgs, WorkerArgs};
use seckill::domain::NewSale;
use seckill::services::{Origin, PrivateServers, Services, redact, redact_redis};
use seckill::startup::{self, Application, Settings};
use seckill::store::Store;
use seckill::telemetry;
use seckill::worker::Worker;

/// See `Cargo.toml`: jemalloc gives a burst's memory back once it is over.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    // `demo` answers like `seckill-loadtest`: 1 only for a broken promise,
    // 2 when it could not run at all.
    let failure = match cli.command {
        Command::Demo(_) | Command::Chaos(_) | Command::Lab(_) | Command::Bench(_) => {
            ExitCode::from(2)
        }
        _ => ExitCode::FAILURE,
    };
    match run(cli).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("seckill: {error:#}");
            failure
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    // `chaos` starts servers of its own, which it may kill and wipe.
    if let Command::Chaos(args) = cli.command {
        let given = &cli.services;
        if given.redis_url.is_some()
            || given.redis_cluster_nodes.is_some()
            || given.database_url.is_some()
        {
            eprintln!(
                "seckill chaos: the Redis and PostgreSQL given (flags or SECKILL_* variables) \
                 are not used: chaos starts servers of its own, which it kills and wipes"
            );
        }
        let verdict = seckill::chaos::chaos(args).await?;
        return Ok(ExitCode::from(verdict.exit_code()));
    }
    // The bench's helper talks to an instance only.
    if let Command::HoldPages(args) = cli.command {
        seckill::bench::hold_pages(args).await?;
        return Ok(ExitCode::SUCCESS);
    }
    // Private servers live as long as the command: fine for the ones
    // that start their own instances and stop them (`demo`, `lab`,
    // `bench`) or serve until stopped (`serve`); the others would write
    // into a server that is gone when they exit.
    let private = match cli.command {
        Command::Serve(_) | Command::Demo(_) | Command::Lab(_) | Command::Bench(_) => {
            PrivateServers::Allowed
        }
        _ => PrivateServers::Refused,
    };
    // Held until the command ends: dropping it stops any private servers.
    let (redis, database_url) = (cli.services.redis()?, cli.services.database_url.as_deref());
    let services = match cli.command {
        // It works in a database of its own, not in the one named.
        Command::Bench(_) => Services::find(redis, database_url, private).await?,
        _ => Services::resolve(redis, database_url, private).await?,
    };
    log_services(&services);
    let prefix = cli.services.redis_prefix;
    match cli.command {
        Command::Serve(args) => serve(&services, prefix, args).await?,
        Command::Worker(args) => work(&services, prefix, args).await?,
        Command::Migrate => {
            startup::connect_postgres(&services.database_url).await?;
            println!("migrations applied to {}", redact(&services.database_url));
        }
        Command::Sale(SaleCommand::Create(args)) => create_sale(&services, &prefix, args).await?,
        Command::Chaos(_) | Command::HoldPages(_) => {
            unreachable!("they return before the servers are resolved")
        }
        Command::Demo(args) => {
            // 0 when both runs kept their promise, 1 when one broke it,
            // 2 when one could not be trusted: as `seckill-loadtest`.
            let verdict = seckill::demo::demo(args, &services, &prefix).await?;
            return Ok(ExitCode::from(verdict.exit_code()));
        }
        Command::Bench(args) => seckill::bench::bench(args, &services, &prefix).await?,
        Command::Lab(args) => {
            // 0 when every row showed what it must, 1 when one did not.
            let as_expected = seckill::lab::lab(args, &services, &prefix).await?;
            return Ok(if as_expected {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            });
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn log_services(services: &Services) {
    let origin = |origin: Origin| match origin {
        Origin::Configured => "configured",
        Origin::Local => "found on its default local port",
        Origin::Private => "private, started by this process; it stops when the process exits",
    };
    tracing::info!(url = %redact_redis(&services.redis), origin = origin(services.redis_origin), "Redis");
    tracing::info!(url = %redact(&services.database_url), origin = origin(services.postgres_origin), "PostgreSQL");
}

async fn serve(services: &Services, redis_prefix: String, args: ServeArgs) -> anyhow::Result<()> {
    startup::raise_open_files_limit();
    let app = Application::build(Settings {
        redis: services.redis.clone(),
        database_url: services.database_url.clone(),
        redis_prefix,
        bind: args.bind,
        admin_token: args.admin_token,
        instance_id: args.instance_id,
        max_event_streams: args.max_event_streams,
        admin_session: std::time::Duration::from_secs(args.admin_session_secs),
        run_worker: !args.no_worker,
        purchase: args.purchase,
        worker: args.worker,
        limits: args.limits,
    })
    .await?;
    // Listening before the address is out: whoever reads it may stop us.
    let stop = startup::stop_requested();
    // The one line on stdout: scripts and tests read the address from it.
    println!("seckill listening on http://{}", app.address());
    std::io::stdout().flush().context("writing to stdout")?;
    if services.has_private_servers() {
        tracing::warn!(
            "Redis or PostgreSQL is private to this process: other seckill processes cannot share it, \
             and its data is gone when this one exits. Create sales with the admin API \
             (POST /api/sales) rather than `seckill sale create`."
        );
    }
    app.run_until_stopped(stop).await
}

async fn work(services: &Services, redis_prefix: String, args: WorkerArgs) -> anyhow::Result<()> {
    let pg = startup::connect_postgres(&services.database_url).await?;
    let redis = startup::connect_redis(&services.redis, args.worker.poll()).await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on(startup::stop_requested(), shutdown.clone()));
    if let Some(bind) = args.metrics_bind {
        let address = seckill::web::metrics::serve_counts(bind, shutdown.clone())
            .with_context(|| format!("serving /metrics on {bind}"))?;
        tracing::info!(%address, "worker figures at /metrics");
    }
    // Woken by every purchase's stock change, not only by its poll.
    let (events, events_task) =
        seckill::events::SaleEvents::start(&services.redis, &redis_prefix, shutdown.clone())?;
    Worker::new(Store::new(pg, redis, redis_prefix), args.worker)
        .run_woken(shutdown, Some(events.subscribe()))
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

async fn create_sale(
    services: &Services,
    prefix: &str,
    args: CreateSaleArgs,
) -> anyhow::Result<()> {
    let now = Utc::now();
    // Seconds beyond i64 are refused by the builder's range check, like any
    // other out-of-range number.
    let seconds = |secs: u64| i64::try_from(secs).unwrap_or(i64::MAX);
    let mut new = NewSale::builder(args.name, i64::from(args.stock))
        .price_cents(args.price_cents)
        .starts_in(seconds(args.starts_in));
    if let Some(duration) = args.duration {
        new = new.lasts(seconds(duration));
    }
    let new = new.build(now).context("invalid sale")?;
    let pg = startup::connect_postgres(&services.database_url).await?;
    let redis = startup::connect_redis(&services.redis, std::time::Duration::from_secs(3)).await?;
    let sale = Store::new(pg, redis, prefix).create_sale(&new).await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&CreatedSale::new(&sale, now)).expect("a sale serializes")
    );
    Ok(())
}
