//! In-memory accelerators. Each is a cache that may be stale only in excess: it can suggest
//! work that is not there, never hide work that is. PostgreSQL stays the authority. Nothing
//! here reaches the database: where an accelerator needs it (push fusion's writes, the peer
//! wake channel), it declares a trait the engine implements with the store.

pub mod ack_fusion;
pub mod ack_registry;
pub mod dedup_cache;
pub mod fusion;
pub mod pop_cache;
pub mod push_fusion;
pub mod wake;
