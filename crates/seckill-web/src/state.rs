//! What every handler of one instance shares: [`AppState`], built once by
//! `startup.rs`. The bottom of the crate's handlers: it uses nothing of
//! them, and each of them may use it.

use std::sync::Arc;

use actix_web::web::Bytes;
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use crate::admin_token::AdminToken;
use crate::live::LiveSales;
use crate::room_view::RoomViews;
use crate::single_flight::SingleFlight;
use seckill_core::config::RateLimitSettings;
use seckill_core::purchase::Purchaser;
use seckill_core::scoreboard::Scoreboard;
use seckill_core::store::Store;

/// The largest JSON body the API reads; anything larger is answered 400.
pub(crate) const MAX_JSON_BYTES: usize = 4 * 1024;

/// Everything a request handler needs, shared by all workers of one
/// instance. Built once by `startup.rs`; nothing in it is replaced while the
/// instance runs (what changes inside, the catalog cache and the sold-out
/// flags, has its own lock).
pub(crate) struct AppState {
    /// PostgreSQL, Redis, the key prefix and the cache of sales: every read
    /// and write of data goes through it. Set by `startup`; never replaced.
    pub(crate) store: Store,
    /// The purchase path, with this instance's sold-out flags (which only
    /// the purchase path changes). Set by `startup`; never replaced.
    pub(crate) purchaser: Purchaser,
    /// The rate limits per client IP and per buyer (off unless configured),
    /// and the proxies whose `X-Forwarded-For` names the client. Fixed at
    /// start.
    pub(crate) limits: RateLimitSettings,
    /// The admin token's digest; checks logins, cookies and bearer headers.
    /// Fixed at start from `SECKILL_ADMIN_TOKEN`.
    pub(crate) admin: AdminToken,
    /// The snapshots of the sales watched on the live page, one reading
    /// task per watched sale shared by all its streams. Set by `startup`.
    pub(crate) scoreboard: Scoreboard,
    /// The storefront's index as last built, served to every request for
    /// a quarter of a second (`pages/index.rs`).
    pub(crate) index: IndexCache,
    /// The sales whose pages are open here: each one's last units-left
    /// snapshot and paced changes, shared by its event streams (`live.rs`).
    /// Fed by one task, started with it by `startup`.
    pub(crate) live: Arc<LiveSales>,
    /// One permit per live event stream, held while it is open: bounds how
    /// many this instance serves at once (`SECKILL_MAX_EVENT_STREAMS`).
    pub(crate) streams: Arc<Semaphore>,
    /// How many permits `streams` started with; fixed at start.
    pub(crate) max_streams: usize,
    /// This instance's look at each waiting room it is asked about, so
    /// that a crowd polling its places costs Redis one visit per room per
    /// moment, not one per answer (`room_view.rs`).
    pub(crate) room_views: RoomViews,
    /// Cancelled when the instance shuts down (by `startup`, on a signal):
    /// live event streams end then, so that they do not hold the graceful
    /// shutdown up.
    pub(crate) shutdown: CancellationToken,
}

/// The index's state on one instance.
pub(crate) struct IndexCache {
    /// The first page as last built, shared by every request of this
    /// instance (one rebuild at a time, see `single_flight.rs`). A sale created on
    /// this instance drops it ([`IndexCache::forget`]): its admin expects to
    /// see it listed.
    pub(crate) first: SingleFlight<Bytes>,
    /// Pages after the first are built per request; at most
    /// [`ARCHIVE_BUILDS`] at once, the rest wait their turn. A cap on a
    /// resource, not a guard against a race: anyone can ask for `/?page=2`
    /// in a loop, and each build holds one of the instance's few PostgreSQL
    /// connections, which the worker and the sale pages need too.
    pub(crate) archive: Semaphore,
}

/// Pages after the first built at once per instance (see [`IndexCache`]).
const ARCHIVE_BUILDS: usize = 2;

impl Default for IndexCache {
    fn default() -> Self {
        Self {
            first: SingleFlight::default(),
            archive: Semaphore::new(ARCHIVE_BUILDS),
        }
    }
}

impl IndexCache {
    /// Build the first page again at the next request.
    pub(crate) fn forget(&self) {
        self.first.forget();
    }
}
