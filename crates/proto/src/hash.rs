//! Transaction-id fingerprints: `xxh3_128` of the transactionId's UTF-8 bytes, rendered as 16
//! big-endian bytes (the `log_txns.hashes` elements), and their 32-character hex form.

use thiserror::Error;
use xxhash_rust::xxh3::xxh3_128;

/// Length of one fingerprint in bytes.
pub const HASH_LEN: usize = 16;

/// The fingerprint of one transactionId: `xxh3_128(txn.as_bytes())`, big-endian.
pub fn txn_hash(txn: &str) -> [u8; HASH_LEN] {
    xxh3_128(txn.as_bytes()).to_be_bytes()
}

/// The fingerprints of `txns`, concatenated in order: a `log_txns.hashes` blob, where the hash
/// at index k belongs to offset `base_offset + k`.
pub fn txn_hashes<'a, I>(txns: I) -> Vec<u8>
where
    I: IntoIterator<Item = &'a str>,
{
    let txns = txns.into_iter();
    let mut out = Vec::with_capacity(txns.size_hint().0.saturating_mul(HASH_LEN));
    for txn in txns {
        out.extend_from_slice(&txn_hash(txn));
    }
    out
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// 32 lowercase hex characters.
pub fn to_hex(hash: &[u8; HASH_LEN]) -> String {
    let mut out = String::with_capacity(2 * HASH_LEN);
    for byte in hash {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

/// Why a string is not a fingerprint in hex.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HexError {
    #[error("expected 32 hex characters, got {0} bytes")]
    Length(usize),
    #[error("invalid hex character at position {0}")]
    Char(usize),
}

/// Parses 32 hex characters (either case) back into a fingerprint.
pub fn from_hex(text: &str) -> Result<[u8; HASH_LEN], HexError> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * HASH_LEN {
        return Err(HexError::Length(bytes.len()));
    }
    let mut out = [0u8; HASH_LEN];
    for (i, byte) in out.iter_mut().enumerate() {
        let hi = nibble(bytes[2 * i]).ok_or(HexError::Char(2 * i))?;
        let lo = nibble(bytes[2 * i + 1]).ok_or(HexError::Char(2 * i + 1))?;
        *byte = (hi << 4) | lo;
    }
    Ok(out)
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hello_is_big_endian_xxh3_128() {
        let expected = xxhash_rust::xxh3::xxh3_128(b"hello").to_be_bytes();
        assert_eq!(txn_hash("hello"), expected);
        // The most significant byte comes first.
        let value = xxhash_rust::xxh3::xxh3_128(b"hello");
        assert_eq!(txn_hash("hello")[0], (value >> 120) as u8);
        assert_eq!(txn_hash("hello")[15], value as u8);
    }

    #[test]
    fn hex_round_trip() {
        for txn in ["", "hello", "order-91-created", "ünïcødé"] {
            let hash = txn_hash(txn);
            let hex = to_hex(&hash);
            assert_eq!(hex.len(), 32);
            assert!(hex
                .bytes()
                .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c)));
            assert_eq!(from_hex(&hex), Ok(hash));
            assert_eq!(from_hex(&hex.to_uppercase()), Ok(hash));
        }
        let mut known = [0u8; 16];
        known[0] = 0xab;
        known[15] = 0x01;
        assert_eq!(to_hex(&known), "ab000000000000000000000000000001");
    }

    #[test]
    fn hex_rejects_bad_input() {
        assert_eq!(from_hex(""), Err(HexError::Length(0)));
        assert_eq!(from_hex(&"0".repeat(33)), Err(HexError::Length(33)));
        let mut bad = "0".repeat(31);
        bad.push('g');
        assert_eq!(from_hex(&bad), Err(HexError::Char(31)));
        // A multi-byte character never panics on slicing.
        let odd = format!("{}é", "0".repeat(30));
        assert_eq!(odd.len(), 32);
        assert_eq!(from_hex(&odd), Err(HexError::Char(30)));
    }

    #[test]
    fn hashes_blob_is_in_order() {
        let blob = txn_hashes(["a", "b"]);
        assert_eq!(blob.len(), 32);
        assert_eq!(&blob[..16], &txn_hash("a"));
        assert_eq!(&blob[16..], &txn_hash("b"));
        assert!(txn_hashes(std::iter::empty()).is_empty());
    }
}
