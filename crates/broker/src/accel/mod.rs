//! In-memory accelerators. Each is a cache that may be stale only in excess: it can suggest
//! work that is not there, never hide work that is. PostgreSQL stays the authority. Nothing
//! here reaches the database: where an accelerator needs it (push fusion's writes, the peer
//! wake channel), it declares a trait the engine implements with the store. Admission is the
//! exception that caches nothing: it is the limiter every transaction passes.

pub mod ack_fusion;
pub mod ack_registry;
pub mod admission;
pub mod dedup_cache;
pub mod deliveries;
pub mod encryption;
pub mod flow;
pub mod fusion;
pub mod heap;
pub mod hotlist;
pub mod maintenance;
pub mod min_pop_wait;
pub mod one_flight;
pub mod pop_cache;
pub mod push_fusion;
pub mod segment_cache;
pub mod wake;
