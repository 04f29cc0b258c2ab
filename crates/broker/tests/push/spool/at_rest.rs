//! The spool at rest (docs/engine.md §4.6): no payload of an encrypted queue in plaintext on
//! disk, a directory and files of the broker's user alone, no link followed, and no record
//! replayed that this broker did not seal (a planted record, a file of the unsealed format).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use reqwest::StatusCode;
use serde_json::json;

use super::{maintenance, spool_files, statuses, wait_stored};
use crate::common::{self, configure};

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

/// Every file of `dir` that holds `marker`.
fn holding(dir: &Path, marker: &[u8]) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            std::fs::read(e.path()).is_ok_and(|b| b.windows(marker.len()).any(|w| w == marker))
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

/// A push to an `encryptionEnabled` queue under push maintenance: its payload, queue name and
/// producer fields are nowhere in the spool directory; the directory is 0700 and its files
/// 0600; once maintenance ends the message is stored sealed and pops back intact.
#[tokio::test]
async fn an_encrypted_queue_is_never_plaintext_in_the_spool() {
    let key = queen_broker::config::EncryptionKey::from_hex(KEY).expect("test key");
    let b = common::broker_with(|c| c.encryption_key = Some(key)).await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    configure(&b, "vault-q", json!({ "encryptionEnabled": true })).await;
    maintenance(&b, true).await;
    let (status, answer) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "vault-q", "partition": "p", "transactionId": "txn-secret",
                "payload": {"card": "SECRET-MARKER-4111"}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    assert_eq!(statuses(&answer), ["buffered"]);
    assert_eq!(spool_files(&dir).len(), 1);
    for marker in ["SECRET-MARKER", "vault-q", "txn-secret"] {
        let found = holding(&dir, marker.as_bytes());
        assert!(found.is_empty(), "{marker} in plaintext in {found:?}");
    }
    assert_eq!(mode(&dir), 0o700, "the spool directory");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        assert_eq!(mode(&path), 0o600, "{}", path.display());
    }

    maintenance(&b, false).await;
    wait_stored(&b.sql().await, "vault-q", 1, Duration::from_secs(10)).await;
    let (status, popped) = b
        .get("/api/v1/pop/queue/vault-q/partition/p?batch=1&autoAck=true")
        .await;
    assert_eq!(status, StatusCode::OK, "{popped}");
    assert_eq!(
        popped["messages"][0]["data"],
        json!({"card": "SECRET-MARKER-4111"})
    );
}

/// A link planted where the spool's next file goes is refused, not followed: the push answers
/// 503 and the link's target is untouched.
#[tokio::test]
async fn a_planted_link_is_not_followed() {
    let b = common::broker().await;
    let dir = b.server.as_ref().unwrap().state.cfg.spool_dir();
    let target = dir.with_extension("target");
    std::fs::write(&target, b"precious").unwrap();
    std::os::unix::fs::symlink(&target, dir.join(format!("spool-{:020}.log", 1))).unwrap();
    maintenance(&b, true).await;
    let (status, answer) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "link-q", "payload": {"n": 1}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("link"),
        "{answer}"
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"precious");
    let _ = std::fs::remove_file(&target);
}

/// The record of one message to `queue` under `producer_sub`, in the earlier, unsealed format
/// (checksummed, not authenticated): what anyone who can write the directory could plant.
fn unsealed_record(queue: &str, producer_sub: &str) -> Vec<u8> {
    let payload = br#"{"planted":true}"#;
    let frame = queen_proto::frame::Frame {
        flags: 0,
        message_id: queen_proto::new_v7().into_bytes(),
        trace_id: None,
        transaction_id: "planted-txn",
        producer_sub: Some(producer_sub),
        payload,
    };
    let mut body = Vec::new();
    for name in [queue, "Default"] {
        body.extend_from_slice(&(name.len() as u16).to_le_bytes());
        body.extend_from_slice(name.as_bytes());
    }
    body.extend_from_slice(&1u32.to_le_bytes());
    frame.encode_into(&mut body).unwrap();
    let len = body.len() as u32;
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(&len.to_le_bytes());
    h.update(&body);
    let mut out = len.to_le_bytes().to_vec();
    out.extend_from_slice(&h.digest().to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// A record planted into another tenant's queue under another producerSub, in the spool's
/// earlier unsealed format or appended to a sealed file: the broker refuses to start on that
/// directory, naming the file, and nothing of it reaches PostgreSQL.
#[tokio::test]
async fn a_planted_record_refuses_the_start_and_is_never_replayed() {
    let pg = common::fresh_database().await;
    let db = common::connect(&pg).await;

    // An unsealed file planted into an empty spool directory.
    let dir = common::scratch_spool_dir();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    let planted = unsealed_record("tenant-b.victim", "admin@tenant-b");
    std::fs::write(dir.join(format!("spool-{:020}.log", 1)), &planted).unwrap();
    let mut cfg = common::test_config();
    cfg.file_buffer_dir = Some(dir.clone());
    let refused = queen_broker::server::start(cfg, pg.clone())
        .await
        .err()
        .expect("an unsealed spool file refuses the start");
    let text = format!("{refused:#}");
    assert!(text.contains("spool-00000000000000000001.log"), "{text}");
    assert!(text.contains("earlier version"), "{text}");

    // A record appended to a sealed file of a broker's own spool.
    let dir = common::scratch_spool_dir();
    let b = common::broker_on(pg.clone(), |c| c.file_buffer_dir = Some(dir.clone())).await;
    maintenance(&b, true).await;
    let (status, answer) = b
        .post(
            "/api/v1/push",
            &json!({"items": [{"queue": "own-q", "payload": {"n": 1}}]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{answer}");
    b.stop().await;
    let file = dir.join(&spool_files(&dir)[0]);
    let mut bytes = std::fs::read(&file).unwrap();
    bytes.extend_from_slice(&planted);
    std::fs::write(&file, &bytes).unwrap();
    let mut cfg = common::test_config();
    cfg.file_buffer_dir = Some(dir.clone());
    let refused = queen_broker::server::start(cfg, pg.clone())
        .await
        .err()
        .expect("a planted record refuses the start");
    let text = format!("{refused:#}");
    assert!(text.contains("this broker did not write it"), "{text}");

    let stored = common::count(&db, "queen.log_segments").await;
    assert_eq!(stored, 0, "nothing was replayed");
}
