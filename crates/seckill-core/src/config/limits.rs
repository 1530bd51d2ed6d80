//! The rate limits' settings, and whom they count: the client behind
//! the proxies we trust.

use std::ops::RangeInclusive;

use super::{InvalidSetting, within};

/// Rate limits per client, across every instance (checked in Redis), and
/// who the client is. The purchase limits are off unless set: the load
/// test and the demo send thousands of buyers from one address. The join
/// limit is on unless turned off: without it one client could fill a
/// waiting room with made-up buyer ids (see docs/storefront.md).
#[derive(Debug, Clone)]
pub struct RateLimitSettings {
    /// Purchases per second from one client IP on one sale, and admin logins from one IP, 0 to 100000; 0 turns the limit off.
    pub rate_limit_per_ip: u32,

    /// Purchases per second by one buyer id on one sale, 0 to 100000; 0 turns the limit off.
    pub rate_limit_per_buyer: u32,

    /// Requests a client may send at once beyond its steady rate, 0 to 10000.
    pub rate_limit_burst: u32,

    /// Waiting-room joins per second from one client IP on one sale, 0 to 100000; 0 turns the limit off.
    pub room_joins_per_ip: u32,

    /// Proxies whose X-Forwarded-For header is believed, as comma-separated IP addresses and CIDR ranges, e.g. 127.0.0.1,10.0.0.0/8; the client IP of the per-IP limit and the admin lock-out is then the right-most address in that header that is not one of them [default: none, the TCP peer is the client]
    pub trusted_proxies: TrustedProxies,
}

/// Waiting-room joins per second from one client address, by default: a
/// household or an office joins a few buyers, not hundreds (with the
/// burst of 10, 11 at once, then 2 a second).
const DEFAULT_ROOM_JOINS_PER_IP: u32 = 2;

impl Default for RateLimitSettings {
    fn default() -> Self {
        Self {
            rate_limit_per_ip: 0,
            rate_limit_per_buyer: 0,
            rate_limit_burst: 10,
            room_joins_per_ip: DEFAULT_ROOM_JOINS_PER_IP,
            trusted_proxies: TrustedProxies::default(),
        }
    }
}

/// The proxies whose `X-Forwarded-For` is believed: addresses and CIDR
/// ranges (an address is a range of one). Anyone can send the header, so
/// it says who the client is only when a proxy we run added to it; the
/// web crate's `client_ip.rs` reads it. Empty by default: nobody's header
/// is believed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<ipnet::IpNet>);

impl TrustedProxies {
    /// A comma-separated list of IP addresses and CIDR ranges
    /// (`127.0.0.1,10.0.0.0/8,::1`); spaces around an item and empty items
    /// are ignored. Anything else is refused, naming the item, so that a
    /// typo stops the start instead of trusting nobody (or everybody).
    pub fn parse(list: &str) -> Result<Self, String> {
        list.split(',')
            .map(str::trim)
            .filter(|item| !item.is_empty())
            .map(|item| {
                item.parse::<ipnet::IpNet>()
                    .or_else(|_| {
                        item.parse::<std::net::IpAddr>()
                            .map(|address| address.to_canonical().into())
                    })
                    .map_err(|_| {
                        format!(
                            "`{item}` is not an IP address or a CIDR range (such as 10.0.0.0/8)"
                        )
                    })
            })
            .collect::<Result<_, _>>()
            .map(Self)
    }

    /// Whether `address` is one of the trusted proxies. An IPv4 address
    /// seen as IPv6 (`::ffff:10.0.0.1`, on a dual-stack socket) is taken as
    /// the IPv4 address it is.
    pub fn contains(&self, address: std::net::IpAddr) -> bool {
        let address = address.to_canonical();
        self.0.iter().any(|range| range.contains(&address))
    }
}

/// A steady rate and a burst, for one kind of client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests per second at the steady rate.
    pub(crate) per_second: u32,
    /// Requests allowed at once beyond the steady rate.
    pub(crate) burst: u32,
}

impl RateLimitSettings {
    pub const PER_SECOND: RangeInclusive<u32> = 0..=100_000;
    pub const BURST: RangeInclusive<u32> = 0..=10_000;

    /// Every setting within its range.
    pub fn check(&self) -> Result<(), InvalidSetting> {
        within(
            "rate_limit_per_ip",
            self.rate_limit_per_ip,
            Self::PER_SECOND,
        )?;
        within(
            "rate_limit_per_buyer",
            self.rate_limit_per_buyer,
            Self::PER_SECOND,
        )?;
        within(
            "room_joins_per_ip",
            self.room_joins_per_ip,
            Self::PER_SECOND,
        )?;
        within("rate_limit_burst", self.rate_limit_burst, Self::BURST)
    }

    /// The limit on waiting-room joins per client IP, if one is set.
    pub fn room_joins_per_ip(&self) -> Option<RateLimit> {
        self.limit(self.room_joins_per_ip)
    }

    /// The limit per client IP, if one is set.
    pub fn per_ip(&self) -> Option<RateLimit> {
        self.limit(self.rate_limit_per_ip)
    }

    /// The limit per buyer id, if one is set.
    pub fn per_buyer(&self) -> Option<RateLimit> {
        self.limit(self.rate_limit_per_buyer)
    }

    fn limit(&self, per_second: u32) -> Option<RateLimit> {
        (per_second > 0).then_some(RateLimit {
            per_second,
            burst: self.rate_limit_burst,
        })
    }
}
