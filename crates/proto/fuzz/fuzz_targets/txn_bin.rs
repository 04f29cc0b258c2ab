//! `QTB1` transaction bodies: head and push groups, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = queen_proto::push_bin::parse_txn(bytes::Bytes::copy_from_slice(data), 1 << 20);
});
