//! One record of a spool file (docs/engine.md §4.6): the messages of one (queue, partition)
//! group of one push request, in request order, sealed under the spool's key
//! (`spool/key.rs`). Little-endian, after the file's header (`spool/files.rs`):
//!
//! ```text
//! u32 len         of what follows the check
//! u64 check       xxh3_64 of the four length bytes followed by the sealed bytes
//! sealed          12-byte nonce | AES-256-GCM(body) | 16-byte tag, bound to the file's
//!                 magic and id and to `len`
//! body:  u8 flags | u16 len + queue | u16 len + partition | u32 n | n stored frames
//!        (docs/wire.md §6.5); flag 1: the push's commit was in doubt (see `SpoolGroup`)
//! ```
//!
//! The check covers the length too, so a length torn or scrambled by a crash cannot send the
//! reader into the middle of the next record: a record either checks out whole or ends the
//! file's valid part (a torn tail). A record that checks out but does not open under the key
//! was not written by this broker (planted, or altered with its check recomputed): it is
//! [`Next::Forged`], never replayed. The seal hides every payload, the queue (and so the
//! tenant) and the producerSub, and authenticates them. Pure byte work; the files are
//! `spool/mod.rs`'s.

use std::io::{self, Read};

use bytes::Bytes;
use queen_proto::frame::{decode_exact, Frame, FrameError};
use uuid::Uuid;
use xxhash_rust::xxh3::Xxh3;

use super::files::{FileId, MAGIC};
use super::key::{SpoolKey, NONCE_LEN, TAG_LEN};

/// Bytes before a record's sealed part: its length and its check.
pub const HEADER_LEN: u64 = 12;
/// Body flag: the group's commit was in doubt when it was spooled.
const IN_DOUBT: u8 = 1;

/// One spooled message, as it will be pushed again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolItem {
    pub message_id: Uuid,
    pub trace_id: Option<Uuid>,
    pub transaction_id: String,
    /// Who pushed it (auth on), stamped again when it is stored.
    pub producer_sub: Option<String>,
    pub payload: Bytes,
}

/// The messages of one record: one (queue, partition), in the order they were pushed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpoolGroup {
    pub queue: String,
    pub partition: String,
    /// Spooled after a write whose commit was in doubt (the connection was lost while
    /// PostgreSQL had it): some of these messages may be stored already, so the drain asks
    /// PostgreSQL which before it stores the rest.
    pub in_doubt: bool,
    pub items: Vec<SpoolItem>,
}

impl SpoolGroup {
    /// The record body of this group (what [`seal`] seals).
    pub fn body(&self) -> Result<Vec<u8>, FrameError> {
        let frames = self.items.iter().map(|item| Frame {
            flags: 0,
            message_id: item.message_id.into_bytes(),
            trace_id: item.trace_id.map(Uuid::into_bytes),
            transaction_id: &item.transaction_id,
            producer_sub: item.producer_sub.as_deref(),
            payload: &item.payload,
        });
        body(&self.queue, &self.partition, self.in_doubt, frames)
    }
}

/// The record body of `frames`, all of (`queue`, `partition`). Fails on a name of more than
/// 65 535 bytes (the push path refuses those before anything is spooled).
pub fn body<'a>(
    queue: &str,
    partition: &str,
    in_doubt: bool,
    frames: impl ExactSizeIterator<Item = Frame<'a>>,
) -> Result<Vec<u8>, FrameError> {
    let n = u32::try_from(frames.len()).map_err(|_| FrameError::BodyTooLong(frames.len()))?;
    let mut out = vec![if in_doubt { IN_DOUBT } else { 0 }];
    for (field, name) in [("queue", queue), ("partition", partition)] {
        let len = u16::try_from(name.len()).map_err(|_| FrameError::FieldTooLong {
            field,
            len: name.len(),
        })?;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(name.as_bytes());
    }
    out.extend_from_slice(&n.to_le_bytes());
    for frame in frames {
        frame.encode_into(&mut out)?;
    }
    let limit = u32::MAX as usize - NONCE_LEN - TAG_LEN;
    if out.len() > limit {
        return Err(FrameError::BodyTooLong(out.len()));
    }
    Ok(out)
}

/// The size on disk of the record of a body of `body_len` bytes.
pub fn sealed_len(body_len: usize) -> u64 {
    HEADER_LEN + (NONCE_LEN + body_len + TAG_LEN) as u64
}

/// What a record's seal is bound to besides its own bytes: the format, its file and its length.
fn aad(file: &FileId, len: u32) -> [u8; 28] {
    let mut aad = [0u8; 28];
    aad[..8].copy_from_slice(MAGIC);
    aad[8..24].copy_from_slice(file);
    aad[24..].copy_from_slice(&len.to_le_bytes());
    aad
}

/// The whole record (header and sealed body) of `body`, for the file `file`.
pub fn seal(key: &SpoolKey, file: &FileId, body: &[u8]) -> io::Result<Vec<u8>> {
    let len = u32::try_from(NONCE_LEN + body.len() + TAG_LEN)
        .map_err(|_| io::Error::other("a spool record over 4 GiB"))?;
    let sealed = key.seal(&aad(file, len), body)?;
    let mut out = Vec::with_capacity(HEADER_LEN as usize + sealed.len());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&checksum(len, &sealed).to_le_bytes());
    out.extend_from_slice(&sealed);
    Ok(out)
}

fn checksum(len: u32, body: &[u8]) -> u64 {
    let mut h = Xxh3::new();
    h.update(&len.to_le_bytes());
    h.update(body);
    h.digest()
}

/// What the next bytes of a spool file hold.
#[derive(Debug)]
pub enum Next {
    /// A whole record that checks out and opens, and its size on disk.
    Record(SpoolGroup, u64),
    /// The end of the file, exactly at a record boundary.
    End,
    /// Bytes that are not a whole valid record: a write cut short by a crash (or damage).
    /// Everything from here on is unusable.
    Torn(String),
    /// A whole record that does not open under the spool's key in this file: not this
    /// broker's. Never replayed.
    Forged(String),
}

/// Reads the record at the reader's position in the file `file`; `left` is how many bytes the
/// file holds from here (a length beyond it is a torn record, never a huge allocation).
pub fn read_next(r: &mut impl Read, left: u64, key: &SpoolKey, file: &FileId) -> io::Result<Next> {
    if left == 0 {
        return Ok(Next::End);
    }
    if left < HEADER_LEN {
        return Ok(Next::Torn(format!(
            "{left} bytes, less than a record header"
        )));
    }
    let mut header = [0u8; HEADER_LEN as usize];
    r.read_exact(&mut header)?;
    let len = u32::from_le_bytes([header[0], header[1], header[2], header[3]]);
    let mut check = [0u8; 8];
    check.copy_from_slice(&header[4..12]);
    let check = u64::from_le_bytes(check);
    if u64::from(len) > left - HEADER_LEN {
        return Ok(Next::Torn(format!(
            "a record of {len} bytes with only {} left",
            left - HEADER_LEN
        )));
    }
    let mut sealed = vec![0u8; len as usize];
    r.read_exact(&mut sealed)?;
    if checksum(len, &sealed) != check {
        return Ok(Next::Torn(format!(
            "a record of {len} bytes fails its check"
        )));
    }
    let Some(body) = key.open_sealed(&aad(file, len), &sealed) else {
        return Ok(Next::Forged(format!(
            "a record of {len} bytes does not open under the spool key: this broker did not \
             write it (planted, altered, or moved from another file)"
        )));
    };
    match decode_body(Bytes::from(body)) {
        Ok(group) => Ok(Next::Record(group, HEADER_LEN + u64::from(len))),
        Err(e) => Ok(Next::Forged(format!("a sealed record that opens but {e}"))),
    }
}

/// The group of a body whose check passed.
fn decode_body(body: Bytes) -> Result<SpoolGroup, String> {
    let flags = *body.first().ok_or("it is empty")?;
    let mut at = 1usize;
    let mut name = |field: &str| -> Result<String, String> {
        let len = body
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]) as usize)
            .ok_or_else(|| format!("its {field} is cut short"))?;
        let text = body
            .get(at + 2..at + 2 + len)
            .ok_or_else(|| format!("its {field} is cut short"))?;
        at += 2 + len;
        String::from_utf8(text.to_vec()).map_err(|_| format!("its {field} is not UTF-8"))
    };
    let queue = name("queue")?;
    let partition = name("partition")?;
    let n = body
        .get(at..at + 4)
        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize)
        .ok_or("its message count is cut short")?;
    let frames_at = at + 4;
    let frames = &body[frames_at..];
    let decoded = decode_exact(frames, n).map_err(|e| format!("its frames are bad: {e}"))?;
    let items = decoded
        .iter()
        .map(|f| SpoolItem {
            message_id: f.message_uuid(),
            trace_id: f.trace_uuid(),
            transaction_id: f.transaction_id.to_string(),
            producer_sub: f.producer_sub.map(str::to_string),
            payload: body.slice_ref(f.payload),
        })
        .collect();
    Ok(SpoolGroup {
        queue,
        partition,
        in_doubt: flags & IN_DOUBT != 0,
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: FileId = [5; 16];

    fn key() -> SpoolKey {
        SpoolKey::new(&[9; 32], "test")
    }

    fn group(queue: &str, n: usize) -> SpoolGroup {
        SpoolGroup {
            queue: queue.into(),
            partition: "p-1".into(),
            in_doubt: n % 2 == 1,
            items: (0..n)
                .map(|i| SpoolItem {
                    message_id: queen_proto::new_v7(),
                    trace_id: (i % 2 == 0).then(queen_proto::new_v7),
                    transaction_id: format!("txn-{i}"),
                    producer_sub: (i % 3 == 0).then(|| format!("sub-{i}")),
                    payload: Bytes::from(format!("{{\"n\":{i}}}")),
                })
                .collect(),
        }
    }

    fn record(g: &SpoolGroup) -> Vec<u8> {
        seal(&key(), &FILE, &g.body().unwrap()).unwrap()
    }

    fn read_all(bytes: &[u8], file: &FileId) -> (Vec<SpoolGroup>, Option<String>) {
        let mut r = bytes;
        let mut left = bytes.len() as u64;
        let mut groups = Vec::new();
        loop {
            match read_next(&mut r, left, &key(), file).unwrap() {
                Next::Record(g, size) => {
                    left -= size;
                    groups.push(g);
                }
                Next::End => return (groups, None),
                Next::Torn(why) => return (groups, Some(format!("torn: {why}"))),
                Next::Forged(why) => return (groups, Some(format!("forged: {why}"))),
            }
        }
    }

    #[test]
    fn records_round_trip_back_to_back_and_show_no_plaintext() {
        let (a, b) = (group("orders", 3), group("ünïcode", 1));
        let mut file = record(&a);
        file.extend(record(&b));
        assert_eq!(
            file.len() as u64,
            sealed_len(a.body().unwrap().len()) + sealed_len(b.body().unwrap().len())
        );
        for plain in [&b"orders"[..], b"txn-0", b"sub-0", b"\"n\""] {
            assert!(
                !file.windows(plain.len()).any(|w| w == plain),
                "{plain:?} on disk"
            );
        }
        let (groups, torn) = read_all(&file, &FILE);
        assert_eq!(torn, None);
        assert_eq!(groups, vec![a, b]);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail_and_keeps_the_first() {
        let first = group("q", 2);
        let mut file = record(&first);
        let whole = file.len();
        file.extend(record(&group("q", 4)));
        for cut in whole + 1..file.len() {
            let (groups, torn) = read_all(&file[..cut], &FILE);
            assert_eq!(groups, vec![first.clone()], "cut at {cut}");
            assert!(
                torn.is_some_and(|t| t.starts_with("torn")),
                "cut at {cut} must be torn"
            );
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_fails_the_check() {
        let file = record(&group("q", 2));
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            let (groups, torn) = read_all(&bad, &FILE);
            assert!(groups.is_empty() && torn.is_some(), "flip at {at}");
        }
    }

    #[test]
    fn a_record_with_a_recomputed_check_or_from_another_file_is_forged() {
        let file = record(&group("q", 2));
        let (groups, why) = read_all(&file, &[6; 16]);
        assert!(groups.is_empty());
        assert!(why.is_some_and(|w| w.starts_with("forged")));
        // Altered ciphertext with its check recomputed: the check passes, the seal does not.
        let mut bad = file.clone();
        let at = bad.len() - 20;
        bad[at] ^= 1;
        let len = u32::from_le_bytes([bad[0], bad[1], bad[2], bad[3]]);
        let check = checksum(len, &bad[12..]);
        bad[4..12].copy_from_slice(&check.to_le_bytes());
        let (groups, why) = read_all(&bad, &FILE);
        assert!(groups.is_empty());
        assert!(why.is_some_and(|w| w.starts_with("forged")), "altered");
        // A record sealed under another key (a planted one).
        let other = SpoolKey::new(&[1; 32], "other");
        let planted = seal(&other, &FILE, &group("q", 1).body().unwrap()).unwrap();
        let (groups, why) = read_all(&planted, &FILE);
        assert!(groups.is_empty());
        assert!(why.is_some_and(|w| w.starts_with("forged")), "planted");
    }

    #[test]
    fn an_empty_file_is_a_clean_end() {
        assert_eq!(read_all(&[], &FILE), (Vec::new(), None));
    }
}
