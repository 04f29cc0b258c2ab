//! The spool's key (docs/engine.md §4.6): every record on disk is sealed with AES-256-GCM under
//! it, so a spool file shows no payload, and a record this broker did not write (planted, or
//! altered) is refused instead of replayed.
//!
//! The key is derived from `QUEEN_ENCRYPTION_KEY` when one is configured (then nothing on disk
//! opens the records); otherwise it is 32 random bytes kept in the spool directory's `KEY` file
//! (mode 0600, created once, never followed through a link). Its [`SpoolKey::id`], a
//! fingerprint that reveals nothing of it, is written into every file's header, so a file
//! sealed under another key is named as such rather than reported as damage.

use std::io::{self, Read, Write};
use std::path::Path;

use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::aes::cipher::BlockEncrypt;
use aes_gcm::aes::Aes256;
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use rand::rngs::OsRng;
use rand::RngCore;

use super::files;

/// The file in the spool directory that holds the key when no `QUEEN_ENCRYPTION_KEY` is set.
pub const KEY_FILE: &str = "KEY";
/// Key length in bytes (AES-256).
pub const KEY_LEN: usize = 32;
/// Length of a key's fingerprint in file headers.
pub const ID_LEN: usize = 8;
/// The GCM nonce of a sealed record.
pub const NONCE_LEN: usize = 12;
/// The GCM tag of a sealed record.
pub const TAG_LEN: usize = 16;

/// Which key seals the spool, and its fingerprint.
pub struct SpoolKey {
    aead: Aes256Gcm,
    id: [u8; ID_LEN],
    /// Where the key comes from, for messages.
    pub source: &'static str,
}

impl std::fmt::Debug for SpoolKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SpoolKey({})", self.source)
    }
}

impl SpoolKey {
    /// The key derived from `QUEEN_ENCRYPTION_KEY`'s bytes, or (none given) the one in `dir`'s
    /// `KEY` file, created when missing.
    pub fn open(dir: &Path, master: Option<&[u8; KEY_LEN]>) -> io::Result<SpoolKey> {
        match master {
            Some(master) => Ok(SpoolKey::new(
                &derive(master),
                "derived from QUEEN_ENCRYPTION_KEY",
            )),
            None => Ok(SpoolKey::new(
                &key_file(dir)?,
                "the spool directory's KEY file",
            )),
        }
    }

    pub fn new(key: &[u8; KEY_LEN], source: &'static str) -> SpoolKey {
        let block = Aes256::new(key.into());
        let mut probe = aes_gcm::aes::Block::from(*b"queen-spool-id\0\0");
        block.encrypt_block(&mut probe);
        let mut id = [0u8; ID_LEN];
        id.copy_from_slice(&probe[..ID_LEN]);
        SpoolKey {
            aead: Aes256Gcm::new(key.into()),
            id,
            source,
        }
    }

    /// The key's fingerprint (written into file headers).
    pub fn id(&self) -> [u8; ID_LEN] {
        self.id
    }

    /// `nonce || ciphertext || tag` of `plaintext`, bound to `aad`.
    pub fn seal(&self, aad: &[u8], plaintext: &[u8]) -> io::Result<Vec<u8>> {
        let mut nonce = [0u8; NONCE_LEN];
        OsRng.fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(NONCE_LEN + plaintext.len() + TAG_LEN);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plaintext);
        let tag = self
            .aead
            .encrypt_in_place_detached(Nonce::from_slice(&nonce), aad, &mut out[NONCE_LEN..])
            // Only inputs beyond GCM's 64 GiB limit fail; a record is bounded far below it.
            .map_err(|_| io::Error::other("a spool record too large to seal"))?;
        out.extend_from_slice(&tag);
        Ok(out)
    }

    /// The plaintext of what [`SpoolKey::seal`] made with the same `aad`; `None` when it was
    /// not sealed under this key with this `aad`, or was altered.
    pub fn open_sealed(&self, aad: &[u8], sealed: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < NONCE_LEN + TAG_LEN {
            return None;
        }
        let (nonce, rest) = sealed.split_at(NONCE_LEN);
        let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
        let mut out = body.to_vec();
        self.aead
            .decrypt_in_place_detached(
                Nonce::from_slice(nonce),
                aad,
                &mut out,
                Tag::from_slice(tag),
            )
            .ok()?;
        Some(out)
    }
}

/// The spool key of a `QUEEN_ENCRYPTION_KEY`: AES-256 of the master key used as a PRF over two
/// labelled blocks, so the payload key itself never seals a spool record.
fn derive(master: &[u8; KEY_LEN]) -> [u8; KEY_LEN] {
    let block = Aes256::new(master.into());
    let mut key = [0u8; KEY_LEN];
    for (i, half) in key.chunks_mut(16).enumerate() {
        let mut label = *b"queen-spool-key\0";
        label[15] = i as u8 + 1;
        let mut b = aes_gcm::aes::Block::from(label);
        block.encrypt_block(&mut b);
        half.copy_from_slice(&b);
    }
    key
}

/// The key in `dir`'s `KEY` file (32 bytes), created with fresh random bytes when missing.
fn key_file(dir: &Path) -> io::Result<[u8; KEY_LEN]> {
    let path = dir.join(KEY_FILE);
    let mut key = [0u8; KEY_LEN];
    match files::create_new(&path) {
        Ok(mut file) => {
            OsRng.fill_bytes(&mut key);
            file.write_all(&key)?;
            file.sync_all()?;
            files::sync_dir(dir)?;
            return Ok(key);
        }
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let mut file = files::open_own(&path, false)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    if bytes.len() != KEY_LEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "{} holds {} bytes, not a {KEY_LEN}-byte spool key; a broker wrote it, so it \
                 was damaged or replaced: move the spool directory away",
                path.display(),
                bytes.len()
            ),
        ));
    }
    key.copy_from_slice(&bytes);
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seals_open_only_with_the_same_key_and_aad() {
        let k = SpoolKey::new(&[7; KEY_LEN], "test");
        let sealed = k.seal(b"aad", b"secret-payload").unwrap();
        assert!(!sealed.windows(6).any(|w| w == b"secret"));
        assert_eq!(
            k.open_sealed(b"aad", &sealed).as_deref(),
            Some(&b"secret-payload"[..])
        );
        assert_eq!(k.open_sealed(b"other", &sealed), None);
        let other = SpoolKey::new(&[8; KEY_LEN], "test");
        assert_eq!(other.open_sealed(b"aad", &sealed), None);
        assert_ne!(k.id(), other.id());
        for at in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[at] ^= 1;
            assert_eq!(k.open_sealed(b"aad", &bad), None, "flip at {at}");
        }
    }

    #[test]
    fn a_derived_key_differs_from_its_master_and_is_stable() {
        let master = [3u8; KEY_LEN];
        assert_ne!(derive(&master), master);
        assert_eq!(derive(&master), derive(&master));
        assert_ne!(derive(&master), derive(&[4u8; KEY_LEN]));
    }
}
