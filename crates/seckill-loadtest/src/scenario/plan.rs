//! The plan of a run, made before anything is sent: which buyers there
//! are, which of them also send a duplicate, which instance each request
//! goes to, and how the load is shaped ([`Scenario`], [`Shape`]). Planning
//! up front keeps the sending loops free of decisions, and lets a run that
//! stops early still have sent each duplicate beside its original.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use uuid::Uuid;

use crate::http::Target;

/// How load is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scenario {
    /// Open every connection, hold every buyer at one start signal, release all at once.
    Burst,
    /// A fixed arrival rate for a duration (open model).
    Rate,
    /// C connections sending back to back (closed model, like wrk).
    Closed,
}

impl Scenario {
    pub fn as_str(self) -> &'static str {
        match self {
            Scenario::Burst => "burst",
            Scenario::Rate => "rate",
            Scenario::Closed => "closed",
        }
    }
}

/// How a scenario is run.
#[derive(Debug, Clone, Copy)]
pub struct Shape {
    pub scenario: Scenario,
    /// Requests per second (`rate`).
    pub rate: f64,
    /// How long to send (`rate`, `closed`); without it, each planned request is sent once.
    pub duration: Option<Duration>,
    /// Connections (`rate`, `closed`; a burst opens one per request).
    pub connections: usize,
}

/// One request of the plan: which buyer, to which instance.
#[derive(Debug, Clone, Copy)]
pub struct Planned {
    pub user: u32,
    pub target: usize,
}

/// Who sends what, to where.
pub struct Plan {
    pub sale_id: i64,
    /// `/api/sales/{sale_id}/purchase`.
    pub path: hyper::Uri,
    /// Makes this run's user ids unique, so runs on one sale do not collide.
    pub tag: String,
    pub users: u32,
    pub targets: Vec<Arc<Target>>,
    /// Every buyer once, each duplicate right after its original.
    pub requests: Vec<Planned>,
}

impl Plan {
    /// `users` buyers spread round-robin over `targets`; a fraction `dup` of
    /// them, spread evenly, also send a second request at the same moment.
    pub fn new(sale_id: i64, users: u32, dup: f64, targets: Vec<Arc<Target>>) -> Self {
        let n = targets.len().max(1);
        // A duplicate right after its original: in a burst both leave in the
        // same moment, and a rate or closed run that stops early sends both.
        let mut requests = Vec::with_capacity(users as usize);
        for user in 0..users {
            let target = user as usize % n;
            requests.push(Planned { user, target });
            if is_duplicate(user, dup) {
                requests.push(Planned {
                    user,
                    target: (target + 1) % n,
                });
            }
        }
        let tag = Uuid::new_v4().simple().to_string()[..8].to_owned();
        Self {
            sale_id,
            path: crate::http::purchase_path(sale_id),
            tag,
            users,
            targets,
            requests,
        }
    }

    pub fn user_id(&self, user: u32) -> String {
        user_id(&self.tag, user)
    }
}

/// The user id of buyer `user` in the run tagged `tag`.
pub fn user_id(tag: &str, user: u32) -> String {
    format!("lt-{tag}-{user}")
}

/// Whether buyer `user` sends a duplicate: the fraction `dup` of buyers,
/// spread evenly (buyer `i` is one when `floor((i+1)·dup) > floor(i·dup)`).
fn is_duplicate(user: u32, dup: f64) -> bool {
    let (i, dup) = (f64::from(user), dup.clamp(0.0, 1.0));
    ((i + 1.0) * dup).floor() > (i * dup).floor()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duplicate_fraction_picks_that_share_of_buyers_spread_evenly() {
        let picked: Vec<u32> = (0..20).filter(|&u| is_duplicate(u, 0.25)).collect();
        assert_eq!(picked, vec![3, 7, 11, 15, 19]);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 0.05)).count(), 50);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 0.0)).count(), 0);
        assert_eq!((0..1000).filter(|&u| is_duplicate(u, 1.0)).count(), 1000);
    }

    #[test]
    fn user_ids_are_valid_seckill_user_ids() {
        let id = user_id("0123abcd", u32::MAX);
        assert!(id.len() <= 64);
        assert!(id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'));
    }
}
