//! Pushes refused with 429 are sent again after `Retry-After`, as the official client does,
//! up to `Queen::retry_429` attempts. The peer is a small HTTP server that refuses the first
//! pushes it gets: a broker's push door only refuses under load, which a test cannot summon
//! on demand (the broker side has its own test, `crates/broker/tests/push/door.rs`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use queen_client::{Error, PushItem, Queen};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

const REFUSED_BODY: &str = r#"{"error":"push refused: behind"}"#;
const TAKEN_BODY: &str = r#"[{"index":0,"transactionId":"t1","status":"queued"}]"#;

fn answer(status: &str, extra: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\n{extra}content-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Serves pushes on a local port: the first `refusals` answered 429, the rest 201. Counts
/// the requests it read.
async fn door(refusals: usize) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counter = counter.clone();
            tokio::spawn(async move {
                let (read, mut write) = socket.into_split();
                let mut read = BufReader::new(read);
                loop {
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if read.read_line(&mut line).await.unwrap_or(0) == 0 {
                            return;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap_or(0);
                        }
                        if line == "\r\n" {
                            break;
                        }
                    }
                    let mut body = vec![0; length];
                    if read.read_exact(&mut body).await.is_err() {
                        return;
                    }
                    let n = counter.fetch_add(1, Ordering::SeqCst);
                    let answer = if n < refusals {
                        answer("429 Too Many Requests", "retry-after: 0\r\n", REFUSED_BODY)
                    } else {
                        answer("201 Created", "", TAKEN_BODY)
                    };
                    if write.write_all(answer.as_bytes()).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (url, seen)
}

fn item() -> PushItem {
    PushItem::json(&serde_json::json!({"n": 1}), Some("t1".into())).expect("item")
}

#[tokio::test]
async fn a_refused_push_is_sent_again_until_taken() {
    let (url, seen) = door(2).await;
    let queen = Queen::new(&url);
    let taken = queen
        .queue("q")
        .push(&[item()])
        .await
        .expect("taken on the third attempt");
    assert!(taken[0].is_queued());
    assert_eq!(seen.load(Ordering::SeqCst), 3);

    let (url, seen) = door(2).await;
    let binary = Queen::new(&url)
        .queue("q")
        .push_binary(&[item()], true)
        .await;
    assert!(binary.expect("binary push taken")[0].is_queued());
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn with_one_attempt_the_429_reaches_the_caller() {
    let (url, seen) = door(5).await;
    let queen = Queen::new(&url).retry_429(1);
    match queen.queue("q").push(&[item()]).await {
        Err(Error::Api {
            status,
            retry_after,
            ..
        }) => {
            assert_eq!(status.as_u16(), 429);
            assert_eq!(retry_after, Some(std::time::Duration::ZERO));
        }
        other => panic!("expected the 429, got {other:?}"),
    }
    assert_eq!(seen.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn attempts_are_bounded() {
    let (url, seen) = door(usize::MAX).await;
    let refused = Queen::new(&url)
        .retry_429(3)
        .queue("q")
        .push(&[item()])
        .await;
    assert!(matches!(refused, Err(Error::Api { status, .. }) if status.as_u16() == 429));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}
