//! seckill: a flash sale that never oversells.
pub mod config;
pub mod keys;
