//! A pass whose commit's answer was lost (the connection broke, or the
//! reply timed out): the lock's fence closed before the commit is looked
//! for, and what the room says about the orders it did not take.

use super::decide::{SPENT, refuse};
use crate::domain::OrderJob;
use crate::lock::LockGuard;
use crate::strategy::{Outcome, Shop};
use crate::waiting_room::{self, AtTheDoor};

/// Tell the buyers of `jobs[not_taken]`, orders a commit whose answer was
/// lost did not take, what the room refused them: a spent admission or
/// one it does not hold, and its keys tell which (a buyer told the wrong
/// one would be sent the wrong way: to give up, or to join again), all
/// read in one round trip. A buyer the room did not refuse, or all of
/// them if the room cannot be read, is told to retry: nothing was taken,
/// and a retry is told which.
pub(super) async fn refused_by_the_room(
    shop: &Shop,
    sale_id: i64,
    (outcomes, on_commit): (&mut [Outcome], &[bool]),
    jobs: &[OrderJob],
    not_taken: &[usize],
) {
    if not_taken.is_empty() {
        return;
    }
    // (Unconfirmed under `replica`, the buyers are told in doubt anyway:
    // a lost answer's `WAIT` was lost with it.)
    let buyers: Vec<&str> = not_taken
        .iter()
        .map(|i| jobs[*i].user_id.as_str())
        .collect();
    let standings = waiting_room::at_the_door_all(&shop.store, sale_id, &buyers)
        .await
        .unwrap_or_else(|_| vec![AtTheDoor::MayBuy; not_taken.len()]);
    for (i, standing) in not_taken.iter().zip(standings) {
        let told = match standing {
            AtTheDoor::Spent => SPENT,
            AtTheDoor::NotHeld => Outcome::NotAdmitted,
            AtTheDoor::MayBuy => Outcome::Busy,
        };
        refuse(outcomes, on_commit, jobs, &[*i], told);
    }
}

/// Make sure `guard` no longer holds the lock: release it if it still
/// does, on a connection taken from the pool anew (still in step after a
/// timeout, since the connections are multiplexed; a new one after a
/// loss), trying again while Redis does not answer. A lock taken before this call has run out one TTL after it
/// anyway, so that is as long as it tries.
pub(super) async fn close_the_fence(shop: &Shop, guard: &LockGuard) {
    let deadline = tokio::time::Instant::now() + shop.settings.lock_ttl();
    loop {
        let released = match shop.store.redis().await {
            Ok(mut conn) => guard
                .compare_and_delete(&mut conn)
                .await
                .map_err(anyhow::Error::from),
            Err(error) => Err(error),
        };
        match released {
            Ok(_) => return,
            Err(_) if tokio::time::Instant::now() >= deadline => return,
            Err(_) => tokio::time::sleep(crate::strategy::LOOKUP_RETRY).await,
        }
    }
}
