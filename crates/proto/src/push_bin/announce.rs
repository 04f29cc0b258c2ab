//! How many bytes a `QPB1` or `QTB1` body announces it will inflate to, read from its headers
//! alone (nothing is decompressed): the flag-1 `raw_len`, and the zstd content size of every
//! pre-compressed group. The broker charges this to its in-flight budget, and decides from it
//! whether to parse off the async workers, before [`parse_push`](super::parse_push) or
//! [`parse_txn`](super::parse_txn) inflates anything.

use zstd::zstd_safe;

use super::{FLAG_FRAMES, FLAG_ZSTD, PUSH_MAGIC, TXN_MAGIC};
use crate::reader::Reader;
use crate::segment;

/// The bytes `body` announces it inflates to, saturating. Parsing stops at the first group
/// it cannot read, so a body broken after some groups announces what parsing would inflate
/// before reaching the break. A flag-1 body that also has flag 8 announces `usize::MAX`: its
/// groups' sizes are only known once the outer frame is inflated, so a caller must take its
/// whole decompression limit for it. Anything that is not such a body announces 0.
pub fn announced_inflation(body: &[u8]) -> usize {
    let mut r = Reader::new(body);
    let magic = r.take(4);
    let Some(flags) = r.u8() else {
        return 0;
    };
    if magic == Some(&PUSH_MAGIC[..]) {
        if flags & FLAG_ZSTD != 0 {
            if flags & FLAG_FRAMES != 0 {
                return usize::MAX;
            }
            return r
                .u32()
                .map_or(0, |raw_len| usize::try_from(raw_len).unwrap_or(usize::MAX));
        }
        if flags & FLAG_FRAMES == 0 {
            return 0;
        }
        return groups(r);
    }
    if magic == Some(&TXN_MAGIC[..]) {
        if r.bytes32().is_none() {
            return 0;
        }
        return groups(r);
    }
    0
}

/// The summed zstd content sizes of pre-compressed groups, up to the first unreadable one.
fn groups(mut r: Reader<'_>) -> usize {
    let Some(count) = r.u32() else {
        return 0;
    };
    let mut total = 0usize;
    for _ in 0..count {
        let z = (|| {
            r.bytes16()?;
            r.bytes16()?;
            r.u32()?;
            r.bytes32()
        })();
        let Some(z) = z.filter(|z| segment::is_zstd(z)) else {
            break;
        };
        match zstd_safe::get_frame_content_size(z) {
            Ok(Some(size)) => {
                total = total.saturating_add(usize::try_from(size).unwrap_or(usize::MAX));
            }
            _ => break,
        }
    }
    total
}
