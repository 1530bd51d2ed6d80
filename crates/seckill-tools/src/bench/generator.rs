//! The bundled load generator against `wrk` (issue 40's raised target):
//! both on the bench's bare handler (`wrk.rs`), the same 64 connections,
//! closed loop, `--secs` a run, three rounds alternated
//! (`wrk::alternated`), the round of the median ratio shown. The
//! generator runs in the bench's process, beside the bare handler, as wrk
//! runs beside it in a process of its own.

use std::sync::Arc;
use std::time::Duration;

use super::wrk::{self, alternated, median_ratio_row, not_installed, wrk_installed};
use super::{BenchArgs, Row};
use seckill_loadtest::http::Target;
use seckill_loadtest::progress::Progress;
use seckill_loadtest::scenario::{self, Plan, Scenario, Shape};

/// Connections in every run, wrk's and the generator's.
const CONNECTIONS: usize = 64;

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
        alternated(args.rounds(wrk::ROUNDS), async |which| match which {
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
