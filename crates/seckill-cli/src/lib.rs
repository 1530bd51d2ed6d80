//! What every `seckill` process shares at its edge, above the sale: the
//! flags that say where the servers are and fill in the sale's settings
//! ([`flags`]), one style for every command's help ([`help`]), the
//! logging set-up ([`telemetry`]), and the process' own life: its
//! open-file limit and when it should stop ([`process`]).
//!
//! The binary, the tools and the dev environment (which starts `seckill`
//! processes) stand on it; the sale (`seckill-core`) and the storefront
//! (`seckill-web`) know nothing of it: they take their settings as values.

pub mod flags;
pub mod help;
pub mod process;
pub mod telemetry;

pub use flags::{
    DURABILITY_FLAGS, Durability, LimitFlags, PurchaseFlags, REDIS_FLAGS, ServiceArgs, WorkerFlags,
};
pub use help::tidy_help;
