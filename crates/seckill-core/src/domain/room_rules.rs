//! A sale's waiting room, as words and rules: its settings, and the two
//! signed passes it hands a buyer.
//!
//! A room is a door in front of a sale: buyers join a line, the room
//! admits them at a bounded rate, and only an admitted buyer may buy. The
//! line lives in Redis (`waiting_room.rs`, `lua/room_visit.lua`); here are the
//! settings a sale is created with and the passes:
//!
//! - a **ticket** keeps a buyer's place across refreshes and tabs: it
//!   names the sale, the buyer and their place, and is signed, so that a
//!   status request needs no account and a forged one names nobody;
//! - an **admission** lets its buyer buy once, until it runs out.
//!
//! Both are `version.sale.buyer.number.expiry.mac`, the buyer in hex (an id
//! may hold dots), signed with HMAC-SHA256 under the database's room key
//! (`migrations/*_waiting_room.sql`), which every instance reads: a pass
//! one instance signed is good on all of them.

use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{InvalidSale, UserId};

pub(super) type HmacSha256 = Hmac<Sha256>;

/// In what order the room admits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RoomMode {
    /// By arrival: first in, first admitted.
    Fifo,
    /// Those who joined before the open in an order drawn by lot, then
    /// the rest by arrival.
    Lottery,
}

impl RoomMode {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Fifo => "fifo",
            Self::Lottery => "lottery",
        }
    }

    pub fn parse(raw: &str) -> Option<Self> {
        match raw {
            "fifo" => Some(Self::Fifo),
            "lottery" => Some(Self::Lottery),
            _ => None,
        }
    }
}

/// A sale's waiting room, as it is created (`"waiting_room"` of `POST
/// /api/sales`). Checked by [`RoomSettings::check`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoomSettings {
    pub mode: RoomMode,
    /// Buyers admitted per second, at most.
    pub admit_per_sec: u32,
    /// Admitted buyers who have neither bought nor let their admission
    /// run out, at most.
    pub max_active: u32,
    /// How long an admission lasts, in seconds.
    pub admission_secs: u32,
    /// Buyers in line, at most: a join past it is refused (`409
    /// line_full`). `None`: no cap but the join limit per address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_line: Option<u32>,
}

impl RoomSettings {
    pub(crate) const MAX_ADMIT_PER_SEC: u32 = 10_000;
    pub(crate) const MAX_ACTIVE: u32 = 1_000_000;
    pub(crate) const MIN_ADMISSION_SECS: u32 = 10;
    pub(crate) const MAX_ADMISSION_SECS: u32 = 3_600;
    pub(crate) const MAX_LINE: u32 = 10_000_000;

    /// The settings, if every one is within its range.
    pub fn check(self) -> Result<Self, InvalidSale> {
        if !(1..=Self::MAX_ADMIT_PER_SEC).contains(&self.admit_per_sec) {
            return Err(InvalidSale::RoomRate);
        }
        if !(1..=Self::MAX_ACTIVE).contains(&self.max_active) {
            return Err(InvalidSale::RoomActive);
        }
        if !(Self::MIN_ADMISSION_SECS..=Self::MAX_ADMISSION_SECS).contains(&self.admission_secs) {
            return Err(InvalidSale::RoomAdmission);
        }
        if self
            .max_line
            .is_some_and(|cap| !(1..=Self::MAX_LINE).contains(&cap))
        {
            return Err(InvalidSale::RoomLine);
        }
        Ok(self)
    }
}

/// Which pass a signed value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassKind {
    /// Keeps a place in line (the number is the place).
    Ticket,
    /// Lets its buyer buy once (the number is 0).
    Admission,
}

impl PassKind {
    fn version(self) -> &'static str {
        match self {
            Self::Ticket => "t2",
            Self::Admission => "a1",
        }
    }
}

/// A pass, read back and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pass {
    pub sale_id: i64,
    pub buyer: UserId,
    pub number: i64,
    /// When it runs out, ms since the epoch.
    pub expires_ms: i64,
    /// A ticket's line generation (`waiting_room::Standing::born_ms`);
    /// 0 in an admission, which carries none.
    pub generation: i64,
}

/// Why a pass was refused. The codes are the API's (`403 not_admitted`
/// carries the admission's; a ticket's are `400 invalid_ticket`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PassRefused {
    /// Not a pass at all, or its signature does not match.
    Forged,
    /// A good pass of another sale.
    OtherSale,
    /// A good pass of another buyer.
    OtherBuyer,
    /// It ran out.
    Expired,
}

impl PassRefused {
    pub fn code(self) -> &'static str {
        match self {
            Self::Forged => "forged",
            Self::OtherSale => "other_sale",
            Self::OtherBuyer => "other_buyer",
            Self::Expired => "expired",
        }
    }
}

/// The key passes are signed with: the database's room key, kept as the
/// HMAC state it keys (its padded key hashed once), so that a pass signed
/// or checked, one per status answer, costs the payload's hashing only.
#[derive(Clone)]
pub struct PassKey(HmacSha256);

impl std::fmt::Debug for PassKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PassKey(..)") // a secret is never logged
    }
}

impl PassKey {
    pub fn new(key: Vec<u8>) -> Self {
        Self(HmacSha256::new_from_slice(&key).expect("HMAC takes a key of any length"))
    }

    /// Sign a pass of `kind`.
    pub fn sign(&self, kind: PassKind, pass: &Pass) -> String {
        let buyer = hex(pass.buyer.as_str().as_bytes());
        let mut payload = format!(
            "{}.{}.{buyer}.{}.{}",
            kind.version(),
            pass.sale_id,
            pass.number,
            pass.expires_ms
        );
        if kind == PassKind::Ticket {
            payload.push_str(&format!(".{}", pass.generation));
        }
        let mac = self.mac(&payload).finalize().into_bytes();
        format!("{payload}.{}", hex(&mac))
    }

    /// Read a pass of `kind` for `sale_id` at `now_ms`; `buyer`, when
    /// given, must be the one it names.
    pub fn check(
        &self,
        kind: PassKind,
        value: &str,
        sale_id: i64,
        buyer: Option<&UserId>,
        now_ms: i64,
    ) -> Result<Pass, PassRefused> {
        let (payload, hex) = value.rsplit_once('.').ok_or(PassRefused::Forged)?;
        let mac = decode_hex(hex).ok_or(PassRefused::Forged)?;
        // In constant time: how much of a forged MAC was right must not show.
        self.mac(payload)
            .verify_slice(&mac)
            .map_err(|_| PassRefused::Forged)?;
        let parts: Vec<&str> = payload.split('.').collect();
        let (version, sale, who, number, expires, generation) = match (kind, &parts[..]) {
            (PassKind::Ticket, [v, s, w, n, e, g]) => (*v, *s, *w, *n, *e, *g),
            (PassKind::Admission, [v, s, w, n, e]) => (*v, *s, *w, *n, *e, "0"),
            _ => return Err(PassRefused::Forged),
        };
        if version != kind.version() {
            return Err(PassRefused::Forged);
        }
        let parse = |raw: &str| raw.parse::<i64>().map_err(|_| PassRefused::Forged);
        let who = decode_hex(who)
            .and_then(|bytes| String::from_utf8(bytes).ok())
            .and_then(|id| UserId::parse(&id).ok())
            .ok_or(PassRefused::Forged)?;
        let pass = Pass {
            sale_id: parse(sale)?,
            buyer: who,
            number: parse(number)?,
            expires_ms: parse(expires)?,
            generation: parse(generation)?,
        };
        if pass.sale_id != sale_id {
            return Err(PassRefused::OtherSale);
        }
        if buyer.is_some_and(|buyer| *buyer != pass.buyer) {
            return Err(PassRefused::OtherBuyer);
        }
        if pass.expires_ms <= now_ms {
            return Err(PassRefused::Expired);
        }
        Ok(pass)
    }

    /// A MAC of `payload` under this key, for what else must be drawn from
    /// it (a lottery's seed).
    pub(crate) fn mac_of(&self, payload: &str) -> HmacSha256 {
        self.mac(payload)
    }

    fn mac(&self, payload: &str) -> HmacSha256 {
        let mut mac = self.0.clone();
        mac.update(payload.as_bytes());
        mac
    }
}

/// `bytes` in lowercase hexadecimal, without a `format!` a byte.
pub fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        out.push(char::from(DIGITS[usize::from(byte >> 4)]));
        out.push(char::from(DIGITS[usize::from(byte & 0xf)]));
    }
    out
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) || !hex.is_ascii() {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pass(buyer: &str, expires_ms: i64) -> Pass {
        Pass {
            sale_id: 7,
            buyer: UserId::parse(buyer).expect("a buyer"),
            number: 3,
            expires_ms,
            generation: 0,
        }
    }

    #[test]
    fn a_pass_reads_back_as_signed_and_only_for_its_sale_buyer_and_time() {
        let key = PassKey::new(b"k".to_vec());
        let ann = UserId::parse("ann.b").expect("a buyer");
        let bob = UserId::parse("bob").expect("a buyer");
        let signed = key.sign(PassKind::Admission, &pass("ann.b", 2_000));
        let read = key.check(PassKind::Admission, &signed, 7, Some(&ann), 1_000);
        assert_eq!(read, Ok(pass("ann.b", 2_000)));
        let refused = |value: &str, sale, buyer, now| {
            key.check(PassKind::Admission, value, sale, buyer, now)
                .expect_err("refused")
        };
        assert_eq!(
            refused(&signed, 8, Some(&ann), 1_000),
            PassRefused::OtherSale
        );
        assert_eq!(
            refused(&signed, 7, Some(&bob), 1_000),
            PassRefused::OtherBuyer
        );
        assert_eq!(refused(&signed, 7, Some(&ann), 2_000), PassRefused::Expired);
        // A ticket is not an admission, another key's pass is nobody's,
        // and a changed figure breaks the signature.
        let ticket = key.sign(PassKind::Ticket, &pass("ann.b", 2_000));
        assert_eq!(refused(&ticket, 7, Some(&ann), 1_000), PassRefused::Forged);
        let other =
            PassKey::new(b"other".to_vec()).sign(PassKind::Admission, &pass("ann.b", 2_000));
        assert_eq!(refused(&other, 7, Some(&ann), 1_000), PassRefused::Forged);
        let longer = signed.replacen(".2000.", ".9000.", 1);
        assert_eq!(refused(&longer, 7, Some(&ann), 1_000), PassRefused::Forged);
        for junk in ["", "a1", "a1.7.616e6e.3.2000.zz", "not a pass", "é.é"] {
            assert_eq!(
                refused(junk, 7, Some(&ann), 1_000),
                PassRefused::Forged,
                "{junk}"
            );
        }
    }

    /// A pass signed before the key was kept as an HMAC state, and the
    /// hex written byte by byte with `format!`, reads the same: tickets
    /// and admissions handed out before an upgrade stay good.
    #[test]
    fn a_pass_is_signed_as_it_always_was() {
        let key = PassKey::new(b"k".to_vec());
        let signed = key.sign(PassKind::Admission, &pass("ann", 5));
        let payload = "a1.7.616e6e.3.5";
        let mac = hmac::Mac::finalize(hmac::Mac::chain_update(
            <HmacSha256 as hmac::Mac>::new_from_slice(b"k").expect("a key"),
            payload,
        ))
        .into_bytes();
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(signed, format!("{payload}.{hex}"));
        assert_eq!(super::hex(&[0x00, 0xab, 0x7f]), "00ab7f");
    }

    #[test]
    fn a_ticket_carries_its_lines_generation_signed() {
        let key = PassKey::new(b"k".to_vec());
        let ticket = Pass {
            generation: 1_764_000_000_123,
            ..pass("ann.b", 2_000)
        };
        let signed = key.sign(PassKind::Ticket, &ticket);
        assert_eq!(
            key.check(PassKind::Ticket, &signed, 7, None, 1_000),
            Ok(ticket)
        );
        let moved = signed.replacen(".1764000000123.", ".1764000000124.", 1);
        assert_ne!(moved, signed);
        assert_eq!(
            key.check(PassKind::Ticket, &moved, 7, None, 1_000),
            Err(PassRefused::Forged)
        );
    }

    #[test]
    fn room_settings_out_of_range_are_refused() {
        let good = RoomSettings {
            mode: RoomMode::Fifo,
            admit_per_sec: 50,
            max_active: 100,
            admission_secs: 60,
            max_line: Some(1_000),
        };
        assert_eq!(good.check(), Ok(good));
        let with = |f: fn(&mut RoomSettings)| {
            let mut s = good;
            f(&mut s);
            s.check()
        };
        assert_eq!(with(|s| s.admit_per_sec = 0), Err(InvalidSale::RoomRate));
        assert_eq!(
            with(|s| s.admit_per_sec = 10_001),
            Err(InvalidSale::RoomRate)
        );
        assert_eq!(with(|s| s.max_active = 0), Err(InvalidSale::RoomActive));
        assert_eq!(
            with(|s| s.admission_secs = 9),
            Err(InvalidSale::RoomAdmission)
        );
        assert_eq!(
            with(|s| s.admission_secs = 3_601),
            Err(InvalidSale::RoomAdmission)
        );
        assert_eq!(with(|s| s.max_line = Some(0)), Err(InvalidSale::RoomLine));
        assert_eq!(
            with(|s| s.max_line = None),
            Ok(RoomSettings {
                max_line: None,
                ..good
            })
        );
    }
}
