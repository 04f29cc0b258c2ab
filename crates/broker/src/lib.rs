//! Queen-rs broker: a stateless HTTP front of PostgreSQL. PostgreSQL decides every claim,
//! lease, cursor and offset; the broker schedules, packs and unpacks frames, and keeps
//! accelerators that may be stale only in excess.

pub mod accel;
pub mod allocator;
pub mod config;
pub mod engine;
pub mod error;
pub mod http;
pub mod listener;
pub mod log_limit;
pub mod logging;
pub mod queue_options;
pub mod server;
pub mod spool;
pub mod store;
pub mod telemetry;
