//! The sale lanes of `lock` and `lua`: the buyers of a sale waiting on
//! one instance, and the one task at a time that takes them in passes,
//! one after another. A pass of `lock` goes through the sale's lock
//! (`under_lock.rs`, `pass`), a pass of `lua` is one script
//! (`lua.rs`, `pass`): either way, what Redis and the round trip cost is
//! paid once a pass, not once a buyer. (Databases call this group
//! commit.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;
use tracing::Instrument;

use crate::config::Strategy;
use crate::domain::UserId;
use crate::failure;
use crate::strategy::{Outcome, Passed, Shop, lua, under_lock};

/// The most buyers one pass takes; the rest wait for the next pass. Bounds one script's length and one pass's time, and is the
/// most orders one pass's ids can number (`domain::MAX_PASS`).
const MAX_BATCH: usize = crate::domain::MAX_PASS;

/// The buyers of each sale waiting on this instance.
#[derive(Default)]
pub(crate) struct Lanes {
    /// One lane per sale seen here. A std Mutex: held for a lookup, never
    /// across an await.
    by_sale: Mutex<HashMap<i64, Arc<Lane>>>,
}

/// One sale's waiting buyers on this instance.
#[derive(Default)]
struct Lane {
    /// A std Mutex: held for a push or a take, never across an await.
    state: Mutex<LaneState>,
}

#[derive(Default)]
struct LaneState {
    /// Buyers who arrived and wait for a pass, oldest first.
    waiting: Vec<Waiter>,
    /// Whether a task is taking them through ([`drain`]). With `lock`, one
    /// contender for the Redis lock per sale per instance: without it
    /// every waiting buyer would poll Redis for the lock, and the holder's
    /// writes would queue behind their polls. With `lua`, one script at a
    /// time for all who wait. Set by the buyer who finds it unset, cleared
    /// by the task when it finds nobody waiting, both under this lock: the
    /// race it settles is a buyer joining as the task finds the lane empty,
    /// who is either taken by the task or starts the next one, never left
    /// waiting with no task to come.
    draining: bool,
}

/// A buyer waiting in a lane, and where to send the answer.
struct Waiter {
    user: UserId,
    answer: oneshot::Sender<anyhow::Result<Outcome>>,
}

impl Lanes {
    /// Forget sale `sale_id`'s lane (the sale has ended). A pass still
    /// under way keeps its lane until it is done; a buyer who came after
    /// would start a new one.
    pub(crate) fn forget(&self, sale_id: i64) {
        let mut by_sale = self.by_sale.lock().expect("lanes poisoned");
        by_sale.remove(&sale_id);
        crate::map_memory::shrink_if_sparse(&mut by_sale);
    }

    /// How many sales have a lane here.
    pub(crate) fn len(&self) -> usize {
        self.by_sale.lock().expect("lanes poisoned").len()
    }

    /// Buy one unit of the sale for `user`, with the buyers waiting beside.
    pub(crate) async fn purchase(
        &self,
        shop: &Shop,
        sale_id: i64,
        roomed: bool,
        user: &UserId,
    ) -> anyhow::Result<Outcome> {
        let lane = self.lane(sale_id);
        let (answer, answered) = oneshot::channel();
        let waiter = Waiter {
            user: user.clone(),
            answer,
        };
        if lane.join(waiter) {
            // In a task of its own: its passes carry other buyers' answers
            // (and with `lock` may hold the Redis lock), so they must
            // finish even if this request is dropped. On the store's runtime, not this HTTP
            // worker's: there, in a burst, a pass would wait behind
            // thousands of new requests at each of its round trips, holding
            // the lock the other instances wait for (see `Store::runtime`);
            // and the task takes the next batch itself, so that no request
            // has to be served between two passes.
            // Its one span names the sale in what its passes log: one for
            // the task's passes, not one a buyer.
            let runtime = &shop.store.runtime();
            let span = tracing::info_span!("lane", sale_id);
            runtime.spawn(drain(shop.clone(), Arc::clone(&lane), sale_id, roomed).instrument(span));
        }
        answered.await.unwrap_or_else(|_| Err(no_answer()))
    }

    fn lane(&self, sale_id: i64) -> Arc<Lane> {
        self.by_sale
            .lock()
            .expect("lanes poisoned")
            .entry(sale_id)
            .or_default()
            .clone()
    }
}

/// Take the lane's buyers in passes of up to [`MAX_BATCH`] at a time,
/// oldest first, until nobody is waiting. `roomed`: the sale has a
/// waiting room (the same for every buyer of a lane, which is one
/// sale's).
async fn drain(shop: Shop, lane: Arc<Lane>, sale_id: i64, roomed: bool) {
    drain_with(&lane, |batch| one_pass(&shop, sale_id, roomed, batch)).await;
}

/// [`drain`], each pass run by `pass`. A pass that panics loses its own
/// buyers' answers (they are told `no_answer`), and the task goes on with
/// the buyers who joined meanwhile. The race this prevents: those buyers
/// found the lane being drained and started no task; had the panic ended
/// this one, they would wait, unanswered, until another buyer came.
async fn drain_with<F, Fut>(lane: &Lane, mut pass: F)
where
    F: FnMut(Vec<Waiter>) -> Fut,
    Fut: Future<Output = ()>,
{
    use futures_util::FutureExt;

    while let Some(batch) = lane.next_batch() {
        if let Err(panic) = std::panic::AssertUnwindSafe(pass(batch))
            .catch_unwind()
            .await
        {
            let what = panic
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("a panic");
            tracing::error!(
                panic = what,
                "a pass of a sale lane panicked; its buyers get no answer"
            );
        }
    }
}

impl Lane {
    /// Queue `waiter`; whether no task is draining the lane, so that the
    /// caller is to start one.
    fn join(&self, waiter: Waiter) -> bool {
        let mut state = self.state();
        state.waiting.push(waiter);
        !std::mem::replace(&mut state.draining, true)
    }

    /// The next pass's buyers; `None` when nobody waits, and then the task
    /// that asked is done draining.
    fn next_batch(&self) -> Option<Vec<Waiter>> {
        let mut state = self.state();
        if state.waiting.is_empty() {
            state.draining = false;
            return None;
        }
        let n = state.waiting.len().min(MAX_BATCH);
        Some(state.waiting.drain(..n).collect())
    }

    fn state(&self) -> std::sync::MutexGuard<'_, LaneState> {
        // Nothing that can panic runs under it; were it poisoned all the
        // same, a push or a drain of a Vec leaves its state whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The pass that should have answered a buyer ended without it (it
/// panicked).
fn no_answer() -> anyhow::Error {
    anyhow::anyhow!("the purchase's pass ended without an answer")
}

/// One pass: take `batch` through the instance's strategy (`lock` or
/// `lua`) and answer each buyer.
async fn one_pass(shop: &Shop, sale_id: i64, roomed: bool, batch: Vec<Waiter>) {
    // Buyers whose request is gone (the client hung up) buy nothing.
    let batch: Vec<Waiter> = batch
        .into_iter()
        .filter(|waiter| !waiter.answer.is_closed())
        .collect();
    if batch.is_empty() {
        return;
    }
    let users: Vec<&UserId> = batch.iter().map(|waiter| &waiter.user).collect();
    let passed = match shop.ready(sale_id, &users).await {
        Ok(Err(told)) => Ok(Passed::Now(vec![told; users.len()])),
        Ok(Ok(ready)) => match shop.settings.strategy {
            Strategy::Lua => lua::pass(shop, ready, sale_id, roomed, &users).await,
            Strategy::Lock => under_lock::pass(shop, ready, sale_id, roomed, &users)
                .await
                .map(Passed::Now),
            other => Err(anyhow::anyhow!("`{other:?}` purchases take no sale lane")),
        },
        Err(error) => Err(error),
    };
    match passed {
        Ok(Passed::Now(outcomes)) => answer(batch, outcomes),
        Ok(Passed::Later { look, doubt }) => {
            let looked = async move {
                use futures_util::FutureExt;
                let outcomes = match std::panic::AssertUnwindSafe(look).catch_unwind().await {
                    Ok(outcomes) => outcomes,
                    Err(_) => {
                        tracing::error!(
                            "the look of a pass whose answer was lost panicked; its buyers are in doubt"
                        );
                        doubt
                    }
                };
                answer(batch, outcomes);
            };
            shop.store.runtime().spawn(looked.in_current_span());
        }
        Err(error) => {
            // Each buyer gets the failure, judged once: a server that is
            // down stays "unavailable" (503) for every one of them.
            let judged = failure::Judged::of(&error);
            for waiter in batch {
                let _ = waiter.answer.send(Err(judged.to_error()));
            }
        }
    }
}

/// Send each waiter of `batch` its outcome.
fn answer(batch: Vec<Waiter>, outcomes: Vec<Outcome>) {
    for (waiter, outcome) in batch.into_iter().zip(outcomes) {
        let _ = waiter.answer.send(Ok(outcome));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waiter(name: &str) -> Waiter {
        let user = UserId::parse(name).expect("a buyer");
        Waiter {
            user,
            answer: oneshot::channel().0,
        }
    }

    fn names(batch: &[Waiter]) -> Vec<&str> {
        batch.iter().map(|waiter| waiter.user.as_str()).collect()
    }

    /// The first buyer to find no task draining its lane starts one; the
    /// task takes the buyers oldest first, at most a pass's worth at a
    /// time, and once it finds the lane empty the next buyer starts one
    /// again.
    #[test]
    fn one_task_at_a_time_drains_a_lane_and_the_next_buyer_starts_another() {
        let lane = Lane::default();
        assert!(lane.join(waiter("ann")), "the first starts a task");
        assert!(!lane.join(waiter("bob")), "one is draining");
        assert_eq!(names(&lane.next_batch().expect("two wait")), ["ann", "bob"]);
        assert!(!lane.join(waiter("cy")), "the task is still draining");
        assert_eq!(names(&lane.next_batch().expect("cy waits")), ["cy"]);
        assert!(lane.next_batch().is_none(), "nobody waits: the task ends");
        assert!(lane.join(waiter("di")), "no task now: di starts one");
        for n in 0..MAX_BATCH {
            assert!(!lane.join(waiter(&format!("u{n}"))));
        }
        assert_eq!(lane.next_batch().expect("a full pass").len(), MAX_BATCH);
        let last = format!("u{}", MAX_BATCH - 1);
        assert_eq!(names(&lane.next_batch().expect("one left")), [last]);
        assert!(lane.next_batch().is_none());
    }

    /// A pass that panics loses its own buyers' answers, and the task goes
    /// on: bob, who joined while ann's pass ran (and so started no task),
    /// is answered without another buyer coming; then the lane is left to
    /// the next buyer, who starts a task again.
    #[tokio::test]
    async fn a_pass_that_panics_leaves_no_buyer_who_joined_meanwhile_unanswered() {
        let lane = Lane::default();
        let (ann, ann_answer) = oneshot::channel();
        assert!(lane.join(Waiter {
            user: UserId::parse("ann").expect("a buyer"),
            answer: ann,
        }));
        let (bob, bob_answer) = oneshot::channel();
        let mut bob = Some(bob);
        let drained = drain_with(&lane, |batch| {
            let first = batch[0].user.as_str() == "ann";
            if first {
                // bob arrives while ann's pass runs, and finds a task.
                assert!(!lane.join(Waiter {
                    user: UserId::parse("bob").expect("a buyer"),
                    answer: bob.take().expect("bob joins once"),
                }));
            }
            async move {
                if first {
                    panic!("a pass broke");
                }
                for waiter in batch {
                    let _ = waiter.answer.send(Ok(Outcome::SoldOut));
                }
            }
        });
        tokio::time::timeout(std::time::Duration::from_secs(5), drained)
            .await
            .expect("the task went on past the panic and ended");
        assert!(ann_answer.await.is_err(), "ann's pass panicked: no answer");
        assert!(
            matches!(bob_answer.await, Ok(Ok(Outcome::SoldOut))),
            "bob was answered"
        );
        assert!(
            lane.join(waiter("cy")),
            "nobody drains now: cy starts a task"
        );
    }
}
