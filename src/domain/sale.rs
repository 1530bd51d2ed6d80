use chrono::{DateTime, Utc};

/// A sale as stored in PostgreSQL. Everything here is fixed when the sale is
/// created, so app instances may cache it; what changes (units left) lives in
/// Redis, and the confirmed count in `sales.sold`.
#[derive(Debug, Clone, PartialEq, Eq, sqlx::FromRow, serde::Serialize)]
pub struct Sale {
    pub id: i64,
    pub name: String,
    pub price_cents: i64,
    pub stock_total: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
}

/// Whether a sale takes purchases at a given moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Window {
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
    pub fn window(&self, now: DateTime<Utc>) -> Window {
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

/// A sale that passed validation and may be inserted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewSale {
    pub name: String,
    pub price_cents: i64,
    pub stock_total: i32,
    pub starts_at: DateTime<Utc>,
    pub ends_at: Option<DateTime<Utc>>,
}

impl NewSale {
    pub const MAX_STOCK: i64 = 1_000_000;
    pub const MAX_NAME_CHARS: usize = 100;
    pub const MAX_PRICE_CENTS: i64 = 100_000_000_000;

    /// Check a sale request. `starts_at` defaults to `now`.
    pub fn parse(
        name: &str,
        stock: i64,
        price_cents: i64,
        starts_at: Option<DateTime<Utc>>,
        ends_at: Option<DateTime<Utc>>,
        now: DateTime<Utc>,
    ) -> Result<Self, String> {
        let name = name.trim();
        if name.is_empty() {
            return Err("name must not be empty".into());
        }
        if name.chars().count() > Self::MAX_NAME_CHARS {
            return Err(format!(
                "name must be at most {} characters",
                Self::MAX_NAME_CHARS
            ));
        }
        if name.chars().any(char::is_control) {
            return Err("name must not contain control characters".into());
        }
        if !(1..=Self::MAX_STOCK).contains(&stock) {
            return Err(format!("stock must be between 1 and {}", Self::MAX_STOCK));
        }
        if !(0..=Self::MAX_PRICE_CENTS).contains(&price_cents) {
            return Err(format!(
                "price_cents must be between 0 and {}",
                Self::MAX_PRICE_CENTS
            ));
        }
        let starts_at = starts_at.unwrap_or(now);
        if let Some(end) = ends_at {
            if end <= starts_at {
                return Err("ends_at must be after starts_at".into());
            }
            if end <= now {
                return Err("ends_at must be in the future".into());
            }
        }
        Ok(Self {
            name: name.to_owned(),
            price_cents,
            stock_total: i32::try_from(stock).expect("stock was checked against MAX_STOCK"),
            starts_at,
            ends_at,
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
        let ok = |name: &str, stock, price| NewSale::parse(name, stock, price, None, None, now);
        assert!(ok("phone", 10, 999).is_ok());
        assert!(ok("  ", 10, 999).is_err());
        assert!(ok(&"n".repeat(101), 10, 999).is_err());
        assert!(ok("phone", 0, 999).is_err());
        assert!(ok("phone", -3, 999).is_err());
        assert!(ok("phone", NewSale::MAX_STOCK + 1, 999).is_err());
        assert!(ok("phone", 10, -1).is_err());
        let before = now - Duration::seconds(10);
        assert!(NewSale::parse("p", 1, 0, Some(now), Some(before), now).is_err());
        assert!(
            NewSale::parse(
                "p",
                1,
                0,
                Some(before - Duration::seconds(10)),
                Some(before),
                now
            )
            .is_err()
        );
        let later = now + Duration::seconds(10);
        assert_eq!(
            NewSale::parse("p", 1, 0, None, Some(later), now)
                .unwrap()
                .starts_at,
            now
        );
    }
}
