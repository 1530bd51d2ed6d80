//! The business vocabulary: sales, buyers, orders and what a purchase can end in.
//!
//! Pure types and pure functions only: no I/O here, so every rule is unit-tested
//! without Redis or PostgreSQL.

mod deadline;
mod order;
mod pass_job;
mod room_rules;
mod sale;
mod text;
mod user_id;

pub use deadline::DeadlineJob;
pub(crate) use order::sale_of;
pub use order::{Order, OrderJob, OrderStatus, RejectReason};
pub use pass_job::{MAX_PASS, PassIds, carried, carriers, pass_payload};
pub use room_rules::{Pass, PassKey, PassKind, PassRefused, RoomMode, RoomSettings, hex};
pub(crate) use sale::Window;
pub use sale::{InvalidSale, NewSale, NewSaleBuilder, Sale, SaleStatus};
pub use user_id::{InvalidUserId, UserId};
