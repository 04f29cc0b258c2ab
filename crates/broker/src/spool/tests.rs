use std::io::Write;
use std::sync::atomic::{AtomicU32, Ordering};

use bytes::Bytes;

use super::*;

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
        .append(vec![g.encode().unwrap()], n, When::Always)
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
    let (spool, recovered) = Spool::open(&dir, limits).unwrap();
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
    let (spool, _) = Spool::open(&dir, ROOMY).unwrap();
    let g = group("p", &["x"]);
    let record = || vec![g.encode().unwrap()];
    assert!(!spool.append(record(), 1, When::WhileHolding).await.unwrap());
    assert!(spool.append(record(), 1, When::Always).await.unwrap());
    assert!(spool.append(record(), 1, When::WhileHolding).await.unwrap());
    assert_eq!(spool.held().messages, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn past_the_byte_limit_appends_are_refused() {
    let dir = scratch();
    let one = group("p", &["x"]).encode().unwrap();
    let limits = Limits {
        max_bytes: one.len() as u64 * 2,
        ..ROOMY
    };
    let (spool, _) = Spool::open(&dir, limits).unwrap();
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
        let (spool, _) = Spool::open(&dir, ROOMY).unwrap();
        put(&spool, &group("p", &["one", "two"])).await;
        put(&spool, &group("p", &["three"])).await;
    }
    // A crash in the middle of a third write: half a record at the end of the file.
    let torn = group("p", &["never-answered"]).encode().unwrap();
    let path = file_path(&dir, 1);
    let whole = std::fs::metadata(&path).unwrap().len();
    let mut file = OpenOptions::new().append(true).open(&path).unwrap();
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
        match Spool::open(dir, ROOMY) {
            Ok(opened) => return opened,
            Err(_) => tokio::time::sleep(std::time::Duration::from_millis(5)).await,
        }
    }
    Spool::open(dir, ROOMY).unwrap()
}

#[tokio::test]
async fn a_second_spool_on_the_same_directory_is_refused() {
    let dir = scratch();
    let (_spool, _) = Spool::open(&dir, ROOMY).unwrap();
    let second = Spool::open(&dir, ROOMY);
    let error = second.err().expect("the directory is locked").to_string();
    assert!(error.contains("FILE_BUFFER_DIR"), "{error}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn quarantined_records_are_kept_apart_and_never_read_back() {
    let dir = scratch();
    let (spool, _) = Spool::open(&dir, ROOMY).unwrap();
    let g = group("p", &["poison"]);
    spool.quarantine(vec![g.encode().unwrap()]).await.unwrap();
    assert!(!spool.is_holding());
    assert!(drain(&spool, 100).await.is_empty());
    let kept = std::fs::read(dir.join(QUARANTINE_FILE)).unwrap();
    let mut r = kept.as_slice();
    match read_next(&mut r, kept.len() as u64).unwrap() {
        Next::Record(back, _) => assert_eq!(back, g),
        other => panic!("quarantine file: {other:?}"),
    }
    let _ = std::fs::remove_dir_all(&dir);
}
