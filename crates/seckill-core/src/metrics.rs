//! The process' figures for Prometheus: `GET /metrics` renders them in the
//! text exposition format.
//!
//! One registry per process ([`metrics`]): the parts that count (the
//! purchase path, the lock's commit, the worker, the store's loads) add to
//! it where the event happens, with no I/O; the figures that are a state
//! rather than a count (queue depths, open event streams) are read when a
//! scrape asks for them (`web/metrics.rs`). Every instance and every
//! worker process counts its own; Prometheus sums them.
//!
//! A registry per process, not per app: integration tests that run several
//! apps inside one test process see their counts added up, so the test of
//! this endpoint runs real processes (`tests/it/burst.rs`).

use std::sync::LazyLock;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge,
    IntGaugeVec, Opts, Registry, TextEncoder,
};

/// Latency buckets, in seconds: 100 µs to 10 s.
const SECONDS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 10.0,
];

/// Every figure of the process.
pub struct Metrics {
    registry: Registry,
    /// Purchase answers, by strategy and answer (`accepted`, `sold_out`,
    /// ..., or `error` for a failure).
    pub(crate) purchases: IntCounterVec,
    /// Time to answer a purchase, from the handler's call to the answer.
    pub(crate) purchase_seconds: HistogramVec,
    /// Time a pass of the `lock` strategy waited for the sale's lock.
    pub(crate) lock_wait_seconds: Histogram,
    /// Commits the fence refused: the holder's lock had expired.
    pub(crate) lock_fenced: IntCounter,
    /// Waits for a replica (`--redis-durability replica`) that ended
    /// unconfirmed: a lock pass answered 503, or a worker batch given back.
    pub(crate) unreplicated_passes: IntCounter,
    /// Orders by what happened to them: `confirmed`, `rejected` (refused
    /// by PostgreSQL: an oversell, or a buyer's second unit), `cancelled`
    /// (the payment window closed), `paid`.
    pub(crate) orders: IntCounterVec,
    /// Orders per batch the worker wrote to PostgreSQL.
    pub(crate) batch_size: Histogram,
    /// Time a batch's PostgreSQL transaction took, to its commit.
    pub(crate) commit_seconds: Histogram,
    /// Sales loaded into Redis from PostgreSQL (a restart or a wipe of
    /// Redis, or a sale's first purchase).
    pub(crate) redis_loads: IntCounter,
    /// Jobs in the queues of every sale, by queue (`orders`, `deadlines`)
    /// and state (`waiting`, `in_flight`, `dead`); set when scraped.
    pub queue_jobs: IntGaugeVec,
    /// Event streams (sale pages and live pages) open; set when scraped.
    pub event_streams: IntGauge,
    /// Entries this instance keeps in memory for its sales (the catalog's
    /// copies, lanes, sold-out flags, lock notifiers, answer counts, sale
    /// pages' shared state), summed; set when scraped. Bounded by the
    /// sales that are live: the ended ones are forgotten.
    pub sales_in_memory: IntGauge,
    /// Buyers of the waiting rooms of sales not ended longer ago than the
    /// rooms' grace (`--room-grace-secs`, an hour by default), summed, by `state`: `waiting` in line (queued), `admitted` now (the
    /// active: neither bought nor run out), and in all `bought`,
    /// `admissions` handed out, `expired` (admissions run out unused),
    /// `abandoned` (dropped from the line, gone when their turn came);
    /// read from Redis when scraped, so every instance reports the same
    /// room-wide figures (a dashboard takes `max`, not `sum`).
    ///
    /// The admission rate is the rate of `admissions`, a total: Prometheus
    /// derives the rate over any window from a total, where a rate gauge
    /// would be one instance's guess over a window of its own, sampled at
    /// scrapes, missing the bursts between them. The total lives in Redis,
    /// not in a per-process counter, because admissions are made by
    /// whichever instance a buyer asks, and it must survive their
    /// restarts. It is a gauge, not a counter, since it can fall (a sale
    /// leaves the report its grace after its end; Redis wiped): take
    /// `deriv()`, which reads a fall as a fall, not `rate()`, which would
    /// read it as a counter's reset and add a spike.
    pub room_buyers: IntGaugeVec,
}

/// The process' figures.
pub fn metrics() -> &'static Metrics {
    static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);
    &METRICS
}

impl Metrics {
    fn new() -> Self {
        let registry = Registry::new();
        let metrics = Self {
            purchases: IntCounterVec::new(
                Opts::new("seckill_purchases_total", "Purchase answers, by strategy and answer"),
                &["strategy", "answer"],
            )
            .expect("a valid counter"),
            purchase_seconds: HistogramVec::new(
                HistogramOpts::new("seckill_purchase_seconds", "Time to answer a purchase")
                    .buckets(SECONDS.to_vec()),
                &["strategy"],
            )
            .expect("a valid histogram"),
            lock_wait_seconds: histogram(
                "seckill_lock_wait_seconds",
                "Time a pass of the lock strategy waited for the sale's lock",
            ),
            lock_fenced: IntCounter::new(
                "seckill_lock_fenced_total",
                "Commits the fence refused because the holder's lock had expired",
            )
            .expect("a valid counter"),
            unreplicated_passes: IntCounter::new(
                "seckill_unreplicated_total",
                "Waits for a replica (--redis-durability replica) that no replica confirmed in time",
            )
            .expect("a valid counter"),
            orders: IntCounterVec::new(
                Opts::new(
                    "seckill_orders_total",
                    "Orders confirmed, rejected by PostgreSQL (oversell or second unit), cancelled, paid",
                ),
                &["event"],
            )
            .expect("a valid counter"),
            batch_size: Histogram::with_opts(
                HistogramOpts::new("seckill_worker_batch_size", "Orders per batch written")
                    .buckets(vec![
                        1.0, 2.0, 5.0, 10.0, 25.0, 50.0, 100.0, 250.0, 500.0, 1000.0, 5000.0,
                    ]),
            )
            .expect("a valid histogram"),
            commit_seconds: histogram(
                "seckill_worker_commit_seconds",
                "Time a batch's PostgreSQL transaction took",
            ),
            redis_loads: IntCounter::new(
                "seckill_redis_loads_total",
                "Sales loaded into Redis from PostgreSQL",
            )
            .expect("a valid counter"),
            queue_jobs: IntGaugeVec::new(
                Opts::new("seckill_queue_jobs", "Jobs in every sale's queues"),
                &["queue", "state"],
            )
            .expect("a valid gauge"),
            event_streams: IntGauge::new("seckill_event_streams", "Event streams open")
                .expect("a valid gauge"),
            room_buyers: IntGaugeVec::new(
                Opts::new(
                    "seckill_room_buyers",
                    "Buyers of the waiting rooms, by state, summed",
                ),
                &["state"],
            )
            .expect("a valid gauge"),
            sales_in_memory: IntGauge::new(
                "seckill_sales_in_memory",
                "Entries this instance keeps in memory for its sales, summed",
            )
            .expect("a valid gauge"),
            registry,
        };
        let collectors: [Box<dyn prometheus::core::Collector>; 13] = [
            Box::new(metrics.purchases.clone()),
            Box::new(metrics.purchase_seconds.clone()),
            Box::new(metrics.lock_wait_seconds.clone()),
            Box::new(metrics.lock_fenced.clone()),
            Box::new(metrics.unreplicated_passes.clone()),
            Box::new(metrics.orders.clone()),
            Box::new(metrics.batch_size.clone()),
            Box::new(metrics.commit_seconds.clone()),
            Box::new(metrics.redis_loads.clone()),
            Box::new(metrics.queue_jobs.clone()),
            Box::new(metrics.event_streams.clone()),
            Box::new(metrics.sales_in_memory.clone()),
            Box::new(metrics.room_buyers.clone()),
        ];
        for collector in collectors {
            metrics
                .registry
                .register(collector)
                .expect("each figure registered once");
        }
        metrics
    }

    /// Count `n` orders that ended as `event`.
    pub(crate) fn orders(&self, event: &str, n: usize) {
        self.orders.with_label_values(&[event]).inc_by(n as u64);
    }

    /// Every figure, in Prometheus' text format.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new()
            .encode(&self.registry.gather(), &mut out)
            .expect("the text format encodes any figure");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

fn histogram(name: &str, help: &str) -> Histogram {
    Histogram::with_opts(HistogramOpts::new(name, help).buckets(SECONDS.to_vec()))
        .expect("a valid histogram")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scrape_names_every_figure_with_its_labels() {
        let metrics = Metrics::new();
        metrics
            .purchases
            .with_label_values(&["lock", "accepted"])
            .inc_by(10);
        metrics.orders("rejected", 3);
        metrics.lock_wait_seconds.observe(0.002);
        let scrape = metrics.render();
        assert!(
            scrape.contains("seckill_purchases_total{answer=\"accepted\",strategy=\"lock\"} 10"),
            "{scrape}"
        );
        assert!(scrape.contains("seckill_orders_total{event=\"rejected\"} 3"));
        assert!(scrape.contains("seckill_lock_wait_seconds_bucket{le=\"0.0025\"} 1"));
        assert!(scrape.contains("# TYPE seckill_event_streams gauge"));
    }
}
