//! One record of a spool file (docs/engine.md §4.6): the messages of one (queue, partition)
//! group of one push request, in request order. Little-endian:
//!
//! ```text
//! u32 body_len
//! u64 check       xxh3_64 of the four length bytes followed by the body
//! body:  u16 len + queue | u16 len + partition | u32 n | n stored frames (docs/wire.md §6.5)
//! ```
//!
//! The check covers the length too, so a length torn or scrambled by a crash cannot send the
//! reader into the middle of the next record: a record either checks out whole or ends the
//! file's valid part (a torn tail). Pure byte work; the files are `spool/mod.rs`'s.

use std::io::{self, Read};

use bytes::Bytes;
use queen_proto::frame::{decode_exact, Frame, FrameError};
use uuid::Uuid;
use xxhash_rust::xxh3::Xxh3;

/// Bytes before a record's body: its length and its check.
pub const HEADER_LEN: u64 = 12;

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
    pub items: Vec<SpoolItem>,
}

impl SpoolGroup {
    /// The whole record (header and body) of this group.
    pub fn encode(&self) -> Result<Vec<u8>, FrameError> {
        let frames = self.items.iter().map(|item| Frame {
            flags: 0,
            message_id: item.message_id.into_bytes(),
            trace_id: item.trace_id.map(Uuid::into_bytes),
            transaction_id: &item.transaction_id,
            producer_sub: item.producer_sub.as_deref(),
            payload: &item.payload,
        });
        encode(&self.queue, &self.partition, frames)
    }
}

/// The whole record of `frames`, all of (`queue`, `partition`). Fails on a name of more than
/// 65 535 bytes (the push path refuses those before anything is spooled).
pub fn encode<'a>(
    queue: &str,
    partition: &str,
    frames: impl ExactSizeIterator<Item = Frame<'a>>,
) -> Result<Vec<u8>, FrameError> {
    let n = u32::try_from(frames.len()).map_err(|_| FrameError::BodyTooLong(frames.len()))?;
    let mut out = vec![0u8; HEADER_LEN as usize];
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
    let body_len = out.len() - HEADER_LEN as usize;
    let len = u32::try_from(body_len).map_err(|_| FrameError::BodyTooLong(body_len))?;
    let check = checksum(len, &out[HEADER_LEN as usize..]);
    out[..4].copy_from_slice(&len.to_le_bytes());
    out[4..12].copy_from_slice(&check.to_le_bytes());
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
    /// A whole record that checks out, and its size on disk.
    Record(SpoolGroup, u64),
    /// The end of the file, exactly at a record boundary.
    End,
    /// Bytes that are not a whole valid record: a write cut short by a crash (or damage).
    /// Everything from here on is unusable.
    Torn(String),
}

/// Reads the record at the reader's position; `left` is how many bytes the file holds from
/// here (a length beyond it is a torn record, never a huge allocation).
pub fn read_next(r: &mut impl Read, left: u64) -> io::Result<Next> {
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
    let check = u64::from_le_bytes(header[4..12].try_into().expect("8 bytes"));
    if u64::from(len) > left - HEADER_LEN {
        return Ok(Next::Torn(format!(
            "a record of {len} bytes with only {} left",
            left - HEADER_LEN
        )));
    }
    let mut body = vec![0u8; len as usize];
    r.read_exact(&mut body)?;
    if checksum(len, &body) != check {
        return Ok(Next::Torn(format!(
            "a record of {len} bytes fails its check"
        )));
    }
    match decode_body(Bytes::from(body)) {
        Ok(group) => Ok(Next::Record(group, HEADER_LEN + u64::from(len))),
        Err(e) => Ok(Next::Torn(format!("a record that checks out but {e}"))),
    }
}

/// The group of a body whose check passed.
fn decode_body(body: Bytes) -> Result<SpoolGroup, String> {
    let mut at = 0usize;
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
        items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn group(queue: &str, n: usize) -> SpoolGroup {
        SpoolGroup {
            queue: queue.into(),
            partition: "p-1".into(),
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

    fn read_all(bytes: &[u8]) -> (Vec<SpoolGroup>, Option<String>) {
        let mut r = bytes;
        let mut left = bytes.len() as u64;
        let mut groups = Vec::new();
        loop {
            match read_next(&mut r, left).unwrap() {
                Next::Record(g, size) => {
                    left -= size;
                    groups.push(g);
                }
                Next::End => return (groups, None),
                Next::Torn(why) => return (groups, Some(why)),
            }
        }
    }

    #[test]
    fn records_round_trip_back_to_back() {
        let (a, b) = (group("orders", 3), group("ünïcode", 1));
        let mut file = a.encode().unwrap();
        file.extend(b.encode().unwrap());
        let (groups, torn) = read_all(&file);
        assert_eq!(torn, None);
        assert_eq!(groups, vec![a, b]);
    }

    #[test]
    fn every_cut_of_the_last_record_is_a_torn_tail_and_keeps_the_first() {
        let first = group("q", 2);
        let mut file = first.encode().unwrap();
        let whole = file.len();
        file.extend(group("q", 4).encode().unwrap());
        for cut in whole + 1..file.len() {
            let (groups, torn) = read_all(&file[..cut]);
            assert_eq!(groups, vec![first.clone()], "cut at {cut}");
            assert!(torn.is_some(), "cut at {cut} must be torn");
        }
    }

    #[test]
    fn a_flipped_byte_anywhere_fails_the_check() {
        let file = group("q", 2).encode().unwrap();
        for at in 0..file.len() {
            let mut bad = file.clone();
            bad[at] ^= 0x40;
            let (groups, torn) = read_all(&bad);
            assert!(groups.is_empty() && torn.is_some(), "flip at {at}");
        }
    }

    #[test]
    fn an_empty_file_is_a_clean_end() {
        assert_eq!(read_all(&[]), (Vec::new(), None));
    }
}
