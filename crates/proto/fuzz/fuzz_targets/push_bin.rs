//! `QPB1` push bodies: any bytes parse to an envelope or a typed error, never a panic, and
//! decompression stays within the limit given.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = queen_proto::push_bin::parse_push(bytes::Bytes::copy_from_slice(data), 1 << 20);
});
