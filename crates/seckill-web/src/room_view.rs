//! This instance's view of each waiting room it is asked about, so that a
//! crowd polling its places does not cost Redis a script per answer.
//!
//! Most of a crowd stands far behind the head of the line, and its answer
//! changes only as the head moves. So each instance looks at a room (one
//! visit for nobody, `waiting_room::look`) at most every [`FRESH_FOR`], and
//! answers from that look a buyer who was in line then and so far behind
//! that the room cannot have reached them since (`Standing::of_number`).
//! Whoever is near their turn, admitted, or not judged (in a lottery
//! whose drawn buyers still lead the line) is asked about in Redis, as
//! before.
//!
//! The races this keeps closed. A buyer answered from the look never
//! asked Redis, so Redis would take them for gone (abandoned) at their
//! turn: the buyers answered here are noted, and sent as seen with the
//! next look, in its script, before it admits anyone. And many requests
//! finding the look stale at once would each look again: the look is a
//! single-flight read (`single_flight.rs`), one at a time per room.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::single_flight::{Shared, SingleFlight};
use seckill_core::domain::{RoomSettings, Sale, UserId};
use seckill_core::store::Store;
use seckill_core::waiting_room::{self, Standing};

/// How old a look may be when a buyer is answered from it: the most a
/// place shown can lag behind Redis.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(200);

/// The rooms this instance was asked about, by sale: a few hundred bytes
/// each, forgotten once nobody has asked for a while ([`Self::forget_idle`]).
#[derive(Default)]
pub(crate) struct RoomViews {
    rooms: Mutex<HashMap<i64, Arc<View>>>,
}

/// One room's last look, and the buyers answered from it since.
struct View {
    look: SingleFlight<Standing>,
    /// When a buyer last asked about this room here.
    asked: Mutex<Instant>,
    /// Buyers answered from a look, to be sent as seen with the next one.
    /// A std Mutex: nothing awaits while it is held.
    seen: Mutex<HashSet<String>>,
}

impl RoomViews {
    /// Where `buyer`, who holds the ticket of `number` in the line of
    /// `generation`, stands: from this instance's look at the room when it
    /// can tell, else from a visit. A
    /// standing not `confirmed` may be the room's look, not the buyer's:
    /// nothing but that it is unconfirmed is to be told of it.
    pub(crate) async fn standing(
        &self,
        store: &Store,
        sale: &Arc<Sale>,
        settings: &RoomSettings,
        buyer: &UserId,
        (number, generation): (u64, i64),
    ) -> anyhow::Result<Standing> {
        let view = self.view(sale.id);
        *lock(&view.asked) = Instant::now();
        let looked = view
            .look
            .get(store.runtime(), FRESH_FOR, || {
                let seen: Vec<String> = lock(&view.seen).drain().collect();
                let (store, sale, settings) = (store.clone(), Arc::clone(sale), *settings);
                async move {
                    match waiting_room::look(&store, &sale, &settings, &seen).await {
                        Ok(look) if !look.confirmed => Err(Looked::Unconfirmed(look)),
                        Ok(look) => Ok(look),
                        Err(error) => Err(Looked::Failed(error)),
                    }
                }
            })
            .await;
        let (read_at, look) = match looked {
            Ok(fresh) => fresh,
            // A look no replica confirmed (under `replica`): its shard's
            // replicas do not answer, so a visit of the buyer's own would
            // wait for them in vain too. Everyone who asked while it ran is
            // told `503 unconfirmed` from it at once, and nobody later: it
            // is a failure, not a look kept for 200 ms (`single_flight.rs`
            // shares a failure only with those who waited on it), so the
            // first question after the replica is back looks again. (The
            // race this closes: a look kept unconfirmed told buyers `503`
            // for 200 ms after the replica had come back; one ignored sent
            // every buyer to a visit and a `WAIT` of their own.)
            Err(Looked::Unconfirmed(look)) => return Ok(look),
            Err(Looked::Failed(error)) => return Err(error),
        };
        // A ticket of a line Redis lost (and began again, from number 1)
        // is no place in this one: asked about in Redis, which finds the
        // buyer outside and says so.
        if look.born_ms != generation {
            return waiting_room::visit(store, sale, settings, buyer, false).await;
        }
        if let Some(standing) = look.of_number(number, settings, read_at.elapsed()) {
            lock(&view.seen).insert(buyer.as_str().to_owned());
            return Ok(standing);
        }
        waiting_room::visit(store, sale, settings, buyer, false).await
    }

    /// Forget the rooms nobody asked about here for `idle`; how many.
    pub(crate) fn forget_idle(&self, idle: Duration) -> usize {
        let mut rooms = lock(&self.rooms);
        let before = rooms.len();
        rooms.retain(|_, view| lock(&view.asked).elapsed() < idle);
        before - rooms.len()
    }

    /// How many rooms this instance keeps a view of (`/metrics`'
    /// `seckill_sales_in_memory` counts them).
    pub(crate) fn len(&self) -> usize {
        lock(&self.rooms).len()
    }

    fn view(&self, sale_id: i64) -> Arc<View> {
        Arc::clone(lock(&self.rooms).entry(sale_id).or_insert_with(|| {
            Arc::new(View {
                look: SingleFlight::default(),
                asked: Mutex::new(Instant::now()),
                seen: Mutex::default(),
            })
        }))
    }
}

/// A look that tells nobody where they stand: one no replica confirmed
/// (`Standing::confirmed` false, answered `503 unconfirmed` by the
/// caller), or one that failed.
enum Looked {
    Unconfirmed(Standing),
    Failed(anyhow::Error),
}

impl From<anyhow::Error> for Looked {
    fn from(error: anyhow::Error) -> Self {
        Self::Failed(error)
    }
}

impl Shared for Looked {
    fn share(&self) -> Self {
        match self {
            Self::Unconfirmed(look) => Self::Unconfirmed(*look),
            Self::Failed(error) => Self::Failed(error.share()),
        }
    }
}

/// A poisoned lock still holds a consistent map or set: nothing panics
/// while changing one halfway.
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
