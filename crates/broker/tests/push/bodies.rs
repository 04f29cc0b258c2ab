//! Request bodies that arrive in pieces (http/extract.rs): a chunked body without a declared
//! length, sent in many small writes, is read whole and exactly; one that grows past the body
//! limit is refused with 413 whatever it declared, and writes nothing.

use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common;

/// Posts `body` to `/api/v1/push` as `Transfer-Encoding: chunked`, `chunk` bytes per chunk,
/// each written on its own; answers the status line and the response's JSON body.
async fn post_chunked(b: &common::TestBroker, body: &[u8], chunk: usize) -> (String, Value) {
    let addr = b.server.as_ref().expect("running").addr;
    let mut stream = TcpStream::connect(addr).await.expect("connect");
    let head = "POST /api/v1/push HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n\
                Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n";
    stream.write_all(head.as_bytes()).await.expect("head");
    for piece in body.chunks(chunk) {
        let framed = [format!("{:x}\r\n", piece.len()).as_bytes(), piece, b"\r\n"].concat();
        if stream.write_all(&framed).await.is_err() {
            break; // refused early: the broker may close before reading everything
        }
        stream.flush().await.expect("flush");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let _ = stream.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer));
    read.await.expect("an answer in time").expect("read");
    let text = String::from_utf8_lossy(&answer).into_owned();
    let (head, rest) = text.split_once("\r\n\r\n").expect("a response head");
    let status = head.lines().next().unwrap_or_default().to_string();
    (
        status,
        serde_json::from_str(rest.trim()).unwrap_or(Value::Null),
    )
}

fn items(n: usize, size: usize) -> Vec<u8> {
    let items: Vec<Value> = (0..n)
        .map(|i| {
            json!({ "queue": "chunked", "partition": "p", "transactionId": format!("c-{i}"),
                    "payload": { "i": i, "fill": "x".repeat(size) } })
        })
        .collect();
    serde_json::to_vec(&json!({ "items": items })).expect("json")
}

#[tokio::test]
async fn a_chunked_body_in_many_pieces_is_read_whole() {
    let b = common::broker().await;
    let body = items(40, 3000);
    let (status, out) = post_chunked(&b, &body, 7_000).await;
    assert!(status.contains(" 201 "), "{status}: {out}");
    let stored = out.as_array().expect("per-item results");
    assert_eq!(stored.len(), 40);
    assert!(stored.iter().all(|r| r["status"] == "queued"), "{out}");

    let (_, popped) = b
        .get("/api/v1/pop/queue/chunked?batch=100&wait=false&autoAck=true")
        .await;
    let messages = popped["messages"].as_array().expect("messages");
    let seen: Vec<(i64, usize)> = messages
        .iter()
        .map(|m| {
            let fill = m["data"]["fill"].as_str().expect("fill").len();
            (m["data"]["i"].as_i64().expect("i"), fill)
        })
        .collect();
    let expected: Vec<(i64, usize)> = (0..40).map(|i| (i, 3000)).collect();
    assert_eq!(seen, expected, "every payload arrived whole, in order");
}

#[tokio::test]
async fn a_chunked_body_growing_past_the_limit_gets_413_and_writes_nothing() {
    let b = common::broker_with(|cfg| cfg.max_body_bytes = 64 * 1024).await;
    let db = b.sql().await;
    let body = items(40, 3000);
    assert!(body.len() > 64 * 1024);
    let (status, out) = post_chunked(&b, &body, 8_000).await;
    assert!(status.contains(" 413 "), "{status}: {out}");
    assert!(out["error"].is_string(), "a JSON error: {out}");
    let stored = common::count(&db, "queen.log_segments").await;
    assert_eq!(stored, 0, "nothing was written");
}
