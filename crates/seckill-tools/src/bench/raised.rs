//! The raised targets of issue 40, each a ratio against a baseline
//! measured in the same run, with `wrk` (one thread, 64 connections,
//! `--secs` a run, three rounds alternated (`wrk::alternated`), the round of the median
//! ratio shown):
//! - **accepted purchases against sold-out answers**, with `lock` and with
//!   `lua`: on one instance, a sale of more units than a run sells (a new
//!   one each round), every request a new buyer, against a sold-out sale
//!   on the same instance; each accepted run's orders drained before the
//!   next run starts;
//! - **the bundled load generator against wrk**: both on the bench's bare
//!   handler (`wrk.rs`), the same connections, closed loop. The generator
//!   runs in the bench's process, beside the bare handler, as wrk runs
//!   beside it in a process of its own.

use std::sync::Arc;
use std::time::Duration;

use super::capacity::emptied;
use super::wrk::{self, alternated, median_ratio_row, not_installed, wrk_installed};
use super::{BenchArgs, Row};
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;
use seckill_loadtest::http::Target;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::scenario::{self, Plan, Scenario, Shape};

/// Units of each round's sale (the most a sale may have): more than one
/// run sells, at 200,000/s for 5 s.
const UNITS: u32 = 1_000_000;
/// Connections in every run, wrk's and the generator's.
const CONNECTIONS: usize = 64;

/// wrk's script for purchases by new buyers: each request a buyer of its
/// own, named `{tag}-1`, `{tag}-2`...
fn new_buyers_script(tag: &str) -> String {
    format!(
        "wrk.method = \"POST\"\nwrk.headers[\"Content-Type\"] = \"application/json\"\nlocal n = 0\nrequest = function()\n  n = n + 1\n  return wrk.format(nil, nil, nil, '{{\"user_id\":\"{tag}-' .. n .. '\"}}')\nend\n"
    )
}

/// Accepted purchases/s against sold-out answers/s on one instance of
/// `strategy`: the row.
pub(super) async fn accepted_against_sold_out(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
    strategy: Strategy,
) -> anyhow::Result<Row> {
    let figure = match strategy {
        Strategy::Lua => "accepted purchases/s, lua / sold-out answers (wrk, one instance)",
        _ => "accepted purchases/s, lock / sold-out answers (wrk, one instance)",
    };
    if !wrk_installed().await {
        return Ok(not_installed(figure, ">= 0.50"));
    }
    let deployment = super::deployment(services, store.prefix(), strategy, token)?;
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-accepted", &[]).await?;
    let rounds = async {
        let same = wrk::same_buyer_script()?;
        let sold_out = wrk::sold_out_sale(store, &url, same.path()).await?;
        let new = wrk::script_file(&new_buyers_script("wrk-buyer"))?;
        alternated(async |which| {
            if which == 1 {
                return wrk::wrk(&sold_out, args.secs, Some(same.path())).await;
            }
            // A sale of its own each round: none runs short of units.
            let sale = loadrun::create_sale(store, "Bench accepted", UNITS, Some(3600)).await?;
            let buy = format!("{url}/api/sales/{sale}/purchase");
            let accepted = wrk::wrk_answers(&buy, args.secs, new.path()).await?;
            // The instance's worker drains what the run accepted: done
            // before the next run, which would share the cores with it
            // (a sold-out baseline slowed down, the ratio raised).
            emptied(store, sale).await?;
            Ok(accepted.ok_per_second())
        })
        .await
    }
    .await;
    cluster.stop().await;
    Ok(median_ratio_row(figure, rounds?, 0.50, ">= 0.50"))
}

/// The bundled generator's requests/s against wrk's, on the bare handler.
pub(super) async fn generator_against_wrk(args: &BenchArgs) -> anyhow::Result<Row> {
    let figure = "the bundled load generator / wrk, closed loop on the bare handler";
    if !wrk_installed().await {
        return Ok(not_installed(figure, ">= 0.90"));
    }
    let bare = wrk::bare_server()?;
    let rounds = async {
        let script = wrk::same_buyer_script()?;
        let target = Target::resolve(&bare.url).await?;
        let purchase = bare.purchase_url();
        alternated(async |which| match which {
            0 => generator(&target, args.secs).await,
            _ => wrk::wrk(&purchase, args.secs, Some(script.path())).await,
        })
        .await
    }
    .await;
    bare.handle.stop(true).await;
    Ok(median_ratio_row(figure, rounds?, 0.90, ">= 0.90"))
}

/// The generator's closed loop on `target` for `secs`: answers per second.
async fn generator(target: &Arc<Target>, secs: f64) -> anyhow::Result<f64> {
    // Buyers enough for 200,000 answers a second (twice the fastest
    // seen): a closed loop that ran out of buyers would stop early.
    let buyers = (secs * 200_000.0).ceil().clamp(1_000.0, 100_000_000.0) as u32;
    let plan = Arc::new(Plan::new(1, buyers, 0.0, vec![target.clone()]));
    let shape = Shape {
        scenario: Scenario::Closed,
        rate: 0.0,
        duration: Some(Duration::from_secs_f64(secs)),
        connections: CONNECTIONS,
    };
    let run = scenario::run(&plan, shape, &Progress::stderr()).await?;
    Ok(run.samples.len() as f64 / run.wall.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_names_a_buyer_of_its_own() {
        let script = new_buyers_script("wrk-buyer");
        assert!(
            script.contains(r#"'{"user_id":"wrk-buyer-' .. n .. '"}'"#),
            "{script}"
        );
    }
}
