//! The spool's one writer: a thread that owns every change to the spool directory. Appends that
//! queue up while a write is in progress go to disk together and share one `fdatasync` (group
//! commit); an append is answered only once its bytes are synced, and a write that fails is cut
//! back off the file before anyone is answered, so a file never holds bytes nobody was promised.
//! Drained files are deleted here too, in the order the jobs arrive. Records are sealed here,
//! bound to the file they go to (`spool/record.rs`). The quarantine file is rotated once it
//! would pass half of `FILE_BUFFER_MAX_BYTES` (the previous one is kept as
//! `quarantine.old.log`, the one before it dropped), so it never grows without bound.

use std::fs::File;
use std::io::{self, Write};
use std::path::Path;
use std::sync::mpsc::Receiver;
use std::sync::Arc;

use tokio::sync::oneshot;

use super::files::{self, FileId, Header, FILE_HEADER_LEN};
use super::key::SpoolKey;
use super::record::seal;
use super::{file_path, lock, Shared, QUARANTINE_FILE, QUARANTINE_OLD_FILE};

/// Most jobs taken off the queue for one round.
const ROUND_JOBS: usize = 1024;

/// What the writer is asked to do.
pub(super) enum Job {
    /// Records of one request, appended contiguously; answered once synced.
    Append(Append),
    /// A drained file, no longer the one being written.
    Remove(u64),
    /// Everything was drained: these files go, and the next append starts a new file.
    Reset(Vec<u64>),
    /// Records set aside for good (never replayed), appended to the quarantine file.
    Quarantine {
        bodies: Vec<Vec<u8>>,
        done: oneshot::Sender<Result<(), String>>,
    },
}

/// One request's record bodies and who waits for them to be synced.
pub(super) struct Append {
    pub bodies: Vec<Vec<u8>>,
    pub messages: u64,
    pub done: oneshot::Sender<Result<(), String>>,
}

/// The file appends go to.
struct Current {
    seq: u64,
    id: FileId,
    file: File,
    len: u64,
    messages: u64,
}

/// Runs until every sender of `jobs` is gone.
pub(super) fn run(
    shared: Arc<Shared>,
    jobs: Receiver<Job>,
    messages_per_file: u64,
    max_bytes: u64,
) {
    let mut w = Writer {
        shared,
        current: None,
        messages_per_file,
        max_bytes,
    };
    while let Ok(first) = jobs.recv() {
        let mut round = vec![first];
        while round.len() < ROUND_JOBS {
            match jobs.try_recv() {
                Ok(job) => round.push(job),
                Err(_) => break,
            }
        }
        w.round(round);
    }
}

struct Writer {
    shared: Arc<Shared>,
    current: Option<Current>,
    messages_per_file: u64,
    /// `FILE_BUFFER_MAX_BYTES`: the quarantine files together stay within it.
    max_bytes: u64,
}

impl Writer {
    /// Handles a round's jobs in order; each run of appends is one write and one sync, made
    /// before the next job of another kind.
    fn round(&mut self, round: Vec<Job>) {
        let mut appends = Vec::new();
        for job in round {
            if let Job::Append(append) = job {
                appends.push(append);
                continue;
            }
            self.append_all(std::mem::take(&mut appends));
            match job {
                Job::Remove(seq) => self.remove(&[seq]),
                Job::Reset(seqs) => {
                    self.current = None;
                    self.remove(&seqs);
                }
                Job::Quarantine { bodies, done } => {
                    let kept =
                        quarantine(&self.shared.dir, &self.shared.key, &bodies, self.max_bytes)
                            .map_err(|e| e.to_string());
                    let _ = done.send(kept);
                }
                Job::Append(_) => {} // taken above
            }
        }
        self.append_all(appends);
    }

    /// Deletes drained files, durably: a file that came back after a power loss would be
    /// replayed again, and past the dedup window its messages would be stored twice.
    fn remove(&self, seqs: &[u64]) {
        for &seq in seqs {
            let path = file_path(&self.shared.dir, seq);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "cannot delete a drained spool file")
                }
            }
        }
        if let Err(e) = files::sync_dir(&self.shared.dir) {
            tracing::warn!(dir = %self.shared.dir.display(), error = %e, "cannot sync the spool directory");
        }
    }

    /// Writes the appends, syncs once, and answers each.
    fn append_all(&mut self, appends: Vec<Append>) {
        if appends.is_empty() {
            return;
        }
        let result = self.write(&appends).map_err(|e| {
            let error = format!("spool write failed: {e}");
            tracing::error!(dir = %self.shared.dir.display(), error = %error, "disk spool");
            error
        });
        for append in appends {
            let _ = append.done.send(result.clone()); // the pusher may have gone; nothing to undo
        }
    }

    fn write(&mut self, appends: &[Append]) -> io::Result<()> {
        let messages: u64 = appends.iter().map(|a| a.messages).sum();
        let shared = self.shared.clone();
        let key = &shared.key;
        let current = self.current_file()?;
        let before = current.len;
        let id = current.id;
        let records = appends
            .iter()
            .flat_map(|a| &a.bodies)
            .map(|body| seal(key, &id, body))
            .collect::<io::Result<Vec<_>>>()?;
        let written = write_synced(&mut current.file, records.iter());
        match written {
            Ok(bytes) => {
                current.len += bytes;
                current.messages += messages;
                lock(&self.shared.state).durable = Some((current.seq, current.len));
                Ok(())
            }
            Err(e) => {
                // Cut the failed bytes off, so later records follow the last good one.
                let undone = current
                    .file
                    .set_len(before)
                    .and_then(|()| current.file.sync_data());
                if let Err(undo) = undone {
                    lock(&self.shared.state).broken = Some(format!(
                        "a failed write could not be undone ({undo}); appends are refused"
                    ));
                }
                Err(e)
            }
        }
    }

    /// The file to append to: the current one, or a new one once the current one holds
    /// its share of messages (or none is open).
    fn current_file(&mut self) -> io::Result<&mut Current> {
        let full = self
            .current
            .as_ref()
            .is_none_or(|c| c.messages >= self.messages_per_file);
        if full {
            // Only this thread moves `next_seq`, so the number read here is still free once
            // the file exists; the readers learn of the file only then.
            let seq = lock(&self.shared.state).next_seq;
            let mut file = files::create_new(&file_path(&self.shared.dir, seq))?;
            let id = files::write_header(&mut file, &self.shared.key)?;
            files::sync_dir(&self.shared.dir)?;
            {
                let mut state = lock(&self.shared.state);
                state.next_seq = seq + 1;
                state.files.push_back(seq);
            }
            self.current = Some(Current {
                seq,
                id,
                file,
                len: FILE_HEADER_LEN,
                messages: 0,
            });
        }
        Ok(self.current.as_mut().expect("opened above"))
    }
}

/// Writes `records` and syncs the file's data; the bytes written.
fn write_synced<'a>(
    file: &mut File,
    records: impl Iterator<Item = &'a Vec<u8>>,
) -> io::Result<u64> {
    let mut bytes = 0u64;
    for record in records {
        file.write_all(record)?;
        bytes += record.len() as u64;
    }
    file.sync_data()?;
    Ok(bytes)
}

/// Appends the records of `bodies` to the quarantine file, sealed, and syncs it. A file that
/// would pass half of `max_bytes`, or that is not of this format and key, is rotated first.
fn quarantine(dir: &Path, key: &SpoolKey, bodies: &[Vec<u8>], max_bytes: u64) -> io::Result<()> {
    let path = dir.join(QUARANTINE_FILE);
    let adding: u64 = bodies
        .iter()
        .map(|b| super::record::sealed_len(b.len()))
        .sum();
    let mut file = files::open_or_create(&path, true)?;
    let len = file.metadata()?.len();
    let mut id = None;
    if len > 0 {
        let mut r = files::open_own(&path, false)?;
        let ours = files::read_header(&mut r, len, &path, key);
        match ours {
            Ok(Header::Ours(ours)) if len + adding <= max_bytes / 2 => id = Some(ours),
            _ => {
                tracing::warn!(
                    path = %path.display(),
                    bytes = len,
                    "the quarantine file is full (half of FILE_BUFFER_MAX_BYTES) or not of this \
                     key: rotated to {QUARANTINE_OLD_FILE}, replacing the one before it"
                );
                std::fs::rename(&path, dir.join(QUARANTINE_OLD_FILE))?;
                file = files::create_new(&path)?;
            }
        }
    }
    let id = match id {
        Some(id) => id,
        None => files::write_header(&mut file, key)?,
    };
    let records = bodies
        .iter()
        .map(|body| seal(key, &id, body))
        .collect::<io::Result<Vec<_>>>()?;
    write_synced(&mut file, records.iter())?;
    files::sync_dir(dir)
}
