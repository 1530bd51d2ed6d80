//! The worker's rows: its drain into PostgreSQL, of a short queue and a
//! long one, each against one server-side bulk insert of as many rows
//! (`baseline.rs`), and an idle worker's delay
//! from a `202` to the order confirmed.

use std::time::{Duration, Instant};

use anyhow::Context;
use seckill_loadtest::http::{Connection, Target, purchase_path};

use super::compare::Figure;
use super::{Bound, Row, baseline, deployment};
use crate::bench::BenchArgs;
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::domain::{OrderJob, OrderStatus, PassIds, UserId, pass_payload};
use seckill_core::keys::SaleKeys;
use seckill_core::queue::Queue;
use seckill_core::store::Store;
use seckill_core::worker::Worker;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::Services;

/// The drain's rows: `--drain-orders` jobs drained by one worker, then
/// `--drain-orders-large`, each against PostgreSQL's own bulk insert of
/// as many rows, measured right after it.
pub(super) async fn drain(args: &BenchArgs, store: &Store) -> anyhow::Result<[Row; 3]> {
    let small = drain_once(args, store, args.drain_orders).await?;
    let large = drain_once(args, store, args.drain_orders_large).await?;
    let (fast, share) = (Bound::AtLeast(40_000.0), Bound::AtLeast(60.0));
    let shown = |drained: &Drained| {
        format!(
            "{}% (drain: {:.0}/s, INSERT: {:.0} rows/s)",
            share.shown(drained.percent(), 0),
            drained.drained,
            drained.baseline
        )
    };
    Ok([
        Row {
            figure: "worker drain into PostgreSQL, orders/s",
            measured: format!("{}/s", fast.shown(small.drained, 0)),
            target: ">= 40,000",
            met: Some(fast.met(small.drained)),
            value: Figure::higher(small.drained),
        },
        Row {
            figure: "worker drain / one server-side INSERT of as many rows",
            measured: shown(&small),
            target: ">= 60%",
            met: Some(share.met(small.percent())),
            value: Figure::higher(small.percent()),
        },
        Row {
            figure: "worker drain of --drain-orders-large / one INSERT of as many rows",
            measured: format!("{} of {}", shown(&large), large.orders),
            target: ">= 60%",
            met: Some(share.met(large.percent())),
            value: Figure::higher(large.percent()),
        },
    ])
}

/// One drain and its baseline.
struct Drained {
    orders: u32,
    /// Orders per second the worker wrote.
    drained: f64,
    /// Rows per second of one `INSERT ... SELECT` of as many.
    baseline: f64,
}

impl Drained {
    fn percent(&self) -> f64 {
        self.drained / self.baseline * 100.0
    }
}

/// Orders in each pass's job the drain's queue holds: about what a pass
/// of the `lock` strategy takes under the bench's load (the redis-cost
/// row's passes took 12 to 25 buyers).
const DRAIN_PASS: u32 = 25;

/// `n` orders queued on a sale of their own, as the `lock` strategy
/// queues them (a job for each pass of [`DRAIN_PASS`] orders), drained
/// by one worker's own drain, then PostgreSQL's bulk insert of as many
/// rows.
async fn drain_once(args: &BenchArgs, store: &Store, n: u32) -> anyhow::Result<Drained> {
    let sale_id = loadrun::create_sale(store, "Bench drain", n, Some(3600)).await?;
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let queue = Queue::new(keys.queue.clone());
    let mut conn = store.redis().await?;
    let key = store.pass_key().await?;
    let jobs: Vec<(String, String)> = (0..n)
        .step_by(DRAIN_PASS as usize)
        .map(|first| {
            let mut pass = PassIds::new(sale_id, key);
            let orders: Vec<OrderJob> = (first..n.min(first + DRAIN_PASS))
                .map(|i| {
                    let user = UserId::parse(&format!("drain-{i}")).expect("a valid buyer id");
                    pass.order(&user)
                })
                .collect();
            (pass.job_id().to_string(), pass_payload(&orders))
        })
        .collect();
    for chunk in jobs.chunks(1_000) {
        let chunk: Vec<(&str, &str)> = chunk
            .iter()
            .map(|(i, p)| (i.as_str(), p.as_str()))
            .collect();
        queue
            .enqueue(&mut conn, &chunk, Duration::ZERO)
            .await
            .context("queueing the drain's jobs")?;
    }
    let worker = Worker::new(store.clone(), args.worker.settings());
    let started = Instant::now();
    let report = worker.drain(sale_id).await?;
    anyhow::ensure!(
        report.confirmed == n as usize,
        "the worker confirmed {} of {n} orders",
        report.confirmed
    );
    let drained = f64::from(n) / started.elapsed().as_secs_f64();
    let baseline = f64::from(n)
        / baseline::time_bulk_insert(store.pg(), sale_id, n)
            .await?
            .as_secs_f64();
    Ok(Drained {
        orders: n,
        drained,
        baseline,
    })
}

/// Purchases one at a time on an instance with its worker in-process:
/// the p50 from the `202` to the order confirmed in PostgreSQL.
pub(super) async fn idle_delay(
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Row> {
    const PURCHASES: u32 = 50;
    let deployment = deployment(services, store.prefix(), Strategy::Lock, token)?;
    let mut cluster = Fleet::new(deployment);
    let url = cluster.start_app("bench-idle", &[]).await?;
    let sale_id = loadrun::create_sale(store, "Bench idle", PURCHASES, Some(3600)).await?;
    let mut connection = Connection::open(Target::resolve(&url).await?).await?;
    let path = purchase_path(sale_id);
    let mut delays = Vec::new();
    for i in 0..PURCHASES {
        let answer = connection.purchase(&path, &format!("idle-{i}")).await;
        let order_id = answer
            .classified
            .order_id
            .context("a purchase on an idle sale was refused")?;
        let accepted = Instant::now();
        loop {
            let order = store.find_order(order_id).await?;
            if order.is_some_and(|order| order.status == OrderStatus::Confirmed) {
                break;
            }
            anyhow::ensure!(
                accepted.elapsed() < Duration::from_secs(10),
                "order {order_id} never confirmed"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        delays.push(accepted.elapsed());
    }
    cluster.stop().await;
    delays.sort();
    let p50 = delays[delays.len() / 2].as_secs_f64() * 1000.0;
    let target = Bound::AtMost(5.0);
    Ok(Row {
        figure: "idle worker: 202 to order confirmed, p50",
        measured: format!("{} ms", target.shown(p50, 1)),
        target: "<= 5 ms",
        met: Some(target.met(p50)),
        value: Figure::lower(p50),
    })
}
