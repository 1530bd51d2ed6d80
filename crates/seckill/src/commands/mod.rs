//! The server's commands, each wired here: `serve` (through
//! `seckill_web::startup`), `worker` (`worker.rs`), `migrate`, `sale create`
//! (`sale.rs`) and `reset` (`reset.rs`). Each finds Redis and PostgreSQL
//! first (`seckill_devenv::services`).

mod reset;
mod sale;
mod worker;

use std::io::Write;

use anyhow::Context;

use crate::cli::{SaleCommand, ServeArgs, ServerCommand};
use seckill_cli::ServiceArgs;
use seckill_core::config::RedisDurability;
use seckill_core::store;
use seckill_core::urls::redact;
use seckill_devenv::services::{PrivateServers, Services};
use seckill_web::startup::{Application, Settings};

/// Run one of the server's commands.
pub(crate) async fn run(given: ServiceArgs, command: ServerCommand) -> anyhow::Result<()> {
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
        ServerCommand::Worker(args) => worker::run(&services, prefix, durability, args).await,
        ServerCommand::Migrate => {
            store::connect_postgres(&services.database_url).await?;
            println!("migrations applied to {}", redact(&services.database_url));
            Ok(())
        }
        ServerCommand::Sale(SaleCommand::Create(args)) => {
            sale::create(&services, &prefix, args).await
        }
        ServerCommand::Reset(args) => {
            reset::run(&services, given.database_url.as_deref(), &prefix, args).await
        }
    }
}

async fn serve(
    services: &Services,
    redis_prefix: String,
    durability: RedisDurability,
    args: ServeArgs,
) -> anyhow::Result<()> {
    seckill_cli::process::raise_open_files_limit();
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
        room_grace: std::time::Duration::from_secs(args.room_grace_secs),
        run_worker: !args.no_worker,
        purchase: args.purchase.settings(),
        worker: args.worker.settings(),
        limits: args.limits.settings(),
    })
    .await?;
    // Listening before the address is out: whoever reads it may stop us.
    let stop = seckill_cli::process::stop_requested();
    // The one line on stdout: scripts and tests read the address from it.
    let mut stdout = std::io::stdout();
    writeln!(stdout, "seckill listening on http://{}", app.address())
        .and_then(|()| stdout.flush())
        .context("writing to stdout")?;
    if services.has_private_servers() {
        tracing::warn!(
            "Redis or PostgreSQL is private to this process: other seckill processes cannot share it, \
             and its data is gone when this one exits. Create sales with the admin API \
             (POST /api/sales) rather than `seckill sale create`."
        );
    }
    app.run_until_stopped(stop).await
}
