//! The admin token, and the signed sessions a login opens.
//!
//! A token shorter than [`MIN_LEN`] characters is refused at start
//! ([`AdminToken::parse`], the one place it is checked): the token opens
//! the admin API to whoever knows it, and a short one is guessed. (The
//! lock-out below slows guessing down from one address; it does not make
//! `letmein` safe.)
//!
//! The token is kept only as a SHA-256 digest. Comparing digests of fixed
//! length in constant time reveals neither the token nor its length
//! through response timing.
//!
//! Logging in with the token opens a session: the `seckill_admin` cookie
//! holds `v1.<id>.<expires>.<mac>`, where the MAC is an HMAC-SHA256 of the
//! rest under a key derived from the token. So the cookie never holds the
//! token (a leaked cookie does not leak what also opens the admin API), it
//! cannot be forged or have its expiry moved without the key, it expires by
//! itself (12 hours by default), and every instance that shares the token
//! accepts the sessions of the others. The session's id is also kept in
//! Redis until it expires (`store/admin.rs`): logging out deletes it there,
//! so a copy of the cookie stops working at once, everywhere.

use std::time::Duration;

use actix_web::HttpRequest;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use crate::error::ApiError;

/// Wrong tokens from one client address before it is locked out (the
/// attempt after them is refused, whatever its token).
pub(crate) const MAX_FAILED_LOGINS: u64 = 5;
/// How long the wrong tokens of one address are counted (and a lock-out lasts).
pub(crate) const FAILURE_WINDOW: Duration = Duration::from_secs(15 * 60);

/// The fewest characters an admin token may have (16 random hex digits,
/// `openssl rand -hex 8`, are 64 bits).
pub(crate) const MIN_LEN: usize = 16;

type HmacSha256 = Hmac<Sha256>;

/// The cookie format's version, first in every value.
const VERSION: &str = "v1";

/// The admin token's digest and the session key derived from it.
pub(crate) struct AdminToken {
    /// SHA-256 of the token; `None` while no token is configured, and the
    /// admin API and pages refuse everyone. Fixed at start.
    digest: Option<[u8; 32]>,
    /// The key sessions are signed with, derived from the token (so equal
    /// on every instance that shares it). Fixed at start.
    session_key: Option<[u8; 32]>,
    /// How long a session lasts from its login. Fixed at start.
    session_ttl: Duration,
}

/// Why a configured admin token was refused. It never holds the token:
/// the message is printed at start, and the token is a secret even when
/// it is refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "SECKILL_ADMIN_TOKEN (--admin-token) is {chars} characters long; an admin token must have \
     at least {MIN_LEN}: anyone who guesses it is an admin (make one with `openssl rand -hex 16`)"
)]
pub(crate) struct TooShort {
    /// How many characters the refused token has.
    pub(crate) chars: usize,
}

impl AdminToken {
    /// The admin token as configured: `None` (or empty) leaves the admin
    /// API and pages closed to everyone; a token shorter than [`MIN_LEN`]
    /// characters is refused.
    pub(crate) fn parse(token: Option<&str>, session_ttl: Duration) -> Result<Self, TooShort> {
        let token = token.filter(|t| !t.is_empty());
        if let Some(chars) = token.map(|t| t.chars().count())
            && chars < MIN_LEN
        {
            return Err(TooShort { chars });
        }
        Ok(Self {
            digest: token.map(|t| Sha256::digest(t.as_bytes()).into()),
            session_key: token.map(|t| {
                Sha256::new()
                    .chain_update(b"seckill admin session key v1\0")
                    .chain_update(t.as_bytes())
                    .finalize()
                    .into()
            }),
            session_ttl,
        })
    }

    /// How long a session lasts.
    pub(crate) fn session_ttl(&self) -> Duration {
        self.session_ttl
    }

    /// Check a presented token.
    pub(crate) fn check(&self, presented: Option<&str>) -> Result<(), ApiError> {
        let Some(expected) = &self.digest else {
            return Err(ApiError::AdminDisabled);
        };
        let presented: [u8; 32] = Sha256::digest(presented.unwrap_or_default().as_bytes()).into();
        if bool::from(presented.ct_eq(expected)) {
            Ok(())
        } else {
            Err(ApiError::Unauthorized)
        }
    }

    /// The token an `Authorization: Bearer <token>` header presents.
    pub(crate) fn bearer(request: &HttpRequest) -> Option<&str> {
        request
            .headers()
            .get(actix_web::http::header::AUTHORIZATION)
            .and_then(|value| value.to_str().ok())
            // The scheme in any case (RFC 7235): a script that writes
            // `bearer` is refused otherwise, and each refusal counts
            // towards its address' lock-out.
            .and_then(|value| value.split_once(' '))
            .and_then(|(scheme, token)| scheme.eq_ignore_ascii_case("bearer").then_some(token))
    }

    /// The cookie value of session `id`, expiring at `expires` (seconds
    /// since the epoch).
    pub(crate) fn sign_session(&self, id: &str, expires: i64) -> Result<String, ApiError> {
        let payload = format!("{VERSION}.{id}.{expires}");
        let mac = self.mac(&payload)?.finalize().into_bytes();
        Ok(format!("{payload}.{}", seckill_core::domain::hex(&mac)))
    }

    /// The session id of a cookie value, if it is signed by this token's
    /// key and has not expired at `now` (seconds since the epoch). Whether
    /// the session was logged out is the store's to say.
    pub(crate) fn verify_session(&self, value: Option<&str>, now: i64) -> Result<String, ApiError> {
        let value = value.ok_or(ApiError::Unauthorized)?;
        let (payload, hex) = value.rsplit_once('.').ok_or(ApiError::Unauthorized)?;
        let mac = decode_hex(hex).ok_or(ApiError::Unauthorized)?;
        // In constant time: how much of a forged MAC was right must not show.
        self.mac(payload)?
            .verify_slice(&mac)
            .map_err(|_| ApiError::Unauthorized)?;
        let mut parts = payload.split('.');
        let (Some(VERSION), Some(id), Some(expires), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(ApiError::Unauthorized);
        };
        let expires: i64 = expires.parse().map_err(|_| ApiError::Unauthorized)?;
        if expires <= now {
            return Err(ApiError::Unauthorized);
        }
        Ok(id.to_owned())
    }

    fn mac(&self, payload: &str) -> Result<HmacSha256, ApiError> {
        let key = self.session_key.as_ref().ok_or(ApiError::AdminDisabled)?;
        let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes a key of any length");
        mac.update(payload.as_bytes());
        Ok(mac)
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if !hex.len().is_multiple_of(2) {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn token() -> AdminToken {
        AdminToken::parse(Some("secret-secret-secret"), Duration::from_secs(60))
            .expect("a token long enough")
    }

    #[test]
    fn a_token_shorter_than_16_characters_is_refused_without_being_repeated() {
        for short in ["letmein", "change-me", "fifteen-chars-x", "ééééééééééééééé"] {
            let refused = AdminToken::parse(Some(short), Duration::from_secs(60))
                .err()
                .unwrap_or_else(|| panic!("{short:?} is accepted"));
            let said = refused.to_string();
            assert!(said.contains("at least 16"), "{said}");
            assert!(
                !said.contains(short),
                "the message repeats the token: {said}"
            );
        }
        for enough in ["sixteen-chars-xx", "correct-horse-battery"] {
            assert!(AdminToken::parse(Some(enough), Duration::from_secs(60)).is_ok());
        }
        // No token, or an empty one, closes the admin API instead.
        for none in [None, Some("")] {
            let closed = AdminToken::parse(none, Duration::from_secs(60)).expect("closed");
            assert!(matches!(
                closed.check(Some("")),
                Err(ApiError::AdminDisabled)
            ));
        }
    }

    #[test]
    fn a_signed_session_verifies_until_it_expires() {
        let cookie = token().sign_session("abc", 1_000).unwrap();
        assert!(!cookie.contains("secret-secret-secret"));
        assert_eq!(token().verify_session(Some(&cookie), 999).unwrap(), "abc");
        assert!(token().verify_session(Some(&cookie), 1_000).is_err());
    }

    #[test]
    fn a_tampered_or_foreign_session_is_refused() {
        let cookie = token().sign_session("abc", 1_000).unwrap();
        let later = cookie.replace(".1000.", ".9999.");
        assert!(token().verify_session(Some(&later), 0).is_err());
        let other = AdminToken::parse(Some("other-other-other"), Duration::from_secs(60))
            .expect("a token long enough");
        assert!(other.verify_session(Some(&cookie), 0).is_err());
        for junk in ["", "v1", "v1.abc.1000", "v1.abc.1000.zz", "secret"] {
            assert!(token().verify_session(Some(junk), 0).is_err(), "{junk:?}");
        }
        let disabled = AdminToken::parse(None, Duration::from_secs(60)).expect("closed");
        assert!(matches!(
            disabled.verify_session(Some(&cookie), 0),
            Err(ApiError::AdminDisabled)
        ));
    }
}
