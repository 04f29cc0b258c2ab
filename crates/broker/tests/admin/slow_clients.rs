//! Slow and idle clients cannot hold connections (slowloris): raw TCP clients that send half
//! a request head, half a body, or nothing after an answer are closed by the broker under
//! the configured timeouts (connections beyond the cap: `connection_slots.rs`).
//!
//! The assertions are "the broker closed it" and orderings, never durations; the outer
//! `GUARD` only turns a regression into a failure instead of a hung test.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common;

/// Far above every configured timeout here: reaching it means the broker never closed.
const GUARD: Duration = Duration::from_secs(60);
/// The timeout under test, small so the tests are quick.
const SHORT_MS: u64 = 300;
/// A timeout that must not be the one closing the connection.
const LONG_MS: u64 = 600_000;

pub(crate) async fn connect(b: &common::TestBroker) -> TcpStream {
    let addr = b.server.as_ref().expect("running").addr;
    TcpStream::connect(addr).await.expect("connect")
}

/// Reads until the broker closes the connection; returns everything it sent.
pub(crate) async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
    let read_all = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return got,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(GUARD, read_all)
        .await
        .expect("the broker never closed the connection")
}

/// Reads one complete response (head and Content-Length body) and returns it as text.
pub(crate) async fn one_response(stream: &mut TcpStream) -> String {
    let read = async {
        let mut got = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = stream.read(&mut buf).await.expect("read");
            assert!(n > 0, "closed before a complete response");
            got.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&got).into_owned();
            if let Some(end) = text.find("\r\n\r\n") {
                let length = text[..end]
                    .lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse::<usize>().ok())?
                    })
                    .unwrap_or(0);
                if got.len() >= end + 4 + length {
                    return text;
                }
            }
        }
    };
    tokio::time::timeout(GUARD, read)
        .await
        .expect("no response")
}

#[tokio::test]
async fn half_a_header_is_closed() {
    let b = common::broker_with(|cfg| {
        cfg.header_read_timeout_ms = SHORT_MS;
        cfg.idle_timeout_ms = LONG_MS;
    })
    .await;
    let mut s = connect(&b).await;
    s.write_all(b"GET /health HTTP/1.1\r\nHost: queen\r\nX-Slow: ")
        .await
        .expect("write");
    let answer = until_closed(&mut s).await;
    assert!(
        !String::from_utf8_lossy(&answer).contains("200 OK"),
        "a request with an incomplete head was served"
    );
    // The broker itself is unaffected.
    let (status, _) = b.get("/health").await;
    assert!(status.is_success() || status.as_u16() == 503, "{status}");
}

#[tokio::test]
async fn half_a_body_gets_408_and_is_closed() {
    let b = common::broker_with(|cfg| {
        cfg.body_read_timeout_ms = SHORT_MS;
        cfg.idle_timeout_ms = LONG_MS;
    })
    .await;
    let db = b.sql().await;
    let mut s = connect(&b).await;
    s.write_all(
        b"POST /api/v1/push HTTP/1.1\r\nHost: queen\r\nContent-Type: application/json\r\n\
          Content-Length: 200\r\n\r\n{\"items\":[{\"queue\":\"slow\",",
    )
    .await
    .expect("write");
    let answer = String::from_utf8_lossy(&until_closed(&mut s).await).into_owned();
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request body not received"), "{answer}");
    assert_eq!(
        common::count(&db, "queen.queues").await,
        0,
        "nothing written"
    );
}

#[tokio::test]
async fn an_idle_keep_alive_connection_is_closed() {
    let b = common::broker_with(|cfg| {
        cfg.idle_timeout_ms = SHORT_MS;
        cfg.header_read_timeout_ms = LONG_MS;
    })
    .await;
    let mut s = connect(&b).await;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: queen\r\n\r\n")
        .await
        .expect("write");
    let first = one_response(&mut s).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    // Kept alive for a next request, which never comes: the broker closes it.
    let rest = until_closed(&mut s).await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}

/// The head clock runs from a head's first byte, also for the next request on a kept-alive
/// connection, whatever the idle timeout.
#[tokio::test]
async fn half_a_second_head_is_closed() {
    let b = common::broker_with(|cfg| {
        cfg.header_read_timeout_ms = SHORT_MS;
        cfg.idle_timeout_ms = LONG_MS;
    })
    .await;
    let mut s = connect(&b).await;
    s.write_all(b"GET /status HTTP/1.1\r\nHost: queen\r\n\r\n")
        .await
        .expect("write");
    let first = one_response(&mut s).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    s.write_all(b"GET /status HTTP/1.1\r\nHost: q")
        .await
        .expect("write");
    let rest = until_closed(&mut s).await;
    assert!(rest.is_empty(), "{}", String::from_utf8_lossy(&rest));
}
