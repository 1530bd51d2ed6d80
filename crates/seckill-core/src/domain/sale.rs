use chrono::{DateTime, Utc};

use super::{RoomMode, RoomSettings};

/// A sale as stored in PostgreSQL. Everything here is fixed when the sale is
/// created, so app instances may cache it; what changes (units left) lives in
/// Redis, and the confirmed count in `sales.sold`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Sale {
    pub id: i64,
    pub name: String,
    pub price_cents: i64,
    pub stock_total: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
    /// The sale's waiting room; `None`: anyone may buy at once.
    pub waiting_room: Option<RoomSettings>,
}

/// A row of `sales` (the columns `store::SALE_COLUMNS` names): the room's
/// four columns are all set or all NULL (a constraint says so).
impl<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> for Sale {
    fn from_row(row: &'r sqlx::postgres::PgRow) -> Result<Self, sqlx::Error> {
        use sqlx::Row;
        let mode: Option<String> = row.try_get("room_mode")?;
        let number = |column: &str| -> Result<u32, sqlx::Error> {
            let value: Option<i32> = row.try_get(column)?;
            value
                .and_then(|v| u32::try_from(v).ok())
                .ok_or_else(|| sqlx::Error::ColumnDecode {
                    index: column.to_owned(),
                    source: "a room setting NULL or negative beside a room mode".into(),
                })
        };
        let waiting_room = match mode {
            None => None,
            Some(mode) => Some(RoomSettings {
                mode: RoomMode::parse(&mode).ok_or_else(|| sqlx::Error::ColumnDecode {
                    index: "room_mode".to_owned(),
                    source: format!("unknown room mode {mode:?}").into(),
                })?,
                admit_per_sec: number("room_admit_per_sec")?,
                max_active: number("room_max_active")?,
                admission_secs: number("room_admission_secs")?,
                max_line: row
                    .try_get::<Option<i32>, _>("room_max_line")?
                    .and_then(|cap| u32::try_from(cap).ok()),
            }),
        };
        Ok(Self {
            id: row.try_get("id")?,
            name: row.try_get("name")?,
            price_cents: row.try_get("price_cents")?,
            stock_total: row.try_get("stock_total")?,
            starts_at: row.try_get("starts_at")?,
            ends_at: row.try_get("ends_at")?,
            waiting_room,
        })
    }
}

/// Whether a sale takes purchases at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Window {
    NotStarted,
    Open,
    Ended,
}

/// The status shown to buyers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SaleStatus {
    Upcoming,
    Live,
    SoldOut,
    Ended,
}

impl SaleStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Upcoming => "upcoming",
            Self::Live => "live",
            Self::SoldOut => "sold_out",
            Self::Ended => "ended",
        }
    }

    /// The status for people.
    pub fn label(self) -> &'static str {
        match self {
            Self::Upcoming => "upcoming",
            Self::Live => "live",
            Self::SoldOut => "sold out",
            Self::Ended => "ended",
        }
    }
}

impl Sale {
    pub(crate) fn window(&self, now: DateTime<Utc>) -> Window {
        if now < self.starts_at {
            Window::NotStarted
        } else if self.ends_at.is_some_and(|end| now >= end) {
            Window::Ended
        } else {
            Window::Open
        }
    }

    pub fn status(&self, now: DateTime<Utc>, stock_left: i64) -> SaleStatus {
        match self.window(now) {
            Window::NotStarted => SaleStatus::Upcoming,
            Window::Ended => SaleStatus::Ended,
            Window::Open if stock_left <= 0 => SaleStatus::SoldOut,
            Window::Open => SaleStatus::Live,
        }
    }
}

/// A sale that passed validation and may be inserted. Made only by
/// [`NewSaleBuilder::build`], which every caller uses: the JSON API, the
/// admin form, `seckill sale create` and the demo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSale {
    pub(crate) name: String,
    pub(crate) price_cents: i64,
    pub(crate) stock_total: i32,
    pub(crate) starts_at: DateTime<Utc>,
    pub(crate) ends_at: Option<DateTime<Utc>>,
    pub(crate) waiting_room: Option<RoomSettings>,
}

/// Why a sale request was refused; the message is what the user reads,
/// naming the field as the JSON API and the command line name it ("stock
/// must be between 1 and 1000000"). A form that labels its fields in its
/// own words writes its label before [`rule`](Self::rule) instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidSale {
    #[error("name {}", self.rule())]
    EmptyName,
    #[error("name {}", self.rule())]
    NameTooLong,
    #[error("name {}", self.rule())]
    ControlCharacter,
    #[error("stock {}", self.rule())]
    Stock,
    #[error("price_cents {}", self.rule())]
    Price,
    #[error("a sale opens between now and {max} seconds from now", max = NewSale::MAX_SCHEDULE_SECS)]
    StartsTooLate,
    #[error("a sale lasts between 1 and {max} seconds", max = NewSale::MAX_SCHEDULE_SECS)]
    Duration,
    #[error("starts_at {}", self.rule())]
    StartsBeforeEpoch,
    #[error("ends_at {}", self.rule())]
    EndsBeforeStart,
    #[error("ends_at {}", self.rule())]
    EndsInThePast,
    #[error("waiting_room.admit_per_sec {}", self.rule())]
    RoomRate,
    #[error("waiting_room.max_active {}", self.rule())]
    RoomActive,
    #[error("waiting_room.admission_secs {}", self.rule())]
    RoomAdmission,
    #[error("waiting_room.max_line {}", self.rule())]
    RoomLine,
}

impl InvalidSale {
    /// What the value at fault must be, without naming it: "must be
    /// between 1 and 1000000". The seconds of `StartsTooLate` and
    /// `Duration` are the seconds from now until the sale opens and the
    /// seconds it stays open.
    pub fn rule(&self) -> String {
        let between = |min: i64, max: i64| format!("must be between {min} and {max}");
        match self {
            Self::EmptyName => "must not be empty".to_owned(),
            Self::NameTooLong => format!(
                "must be at most {max} characters",
                max = NewSale::MAX_NAME_CHARS
            ),
            Self::ControlCharacter => {
                "must not contain control or invisible formatting characters".to_owned()
            }
            Self::Stock => between(1, NewSale::MAX_STOCK),
            Self::Price => between(0, NewSale::MAX_PRICE_CENTS),
            Self::StartsTooLate => between(0, NewSale::MAX_SCHEDULE_SECS),
            Self::Duration => between(1, NewSale::MAX_SCHEDULE_SECS),
            // PostgreSQL keeps no time before 4713 BC: such a start, which
            // chrono reads, failed the insert, a `500`.
            Self::StartsBeforeEpoch => "must not be before 1970-01-01T00:00:00Z".to_owned(),
            Self::EndsBeforeStart => "must be after starts_at".to_owned(),
            Self::EndsInThePast => "must be in the future".to_owned(),
            Self::RoomRate => between(1, RoomSettings::MAX_ADMIT_PER_SEC.into()),
            Self::RoomActive => between(1, RoomSettings::MAX_ACTIVE.into()),
            Self::RoomAdmission => between(
                RoomSettings::MIN_ADMISSION_SECS.into(),
                RoomSettings::MAX_ADMISSION_SECS.into(),
            ),
            Self::RoomLine => between(1, RoomSettings::MAX_LINE.into()),
        }
    }
}

/// When a sale opens, as the caller said it.
#[derive(Debug, Clone, Copy)]
enum Opens {
    Now,
    At(DateTime<Utc>),
    /// Seconds from now.
    In(i64),
}

/// When a sale closes, as the caller said it.
#[derive(Debug, Clone, Copy)]
enum Closes {
    Never,
    At(DateTime<Utc>),
    /// Seconds after it opens.
    After(i64),
}

/// A sale request being put together; [`build`](Self::build) checks it.
///
/// ```
/// # use seckill_core::domain::NewSale;
/// let now = chrono::Utc::now();
/// let sale = NewSale::builder("Phone", 10).price_cents(99_900).lasts(3_600).build(now);
/// assert!(sale.is_ok());
/// // A sale must have a unit to sell.
/// assert!(NewSale::builder("Phone", 0).build(now).is_err());
/// ```
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until it is built"]
pub struct NewSaleBuilder {
    name: String,
    stock: i64,
    price_cents: i64,
    opens: Opens,
    closes: Closes,
    waiting_room: Option<RoomSettings>,
}

impl NewSale {
    pub(crate) const MAX_STOCK: i64 = 1_000_000;
    pub(crate) const MAX_NAME_CHARS: usize = 100;
    pub(crate) const MAX_PRICE_CENTS: i64 = 100_000_000_000;
    /// How far ahead a sale may open, and how long it may last: a year.
    pub(crate) const MAX_SCHEDULE_SECS: i64 = 365 * 24 * 3600;

    /// Start a sale request: free, opening now, never closing, until told otherwise.
    pub fn builder(name: impl Into<String>, stock: i64) -> NewSaleBuilder {
        NewSaleBuilder {
            name: name.into(),
            stock,
            price_cents: 0,
            opens: Opens::Now,
            closes: Closes::Never,
            waiting_room: None,
        }
    }
}

impl NewSaleBuilder {
    pub fn price_cents(mut self, price_cents: i64) -> Self {
        self.price_cents = price_cents;
        self
    }

    /// Open at this moment (in the past is fine: the sale is open at once).
    pub fn starts_at(mut self, at: DateTime<Utc>) -> Self {
        self.opens = Opens::At(at);
        self
    }

    /// Open this many seconds after `now` (the moment given to `build`).
    pub fn starts_in(mut self, secs: i64) -> Self {
        self.opens = Opens::In(secs);
        self
    }

    /// Close at this moment.
    pub fn ends_at(mut self, at: DateTime<Utc>) -> Self {
        self.closes = Closes::At(at);
        self
    }

    /// Put a waiting room in front of the sale.
    pub fn waiting_room(mut self, room: RoomSettings) -> Self {
        self.waiting_room = Some(room);
        self
    }

    /// Close this many seconds after opening.
    pub fn lasts(mut self, secs: i64) -> Self {
        self.closes = Closes::After(secs);
        self
    }

    /// Check the request against the rules, with `now` as the present.
    pub fn build(self, now: DateTime<Utc>) -> Result<NewSale, InvalidSale> {
        let name = self.name.trim();
        if name.is_empty() {
            return Err(InvalidSale::EmptyName);
        }
        if name.chars().count() > NewSale::MAX_NAME_CHARS {
            return Err(InvalidSale::NameTooLong);
        }
        if name.chars().any(super::text::is_hidden) {
            return Err(InvalidSale::ControlCharacter);
        }
        if !(1..=NewSale::MAX_STOCK).contains(&self.stock) {
            return Err(InvalidSale::Stock);
        }
        if !(0..=NewSale::MAX_PRICE_CENTS).contains(&self.price_cents) {
            return Err(InvalidSale::Price);
        }
        // Seconds are range-checked before they become dates, so that no
        // input can overflow chrono's arithmetic.
        let seconds = |secs: i64, refused: InvalidSale| {
            if (0..=NewSale::MAX_SCHEDULE_SECS).contains(&secs) {
                Ok(chrono::Duration::seconds(secs))
            } else {
                Err(refused)
            }
        };
        let starts_at = match self.opens {
            Opens::Now => now,
            Opens::At(at) => at,
            Opens::In(secs) => now + seconds(secs, InvalidSale::StartsTooLate)?,
        };
        if starts_at < DateTime::<Utc>::UNIX_EPOCH {
            return Err(InvalidSale::StartsBeforeEpoch);
        }
        let ends_at = match self.closes {
            Closes::Never => None,
            Closes::At(at) => Some(at),
            Closes::After(secs) if secs <= 0 => return Err(InvalidSale::Duration),
            Closes::After(secs) => Some(starts_at + seconds(secs, InvalidSale::Duration)?),
        };
        if let Some(end) = ends_at {
            if end <= starts_at {
                return Err(InvalidSale::EndsBeforeStart);
            }
            if end <= now {
                return Err(InvalidSale::EndsInThePast);
            }
        }
        Ok(NewSale {
            name: name.to_owned(),
            price_cents: self.price_cents,
            stock_total: i32::try_from(self.stock).expect("stock was checked against MAX_STOCK"),
            starts_at,
            ends_at,
            waiting_room: self.waiting_room.map(RoomSettings::check).transpose()?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Duration;

    fn sale(starts_in: i64, lasts: Option<i64>) -> Sale {
        let now = Utc::now();
        let starts_at = now + Duration::seconds(starts_in);
        Sale {
            id: 1,
            name: "phone".into(),
            price_cents: 99_900,
            stock_total: 10,
            starts_at,
            ends_at: lasts.map(|s| starts_at + Duration::seconds(s)),
            waiting_room: None,
        }
    }

    #[test]
    fn window_follows_the_clock() {
        let now = Utc::now();
        assert_eq!(sale(60, None).window(now), Window::NotStarted);
        assert_eq!(sale(-60, None).window(now), Window::Open);
        assert_eq!(sale(-60, Some(120)).window(now), Window::Open);
        assert_eq!(sale(-60, Some(30)).window(now), Window::Ended);
    }

    #[test]
    fn status_reports_sold_out_only_while_open() {
        let now = Utc::now();
        assert_eq!(sale(-1, None).status(now, 3), SaleStatus::Live);
        assert_eq!(sale(-1, None).status(now, 0), SaleStatus::SoldOut);
        assert_eq!(sale(60, None).status(now, 0), SaleStatus::Upcoming);
        assert_eq!(sale(-60, Some(1)).status(now, 0), SaleStatus::Ended);
    }

    #[test]
    fn new_sale_rejects_what_cannot_be_sold() {
        let now = Utc::now();
        let ok =
            |name: &str, stock, price| NewSale::builder(name, stock).price_cents(price).build(now);
        assert!(ok("phone", 10, 999).is_ok());
        assert_eq!(ok("  ", 10, 999), Err(InvalidSale::EmptyName));
        assert_eq!(ok(&"n".repeat(101), 10, 999), Err(InvalidSale::NameTooLong));
        assert_eq!(ok("a\u{7}b", 10, 999), Err(InvalidSale::ControlCharacter));
        assert_eq!(ok("phone", 0, 999), Err(InvalidSale::Stock));
        assert_eq!(ok("phone", -3, 999), Err(InvalidSale::Stock));
        assert_eq!(
            ok("phone", NewSale::MAX_STOCK + 1, 999),
            Err(InvalidSale::Stock)
        );
        assert_eq!(ok("phone", 10, -1), Err(InvalidSale::Price));
        let before = now - Duration::seconds(10);
        let sale = || NewSale::builder("p", 1);
        assert_eq!(
            sale().starts_at(now).ends_at(before).build(now),
            Err(InvalidSale::EndsBeforeStart)
        );
        assert_eq!(
            sale()
                .starts_at(before - Duration::seconds(10))
                .ends_at(before)
                .build(now),
            Err(InvalidSale::EndsInThePast)
        );
        let later = now + Duration::seconds(10);
        assert_eq!(sale().ends_at(later).build(now).unwrap().starts_at, now);
    }

    /// The API's messages name each field as its JSON does; a form puts
    /// its own label before the same rule.
    #[test]
    fn a_refusal_names_the_field_as_the_api_does_and_its_rule_reads_after_any_label() {
        for (refused, message) in [
            (InvalidSale::EmptyName, "name must not be empty"),
            (InvalidSale::Stock, "stock must be between 1 and 1000000"),
            (
                InvalidSale::Price,
                "price_cents must be between 0 and 100000000000",
            ),
            (
                InvalidSale::RoomAdmission,
                "waiting_room.admission_secs must be between 10 and 3600",
            ),
            (
                InvalidSale::StartsTooLate,
                "a sale opens between now and 31536000 seconds from now",
            ),
        ] {
            assert_eq!(refused.to_string(), message);
        }
        assert_eq!(InvalidSale::Stock.rule(), "must be between 1 and 1000000");
        assert_eq!(
            InvalidSale::StartsTooLate.rule(),
            "must be between 0 and 31536000"
        );
    }

    #[test]
    fn seconds_from_now_are_range_checked_before_they_become_dates() {
        let now = Utc::now();
        let sale = || NewSale::builder("p", 1);
        let built = sale().starts_in(60).lasts(30).build(now).unwrap();
        assert_eq!(built.starts_at, now + Duration::seconds(60));
        assert_eq!(built.ends_at, Some(now + Duration::seconds(90)));
        // Far too large to be a date: refused, not a panic.
        assert_eq!(
            sale().starts_in(10_000_000_000_000).build(now),
            Err(InvalidSale::StartsTooLate)
        );
        assert_eq!(
            sale().starts_in(-1).build(now),
            Err(InvalidSale::StartsTooLate)
        );
        assert_eq!(sale().lasts(0).build(now), Err(InvalidSale::Duration));
        assert_eq!(sale().lasts(-1).build(now), Err(InvalidSale::Duration));
        assert_eq!(
            sale().lasts(i64::MAX).build(now),
            Err(InvalidSale::Duration)
        );
    }
}
