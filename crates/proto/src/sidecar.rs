//! The hash sidecar of stored segments (`queen.log_txns`, docs/engine.md §1): per segment, the
//! `xxh3_128` of every frame's transactionId, 16 bytes each in frame order. These are the rows
//! the dedup cache hydrates from; the store reads them and the cache consumes them, and neither
//! floor depends on the other for the type.
//!
//! The cache keeps a [`key`] of each hash, not the hash: its first 8 bytes. Two different
//! transactionIds share a key with probability 2⁻⁶⁴ per pair; when they do, the cache sees a
//! hit, and a hit only sends the push to the authoritative SQL probe. Half the bytes per hash
//! doubles the window a memory budget covers.

use crate::hash::HASH_LEN;

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

/// One sidecar row as the cache keeps it: the [`key`]s of offsets `base..`.
#[derive(Debug, Clone)]
pub struct HashRow {
    pub base: i64,
    pub created_us: i64,
    pub keys: Vec<u64>,
}

/// Bytes of a hash a key keeps.
pub const KEY_LEN: usize = std::mem::size_of::<u64>();

/// The cache key of one 16-byte hash: its first 8 bytes, big-endian.
pub fn key(hash: &[u8; HASH_LEN]) -> u64 {
    let mut first = [0u8; KEY_LEN];
    first.copy_from_slice(&hash[..KEY_LEN]);
    u64::from_be_bytes(first)
}

/// The keys of a sidecar blob (16 bytes per hash; a trailing partial hash is ignored).
pub fn keys(hashes: &[u8]) -> impl Iterator<Item = u64> + '_ {
    hashes
        .chunks_exact(HASH_LEN)
        .filter_map(|h| <&[u8; HASH_LEN]>::try_from(h).ok())
        .map(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_the_first_eight_bytes_of_each_hash() {
        let mut blob = Vec::new();
        blob.extend_from_slice(&0x0102_0304_0506_0708_1112_1314_1516_1718_u128.to_be_bytes());
        blob.extend_from_slice(&u128::MAX.to_be_bytes());
        blob.extend_from_slice(&[1, 2, 3]);
        let got: Vec<u64> = keys(&blob).collect();
        assert_eq!(got, [0x0102_0304_0506_0708, u64::MAX]);
    }
}
