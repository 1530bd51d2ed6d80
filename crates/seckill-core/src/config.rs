//! The knobs: where the servers are, and how the purchase path and the
//! worker behave.
//!
//! Plain data at the bottom of the layers: the purchase path and the worker
//! read their settings from here, and the command lines (`cli.rs`) put them
//! together. Every flag can also be set through the environment variable
//! named in its `--help` line (flags win over the environment). The doc
//! comment on each field is what `seckill --help` prints, so it is written
//! for the user.

use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::redis_pool::RedisAt;

/// Where Redis and PostgreSQL are. With neither URL set, seckill uses the
/// servers on their default local ports when they answer and otherwise
/// starts private ones from the installed binaries.
#[derive(Debug, Clone, Args)]
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
    #[arg(long, env = "SECKILL_REDIS_REPLICA_WAIT_MS", default_value_t = DEFAULT_REPLICA_WAIT_MS, value_parser = clap::value_parser!(u64).range(1..=60_000), global = true)]
    pub redis_replica_wait_ms: u64,

    /// With `--redis-durability replica`: how many replicas of the sale's primary must hold a purchase's writes before its `202` (`WAIT <n>`), 1 to 16. One survives the loss of the primary when the replica that has the writes is promoted; with n replicas and `WAIT n`, any promotion keeps them, but one replica down stops every purchase (see docs/operations.md)
    #[arg(long, env = "SECKILL_REDIS_WAIT_REPLICAS", default_value_t = DEFAULT_WAIT_REPLICAS, value_parser = clap::value_parser!(u32).range(1..=16), global = true)]
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

pub const DEFAULT_REPLICA_WAIT_MS: u64 = 250;
/// `--redis-wait-replicas`: one replica's acknowledgement makes a `202`.
pub const DEFAULT_WAIT_REPLICAS: u32 = 1;

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

/// How a purchase decides who gets a unit (one file each in `src/strategy/`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    /// The safe path: the sale's Redis lock around check-and-decrement, writes fenced.
    Lock,
    /// DELIBERATELY BROKEN: read stock, pause, write stock minus one, no lock. It oversells; it exists to show why the lock matters.
    Naive,
    /// DELIBERATELY BROKEN: the article's RedisLock as written (SETNX then EXPIRE with a timestamp, the TTL<0 takeover, isLocking that assigns, unlock without owner check).
    Article,
    /// DELIBERATELY BROKEN: the GETSET takeover lock (value = expiry time): clock skew and long pauses let two holders in.
    Getset,
    /// No lock: the whole purchase in one Redis script. Correct, and the fastest.
    Lua,
    /// No Redis on the decision: one conditional UPDATE and the order insert in one PostgreSQL transaction.
    Postgres,
    /// DELIBERATELY BROKEN: DECR, then INCR back below zero (cache then compensate): a buyer's two requests can both win.
    Decr,
}

impl Strategy {
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
}

/// Event streams one instance serves at once, by default.
pub const DEFAULT_MAX_EVENT_STREAMS: u32 = 10_000;

/// Seconds a buyer in a waiting room's line may go without asking before
/// the room takes them for gone, by default (the sale page asks every
/// second or two).
pub const DEFAULT_ROOM_ABANDON_SECS: u64 = 30;

pub(crate) const DEFAULT_LOCK_TTL_MS: u64 = 2_000;
pub(crate) const DEFAULT_LOCK_WAIT_MS: u64 = 2_000;
pub(crate) const DEFAULT_SOLD_OUT_REFRESH_MS: u64 = 250;
pub const DEFAULT_NAIVE_DELAY_MS: u64 = 5;

/// Knobs of the purchase path.
#[derive(Debug, Clone, Args)]
pub struct PurchaseSettings {
    /// Purchase strategy: `lock` (the default), `lua` and `postgres` are safe; `naive`, `article`, `getset` and `decr` are deliberately broken, for the demo and the lab.
    #[arg(long, env = "SECKILL_STRATEGY", value_enum, default_value_t = Strategy::Lock)]
    pub strategy: Strategy,

    /// Lifetime of the sale lock in milliseconds, 1 to 600000: how long a crashed holder can block others.
    #[arg(long, env = "SECKILL_LOCK_TTL_MS", default_value_t = DEFAULT_LOCK_TTL_MS, value_parser = clap::value_parser!(u64).range(1..=600_000))]
    pub lock_ttl_ms: u64,

    /// How long a purchase waits for the sale lock before answering 503 busy, in milliseconds, 0 to 60000.
    #[arg(long, env = "SECKILL_LOCK_WAIT_MS", default_value_t = DEFAULT_LOCK_WAIT_MS, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub lock_wait_ms: u64,

    /// How long an instance trusts its own "sold out" flag before asking Redis again, in milliseconds, 0 to 60000.
    #[arg(long, env = "SECKILL_SOLD_OUT_REFRESH_MS", default_value_t = DEFAULT_SOLD_OUT_REFRESH_MS, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub sold_out_refresh_ms: u64,

    /// The `naive` strategy's pause between reading and writing the stock, in milliseconds, 0 to 10000 (widens the race).
    #[arg(long, env = "SECKILL_NAIVE_DELAY_MS", default_value_t = DEFAULT_NAIVE_DELAY_MS, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub naive_delay_ms: u64,

    /// Fault knob, for workshops: pause the lock holder inside its critical section (after the checks, before the writes) for this many milliseconds, 0 to 60000: the GC pause of the fencing argument. Past the lock's TTL, `lock` refuses the write (503 lock_lost) and `getset` oversells; `decr` pauses between taking the unit and recording the buyer (one buyer wins twice); `article` pauses between SETNX and EXPIRE too (others take its lock: it oversells).
    #[arg(long, env = "SECKILL_HOLD_PAUSE_MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=60_000))]
    pub hold_pause_ms: u64,

    /// Fault knob, for workshops: wait this many milliseconds before each Redis command of the hand-written locks (`article`, `getset`), 0 to 10000 (a slow network). The gap between SETNX and EXPIRE widens, and `article` may let others take a live holder's lock.
    #[arg(long, env = "SECKILL_REDIS_DELAY_MS", default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=10_000))]
    pub redis_delay_ms: u64,

    /// Fault knob, for workshops: this instance's clock is this many milliseconds ahead (negative: behind), -3600000 to 3600000. `getset` judges lock expiry by it, and takes live locks: it oversells.
    #[arg(long, env = "SECKILL_CLOCK_SKEW_MS", default_value_t = 0, allow_hyphen_values = true, value_parser = clap::value_parser!(i64).range(-3_600_000..=3_600_000))]
    pub clock_skew_ms: i64,

    /// Fault knob, for workshops: under `article`, kill the process (SIGKILL) between SETNX and EXPIRE (a crash at the worst moment): the lock is left without a TTL.
    #[arg(long, env = "SECKILL_CRASH_AFTER_SETNX")]
    pub crash_after_setnx: bool,

    /// Seconds after a sale's end before an instance forgets what it keeps in memory of it (its copy of the sale, lane, sold-out flag, answer counts), 1 to 86400: the requests still on their way finish first.
    #[arg(long, env = "SECKILL_FORGET_ENDED_AFTER_SECS", default_value_t = DEFAULT_FORGET_ENDED_AFTER_SECS, value_parser = clap::value_parser!(u64).range(1..=86_400))]
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

pub(crate) const DEFAULT_BATCH_SIZE: u32 = 1000;
pub(crate) const DEFAULT_LEASE_MS: u64 = 30_000;
pub(crate) const DEFAULT_MAX_ATTEMPTS: u32 = 5;
pub(crate) const DEFAULT_POLL_MS: u64 = 500;
pub(crate) const DEFAULT_PAYMENT_WINDOW_SECS: u64 = 900;

/// Knobs of the queue worker.
#[derive(Debug, Clone, Args)]
pub struct WorkerSettings {
    /// Jobs reserved and written to PostgreSQL in one transaction, 1 to 10000.
    #[arg(long, env = "SECKILL_BATCH_SIZE", default_value_t = DEFAULT_BATCH_SIZE, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub batch_size: u32,

    /// How long a reserved job belongs to its worker before it is delivered again, in milliseconds, 100 to 3600000.
    #[arg(long, env = "SECKILL_LEASE_MS", default_value_t = DEFAULT_LEASE_MS, value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub lease_ms: u64,

    /// Deliveries of one job before it is moved to the dead-letter set, 1 to 1000.
    #[arg(long, env = "SECKILL_MAX_ATTEMPTS", default_value_t = DEFAULT_MAX_ATTEMPTS, value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub max_attempts: u32,

    /// Pause between polls of an empty queue, in milliseconds, 1 to 60000 (an idle worker is also woken by every purchase).
    #[arg(long, env = "SECKILL_POLL_MS", default_value_t = DEFAULT_POLL_MS, value_parser = clap::value_parser!(u64).range(1..=60_000))]
    pub poll_ms: u64,

    /// Seconds a confirmed order has to be paid before it is cancelled and its unit goes back on sale, 1 to 31536000.
    #[arg(long, env = "SECKILL_PAYMENT_WINDOW_SECS", default_value_t = DEFAULT_PAYMENT_WINDOW_SECS, value_parser = clap::value_parser!(u64).range(1..=31_536_000))]
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

/// Rate limits per client, across every instance (checked in Redis), and
/// who the client is. The limits are off unless set: the load test and the
/// demo send thousands of buyers from one address.
#[derive(Debug, Clone, Args)]
pub struct RateLimitSettings {
    /// Purchases and admin logins per second from one client IP, 0 to 100000; 0 turns the limit off.
    #[arg(long, env = "SECKILL_RATE_LIMIT_PER_IP", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub rate_limit_per_ip: u32,

    /// Purchases per second by one buyer id, 0 to 100000; 0 turns the limit off.
    #[arg(long, env = "SECKILL_RATE_LIMIT_PER_BUYER", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=100_000))]
    pub rate_limit_per_buyer: u32,

    /// Requests a client may send at once beyond its steady rate, 0 to 10000.
    #[arg(long, env = "SECKILL_RATE_LIMIT_BURST", default_value_t = 10, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub rate_limit_burst: u32,

    /// Proxies whose X-Forwarded-For header is believed, as comma-separated IP addresses and CIDR ranges, e.g. 127.0.0.1,10.0.0.0/8; the client IP of the per-IP limit and the admin lock-out is then the right-most address in that header that is not one of them [default: none, the TCP peer is the client]
    #[arg(long, env = "SECKILL_TRUSTED_PROXIES", default_value = "", hide_default_value = true, value_parser = TrustedProxies::parse)]
    pub trusted_proxies: TrustedProxies,
}

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            rate_limit_per_ip: 0,
            rate_limit_per_buyer: 0,
            rate_limit_burst: 10,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// The proxies whose `X-Forwarded-For` is believed: addresses and CIDR
/// ranges (an address is a range of one). Anyone can send the header, so
/// it says who the client is only when a proxy we run added to it; the
/// web crate's `client_ip.rs` reads it. Empty by default: nobody's header
/// is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// A comma-separated list of IP addresses and CIDR ranges
    /// (`127.0.0.1,10.0.0.0/8,::1`); spaces around an item and empty items
    /// are ignored. Anything else is refused, naming the item, so that a
    /// typo stops the start instead of trusting nobody (or everybody).
    pub fn parse(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<ipnet::IpNet>()
                    .or_else(|_| {
                        item.parse::<std::net::IpAddr>()
                            .map(|address| address.to_canonical().into())
                    })
                    .map_err(|_| {
                        format!(
                            "`{item}` is not an IP address or a CIDR range (such as 10.0.0.0/8)"
                        )
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `address` is one of the trusted proxies. An IPv4 address
    /// seen as IPv6 (`::ffff:10.0.0.1`, on a dual-stack socket) is taken as
    /// the IPv4 address it is.
    pub fn contains(&self, address: std::net::IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|range| range.contains(&address))
    }
}

/// A steady rate and a burst, for one kind of client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second at the steady rate.
    pub(crate) per_second: u32,
    /// Requests allowed at once beyond the steady rate.
    pub(crate) burst: u32,
}

impl RateLimitSettings {
    /// The limit per client IP, if one is set.
    pub fn per_ip(&self) -> Option<RateLimit> {
        self.limit(self.rate_limit_per_ip)
    }

    /// The limit per buyer id, if one is set.
    pub fn per_buyer(&self) -> Option<RateLimit> {
        self.limit(self.rate_limit_per_buyer)
    }

    fn limit(&self, per_second: u32) -> Option<RateLimit> {
        (per_second > 0).then_some(RateLimit {
            per_second,
            burst: self.rate_limit_burst,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_strategy_is_named_as_on_the_command_line() {
        for strategy in Strategy::ALL {
            let flag = strategy.to_possible_value().expect("not skipped");
            assert_eq!(strategy.as_str(), flag.get_name());
        }
        assert_eq!(Strategy::ALL.len(), Strategy::value_variants().len());
    }
}
