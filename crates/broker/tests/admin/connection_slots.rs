//! Connection slots against an anonymous peer: silent sockets from one address cannot lock
//! another address out (the per-peer share), `/health` is answered when every slot is held
//! (the spare pool, which refuses anything else with a 503), and a connection that never
//! speaks is closed at the first-byte deadline, freeing its slot.
//!
//! Peers are told apart by their source address: the attacker connects from 127.0.0.2, the
//! honest client from 127.0.0.1 (Linux routes all of 127/8 to loopback).

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

use super::slow_clients::{connect, one_response, until_closed};
use crate::common;

/// A timeout that must not be the one at work.
const LONG_MS: u64 = 600_000;
/// How long an honest request may wait for its answer while an attacker holds sockets:
/// far below every configured timeout, so only a free slot can answer it in time.
const PROMPT: Duration = Duration::from_secs(10);

/// A connection to the broker from source address `from`.
async fn connect_from(b: &common::TestBroker, from: &str) -> TcpStream {
    let to = b.server.as_ref().expect("running").addr;
    let socket = TcpSocket::new_v4().expect("socket");
    let local: SocketAddr = format!("{from}:0").parse().expect("addr");
    socket.bind(local).expect("bind a loopback source address");
    socket.connect(to).await.expect("connect")
}

/// Sends `request` on a fresh connection from 127.0.0.1 and reads the answer, which must
/// come within [`PROMPT`].
async fn ask(b: &common::TestBroker, request: &str) -> String {
    let exchange = async {
        let mut s = connect(b).await;
        s.write_all(request.as_bytes()).await.expect("write");
        one_response(&mut s).await
    };
    tokio::time::timeout(PROMPT, exchange)
        .await
        .expect("no answer while the attacker held its sockets")
}

const STATUS: &str = "GET /status HTTP/1.1\r\nHost: queen\r\nConnection: close\r\n\r\n";
const HEALTH: &str = "GET /health HTTP/1.1\r\nHost: queen\r\nConnection: close\r\n\r\n";

/// Opens `n` silent connections from `from` and gives the broker time to accept them all.
async fn silent(b: &common::TestBroker, from: &str, n: usize) -> Vec<TcpStream> {
    let mut held = Vec::with_capacity(n);
    for _ in 0..n {
        held.push(connect_from(b, from).await);
    }
    // The accept loop takes the backlog in order; a request sent after this is behind them.
    tokio::time::sleep(Duration::from_millis(200)).await;
    held
}

#[tokio::test]
async fn silent_sockets_of_one_peer_do_not_lock_out_another() {
    let b = common::broker_with(|cfg| {
        cfg.max_connections = 64;
        cfg.first_byte_timeout_ms = LONG_MS;
        cfg.idle_timeout_ms = LONG_MS;
        cfg.header_read_timeout_ms = LONG_MS;
    })
    .await;
    // More silent sockets than slots and spare slots together.
    let _held = silent(&b, "127.0.0.2", 64 + 64).await;
    let answer = ask(&b, STATUS).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let health = ask(&b, HEALTH).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    // A third peer is served as well.
    let mut more = connect_from(&b, "127.0.0.3").await;
    more.write_all(STATUS.as_bytes()).await.expect("write");
    let ok = one_response(&mut more).await;
    assert!(ok.starts_with("HTTP/1.1 200"), "a third peer: {ok}");
}

#[tokio::test]
async fn a_peer_past_its_share_gets_503_with_retry_after() {
    let b = common::broker_with(|cfg| {
        cfg.max_connections = 4;
        cfg.peer_connection_share = 50;
        cfg.first_byte_timeout_ms = LONG_MS;
        cfg.idle_timeout_ms = LONG_MS;
    })
    .await;
    let _held = silent(&b, "127.0.0.2", 2).await;
    let mut over = connect_from(&b, "127.0.0.2").await;
    over.write_all(STATUS.as_bytes()).await.expect("write");
    let answer = one_response(&mut over).await;
    assert!(answer.starts_with("HTTP/1.1 503"), "{answer}");
    assert!(
        answer.to_ascii_lowercase().contains("retry-after: 1"),
        "{answer}"
    );
    assert!(
        answer.contains(r#""error":"this address holds its share of 2"#),
        "{answer}"
    );
    // The same peer's /health is still answered.
    let mut probe = connect_from(&b, "127.0.0.2").await;
    probe.write_all(HEALTH.as_bytes()).await.expect("write");
    let health = one_response(&mut probe).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
}

#[tokio::test]
async fn health_is_answered_when_every_slot_is_held() {
    let b = common::broker_with(|cfg| {
        cfg.max_connections = 4;
        cfg.peer_connection_share = 100;
        cfg.first_byte_timeout_ms = LONG_MS;
        cfg.idle_timeout_ms = LONG_MS;
    })
    .await;
    let _held = silent(&b, "127.0.0.2", 4).await;
    let health = ask(&b, HEALTH).await;
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    assert!(health.contains(r#""status":"healthy""#), "{health}");
    let push = ask(
        &b,
        "POST /api/v1/push HTTP/1.1\r\nHost: queen\r\nContent-Type: application/json\r\n\
         Content-Length: 2\r\nConnection: close\r\n\r\n{}",
    )
    .await;
    assert!(push.starts_with("HTTP/1.1 503"), "{push}");
    assert!(
        push.to_ascii_lowercase().contains("retry-after: 1"),
        "{push}"
    );
    assert!(push.contains("limit of 4 connections"), "{push}");
    let db = b.sql().await;
    assert_eq!(
        common::count(&db, "queen.queues").await,
        0,
        "nothing written"
    );
}

#[tokio::test]
async fn a_silent_connection_is_closed_at_the_first_byte_deadline() {
    let b = common::broker_with(|cfg| {
        cfg.max_connections = 2;
        cfg.peer_connection_share = 100;
        cfg.first_byte_timeout_ms = 300;
        cfg.idle_timeout_ms = LONG_MS;
        cfg.header_read_timeout_ms = LONG_MS;
    })
    .await;
    let mut held = silent(&b, "127.0.0.2", 2).await;
    for s in &mut held {
        let sent = until_closed(s).await;
        assert!(sent.is_empty(), "{}", String::from_utf8_lossy(&sent));
    }
    // Their slots are free again: a request is served, not refused from the spare pool.
    let answer = ask(&b, STATUS).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}
