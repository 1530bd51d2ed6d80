//! The `seckill` binary: parse the command line, find Redis and PostgreSQL,
//! run the chosen subcommand. Everything else lives in the workspace's
//! crates: the server in `seckill-core` and `seckill-web`, the servers
//! found or started by `seckill-devenv`, the tools in `seckill-tools`
//! (left out of a build with `--no-default-features`).

mod cli;

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use chrono::Utc;
use clap::Parser;
use tokio_util::sync::CancellationToken;

use cli::{
    Cli, Command, CreateSaleArgs, CreatedSale, ResetArgs, SaleCommand, ServeArgs, ServerCommand,
    WorkerArgs,
};
use seckill_core::config::{RedisDurability, ServiceArgs};
use seckill_core::domain::NewSale;
use seckill_core::store::{self, Store};
use seckill_core::telemetry;
use seckill_core::urls::redact;
use seckill_core::worker::Worker;
use seckill_devenv::services::{PrivateServers, Services};
use seckill_web::startup::{Application, Settings};

/// See `Cargo.toml`: jemalloc gives a burst's memory back once it is over.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    telemetry::init();
    let command = match cli.command {
        Command::Server(command) => command,
        #[cfg(feature = "tools")]
        Command::Tool(tool) => return tool.run(&cli.services, &cli.services.redis_prefix).await,
    };
    match run(cli.services, command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("seckill: {error:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(given: ServiceArgs, command: ServerCommand) -> anyhow::Result<()> {
    // Private servers live as long as the command: fine for `serve`, which
    // serves until stopped; the others would write into a server that is
    // gone when they exit.
    let private = match command {
        ServerCommand::Serve(_) => PrivateServers::Allowed,
        _ => PrivateServers::Refused,
    };
    // Held until the command ends: dropping it stops any private servers.
    let services =
        Services::resolve(given.redis()?, given.database_url.as_deref(), private).await?;
    services.log();
    let prefix = given.redis_prefix.clone();
    let durability = given.durability();
    match command {
        ServerCommand::Serve(args) => serve(&services, prefix, durability, args).await,
        ServerCommand::Worker(args) => work(&services, prefix, durability, args).await,
        ServerCommand::Migrate => {
            store::connect_postgres(&services.database_url).await?;
            println!("migrations applied to {}", redact(&services.database_url));
            Ok(())
        }
        ServerCommand::Sale(SaleCommand::Create(args)) => {
            create_sale(&services, &prefix, args).await
        }
        ServerCommand::Reset(args) => reset(&services, &prefix, args).await,
    }
}

/// `seckill reset`: say what goes, ask (unless `--yes`), forget every
/// sale and order. Anything but "yes" deletes nothing, and fails, so that
/// a script that did not mean it stops there.
async fn reset(services: &Services, prefix: &str, args: ResetArgs) -> anyhow::Result<()> {
    println!(
        "seckill reset: every sale and order in PostgreSQL ({}) and every Redis key under `{prefix}:` \
         will be deleted. Stop every seckill process first: a running one keeps what it read.",
        redact(&services.database_url)
    );
    if !args.yes {
        print!("Type yes to delete them: ");
        std::io::stdout().flush().context("writing to stdout")?;
        let mut answer = String::new();
        std::io::stdin()
            .read_line(&mut answer)
            .context("reading the answer")?;
        anyhow::ensure!(answer.trim() == "yes", "not confirmed: nothing was deleted");
    }
    let pg = store::connect_postgres(&services.database_url).await?;
    let redis =
        seckill_core::redis_pool::connect_redis(&services.redis, std::time::Duration::from_secs(3))
            .await?;
    let (sales, orders) = Store::new(pg, redis, prefix).forget_every_sale().await?;
    println!("deleted {sales} sales and {orders} orders, and the Redis keys under `{prefix}:`");
    Ok(())
}

async fn serve(
    services: &Services,
    redis_prefix: String,
    durability: RedisDurability,
    args: ServeArgs,
) -> anyhow::Result<()> {
    seckill_core::process::raise_open_files_limit();
    let app = Application::build(Settings {
        redis: services.redis.clone(),
        durability,
        database_url: services.database_url.clone(),
        redis_prefix,
        bind: args.bind,
        admin_token: args.admin_token,
        instance_id: args.instance_id,
        max_event_streams: args.max_event_streams,
        admin_session: std::time::Duration::from_secs(args.admin_session_secs),
        room_abandon: std::time::Duration::from_secs(args.room_abandon_secs),
        run_worker: !args.no_worker,
        purchase: args.purchase,
        worker: args.worker,
        limits: args.limits,
    })
    .await?;
    // Listening before the address is out: whoever reads it may stop us.
    let stop = seckill_core::process::stop_requested();
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

async fn work(
    services: &Services,
    redis_prefix: String,
    durability: RedisDurability,
    args: WorkerArgs,
) -> anyhow::Result<()> {
    let pg = store::connect_postgres(&services.database_url).await?;
    let redis = seckill_core::redis_pool::connect_redis_with(
        &services.redis,
        args.worker.poll(),
        durability.timeouts(),
    )
    .await?;
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on(
        seckill_core::process::stop_requested(),
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
    Worker::new(
        Store::new(pg, redis, redis_prefix).with_durability(durability),
        args.worker,
    )
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
    let room = args.room();
    let mut new = NewSale::builder(args.name, i64::from(args.stock))
        .price_cents(args.price_cents)
        .starts_in(seconds(args.starts_in));
    if let Some(duration) = args.duration {
        new = new.lasts(seconds(duration));
    }
    if let Some(room) = room {
        new = new.waiting_room(room);
    }
    let new = new.build(now).context("invalid sale")?;
    let pg = store::connect_postgres(&services.database_url).await?;
    let redis =
        seckill_core::redis_pool::connect_redis(&services.redis, std::time::Duration::from_secs(3))
            .await?;
    let sale = Store::new(pg, redis, prefix).create_sale(&new).await?;
    println!(
        "{}",
        serde_json::to_string_pretty(&CreatedSale::new(&sale, now)).expect("a sale serializes")
    );
    Ok(())
}
