//! The Redis task queue: the article's sorted-set queue, made reliable.
//!
//! The idea is the article's: a sorted set whose score is the time a job is due.
//! Enqueue is by id, so enqueueing an id twice keeps one job; a delay makes a
//! job due later (the article's delay queue, used for payment deadlines); `top`
//! peeks at due jobs; `pop` takes them; `dequeue(id, score)` takes one job
//! off the queue, only if its score is still the one the caller saw.
//!
//! The article's methods, and where each one is here:
//! - `enqueue(id, delay)` is [`Queue::enqueue`].
//! - `top(n)` is [`Queue::top`]: due jobs with their scores (due times in ms),
//!   left in place. [`Queue::due_at`] reads the score of one job, due or not.
//! - `pop(n)` is [`Queue::reserve`], with [`Queue::ack`] to finish (below).
//! - `dequeue(id, score)` is [`Queue::dequeue`]: one script instead of a read,
//!   a compare and a delete under a queue-wide lock.
//!
//! What this module fixes: the article's `pop` deleted the jobs it returned, so a
//! consumer that died before finishing lost them. Here `pop` is
//! [`Queue::reserve`]: due jobs move into an in-flight set with a lease
//! deadline, in the same atomic step. [`Queue::ack`] removes them when the
//! work is done. If the consumer dies, its lease runs out and the next reserve
//! hands the job out again; after `max_attempts` deliveries a job goes to the
//! dead-letter set instead, where [`Queue::redrive`] can bring it back. A
//! consumer that is alive but lost the reserve's answer asks again with the
//! same token ([`Queue::reserve_as`]) and gets the same jobs, uncharged: a
//! lost answer is not a death.
//!
//! Every operation that reads and then writes is one Lua script in
//! `lua/queue_*.lua` (the queue needs no lock, unlike the article's). The
//! scripts take their time from the Redis server, so instances whose clocks
//! disagree still agree on what is due and which lease ran out.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use redis::aio::ConnectionLike;

use crate::config::RedisDurability;
use crate::keys::QueueKeys;
use crate::{replicas, scripts};

/// Prepends the shared helpers (`now_ms`, `push`, `call_many`, `push_many`, `push_fresh_many`,
/// `weight_of`)
/// to a queue script.
/// `$file` is a path under `src/`, wherever the caller lives.
macro_rules! queue_script {
    ($file:literal) => {
        LazyLock::new(|| {
            Script::new(concat!(
                include_str!(concat!(
                    env!("CARGO_MANIFEST_DIR"),
                    "/src/lua/queue_lib.lua"
                )),
                include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/src/", $file))
            ))
        })
    };
}
pub(crate) use queue_script;

static ENQUEUE: LazyLock<Script> = queue_script!("lua/queue_enqueue.lua");
static TOP: LazyLock<Script> = queue_script!("lua/queue_top.lua");
static RESERVE: LazyLock<Script> = queue_script!("lua/queue_reserve.lua");
static ACK: LazyLock<Script> = queue_script!("lua/queue_ack.lua");
static RETRY: LazyLock<Script> = queue_script!("lua/queue_retry.lua");
static REDRIVE: LazyLock<Script> = queue_script!("lua/queue_redrive.lua");
static DEQUEUE: LazyLock<Script> = queue_script!("lua/queue_dequeue.lua");

/// One named queue in Redis. Cheap to build; holds no connection.
#[derive(Debug, Clone)]
pub struct Queue {
    keys: QueueKeys,
}

/// Names one reserve, and its retries after a lost answer
/// ([`Queue::reserve_as`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReserveToken {
    id: String,
    /// Sent before, by a reserve whose answer was lost.
    sent: bool,
}

impl ReserveToken {
    /// A token no other reserve has.
    pub fn new() -> Self {
        Self {
            id: uuid::Uuid::new_v4().simple().to_string(),
            sent: false,
        }
    }

    /// The same token, to send again after its reserve's answer was lost.
    pub fn again(self) -> Self {
        Self { sent: true, ..self }
    }
}

impl Default for ReserveToken {
    fn default() -> Self {
        Self::new()
    }
}

/// A job handed out by [`Queue::reserve`]; give it back to `ack` or `retry`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reserved {
    pub id: String,
    pub payload: String,
    /// Which delivery this is (1 for the first). Ack and retry count only for
    /// the attempt that holds the job now.
    pub attempt: u32,
}

/// What one [`Queue::reserve`] call did.
#[derive(Debug, Default)]
pub struct Reservation {
    /// The jobs now leased to the caller.
    pub jobs: Vec<Reserved>,
    /// Jobs whose lease had run out and that were made due again.
    pub reclaimed: u64,
    /// Jobs whose lease had run out on their last attempt, now dead-lettered.
    pub dead_lettered: u64,
}

/// How many jobs are in each state.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct QueueStats {
    /// Waiting, due now or later.
    pub waiting: u64,
    /// Reserved by a worker and not yet acknowledged.
    pub in_flight: u64,
    /// Given up on.
    pub dead: u64,
}

/// Whether a failed attempt counts towards `max_attempts`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attempt {
    /// The job itself failed; this delivery counts.
    Failed,
    /// The worker could not try (say, PostgreSQL was down); it does not count.
    NotTried,
}

impl Queue {
    pub fn new(keys: QueueKeys) -> Self {
        Self { keys }
    }

    pub fn keys(&self) -> &QueueKeys {
        &self.keys
    }

    /// Add jobs, due after `delay`. Ids already in the queue are skipped.
    /// Returns how many were added.
    pub async fn enqueue<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        jobs: &[(&str, &str)],
        delay: Duration,
    ) -> redis::RedisResult<u64> {
        if jobs.is_empty() {
            return Ok(0);
        }
        let mut call = ENQUEUE.prepare_invoke();
        call.key(&self.keys.all()[..]).arg(millis(delay));
        for (id, payload) in jobs {
            call.arg(*id).arg(*payload);
        }
        scripts::run(conn, &ENQUEUE, &call).await
    }

    /// Peek at up to `limit` due jobs: `(id, due time in ms)`, oldest first.
    /// The due time is the job's score, what [`Queue::dequeue`] checks.
    pub async fn top<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        limit: usize,
    ) -> redis::RedisResult<Vec<(String, u64)>> {
        scripts::run(conn, &TOP, TOP.key(&self.keys.due).arg(limit)).await
    }

    /// When a waiting job is due, in ms on the Redis clock (its score), due
    /// now or later; `None` if the job is not waiting (in flight, dead or
    /// unknown). One read: the answer can change right after, which is what
    /// [`Queue::dequeue`] checks for.
    pub async fn due_at<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        id: &str,
    ) -> redis::RedisResult<Option<u64>> {
        redis::cmd("ZSCORE")
            .arg(&self.keys.due)
            .arg(id)
            .query_async(conn)
            .await
    }

    /// Take one waiting job off the queue for good, body and all, if it is
    /// still due at `due_ms` (as read from [`Queue::top`] or
    /// [`Queue::due_at`]). Returns whether it was removed.
    ///
    /// `false` means the job was left alone: it is in flight (a worker holds
    /// it), dead, gone, or was put back with another due time since the
    /// caller looked, and the caller's decision was about the job as it was.
    /// See `lua/queue_dequeue.lua`.
    pub async fn dequeue<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        id: &str,
        due_ms: u64,
    ) -> redis::RedisResult<bool> {
        let mut call = DEQUEUE.prepare_invoke();
        call.key(&self.keys.all()[..]).arg(id).arg(due_ms);
        scripts::run(conn, &DEQUEUE, &call).await
    }

    /// The article's `pop`, made reliable: lease due jobs for `lease`, up
    /// to `limit` of weight and at least one. A job weighs 1, a pass's job
    /// the orders it carries (`lua/queue_lib.lua`, `weight_of`): so
    /// `limit` bounds the work a batch holds, however it is packed.
    #[doc(alias = "pop")]
    pub async fn reserve<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        limit: usize,
        lease: Duration,
        max_attempts: u32,
    ) -> redis::RedisResult<Reservation> {
        let token = ReserveToken::new();
        let (reservation, _) = self
            .reserve_as(
                conn,
                (limit, lease, max_attempts),
                &token,
                (RedisDurability::Local, ""),
            )
            .await?;
        Ok(reservation)
    }

    /// [`Queue::reserve`] under `token`: asked again with the same token
    /// after its answer was lost, within the lease, it hands out the jobs
    /// the first call took, leased anew, and takes no others
    /// (`lua/queue_reserve.lua`). A token is for one reserve and its
    /// retries. Under `replica` (`confirm`: the durability and the sale's
    /// `waited` key) a `WAIT` rides in the same pipeline, so that it goes
    /// to the node that ran the reserve, whatever the connection learns of
    /// the slots meanwhile (`replicas::run_and_confirm`); the second value
    /// says whether enough replicas hold the reserve, and so the jobs it
    /// took (always `true` under `local`).
    pub async fn reserve_as<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        (limit, lease, max_attempts): (usize, Duration, u32),
        token: &ReserveToken,
        (durability, waited): (RedisDurability, &str),
    ) -> redis::RedisResult<(Reservation, bool)> {
        type Taken = (u64, u64, Vec<(String, String, u32)>);
        let mut call = RESERVE.prepare_invoke();
        call.key(&self.keys.all()[..])
            .key(self.keys.reservation(&token.id))
            .arg(limit)
            .arg(millis(lease))
            .arg(max_attempts)
            .arg(u8::from(token.sent));
        let ((reclaimed, dead_lettered, taken), confirmed): (Taken, bool) =
            replicas::run_and_confirm(conn, &RESERVE, &call, durability, waited).await?;
        let jobs = taken
            .into_iter()
            .map(|(id, payload, attempt)| Reserved {
                id,
                payload,
                attempt,
            })
            .collect();
        let reservation = Reservation {
            jobs,
            reclaimed,
            dead_lettered,
        };
        Ok((reservation, confirmed))
    }

    /// The jobs are done: remove them for good. Returns how many were still
    /// held by these attempts (a job whose lease ran out and was handed to
    /// someone else is not removed).
    pub async fn ack<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        jobs: &[Reserved],
    ) -> redis::RedisResult<u64> {
        if jobs.is_empty() {
            return Ok(0);
        }
        let mut call = ACK.prepare_invoke();
        call.key(&self.keys.all()[..]);
        for job in jobs {
            call.arg(&job.id).arg(job.attempt);
        }
        scripts::run(conn, &ACK, &call).await
    }

    /// Give jobs back to run again after `delay`. A [`Attempt::Failed`] job on
    /// its last attempt goes to the dead-letter set instead.
    /// Returns `(requeued, dead_lettered)`.
    pub async fn retry<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        jobs: &[Reserved],
        delay: Duration,
        attempt: Attempt,
        max_attempts: u32,
    ) -> redis::RedisResult<(u64, u64)> {
        if jobs.is_empty() {
            return Ok((0, 0));
        }
        let mut call = RETRY.prepare_invoke();
        call.key(&self.keys.all()[..])
            .arg(millis(delay))
            .arg(max_attempts)
            .arg(u8::from(attempt == Attempt::Failed));
        for job in jobs {
            call.arg(&job.id).arg(job.attempt);
        }
        scripts::run(conn, &RETRY, &call).await
    }

    /// Put every dead-lettered job back, attempts reset, the first due now
    /// and each next one `spacing` later (see `lua/queue_redrive.lua`).
    pub async fn redrive<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        spacing: Duration,
    ) -> redis::RedisResult<u64> {
        let mut call = REDRIVE.prepare_invoke();
        call.key(&self.keys.all()[..]).arg(millis(spacing));
        scripts::run(conn, &REDRIVE, &call).await
    }

    /// The payload of a job the queue still knows (waiting, in flight or dead).
    pub async fn payload<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        id: &str,
    ) -> redis::RedisResult<Option<String>> {
        Ok(self.payloads(conn, &[id]).await?.pop().flatten())
    }

    /// The payloads of jobs `ids`, in order, in one read (`None` for a job
    /// the queue does not know).
    pub async fn payloads<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
        ids: &[impl redis::ToRedisArgs + Sync],
    ) -> redis::RedisResult<Vec<Option<String>>> {
        redis::cmd("HMGET")
            .arg(&self.keys.jobs)
            .arg(ids)
            .query_async(conn)
            .await
    }

    /// How many jobs are waiting, in flight and dead, read in one transaction
    /// so the three figures describe the same moment.
    pub async fn stats<C: ConnectionLike + Send>(
        &self,
        conn: &mut C,
    ) -> redis::RedisResult<QueueStats> {
        let (waiting, in_flight, dead): (u64, u64, u64) = redis::pipe()
            .atomic()
            .zcard(&self.keys.due)
            .zcard(&self.keys.inflight)
            .zcard(&self.keys.dead)
            .query_async(conn)
            .await?;
        Ok(QueueStats {
            waiting,
            in_flight,
            dead,
        })
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
