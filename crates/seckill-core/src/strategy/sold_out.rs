//! What an instance remembers of the sales it saw sold out: a purchase
//! of one within the refresh period is answered without Redis, unless
//! its buyer may hold a unit.
//!
//! The holders are the reason for the list. A buyer whose `202` was lost
//! on its way (a client that timed out, a phone that lost its
//! connection) asks again, and by then the sale has usually sold out: a
//! flash sale sells out in about a second. Answered "sold out" from the
//! flag, they would believe they lost, and not pay; their unit would come
//! back unpaid at the end of the payment window. So once a sale is seen
//! sold out, the instance lists its holders from Redis (`HSCAN` of the
//! sale's holds hash, [`list_holders`]) and answers from memory only the
//! buyers the list does not name; a buyer it may name goes to Redis as
//! before the sale sold out, and hears `409 already_purchased` with
//! their order. Until the list is made, every buyer goes to Redis.
//!
//! The list holds an 8-byte hash of each holder's id (8 MB for a sale of
//! a million units). A hash that two ids share sends the second to Redis
//! for nothing; never the other way.
//!
//! A sold-out sale gains a holder only when a unit comes back (an unpaid
//! order cancelled) and is taken again. The flag's refresh reads, with
//! the stock, how many holds the sale has written in all
//! (`lua/sold_out_look.lua`); a list made at another count is made again,
//! and until it is, every buyer goes to Redis. The count is read again
//! one refresh period after it was last read, however often passes see
//! the sale sold out meanwhile (a holder's retries go to Redis, and each
//! sees it so). So a buyer who took a returned unit can be told "sold
//! out" only within one refresh period of their take, from another
//! instance's flag.
//!
//! The `postgres` strategy writes a holder into Redis after PostgreSQL's
//! commit, and a copy that failed is not written again: such a holder is
//! in no list, and is told "sold out" from memory.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use redis::Script;
use redis::aio::ConnectionLike;

use crate::config::RedisDurability;
use crate::domain::UserId;
use crate::keys::SaleKeys;
use crate::replicas;

/// Per-instance memory of which sales were seen sold out, when, and who
/// holds their units.
#[derive(Debug, Default)]
pub(crate) struct SoldOutFlags {
    /// A std Mutex, not a tokio one: it is held for a map lookup and never
    /// across an await.
    seen: Mutex<HashMap<i64, Seen>>,
    /// The number of the last listing started, so that a listing's end
    /// is taken only by the listing it ends.
    listings: AtomicU64,
}

#[derive(Debug)]
struct Seen {
    at: Instant,
    holders: Holders,
}

/// The holders of a sale seen sold out, as far as this instance has them.
#[derive(Debug)]
enum Holders {
    /// Not listed: the next check starts a listing, not before
    /// `not_before` (a listing failed: Redis is not asked again at the
    /// rate of the requests).
    Unlisted { not_before: Option<Instant> },
    /// Listing number `n` is on its way.
    Listing(u64),
    /// Listed; `counted` is when the sale's count of holds was last read
    /// and found the list's.
    Listed {
        list: Arc<HolderList>,
        counted: Instant,
    },
}

/// How long after a failed listing the next one starts.
const LIST_RETRY: Duration = Duration::from_secs(1);

/// The holders of a sale's units, as hashes of their ids, and how many
/// holds the sale had written in all when they were read.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct HolderList {
    /// Sorted, for a binary search.
    hashes: Vec<u64>,
    takes: i64,
}

impl HolderList {
    fn may_hold(&self, user: &UserId) -> bool {
        self.hashes
            .binary_search(&holder_hash(user.as_str()))
            .is_ok()
    }
}

/// The hash a holder is listed under. `DefaultHasher::new` hashes alike
/// in every call of one process, which is all the list needs.
fn holder_hash(user: &str) -> u64 {
    let mut hasher = DefaultHasher::new();
    user.hash(&mut hasher);
    hasher.finish()
}

/// What an instance knows about a sale's stock without asking Redis.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Flag {
    /// No purchase here has seen it sold out, or one of the buyers asking
    /// may hold a unit, or its holders are not listed yet: ask Redis.
    Unknown,
    /// Seen sold out within the refresh period, and none of the buyers
    /// asking holds a unit: answer without Redis.
    SoldOut,
    /// Seen sold out, but long enough ago that a unit may have come back.
    Stale,
}

impl SoldOutFlags {
    /// What to tell `users` of `sale_id`, and the number of the listing
    /// the caller is to make of the sale's holders ([`list_holders`], then
    /// [`SoldOutFlags::listed`]): given to one caller at a time.
    pub(crate) fn check(
        &self,
        sale_id: i64,
        users: &[&UserId],
        refresh: Duration,
    ) -> (Flag, Option<u64>) {
        let mut seen = self.seen();
        let Some(sale) = seen.get_mut(&sale_id) else {
            return (Flag::Unknown, None);
        };
        if sale.at.elapsed() >= refresh {
            return (Flag::Stale, None);
        }
        match &sale.holders {
            // The count read too long ago, though passes saw the sale sold
            // out since: read it again with the stock.
            Holders::Listed { counted, .. } if counted.elapsed() >= refresh => (Flag::Stale, None),
            Holders::Listed { list, .. } if users.iter().any(|user| list.may_hold(user)) => {
                (Flag::Unknown, None)
            }
            Holders::Listed { .. } => (Flag::SoldOut, None),
            Holders::Listing(_) => (Flag::Unknown, None),
            Holders::Unlisted { not_before }
                if not_before.is_some_and(|at| at > Instant::now()) =>
            {
                (Flag::Unknown, None)
            }
            Holders::Unlisted { .. } => {
                let listing = self.listings.fetch_add(1, Ordering::Relaxed) + 1;
                sale.holders = Holders::Listing(listing);
                (Flag::Unknown, Some(listing))
            }
        }
    }

    /// `sale_id` seen sold out now. Its holders stay listed.
    pub(crate) fn set(&self, sale_id: i64) {
        self.seen()
            .entry(sale_id)
            .and_modify(|sale| sale.at = Instant::now())
            .or_insert_with(|| Seen {
                at: Instant::now(),
                holders: Holders::Unlisted { not_before: None },
            });
    }

    /// `sale_id` seen sold out now by the flag's refresh, which read that
    /// the sale has written `takes` holds in all: a list made at another
    /// count misses a holder or names one too many, and is made again.
    pub(crate) fn refreshed(&self, sale_id: i64, takes: i64) {
        self.set(sale_id);
        let mut seen = self.seen();
        let Some(sale) = seen.get_mut(&sale_id) else {
            return;
        };
        match &mut sale.holders {
            Holders::Listed { list, counted } if list.takes == takes => *counted = Instant::now(),
            Holders::Listed { .. } => sale.holders = Holders::Unlisted { not_before: None },
            _ => {}
        }
    }

    /// Listing number `listing`'s end: its list (`Err`: it failed, and a
    /// check [`LIST_RETRY`] later starts another). Taken only while the
    /// sale waits for that listing: one started before the sale came
    /// back on sale and sold out again lists holders of another time.
    pub(crate) fn listed(&self, sale_id: i64, listing: u64, list: anyhow::Result<HolderList>) {
        if let Some(sale) = self.seen().get_mut(&sale_id)
            && matches!(sale.holders, Holders::Listing(n) if n == listing)
        {
            sale.holders = match list {
                Ok(list) => Holders::Listed {
                    list: Arc::new(list),
                    counted: Instant::now(),
                },
                Err(_) => Holders::Unlisted {
                    not_before: Some(Instant::now() + LIST_RETRY),
                },
            };
        }
    }

    /// How many sales have a flag here.
    pub(crate) fn len(&self) -> usize {
        self.seen().len()
    }

    pub(crate) fn clear(&self, sale_id: i64) {
        let mut seen = self.seen();
        seen.remove(&sale_id);
        crate::map_memory::shrink_if_sparse(&mut seen);
    }

    fn seen(&self) -> std::sync::MutexGuard<'_, HashMap<i64, Seen>> {
        self.seen.lock().expect("sold-out flags poisoned")
    }
}

/// How many holds a sale's listing reads a call.
const LIST_CHUNK: usize = 1_000;

/// The holders of `keys`' sale, read from its holds hash a chunk at a
/// time (`HSCAN`: never one long command for a big sale), with the count
/// of holds written in all read first: a hold written during the scan
/// moves the count past the one listed, and the next refresh lists again.
pub(crate) async fn list_holders<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
) -> anyhow::Result<HolderList> {
    let (_, takes, _) = look(conn, keys, RedisDurability::Local)
        .await
        .context("counting the sale's holds")?;
    let mut hashes = Vec::new();
    let mut cursor = 0_u64;
    loop {
        let (next, pairs): (u64, Vec<String>) = redis::cmd("HSCAN")
            .arg(&keys.holds)
            .arg(cursor)
            .arg("COUNT")
            .arg(LIST_CHUNK)
            .query_async(conn)
            .await
            .context("listing the sale's holders")?;
        // Field, value, field, value: the buyers are the fields.
        hashes.extend(pairs.iter().step_by(2).map(|user| holder_hash(user)));
        if next == 0 {
            break;
        }
        cursor = next;
    }
    hashes.sort_unstable();
    hashes.dedup();
    Ok(HolderList { hashes, takes })
}

/// `keys`' sale's units left (`None`: not loaded) and holds written in
/// all, read at one moment (`lua/sold_out_look.lua`), and whether a
/// replica holds what was read (`replicas::run_and_confirm`: always under
/// `local`).
pub(crate) async fn look<C: ConnectionLike + Send>(
    conn: &mut C,
    keys: &SaleKeys,
    durability: RedisDurability,
) -> redis::RedisResult<(Option<i64>, i64, bool)> {
    static LOOK: LazyLock<Script> =
        LazyLock::new(|| Script::new(include_str!("../lua/sold_out_look.lua")));
    let mut look = LOOK.prepare_invoke();
    look.key(&keys.stock).key(&keys.holds).key(&keys.returned);
    let ((left, takes), confirmed) =
        replicas::run_and_confirm(conn, &LOOK, &look, durability, &keys.waited).await?;
    Ok((left, takes, confirmed))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINUTE: Duration = Duration::from_secs(60);

    fn buyer(name: &str) -> UserId {
        UserId::parse(name).expect("a buyer")
    }

    fn list(holders: &[&str], takes: i64) -> anyhow::Result<HolderList> {
        let mut hashes: Vec<u64> = holders.iter().map(|user| holder_hash(user)).collect();
        hashes.sort_unstable();
        Ok(HolderList { hashes, takes })
    }

    /// The listing a check asks its caller to make.
    fn claimed(checked: (Flag, Option<u64>)) -> u64 {
        assert_eq!(checked.0, Flag::Unknown);
        checked.1.expect("a listing to make")
    }

    /// Flags with sale 1 seen sold out, and its holders listed as given.
    fn sold_out_with(holders: &[&str], takes: i64) -> SoldOutFlags {
        let flags = SoldOutFlags::default();
        flags.set(1);
        let listing = claimed(flags.check(1, &[], MINUTE));
        flags.listed(1, listing, list(holders, takes));
        flags
    }

    #[test]
    fn sold_out_flag_is_trusted_only_within_the_refresh_period() {
        let carl = buyer("carl");
        assert_eq!(
            SoldOutFlags::default().check(1, &[&carl], MINUTE),
            (Flag::Unknown, None)
        );
        let flags = sold_out_with(&[], 0);
        assert_eq!(flags.check(1, &[&carl], MINUTE).0, Flag::SoldOut);
        assert_eq!(flags.check(1, &[&carl], Duration::ZERO).0, Flag::Stale);
        assert_eq!(flags.check(2, &[&carl], MINUTE).0, Flag::Unknown);
        flags.clear(1);
        assert_eq!(flags.check(1, &[&carl], MINUTE).0, Flag::Unknown);
    }

    #[test]
    fn a_holder_is_never_told_sold_out_from_memory() {
        let flags = SoldOutFlags::default();
        let (ann, carl) = (buyer("ann"), buyer("carl"));
        flags.set(1);
        // Until the holders are listed, nobody is answered from memory,
        // and one caller lists them.
        let listing = claimed(flags.check(1, &[&carl], MINUTE));
        assert_eq!(flags.check(1, &[&carl], MINUTE), (Flag::Unknown, None));
        flags.listed(1, listing, list(&["ann", "bob"], 2));
        assert_eq!(flags.check(1, &[&carl], MINUTE), (Flag::SoldOut, None));
        assert_eq!(flags.check(1, &[&ann], MINUTE), (Flag::Unknown, None));
        // A pass with a holder among its buyers goes to Redis whole.
        assert_eq!(flags.check(1, &[&carl, &ann], MINUTE).0, Flag::Unknown);
        // Seen sold out again: the list stays.
        flags.set(1);
        assert_eq!(flags.check(1, &[&carl], MINUTE).0, Flag::SoldOut);
    }

    #[test]
    fn a_list_is_made_again_when_the_sale_has_written_holds_since() {
        let flags = sold_out_with(&["ann", "bob"], 2);
        let (dan, carl) = (buyer("dan"), buyer("carl"));
        flags.refreshed(1, 2);
        assert_eq!(flags.check(1, &[&carl], MINUTE), (Flag::SoldOut, None));
        // Ann's unit came back, and dan took it: three holds in all.
        flags.refreshed(1, 3);
        let listing = claimed(flags.check(1, &[&dan], MINUTE));
        flags.listed(1, listing, list(&["bob", "dan"], 3));
        assert_eq!(flags.check(1, &[&dan], MINUTE).0, Flag::Unknown);
        assert_eq!(flags.check(1, &[&carl], MINUTE).0, Flag::SoldOut);
    }

    /// A holder's retries go to Redis, and each of their passes sees the
    /// sale sold out: that must not keep the count from being read again
    /// within the refresh period.
    #[test]
    fn passes_that_see_the_sale_sold_out_do_not_put_off_the_count() {
        let refresh = Duration::from_millis(30);
        let flags = sold_out_with(&["ann"], 1);
        let carl = buyer("carl");
        std::thread::sleep(refresh + Duration::from_millis(10));
        flags.set(1);
        assert_eq!(flags.check(1, &[&carl], refresh).0, Flag::Stale);
        flags.refreshed(1, 1);
        assert_eq!(flags.check(1, &[&carl], refresh).0, Flag::SoldOut);
    }

    #[test]
    fn a_failed_listing_is_tried_again_later_not_at_once() {
        let flags = SoldOutFlags::default();
        let carl = buyer("carl");
        flags.set(1);
        let listing = claimed(flags.check(1, &[&carl], MINUTE));
        flags.listed(1, listing, Err(anyhow::anyhow!("Redis went away")));
        assert_eq!(flags.check(1, &[&carl], MINUTE), (Flag::Unknown, None));
    }

    #[test]
    fn a_listing_of_another_time_lists_nothing() {
        let flags = SoldOutFlags::default();
        let carl = buyer("carl");
        flags.set(1);
        let early = claimed(flags.check(1, &[&carl], MINUTE));
        // The sale came back on sale and sold out again while it listed.
        flags.clear(1);
        flags.set(1);
        let late = claimed(flags.check(1, &[&carl], MINUTE));
        flags.listed(1, early, list(&[], 0));
        assert_eq!(flags.check(1, &[&carl], MINUTE), (Flag::Unknown, None));
        flags.listed(1, late, list(&["dan"], 1));
        assert_eq!(flags.check(1, &[&carl], MINUTE).0, Flag::SoldOut);
        // Forgotten: a listing's end finds nothing to fill.
        flags.clear(1);
        flags.listed(1, late, list(&[], 0));
        assert_eq!(flags.len(), 0);
    }
}
