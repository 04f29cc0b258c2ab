//! The pop routes' query strings (batch, wait, timeout, consumerGroup, leaseSeconds,
//! subscriptionMode/From, namespace, task, …) and path names. Input: queue name, `0xFF`,
//! partition name, `0xFF`, query text; with no partition part the pop is a wildcard one, and
//! with an empty queue part a discovery pop.
#![no_main]

use axum::http::Method;
use libfuzzer_sys::fuzz_target;
use queen_broker_fuzz::{query, segment, send, split};

fuzz_target!(|data: &[u8]| {
    let (queue, rest) = split(data);
    let (partition, q) = split(rest);
    let path = if queue.is_empty() {
        "/api/v1/pop".to_string()
    } else if partition.is_empty() {
        format!("/api/v1/pop/queue/{}", segment(queue))
    } else {
        format!(
            "/api/v1/pop/queue/{}/partition/{}",
            segment(queue),
            segment(partition)
        )
    };
    send(
        Method::GET,
        &format!("{path}?{}", query(q)),
        &[],
        Vec::new(),
    );
});
