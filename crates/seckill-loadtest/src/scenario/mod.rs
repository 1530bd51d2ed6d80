//! The three ways of sending load, one file each.
//!
//! - **burst** (the flash sale, `burst.rs`): every buyer opens a connection
//!   first, then all wait at one start signal and fire together. The spread
//!   between the first and the last send (the launch skew) is reported, so
//!   the audience can see that the race was real.
//! - **rate** (an open model, `rate.rs`): requests are due at a fixed rate
//!   whether or not earlier ones were answered. Latency runs from the moment
//!   a request was *due*, not from when it was finally sent, so a generator
//!   or server that falls behind shows up as latency instead of hiding it
//!   (the "coordinated omission" trap). Sends that start late are counted,
//!   and so are sends dropped because no connection came free in time.
//! - **closed** (`closed.rs`): C connections, each sending its next request
//!   as soon as the previous one is answered, like wrk or ab. Useful to
//!   compare with them. Each connection keeps to one instance (connections
//!   are spread round-robin), whatever instance the plan gave the buyer.
//!
//! Every request is `POST /api/sales/{id}/purchase` for one buyer. Buyer `i`
//! goes to instance `i mod n`; a buyer's duplicate request (see
//! [`Plan::new`]) goes to the next instance, so duplicates race across
//! instances, where only the shared Redis can stop them.
//!
//! Who sends what is planned in `plan.rs`; what each request gave is a
//! [`Sample`] (`sample.rs`); the threads that send, and the start signal
//! that releases them together, are in `lanes.rs`.

mod burst;
mod closed;
mod lanes;
mod plan;
mod rate;
mod sample;

use std::sync::Arc;

use anyhow::bail;

use crate::progress::Progress;

pub use plan::{Plan, Planned, Scenario, Shape, user_id};
pub(crate) use rate::LATE_AFTER;
pub(crate) use sample::micros_of;
pub use sample::{Live, RunData, Sample};

/// Run the plan; progress goes to `progress`.
pub async fn run(plan: &Arc<Plan>, shape: Shape, progress: &Progress) -> anyhow::Result<RunData> {
    if plan.targets.is_empty() {
        bail!("no target to send requests to");
    }
    if plan.requests.is_empty() {
        bail!("no buyers: --users must be at least 1");
    }
    if shape.scenario == Scenario::Rate && !(shape.rate > 0.0 && shape.rate.is_finite()) {
        bail!("--rate must be a positive number of requests per second");
    }
    match shape.scenario {
        Scenario::Burst => burst::run(plan, progress).await,
        Scenario::Rate => rate::run(plan, shape, progress).await,
        Scenario::Closed => closed::run(plan, shape, progress).await,
    }
}
