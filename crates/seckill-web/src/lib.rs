//! seckill's storefront: the HTTP side of one instance.
//!
//! Bottom up: [`state`] (what every handler shares) and the helpers the
//! handlers share (`error.rs`, `lookup.rs`, `limits.rs`, `door.rs` for the
//! waiting room, `live.rs` for a sale's event streams, ...); then the
//! handlers, grouped: [`api`] (JSON), [`pages`] (HTML), [`admin`]; then
//! [`routes`], the one route table, and [`startup`], which wires an
//! instance: pools, listener, worker, shutdown. No import points up.
//!
//! Handlers only read and call `seckill-core`; nothing here knows how the
//! servers were found or how the process was started.

// The shared helpers, below the handlers.
mod admin_token;
mod body;
pub mod client_ip;
mod door;
mod error;
mod limits;
mod live;
mod lookup;
mod room_view;
pub mod security;
pub mod single_flight;
mod state;
// The handlers.
mod admin;
mod api;
pub mod metrics;
mod pages;
// The top: the route table and one instance's wiring.
mod routes;
pub mod startup;

pub use error::ApiError;
pub use live::{PACE, SNAPSHOT_EVERY};
pub use lookup::SaleView;
