//! UUIDv7 minting: a 48-bit Unix-millisecond timestamp, a 12-bit per-millisecond sequence in
//! the version-7 `rand_a` field, the RFC variant and random bits. Ids minted by one process are
//! strictly increasing (byte order = `Uuid` order), even within one millisecond and when the
//! wall clock steps back: a sequence overflow borrows the next millisecond.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use rand::RngCore;
use uuid::Uuid;

/// The nil UUID, `00000000-0000-0000-0000-000000000000`.
pub const ZERO_UUID: Uuid = Uuid::nil();

const SEQ_BITS: u32 = 12;
const MS_MASK: u64 = (1 << 48) - 1;

/// The last stamp handed out: `unix_ms << 12 | sequence`.
static LAST_STAMP: AtomicU64 = AtomicU64::new(0);

/// A fresh UUIDv7, greater than every id minted before it in this process.
pub fn new_v7() -> Uuid {
    let mut random = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut random);
    build(next_stamp(&LAST_STAMP, now_ms()), random)
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(MS_MASK))
        .min(MS_MASK)
}

/// The next stamp: the current millisecond with sequence 0 if the clock moved past the last
/// stamp, else the last stamp plus one (a full sequence carries into the millisecond).
fn next_stamp(state: &AtomicU64, now_ms: u64) -> u64 {
    let floor = now_ms << SEQ_BITS;
    let mut last = state.load(Ordering::Relaxed);
    loop {
        let next = if floor > last {
            floor
        } else {
            last.wrapping_add(1)
        };
        match state.compare_exchange_weak(last, next, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return next,
            Err(seen) => last = seen,
        }
    }
}

fn build(stamp: u64, random: [u8; 8]) -> Uuid {
    let ms = (stamp >> SEQ_BITS) & MS_MASK;
    let seq = stamp & ((1 << SEQ_BITS) - 1);
    let mut bytes = [0u8; 16];
    bytes[..6].copy_from_slice(&ms.to_be_bytes()[2..]);
    bytes[6] = 0x70 | (seq >> 8) as u8;
    bytes[7] = seq as u8;
    bytes[8..].copy_from_slice(&random);
    bytes[8] = 0x80 | (bytes[8] & 0x3f);
    Uuid::from_bytes(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_is_version_7_rfc_variant() {
        let id = new_v7();
        assert_eq!(id.get_version_num(), 7);
        assert_eq!(id.get_variant(), uuid::Variant::RFC4122);
        let ms = id.as_bytes()[..6]
            .iter()
            .fold(0u64, |acc, b| (acc << 8) | u64::from(*b));
        let now = now_ms();
        assert!(
            ms <= now && now - ms < 10_000,
            "timestamp {ms} vs now {now}"
        );
    }

    #[test]
    fn sequence_sits_in_rand_a() {
        let id = build((0x0123_4567_89ab << SEQ_BITS) | 0xfed, [0xff; 8]);
        assert_eq!(
            id.as_bytes(),
            &[
                0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0x7f, 0xed, 0xbf, 0xff, 0xff, 0xff, 0xff, 0xff,
                0xff, 0xff
            ]
        );
        assert_eq!(build(0, [0; 8]).as_bytes()[8], 0x80);
    }

    #[test]
    fn strictly_increasing_over_100k_mints() {
        let mut last = new_v7();
        for _ in 0..100_000 {
            let next = new_v7();
            assert!(next > last, "{next} after {last}");
            assert_eq!(next.get_version_num(), 7);
            last = next;
        }
    }

    #[test]
    fn strictly_increasing_across_threads() {
        let threads: Vec<_> = (0..4)
            .map(|_| std::thread::spawn(|| (0..20_000).map(|_| new_v7()).collect::<Vec<_>>()))
            .collect();
        let mut all = Vec::new();
        for thread in threads {
            let ids = thread.join().expect("minting thread");
            assert!(ids.windows(2).all(|w| w[0] < w[1]));
            all.extend(ids);
        }
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 80_000, "no duplicates across threads");
    }

    #[test]
    fn sequence_overflow_bumps_the_millisecond() {
        // A clock stuck on one millisecond: the 4097th mint carries into the next one.
        let state = AtomicU64::new(0);
        let far = now_ms() + 3_600_000;
        let first = next_stamp(&state, far);
        assert_eq!(first, far << SEQ_BITS);
        let mut stamp = first;
        for _ in 0..5000 {
            let next = next_stamp(&state, far);
            assert_eq!(next, stamp + 1);
            stamp = next;
        }
        assert!(
            stamp >> SEQ_BITS > far,
            "the sequence carried into the next ms"
        );
        // A clock that steps back still yields larger ids.
        let a = build(next_stamp(&state, 0), [0; 8]);
        let b = build(next_stamp(&state, 0), [0; 8]);
        assert!(b > a);
    }

    #[test]
    fn zero_is_nil() {
        assert!(ZERO_UUID.is_nil());
        assert_eq!(
            ZERO_UUID.to_string(),
            "00000000-0000-0000-0000-000000000000"
        );
    }
}
