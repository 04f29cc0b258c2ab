//! The at-rest encryption envelope (docs/engine.md §3.1): a payload of an encrypted queue is
//! stored as the JSON document
//!
//! ```text
//! {"encrypted":"<base64 ciphertext>","iv":"<base64, 16 bytes>","authTag":"<base64, 16 bytes>"}
//! ```
//!
//! sealed with AES-256-GCM under a 16-byte IV, in a frame with the [`crate::frame::ENCRYPTED`]
//! flag. The envelope is JSON so that every place that keeps a payload as JSON (the DLQ's
//! payload copy) can keep it without ever seeing the plaintext.
//!
//! Pure code: the caller supplies the key and the IV (the broker draws IVs from the operating
//! system's CSPRNG); nothing here reads a clock, a file or a random source.

use aes_gcm::aead::consts::U16;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::aes::Aes256;
use aes_gcm::{AesGcm, Nonce, Tag};
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde::Deserialize;
use thiserror::Error;

/// AES-256 key length in bytes (`QUEEN_ENCRYPTION_KEY` is this many bytes in hex).
pub const KEY_LEN: usize = 32;
/// The envelope's IV length in bytes (the GCM nonce; 16, as the envelope format fixes it).
pub const IV_LEN: usize = 16;
/// The GCM authentication tag length in bytes.
pub const TAG_LEN: usize = 16;

/// AES-256-GCM with the envelope's 16-byte nonce.
type Aead = AesGcm<Aes256, U16>;

/// Why a text is not an AES-256 key.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum KeyError {
    #[error("expected 64 hex characters, got {0}")]
    Length(usize),
    #[error("not a hex digit at position {0}")]
    Char(usize),
}

/// Reads a key written as 64 hex digits (either case).
pub fn key_from_hex(text: &str) -> Result<[u8; KEY_LEN], KeyError> {
    let bytes = text.as_bytes();
    if bytes.len() != 2 * KEY_LEN {
        return Err(KeyError::Length(text.chars().count()));
    }
    let mut key = [0u8; KEY_LEN];
    for (i, byte) in key.iter_mut().enumerate() {
        let digit = |at: usize| {
            char::from(bytes[at])
                .to_digit(16)
                .map(|d| d as u8)
                .ok_or(KeyError::Char(at))
        };
        *byte = (digit(2 * i)? << 4) | digit(2 * i + 1)?;
    }
    Ok(key)
}

/// Why an envelope cannot be opened. The texts are shown to clients per message.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum EnvelopeError {
    #[error("the stored payload is not an encryption envelope ({0})")]
    Malformed(String),
    #[error("the envelope's {0} is not valid base64")]
    Base64(&'static str),
    #[error("the envelope's {field} has {len} bytes, expected {expected}")]
    Length {
        field: &'static str,
        len: usize,
        expected: usize,
    },
    #[error(
        "the payload cannot be decrypted: it was sealed under another QUEEN_ENCRYPTION_KEY \
         or the stored envelope is corrupt"
    )]
    Authentication,
}

/// The envelope as stored.
#[derive(Deserialize)]
struct Envelope {
    encrypted: String,
    iv: String,
    #[serde(rename = "authTag")]
    auth_tag: String,
}

/// An AES-256-GCM key ready to seal and open envelopes. Its `Debug` never shows the key.
#[derive(Clone)]
pub struct Cipher(Aead);

impl std::fmt::Debug for Cipher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cipher(..)")
    }
}

impl Cipher {
    pub fn new(key: &[u8; KEY_LEN]) -> Self {
        Cipher(Aead::new(key.into()))
    }

    /// The envelope of `plaintext` sealed under `iv`. The IV must never repeat under one key:
    /// draw it from a CSPRNG.
    pub fn seal(&self, iv: &[u8; IV_LEN], plaintext: &[u8]) -> Vec<u8> {
        let mut buf = plaintext.to_vec();
        let tag = self
            .0
            .encrypt_in_place_detached(Nonce::<U16>::from_slice(iv), b"", &mut buf)
            // Only inputs beyond GCM's 64 GiB limit fail; a payload is bounded far below it.
            .expect("AES-GCM seals any payload below 64 GiB");
        format!(
            r#"{{"encrypted":"{}","iv":"{}","authTag":"{}"}}"#,
            STANDARD.encode(&buf),
            STANDARD.encode(iv),
            STANDARD.encode(tag)
        )
        .into_bytes()
    }

    /// The plaintext of an envelope [`Cipher::seal`] made under the same key.
    pub fn open(&self, envelope: &[u8]) -> Result<Vec<u8>, EnvelopeError> {
        let env: Envelope = serde_json::from_slice(envelope)
            .map_err(|e| EnvelopeError::Malformed(e.to_string()))?;
        let iv = decode_exact("iv", &env.iv, IV_LEN)?;
        let tag = decode_exact("authTag", &env.auth_tag, TAG_LEN)?;
        let mut buf = STANDARD
            .decode(env.encrypted.as_bytes())
            .map_err(|_| EnvelopeError::Base64("encrypted"))?;
        self.0
            .decrypt_in_place_detached(
                Nonce::<U16>::from_slice(&iv),
                b"",
                &mut buf,
                Tag::from_slice(&tag),
            )
            .map_err(|_| EnvelopeError::Authentication)?;
        Ok(buf)
    }
}

fn decode_exact(
    field: &'static str,
    text: &str,
    expected: usize,
) -> Result<Vec<u8>, EnvelopeError> {
    let bytes = STANDARD
        .decode(text.as_bytes())
        .map_err(|_| EnvelopeError::Base64(field))?;
    if bytes.len() != expected {
        return Err(EnvelopeError::Length {
            field,
            len: bytes.len(),
            expected,
        });
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const KEY: [u8; KEY_LEN] = [7; KEY_LEN];

    #[test]
    fn seals_into_the_documented_json_shape() {
        let sealed = Cipher::new(&KEY).seal(&[1; IV_LEN], br#"{"secret":"marker"}"#);
        let v: serde_json::Value = serde_json::from_slice(&sealed).expect("JSON");
        let keys: Vec<&str> = v
            .as_object()
            .expect("object")
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys.len(), 3);
        for key in ["encrypted", "iv", "authTag"] {
            assert!(v[key].is_string(), "{key} in {v}");
        }
        assert_eq!(STANDARD.decode(v["iv"].as_str().unwrap()).unwrap(), [1; 16]);
        assert!(!String::from_utf8_lossy(&sealed).contains("marker"));
    }

    #[test]
    fn another_key_or_a_flipped_byte_fails_authentication() {
        let sealed = Cipher::new(&KEY).seal(&[2; IV_LEN], b"\"hello\"");
        assert_eq!(
            Cipher::new(&[8; KEY_LEN]).open(&sealed),
            Err(EnvelopeError::Authentication)
        );
        let v: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        let mut ct = STANDARD.decode(v["encrypted"].as_str().unwrap()).unwrap();
        ct[0] ^= 1;
        let tampered = format!(
            r#"{{"encrypted":"{}","iv":{},"authTag":{}}}"#,
            STANDARD.encode(&ct),
            v["iv"],
            v["authTag"]
        );
        assert_eq!(
            Cipher::new(&KEY).open(tampered.as_bytes()),
            Err(EnvelopeError::Authentication)
        );
    }

    #[test]
    fn malformed_envelopes_are_typed_errors() {
        let c = Cipher::new(&KEY);
        assert!(matches!(
            c.open(b"{\"a\":1}"),
            Err(EnvelopeError::Malformed(_))
        ));
        assert!(matches!(c.open(b""), Err(EnvelopeError::Malformed(_))));
        assert_eq!(
            c.open(br#"{"encrypted":"","iv":"!!","authTag":""}"#),
            Err(EnvelopeError::Base64("iv"))
        );
        assert!(matches!(
            c.open(br#"{"encrypted":"","iv":"AAAA","authTag":""}"#),
            Err(EnvelopeError::Length { field: "iv", .. })
        ));
    }

    #[test]
    fn keys_are_64_hex_digits() {
        let hex = "00112233445566778899aabbccddeeff00112233445566778899AABBCCDDEEFF";
        let key = key_from_hex(hex).expect("valid");
        assert_eq!(key[1], 0x11);
        assert_eq!(key[31], 0xff);
        assert_eq!(key_from_hex("abcd"), Err(KeyError::Length(4)));
        let bad = format!("{}g", &hex[..63]);
        assert_eq!(key_from_hex(&bad), Err(KeyError::Char(63)));
        assert_eq!(key_from_hex(&"é".repeat(32)), Err(KeyError::Char(0)));
    }

    proptest! {
        #[test]
        fn round_trips_any_payload(
            key in any::<[u8; KEY_LEN]>(),
            iv in any::<[u8; IV_LEN]>(),
            plaintext in proptest::collection::vec(any::<u8>(), 0..2048),
        ) {
            let c = Cipher::new(&key);
            let sealed = c.seal(&iv, &plaintext);
            prop_assert_eq!(c.open(&sealed), Ok(plaintext));
        }

        #[test]
        fn any_altered_ciphertext_byte_is_refused(
            plaintext in proptest::collection::vec(any::<u8>(), 1..256),
            at in any::<proptest::sample::Index>(),
            flip in 1u8..=255,
        ) {
            let c = Cipher::new(&KEY);
            let sealed = c.seal(&[3; IV_LEN], &plaintext);
            let v: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
            let mut ct = STANDARD.decode(v["encrypted"].as_str().unwrap()).unwrap();
            let i = at.index(ct.len());
            ct[i] ^= flip;
            let tampered = format!(
                r#"{{"encrypted":"{}","iv":{},"authTag":{}}}"#,
                STANDARD.encode(&ct), v["iv"], v["authTag"]
            );
            prop_assert_eq!(c.open(tampered.as_bytes()), Err(EnvelopeError::Authentication));
        }
    }
}
