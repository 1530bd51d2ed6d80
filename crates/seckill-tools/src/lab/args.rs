//! `seckill lab`'s options, and the fault knobs a row can turn.

use std::path::PathBuf;

use clap::Args;
use seckill_core::config::Strategy;

#[derive(Debug, Clone, Args)]
pub struct LabArgs {
    /// Run only this strategy's rows.
    #[arg(long, value_parser = seckill_cli::flags::strategy())]
    pub(crate) strategy: Option<Strategy>,

    /// Run only the rows with this fault knob (with --strategy: one row; a pairing the lesson does not teach runs with the knob's usual values).
    #[arg(long, value_enum)]
    pub(crate) knob: Option<Knob>,

    /// Distinct buyers in each row.
    #[arg(long, default_value_t = 2_000, value_parser = clap::value_parser!(u32).range(1..))]
    pub(crate) users: u32,

    /// Fraction of buyers who also send a second request at the same moment (0 to 1; a row may set its own).
    #[arg(long, default_value_t = 0.05, value_parser = seckill_loadtest::fraction)]
    pub(crate) dup: f64,

    /// Units for sale in each row.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub(crate) stock: u32,

    /// App instances in each row (plus one worker; a row may set its own).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=16))]
    pub(crate) instances: u32,

    /// Where the table (lab.json, lab.html) and each row's load-test report go.
    #[arg(long, default_value = "target/seckill-lab")]
    pub(crate) report_dir: PathBuf,

    /// Quit after the table instead of keeping every row's instances serving until Ctrl-C.
    #[arg(long)]
    pub(crate) exit: bool,
}

/// The fault knobs of `serve` (`seckill_core::config::PurchaseSettings`), by name: what `seckill lab --knob`
/// takes. Which values each sets is the lab's business (`rows.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum Knob {
    /// No fault: the strategy as it runs on a good day.
    None,
    /// `--hold-pause-ms`: the lock holder stops inside its critical section
    /// (a GC pause, a page fault).
    HoldPause,
    /// `--crash-after-setnx`: `article`'s holder is killed between SETNX and EXPIRE.
    CrashAfterSetnx,
    /// `--clock-skew-ms` on the second instance: its clock runs ahead.
    ClockSkew,
    /// `--redis-delay-ms`: every command of `article`'s and `getset`'s locks arrives late.
    RedisDelay,
}

impl Knob {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Knob::None => "none",
            Knob::HoldPause => "hold-pause",
            Knob::CrashAfterSetnx => "crash-after-setnx",
            Knob::ClockSkew => "clock-skew",
            Knob::RedisDelay => "redis-delay",
        }
    }
}
