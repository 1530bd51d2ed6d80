//! This instance's view of each waiting room it is asked about, so that a
//! crowd polling its places does not cost Redis a script per answer.
//!
//! Each instance looks at a room (one visit for nobody,
//! `waiting_room::look`) at most every [`FRESH_FOR`], and answers every
//! buyer it can from that look, so that a status answer is as cheap as a
//! sold-out one wherever the buyer stands:
//! - a buyer far behind the head, who was in line then and so far back
//!   that the room cannot have reached them since, from their ticket's
//!   number alone (`Standing::of_number`);
//! - a buyer near the head, admitted, or bought (and a lottery's drawn
//!   buyer, whose number does not tell how many are ahead): from the
//!   look's own answer for them. The instance tracks each such buyer who
//!   asked here in the last [`TRACKED_FOR`] (at most [`TRACKED_MAX`] a
//!   room; beyond them, asked about in Redis each time), and every look reads where each of them stands, in its one
//!   script. A buyer asks Redis once, the first time, and is answered from
//!   the looks after that.
//!
//! So every answer is at most [`FRESH_FOR`] old: a buyer admitted since
//! the look is told so at the next one. A purchase through this instance
//! is not left to the next look: it forgets the look
//! ([`RoomViews::bought`]), and the next question looks again.
//!
//! The races this keeps closed. A buyer answered from the look never
//! asked Redis, so Redis would take them for gone (abandoned) at their
//! turn: the buyers answered here are noted, and sent as seen with the
//! next look, in its script, before it admits anyone: the oldest
//! [`SEEN_PER_LOOK`] of them a look, so that the script stays short
//! whatever the crowd (the rest wait for the next looks). Many requests
//! finding the look stale at once would each look again: the look is a
//! single-flight read (`single_flight.rs`), one at a time per room. And a
//! look taken before this instance took a buyer's purchase would show
//! them admitted still, and hand them the Buy form again for an admission
//! spent (or show a newcomer the "Join" form of a room the purchase sold
//! out): the purchase forgets the look, and a look under way then keeps
//! nothing (`SingleFlight::forget`).

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::single_flight::{Shared, SingleFlight};
use seckill_core::domain::{RoomSettings, Sale, UserId};
use seckill_core::store::Store;
use seckill_core::waiting_room::{self, Place, Standing, TRACKED_MAX};

/// How old a look may be when a buyer is answered from it: the most a
/// place shown can lag behind Redis.
pub(crate) const FRESH_FOR: Duration = Duration::from_millis(200);

/// How long a buyer who asked here is tracked (their standing read with
/// every look): a few of a page's one-second polls, so that a buyer who
/// goes on asking stays tracked, and one who left stops costing the looks.
pub(crate) const TRACKED_FOR: Duration = Duration::from_secs(5);

/// The rooms this instance was asked about, by sale: a few hundred bytes
/// each, and a few dozen a tracked buyer, forgotten once nobody has asked
/// for a while ([`Self::forget_idle`]).
#[derive(Default)]
pub(crate) struct RoomViews {
    rooms: Mutex<HashMap<i64, Arc<View>>>,
}

/// One room's last look, and the buyers answered from it since.
struct View {
    look: SingleFlight<Arc<Look>>,
    /// When a buyer last asked about this room here.
    asked: Mutex<Instant>,
    /// Who this instance answers about. A std Mutex: nothing awaits while
    /// it is held.
    buyers: Mutex<Buyers>,
}

#[derive(Default)]
struct Buyers {
    /// Buyers answered from a look, to be sent as seen with the next ones,
    /// first answered first; `queued` holds the same buyers, so that one
    /// who asks again while queued is queued once.
    seen: VecDeque<String>,
    queued: HashSet<String>,
    /// Buyers whose standing each look reads: when each last asked here.
    tracked: HashMap<String, Instant>,
    /// Buyers asked about in Redis, never answered by their ticket's
    /// number, and since when: a look found them out of line after they
    /// had been answered by it (`lua/room_visit.lua`: admitted since, or
    /// their place lost), or Redis found them outside. Kept while they go
    /// on asking and Redis finds them outside; dropped [`UNSEEN_FOR`]
    /// after that, or when Redis places them. At most [`UNSEEN_MAX`].
    unseen: HashMap<String, Instant>,
}

/// The most buyers seen a look sends (`lua/room_visit.lua` notes each in
/// a `ZSCORE` and an `HSET`: about a millisecond of Redis for all of
/// them), so that a look stays short at any crowd; the rest go with the
/// next looks, first answered first. A look every [`FRESH_FOR`], so 5,000
/// a second an instance: a buyer waits in the queue for a few seconds
/// while one instance answers tens of thousands from its looks, well
/// within the abandon time (30 s by default).
pub(crate) const SEEN_PER_LOOK: usize = 1_000;

/// How long a buyer stays asked about in Redis ([`Buyers::unseen`]) after
/// Redis last found them outside: longer than a page's one-second
/// reload, so that a buyer whose place was lost is not answered by their
/// number again between two questions.
const UNSEEN_FOR: Duration = Duration::from_secs(10);

/// The most buyers a room's view asks Redis about so ([`Buyers::unseen`]):
/// a buyer's id and a time each, some ten megabytes at most. Past it, a
/// buyer whose place was lost is answered by their number until the head
/// nears.
const UNSEEN_MAX: usize = 100_000;

/// One look at a room: its standing (nobody's place), and where each
/// buyer tracked then stood.
struct Look {
    room: Standing,
    places: HashMap<String, Place>,
}

impl RoomViews {
    /// Where `buyer`, who holds the ticket of `number` in the line of
    /// `generation`, stands: from this instance's look at the room when it
    /// can tell, else from a visit. A standing not `confirmed` may be the
    /// room's look, not the buyer's: nothing but that it is unconfirmed is
    /// to be told of it.
    pub(crate) async fn standing(
        &self,
        store: &Store,
        (sale, settings): (&Arc<Sale>, &RoomSettings),
        buyer: &UserId,
        (number, generation): (u64, i64),
    ) -> anyhow::Result<Standing> {
        let view = self.view(sale.id);
        let (read_at, look) = match view.looked(store, sale, settings).await {
            Ok(fresh) => fresh,
            Err(Looked::Unconfirmed(look)) => return Ok(look),
            Err(Looked::Failed(error)) => return Err(error),
        };
        let age = read_at.elapsed();
        // A ticket of a line Redis lost (and began again, from number 1)
        // is no place in this one: asked about in Redis, which finds the
        // buyer outside and says so.
        if look.room.born_ms == generation {
            let as_looked = |place| Standing {
                place,
                now_ms: look.room.now_ms + i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
                ..look.room
            };
            let answered = match look.places.get(buyer.as_str()).copied() {
                // Admitted, bought, or in line with this ticket's number:
                // as the look found them.
                Some(place @ (Place::Admitted { .. } | Place::Bought)) => Some(as_looked(place)),
                Some(place @ Place::Waiting { number: n, .. }) if n == number => {
                    Some(as_looked(place))
                }
                // Outside when the look read them, or out of line when it
                // noted them seen (admitted since, or their place lost:
                // a failover under `local` loses the line's tail and keeps
                // its generation): asked in Redis, which is the one to
                // tell a buyer their place is gone. Never by the ticket's
                // number, which would tell a place Redis no longer holds
                // "waiting" until the head came near.
                Some(Place::Outside) => None,
                _ if view.ask_redis_about(buyer.as_str()) => None,
                // In line by another number (a ticket of a join since the
                // look), or not read: by the ticket's number if it is far
                // back, else asked in Redis.
                _ => look.room.of_number(number, settings, age),
            };
            if let Some(standing) = answered {
                view.answered(buyer.as_str(), standing.place);
                return Ok(standing);
            }
        }
        view.track(buyer.as_str());
        let standing = waiting_room::visit(store, sale, settings, buyer, false).await?;
        if standing.confirmed {
            view.redis_found(buyer.as_str(), standing.place);
        }
        Ok(standing)
    }

    /// The room as this instance's look last saw it (nobody's place:
    /// whether it is closed, how many wait), at most [`FRESH_FOR`] old.
    pub(crate) async fn room(
        &self,
        store: &Store,
        sale: &Arc<Sale>,
        settings: &RoomSettings,
    ) -> anyhow::Result<Standing> {
        match self.view(sale.id).looked(store, sale, settings).await {
            Ok((_, look)) => Ok(look.room),
            Err(Looked::Unconfirmed(look)) => Ok(look),
            Err(Looked::Failed(error)) => Err(error),
        }
    }

    /// A buyer bought in `sale_id`'s room through this instance: the look
    /// taken before is forgotten (the race in the module's notes).
    pub(crate) fn bought(&self, sale_id: i64) {
        if let Some(view) = lock(&self.rooms).get(&sale_id) {
            view.look.forget();
        }
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
        let view = Arc::clone(lock(&self.rooms).entry(sale_id).or_insert_with(|| {
            Arc::new(View {
                look: SingleFlight::default(),
                asked: Mutex::new(Instant::now()),
                buyers: Mutex::default(),
            })
        }));
        *lock(&view.asked) = Instant::now();
        view
    }
}

impl View {
    /// The last look if it is fresh, else a new one (one at a time), which
    /// sends the buyers seen and reads the buyers tracked.
    async fn looked(
        self: &Arc<Self>,
        store: &Store,
        sale: &Arc<Sale>,
        settings: &RoomSettings,
    ) -> Result<(Instant, Arc<Look>), Looked> {
        self.look
            .get(store.runtime(), FRESH_FOR, || {
                let (seen, tracked) = self.to_send();
                let (store, sale, settings) = (store.clone(), Arc::clone(sale), *settings);
                let view = Arc::clone(self);
                async move {
                    match waiting_room::look(&store, &sale, &settings, &seen, &tracked).await {
                        // A look no replica confirmed (under `replica`):
                        // its shard's replicas do not answer, so a visit of
                        // the buyer's own would wait for them in vain too.
                        // Everyone who asked while it ran is told `503
                        // unconfirmed` from it at once, and nobody later:
                        // it is a failure, not a look kept for 200 ms
                        // (`single_flight.rs` shares a failure only with
                        // those who waited on it), so the first question
                        // after the replica is back looks again. (The race
                        // this closes: a look kept unconfirmed told buyers
                        // `503` for 200 ms after the replica had come back;
                        // one ignored sent every buyer to a visit and a
                        // `WAIT` of their own.)
                        Ok((room, _)) if !room.confirmed => Err(Looked::Unconfirmed(room)),
                        Ok((room, looked)) => {
                            view.unseen(looked.unseen);
                            Ok(Arc::new(Look {
                                room,
                                places: tracked.into_iter().zip(looked.places).collect(),
                            }))
                        }
                        Err(error) => Err(Looked::Failed(error)),
                    }
                }
            })
            .await
    }

    /// The buyers to send with the next look: the oldest seen since they
    /// were last sent, at most [`SEEN_PER_LOOK`] (taken), and those tracked (the ones who stopped asking dropped).
    fn to_send(&self) -> (Vec<String>, Vec<String>) {
        let mut buyers = lock(&self.buyers);
        buyers
            .tracked
            .retain(|_, asked| asked.elapsed() < TRACKED_FOR);
        buyers
            .unseen
            .retain(|_, since| since.elapsed() < UNSEEN_FOR);
        let sent = buyers.seen.len().min(SEEN_PER_LOOK);
        let seen: Vec<String> = buyers.seen.drain(..sent).collect();
        for buyer in &seen {
            buyers.queued.remove(buyer);
        }
        (seen, buyers.tracked.keys().cloned().collect())
    }

    /// `buyer` was answered from a look: seen (when in line), and still
    /// tracked if they were.
    fn answered(&self, buyer: &str, place: Place) {
        let mut buyers = lock(&self.buyers);
        if let Some(asked) = buyers.tracked.get_mut(buyer) {
            *asked = Instant::now();
        }
        if matches!(place, Place::Waiting { .. }) && buyers.queued.insert(buyer.to_owned()) {
            buyers.seen.push_back(buyer.to_owned());
        }
    }

    /// Note `buyers`, found out of line by a look after they were
    /// answered by their number: asked about in Redis from now on.
    fn unseen(&self, buyers: Vec<String>) {
        let mut kept = lock(&self.buyers);
        let now = Instant::now();
        for buyer in buyers {
            if kept.unseen.len() >= UNSEEN_MAX && !kept.unseen.contains_key(&buyer) {
                break;
            }
            kept.unseen.insert(buyer, now);
        }
    }

    /// Whether `buyer` is to be asked about in Redis, not answered by
    /// their number ([`Buyers::unseen`]).
    fn ask_redis_about(&self, buyer: &str) -> bool {
        lock(&self.buyers)
            .unseen
            .get(buyer)
            .is_some_and(|since| since.elapsed() < UNSEEN_FOR)
    }

    /// Redis found `buyer` at `place`: one outside (their place lost, or
    /// never theirs) is asked about in Redis again at their next question,
    /// for [`UNSEEN_FOR`]; one Redis places is answered from the looks.
    fn redis_found(&self, buyer: &str, place: Place) {
        if place == Place::Outside {
            self.unseen(vec![buyer.to_owned()]);
        } else {
            lock(&self.buyers).unseen.remove(buyer);
        }
    }

    /// `buyer` asked and the look could not tell: tracked from now on
    /// (while there is room), so that the next looks can.
    fn track(&self, buyer: &str) {
        let mut buyers = lock(&self.buyers);
        if buyers.tracked.len() < TRACKED_MAX || buyers.tracked.contains_key(buyer) {
            buyers.tracked.insert(buyer.to_owned(), Instant::now());
        }
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

#[cfg(test)]
mod tests;
