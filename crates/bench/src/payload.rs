//! Message bodies: 1 KiB of incompressible random bits (1 368 base64 characters of 6 random
//! bits each, in JSON), distinct for every message, plus the message's sequence number and its
//! scheduled send time, so a consumer can verify delivery and measure end-to-end latency from
//! the schedule. Producer and consumer share the machine's clock.
//!
//! The instrument must cost little per message (issue 39 item 3), so the random bits are drawn
//! once, into a pool of blocks; a message's block is pool block `seq mod POOL_BLOCKS` with
//! every symbol XORed with a 96-bit key derived from `seq`. Two messages that share a pool
//! block differ wherever their keys differ — in all but a random ~1/64 of positions, never
//! in a run zstd could copy — so no segment, however many messages push fusion packs into
//! it, can compress one message against another: each still costs its 1 KiB.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::{RngCore, SeedableRng};
use serde::Deserialize;

/// Random bytes per message (the "1 KiB payload"): carried as `SYMBOLS` 6-bit symbols.
pub const RANDOM_BYTES: usize = 1024;
/// Base64 symbols per message: as many as base64 of `RANDOM_BYTES` bytes has characters.
pub const SYMBOLS: usize = RANDOM_BYTES.div_ceil(3) * 4;
/// Distinct random blocks in the pool (~88 KB: stays in cache).
const POOL_BLOCKS: usize = 64;
/// Key bytes per message; symbol `n` is XORed with key byte `n mod KEY_BYTES`.
const KEY_BYTES: usize = 16;
/// A body's length, about: the symbols and the JSON around them.
pub const BODY_BYTES: usize = SYMBOLS + 56;

/// The pool of random blocks and the seed of the per-message keys; shared by every cell,
/// ours and the peers', so all push the same bodies.
pub struct Payloads {
    seed: u64,
    /// `POOL_BLOCKS` blocks of `SYMBOLS` 6-bit values (0..64).
    pool: Vec<u8>,
}

impl Payloads {
    pub fn new(seed: u64) -> Self {
        let mut pool = vec![0u8; POOL_BLOCKS * SYMBOLS];
        rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut pool);
        for v in &mut pool {
            *v &= 63;
        }
        Self { seed, pool }
    }

    /// The JSON document of message `seq`, scheduled at `sched_us` (µs since the epoch):
    /// `{"b":"<symbols>","i":seq,"t":sched_us}` (keys in the order jsonb stores them).
    pub fn body(&self, seq: u64, sched_us: i64) -> String {
        let mut out = Vec::with_capacity(BODY_BYTES);
        self.write(&mut out, seq, sched_us);
        String::from_utf8(out).expect("bench bodies are ASCII")
    }

    /// Appends the document of [`Payloads::body`] to `out` (a push body in the making).
    pub fn write(&self, out: &mut Vec<u8>, seq: u64, sched_us: i64) {
        let block = (seq % POOL_BLOCKS as u64) as usize * SYMBOLS;
        let block = &self.pool[block..block + SYMBOLS];
        let key = self.key(seq);
        out.extend_from_slice(br#"{"b":""#);
        let start = out.len();
        out.resize(start + SYMBOLS, 0);
        let (dst, dst_tail) = out[start..].as_chunks_mut::<KEY_BYTES>();
        let (src, src_tail) = block.as_chunks::<KEY_BYTES>();
        for (dst, src) in dst.iter_mut().zip(src) {
            for n in 0..KEY_BYTES {
                dst[n] = symbol(src[n] ^ key[n]);
            }
        }
        for (n, (d, s)) in dst_tail.iter_mut().zip(src_tail).enumerate() {
            *d = symbol(s ^ key[n]);
        }
        out.extend_from_slice(br#"","i":"#);
        out.extend_from_slice(itoa::Buffer::new().format(seq).as_bytes());
        out.extend_from_slice(br#","t":"#);
        out.extend_from_slice(itoa::Buffer::new().format(sched_us).as_bytes());
        out.push(b'}');
    }

    /// Message `seq`'s key: `KEY_BYTES` 6-bit values from a SplitMix64 stream.
    fn key(&self, seq: u64) -> [u8; KEY_BYTES] {
        let mut state = self.seed ^ seq.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut key = [0u8; KEY_BYTES];
        for half in key.chunks_exact_mut(8) {
            half.copy_from_slice(&(splitmix64(&mut state) & 0x3F3F_3F3F_3F3F_3F3F).to_le_bytes());
        }
        key
    }
}

/// One step of SplitMix64 (Steele, Lea, Flood 2014).
fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The base64 character of a 6-bit value, without a table or a multiplication (compares,
/// masks and adds: the loop over a block vectorizes).
fn symbol(v: u8) -> u8 {
    let v = v & 63;
    // All ones when v >= k, else zero.
    let at_least = |k: u8| 0u8.wrapping_sub(u8::from(v >= k));
    (v + b'A')
        .wrapping_add(at_least(26) & 6)
        .wrapping_sub(at_least(52) & 75)
        .wrapping_sub(at_least(62) & 15)
        .wrapping_add(at_least(63) & 3)
}

/// The fields a consumer reads back.
#[derive(Debug, Deserialize, PartialEq, Eq)]
pub struct Stamp {
    pub i: u64,
    pub t: i64,
}

/// How far from a body's end its stamp is looked for (`,"i":<20 digits>,"t":<20 digits>}`,
/// with room for the spaces jsonb's text form adds).
const STAMP_TAIL: usize = 64;

impl Stamp {
    /// The stamp of a bench body as sent or as a peer renders it back (jsonb's text form,
    /// `{"b": "…", "i": 1, "t": 2}`): read from the last bytes without scanning the block;
    /// any other document is parsed in full.
    pub fn parse(json: &[u8]) -> Option<Self> {
        Self::from_tail(json).or_else(|| serde_json::from_slice(json).ok())
    }

    fn from_tail(json: &[u8]) -> Option<Self> {
        let tail = &json[json.len().saturating_sub(STAMP_TAIL)..];
        let (i, rest) = field(tail, b'i')?;
        let (t, rest) = field(rest, b't')?;
        let (&close, _) = rest.split_first()?;
        (close == b'}').then_some(Self {
            i: u64::try_from(i).ok()?,
            t,
        })
    }
}

/// In `s`: `"<key>":` then an integer, with the spaces and one comma around it skipped; the
/// integer and what follows it. The key is found from its quote: base64 has none.
fn field(s: &[u8], key: u8) -> Option<(i64, &[u8])> {
    let at = s.windows(4).position(|w| w == [b'"', key, b'"', b':'])?;
    let s = skip_spaces(&s[at + 4..]);
    let (negative, s) = match s.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, s),
    };
    let digits = s.iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || digits > 19 {
        return None;
    }
    let mut n: i64 = 0;
    for d in &s[..digits] {
        n = n.checked_mul(10)?.checked_add(i64::from(d - b'0'))?;
    }
    let rest = skip_spaces(&s[digits..]);
    let rest = match rest.split_first() {
        Some((b',', after)) => skip_spaces(after),
        _ => rest,
    };
    Some((if negative { -n } else { n }, rest))
}

fn skip_spaces(s: &[u8]) -> &[u8] {
    let n = s.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &s[n..]
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
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn bodies_round_trip_and_carry_a_kib_of_entropy() {
        let p = Payloads::new(7);
        let body = p.body(42, 1_700_000_000_000_000);
        let s = Stamp::parse(body.as_bytes()).unwrap();
        assert_eq!((s.i, s.t), (42, 1_700_000_000_000_000));
        assert!(body.len() > RANDOM_BYTES * 4 / 3);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let block = v["b"].as_str().unwrap();
        assert_eq!(block.len(), SYMBOLS);
        assert!(block
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/'));
        assert_ne!(p.body(1, 0)[..SYMBOLS], p.body(2, 0)[..SYMBOLS]);
    }

    #[test]
    fn every_symbol_is_reached_and_distinct() {
        let chars: HashSet<u8> = (0..64).map(symbol).collect();
        assert_eq!(chars.len(), 64);
        let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        assert!((0..64).all(|v| symbol(v) == alphabet[v as usize]));
    }

    /// Messages that share a pool block (`seq` apart by `POOL_BLOCKS`) as well as any run of
    /// consecutive ones: no segment of them compresses below the random bits they carry.
    #[test]
    fn consecutive_and_pool_sharing_bodies_do_not_compress() {
        let p = Payloads::new(11);
        for seqs in [
            (0..500).collect::<Vec<u64>>(),
            (0..500).map(|n| n * POOL_BLOCKS as u64).collect(),
        ] {
            let bodies: String = seqs.iter().map(|&s| p.body(s, 0)).collect();
            let compressed = zstd_len(&bodies);
            // 6 random bits per symbol: the floor is 3/4 of the symbols' bytes.
            let floor = seqs.len() * SYMBOLS * 3 / 4;
            assert!(
                compressed as f64 > 0.95 * floor as f64,
                "{compressed} bytes for {} bodies (floor {floor})",
                seqs.len()
            );
        }
    }

    #[test]
    fn no_two_bodies_share_a_block() {
        let p = Payloads::new(3);
        let blocks: HashSet<String> = (0..5_000)
            .map(|s| p.body(s, 0)[6..6 + SYMBOLS].to_string())
            .collect();
        assert_eq!(blocks.len(), 5_000);
    }

    #[test]
    fn stamps_parse_from_our_bodies_and_from_jsonb_text() {
        let p = Payloads::new(5);
        for (seq, t) in [
            (0, 0),
            (u64::MAX >> 1, -5),
            (123_456, 1_765_000_000_000_000),
        ] {
            let body = p.body(seq, t);
            assert_eq!(Stamp::parse(body.as_bytes()), Some(Stamp { i: seq, t }));
            // PostgreSQL's jsonb text form of the same document.
            let v: serde_json::Value = serde_json::from_str(&body).unwrap();
            let jsonb = format!(
                r#"{{"b": "{}", "i": {seq}, "t": {t}}}"#,
                v["b"].as_str().unwrap()
            );
            assert_eq!(
                Stamp::from_tail(jsonb.as_bytes()),
                Some(Stamp { i: seq, t })
            );
        }
        // Other shapes still parse, in full.
        assert_eq!(
            Stamp::parse(br#"{"t": 9, "i": 8, "x": [1]}"#),
            Some(Stamp { i: 8, t: 9 })
        );
        assert_eq!(Stamp::parse(br#"{"i":"8","t":9}"#), None);
        assert_eq!(Stamp::parse(b"[]"), None);
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
