//! `POST /api/v1/configure`: queue name, namespace, task and every option's value.
//! First byte: content type; the rest: the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queen_broker_fuzz::post;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    post("/api/v1/configure", pick, body);
});
