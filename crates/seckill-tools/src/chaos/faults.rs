//! Each fault, injected into a running deployment, and the window of time
//! it covered.
//!
//! A fault returns once the deployment is whole again (the killed process
//! restarted, the server back up), so that the next fault starts from a
//! healthy deployment and the window says exactly when things were broken.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use anyhow::Context;
use nix::sys::signal::Signal;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{Rig, RigRedis};
use crate::chaos::Fault;
use seckill_core::lock;
use seckill_core::redis_pool::RedisConn;
use seckill_devenv::services::{PrivateRedis, cut_replicas_off};

/// How long the lock-holder pause keeps trying to catch app-2 holding the
/// lock before its commit.
const PAUSE_LIMIT: Duration = Duration::from_secs(6);
/// How long the lock-holder pause waits, after resuming app-2, for the
/// fence to refuse its commit before it tries again.
const RESUMED_WITHIN: Duration = Duration::from_secs(1);
/// How long a stopped process's last requests take to reach Redis and run.
const SETTLE: Duration = Duration::from_millis(10);
/// How long the failover's primary takes orders its replica never gets.
pub(super) const CUT_OFF: Duration = Duration::from_millis(500);

/// When a fault was in force.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct FaultWindow {
    pub(crate) fault: Fault,
    /// From the start of the chaos run.
    #[serde(serialize_with = "as_millis")]
    pub(crate) start: Duration,
    #[serde(serialize_with = "as_millis")]
    pub(crate) end: Duration,
    /// What happened, in words ("killed 3 workers, 2 mid-batch").
    pub(crate) note: String,
}

fn as_millis<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Job ids on the queue when Redis was wiped: an order's own, or its
/// pass's (`domain::carriers`).
#[derive(Debug, Default, Clone)]
pub(crate) struct Wiped {
    /// Waiting: lost with the wipe, every one.
    pub(crate) waiting: HashSet<String>,
    /// Held by a worker: written if the worker commits before the sale is
    /// loaded again, lost otherwise (PostgreSQL refuses a batch reserved
    /// before a load).
    pub(crate) in_flight: HashSet<String>,
}

impl Wiped {
    pub(crate) fn extend(&mut self, other: Wiped) {
        self.waiting.extend(other.waiting);
        self.in_flight.extend(other.in_flight);
    }
}

/// How long `redis-stall` keeps Redis stopped: past a response timeout
/// and the pool's create timeout (`redis_pool/timeouts.rs`), so that
/// buyers are answered `503` while it is stopped; a purchase whose answer
/// was lost looks for its order until it goes on.
pub(crate) const REDIS_STALL: Duration = Duration::from_secs(3);

impl Rig {
    /// Inject `fault`; return its window and, for the wipe, the order ids
    /// that were waiting on the queue when Redis lost them.
    pub(crate) async fn inject(
        &mut self,
        fault: Fault,
        epoch: Instant,
    ) -> anyhow::Result<(FaultWindow, Wiped)> {
        eprintln!("chaos: {} ...", fault.as_str());
        let mut start = epoch.elapsed();
        // Where the fault's own moments are not the call's (below).
        let mut ends = None;
        let mut wiped = Wiped::default();
        let note = match fault {
            Fault::WorkerKill => self.kill_workers().await?,
            Fault::AppKill => {
                self.cluster.restart_app("app-1", &["--no-worker"]).await?;
                "app-1 killed with SIGKILL and restarted on its address".to_owned()
            }
            Fault::LockHolderPause => self.pause_a_lock_holder().await?,
            Fault::PostgresDown => {
                tokio::task::block_in_place(|| self.postgres.stop());
                tokio::time::sleep(self.postgres_down).await;
                self.postgres.restart().await?;
                format!("PostgreSQL down for {:?}", self.postgres_down)
            }
            Fault::RedisKill => {
                let redis = self.one_redis()?;
                tokio::task::block_in_place(|| redis.kill());
                redis.restart().await?;
                "Redis killed with SIGKILL, restarted from its append-only file".to_owned()
            }
            Fault::RedisWipe => {
                wiped = self.wipe_redis().await?;
                format!(
                    "Redis restarted empty; {} jobs waiting on the queue went with it, and {} held by workers may have",
                    wiped.waiting.len(),
                    wiped.in_flight.len()
                )
            }
            Fault::RedisStall => {
                let redis = self.one_redis()?;
                redis.pause();
                tokio::time::sleep(REDIS_STALL).await;
                redis.resume();
                format!("Redis stopped (SIGSTOP) for {REDIS_STALL:?}, then resumed")
            }
            Fault::Flood => self.flood(Duration::from_secs(2)).await?,
            Fault::RedisFailover => {
                let (note, cut) = self.fail_over(epoch).await?;
                start = cut;
                note
            }
            Fault::ClusterFailover => self.fail_the_sale_over().await?,
            Fault::OtherShardStall => self.stall_another_shard().await?,
            Fault::ConnectionDrops => {
                let (note, stopped, resumed) = self.drop_connections(epoch).await?;
                (start, ends) = (stopped, Some(resumed));
                note
            }
            Fault::SaleShardStall => self.stall_the_sale_shard().await?,
        };
        let end = ends.unwrap_or_else(|| epoch.elapsed());
        eprintln!("chaos: {} done: {note}", fault.as_str());
        let window = FaultWindow {
            fault,
            start,
            end,
            note,
        };
        Ok((window, wiped))
    }

    /// Kill a worker with SIGKILL three times, each time while it holds a
    /// batch if one comes within a second, and start a fresh one.
    async fn kill_workers(&mut self) -> anyhow::Result<String> {
        let mut mid_batch = 0;
        for _ in 0..3 {
            let deadline = Instant::now() + Duration::from_secs(1);
            while Instant::now() < deadline {
                if self.in_flight().await? > 0 {
                    mid_batch += 1;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            self.cluster.kill("worker-a").await?;
            self.cluster.start_worker("worker-a", &[]).await?;
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        Ok(format!("killed a worker 3 times ({mid_batch} mid-batch)"))
    }

    /// Stop app-2 (SIGSTOP) at a moment it holds the sale's lock, keep it
    /// stopped until its lock has run out, then resume it (SIGCONT). The
    /// purchase that held the lock goes on to its commit with a lock that
    /// ran out, and the fence must refuse it: the sale's fenced counter
    /// grows. A holder may still be caught after its commit left (its pass
    /// is done), and the sale may be sold out for a while (nobody takes the
    /// lock); so the pause is tried again until the fence fires or
    /// [`PAUSE_LIMIT`] has passed.
    ///
    /// Refusals are app-2's own (its `/metrics`), counted from the fault's
    /// start, with a last look at its end: a resumed process slower than
    /// [`RESUMED_WITHIN`] to commit still has its refusal counted. Not the
    /// sale's counter: with a short lock, a pass on app-1 slowed past it
    /// would count there too.
    ///
    /// A catch can also fall before the holder has read Redis' reply that
    /// gave it the lock; on a machine short of CPU, most catches do. The
    /// redis crate gives up on a reply 500 ms after its request, and a
    /// holder resumed later than that answers its buyer `503` and writes
    /// nothing: safe, but there is then nothing for the fence to refuse.
    /// (With a fixed pause of 2 lock TTLs, 1 s, three chaos runs in four
    /// beside four busy loops ended with no refusal.) So the holder is
    /// resumed as soon as its lock is gone, and the chaos lock TTL
    /// ([`super::LOCK_TTL`]) is half that reply timeout: resumed, the
    /// holder still takes its reply, goes on, and is fenced.
    async fn pause_a_lock_holder(&mut self) -> anyhow::Result<String> {
        let deadline = Instant::now() + PAUSE_LIMIT;
        let before = self.fenced_on("app-2").await?;
        let mut caught = 0;
        while Instant::now() < deadline {
            let Some(value) = self.stop_while_holding("app-2", deadline).await? else {
                break;
            };
            caught += 1;
            let paused = Instant::now();
            let ran_out = self.until_the_lock_is_not(&value).await;
            let pause = paused.elapsed();
            // Resumed whatever the wait's outcome: never left stopped.
            self.cluster.signal("app-2", Signal::SIGCONT)?;
            ran_out?;
            let fence = lock::fence_in(&value).unwrap_or_default();
            // The resumed purchase commits as soon as it runs again.
            let refused = self.refused_since(before).await?;
            if refused > 0 {
                self.fence_refusals = Some(refused);
                return Ok(format!(
                    "app-2 stopped while holding the lock (fence {fence}) for {} ms, until it ran out, then resumed: the fence refused {refused} write(s)",
                    pause.as_millis()
                ));
            }
        }
        // A last look, for a refusal later than its try's wait.
        let refused = self.refused_since(before).await?;
        self.fence_refusals = Some(refused);
        Ok(format!(
            "app-2 caught holding the lock {caught} time(s) in {PAUSE_LIMIT:?}; the fence refused {refused} write(s)"
        ))
    }

    /// app-2's commits the fence refused since its counter read `before`,
    /// waiting up to [`RESUMED_WITHIN`] for the first.
    async fn refused_since(&self, before: u64) -> anyhow::Result<u64> {
        let waited = Instant::now() + RESUMED_WITHIN;
        loop {
            let refused = self.fenced_on("app-2").await?.saturating_sub(before);
            if refused > 0 || Instant::now() >= waited {
                return Ok(refused);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Stop `name` (SIGSTOP) at a moment it holds the sale's lock with
    /// units left to sell: watch the lock until it names `name`, stop it, let Redis run whatever it
    /// had sent, and look again; still its lock (the same value), it is
    /// caught before its commit. Returns the value of the lock it holds,
    /// stopped; `None` (and `name` running) if `deadline` passed first.
    async fn stop_while_holding(
        &mut self,
        name: &str,
        deadline: Instant,
    ) -> anyhow::Result<Option<String>> {
        let mut conn = self.store.redis().await?;
        while Instant::now() < deadline {
            // A holder of a sold-out sale has nothing to write: wait for
            // units on sale (the payment window gives unpaid ones back).
            let (value, left): (Option<String>, Option<i64>) = redis::pipe()
                .get(&self.keys.lock)
                .get(&self.keys.stock)
                .query_async(&mut conn)
                .await
                .context("reading the sale's lock and stock")?;
            let Some(value) = value.filter(|value| {
                lock::holder_in(value) == Some(name) && left.is_some_and(|left| left > 0)
            }) else {
                tokio::time::sleep(Duration::from_millis(1)).await;
                continue;
            };
            self.cluster.signal(name, Signal::SIGSTOP)?;
            // A commit already on its way would otherwise run after this
            // look, and the holder caught here would have written.
            tokio::time::sleep(SETTLE).await;
            if self.lock_value(&mut conn).await?.as_deref() == Some(value.as_str()) {
                return Ok(Some(value));
            }
            self.cluster.signal(name, Signal::SIGCONT)?;
        }
        Ok(None)
    }

    /// Wait until the sale's lock no longer holds `value`: it ran out (or,
    /// for a lock somebody deleted, is gone). At most 2 lock TTLs, a lock's
    /// TTL being one: a look that came back late (this process short of
    /// CPU, Redis slow) may have seen it still there.
    async fn until_the_lock_is_not(&self, value: &str) -> anyhow::Result<()> {
        let mut conn = self.store.redis().await?;
        let at_most = Instant::now() + self.lock_ttl * 2;
        while Instant::now() < at_most
            && self.lock_value(&mut conn).await?.as_deref() == Some(value)
        {
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        Ok(())
    }

    /// What the sale's lock key holds, if anyone holds it.
    async fn lock_value(&self, conn: &mut RedisConn) -> anyhow::Result<Option<String>> {
        redis::cmd("GET")
            .arg(&self.keys.lock)
            .query_async(conn)
            .await
            .context("reading the sale's lock")
    }

    /// Commits of app instance `name` the fence has refused, so far: its
    /// `seckill_lock_fenced_total`, read from its `/metrics`.
    async fn fenced_on(&self, name: &str) -> anyhow::Result<u64> {
        const COUNTER: &str = "seckill_lock_fenced_total ";
        let url = self.cluster.url(name)?;
        let address = url.trim_start_matches("http://");
        let answer = exchange(
            address,
            b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await
        .with_context(|| format!("reading {name}'s /metrics"))?;
        String::from_utf8_lossy(&answer)
            .lines()
            .find_map(|line| line.strip_prefix(COUNTER)?.trim().parse().ok())
            .with_context(|| format!("{name}'s /metrics has no {COUNTER}"))
    }

    /// Jobs of the sale's order queue that a worker holds right now.
    async fn in_flight(&self) -> anyhow::Result<u64> {
        let mut conn = self.store.redis().await?;
        redis::cmd("ZCARD")
            .arg(&self.keys.queue.inflight)
            .query_async(&mut conn)
            .await
            .context("counting jobs in flight")
    }

    /// The one Redis server of a run without a replica.
    fn one_redis(&mut self) -> anyhow::Result<&mut PrivateRedis> {
        match &mut self.redis {
            RigRedis::One(redis) => Ok(redis),
            RigRedis::Replicated(_) | RigRedis::Cluster(_) => {
                anyhow::bail!("this fault needs one Redis, not a replicated one")
            }
        }
    }

    /// The failover of a replicated Redis, while orders flow. The replica
    /// is frozen (SIGSTOP) and its link cut (`CLIENT KILL TYPE replica` on
    /// the primary), so that it falls [`CUT_OFF`] behind and cannot catch
    /// up; then the primary is killed (SIGKILL), the replica goes on, the
    /// sentinels promote it, and the old primary comes back from its
    /// append-only file as the new primary's replica. What the primary
    /// took during the cut is what a failover takes back: with
    /// `--redis-durability replica` no buyer was told `202` for it (no
    /// replica confirmed it), with `local` they were. Returns the note,
    /// and the moment the replica was frozen (the window's start).
    async fn fail_over(&mut self, epoch: Instant) -> anyhow::Result<(String, Duration)> {
        let RigRedis::Replicated(sentinels) = &mut self.redis else {
            anyhow::bail!("redis-failover needs a primary and a replica");
        };
        let primary = sentinels.primary().await?;
        let replica = 1 - primary;
        sentinels.pause(replica);
        let frozen = epoch.elapsed();
        let cut = cut_replicas_off(&sentinels.node_url(primary)).await;
        if let Err(error) = cut {
            sentinels.resume(replica);
            return Err(error);
        }
        tokio::time::sleep(CUT_OFF).await;
        let killed = Instant::now();
        tokio::task::block_in_place(|| sentinels.kill(primary));
        sentinels.resume(replica);
        sentinels.wait_for_failover(primary).await?;
        let promoted_in = killed.elapsed();
        sentinels.restart(primary).await?;
        let note = format!(
            "the replica cut off for {CUT_OFF:?}, the primary killed with SIGKILL; \
             the sentinels promoted the replica {:.1} s later; the old primary back as its replica",
            promoted_in.as_secs_f64()
        );
        Ok((note, frozen))
    }

    /// Restart Redis with no data. Every process is paused (SIGSTOP) around
    /// it, and the queue read once their last commands ran (a commit, a
    /// reserve: else an order queued after the read was lost on no list),
    /// both sets at one moment: the ids read are exactly the ones on it.
    async fn wipe_redis(&mut self) -> anyhow::Result<Wiped> {
        let names = self.cluster.names();
        for name in &names {
            self.cluster.signal(name, Signal::SIGSTOP)?;
        }
        tokio::time::sleep(SETTLE).await;
        let on_the_queue = async {
            let mut conn = self.store.redis().await?;
            let (waiting, in_flight): (Vec<String>, Vec<String>) = redis::pipe()
                .atomic()
                .zrange(&self.keys.queue.due, 0, -1)
                .zrange(&self.keys.queue.inflight, 0, -1)
                .query_async(&mut conn)
                .await
                .context("reading the queue before the wipe")?;
            Ok::<_, anyhow::Error>(Wiped {
                waiting: waiting.into_iter().collect(),
                in_flight: in_flight.into_iter().collect(),
            })
        }
        .await;
        let wiped = match on_the_queue {
            Ok(ids) => match self.one_redis() {
                Ok(redis) => redis.wipe().await.map(|()| ids),
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        for name in &names {
            self.cluster.signal(name, Signal::SIGCONT)?;
        }
        wiped
    }

    /// Hostile traffic for `length`: made-up sale ids, malformed bodies,
    /// oversized headers, and connections that never finish their request.
    async fn flood(&self, length: Duration) -> anyhow::Result<String> {
        let address = self.cluster.url("app-1")?;
        let address = address.trim_start_matches("http://").to_owned();
        let half_open = hold_half_open(&address, 100).await;
        let until = Instant::now() + length;
        let mut senders = Vec::new();
        for i in 0..20 {
            let address = address.clone();
            senders.push(tokio::spawn(async move {
                let mut sent = 0u64;
                while Instant::now() < until {
                    let request = hostile_request(i + sent);
                    // Whatever comes back.
                    let _ = exchange(&address, &request).await;
                    sent += 1;
                }
                sent
            }));
        }
        let mut sent = 0;
        for sender in senders {
            sent += sender.await.context("a flood task panicked")?;
        }
        drop(half_open);
        Ok(format!(
            "{sent} hostile requests and {} half-open connections",
            100
        ))
    }
}

/// One of the hostile requests, in turn.
fn hostile_request(n: u64) -> Vec<u8> {
    match n % 4 {
        0 => format!(
            "GET /api/sales/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
            1_000_000 + n % 1_000
        )
        .into_bytes(),
        1 => {
            let body = r#"{"user_id": "a", "user_id": "b"}"#;
            format!(
                "POST /api/sales/1/purchase HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            )
            .into_bytes()
        }
        2 => format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\nX-Padding: {}\r\nConnection: close\r\n\r\n",
            "p".repeat(20 * 1024)
        )
        .into_bytes(),
        _ => b"GET /api/orders/not-an-id HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".to_vec(),
    }
}

/// Send raw bytes and read the answer to its end (within 2 s).
async fn exchange(address: &str, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut socket = TcpStream::connect(address).await?;
    socket.write_all(request).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(2), socket.read_to_end(&mut answer))
        .await
        .map_err(|_| std::io::Error::from(std::io::ErrorKind::TimedOut))??;
    Ok(answer)
}

/// `n` connections that start a request and never finish it.
async fn hold_half_open(address: &str, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        if let Ok(mut socket) = TcpStream::connect(address).await
            && socket
                .write_all(b"POST /api/sales/1/purchase HTTP/1.1\r\nHost: x\r\n")
                .await
                .is_ok()
        {
            held.push(socket);
        }
    }
    held
}
