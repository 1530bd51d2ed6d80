//! What Redis spends on one accepted purchase: the ceiling of one sale,
//! since a sale's keys live on one Redis primary (under its hash tag) and
//! Redis runs one command at a time.
//!
//! One `lock` instance and one `seckill worker`, each a process of its
//! own, on a private Redis (nothing else runs on it, so its clock is the
//! sale's alone). Redis' own counts, read before and after:
//! `INFO cpu` (its process' CPU time) and `INFO commandstats` (calls and
//! µs per command; a script's `EVALSHA` counts the whole script, and the
//! commands it calls are counted again under their own names).
//!
//! 0. One purchase on a sale of its own, drained: the worker is up.
//! 1. The worker is paused (SIGSTOP) and Redis watched doing nothing for
//!    a few seconds: the instance's timers (the tally's flush, the sold-out
//!    checks) and Redis' own cron. That rate is taken off what follows.
//! 2. `--capacity-requests` new buyers buy one unit each, 64 at a time,
//!    on a sale of exactly that many units: **the purchase path's** cost
//!    per accepted purchase (the lock, the reads, the commit).
//! 3. The worker is let go and drains the queue into PostgreSQL: **the
//!    drain's** cost per order (reserve, ack, the payment deadline).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::capacity::{drained, emptied, purchases};
use super::compare::Figure;
use super::redis_info::info_field;
use super::{BenchArgs, Bound, Row};
use crate::loadrun;
use seckill_core::config::Strategy;
use seckill_core::redis_pool::{RedisAt, RedisConn, connect_redis};
use seckill_core::store::Store;
use seckill_devenv::processes::Fleet;
use seckill_devenv::services::{PrivateRedis, Services};
use seckill_loadtest::answer::AnswerKind;

/// How long Redis is watched doing nothing.
const IDLE: Duration = Duration::from_secs(3);
/// The instance's and the worker's names.
const INSTANCE: &str = "bench-redis-cost-1";
const WORKER: &str = "bench-redis-cost-worker";
/// The target of issue 40: at most this many µs per accepted purchase.
const TARGET_MICROS: f64 = 7.0;
/// Commands shown in the breakdown, the costliest first.
const SHOWN: usize = 6;

/// Redis' counts at one moment.
struct Counts {
    /// Its CPU time so far (user and system, every thread), in µs.
    cpu: f64,
    /// Per command: calls, µs.
    commands: HashMap<String, (u64, u64)>,
}

impl Counts {
    async fn read(conn: &mut RedisConn) -> anyhow::Result<Self> {
        let user: f64 = info_field(conn, "cpu", "used_cpu_user").await?;
        let sys: f64 = info_field(conn, "cpu", "used_cpu_sys").await?;
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(conn)
            .await?;
        Ok(Self {
            cpu: (user + sys) * 1e6,
            commands: commandstats(&stats),
        })
    }
}

/// `INFO commandstats`' lines, `cmdstat_evalsha:calls=12,usec=345,...`.
fn commandstats(info: &str) -> HashMap<String, (u64, u64)> {
    info.lines()
        .filter_map(|line| {
            let (name, fields) = line.trim().strip_prefix("cmdstat_")?.split_once(':')?;
            let field = |key: &str| {
                fields
                    .split(',')
                    .find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
                    .and_then(|value| value.parse().ok())
            };
            Some((name.to_owned(), (field("calls")?, field("usec")?)))
        })
        .collect()
}

/// What a stretch of `count` events cost Redis: µs of CPU each, its idle
/// rate over `took` taken off (`None` when that left nothing: a stretch
/// too short to tell from idle, not one that cost nothing), and per
/// command calls and µs each, the costliest first.
struct Cost {
    micros: Option<f64>,
    commands: Vec<(String, f64, f64)>,
}

impl Cost {
    fn between(
        before: &Counts,
        after: &Counts,
        idle_rate: f64,
        took: Duration,
        count: u32,
    ) -> Self {
        let count = f64::from(count);
        let busy = after.cpu - before.cpu - idle_rate * took.as_secs_f64();
        let mut commands: Vec<(String, f64, f64)> = after
            .commands
            .iter()
            .filter_map(|(name, &(calls, usec))| {
                let (calls_before, usec_before) =
                    before.commands.get(name).copied().unwrap_or_default();
                let calls = calls.saturating_sub(calls_before);
                (calls > 0).then(|| {
                    let usec = usec.saturating_sub(usec_before);
                    (name.clone(), calls as f64 / count, usec as f64 / count)
                })
            })
            .collect();
        commands.sort_by(|a, b| b.2.total_cmp(&a.2));
        Self {
            micros: (busy > 0.0).then(|| busy / count),
            commands,
        }
    }

    /// `evalsha 0.04 calls 5.1 µs, sadd 1.00 calls 0.9 µs, ...`.
    fn breakdown(&self) -> String {
        let shown: Vec<String> = self
            .commands
            .iter()
            .take(SHOWN)
            .map(|(name, calls, micros)| format!("{name} {calls:.2} calls {micros:.2} µs"))
            .collect();
        shown.join(", ")
    }
}

/// The rows: Redis' CPU per accepted purchase (against its target) and
/// per drained order, each with the commands that make it up, and the one
/// sale's ceiling on one Redis core that follows.
pub(super) async fn redis_cost(
    args: &BenchArgs,
    services: &Services,
    store: &Store,
    token: &str,
) -> anyhow::Result<Vec<Row>> {
    let redis = PrivateRedis::start().await?;
    let at = RedisAt::Server(redis.url());
    let pool = connect_redis(&at, Duration::from_secs(5)).await?;
    let store = Store::new(store.pg().clone(), pool, store.prefix());
    let deployment =
        super::deployment(services, store.prefix(), Strategy::Lock, token)?.on_redis(&at);
    let fleet = Fleet::start(deployment, "bench-redis-cost", 1).await?;
    let costs = measure(args.capacity_requests, &fleet, &store).await;
    fleet.stop().await;
    // The private Redis stops here, after the processes that used it.
    drop(redis);
    let (purchase, drain) = costs?;
    Ok(rows(args.capacity_requests, &purchase, &drain))
}

/// The idle rate, the purchases with the worker paused, then the drain.
async fn measure(requests: u32, fleet: &Fleet, store: &Store) -> anyhow::Result<(Cost, Cost)> {
    let url = fleet.url(INSTANCE)?;
    let mut redis = store.redis().await?;
    // The worker is paused only once it has drained an order: paused while
    // it was still starting, its connection to PostgreSQL ran out of time
    // the moment it was let go, and it exited (seen once in six runs).
    let warm = loadrun::create_sale(store, "Bench Redis cost, warm-up", 1, Some(3600)).await?;
    purchases(&url, warm, 1, AnswerKind::Won).await?;
    drained(store, warm, 1).await?;
    emptied(store, warm).await?;
    let sale = loadrun::create_sale(store, "Bench Redis cost", requests, Some(3600)).await?;
    fleet.signal(WORKER, Signal::SIGSTOP)?;
    let paused = async {
        let started = Counts::read(&mut redis).await?;
        tokio::time::sleep(IDLE).await;
        let idle = Counts::read(&mut redis).await?;
        let idle_rate = (idle.cpu - started.cpu) / IDLE.as_secs_f64();

        eprintln!("bench: Redis' cost: {requests} accepted purchases, the worker paused");
        let at = Instant::now();
        let won = purchases(&url, sale, requests, AnswerKind::Won).await?;
        anyhow::ensure!(won == requests, "{won} of {requests} purchases accepted");
        let bought = Counts::read(&mut redis).await?;
        let purchase = Cost::between(&idle, &bought, idle_rate, at.elapsed(), requests);
        // A worker that ran meanwhile would have put its drain's scripts
        // in the purchases' figure: every order is still waiting (in the
        // passes' jobs), none reserved, none written.
        let inside = store.sale_inside(sale, 0).await?;
        let queue = inside.order_queue;
        anyhow::ensure!(
            queue.waiting > 0 && queue.in_flight == 0 && inside.sold == 0,
            "the worker took orders while paused: {} jobs still waiting, {} in flight, {} orders written",
            queue.waiting,
            queue.in_flight,
            inside.sold
        );
        anyhow::Ok((idle_rate, bought, purchase))
    }
    .await;
    // Let go whatever happened, or its stop would wait on a paused process.
    fleet.signal(WORKER, Signal::SIGCONT)?;
    let (idle_rate, bought, purchase) = paused?;

    eprintln!("bench: Redis' cost: the worker drains {requests} orders");
    let at = Instant::now();
    drained(store, sale, requests).await?;
    // PostgreSQL holds every order before the worker's last ack (and the
    // payment deadlines it schedules first): counted once the queue is
    // empty.
    emptied(store, sale).await?;
    let done = Counts::read(&mut redis).await?;
    let drain = Cost::between(&bought, &done, idle_rate, at.elapsed(), requests);
    Ok((purchase, drain))
}

/// The row of a stretch whose cost Redis' clock did not tell from idle.
const UNMEASURED: &str = "not measured: no CPU time seen beyond Redis' idle rate";

fn rows(requests: u32, purchase: &Cost, drain: &Cost) -> Vec<Row> {
    let target = Bound::AtMost(TARGET_MICROS);
    let both = purchase.micros.zip(drain.micros).map(|(p, d)| p + d);
    let ceiling = both.map(|both| 1e6 / both);
    vec![
        Row {
            figure: "Redis CPU per accepted purchase, lock, the purchase path (INFO cpu)",
            measured: purchase.micros.map_or_else(
                || UNMEASURED.to_owned(),
                |micros| {
                    format!(
                        "{} µs ({requests} purchases, the worker paused; {})",
                        target.shown(micros, 1),
                        purchase.breakdown()
                    )
                },
            ),
            target: "<= 7 µs",
            met: purchase.micros.map(|micros| target.met(micros)),
            value: purchase.micros.and_then(Figure::lower),
        },
        Row {
            figure: "Redis CPU per order the worker drains (INFO cpu)",
            measured: drain.micros.map_or_else(
                || UNMEASURED.to_owned(),
                |micros| format!("{micros:.1} µs ({})", drain.breakdown()),
            ),
            target: "measured, no target (docs/capacity.md)",
            met: None,
            value: drain.micros.and_then(Figure::lower),
        },
        Row {
            figure: "one sale on one Redis core: accepted purchases/s, the drain's share included",
            measured: ceiling.zip(both).map_or_else(
                || UNMEASURED.to_owned(),
                |(ceiling, both)| format!("{ceiling:.0}/s ({both:.1} µs each)"),
            ),
            target: "measured, no target (docs/capacity.md)",
            met: None,
            value: ceiling.and_then(Figure::higher),
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commandstats_are_read_per_command_and_divided_per_purchase() {
        let before = Counts {
            cpu: 1_000.0,
            commands: commandstats(
                "# Commandstats\r\ncmdstat_evalsha:calls=10,usec=100,usec_per_call=10.00,rejected_calls=0,failed_calls=0\r\n",
            ),
        };
        let after = Counts {
            cpu: 3_000.0,
            commands: commandstats(
                "# Commandstats\r\ncmdstat_evalsha:calls=20,usec=1100,usec_per_call=55.00,rejected_calls=0,failed_calls=0\r\ncmdstat_sadd:calls=100,usec=50,usec_per_call=0.50,rejected_calls=0,failed_calls=0\r\ncmdstat_info:calls=0,usec=0,usec_per_call=0.00,rejected_calls=0,failed_calls=0\r\n",
            ),
        };
        // 2,000 µs over 1 s, of which 500 idle: 1,500 µs for 100 purchases.
        let cost = Cost::between(&before, &after, 500.0, Duration::from_secs(1), 100);
        let micros = cost.micros.expect("a cost beyond idle");
        assert!((micros - 15.0).abs() < 1e-9, "{micros}");
        assert_eq!(
            cost.breakdown(),
            "evalsha 0.10 calls 10.00 µs, sadd 1.00 calls 0.50 µs"
        );
        // No more than idle: not a cost of 0, met against the target, but
        // a stretch the clock could not measure.
        let idle = Cost::between(&before, &after, 2_000.0, Duration::from_secs(1), 100);
        assert_eq!(idle.micros, None);
        let [purchase, drain, ceiling] = rows(100, &idle, &idle)
            .try_into()
            .unwrap_or_else(|_| panic!("three rows"));
        assert_eq!((purchase.met, purchase.value.is_none()), (None, true));
        assert!(purchase.measured.starts_with("not measured"));
        assert!(drain.measured.starts_with("not measured"));
        assert!(ceiling.measured.starts_with("not measured"));
    }
}
