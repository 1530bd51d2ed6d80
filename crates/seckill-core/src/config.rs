//! The settings a sale needs: how the purchase path, the worker and the
//! rate limits behave, what a `202` waits for, and each setting's range.
//!
//! Plain data at the bottom of the layers, with their checks
//! ([`PurchaseSettings::check`] and its siblings): the purchase path and
//! the worker read them, the command line (`seckill-cli`'s `flags.rs`)
//! fills them in from flags and environment variables, and tests and tools
//! build them as values. A range is written once, here; the flags' help
//! text is written where the flags are.

use std::fmt;
use std::ops::RangeInclusive;
use std::time::Duration;

mod limits;

pub use limits::{RateLimit, RateLimitSettings, TrustedProxies};

pub const DEFAULT_REPLICA_WAIT_MS: u64 = 250;
/// The range of `--redis-replica-wait-ms`.
pub const REPLICA_WAIT_MS: RangeInclusive<u64> = 1..=60_000;
/// `--redis-wait-replicas`: one replica's acknowledgement makes a `202`.
pub const DEFAULT_WAIT_REPLICAS: u32 = 1;
/// The range of `--redis-wait-replicas`.
pub const WAIT_REPLICAS: RangeInclusive<u32> = 1..=16;

/// What an answer waits for, as the purchase path and the worker use it
/// (`replicas.rs` does the waiting).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RedisDurability {
    /// Answer once the primary has the writes.
    #[default]
    Local,
    /// Answer once `replicas` replicas have them too, waiting at most
    /// `wait`.
    Replica { wait: Duration, replicas: u32 },
}

impl RedisDurability {
    /// The Redis timeouts this setting needs: a `WAIT` is never cut short
    /// by its own client (`redis_pool/timeouts.rs`).
    pub fn timeouts(self) -> crate::redis_pool::RedisTimeouts {
        crate::redis_pool::RedisTimeouts::for_replica_wait(match self {
            Self::Local => None,
            Self::Replica { wait, .. } => Some(wait),
        })
    }
}

/// How a purchase decides who gets a unit (one file each in `src/strategy/`;
/// [`Strategy::describe`] says what each is).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Lock,
    Naive,
    Article,
    Getset,
    Lua,
    Postgres,
    Decr,
}

impl Strategy {
    /// Whether this strategy checks and spends a waiting room's admission
    /// in its own commit, one atomic step with the take (`lock`'s
    /// `purchase_commit.lua`, `lua`'s `purchase_lua.lua`). The others
    /// leave it to the storefront's door: checked before, spent after.
    pub fn spends_admissions(self) -> bool {
        matches!(self, Self::Lock | Self::Lua)
    }

    /// Every strategy, in the order the lab runs them.
    pub const ALL: [Strategy; 7] = [
        Strategy::Naive,
        Strategy::Article,
        Strategy::Getset,
        Strategy::Decr,
        Strategy::Lock,
        Strategy::Lua,
        Strategy::Postgres,
    ];

    /// Its name on the command line and in reports.
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Lock => "lock",
            Strategy::Naive => "naive",
            Strategy::Article => "article",
            Strategy::Getset => "getset",
            Strategy::Lua => "lua",
            Strategy::Postgres => "postgres",
            Strategy::Decr => "decr",
        }
    }

    /// The strategy named `name` (as [`Strategy::as_str`] writes it).
    pub fn from_name(name: &str) -> Option<Strategy> {
        Strategy::ALL
            .into_iter()
            .find(|strategy| strategy.as_str() == name)
    }

    /// What it is, in one line: what `--help` says of each choice.
    pub fn describe(self) -> &'static str {
        match self {
            Strategy::Lock => {
                "The safe path: the sale's Redis lock around check-and-decrement, writes fenced."
            }
            Strategy::Naive => {
                "DELIBERATELY BROKEN: read stock, pause, write stock minus one, no lock. It oversells; it exists to show why the lock matters."
            }
            Strategy::Article => {
                "DELIBERATELY BROKEN: the article's RedisLock as written (SETNX then EXPIRE with a timestamp, the TTL<0 takeover, isLocking that assigns, unlock without owner check)."
            }
            Strategy::Getset => {
                "DELIBERATELY BROKEN: the GETSET takeover lock (value = expiry time): clock skew and long pauses let two holders in."
            }
            Strategy::Lua => {
                "No lock: the whole purchase in one Redis script. Correct, and the fastest."
            }
            Strategy::Postgres => {
                "No Redis on the decision: one conditional UPDATE and the order insert in one PostgreSQL transaction."
            }
            Strategy::Decr => {
                "DELIBERATELY BROKEN: DECR, then INCR back below zero (cache then compensate): a buyer's two requests can both win."
            }
        }
    }
}

impl fmt::Display for Strategy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Seconds a buyer in a waiting room's line may go without asking before
/// the room takes them for gone, by default (the sale page asks every
/// second or two).
pub const DEFAULT_ROOM_ABANDON_SECS: u64 = 30;

/// Seconds a waiting room's keys outlive its sale's end, by default
/// (`--room-grace-secs`): an hour in which its figures (`/metrics`, the
/// live page) and a late buyer's "closed" are still told. Tickets and
/// admissions are worth nothing after the end (a purchase is refused as
/// ended), so nothing a buyer holds needs more.
pub const DEFAULT_ROOM_GRACE_SECS: u64 = 3600;

pub(crate) const DEFAULT_LOCK_TTL_MS: u64 = 2_000;
pub(crate) const DEFAULT_LOCK_WAIT_MS: u64 = 2_000;
pub(crate) const DEFAULT_SOLD_OUT_REFRESH_MS: u64 = 250;
pub const DEFAULT_NAIVE_DELAY_MS: u64 = 5;

/// Knobs of the purchase path.
#[derive(Debug, Clone)]
pub struct PurchaseSettings {
    /// Purchase strategy: `lock` (the default), `lua` and `postgres` are safe; `naive`, `article`, `getset` and `decr` are deliberately broken, for the demo and the lab.
    pub strategy: Strategy,

    /// Lifetime of the sale lock in milliseconds, 1 to 600000: how long a crashed holder can block others.
    pub lock_ttl_ms: u64,

    /// How long a purchase waits for the sale lock before answering 503 busy, in milliseconds, 0 to 60000.
    pub lock_wait_ms: u64,

    /// How long an instance trusts its own "sold out" flag before asking Redis again, in milliseconds, 0 to 60000.
    pub sold_out_refresh_ms: u64,

    /// The `naive` strategy's pause between reading and writing the stock, in milliseconds, 0 to 10000 (widens the race).
    pub naive_delay_ms: u64,

    /// Fault knob, for workshops: pause the lock holder inside its critical section (after the checks, before the writes) for this many milliseconds, 0 to 60000: the GC pause of the fencing argument. Past the lock's TTL, `lock` refuses the write (503 lock_lost) and `getset` oversells; `decr` pauses between taking the unit and recording the buyer (one buyer wins twice); `article` pauses between SETNX and EXPIRE too (others take its lock: it oversells).
    pub hold_pause_ms: u64,

    /// Fault knob, for workshops: wait this many milliseconds before each Redis command of the hand-written locks (`article`, `getset`), 0 to 10000 (a slow network). The gap between SETNX and EXPIRE widens, and `article` may let others take a live holder's lock.
    pub redis_delay_ms: u64,

    /// Fault knob, for workshops: this instance's clock is this many milliseconds ahead (negative: behind), -3600000 to 3600000. `getset` judges lock expiry by it, and takes live locks: it oversells.
    pub clock_skew_ms: i64,

    /// Fault knob, for workshops: under `article`, kill the process (SIGKILL) between SETNX and EXPIRE (a crash at the worst moment): the lock is left without a TTL.
    pub crash_after_setnx: bool,

    /// Seconds after a sale's end before an instance forgets what it keeps in memory of it (its copy of the sale, lane, sold-out flag, answer counts), 1 to 86400: the requests still on their way finish first.
    pub forget_ended_after_secs: u64,
}

pub const DEFAULT_FORGET_ENDED_AFTER_SECS: u64 = 60;

impl Default for PurchaseSettings {
    fn default() -> Self {
        Self {
            strategy: Strategy::Lock,
            lock_ttl_ms: DEFAULT_LOCK_TTL_MS,
            lock_wait_ms: DEFAULT_LOCK_WAIT_MS,
            sold_out_refresh_ms: DEFAULT_SOLD_OUT_REFRESH_MS,
            naive_delay_ms: DEFAULT_NAIVE_DELAY_MS,
            hold_pause_ms: 0,
            redis_delay_ms: 0,
            clock_skew_ms: 0,
            crash_after_setnx: false,
            forget_ended_after_secs: DEFAULT_FORGET_ENDED_AFTER_SECS,
        }
    }
}

impl PurchaseSettings {
    pub const LOCK_TTL_MS: RangeInclusive<u64> = 1..=600_000;
    pub const LOCK_WAIT_MS: RangeInclusive<u64> = 0..=60_000;
    pub const SOLD_OUT_REFRESH_MS: RangeInclusive<u64> = 0..=60_000;
    pub const NAIVE_DELAY_MS: RangeInclusive<u64> = 0..=10_000;
    pub const HOLD_PAUSE_MS: RangeInclusive<u64> = 0..=60_000;
    pub const REDIS_DELAY_MS: RangeInclusive<u64> = 0..=10_000;
    pub const CLOCK_SKEW_MS: RangeInclusive<i64> = -3_600_000..=3_600_000;
    pub const FORGET_ENDED_AFTER_SECS: RangeInclusive<u64> = 1..=86_400;

    /// Every setting within its range (the command line refuses the rest
    /// before; settings built as values are checked at the start).
    pub fn check(&self) -> Result<(), InvalidSetting> {
        within("lock_ttl_ms", self.lock_ttl_ms, Self::LOCK_TTL_MS)?;
        within("lock_wait_ms", self.lock_wait_ms, Self::LOCK_WAIT_MS)?;
        within(
            "sold_out_refresh_ms",
            self.sold_out_refresh_ms,
            Self::SOLD_OUT_REFRESH_MS,
        )?;
        within("naive_delay_ms", self.naive_delay_ms, Self::NAIVE_DELAY_MS)?;
        within("hold_pause_ms", self.hold_pause_ms, Self::HOLD_PAUSE_MS)?;
        within("redis_delay_ms", self.redis_delay_ms, Self::REDIS_DELAY_MS)?;
        within("clock_skew_ms", self.clock_skew_ms, Self::CLOCK_SKEW_MS)?;
        within(
            "forget_ended_after_secs",
            self.forget_ended_after_secs,
            Self::FORGET_ENDED_AFTER_SECS,
        )
    }

    pub(crate) fn lock_ttl(&self) -> Duration {
        Duration::from_millis(self.lock_ttl_ms)
    }
    pub fn lock_wait(&self) -> Duration {
        Duration::from_millis(self.lock_wait_ms)
    }
    /// How long after its end an instance keeps what it has of a sale.
    pub fn forget_ended_after(&self) -> Duration {
        Duration::from_secs(self.forget_ended_after_secs)
    }
    pub(crate) fn sold_out_refresh(&self) -> Duration {
        Duration::from_millis(self.sold_out_refresh_ms)
    }
    pub(crate) fn naive_delay(&self) -> Duration {
        Duration::from_millis(self.naive_delay_ms)
    }
    pub(crate) fn hold_pause(&self) -> Duration {
        Duration::from_millis(self.hold_pause_ms)
    }
    pub(crate) fn redis_delay(&self) -> Duration {
        Duration::from_millis(self.redis_delay_ms)
    }
    /// This instance's clock, skewed by the knob: milliseconds since the epoch.
    pub(crate) fn now_ms(&self) -> i64 {
        chrono::Utc::now().timestamp_millis() + self.clock_skew_ms
    }
}

/// The longest any statement may run (PostgreSQL's `statement_timeout`),
/// on every connection; the worker's writes get less (see
/// [`WorkerSettings::statement_timeout`]).
pub(crate) const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) const DEFAULT_BATCH_SIZE: u32 = 2000;
pub(crate) const DEFAULT_LEASE_MS: u64 = 30_000;
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub(crate) const DEFAULT_POLL_MS: u64 = 500;
pub(crate) const DEFAULT_PAYMENT_WINDOW_SECS: u64 = 900;

/// Knobs of the queue worker.
#[derive(Debug, Clone)]
pub struct WorkerSettings {
    /// Orders reserved and written to PostgreSQL in one transaction, 1 to
    /// 10000 (a pass's job counts its orders; a single job heavier than
    /// this is still taken alone).
    pub batch_size: u32,

    /// How long a reserved job belongs to its worker before it is delivered again, in milliseconds, 100 to 3600000.
    pub lease_ms: u64,

    /// Deliveries of one job before it is moved to the dead-letter set, 1 to 1000.
    pub max_attempts: u32,

    /// Pause between polls of an empty queue, in milliseconds, 1 to 60000 (an idle worker is also woken by every purchase).
    pub poll_ms: u64,

    /// Seconds a confirmed order has to be paid before it is cancelled and its unit goes back on sale, 1 to 31536000.
    pub payment_window_secs: u64,
}

impl Default for WorkerSettings {
    fn default() -> Self {
        Self {
            batch_size: DEFAULT_BATCH_SIZE,
            lease_ms: DEFAULT_LEASE_MS,
            max_attempts: DEFAULT_MAX_ATTEMPTS,
            poll_ms: DEFAULT_POLL_MS,
            payment_window_secs: DEFAULT_PAYMENT_WINDOW_SECS,
        }
    }
}

impl WorkerSettings {
    pub const BATCH_SIZE: RangeInclusive<u32> = 1..=10_000;
    pub const LEASE_MS: RangeInclusive<u64> = 100..=3_600_000;
    pub const MAX_ATTEMPTS: RangeInclusive<u32> = 1..=1_000;
    pub const POLL_MS: RangeInclusive<u64> = 1..=60_000;
    pub const PAYMENT_WINDOW_SECS: RangeInclusive<u64> = 1..=31_536_000;

    /// Every setting within its range.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        within("batch_size", self.batch_size, Self::BATCH_SIZE)?;
        within("lease_ms", self.lease_ms, Self::LEASE_MS)?;
        within("max_attempts", self.max_attempts, Self::MAX_ATTEMPTS)?;
        within("poll_ms", self.poll_ms, Self::POLL_MS)?;
        within(
            "payment_window_secs",
            self.payment_window_secs,
            Self::PAYMENT_WINDOW_SECS,
        )
    }

    pub(crate) fn lease(&self) -> Duration {
        Duration::from_millis(self.lease_ms)
    }
    pub fn poll(&self) -> Duration {
        Duration::from_millis(self.poll_ms)
    }
    pub fn payment_window(&self) -> Duration {
        Duration::from_secs(self.payment_window_secs)
    }

    /// The longest one statement of a batch's write may run: a quarter of
    /// the lease, at most [`STATEMENT_TIMEOUT`].
    pub(crate) fn statement_timeout(&self) -> Duration {
        (self.lease() / 4).min(STATEMENT_TIMEOUT)
    }

    /// The longest a batch's whole write may take: half the lease. The race
    /// this bounds: a write stuck past the lease (a lock wait, a slow disk)
    /// while the queue hands its jobs to a second worker, so both write
    /// and the first one's give-back or ack lands on jobs that are no
    /// longer its own. A write cut off here is rolled back, or, if its
    /// commit got through, redelivered as a no-op.
    pub(crate) fn write_time_limit(&self) -> Duration {
        self.lease() / 2
    }
}

/// A setting outside its range.
#[derive(Debug, thiserror::Error)]
#[error("{name} must be from {range}, not {value}")]
pub struct InvalidSetting {
    name: &'static str,
    value: String,
    range: String,
}

fn within<T: PartialOrd + fmt::Display>(
    name: &'static str,
    value: T,
    range: RangeInclusive<T>,
) -> Result<(), InvalidSetting> {
    if range.contains(&value) {
        return Ok(());
    }
    Err(InvalidSetting {
        name,
        value: value.to_string(),
        range: format!("{} to {}", range.start(), range.end()),
    })
}

#[cfg(test)]
mod tests;
