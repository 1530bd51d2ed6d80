//! The flags every `seckill` command shares (where Redis and PostgreSQL
//! are, what a `202` waits for) and the flags of the sale's settings
//! (`seckill_core::config`), which `serve`, `worker` and the tools fill in.
//!
//! Only the interface lives here: each flag's name, environment variable,
//! default and help text. The settings themselves, their ranges and their
//! checks are the core's, so a setting built as a value (a test, a tool)
//! meets the same ranges as one typed on the command line. Every flag here
//! can also be set through the environment variable named in its `--help`
//! line (flags win over the environment); the tools' own options are
//! flags only (docs/storefront.md says which).

use std::time::Duration;

use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
use clap::{Args, ValueEnum};

use seckill_core::config::{
    DEFAULT_FORGET_ENDED_AFTER_SECS, DEFAULT_NAIVE_DELAY_MS, DEFAULT_REPLICA_WAIT_MS,
    DEFAULT_WAIT_REPLICAS, PurchaseSettings, REPLICA_WAIT_MS, RateLimitSettings, RedisDurability,
    Strategy, TrustedProxies, WAIT_REPLICAS, WorkerSettings,
};
use seckill_core::redis_pool::RedisAt;

/// Where Redis and PostgreSQL are. With neither URL set, seckill uses the
/// servers on their default local ports when they answer and otherwise
/// starts private ones from the installed binaries.
#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Where Redis and PostgreSQL are")]
pub struct ServiceArgs {
    /// Redis URL, e.g. redis://127.0.0.1:6379 [default: local or private server]
    #[arg(long, env = "SECKILL_REDIS_URL", global = true, hide_env_values = true)]
    pub redis_url: Option<String>,

    /// Redis Cluster nodes instead of one server: comma-separated URLs of some of its masters, e.g. redis://127.0.0.1:7000,redis://127.0.0.1:7001
    #[arg(
        long,
        env = "SECKILL_REDIS_CLUSTER_NODES",
        global = true,
        hide_env_values = true,
        conflicts_with = "redis_url"
    )]
    pub redis_cluster_nodes: Option<String>,

    /// Redis Sentinel instead of one server: comma-separated URLs of the sentinels, e.g. redis://127.0.0.1:26379,redis://127.0.0.1:26380; the primary is the one they name for --redis-master-name
    #[arg(
        long,
        env = "SECKILL_REDIS_SENTINELS",
        global = true,
        hide_env_values = true,
        conflicts_with_all = ["redis_url", "redis_cluster_nodes"],
        requires = "redis_master_name"
    )]
    pub redis_sentinels: Option<String>,

    /// The name the sentinels watch the primary under (their `sentinel monitor <name> ...` line), e.g. mymaster
    #[arg(long, env = "SECKILL_REDIS_MASTER_NAME", global = true)]
    pub redis_master_name: Option<String>,

    /// What a `202` waits for: `local`, the primary's own write (and its append-only file); `replica`, also `WAIT 1` for a replica to hold the writes, so that a failover cannot take the order back (unconfirmed in time: `503` with the order id)
    #[arg(
        long,
        env = "SECKILL_REDIS_DURABILITY",
        value_enum,
        default_value_t = Durability::Local,
        global = true
    )]
    pub redis_durability: Durability,

    /// With `--redis-durability replica`: how long a lock pass waits for a replica to confirm its writes, in milliseconds, 1 to 60000
    #[arg(long, env = "SECKILL_REDIS_REPLICA_WAIT_MS", default_value_t = DEFAULT_REPLICA_WAIT_MS, value_parser = clap::value_parser!(u64).range(REPLICA_WAIT_MS), global = true)]
    pub redis_replica_wait_ms: u64,

    /// With `--redis-durability replica`: how many replicas of the sale's primary must hold a purchase's writes before its `202` (`WAIT <n>`), 1 to 16. One survives the loss of the primary when the replica that has the writes is promoted; with n replicas and `WAIT n`, any promotion keeps them, but one replica down stops every purchase (see docs/operations.md)
    #[arg(long, env = "SECKILL_REDIS_WAIT_REPLICAS", default_value_t = DEFAULT_WAIT_REPLICAS, value_parser = clap::value_parser!(u32).range(wide(WAIT_REPLICAS)), global = true)]
    pub redis_wait_replicas: u32,

    /// PostgreSQL URL, e.g. postgres://postgres@127.0.0.1:5432/seckill [default: local or private server]
    #[arg(
        long,
        env = "SECKILL_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    pub database_url: Option<String>,

    /// Prefix of every Redis key, so several deployments (or tests) can share one Redis.
    #[arg(
        long,
        env = "SECKILL_REDIS_PREFIX",
        default_value = "seckill",
        global = true
    )]
    pub redis_prefix: String,
}

impl ServiceArgs {
    /// Where Redis is, if the user said: one server, a cluster, or a
    /// primary under Sentinel.
    pub fn redis(&self) -> anyhow::Result<Option<RedisAt>> {
        if let Some(sentinels) = &self.redis_sentinels {
            let master = self.redis_master_name.as_deref().unwrap_or_default();
            return RedisAt::sentinel(sentinels, master).map(Some);
        }
        match (&self.redis_url, &self.redis_cluster_nodes) {
            (_, Some(nodes)) => RedisAt::cluster(nodes).map(Some),
            (Some(url), None) => Ok(Some(RedisAt::Server(url.clone()))),
            (None, None) => Ok(None),
        }
    }

    /// The durability settings as the environment of a child process
    /// (the instances a tool starts answer as this one was told to).
    pub fn durability_env(&self) -> [(&'static str, String); 3] {
        let [durability, wait] = self.redis_durability.env(self.redis_replica_wait_ms);
        [
            durability,
            wait,
            (
                "SECKILL_REDIS_WAIT_REPLICAS",
                self.redis_wait_replicas.to_string(),
            ),
        ]
    }

    /// What a purchase's `202` waits for.
    pub fn durability(&self) -> RedisDurability {
        match self.redis_durability {
            Durability::Local => RedisDurability::Local,
            Durability::Replica => RedisDurability::Replica {
                wait: Duration::from_millis(self.redis_replica_wait_ms),
                replicas: self.redis_wait_replicas,
            },
        }
    }
}

/// The shared flags that say where Redis is and what its keys are called:
/// a command that uses PostgreSQL only (`migrate`) hides them
/// ([`tidy_help`](crate::help::tidy_help)).
pub const REDIS_FLAGS: &[&str] = &[
    "redis_url",
    "redis_cluster_nodes",
    "redis_sentinels",
    "redis_master_name",
    "redis_durability",
    "redis_replica_wait_ms",
    "redis_wait_replicas",
    "redis_prefix",
];

/// The shared flags that say what a purchase's `202` waits for: a command
/// that answers no purchase (`sale create`, `reset`) hides them.
pub const DURABILITY_FLAGS: &[&str] = &[
    "redis_durability",
    "redis_replica_wait_ms",
    "redis_wait_replicas",
];

/// The `--redis-durability` choices.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Durability {
    /// The primary's write is enough (today's behaviour; with the
    /// append-only file, it survives a restart of that server).
    Local,
    /// A replica must hold the writes too (`WAIT 1`): it survives a
    /// failover.
    Replica,
}

impl Durability {
    /// This setting, with the replica's wait in milliseconds, as the
    /// environment of a child process: the variables its flags read.
    pub fn env(self, replica_wait_ms: u64) -> [(&'static str, String); 2] {
        let name = self
            .to_possible_value()
            .expect("no choice is skipped")
            .get_name()
            .to_owned();
        [
            ("SECKILL_REDIS_DURABILITY", name),
            ("SECKILL_REDIS_REPLICA_WAIT_MS", replica_wait_ms.to_string()),
        ]
    }
}

/// A range of `u32` as clap's parser of `u32` takes it.
fn wide(range: std::ops::RangeInclusive<u32>) -> std::ops::RangeInclusive<i64> {
    i64::from(*range.start())..=i64::from(*range.end())
}

/// A `--strategy` value: one of [`Strategy::ALL`] by its name, each listed
/// in `--help` with what it is.
pub fn strategy() -> impl TypedValueParser<Value = Strategy> {
    PossibleValuesParser::new(
        Strategy::ALL
            .map(|strategy| PossibleValue::new(strategy.as_str()).help(strategy.describe())),
    )
    .map(|name| Strategy::from_name(&name).expect("only the strategies' names are possible"))
}

/// The purchase path's flags (`seckill_core::config::PurchaseSettings`).
#[derive(Debug, Clone, Args)]
pub struct PurchaseFlags {
    /// Purchase strategy: `lock`, `lua` and `postgres` are safe; `naive`, `article`, `getset` and `decr` are deliberately broken, for the demo and the lab.
    #[arg(long, env = "SECKILL_STRATEGY", value_parser = strategy(), default_value = "lock")]
    pub strategy: Strategy,

    /// Lifetime of the sale lock in milliseconds, 1 to 600000: how long a crashed holder can block others.
    #[arg(long, env = "SECKILL_LOCK_TTL_MS", default_value_t = PurchaseSettings::default().lock_ttl_ms, value_parser = clap::value_parser!(u64).range(PurchaseSettings::LOCK_TTL_MS))]
    pub lock_ttl_ms: u64,

    /// How long a purchase waits for the sale lock before answering 503 busy, in milliseconds, 0 to 60000.
    #[arg(long, env = "SECKILL_LOCK_WAIT_MS", default_value_t = PurchaseSettings::default().lock_wait_ms, value_parser = clap::value_parser!(u64).range(PurchaseSettings::LOCK_WAIT_MS))]
    pub lock_wait_ms: u64,

    /// How long an instance trusts its own "sold out" flag before asking Redis again, in milliseconds, 0 to 60000.
    #[arg(long, env = "SECKILL_SOLD_OUT_REFRESH_MS", default_value_t = PurchaseSettings::default().sold_out_refresh_ms, value_parser = clap::value_parser!(u64).range(PurchaseSettings::SOLD_OUT_REFRESH_MS))]
    pub sold_out_refresh_ms: u64,

    /// The `naive` strategy's pause between reading and writing the stock, in milliseconds, 0 to 10000 (widens the race).
    #[arg(long, env = "SECKILL_NAIVE_DELAY_MS", default_value_t = DEFAULT_NAIVE_DELAY_MS, value_parser = clap::value_parser!(u64).range(PurchaseSettings::NAIVE_DELAY_MS))]
    pub naive_delay_ms: u64,

    /// Fault knob, for workshops: pause the lock holder inside its critical section (after the checks, before the writes) for this many milliseconds, 0 to 60000: the GC pause of the fencing argument. Past the lock's TTL, `lock` refuses the write (503 lock_lost) and `getset` oversells; `decr` pauses between taking the unit and recording the buyer (one buyer wins twice); `article` pauses between SETNX and EXPIRE too (others take its lock: it oversells).
    #[arg(long, env = "SECKILL_HOLD_PAUSE_MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(PurchaseSettings::HOLD_PAUSE_MS))]
    pub hold_pause_ms: u64,

    /// Fault knob, for workshops: wait this many milliseconds before each Redis command of the hand-written locks (`article`, `getset`), 0 to 10000 (a slow network). The gap between SETNX and EXPIRE widens, and `article` may let others take a live holder's lock.
    #[arg(long, env = "SECKILL_REDIS_DELAY_MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(PurchaseSettings::REDIS_DELAY_MS))]
    pub redis_delay_ms: u64,

    /// Fault knob, for workshops: this instance's clock is this many milliseconds ahead (negative: behind), -3600000 to 3600000. `getset` judges lock expiry by it, and takes live locks: it oversells.
    #[arg(long, env = "SECKILL_CLOCK_SKEW_MS", default_value_t = 0, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(PurchaseSettings::CLOCK_SKEW_MS))]
    pub clock_skew_ms: i64,

    /// Fault knob, for workshops: under `article`, kill the process (SIGKILL) between SETNX and EXPIRE (a crash at the worst moment): the lock is left without a TTL.
    #[arg(long, env = "SECKILL_CRASH_AFTER_SETNX")]
    pub crash_after_setnx: bool,

    /// Seconds after a sale's end before an instance forgets what it keeps in memory of it (its copy of the sale, lane, sold-out flag, answer counts), 1 to 86400: the requests still on their way finish first.
    #[arg(long, env = "SECKILL_FORGET_ENDED_AFTER_SECS", default_value_t = DEFAULT_FORGET_ENDED_AFTER_SECS, value_parser = clap::value_parser!(u64).range(PurchaseSettings::FORGET_ENDED_AFTER_SECS))]
    pub forget_ended_after_secs: u64,
}

impl PurchaseFlags {
    /// The settings these flags give.
    pub fn settings(&self) -> PurchaseSettings {
        PurchaseSettings {
            strategy: self.strategy,
            lock_ttl_ms: self.lock_ttl_ms,
            lock_wait_ms: self.lock_wait_ms,
            sold_out_refresh_ms: self.sold_out_refresh_ms,
            naive_delay_ms: self.naive_delay_ms,
            hold_pause_ms: self.hold_pause_ms,
            redis_delay_ms: self.redis_delay_ms,
            clock_skew_ms: self.clock_skew_ms,
            crash_after_setnx: self.crash_after_setnx,
            forget_ended_after_secs: self.forget_ended_after_secs,
        }
    }
}

/// The queue worker's flags (`seckill_core::config::WorkerSettings`).
#[derive(Debug, Clone, Args)]
pub struct WorkerFlags {
    /// Orders reserved and written to PostgreSQL in one transaction, 1 to 10000.
    #[arg(long, env = "SECKILL_BATCH_SIZE", default_value_t = WorkerSettings::default().batch_size, value_parser = clap::value_parser!(u32).range(wide(WorkerSettings::BATCH_SIZE)))]
    pub batch_size: u32,

    /// How long a reserved job belongs to its worker before it is delivered again, in milliseconds, 100 to 3600000.
    #[arg(long, env = "SECKILL_LEASE_MS", default_value_t = WorkerSettings::default().lease_ms, value_parser = clap::value_parser!(u64).range(WorkerSettings::LEASE_MS))]
    pub lease_ms: u64,

    /// Deliveries of one job before it is moved to the dead-letter set, 1 to 1000.
    #[arg(long, env = "SECKILL_MAX_ATTEMPTS", default_value_t = WorkerSettings::default().max_attempts, value_parser = clap::value_parser!(u32).range(wide(WorkerSettings::MAX_ATTEMPTS)))]
    pub max_attempts: u32,

    /// Pause between polls of an empty queue, in milliseconds, 1 to 60000 (an idle worker is also woken by every purchase).
    #[arg(long, env = "SECKILL_POLL_MS", default_value_t = WorkerSettings::default().poll_ms, value_parser = clap::value_parser!(u64).range(WorkerSettings::POLL_MS))]
    pub poll_ms: u64,

    /// Seconds a confirmed order has to be paid before it is cancelled and its unit goes back on sale, 1 to 31536000.
    #[arg(long, env = "SECKILL_PAYMENT_WINDOW_SECS", default_value_t = WorkerSettings::default().payment_window_secs, value_parser = clap::value_parser!(u64).range(WorkerSettings::PAYMENT_WINDOW_SECS))]
    pub payment_window_secs: u64,
}

impl WorkerFlags {
    /// The settings these flags give.
    pub fn settings(&self) -> WorkerSettings {
        WorkerSettings {
            batch_size: self.batch_size,
            lease_ms: self.lease_ms,
            max_attempts: self.max_attempts,
            poll_ms: self.poll_ms,
            payment_window_secs: self.payment_window_secs,
        }
    }
}

/// The rate limits' flags (`seckill_core::config::RateLimitSettings`).
/// The purchase limits are off unless set: the load test and the demo
/// send thousands of buyers from one address. The join limit is on unless
/// turned off (`--room-joins-per-ip 0`): the tools that send a crowd from
/// one address say so.
#[derive(Debug, Clone, Args)]
pub struct LimitFlags {
    /// Purchases per second from one client IP on one sale, and admin logins from one IP, 0 to 100000; 0 turns the limit off.
    #[arg(long, env = "SECKILL_RATE_LIMIT_PER_IP", default_value_t = 0, value_parser = clap::value_parser!(u32).range(wide(RateLimitSettings::PER_SECOND)))]
    pub rate_limit_per_ip: u32,

    /// Purchases per second by one buyer id on one sale, 0 to 100000; 0 turns the limit off.
    #[arg(long, env = "SECKILL_RATE_LIMIT_PER_BUYER", default_value_t = 0, value_parser = clap::value_parser!(u32).range(wide(RateLimitSettings::PER_SECOND)))]
    pub rate_limit_per_buyer: u32,

    /// Waiting-room joins per second from one client IP on one sale, 0 to 100000; 0 turns the limit off (the demo, the crowd and the load test do: their buyers share one address).
    #[arg(long, env = "SECKILL_ROOM_JOINS_PER_IP", default_value_t = RateLimitSettings::default().room_joins_per_ip, value_parser = clap::value_parser!(u32).range(wide(RateLimitSettings::PER_SECOND)))]
    pub room_joins_per_ip: u32,

    /// Requests a client may send at once beyond its steady rate, 0 to 10000.
    #[arg(long, env = "SECKILL_RATE_LIMIT_BURST", default_value_t = RateLimitSettings::default().rate_limit_burst, value_parser = clap::value_parser!(u32).range(wide(RateLimitSettings::BURST)))]
    pub rate_limit_burst: u32,

    /// Proxies whose X-Forwarded-For header is believed, as comma-separated IP addresses and CIDR ranges, e.g. 127.0.0.1,10.0.0.0/8; the client IP of the per-IP limit and the admin lock-out is then the right-most address in that header that is not one of them [default: none, the TCP peer is the client]
    #[arg(long, env = "SECKILL_TRUSTED_PROXIES", default_value = "", hide_default_value = true, value_parser = TrustedProxies::parse)]
    pub trusted_proxies: TrustedProxies,
}

impl LimitFlags {
    /// The settings these flags give.
    pub fn settings(&self) -> RateLimitSettings {
        RateLimitSettings {
            rate_limit_per_ip: self.rate_limit_per_ip,
            rate_limit_per_buyer: self.rate_limit_per_buyer,
            rate_limit_burst: self.rate_limit_burst,
            room_joins_per_ip: self.room_joins_per_ip,
            trusted_proxies: self.trusted_proxies.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Command {
        #[command(flatten)]
        purchase: PurchaseFlags,
        #[command(flatten)]
        worker: WorkerFlags,
        #[command(flatten)]
        limits: LimitFlags,
    }

    #[test]
    fn every_strategy_is_a_choice_by_its_name() {
        for strategy in Strategy::ALL {
            let parsed = Command::try_parse_from(["seckill", "--strategy", strategy.as_str()])
                .expect("every strategy's name parses");
            assert_eq!(parsed.purchase.strategy, strategy);
        }
        assert!(Command::try_parse_from(["seckill", "--strategy", "none"]).is_err());
    }

    /// No flags give the core's defaults: the two places a default could
    /// be written agree.
    #[test]
    fn no_flags_give_the_settings_defaults() {
        let parsed = Command::try_parse_from(["seckill"]).expect("no flags parse");
        assert_eq!(
            format!("{:?}", parsed.purchase.settings()),
            format!("{:?}", PurchaseSettings::default())
        );
        assert_eq!(
            format!("{:?}", parsed.worker.settings()),
            format!("{:?}", WorkerSettings::default())
        );
        assert_eq!(
            format!("{:?}", parsed.limits.settings()),
            format!("{:?}", RateLimitSettings::default())
        );
    }

    /// A value out of the core's range is refused by the flag too.
    #[test]
    fn a_flag_outside_its_range_is_refused() {
        assert!(Command::try_parse_from(["seckill", "--lock-ttl-ms", "0"]).is_err());
        assert!(Command::try_parse_from(["seckill", "--batch-size", "10001"]).is_err());
    }
}
