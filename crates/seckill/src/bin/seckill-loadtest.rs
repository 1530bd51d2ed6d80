//! `seckill-loadtest`: the load generator's command line. Everything it does
//! is in `seckill_tools::loadrun::load_test` and the `seckill-loadtest` crate.

use std::process::ExitCode;

use clap::Parser;
use seckill_cli::telemetry;
use seckill_devenv::services::{PrivateServers, Services};
use seckill_tools::loadrun;
use seckill_tools::loadrun::LoadTestCli;

#[tokio::main]
async fn main() -> ExitCode {
    let cli = LoadTestCli::parse();
    telemetry::init();
    // Its progress bars: a log line is printed above them.
    telemetry::send_logs_through(Some(Box::new(seckill_loadtest::progress::print_above)));
    // --faults: the chaos scenario, on servers of its own.
    if let Some(chaos) = cli.chaos() {
        return match seckill_tools::chaos::chaos(chaos).await {
            Ok(verdict) => ExitCode::from(verdict.exit_code()),
            Err(error) => {
                eprintln!("seckill-loadtest: {error:#}");
                ExitCode::from(2)
            }
        };
    }
    // Instances it starts itself may run on private servers: they live as
    // long as this process. Instances given with --target have servers of
    // their own, which are the ones to verify.
    let private = if cli.targets.is_empty() {
        PrivateServers::Allowed
    } else {
        PrivateServers::Refused
    };
    let run = async {
        let services = Services::resolve(
            cli.services.redis()?,
            cli.services.database_url.as_deref(),
            private,
        )
        .await?;
        loadrun::load_test(cli, &services).await
    };
    match run.await {
        Ok(verdict) => ExitCode::from(verdict.exit_code()),
        Err(error) => {
            eprintln!("seckill-loadtest: {error:#}");
            ExitCode::from(2)
        }
    }
}
