//! The accepted purchases rows (`seckill bench --only accepted`), every
//! request a new buyer on a sale of a million units:
//! - **accepted purchases per second** with `lock`, and with `lua` beside
//!   `redis-benchmark` running the same script (`lua.rs`): the bundled
//!   load generator, 64 connections for `--secs`, on two instances;
//! - **accepted purchases against sold-out answers** (issue 40's raised
//!   target), with `lock` and with `lua`, with `wrk` on one instance: a
//!   new sale each round, against a sold-out sale on the same instance,
//!   three rounds alternated (`wrk::alternated`), the round of the median
//!   ratio shown. The instance runs no worker: a `seckill worker` of its
//!   own is paused (SIGSTOP) while wrk runs, and drains each accepted
//!   run's orders before the next run starts. What the row measures is the
//!   instance's rate; on this bench's two cores a worker draining beside
//!   it, and the PostgreSQL it writes to, would take the instance's core
//!   (their CPU per order is the capacity rows'), where a deployment runs
//!   them on machines of their own.

use nix::sys::signal::Signal;

use super::capacity::{drained, emptied};
use super::compare::Figure;
use super::wrk::{self, alternated, median_ratio_row, not_installed, wrk_installed};
use super::{BenchArgs, Bound, Row};
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// The row's instance and its worker, as [`Fleet::start`] names them.
const INSTANCE: &str = "bench-accepted-1";
const WORKER: &str = "bench-accepted-worker";

/// New buyers on one big sale for `--secs` seconds: accepted per second.
pub(super) async fn accepted_per_second(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
    strategy: Strategy,
) -> anyhow::Result<Row> {
    let load = super::closed_load(args.secs, 64);
    let no_more = async |_: &Fleet| Ok(());
    let (report, ()) =
        super::run(services, store, token, strategy, 1_000_000, &load, no_more).await?;
    let per_second = super::accepted_rate(&report);
    if strategy != Strategy::Lua {
        let target = Bound::AtLeast(8_000.0);
        return Ok(Row {
            figure: "accepted purchases/s on one sale, lock",
            measured: format!("{}/s", target.shown(per_second, 0)),
            target: ">= 8,000",
            met: Some(target.met(per_second)),
            value: Figure::higher(per_second),
        });
    }
    // Measured after the run, so that the two never share the cores.
    let script = super::lua::script_per_second(&services.redis, store, args.secs).await?;
    let target = Bound::AtLeast(80.0);
    let percent = script.map(|script| per_second / script * 100.0);
    Ok(Row {
        figure: "accepted purchases/s on one sale, lua / redis-benchmark running the script",
        measured: match (script, percent) {
            (Some(script), Some(percent)) => format!(
                "{}% ({per_second:.0}/s; the script alone: {script:.0}/s)",
                target.shown(percent, 0)
            ),
            _ => format!("{per_second:.0}/s (no redis-benchmark baseline here)"),
        },
        target: ">= 80%",
        met: percent.map(|percent| target.met(percent)),
        value: percent.and_then(Figure::higher),
    })
}

/// Units of each round's sale (the most a sale may have): more than one
/// run sells, at 200,000/s for 5 s.
const UNITS: u32 = 1_000_000;
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
    let cluster = Fleet::start(deployment, "bench-accepted", 1).await?;
    let url = cluster.url(INSTANCE)?;
    let rounds = async {
        let same = wrk::same_buyer_script()?;
        let (sold, sold_out) = wrk::sold_out_sale(store, &url, same.path()).await?;
        // The worker is paused only once it has drained an order, the
        // sold-out sale's (as in `redis_cost.rs`: paused while still
        // starting, it lost its PostgreSQL connection when let go).
        drained(store, sold, 1).await?;
        emptied(store, sold).await?;
        let new = wrk::script_file(&new_buyers_script("wrk-buyer"))?;
        alternated(args.rounds(wrk::ROUNDS), async |which| {
            if which == 1 {
                return wrk::wrk(&sold_out, args.secs, Some(same.path())).await;
            }
            // A sale of its own each round: none runs short of units.
            let sale = loadrun::create_sale(store, "Bench accepted", UNITS, Some(3600)).await?;
            let buy = format!("{url}/api/sales/{sale}/purchase");
            cluster.signal(WORKER, Signal::SIGSTOP)?;
            let accepted = wrk::wrk_answers(&buy, args.secs, new.path()).await;
            // Let go whatever happened, or the fleet's stop would wait on
            // a paused process. It drains what the run accepted before
            // the next run, which would share the cores with it.
            cluster.signal(WORKER, Signal::SIGCONT)?;
            let accepted = accepted?;
            emptied(store, sale).await?;
            Ok(accepted.ok_per_second())
        })
        .await
    }
    .await;
    cluster.stop().await;
    Ok(median_ratio_row(figure, rounds?, 0.50, ">= 0.50"))
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
