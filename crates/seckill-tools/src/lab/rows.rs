//! The lesson as data: which strategy runs with which knob, and what each
//! row must show.
//!
//! A row is a strategy, a fault knob (or none) and an [`Expectation`]. The
//! knob is set on the row's instances as command-line flags (`serve
//! --hold-pause-ms 200 ...`), so each bug is made to happen by a
//! deterministic trigger rather than by hoping for a race. The expectation
//! is judged from the row's figures ([`RowFigures`]): the broken strategies
//! must break the way their files say, the correct ones must hold.

use serde::Serialize;

use crate::lab::Knob;
use seckill_core::config::Strategy;

use super::expect::Expectation;

/// The flags a knob adds to a row's instances when the row names no
/// values of its own.
fn default_flags(knob: Knob) -> Flags {
    match knob {
        Knob::None => Flags::default(),
        Knob::HoldPause => Flags::every(&["--hold-pause-ms", "200"]),
        Knob::CrashAfterSetnx => Flags::every(&["--crash-after-setnx"]),
        // The honest instance's holder sleeps on what it read; the
        // instance whose clock runs ahead takes its live lock and sells
        // meanwhile. Its lock commands arrive 100 ms late, so that an honest
        // holder takes the lock first (see strategy/getset.rs).
        Knob::ClockSkew => Flags {
            every: flags(&["--lock-ttl-ms", "5000", "--lock-wait-ms", "10000"]),
            first: flags(&["--hold-pause-ms", "2000"]),
            second: flags(&["--clock-skew-ms", "8000", "--redis-delay-ms", "100"]),
        },
        Knob::RedisDelay => Flags::every(&["--redis-delay-ms", "20"]),
    }
}

/// Command-line flags of a row's instances.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub(crate) struct Flags {
    /// Added to every instance.
    pub(crate) every: Vec<String>,
    /// Added to the first instance only.
    pub(crate) first: Vec<String>,
    /// Added to the second instance only (a skewed clock is one machine's).
    pub(crate) second: Vec<String>,
}

impl Flags {
    fn every(raw: &[&str]) -> Self {
        Self {
            every: flags(raw),
            ..Self::default()
        }
    }

    /// The flags of instance `i` (1-based).
    pub(crate) fn of_instance(&self, i: u32) -> Vec<String> {
        let mut all = self.every.clone();
        match i {
            1 => all.extend(self.first.iter().cloned()),
            2 => all.extend(self.second.iter().cloned()),
            _ => {}
        }
        all
    }
}

fn flags(raw: &[&str]) -> Vec<String> {
    raw.iter().map(|s| (*s).to_owned()).collect()
}

/// How many buyers a row has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Buyers {
    /// The run's `--users`.
    Run,
    /// Half as many as the units, each sending twice: every request wins
    /// a unit unless something stops a buyer's second one.
    HalfTheUnits,
}

impl Buyers {
    pub(crate) fn count(self, run_users: u32, units: u32) -> u32 {
        match self {
            Buyers::Run => run_users,
            Buyers::HalfTheUnits => (units / 2).max(1),
        }
    }
}

/// One row of the lesson.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct LabRow {
    pub(crate) strategy: Strategy,
    pub(crate) knob: Knob,
    pub(crate) flags: Flags,
    pub(crate) expect: Expectation,
    /// App instances, when the row needs other than the run's.
    pub(crate) instances: Option<u32>,
    /// Share of buyers who send twice, when the row needs other than the run's.
    pub(crate) dup: Option<f64>,
    /// Buyers, when the row needs other than the run's.
    pub(crate) buyers: Buyers,
    /// Units for sale, when the row needs other than the run's.
    pub(crate) units: Option<u32>,
    /// What the row shows, in one sentence.
    pub(crate) lesson: &'static str,
}

impl LabRow {
    fn new(strategy: Strategy, knob: Knob, expect: Expectation, lesson: &'static str) -> Self {
        Self {
            strategy,
            knob,
            flags: default_flags(knob),
            expect,
            instances: None,
            dup: None,
            buyers: Buyers::Run,
            units: None,
            lesson,
        }
    }

    fn flags(mut self, every: &[&str]) -> Self {
        self.flags.every = flags(every);
        self
    }

    /// The row's name in reports and file names: `article+hold-pause`.
    pub(crate) fn label(&self) -> String {
        match self.knob {
            Knob::None => self.strategy.as_str().to_owned(),
            knob => format!("{}+{}", self.strategy.as_str(), knob.as_str()),
        }
    }
}

/// The whole lesson, in the order it is taught: the broken strategies
/// first, each without and then with the knob that exposes its bug, then
/// the correct ones.
pub(crate) fn lesson() -> Vec<LabRow> {
    use Expectation::*;
    use Strategy::*;
    vec![
        LabRow::new(
            Naive,
            Knob::None,
            Oversells,
            "read, pause, write: every buyer in the pause reads the same stock",
        ),
        LabRow::new(
            Article,
            Knob::None,
            PostgresHolds,
            "the article's lock on a good day: its bugs wait for bad luck",
        ),
        LabRow::new(
            Article,
            Knob::HoldPause,
            Oversells,
            "a holder paused between SETNX and EXPIRE is robbed (TTL < 0 = 'crashed')",
        ),
        LabRow {
            // One instance: with two, the other one "rescues" the lock by
            // the same takeover that robs live holders, and the crash hides.
            instances: Some(1),
            ..LabRow::new(
                Article,
                Knob::CrashAfterSetnx,
                StuckLock,
                "a crash between SETNX and EXPIRE leaves a lock that never expires",
            )
        },
        LabRow::new(
            Getset,
            Knob::None,
            PostgresHolds,
            "the GETSET lock on a good day",
        ),
        LabRow::new(
            Getset,
            Knob::HoldPause,
            Oversells,
            "a holder paused past its TTL wakes up and writes: no fence",
        )
        .flags(&[
            "--hold-pause-ms",
            "1000",
            "--lock-ttl-ms",
            "300",
            "--lock-wait-ms",
            "5000",
        ]),
        LabRow {
            // One unit: the honest holder reads it and sleeps; the instance
            // whose clock runs ahead takes the live lock, sells the unit,
            // and the holder wakes and sells it again. With ten, whether
            // the last one is read by a sleeping holder is timing.
            units: Some(1),
            ..LabRow::new(
                Getset,
                Knob::ClockSkew,
                Oversells,
                "a clock 8 s ahead takes a live lock and sells the unit its sleeping holder read",
            )
        },
        LabRow::new(
            Decr,
            Knob::None,
            PostgresHolds,
            "DECR, then INCR back below zero: fine while nothing pauses",
        ),
        LabRow {
            // Half as many buyers as units, each sending twice at once: the
            // knob holds every request between taking its unit and
            // recording its buyer, so each buyer's second request passes
            // the check too. With 2,000 buyers, whether a pair lands among
            // the first ten DECRs is luck, and the lab shows no luck.
            dup: Some(1.0),
            buyers: Buyers::HalfTheUnits,
            ..LabRow::new(
                Decr,
                Knob::HoldPause,
                DoubleWinsUndersells,
                "each buyer's two requests both pass the check before either records the buyer",
            )
        },
        LabRow::new(
            Lock,
            Knob::None,
            Holds,
            "the fixed lock: SET NX PX, owner checks, a fence on the writes",
        ),
        LabRow::new(
            Lock,
            Knob::HoldPause,
            Fenced,
            "the same pause past the TTL: the fence refuses the late write (503 lock_lost)",
        )
        .flags(&[
            "--hold-pause-ms",
            "1500",
            "--lock-ttl-ms",
            "500",
            "--lock-wait-ms",
            "3000",
        ]),
        LabRow::new(
            Lua,
            Knob::None,
            Holds,
            "no lock: the whole purchase is one script",
        ),
        LabRow::new(
            Postgres,
            Knob::None,
            Holds,
            "no Redis on the hot path: a conditional UPDATE is the lock",
        ),
    ]
}

/// The rows `--strategy` and `--knob` ask for: the lesson's, or, for a
/// pairing it does not teach, one row with the knob's usual values judged
/// by PostgreSQL's word only.
pub(crate) fn select(strategy: Option<Strategy>, knob: Option<Knob>) -> Vec<LabRow> {
    let rows: Vec<LabRow> = lesson()
        .into_iter()
        .filter(|row| strategy.is_none_or(|s| row.strategy == s))
        .filter(|row| knob.is_none_or(|k| row.knob == k))
        .collect();
    match (rows.is_empty(), strategy) {
        (true, Some(strategy)) => {
            let knob = knob.unwrap_or(Knob::None);
            vec![LabRow::new(
                strategy,
                knob,
                Expectation::PostgresHolds,
                "a pairing the lesson does not teach: judged by PostgreSQL's word only",
            )]
        }
        _ => rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lesson_runs_every_strategy_and_each_knob_once_per_strategy() {
        let rows = lesson();
        for strategy in Strategy::ALL {
            assert!(
                rows.iter()
                    .any(|r| r.strategy == strategy && r.knob == Knob::None),
                "{strategy:?} has no row without a knob"
            );
        }
        // Every knob but the slow network (which only widens, by chance,
        // the gap the pause opens for sure) has a row that shows its bug.
        for knob in [Knob::HoldPause, Knob::CrashAfterSetnx, Knob::ClockSkew] {
            assert!(rows.iter().any(|r| r.knob == knob), "no row with {knob:?}");
        }
        assert!(select(None, Some(Knob::RedisDelay)).is_empty());
        let mut labels: Vec<String> = rows.iter().map(LabRow::label).collect();
        labels.sort();
        labels.dedup();
        assert_eq!(labels.len(), rows.len(), "two rows with one label");
    }

    #[test]
    fn an_untaught_pairing_is_one_row_judged_by_postgres() {
        let rows = select(Some(Strategy::Lua), Some(Knob::HoldPause));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].expect, Expectation::PostgresHolds);
        assert_eq!(rows[0].flags.every, ["--hold-pause-ms", "200"]);
        assert_eq!(select(Some(Strategy::Getset), None).len(), 3);
        assert_eq!(
            select(Some(Strategy::Getset), Some(Knob::ClockSkew))[0]
                .flags
                .of_instance(2),
            [
                "--lock-ttl-ms",
                "5000",
                "--lock-wait-ms",
                "10000",
                "--clock-skew-ms",
                "8000",
                "--redis-delay-ms",
                "100"
            ]
        );
        assert_eq!(select(None, None).len(), lesson().len());
    }
}
