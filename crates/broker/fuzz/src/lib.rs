//! The fuzz targets' broker: one `AppState` and the real router, built once per process on a
//! single-threaded runtime, whose PostgreSQL is a Unix socket that does not exist. Every
//! request therefore runs the real extractors, parsers and validation of its route and, once
//! past them, fails fast at the pool with 503. [`send`] drives one request and checks what any
//! answer must be: no panic (libFuzzer aborts on one, in any task), an answer within
//! [`HANG`], no 5xx but 503 (which is JSON), and a 4xx that is JSON `{"error": "…"}`.

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::Router;
use clap::Parser;
use queen_broker::config::Config;
use queen_broker::engine::Engine;
use tokio::runtime::Runtime;
use tower::ServiceExt;

/// With no database, nothing should take long; an answer slower than this is a hang.
pub const HANG: Duration = Duration::from_secs(10);

/// Content types the body targets choose from (`None`: no header).
pub const CONTENT_TYPES: [Option<&str>; 4] = [
    Some("application/json"),
    Some("application/x-queen-push"),
    None,
    Some("text/plain"),
];

#[derive(Parser)]
struct Args {
    #[command(flatten)]
    cfg: Config,
}

struct Broker {
    rt: Runtime,
    app: Router,
}

fn broker() -> &'static Broker {
    static BROKER: OnceLock<Broker> = OnceLock::new();
    BROKER.get_or_init(|| {
        // Every option that matters is on the command line, so the environment cannot point
        // the fuzzer at a real database.
        let args = Args::parse_from([
            "queen-broker-fuzz",
            "--database-url",
            "postgresql://fuzz@localhost/fuzz?host=/nonexistent/queen-broker-fuzz",
            "--db-pool-size",
            "2",
            "--stmt-timeout-ms",
            "100",
            "--default-timeout-ms",
            "50",
            "--max-body-bytes",
            "1048576",
            "--body-read-timeout-ms",
            "1000",
            "--dedup-cache-mb",
            "8",
        ]);
        let mut cfg = args.cfg;
        // No LISTEN connection and no schema for a database that is not there.
        cfg.peer_wake = queen_broker::config::PeerWake::Off;
        cfg.apply_schema = false;
        // With no database every push would be spooled: the fuzzer must not fill a disk.
        cfg.file_buffer_enabled = false;
        let pg = queen_broker::server::external_pg_config(&cfg).expect("the fuzz URL parses");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("tokio runtime");
        // The push fusion spawns its workers here: they run whenever `send` blocks on.
        let app = rt.block_on(async move {
            let auth = queen_broker::http::auth::Auth::from_config(&cfg.jwt, cfg.metrics_access)
                .expect("auth is off by default");
            let guard = queen_broker::http::browser::Guard::from_config(&cfg)
                .expect("no allowed origins or hosts to refuse");
            let engine = Engine::boot(cfg, pg).await.expect("no schema step to fail");
            queen_broker::http::router(engine, auth, guard)
        });
        Broker { rt, app }
    })
}

/// Sends one request through the router and checks the answer (panics on a finding).
pub fn send(method: Method, target: &str, headers: &[(&str, &str)], body: Vec<u8>) {
    let mut req = Request::builder().method(method.clone()).uri(target);
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req
        .body(Body::from(body))
        .unwrap_or_else(|e| panic!("the harness built a bad request {target:?}: {e}"));
    let b = broker();
    let answer = b.rt.block_on(async {
        let resp = tokio::time::timeout(HANG, b.app.clone().oneshot(req))
            .await
            .unwrap_or_else(|_| panic!("{method} {target} did not answer within {HANG:?}"))
            .expect("the router is infallible");
        let status = resp.status();
        let body = axum::body::to_bytes(resp.into_body(), usize::MAX)
            .await
            .expect("a buffered answer");
        (status, body)
    });
    let (status, body) = answer;
    let text = String::from_utf8_lossy(&body);
    assert!(
        !status.is_server_error() || status.as_u16() == 503,
        "{method} {target} answered {status}: {text}"
    );
    // A HEAD answer carries no body to check.
    if method == Method::HEAD || !(status.is_client_error() || status.is_server_error()) {
        return;
    }
    let json: serde_json::Value = serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("{method} {target} → {status} not JSON ({e}): {text}"));
    // A 503 of /health is its report; every other refusal names its reason.
    assert!(
        status.as_u16() == 503 || json.get("error").is_some_and(|e| e.is_string()),
        "{method} {target} → {status} without an error text: {text}"
    );
}

/// A POST of `body` to `path` with the content type `CONTENT_TYPES[pick % 4]`.
pub fn post(path: &str, pick: u8, body: &[u8]) {
    let ct = CONTENT_TYPES[usize::from(pick) % CONTENT_TYPES.len()];
    let headers: Vec<(&str, &str)> = ct.map(|c| ("content-type", c)).into_iter().collect();
    send(Method::POST, path, &headers, body.to_vec());
}

/// `bytes` as one path segment: everything but unreserved characters percent-encoded, so
/// the URI is always valid and the route sees exactly these bytes after decoding.
pub fn segment(bytes: &[u8]) -> String {
    encode(bytes, |b| b.is_ascii_alphanumeric() || b"-._~".contains(&b))
}

/// `bytes` as a query string: the characters that structure a query (`&`, `=`, `+`, `%`)
/// and other safe ones are kept raw, so malformed escapes and odd pairs reach the parser;
/// the rest is percent-encoded so the URI itself is valid.
pub fn query(bytes: &[u8]) -> String {
    encode(bytes, |b| {
        b.is_ascii_alphanumeric() || b"-._~&=+%:,*!$'();@/?".contains(&b)
    })
}

fn encode(bytes: &[u8], raw: impl Fn(u8) -> bool) -> String {
    let mut out = String::with_capacity(bytes.len() * 3);
    for &b in bytes {
        if raw(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Splits fuzz bytes at the first `0xFF` (never in UTF-8 text): (before, after).
pub fn split(data: &[u8]) -> (&[u8], &[u8]) {
    match data.iter().position(|&b| b == 0xFF) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[]),
    }
}
