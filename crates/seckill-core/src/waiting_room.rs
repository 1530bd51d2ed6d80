//! A sale's waiting room: the line in Redis, and what a buyer is told.
//!
//! Every visit (a join, or a buyer asking where they stand) runs one
//! script (`lua/room_visit.lua`) that also admits whoever's turn has come:
//! the room is advanced by whichever instance is asked, at most
//! `admit_per_sec` a second and never beyond `max_active` admitted at
//! once, on Redis' clock. So the line is one for every instance, and
//! outlives any of them. The passes a buyer is handed (a ticket, an
//! admission) are signed here with the database's key (`domain/room_rules.rs`).
//!
//! The room closes when the sale sells out or ends, and opens again when
//! a unit comes back (the script reads the sale's stock). Its keys go the
//! store's grace after the sale ends (`--room-grace-secs`, an hour by
//! default, [`Store::room_grace`]): each is given that expiry by the
//! scripts that write it, so no pass over ended sales is needed.
//!
//! An instance may also [`look`] at the whole room (a visit for nobody,
//! which also reads where the buyers it names stand) and answer buyers
//! from that look: far back in line by their number alone
//! ([`Standing::of_number`]), the others from the look's answer for them;
//! the web crate's `room_view.rs` does, so that a polling crowd costs
//! Redis one visit per moment, not one per answer.
//!
//! A buyer who stops asking has left: the script notes every visit of a
//! buyer in line, and when the turn of one not seen for the store's
//! abandon time comes (`--room-abandon-secs`, [`Store::room_abandon`]),
//! drops them and counts them `abandoned` instead of wasting an admission
//! on them. [`figures`] reads what `/metrics` and the live page show.

use std::sync::LazyLock;
use std::time::Duration;

use anyhow::Context;
use hmac::Mac;
use redis::Script;

use crate::domain::{PassKey, RoomMode, RoomSettings, Sale, UserId};
use crate::keys::SaleKeys;
use crate::queue::queue_script;
use crate::replicas;
use crate::store::Store;

static VISIT: LazyLock<Script> = queue_script!("lua/room_visit.lua");

/// Where a buyer stands in a room.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// Not in the room (never joined, or asked with a ticket of a room
    /// that was wiped).
    Outside,
    /// In line: `number` is the order the room serves in (arrival, or
    /// the lottery's draw), `ahead` the buyers before them now.
    Waiting { number: u64, ahead: u64 },
    /// Admitted until this moment (ms since the epoch).
    Admitted { until_ms: i64 },
    /// Their admission bought.
    Bought,
}

/// What a visit found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Standing {
    pub place: Place,
    /// Buyers in line.
    pub waiting: u64,
    /// The sale sold out or ended: nobody more is admitted.
    pub closed: bool,
    /// Admissions per second since the first, as observed; `None` before
    /// a second of them.
    pub observed_per_sec: Option<f64>,
    /// Redis' clock at the visit, ms since the epoch.
    pub now_ms: i64,
    /// The number of the first buyer in line; `None` when nobody waits.
    pub head: Option<u64>,
    /// How many buyers the lottery drew (those who joined before the
    /// open, their numbers below [`LOTTERY_LATE`]); 0 in a `fifo` room.
    pub drawn: u64,
    /// This visit's join was refused: the line holds the room's
    /// `max_line` buyers.
    pub line_full: bool,
    /// Admitted buyers who have neither bought nor run out: the room
    /// admits nobody more while they are `max_active`.
    pub active: u64,
    /// When the first of the active buyers' admissions runs out (ms since
    /// the epoch, Redis' clock); `None` with nobody active. While the
    /// room is full, the latest moment a place opens.
    pub next_free_ms: Option<i64>,
    /// The line's generation: when its first place was handed out (ms,
    /// Redis' clock); 0 before anyone joined. A line Redis lost and began
    /// again has another, so a ticket, which carries the generation it was
    /// given in, is never read as a place in a line it was not in.
    pub born_ms: i64,
    /// Whether the visit's writes (a join, admissions, a buyer seen) are
    /// held as `--redis-durability` asks: always under `local`; under
    /// `replica`, once a replica acknowledged them. An answer on writes a
    /// failover could take back (a place that vanishes, an admission
    /// Redis forgets) is not to be given: the web crate answers `503`.
    pub confirmed: bool,
}

/// The most buyers a [`look`] is asked to read the places of: each costs
/// the look's script a few µs of Redis (three or four reads; a lottery's
/// drawn place a walk of the line too), so that a look stays within a
/// millisecond or two at a million buyers (docs/bench.md).
pub const TRACKED_MAX: usize = 200;

/// A lottery's places: those drawn at a join before the open are below
/// this (`lua/room_visit.lua`), a later joiner's is this plus their
/// arrival number.
pub const LOTTERY_LATE: u64 = 1 << 44;

impl Standing {
    /// Seconds until this buyer's turn: the time left to the open (ms
    /// since the epoch), then their place at the rate actually observed
    /// (the room's setting before there is one).
    ///
    /// While the room is full of admitted buyers who have not bought, the
    /// line moves only when one buys or runs out: the wait starts from the
    /// first place to open at the latest ([`Self::full_for_secs`]), not
    /// from now, so that it does not shrink while nothing moves; and that
    /// place is the head's, so the head's wait is exactly that.
    pub fn eta_secs(&self, room: &RoomSettings, opens_ms: i64) -> Option<f64> {
        let Place::Waiting { ahead, .. } = self.place else {
            return None;
        };
        let rate = self
            .observed_per_sec
            .unwrap_or(f64::from(room.admit_per_sec))
            .max(f64::MIN_POSITIVE);
        let to_open = (opens_ms - self.now_ms).max(0) as f64 / 1000.0;
        // A full room's first free place goes to the head of the line at
        // once: the head waits for it alone, as the page's "at the latest
        // in" says, and each buyer behind waits one admission more.
        let (start, turns) = match self.full_for_secs(room) {
            Some(to_free) => (to_open.max(to_free), ahead),
            None => (to_open, ahead + 1),
        };
        Some(start + turns as f64 / rate)
    }

    /// While every place among the active is taken (`max_active` admitted
    /// buyers who have neither bought nor run out): the seconds until the
    /// first of their admissions runs out, the latest a place opens (one
    /// opens sooner when one of them buys). `None` while the room has a
    /// free place.
    pub fn full_for_secs(&self, room: &RoomSettings) -> Option<f64> {
        let next_free = self.next_free_ms?;
        (self.active >= u64::from(room.max_active))
            .then(|| (next_free - self.now_ms).max(0) as f64 / 1000.0)
    }

    /// Where the buyer of `number` stands, judged from this standing (a
    /// look at the whole room, `age` ago) without asking Redis: `Some`
    /// only when they were in line then, far enough behind its head that
    /// the room cannot have reached them since (at most a second's
    /// admissions at once, then `admit_per_sec`); `None` when Redis must
    /// be asked. Numbers by arrival have no gaps (buyers leave the line
    /// only at its head), so the buyers ahead are `number - head`. A
    /// lottery's drawn numbers (below [`LOTTERY_LATE`]) have gaps, so
    /// nobody is judged while a drawn buyer is still at the head.
    ///
    /// What is answered so is as old as the look: a room that closed, or
    /// a head that moved on by abandoned buyers, is seen at the next look.
    pub fn of_number(&self, number: u64, room: &RoomSettings, age: Duration) -> Option<Standing> {
        let head = self.head?;
        if number == 0 || (room.mode == RoomMode::Lottery && head <= LOTTERY_LATE) {
            return None;
        }
        let reach = (f64::from(room.admit_per_sec) * (1.0 + age.as_secs_f64())).ceil() as u64 + 1;
        let ahead = number.checked_sub(head)?;
        if ahead < reach {
            return None;
        }
        Some(Standing {
            place: Place::Waiting { number, ahead },
            now_ms: self.now_ms + i64::try_from(age.as_millis()).unwrap_or(i64::MAX),
            ..*self
        })
    }
}

/// Join sale's room as `buyer` (if not in it yet), or only ask
/// (`join: false`), admitting whoever's turn has come on the way.
pub async fn visit(
    store: &Store,
    sale: &Sale,
    room: &RoomSettings,
    buyer: &UserId,
    join: bool,
) -> anyhow::Result<Standing> {
    let (standing, _) = run_visit(store, sale, room, buyer.as_str(), join, (&[], &[])).await?;
    Ok(standing)
}

/// What a [`look`] found beyond the room's standing.
#[derive(Debug, Clone, Default)]
pub struct Looked {
    /// Where each buyer tracked stands, in the order asked.
    pub places: Vec<Place>,
    /// The buyers seen who were not in line: admitted since they were
    /// answered, or their place lost (`lua/room_visit.lua`).
    pub unseen: Vec<String>,
}

/// A look at the whole room (a visit for nobody), admitting whoever's
/// turn has come on the way, noting `seen` (buyers an instance answered
/// from its last look, `web/room_view.rs`) as having asked now, and
/// reading where each of `tracked` stands, in the same step: the place of
/// each, and which of `seen` were not in line, beside the room's standing
/// (whose place is nobody's, [`Place::Outside`]).
pub async fn look(
    store: &Store,
    sale: &Sale,
    room: &RoomSettings,
    seen: &[String],
    tracked: &[String],
) -> anyhow::Result<(Standing, Looked)> {
    run_visit(store, sale, room, "", false, (seen, tracked)).await
}

/// `lua/room_visit.lua` for `buyer` ("" for nobody), and `(seen, tracked)`.
async fn run_visit(
    store: &Store,
    sale: &Sale,
    room: &RoomSettings,
    buyer: &str,
    join: bool,
    (seen, tracked): (&[String], &[String]),
) -> anyhow::Result<(Standing, Looked)> {
    let keys = SaleKeys::new(store.prefix(), sale.id);
    let seed = match room.mode {
        RoomMode::Lottery => lottery_seed(store.pass_key().await?, sale.id),
        RoomMode::Fifo => String::new(),
    };
    let mut conn = store.redis().await?;
    let mut script = VISIT.prepare_invoke();
    script
        .key(&keys.room.line)
        .key(&keys.room.admitted)
        .key(&keys.room.bought)
        .key(&keys.room.state)
        .key(&keys.stock)
        .key(&keys.room.seen)
        .key(&keys.holds)
        .arg(buyer)
        .arg(u8::from(join))
        .arg(room.admit_per_sec)
        .arg(room.max_active)
        .arg(u64::from(room.admission_secs) * 1000)
        .arg(sale.starts_at.timestamp_millis())
        .arg(sale.ends_at.map_or(0, |end| end.timestamp_millis()))
        .arg(u8::from(room.mode == RoomMode::Lottery))
        .arg(&seed)
        .arg(u64::try_from(store.room_abandon().as_millis()).unwrap_or(u64::MAX))
        .arg(u64::try_from(store.room_grace().as_millis()).unwrap_or(u64::MAX))
        .arg(room.max_line.unwrap_or(0))
        .arg(seen.len())
        .arg(seen)
        .arg(tracked);
    // Under `replica`, a `WAIT` rides behind the script, on its
    // connection (`replicas.rs`): a join or an admission is told only once
    // a replica holds it.
    #[allow(clippy::type_complexity)]
    let ((header, places, unseen), confirmed): ((Vec<i64>, Vec<i64>, Vec<String>), bool) =
        replicas::run_and_confirm(&mut conn, &VISIT, &script, store.durability(), &keys.waited)
            .await
            .context("visiting a waiting room")?;
    let reply: [i64; 15] = header
        .try_into()
        .map_err(|header: Vec<i64>| anyhow::anyhow!("a visit answered {} numbers", header.len()))?;
    let [
        standing,
        value,
        ahead,
        waiting,
        closed,
        admitted,
        first,
        now_ms,
        told,
        head,
        drawn,
        full,
        active,
        next_free,
        born,
    ] = reply;
    if told > 0 {
        // Logged once, at the open, so that the draw can be checked: each
        // drawn place is 1 + the first 40 bits of SHA1("{seed}:{buyer}")
        // (`lua/room_visit.lua`). Not before: a seed known before the open
        // would let a bot pick ids that draw well.
        tracing::info!(
            sale_id = sale.id,
            %seed,
            drawn = told,
            "waiting room: lottery drawn"
        );
    }
    let count = |n: i64| u64::try_from(n).unwrap_or(0);
    let elapsed_secs = (now_ms - first) as f64 / 1000.0;
    let standing = Standing {
        place: Place::read(standing, value, ahead),
        waiting: count(waiting),
        closed: closed == 1,
        observed_per_sec: (first > 0 && elapsed_secs >= 1.0)
            .then(|| admitted as f64 / elapsed_secs),
        now_ms,
        head: (head > 0).then(|| count(head)),
        drawn: count(drawn),
        line_full: full == 1,
        active: count(active),
        next_free_ms: (next_free > 0).then_some(next_free),
        born_ms: born,
        confirmed,
    };
    let places = places
        .chunks_exact(3)
        .map(|three| Place::read(three[0], three[1], three[2]))
        .collect();
    Ok((standing, Looked { places, unseen }))
}

impl Place {
    /// A place as `lua/room_visit.lua` returns it: its standing code, and
    /// the place's number (or the admission's end) and buyers ahead.
    fn read(standing: i64, value: i64, ahead: i64) -> Self {
        let count = |n: i64| u64::try_from(n).unwrap_or(0);
        match standing {
            1 => Place::Waiting {
                number: count(value),
                ahead: count(ahead),
            },
            2 => Place::Admitted { until_ms: value },
            3 => Place::Bought,
            _ => Place::Outside,
        }
    }
}

/// A room's figures, as `/metrics` and the live page report them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct RoomFigures {
    /// Buyers in line.
    pub waiting: u64,
    /// Admitted buyers who have neither bought nor run out (the active).
    pub admitted: u64,
    /// Buyers whose admission bought.
    pub bought: u64,
    /// Admissions handed out, in all.
    pub admissions: u64,
    /// Admissions that ran out unused, in all.
    pub expired: u64,
    /// Buyers dropped from the line because they had stopped asking
    /// (`--room-abandon-secs`) when their turn came, in all: the room
    /// admitted the next in their place.
    pub abandoned: u64,
}

/// Sale's room figures, in one round trip (a snapshot: each is read at
/// the same moment, in one `MULTI`). An admission that ran out is counted
/// as expired at once, on this instance's clock, though the room itself
/// sweeps it at its next visit (`lua/room_visit.lua`): a room nobody asks
/// still shows its active truly.
pub async fn figures(store: &Store, sale_id: i64) -> anyhow::Result<RoomFigures> {
    let keys = SaleKeys::new(store.prefix(), sale_id);
    let now_ms = chrono::Utc::now().timestamp_millis();
    let mut conn = store.redis().await?;
    #[allow(clippy::type_complexity)]
    let (waiting, active, ran_out, holding, returned, totals): (
        u64,
        u64,
        u64,
        u64,
        u64,
        (Option<u64>, Option<u64>, Option<u64>),
    ) = redis::pipe()
        .atomic()
        .zcard(&keys.room.line)
        .zcount(&keys.room.admitted, format!("({now_ms}"), "+inf")
        .zcount(&keys.room.admitted, "-inf", now_ms)
        // Who bought: those who hold a unit, and those whose unit came
        // back (no buyer is in both: keys.rs, RoomKeys::bought).
        .hlen(&keys.holds)
        .scard(&keys.room.bought)
        .cmd("HMGET")
        .arg(&keys.room.state)
        .arg("admitted")
        .arg("expired")
        .arg("abandoned")
        .query_async(&mut conn)
        .await
        .context("reading a waiting room's figures")?;
    Ok(RoomFigures {
        waiting,
        admitted: active,
        bought: holding + returned,
        admissions: totals.0.unwrap_or(0),
        expired: totals.1.unwrap_or(0) + ran_out,
        abandoned: totals.2.unwrap_or(0),
    })
}

/// Whether sale's room is closed: sold out or ended, the rule of
/// `lua/room_visit.lua` (a stock not loaded counts as open), on this
/// instance's clock rather than Redis'.
pub fn closed(sale: &Sale, stock_left: Option<i64>, now: chrono::DateTime<chrono::Utc>) -> bool {
    stock_left.is_some_and(|left| left <= 0) || sale.ends_at.is_some_and(|end| now >= end)
}

/// The lottery's seed for a sale: drawn from the database's key, so that
/// nobody outside can foresee the draw, and the same for every instance.
/// 128 bits, as 32 hex digits: a drawn place is told at the join, before
/// the open, so a seed that could be tried exhaustively (a 31-bit one:
/// about 2^31 SHA1s, a minute on a laptop) would be found from one place,
/// and with it the ids that draw the front of the line.
fn lottery_seed(key: &PassKey, sale_id: i64) -> String {
    let digest = key
        .mac_of(&format!("lottery:{sale_id}"))
        .finalize()
        .into_bytes();
    digest[..16]
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

mod door;
#[cfg(test)]
mod tests;

pub use door::{AtTheDoor, admission, at_the_door, at_the_door_all, bought, bought_reads, seat};
