//! What the chaos run must show, per fault window and overall, read from
//! the answers the buyers got (`windows.rs`: the table's rows and the
//! timeline) and from PostgreSQL and Redis afterwards (`checks.rs`).
//!
//! The promise, under faults: no unit sold twice; nobody holding two; every
//! `202` an order in PostgreSQL, except the orders a Redis wipe took while
//! they still waited on the queue (counted exactly: they are the ids read
//! from the queue at the wipe); no order nobody was told about, except for
//! buyers whose request got no answer (an instance killed after its commit);
//! Redis equal to PostgreSQL; no lock without a TTL; no dead letter; and no
//! `500` ever: while a server is down the answer is `503`.

mod checks;
mod windows;

pub(super) use checks::{ANSWER_BOUND, ChaosCheck, Summary, checks};
pub(super) use windows::{BETWEEN, FaultRow, Tick, rows, timeline, unreplicated_202s};
