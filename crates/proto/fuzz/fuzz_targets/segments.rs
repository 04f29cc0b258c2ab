//! Segment blobs: bounded and exactly-sized decompression, then the frames inside.
#![no_main]
use libfuzzer_sys::fuzz_target;
use queen_proto::{frame, segment};

fuzz_target!(|data: &[u8]| {
    if let Ok(raw) = segment::decompress(data, 1 << 20) {
        let _ = frame::decode_all(&raw);
    }
    if data.len() >= 2 {
        let expected = usize::from(u16::from_le_bytes([data[0], data[1]]));
        let _ = segment::decompress_sized(&data[2..], expected);
    }
});
