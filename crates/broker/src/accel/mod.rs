//! In-memory accelerators. Each is a cache that may be stale only in excess: it can suggest
//! work that is not there, never hide work that is. PostgreSQL stays the authority.

pub mod dedup_cache;
pub mod push_fusion;
pub mod wake;
