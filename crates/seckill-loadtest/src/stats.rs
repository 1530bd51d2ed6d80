//! From raw samples to the figures a report shows: counts and latency
//! percentiles per outcome (HDR histograms at microsecond resolution), a
//! 100 ms timeline, the time to sell out, throughput, launch skew, and the
//! generator's own CPU time and memory.

use std::collections::BTreeMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use crate::answer::AnswerKind;
use crate::scenario::{LATE_AFTER, RunData, Sample, Scenario, micros_of};

/// Width of one timeline bucket.
pub(crate) const BUCKET: Duration = Duration::from_millis(100);
/// Largest latency the histograms record (longer ones are clamped to it).
const MAX_LATENCY_US: u64 = 600_000_000;

/// Latency of one outcome, in microseconds.
#[derive(Debug, Clone, Serialize)]
pub struct Latency {
    pub outcome: AnswerKind,
    pub count: u64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
    /// `(percentile, latency µs)` points for the latency-by-percentile chart.
    #[serde(skip)]
    pub curve: Vec<(f64, u64)>,
}

/// Answers that completed within one 100 ms bucket, by outcome.
#[derive(Debug, Clone, Serialize)]
pub struct Bucket {
    /// Start of the bucket, ms from the run's start.
    pub t_ms: u64,
    pub counts: BTreeMap<AnswerKind, u64>,
}

/// Everything measured about a run.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub requests: u64,
    /// Start (release) to the last answer.
    pub wall_ms: f64,
    /// Answers per second over the wall time.
    pub requests_per_second: f64,
    pub counts: BTreeMap<AnswerKind, u64>,
    pub latency: Vec<Latency>,
    /// The 99th percentile of every answer, whatever it said, in µs.
    pub p99_us: u64,
    pub timeline: Vec<Bucket>,
    /// Burst only: time between the first and the last send after the release.
    pub launch_skew_us: Option<u64>,
    /// When the last winning answer arrived, ms from the start, if the sale sold out.
    pub time_to_sell_out_ms: Option<f64>,
    /// Rate only: sends that started more than 10 ms after they were due.
    pub late_sends: u64,
    /// Rate only: sends dropped because no connection came free within 1 s.
    pub dropped_sends: u64,
    /// Connections that could not be opened.
    pub connect_errors: u64,
    /// Winning answers per instance (`X-Seckill-Instance`).
    pub won_by_instance: BTreeMap<String, u64>,
    /// All answers per instance.
    pub answers_by_instance: BTreeMap<String, u64>,
}

impl Summary {
    pub fn count(&self, outcome: AnswerKind) -> u64 {
        self.counts.get(&outcome).copied().unwrap_or(0)
    }

    pub fn latency(&self, outcome: AnswerKind) -> Option<&Latency> {
        self.latency.iter().find(|l| l.outcome == outcome)
    }

    pub(crate) fn from_run(run: &RunData, scenario: Scenario) -> Self {
        let samples = &run.samples;
        let tally = Counted::of(samples);
        let wall = run.wall.as_secs_f64();
        Self {
            requests: samples.len() as u64,
            wall_ms: wall * 1000.0,
            requests_per_second: if wall > 0.0 {
                samples.len() as f64 / wall
            } else {
                0.0
            },
            counts: tally.counts,
            p99_us: tally.all.value_at_quantile(0.99),
            latency: latencies(tally.histograms),
            timeline: buckets(tally.timeline),
            launch_skew_us: match scenario {
                Scenario::Burst => launch_skew(samples),
                _ => None,
            },
            time_to_sell_out_ms: time_to_sell_out(samples),
            late_sends: late_sends(samples, scenario),
            dropped_sends: run.dropped,
            connect_errors: run.connect_errors,
            won_by_instance: tally.won_by_instance,
            answers_by_instance: tally.answers_by_instance,
        }
    }
}

/// The samples counted in one pass: by outcome, in latency histograms, in
/// 100 ms buckets, and by the instance that answered.
struct Counted {
    counts: BTreeMap<AnswerKind, u64>,
    histograms: BTreeMap<AnswerKind, Histogram<u64>>,
    /// Every answer's latency, whatever the outcome.
    all: Histogram<u64>,
    /// Answers per bucket, by outcome in the order of [`AnswerKind::ALL`].
    timeline: Vec<[u64; AnswerKind::ALL.len()]>,
    won_by_instance: BTreeMap<String, u64>,
    answers_by_instance: BTreeMap<String, u64>,
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_US, 3).expect("valid histogram bounds")
}

impl Counted {
    fn of(samples: &[Sample]) -> Self {
        let mut tally = Self {
            counts: BTreeMap::new(),
            histograms: BTreeMap::new(),
            all: histogram(),
            timeline: Vec::new(),
            won_by_instance: BTreeMap::new(),
            answers_by_instance: BTreeMap::new(),
        };
        for sample in samples {
            tally.add(sample);
        }
        tally
    }

    fn add(&mut self, sample: &Sample) {
        *self.counts.entry(sample.outcome).or_default() += 1;
        let latency = sample.latency_us().max(1);
        self.histograms
            .entry(sample.outcome)
            .or_insert_with(histogram)
            .saturating_record(latency);
        self.all.saturating_record(latency);
        let bucket = (sample.done_us / micros_of(BUCKET)) as usize;
        if self.timeline.len() <= bucket {
            self.timeline.resize(bucket + 1, [0; AnswerKind::ALL.len()]);
        }
        self.timeline[bucket][sample.outcome.index()] += 1;
        if let Some(instance) = &sample.instance {
            *self
                .answers_by_instance
                .entry(instance.to_string())
                .or_default() += 1;
            if sample.outcome == AnswerKind::Won {
                *self
                    .won_by_instance
                    .entry(instance.to_string())
                    .or_default() += 1;
            }
        }
    }
}

/// The percentiles of each outcome's histogram, and the points of its curve.
fn latencies(histograms: BTreeMap<AnswerKind, Histogram<u64>>) -> Vec<Latency> {
    histograms
        .into_iter()
        .map(|(outcome, h)| Latency {
            outcome,
            count: h.len(),
            p50_us: h.value_at_quantile(0.50),
            p90_us: h.value_at_quantile(0.90),
            p99_us: h.value_at_quantile(0.99),
            p999_us: h.value_at_quantile(0.999),
            max_us: h.max(),
            curve: [50.0, 75.0, 90.0, 95.0, 99.0, 99.5, 99.9, 99.99, 100.0]
                .into_iter()
                .map(|p| (p, h.value_at_quantile(p / 100.0)))
                .collect(),
        })
        .collect()
}

/// The timeline's rows as buckets, each listing only the outcomes it saw.
fn buckets(rows: Vec<[u64; AnswerKind::ALL.len()]>) -> Vec<Bucket> {
    rows.into_iter()
        .enumerate()
        .map(|(i, row)| Bucket {
            t_ms: i as u64 * BUCKET.as_millis() as u64,
            counts: AnswerKind::ALL
                .iter()
                .zip(row)
                .filter(|(_, n)| *n > 0)
                .map(|(o, n)| (*o, n))
                .collect(),
        })
        .collect()
}

/// Sends that left more than [`LATE_AFTER`] after they were due. Only
/// `rate` has due times to be late for.
fn late_sends(samples: &[Sample], scenario: Scenario) -> u64 {
    match scenario {
        Scenario::Rate => samples
            .iter()
            .filter(|s| s.sent_us.saturating_sub(s.intended_us) > micros_of(LATE_AFTER))
            .count() as u64,
        _ => 0,
    }
}

/// The spread of send times: how far from "all at once" the release was.
fn launch_skew(samples: &[Sample]) -> Option<u64> {
    let first = samples.iter().map(|s| s.sent_us).min()?;
    let last = samples.iter().map(|s| s.sent_us).max()?;
    Some(last - first)
}

/// The sale sold out when some buyer was told so; it happened when the last
/// winner got its answer.
fn time_to_sell_out(samples: &[Sample]) -> Option<f64> {
    if !samples.iter().any(|s| s.outcome == AnswerKind::SoldOut) {
        return None;
    }
    samples
        .iter()
        .filter(|s| s.outcome == AnswerKind::Won)
        .map(|s| s.done_us)
        .max()
        .map(|us| us as f64 / 1000.0)
}

/// The generator's own cost, so a reader can tell whether it was the bottleneck.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Resources {
    /// User + system CPU time this process used during the run.
    pub cpu_ms: f64,
    pub wall_ms: f64,
    /// CPU time over wall time: 1.0 is one core busy all the time.
    pub cores_used: f64,
    /// `cores_used` over the machine's cores.
    pub machine_share: f64,
    /// Peak resident memory of this process.
    pub peak_rss_mib: f64,
}

/// A reading of this process' CPU time, taken before a run.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CpuClock {
    cpu: Duration,
    wall: std::time::Instant,
}

impl CpuClock {
    pub(crate) fn start() -> Self {
        Self {
            cpu: own_cpu_time(),
            wall: std::time::Instant::now(),
        }
    }

    pub(crate) fn stop(&self) -> Resources {
        let cpu = own_cpu_time().saturating_sub(self.cpu).as_secs_f64();
        let wall = self.wall.elapsed().as_secs_f64();
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let cores_used = if wall > 0.0 { cpu / wall } else { 0.0 };
        Resources {
            cpu_ms: cpu * 1000.0,
            wall_ms: wall * 1000.0,
            cores_used,
            machine_share: cores_used / cores,
            peak_rss_mib: peak_rss_kib() as f64 / 1024.0,
        }
    }
}

fn own_cpu_time() -> Duration {
    use nix::sys::resource::{UsageWho, getrusage};
    match getrusage(UsageWho::RUSAGE_SELF) {
        Ok(usage) => {
            let tv = |t: nix::sys::time::TimeVal| {
                Duration::from_secs(t.tv_sec().max(0) as u64)
                    + Duration::from_micros(t.tv_usec().max(0) as u64)
            };
            tv(usage.user_time()) + tv(usage.system_time())
        }
        Err(_) => Duration::ZERO,
    }
}

/// Peak resident set size of this process (Linux reports KiB).
fn peak_rss_kib() -> u64 {
    use nix::sys::resource::{UsageWho, getrusage};
    getrusage(UsageWho::RUSAGE_SELF).map_or(0, |usage| usage.max_rss().max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(outcome: AnswerKind, sent_us: u64, done_us: u64) -> Sample {
        Sample {
            user: 0,
            outcome,
            order_id: None,
            unconfirmed: false,
            instance: Some("a".into()),
            status: Some(200),
            retry_after: false,
            intended_us: 0,
            sent_us,
            done_us,
        }
    }

    fn run(samples: Vec<Sample>) -> RunData {
        RunData {
            samples,
            wall: Duration::from_millis(500),
            ..RunData::default()
        }
    }

    #[test]
    fn counts_percentiles_and_timeline_follow_the_samples() {
        let mut samples: Vec<Sample> = (1..=100)
            .map(|i| sample(AnswerKind::SoldOut, 10, i * 1000))
            .collect();
        samples.push(sample(AnswerKind::Won, 5, 150_000));
        let summary = Summary::from_run(&run(samples), Scenario::Burst);
        assert_eq!(summary.requests, 101);
        assert_eq!(summary.count(AnswerKind::SoldOut), 100);
        assert_eq!(summary.count(AnswerKind::Won), 1);
        let sold_out = summary
            .latency(AnswerKind::SoldOut)
            .expect("sold-out latency");
        // 1 ms .. 100 ms, one each: the median is 50 ms (within HDR's 0.1%).
        assert!(
            (49_900..=50_100).contains(&sold_out.p50_us),
            "{}",
            sold_out.p50_us
        );
        assert!((99_000..=100_100).contains(&sold_out.max_us));
        // Over all 101 answers, the 99th percentile is the 100th-fastest:
        // the last sold-out answer (~100 ms), not the win at 150 ms.
        assert!(
            (99_000..=100_100).contains(&summary.p99_us),
            "{}",
            summary.p99_us
        );
        // 100 sold-out answers in the first bucket (1..=99 ms) and one at 100 ms; the win at 150 ms.
        assert_eq!(summary.timeline.len(), 2);
        assert_eq!(summary.timeline[0].counts[&AnswerKind::SoldOut], 99);
        assert_eq!(summary.timeline[1].counts[&AnswerKind::SoldOut], 1);
        assert_eq!(summary.timeline[1].counts[&AnswerKind::Won], 1);
        assert_eq!(summary.launch_skew_us, Some(5));
        assert_eq!(summary.time_to_sell_out_ms, Some(150.0));
        assert_eq!(summary.won_by_instance["a"], 1);
        assert!((summary.requests_per_second - 202.0).abs() < 1e-9);
    }

    #[test]
    fn a_sale_nobody_was_refused_has_not_sold_out() {
        let summary =
            Summary::from_run(&run(vec![sample(AnswerKind::Won, 0, 10)]), Scenario::Burst);
        assert_eq!(summary.time_to_sell_out_ms, None);
    }

    #[test]
    fn late_sends_are_those_that_left_more_than_10_ms_after_their_due_time() {
        let mut on_time = sample(AnswerKind::SoldOut, 1_000 + 9_000, 20_000);
        on_time.intended_us = 1_000;
        let mut late = sample(AnswerKind::SoldOut, 1_000 + 11_000, 20_000);
        late.intended_us = 1_000;
        let summary = Summary::from_run(&run(vec![on_time, late]), Scenario::Rate);
        assert_eq!(summary.late_sends, 1);
        assert_eq!(summary.launch_skew_us, None);
        // Latency runs from the due time, so waiting to be sent is not hidden.
        let max = summary
            .latency(AnswerKind::SoldOut)
            .expect("latency")
            .max_us;
        assert!((19_000..19_100).contains(&max), "{max}");
    }
}
