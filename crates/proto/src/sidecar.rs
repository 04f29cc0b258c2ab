//! The hash sidecar of stored segments (`queen.log_txns`, docs/engine.md §1): per segment, the
//! `xxh3_128` of every frame's transactionId, 16 bytes each in frame order. These are the rows
//! the dedup cache hydrates from; the store reads them and the cache consumes them, and neither
//! floor depends on the other for the type.

/// A partition's sidecar rows as read by `queen.log_dedup_hydrate_v1`.
#[derive(Debug, Clone)]
pub struct Hydration {
    pub pid: i64,
    pub window_s: i32,
    /// The partition's last offset in the read's snapshot.
    pub last: i64,
    /// Rows committed at or after this (µs, database clock) are all included.
    pub since_us: i64,
    /// The database clock when the read ran (µs).
    pub now_us: i64,
    /// In offset order.
    pub rows: Vec<HashRow>,
}

/// One sidecar row: the hashes of offsets `base..`, 16 bytes each.
#[derive(Debug, Clone)]
pub struct HashRow {
    pub base: i64,
    pub created_us: i64,
    pub hashes: Vec<u8>,
}
