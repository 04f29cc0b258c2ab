use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

use super::*;
use key::SpoolKey;

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A fresh directory under the system's temp dir.
fn scratch() -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "queen-spool-unit-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

const ROOMY: Limits = Limits {
    max_bytes: 1 << 30,
    messages_per_file: 10_000,
};

fn group(partition: &str, txns: &[&str]) -> SpoolGroup {
    SpoolGroup {
        queue: "q".into(),
        partition: partition.into(),
        in_doubt: false,
        items: txns
            .iter()
            .map(|t| SpoolItem {
                message_id: queen_proto::new_v7(),
                trace_id: None,
                transaction_id: t.to_string(),
                producer_sub: None,
                payload: Bytes::from(format!("{{\"t\":\"{t}\"}}")),
            })
            .collect(),
    }
}

async fn put(spool: &Spool, g: &SpoolGroup) {
    let n = g.items.len() as u64;
    assert!(spool
        .append(vec![g.body().unwrap()], n, When::Always)
        .await
        .unwrap());
}

/// Every transactionId the spool gives back, committing as it goes.
async fn drain(spool: &Spool, per_read: u64) -> Vec<String> {
    let mut out = Vec::new();
    for _ in 0..1000 {
        let batch = spool.read(per_read).await.unwrap();
        if batch.groups.is_empty() && batch.finished.is_empty() {
            break;
        }
        for g in &batch.groups {
            out.extend(g.items.iter().map(|i| i.transaction_id.clone()));
        }
        spool.commit(batch);
    }
    out
}

fn spool_files(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .unwrap()
        .filter(|e| {
            let name = e.as_ref().unwrap().file_name();
            name.to_string_lossy().starts_with(FILE_PREFIX)
        })
        .count()
}

/// Waits for the writer thread to catch up with deletions.
async fn settle(dir: &Path, files: usize) {
    for _ in 0..200 {
        if spool_files(dir) == files {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert_eq!(spool_files(dir), files, "spool files in {}", dir.display());
}

#[tokio::test]
async fn appends_come_back_in_order_across_files_and_the_files_go() {
    let dir = scratch();
    let limits = Limits {
        messages_per_file: 3,
        ..ROOMY
    };
    let (spool, recovered) = Spool::open(&dir, limits, None).unwrap();
    assert_eq!(recovered, Recovered::default());
    assert!(!spool.is_holding());
    let mut expected = Vec::new();
    for i in 0..5 {
        let txns = [format!("a{i}"), format!("b{i}")];
        let refs: Vec<&str> = txns.iter().map(String::as_str).collect();
        put(&spool, &group(&format!("p{}", i % 2), &refs)).await;
        expected.extend(txns);
    }
    assert_eq!(spool.held().messages, 10);
    assert!(
        spool_files(&dir) >= 3,
        "two messages per append, three per file"
    );
    assert_eq!(drain(&spool, 3).await, expected);
    assert_eq!(spool.held(), Held::default());
    settle(&dir, 0).await;
    // Appends after a full drain start a new file, and the drain finds them.
    put(&spool, &group("p", &["later"])).await;
    assert_eq!(drain(&spool, 100).await, vec!["later".to_string()]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn while_holding_appends_only_while_something_waits() {
    let dir = scratch();
    let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
    let g = group("p", &["x"]);
    let record = || vec![g.body().unwrap()];
    assert!(!spool.append(record(), 1, When::WhileHolding).await.unwrap());
    assert!(spool.append(record(), 1, When::Always).await.unwrap());
    assert!(spool.append(record(), 1, When::WhileHolding).await.unwrap());
    assert_eq!(spool.held().messages, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn past_the_byte_limit_appends_are_refused() {
    let dir = scratch();
    let one = group("p", &["x"]).body().unwrap();
    let limits = Limits {
        max_bytes: record::sealed_len(one.len()) * 2,
        ..ROOMY
    };
    let (spool, _) = Spool::open(&dir, limits, None).unwrap();
    for _ in 0..2 {
        spool
            .append(vec![one.clone()], 1, When::Always)
            .await
            .unwrap();
    }
    let refused = spool.append(vec![one.clone()], 1, When::Always).await;
    assert!(
        matches!(refused, Err(SpoolError::Full { .. })),
        "{refused:?}"
    );
    drain(&spool, 100).await;
    assert!(spool.append(vec![one], 1, When::Always).await.unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_reopened_spool_keeps_what_was_held_and_cuts_a_torn_tail() {
    let dir = scratch();
    {
        let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
        put(&spool, &group("p", &["one", "two"])).await;
        put(&spool, &group("p", &["three"])).await;
    }
    // A crash in the middle of a third write: half a record at the end of the file.
    let body = group("p", &["never-answered"]).body().unwrap();
    let torn = record::seal(&SpoolKey::new(&[1; 32], "test"), &[0; 16], &body).unwrap();
    let path = file_path(&dir, 1);
    let whole = std::fs::metadata(&path).unwrap().len();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&torn[..torn.len() / 2]).unwrap();
    drop(file);

    // The directory lock went with the first spool (closing its file releases it).
    let (spool, recovered) = reopen(&dir).await;
    assert_eq!(recovered.held.messages, 3);
    assert_eq!(recovered.dropped_bytes, (torn.len() / 2) as u64);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), whole);
    // New appends go after the survivors, in a new file.
    put(&spool, &group("p", &["four"])).await;
    assert_eq!(
        drain(&spool, 100).await,
        vec!["one", "two", "three", "four"]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Opens `dir` again once the previous spool's writer thread has let go of it.
async fn reopen(dir: &Path) -> (Spool, Recovered) {
    for _ in 0..200 {
        match Spool::open(dir, ROOMY, None) {
            Ok(opened) => return opened,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
        }
    }
    Spool::open(dir, ROOMY, None).unwrap()
}

#[tokio::test]
async fn a_second_spool_on_the_same_directory_is_refused() {
    let dir = scratch();
    let (_spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
    let second = Spool::open(&dir, ROOMY, None);
    let error = second.err().expect("the directory is locked").to_string();
    assert!(error.contains("FILE_BUFFER_DIR"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn quarantined_records_are_kept_apart_and_never_read_back() {
    let dir = scratch();
    let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
    let g = group("p", &["poison"]);
    spool.quarantine(vec![g.body().unwrap()]).await.unwrap();
    assert!(!spool.is_holding());
    assert!(drain(&spool, 100).await.is_empty());
    let kept = read_sealed(&spool, &dir.join(QUARANTINE_FILE));
    assert_eq!(kept, vec![g]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every record of the sealed file at `path`, opened with `spool`'s key.
fn read_sealed(spool: &Spool, path: &Path) -> Vec<SpoolGroup> {
    let bytes = std::fs::read(path).unwrap();
    let key = &spool.shared.key;
    let mut r = bytes.as_slice();
    let id = match files::read_header(&mut r, bytes.len() as u64, path, key).unwrap() {
        files::Header::Ours(id) => id,
        files::Header::Torn => panic!("{}: torn header", path.display()),
    };
    let mut left = bytes.len() as u64 - files::FILE_HEADER_LEN;
    let mut out = Vec::new();
    loop {
        match record::read_next(&mut r, left, key, &id).unwrap() {
            record::Next::Record(g, size) => {
                left -= size;
                out.push(g);
            }
            record::Next::End => return out,
            other => panic!("{}: {other:?}", path.display()),
        }
    }
}

fn mode(path: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt;
    std::fs::symlink_metadata(path)
        .unwrap()
        .permissions()
        .mode()
        & 0o777
}

#[tokio::test]
async fn the_directory_is_0700_its_files_0600_and_no_payload_is_plaintext() {
    let dir = scratch();
    let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
    put(&spool, &group("p", &["secret-marker-txn"])).await;
    spool
        .quarantine(vec![group("p", &["poison-marker"]).body().unwrap()])
        .await
        .unwrap();
    assert_eq!(mode(&dir), 0o700);
    for name in [LOCK_FILE, key::KEY_FILE, QUARANTINE_FILE] {
        assert_eq!(mode(&dir.join(name)), 0o600, "{name}");
    }
    let spooled = file_path(&dir, 1);
    assert_eq!(mode(&spooled), 0o600);
    for (path, marker) in [
        (spooled, &b"secret-marker"[..]),
        (dir.join(QUARANTINE_FILE), b"poison-marker"),
    ] {
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(files::MAGIC));
        assert!(
            !bytes.windows(marker.len()).any(|w| w == marker),
            "{} shows plaintext",
            path.display()
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_open_directory_is_closed_and_a_foreign_one_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch();
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    drop(Spool::open(&dir, ROOMY, None).unwrap());
    assert_eq!(mode(&dir), 0o700);
    // A link in the place of the directory is not followed.
    let link = scratch();
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let refused = Spool::open(&link, ROOMY, None)
        .err()
        .expect("a link is refused");
    assert!(refused.to_string().contains("not a directory"), "{refused}");
    let _ = std::fs::remove_file(&link);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_link_planted_where_the_next_file_goes_is_refused_not_followed() {
    let dir = scratch();
    let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
    let target = scratch();
    std::os::unix::fs::symlink(&target, file_path(&dir, 1)).unwrap();
    let refused = spool
        .append(vec![group("p", &["x"]).body().unwrap()], 1, When::Always)
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(!target.exists(), "the link was followed");
    assert!(!spool.is_holding());
    let _ = std::fs::remove_file(file_path(&dir, 1));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn an_old_format_file_a_forged_record_or_another_key_refuses_the_open() {
    // The earlier format: records straight from the file's first byte, unauthenticated.
    let dir = scratch();
    drop(Spool::open(&dir, ROOMY, None).unwrap());
    std::fs::write(
        file_path(&dir, 1),
        b"\x10\0\0\0unauthenticated-record-bytes",
    )
    .unwrap();
    let refused = reopen_err(&dir).await;
    assert!(refused.contains("earlier version"), "{refused}");
    let _ = std::fs::remove_dir_all(&dir);

    // A record sealed under another key, planted in a file of this spool.
    let dir = scratch();
    {
        let (spool, _) = Spool::open(&dir, ROOMY, None).unwrap();
        put(&spool, &group("p", &["mine"])).await;
    }
    let path = file_path(&dir, 1);
    let bytes = std::fs::read(&path).unwrap();
    let mut id = [0u8; 16];
    id.copy_from_slice(&bytes[8..24]);
    let planted = record::seal(
        &SpoolKey::new(&[42; 32], "attacker"),
        &id,
        &group("tenant-b.q", &["planted"]).body().unwrap(),
    )
    .unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    file.write_all(&planted).unwrap();
    drop(file);
    let refused = reopen_err(&dir).await;
    assert!(
        refused.contains("does not open under the spool key"),
        "{refused}"
    );
    let _ = std::fs::remove_dir_all(&dir);

    // Files sealed under a key derived from QUEEN_ENCRYPTION_KEY, opened under another one.
    let dir = scratch();
    {
        let (spool, _) = Spool::open(&dir, ROOMY, Some(&[1; 32])).unwrap();
        put(&spool, &group("p", &["k1"])).await;
    }
    let refused = reopen_err_with(&dir, Some(&[2; 32])).await;
    assert!(refused.contains("another key"), "{refused}");
    let (spool, recovered) = reopen_with(&dir, Some(&[1; 32])).await;
    assert_eq!(recovered.held.messages, 1);
    assert_eq!(drain(&spool, 10).await, vec!["k1"]);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_quarantine_rotates_within_the_byte_limit() {
    let dir = scratch();
    let body = group("p", &["poison"]).body().unwrap();
    let limits = Limits {
        max_bytes: 6 * record::sealed_len(body.len()),
        ..ROOMY
    };
    let (spool, _) = Spool::open(&dir, limits, None).unwrap();
    for _ in 0..10 {
        spool.quarantine(vec![body.clone()]).await.unwrap();
    }
    let current = std::fs::metadata(dir.join(QUARANTINE_FILE)).unwrap().len();
    let old = std::fs::metadata(dir.join(QUARANTINE_OLD_FILE))
        .unwrap()
        .len();
    assert!(
        current + old <= limits.max_bytes + 2 * files::FILE_HEADER_LEN,
        "{current} + {old}"
    );
    assert!(!read_sealed(&spool, &dir.join(QUARANTINE_FILE)).is_empty());
    assert!(!read_sealed(&spool, &dir.join(QUARANTINE_OLD_FILE)).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

async fn reopen_with(dir: &Path, master: Option<&[u8; 32]>) -> (Spool, Recovered) {
    for _ in 0..200 {
        match Spool::open(dir, ROOMY, master) {
            Ok(opened) => return opened,
            Err(e) if e.to_string().contains("in use") => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await
            }
            Err(e) => panic!("{e}"),
        }
    }
    Spool::open(dir, ROOMY, master).unwrap()
}

/// The error of opening `dir` again (once the previous spool let go of it).
async fn reopen_err(dir: &Path) -> String {
    reopen_err_with(dir, None).await
}

async fn reopen_err_with(dir: &Path, master: Option<&[u8; 32]>) -> String {
    for _ in 0..200 {
        match Spool::open(dir, ROOMY, master) {
            Ok(_) => panic!("{} opened", dir.display()),
            Err(e) if e.to_string().contains("in use") => {
                tokio::time::sleep(std::time::Duration::from_millis(5)).await
            }
            Err(e) => return e.to_string(),
        }
    }
    panic!("{} stays locked", dir.display())
}
