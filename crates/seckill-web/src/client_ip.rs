//! Who the client is: the one address the per-IP rate limit (`limits.rs`)
//! and the admin lock-out (`admin_token.rs`) count requests under.
//!
//! Without a proxy it is the TCP peer. Behind one (a load balancer, nginx,
//! Docker's published port) the peer is the proxy, the same for everyone:
//! one client's rate limit would throttle them all, and five wrong admin
//! tokens from anyone would lock every admin out. A proxy says whom it
//! forwards for by adding the address it got the request from to the end
//! of the `X-Forwarded-For` header, so the header reads client first,
//! proxies after: a request that went through proxies 1, 2 and 3 reaches
//! us from proxy 3 with `client, proxy1, proxy2`.
//!
//! Anyone can send that header, so it is believed only from the proxies
//! configured as trusted (`SECKILL_TRUSTED_PROXIES`), and only as far as
//! they wrote it: read from the right, each address is the one a trusted
//! hop saw, until the first that is not itself a trusted proxy. That one is
//! the client; what lies to its left the client wrote and could have made
//! up. (The left-most address, which most examples show as "the client",
//! is the one a client forges to get a fresh rate limit per request.) This
//! is what nginx's `real_ip_recursive on` does.
//!
//! The `Forwarded` header (RFC 7239) is not read; the proxies in use send
//! `X-Forwarded-For`.

use std::net::IpAddr;

use actix_web::HttpRequest;
use seckill_core::config::TrustedProxies;

/// The request's client address, by the rule in the module comment: the
/// TCP peer, or, when the peer is a trusted proxy, whom its
/// `X-Forwarded-For` says it forwards for. `None` only for a request with
/// no peer (one built inside a test, never one from a socket).
pub(crate) fn of(request: &HttpRequest, trusted: &TrustedProxies) -> Option<IpAddr> {
    let peer = request.peer_addr()?.ip().to_canonical();
    // From anyone else (from everyone, by default) the header is not even read.
    if !trusted.contains(peer) {
        return Some(peer);
    }
    let lines: Option<Vec<&str>> = request
        .headers()
        .get_all("x-forwarded-for")
        .map(|line| line.to_str().ok())
        .collect();
    Some(match lines {
        Some(lines) => from_forwarded_for(peer, &lines, trusted),
        // Bytes that are not visible ASCII: a malformed header.
        None => peer,
    })
}

/// The client address of a request from `peer` that carried the
/// `X-Forwarded-For` header lines `forwarded_for` (in the order received;
/// several lines are one list, as HTTP says):
///
/// - `peer` is not trusted: `peer`, whatever the header says;
/// - otherwise, read right to left, the first address that is not a
///   trusted proxy;
/// - every address a trusted proxy: the left-most, the farthest hop, all
///   of whose reports were believable;
/// - no header: `peer`;
/// - an item read before the client is found that is not an IP address
///   (empty, a port attached, a name): the header is malformed and `peer`
///   is the client. Items left of the client are never read.
///
/// IPv4 addresses seen as IPv6 (`::ffff:10.0.0.1`) are answered as IPv4,
/// so one client has one address whichever way it came.
pub fn from_forwarded_for(
    peer: IpAddr,
    forwarded_for: &[&str],
    trusted: &TrustedProxies,
) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return peer;
    }
    // The farthest hop believed so far: the peer, then each trusted proxy
    // the header names, right to left.
    let mut farthest = peer;
    for item in forwarded_for.iter().rev().flat_map(|line| line.rsplit(',')) {
        let Ok(address) = item.trim().parse::<IpAddr>() else {
            return peer;
        };
        let address = address.to_canonical();
        if !trusted.contains(address) {
            return address;
        }
        farthest = address;
    }
    farthest
}
