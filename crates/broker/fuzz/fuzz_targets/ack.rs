//! The ack bodies: `POST /ack` (one item), `/ack/batch` (items, lease-less or not, statuses,
//! groups) and `/lease/:id/extend`. First byte: route and content type; the rest: the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queen_broker_fuzz::post;

const PATHS: [&str; 3] = [
    "/api/v1/ack",
    "/api/v1/ack/batch",
    "/api/v1/lease/0190b1e2-0000-7000-8000-000000000000/extend",
];

fuzz_target!(|data: &[u8]| {
    let Some((&pick, body)) = data.split_first() else {
        return;
    };
    post(PATHS[usize::from(pick) % PATHS.len()], pick / 3, body);
});
