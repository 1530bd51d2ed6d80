//! A commit whose answer was lost with its connection: was it taken?

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use redis::Script;
use uuid::Uuid;

use super::Shop;
use crate::domain::{OrderJob, carried};
use crate::keys::SaleKeys;
use crate::scripts;

static VOID: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../lua/pass_void.lua")));

/// How long a purchase whose commit answer was lost spends finding out
/// whether its order was taken (a Redis restart takes a moment), and the
/// pause between two tries.
const LOOKUP_LIMIT: Duration = Duration::from_secs(3);
pub(crate) const LOOKUP_RETRY: Duration = Duration::from_millis(100);

/// What a look for an order whose commit answer was lost found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Looked {
    /// The commit's job on its sale's queue, or its orders in PostgreSQL:
    /// the commit went through, and took these orders (a roomed pass's
    /// commit refuses the orders of admissions spent or not held).
    Taken(Vec<Uuid>),
    /// Redis and PostgreSQL answered, and neither has it.
    NotTaken,
    /// Redis or PostgreSQL could not be asked in time, or neither has it
    /// while Redis does not hold the sale (a worker may still write a
    /// batch it reserved before Redis lost it): in doubt.
    Unknown,
}

/// What keeps a commit whose answer was lost from landing after the look
/// that tells its buyers: without it, a `NotTaken` could be taken back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LateCommit {
    /// `lock`: the lock's fence, closed before the look
    /// (`under_lock.rs`, `close_the_fence`); the look only reads.
    Fenced,
    /// `lua`: no lock, so the look voids the pass in the step that looks
    /// for its job (`lua/pass_void.lua`), and the script, landing late,
    /// takes nobody.
    Voided,
}

impl Shop {
    /// A commit's answer was lost with its connection. Look its job up
    /// (`job_id`, carrying `jobs`' orders, on the sale's queue), then its
    /// orders in PostgreSQL, on a fresh connection, asking again while
    /// neither can be asked (or neither has it and Redis does not hold
    /// the sale), for [`LOOKUP_LIMIT`] at most. A commit is one
    /// script: its job, or one of its orders stored, tells that it went
    /// through, and which orders it took. What the buyer is told of each
    /// answer is the caller's: only a `Taken` order, or a `NotTaken` one
    /// whose late commit cannot land, is final; an order in doubt is told
    /// `503` with its id, never an error without it (`GET
    /// /api/orders/{id}` tells later what became of it).
    ///
    /// `late`: how a commit still on its way is kept from taking after
    /// the look.
    pub(crate) async fn after_a_lost_answer(
        &self,
        job_id: Uuid,
        jobs: &[OrderJob],
        late: LateCommit,
    ) -> Looked {
        let Some(first) = jobs.first() else {
            return Looked::NotTaken;
        };
        // Redis may be on its way back (the connection broke because it was
        // restarting): ask again until it answers or the limit passes.
        let deadline = tokio::time::Instant::now() + LOOKUP_LIMIT;
        loop {
            match tokio::time::timeout_at(deadline, self.taken(first.sale_id, job_id, jobs, late))
                .await
            {
                Ok(Ok(taken)) if !taken.is_empty() => {
                    tracing::warn!(%job_id, "commit answer lost, but the orders were taken");
                    return Looked::Taken(taken);
                }
                Ok(Ok(_)) => return Looked::NotTaken,
                Ok(Err(_)) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(LOOKUP_RETRY).await;
                }
                Ok(Err(_)) | Err(_) => {
                    tracing::warn!(%job_id, "commit answer lost, and its orders could not be looked up");
                    return Looked::Unknown;
                }
            }
        }
    }

    /// The orders of `jobs` that commit `job_id` took: those its job
    /// carries while it is on the queue, else those PostgreSQL holds (the
    /// worker acks a job only once all its orders are written). Empty:
    /// not taken. The queue first: the worker moves orders from it to
    /// PostgreSQL, never back. So, once the pass is voided or fenced while
    /// Redis holds its sale, a job on neither is nowhere, for good
    /// (`lua/pass_void.lua`). While Redis does not hold the sale, a worker
    /// may still write a batch it reserved before: found in PostgreSQL, it
    /// is taken; found nowhere, the look is asked again.
    async fn taken(
        &self,
        sale_id: i64,
        job_id: Uuid,
        jobs: &[OrderJob],
        late: LateCommit,
    ) -> anyhow::Result<Vec<Uuid>> {
        let mut conn = self.store.redis().await?;
        let keys = SaleKeys::new(self.store.prefix(), sale_id);
        let (loaded, payload): (bool, Option<String>) = scripts::run(
            &mut conn,
            &VOID,
            VOID.key(&keys.queue.jobs)
                .key(&keys.voided)
                .key(&keys.stock)
                .arg(job_id.to_string())
                .arg(u8::from(late == LateCommit::Voided)),
        )
        .await
        .context("looking for the job of a pass whose answer was lost")?;
        let queued = (payload.map(|payload| carried(&payload)).transpose())
            .context("decoding a queued job")?;
        if let Some(carried) = queued {
            return Ok(carried.iter().map(|order| order.order_id).collect());
        }
        let ids: Vec<Uuid> = jobs.iter().map(|job| job.order_id).collect();
        let stored = self.store.stored_among(&ids).await?;
        anyhow::ensure!(
            loaded || !stored.is_empty(),
            "sale {sale_id} is not in Redis: a worker may still write the pass's orders"
        );
        Ok(stored)
    }
}
