//! Consumer-group bodies: `subscription` (subscriptionTimestamp) and both seeks (timestamp,
//! toEnd), and `POST /traces`. Input: group name, `0xFF`, body; the first byte of the body
//! part picks the route and content type.
#![no_main]

use libfuzzer_sys::fuzz_target;
use queen_broker_fuzz::{post, segment, split};

fuzz_target!(|data: &[u8]| {
    let (group, rest) = split(data);
    let Some((&pick, body)) = rest.split_first() else {
        return;
    };
    let g = segment(group);
    let path = match pick % 4 {
        0 => format!("/api/v1/consumer-groups/{g}/subscription"),
        1 => format!("/api/v1/consumer-groups/{g}/queues/q/seek"),
        2 => format!("/api/v1/consumer-groups/{g}/queues/q/partitions/p/seek"),
        _ => "/api/v1/traces".to_string(),
    };
    post(&path, pick / 4, body);
});
