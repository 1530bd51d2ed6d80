//! `seckill reset`: forget every sale and order, for a storefront as new.

use std::io::Write;

use anyhow::Context;

use crate::cli::ResetArgs;
use seckill_core::store::{self, Store};
use seckill_core::urls::redact;
use seckill_devenv::services::Services;

/// `seckill reset`: refuse while a `seckill serve` or `worker` runs on
/// this database and prefix (`given_database` is the URL it was told, if
/// any; a process told the same, or told the one `services` found, is on
/// the same deployment); say what
/// goes, ask (unless `--yes`), forget every sale and order. Anything but
/// "yes" deletes nothing, and fails, so that a script that did not mean it
/// stops there.
pub(super) async fn run(
    services: &Services,
    given_database: Option<&str>,
    prefix: &str,
    args: ResetArgs,
) -> anyhow::Result<()> {
    let running =
        seckill_devenv::running::servers_on(given_database, &services.database_url, prefix);
    if !running.is_empty() {
        let list: Vec<String> = running
            .iter()
            .map(|process| format!("  pid {}: seckill {}", process.pid, process.command))
            .collect();
        let processes = match running.len() {
            1 => "1 seckill process runs".to_owned(),
            n => format!("{n} seckill processes run"),
        };
        anyhow::bail!(
            "{processes} on this database and prefix `{prefix}`, and would keep \
             what they read of the sales:\n{}\nstop them first (Ctrl-C, or kill PID); nothing was deleted",
            list.join("\n")
        );
    }
    println!(
        "seckill reset: every sale and order in PostgreSQL ({}) and every Redis key under `{prefix}:` \
         will be deleted. No seckill server runs on them here.",
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
