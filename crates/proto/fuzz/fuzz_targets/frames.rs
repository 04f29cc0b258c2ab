//! Stored message frames: a whole buffer, and an exact count taken from the first byte; every
//! decoded frame's accessors must be total too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use queen_proto::frame;

fuzz_target!(|data: &[u8]| {
    if let Ok(frames) = frame::decode_all(data) {
        for f in &frames {
            let _ = (f.payload_json(), f.message_uuid(), f.trace_uuid(), f.is_encrypted());
        }
    }
    if let Some((&n, rest)) = data.split_first() {
        let _ = frame::decode_exact(rest, usize::from(n));
    }
});
