//! Any route, any method, arbitrary path parameters, query string, content type, content
//! encoding and body: the router's matching and every handler's extractors.
#![no_main]

use axum::http::Method;
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use queen_broker_fuzz::{query, segment, send, CONTENT_TYPES};

/// Every route of the broker (README table, docs/wire.md §2); `{}` is a path parameter.
const ROUTES: &[(&str, &str)] = &[
    ("GET", "/health"),
    ("GET", "/metrics"),
    ("GET", "/status"),
    ("GET", "/api/v1/status"),
    ("POST", "/api/v1/configure"),
    ("GET", "/api/v1/resources/queues"),
    ("GET", "/api/v1/resources/queues/{}"),
    ("DELETE", "/api/v1/resources/queues/{}"),
    ("GET", "/api/v1/resources/queues/{}/depth"),
    ("GET", "/api/v1/resources/overview"),
    ("POST", "/api/v1/stats/refresh"),
    ("POST", "/api/v1/push"),
    ("GET", "/api/v1/pop"),
    ("GET", "/api/v1/pop/queue/{}"),
    ("GET", "/api/v1/pop/queue/{}/partition/{}"),
    ("POST", "/api/v1/ack"),
    ("POST", "/api/v1/ack/batch"),
    ("POST", "/api/v1/lease/{}/extend"),
    ("GET", "/api/v1/dlq"),
    ("POST", "/api/v1/transaction"),
    ("GET", "/api/v1/consumer-groups"),
    ("GET", "/api/v1/consumer-groups/lagging"),
    ("GET", "/api/v1/consumer-groups/{}"),
    ("DELETE", "/api/v1/consumer-groups/{}"),
    ("POST", "/api/v1/consumer-groups/{}/subscription"),
    ("DELETE", "/api/v1/consumer-groups/{}/queues/{}"),
    ("POST", "/api/v1/consumer-groups/{}/queues/{}/seek"),
    (
        "POST",
        "/api/v1/consumer-groups/{}/queues/{}/partitions/{}/seek",
    ),
    ("GET", "/api/v1/messages/{}/{}"),
    ("POST", "/api/v1/traces"),
];

const METHODS: [Method; 6] = [
    Method::GET,
    Method::POST,
    Method::DELETE,
    Method::PUT,
    Method::HEAD,
    Method::OPTIONS,
];

const ENCODINGS: [&str; 5] = ["gzip", "zstd", "deflate", "identity", "x-unknown"];

#[derive(Arbitrary, Debug)]
struct Input {
    route: u8,
    /// Another method than the route's (a method the path does not serve).
    method: Option<u8>,
    params: [Vec<u8>; 3],
    query: Option<Vec<u8>>,
    content_type: u8,
    encoding: Option<u8>,
    body: Vec<u8>,
}

fuzz_target!(|input: Input| {
    let (method, template) = ROUTES[usize::from(input.route) % ROUTES.len()];
    let method = match input.method {
        Some(m) => METHODS[usize::from(m) % METHODS.len()].clone(),
        None => Method::from_bytes(method.as_bytes()).expect("a known method"),
    };
    let mut path = String::new();
    for (i, piece) in template.split("{}").enumerate() {
        if i > 0 {
            path.push_str(&segment(&input.params[i - 1]));
        }
        path.push_str(piece);
    }
    if let Some(q) = &input.query {
        path.push('?');
        path.push_str(&query(q));
    }
    let mut headers = Vec::new();
    if let Some(ct) = CONTENT_TYPES[usize::from(input.content_type) % CONTENT_TYPES.len()] {
        headers.push(("content-type", ct));
    }
    if let Some(e) = input.encoding {
        headers.push((
            "content-encoding",
            ENCODINGS[usize::from(e) % ENCODINGS.len()],
        ));
    }
    send(method, &path, &headers, input.body);
});
