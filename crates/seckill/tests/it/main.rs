//! seckill's integration tests: one binary, real Redis and PostgreSQL.
//!
//! Every test gets a database and a Redis key prefix of its own (see
//! [`helpers`]), so they run in parallel and leave nothing behind. Fault
//! tests start private servers they may stop and kill.

// A test binary has no outside: `pub` in its modules marks what a helper
// offers the tests, which `pub(crate)` everywhere would not tell apart.
#![allow(unreachable_pub)]

mod admin;
mod admin_lockout;
mod article_promises;
mod bad_input;
mod bench;
mod browser;
mod browser_pages;
mod browser_room;
mod burst;
mod chaos;
mod chaos_cluster;
mod cli;
mod cluster;
mod cross_site;
mod crowd;
mod dashboard;
mod deadline_sweep;
mod docs;
mod ended;
mod events_snapshot;
mod faults;
mod helpers;
mod hostile;
mod identity;
mod instructor;
mod lab;
mod layers;
mod live;
mod loadtest;
mod loadtest_demo;
mod loadtest_exit;
mod lock;
mod lock_held;
mod lock_wait;
mod lua_headers;
mod memory;
mod metrics;
mod pages;
mod pages_events;
mod pass_job;
mod payment;
mod payment_deadline;
mod payment_race;
mod pool;
mod postgres_down;
mod private_servers;
mod processes;
mod projector;
mod proxies;
mod proxy;
mod purchase;
mod purchase_lock;
mod purchase_lua;
mod purchase_retry;
mod queue;
mod queue_dead;
mod queue_dequeue;
mod refusals;
mod room_door;
mod room_draw;
mod room_ends;
mod room_figures;
mod room_limits;
mod room_page;
mod room_view;
mod runtimes;
mod sale_named;
mod sale_status;
mod security_headers;
mod sentinel;
mod sql_owner;
mod stall;
mod store;
mod strategies;
mod verify;
mod waiting_room;
mod waiting_room_made;
mod waiting_room_shared;
mod wake;
mod worker;
mod worker_refused;
mod worker_reload;
mod workshop;
