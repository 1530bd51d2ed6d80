//! The purchase path: who gets a unit. This is the lesson; read it top to bottom.
//!
//! A purchase must (1) check that the buyer has not bought yet, (2) check
//! that a unit is left, (3) take the unit, (4) remember the buyer and (5)
//! queue the order for PostgreSQL. Steps 1-2 read and steps 3-5 write; if two
//! purchases interleave between the read and the write, both see "1 left" and
//! both take it. That is the oversell.
//!
//! What keeps them apart is the strategy, one file each in `src/strategy/`:
//! - `lock` (the default) takes the sale's Redis lock around the five steps,
//!   so purchases of one sale run one at a time across every app instance,
//!   and fences the writes so that a holder whose lock expired cannot write
//!   (see `lua/purchase_commit.lua`). The buyers waiting on one instance go
//!   through the lock together, one read and one write for all of them.
//! - `naive` is DELIBERATELY BROKEN: it reads, pauses, and writes "stock
//!   minus one" with no lock. It oversells, and exists so the demo and the
//!   tests can show that it does.
//! - `article`, `getset` and `decr` are the articles' and tutorials' ways,
//!   bugs included (DELIBERATELY BROKEN); `lua` (one Redis script) and
//!   `postgres` (one conditional UPDATE) are the correct ways without a
//!   lock. Each file says what it gets wrong or what it costs.
//!
//! This file does what comes before any strategy: the sale's window, and
//! the sold-out shortcut. Requests for a sale that is sold out do not take
//! the lock at all: each instance keeps a "sold out" flag per sale, set
//! whenever a purchase sees no units left and trusted for a short while
//! before it is checked against Redis again.

use std::sync::Arc;
use std::time::Duration;

use chrono::Utc;
use tracing::Instrument;

use crate::config::Strategy;
use crate::domain::{Sale, UserId, Window};
use prometheus::{Histogram, IntCounter};

use crate::metrics::metrics;
use crate::strategy::{Buy, Flag, Lanes, Shop, article, decr, getset, naive, postgres};
use crate::tally::{self, Tally};

/// How long a purchase Redis did not answer waits for PostgreSQL to say
/// whether its buyer holds a unit already ([`Purchaser::held_in_postgres`]):
/// an outage's answers stay quick when PostgreSQL is slow too.
const HELD_LOOKUP: Duration = Duration::from_millis(250);
/// How many of those lookups an instance makes at once.
const HELD_LOOKUPS: usize = 4;

pub use crate::strategy::Outcome;

/// Runs purchases. One per app instance, shared by all requests.
pub struct Purchaser {
    /// The instance's handles and memory, shared with the strategies.
    shop: Shop,
    /// The per-sale queues of waiting buyers of `lock` and `lua`.
    lanes: Lanes,
    /// This instance's count of its answers, by sale, for the live page.
    /// Shared with the task that flushes it into Redis (`startup.rs`).
    tally: Arc<Tally>,
    /// This strategy's figures in `/metrics`, looked up once: a label
    /// lookup takes a lock and a hash per call, which every purchase
    /// would pay.
    figures: StrategyFigures,
    /// Turns for asking PostgreSQL whether a buyer Redis could not answer
    /// holds a unit ([`Purchaser::held_in_postgres`]); [`HELD_LOOKUPS`].
    held_lookups: tokio::sync::Semaphore,
}

/// A strategy's purchase figures, by answer (in `tally::FIELDS` order,
/// then `error`), and its latency.
struct StrategyFigures {
    answers: Vec<IntCounter>,
    errors: IntCounter,
    seconds: Histogram,
}

impl StrategyFigures {
    fn of(strategy: Strategy) -> Self {
        let metrics = metrics();
        let strategy = strategy.as_str();
        let counter = |answer: &str| metrics.purchases.with_label_values(&[strategy, answer]);
        Self {
            answers: tally::FIELDS.iter().map(|answer| counter(answer)).collect(),
            errors: counter("error"),
            seconds: metrics.purchase_seconds.with_label_values(&[strategy]),
        }
    }
}

impl Purchaser {
    pub fn new(shop: Shop) -> Self {
        Self {
            figures: StrategyFigures::of(shop.settings.strategy),
            shop,
            lanes: Lanes::default(),
            tally: Arc::default(),
            held_lookups: tokio::sync::Semaphore::new(HELD_LOOKUPS),
        }
    }

    /// Forget what this instance keeps in memory of the sales that ended
    /// before `before`: the catalog's copy, the sale's lane, the
    /// sold-out flag, the lock's release notifier, the answer counts (sent
    /// to Redis with the next flush). Without it every sale ever served
    /// would stay for the life of the process. A request for such a sale
    /// later reads it from PostgreSQL again and is answered `ended`.
    /// Returns how many sales were forgotten.
    pub fn forget_ended(&self, before: chrono::DateTime<Utc>) -> usize {
        let catalog = self.shop.store.catalog();
        let ended = catalog.ended_before(before);
        for &sale_id in &ended {
            self.lanes.forget(sale_id);
            self.shop.sold_out.clear(sale_id);
            self.shop.released.forget(sale_id);
            catalog.forget(sale_id);
        }
        self.tally.forget(&ended);
        ended.len()
    }

    /// How many sales this instance keeps something of in memory, in all
    /// (the sum over the maps [`Purchaser::forget_ended`] empties).
    pub fn sales_in_memory(&self) -> usize {
        self.shop.store.catalog().len()
            + self.lanes.len()
            + self.shop.sold_out.len()
            + self.shop.released.len()
            + self.tally.len()
    }

    /// The answer counts, for the task that flushes them into Redis.
    pub fn tally(&self) -> &Arc<Tally> {
        &self.tally
    }

    pub(crate) fn strategy(&self) -> Strategy {
        self.shop.settings.strategy
    }

    /// Whether this instance's strategy checks and spends a waiting room's
    /// admission in its own commit ([`Strategy::spends_admissions`]).
    pub fn spends_admissions(&self) -> bool {
        self.strategy().spends_admissions()
    }

    /// Try to buy one unit of `sale` for `user`, and count the answer.
    pub async fn purchase(&self, sale: &Sale, user: &UserId) -> anyhow::Result<Outcome> {
        let started = std::time::Instant::now();
        let decided = self.decide(sale, user).await;
        // `lock` and `lua` name a holder's order when Redis answers (the
        // sale's holds); the same answer when it did not. Not when this
        // attempt names an order of its own in doubt (`503 unconfirmed`
        // with its id): that answer stays, since the order may yet land.
        let unanswered = match &decided {
            Err(error) => crate::failure::transient(error),
            Ok(outcome) => matches!(outcome, Outcome::Unconfirmed { order_id: None }),
        };
        let decided = match unanswered && matches!(self.strategy(), Strategy::Lock | Strategy::Lua)
        {
            true => self.held_in_postgres(sale.id, user, decided).await,
            false => decided,
        };
        let figures = &self.figures;
        figures.seconds.observe(started.elapsed().as_secs_f64());
        match &decided {
            Ok(outcome) => figures.answers[tally::slot(outcome)].inc(),
            Err(_) => figures.errors.inc(),
        }
        let outcome = decided?;
        // In memory only: the tally's own task takes it to Redis, so the
        // count adds no round trip to the buyer's wait.
        self.tally.count(sale.id, &outcome);
        Ok(outcome)
    }

    /// Redis did not answer the purchase (`decided` is an error, or `503
    /// unconfirmed` naming no order): a buyer whose unit PostgreSQL holds
    /// already is told so, with the order, not `503`: a winner whose `202`
    /// was lost learns it even in an outage. The order happened, and
    /// PostgreSQL has the last word on it: a Redis that comes back empty
    /// is loaded from it, the buyer's unit kept. Anyone else, and everyone
    /// when PostgreSQL does not answer within [`HELD_LOOKUP`] either or
    /// [`HELD_LOOKUPS`] are under way, gets `decided`.
    async fn held_in_postgres(
        &self,
        sale_id: i64,
        user: &UserId,
        decided: anyhow::Result<Outcome>,
    ) -> anyhow::Result<Outcome> {
        // A few at a time: in an outage every buyer's request fails, and
        // each looking PostgreSQL up would queue ahead of the worker's
        // writes and the buyers' payments on the same pool. The others
        // keep their `503`.
        let Ok(_turn) = self.held_lookups.try_acquire() else {
            return decided;
        };
        let store = &self.shop.store;
        match tokio::time::timeout(HELD_LOOKUP, store.held_order(sale_id, user.as_str())).await {
            Ok(Ok(Some(order_id))) => Ok(Outcome::AlreadyPurchased {
                order_id: Some(order_id),
            }),
            _ => decided,
        }
    }

    async fn decide(&self, sale: &Sale, user: &UserId) -> anyhow::Result<Outcome> {
        // The sale's window is checked on this instance's clock: sale times
        // are wall-clock promises to people, and instances are expected to
        // run NTP. (Queue timing, which decides redelivery, uses Redis' clock.)
        match sale.window(Utc::now()) {
            Window::NotStarted => return Ok(Outcome::NotStarted),
            Window::Ended => return Ok(Outcome::Ended),
            Window::Open => {}
        }
        // Sold out, as far as this instance knows: answer without touching Redis.
        // Not to a buyer who may hold a unit (`strategy/sold_out.rs`).
        if self.shop.sold_out_for(sale.id, &[user]) == Flag::SoldOut {
            return Ok(Outcome::SoldOut);
        }
        // What follows talks to Redis and may log. With `lock` and `lua` it
        // runs in the sale lane's task, under that task's span (`lanes.rs`): this
        // request only waits for its answer, and logs nothing. With the
        // other strategies it runs here, in a span that names the sale and
        // the buyer. The answers above log nothing and open none: a span
        // costs every request that opens it (its fields formatted, an entry
        // made and freed), and sold-out answers are most of a burst's.
        if matches!(self.strategy(), Strategy::Lock | Strategy::Lua) {
            let roomed = sale.waiting_room.is_some();
            return self.lanes.purchase(&self.shop, sale.id, roomed, user).await;
        }
        let span = tracing::info_span!(
            "purchase",
            sale_id = sale.id,
            user_id = %user,
            strategy = ?self.strategy(),
        );
        self.contend(sale, user).instrument(span).await
    }

    /// The strategy's part of a purchase of a sale this instance does not
    /// know to be sold out, for every strategy but `lock` and `lua` (their
    /// sale lanes take their purchases).
    async fn contend(&self, sale: &Sale, user: &UserId) -> anyhow::Result<Outcome> {
        let strategy = self.strategy();
        let (keys, mut conn) = match self.shop.ready(sale.id, &[user]).await? {
            Ok(ready) => ready,
            Err(told) => return Ok(told),
        };
        let buy = Buy {
            shop: &self.shop,
            keys: &keys,
            sale_id: sale.id,
            user,
        };
        let conn = &mut conn;
        match strategy {
            Strategy::Lock | Strategy::Lua => unreachable!("handled by `decide`"),
            Strategy::Naive => naive::purchase(buy, conn).await,
            Strategy::Article => article::purchase(buy, conn).await,
            Strategy::Getset => getset::purchase(buy, conn).await,
            Strategy::Postgres => postgres::purchase(buy, conn).await,
            Strategy::Decr => decr::purchase(buy, conn).await,
        }
    }
}
