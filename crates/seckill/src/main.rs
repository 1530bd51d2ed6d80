//! The `seckill` binary: parse the command line and run the chosen
//! command. The server's commands are wired in `commands/` (the server
//! itself in `seckill_web::startup`); the tools live in `seckill-tools`
//! (left out of a build with `--no-default-features`).

mod cli;
mod commands;

use std::process::ExitCode;

use cli::{Cli, Command};
use seckill_cli::telemetry;

/// See `Cargo.toml`: jemalloc gives a burst's memory back once it is over.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse_args();
    telemetry::init();
    let command = match cli.command {
        Command::Server(command) => command,
        #[cfg(feature = "tools")]
        Command::Tool(tool) => {
            // The tools draw progress bars: a log line is printed above them.
            telemetry::send_logs_through(Some(Box::new(seckill_loadtest::progress::print_above)));
            return tool.run(&cli.services, &cli.services.redis_prefix).await;
        }
    };
    match commands::run(cli.services, command).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("seckill: {error:#}");
            ExitCode::FAILURE
        }
    }
}
