//! `QPF1` framed pop answers (what clients decode): decode, and render what decoded.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = queen_proto::pop_framed::is_framed(data);
    if let Ok(answer) = queen_proto::pop_framed::decode(data) {
        let _ = answer.to_json();
    }
});
