//! Message bodies: 1 KiB of incompressible random bytes (base64 in JSON), distinct for every
//! message, plus the message's sequence number and its scheduled send time, so a consumer can
//! verify delivery and measure end-to-end latency from the schedule. Producer and consumer
//! share the machine's clock.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use rand::{RngCore, SeedableRng};
use serde::Deserialize;

/// Random bytes per message before base64 (the "1 KiB payload").
pub const RANDOM_BYTES: usize = 1024;

/// Generates each message's random bytes from its own sequence number: no two messages share
/// a block, so no segment (however many messages push fusion packs into it) can compress them.
#[derive(Clone, Copy)]
pub struct Payloads {
    seed: u64,
}

impl Payloads {
    pub fn new(seed: u64) -> Self {
        Self { seed }
    }

    /// The JSON document of message `seq`, scheduled at `sched_us` (µs since the epoch).
    pub fn body(&self, seq: u64, sched_us: i64) -> String {
        let mut raw = [0u8; RANDOM_BYTES];
        let mut rng =
            rand::rngs::StdRng::seed_from_u64(self.seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        rng.fill_bytes(&mut raw);
        let block = base64::engine::general_purpose::STANDARD.encode(raw);
        format!(r#"{{"i":{seq},"t":{sched_us},"b":"{block}"}}"#)
    }
}

/// The fields a consumer reads back.
#[derive(Debug, Deserialize)]
pub struct Stamp {
    pub i: u64,
    pub t: i64,
}

impl Stamp {
    pub fn parse(json: &str) -> Option<Self> {
        serde_json::from_str(json).ok()
    }
}

/// Maps monotonic instants to wall-clock microseconds (fixed at creation, so the mapping is
/// consistent for a whole run).
#[derive(Debug, Clone, Copy)]
pub struct Clock {
    base_instant: Instant,
    base_us: i64,
}

impl Clock {
    pub fn new() -> Self {
        let base_us = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
            .as_micros() as i64;
        Self {
            base_instant: Instant::now(),
            base_us,
        }
    }

    pub fn micros(&self, at: Instant) -> i64 {
        match at.checked_duration_since(self.base_instant) {
            Some(d) => self.base_us + d.as_micros() as i64,
            None => self.base_us - self.base_instant.duration_since(at).as_micros() as i64,
        }
    }

    pub fn now_us(&self) -> i64 {
        self.micros(Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_round_trip_and_carry_a_kib_of_entropy() {
        let p = Payloads::new(7);
        let body = p.body(42, 1_700_000_000_000_000);
        let s = Stamp::parse(&body).unwrap();
        assert_eq!((s.i, s.t), (42, 1_700_000_000_000_000));
        assert!(body.len() > RANDOM_BYTES * 4 / 3);
        assert_ne!(p.body(1, 0)[20..], p.body(2, 0)[20..]);
        let compressed = zstd_len(&(0..100).map(|i| p.body(i, 0)).collect::<String>());
        assert!(
            compressed > 100 * RANDOM_BYTES,
            "random blocks must not compress below 1 KiB each"
        );
    }

    fn zstd_len(s: &str) -> usize {
        queen_proto::segment::compress(s.as_bytes(), 3).len()
    }

    #[test]
    fn clock_is_monotone_with_instants() {
        let c = Clock::new();
        let a = Instant::now();
        let b = a + Duration::from_millis(5);
        assert_eq!(c.micros(b) - c.micros(a), 5000);
    }
}
