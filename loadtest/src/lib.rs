//! seckill's load test: fires buyers at the app over HTTP, then checks in
//! PostgreSQL and Redis that the promise was kept.
//!
//! So far this holds the verifier ([`verify`]); the generator is `main.rs`.

pub mod verify;
