//! What the accelerators' budgets charge: the bytes an allocation really takes from glibc's
//! malloc, so that the many small allocations of a cache are not counted as free
//! (docs/performance.md §7.2).

/// What a heap allocation of `n` bytes really takes (glibc's chunks: an 8-byte header, sizes
/// rounded up to 16, at least 32).
pub fn heap_bytes(n: usize) -> usize {
    match n {
        0 => 0,
        n => (n + 8).next_multiple_of(16).max(32),
    }
}

/// The one allocation of a `HashMap`/`HashSet` (hashbrown) of `capacity` whose entries take
/// `entry` bytes: a power-of-two number of buckets, each with its entry and a control byte,
/// plus one 16-byte group of control bytes. `capacity` is what the table reports, from which
/// its buckets follow (at most 7/8 of eight or more are usable).
pub fn table_bytes(capacity: usize, entry: usize) -> usize {
    let buckets = match capacity {
        0 => return 0,
        c if c < 8 => c + 1,
        c => c / 7 * 8,
    };
    heap_bytes(buckets * (entry + 1) + 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn small_allocations_cost_their_chunk() {
        assert_eq!(heap_bytes(0), 0);
        assert_eq!(heap_bytes(1), 32);
        assert_eq!(heap_bytes(24), 32);
        assert_eq!(heap_bytes(25), 48);
    }

    /// The bucket counts follow from the capacity the table reports (if the standard library's
    /// table ever sizes differently, this says the charge is off).
    #[test]
    fn a_hash_set_is_charged_for_its_buckets() {
        let set = |n: u8| (0..n).map(|i| [i; 16]).collect::<HashSet<[u8; 16]>>();
        let (two, hundred) = (set(2), set(100));
        assert_eq!((two.capacity(), hundred.capacity()), (3, 112));
        assert_eq!(table_bytes(two.capacity(), 16), heap_bytes(4 * 17 + 16));
        assert_eq!(
            table_bytes(hundred.capacity(), 16),
            heap_bytes(128 * 17 + 16)
        );
        assert_eq!(table_bytes(0, 16), 0);
    }
}
