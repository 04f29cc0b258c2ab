//! At-rest encryption of payloads (docs/engine.md §3.1): the broker's key, sealing a payload
//! into the envelope (`queen_proto::encryption`) with a fresh IV from the operating system's
//! CSPRNG, opening envelopes for the readers (pop, DLQ listing, message detail), and which
//! queues to seal (`accel::encryption`). Every writer of segments asks [`Encryption::wants`];
//! the push SQL refuses plaintext for an encrypted queue, so a stale answer costs a round, never
//! a plaintext row.

use queen_proto::encryption::{Cipher, EnvelopeError, IV_LEN};
use rand::rngs::OsRng;
use rand::RngCore;

use crate::accel::encryption::EncryptedQueues;
use crate::config::EncryptionKey;
use crate::error::{Error, Result};

/// The configuration variable that holds the key, named in every refusal that needs it.
pub const KEY_VARIABLE: &str = "QUEEN_ENCRYPTION_KEY";

/// The broker's key (if configured) and its knowledge of which queues encrypt.
pub struct Encryption {
    cipher: Option<Cipher>,
    queues: EncryptedQueues,
}

impl Encryption {
    pub fn new(key: Option<&EncryptionKey>) -> Self {
        Encryption {
            cipher: key.map(|k| Cipher::new(k.bytes())),
            queues: EncryptedQueues::default(),
        }
    }

    /// Whether this broker can seal and open envelopes.
    pub fn has_key(&self) -> bool {
        self.cipher.is_some()
    }

    /// Whether pushes to `queue` are to be sealed (as last learned; see the module doc).
    pub fn wants(&self, queue: &str) -> bool {
        self.queues.contains(queue)
    }

    /// Records whether `queue` encrypts, as the database said.
    pub fn learn(&self, queue: &str, encrypted: bool) {
        self.queues.learn(queue, encrypted);
    }

    /// The envelope of `payload` (an empty payload, JSON null, is sealed like any other).
    /// Fails only when this broker has no key: the queue's messages cannot be stored here.
    pub fn seal(&self, queue: &str, payload: &[u8]) -> Result<Vec<u8>> {
        let cipher = self.cipher.as_ref().ok_or_else(|| no_key(queue))?;
        let mut iv = [0u8; IV_LEN];
        OsRng.fill_bytes(&mut iv);
        Ok(cipher.seal(&iv, payload))
    }

    /// The plaintext of a stored envelope, or the reason it cannot be read (shown to the
    /// client for that one message).
    pub fn open(&self, envelope: &[u8]) -> std::result::Result<Vec<u8>, String> {
        let cipher = self.cipher.as_ref().ok_or_else(|| {
            format!("the payload is encrypted and this broker has no {KEY_VARIABLE}")
        })?;
        cipher
            .open(envelope)
            .map_err(|e: EnvelopeError| e.to_string())
    }
}

/// A push to an encrypted queue through a broker without the key.
pub fn no_key(queue: &str) -> Error {
    Error::bad(format!(
        "queue {queue} has encryptionEnabled, but this broker has no {KEY_VARIABLE} to seal \
         its payloads"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_with_fresh_ivs_and_opens_with_the_same_key() {
        let key = EncryptionKey::from_hex(&"11".repeat(32)).expect("key");
        let enc = Encryption::new(Some(&key));
        let a = enc.seal("q", b"{\"n\":1}").expect("sealed");
        let b = enc.seal("q", b"{\"n\":1}").expect("sealed");
        assert_ne!(a, b, "every envelope gets its own IV");
        assert_eq!(enc.open(&a).as_deref(), Ok(&b"{\"n\":1}"[..]));
        let other = Encryption::new(Some(&EncryptionKey::from_hex(&"22".repeat(32)).unwrap()));
        assert!(other
            .open(&a)
            .unwrap_err()
            .contains("another QUEEN_ENCRYPTION_KEY"));
        let none = Encryption::new(None);
        assert!(none
            .open(&a)
            .unwrap_err()
            .contains("no QUEEN_ENCRYPTION_KEY"));
        assert!(none.seal("q", b"1").is_err());
    }
}
