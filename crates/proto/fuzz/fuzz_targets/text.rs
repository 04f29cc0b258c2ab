//! Text decoders: ISO-8601 timestamps (query strings, seeks) and transaction-hash hex, plus
//! the timestamp renderer over any 64-bit instant.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = queen_proto::time::parse_iso(text);
        let _ = queen_proto::from_hex(text);
    }
    if data.len() >= 8 {
        let micros = i64::from_le_bytes(data[..8].try_into().unwrap());
        let _ = queen_proto::time::iso_micros(micros);
        let _ = queen_proto::time::iso_millis(micros);
    }
});
