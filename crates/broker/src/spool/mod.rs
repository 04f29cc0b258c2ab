//! The disk spool (docs/engine.md §4.6): where pushes wait while PostgreSQL cannot take them
//! (push maintenance, an outage), until the engine's drain replays them. Store-free: it knows
//! files, never PostgreSQL.
//!
//! A directory of files `spool-<seq>.log`, each a header and a run of records ([`record`]: one
//! (queue, partition) group of one request, checksummed and sealed under the spool's key,
//! [`key`]). The directory is the broker user's alone (0700), its files 0600 and never
//! followed through a link ([`files`]). One writer thread ([`writer`]) appends
//! and syncs before an append is answered; the drain reads the records back in append order
//! ([`Spool::read`]) and, once it has replayed them, commits ([`Spool::commit`]): finished files
//! are deleted as it goes, and all of them once nothing is held. A directory holds one
//! broker's spool: an exclusive `flock` on its `LOCK` file refuses a second process.
//!
//! At open, what an earlier process left behind is scanned ([`read`]): a torn tail (a write cut
//! short by a crash, so never answered) is cut off, and everything before it waits to be
//! drained; a file of the earlier unsealed format, one sealed under another key, or a record
//! that does not open under the key refuses the open, naming the file.

pub mod files;
pub mod key;
mod read;
pub mod record;
mod writer;

pub use record::{SpoolGroup, SpoolItem};

use std::collections::VecDeque;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::{oneshot, Notify};

use key::SpoolKey;
use record::sealed_len;
use writer::{Append, Job};

/// Records set aside for good (the drain gave up on them) are appended here (sealed like the
/// spool's), never replayed.
pub const QUARANTINE_FILE: &str = "quarantine.log";
/// The quarantine file before the last rotation: the two together stay within
/// `FILE_BUFFER_MAX_BYTES`.
pub const QUARANTINE_OLD_FILE: &str = "quarantine.old.log";
const LOCK_FILE: &str = "LOCK";
const FILE_PREFIX: &str = "spool-";
const FILE_SUFFIX: &str = ".log";

/// How much the spool may hold, and how many messages go into one file.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Bytes held (appended and not drained) past which appends are refused.
    pub max_bytes: u64,
    /// Messages per file before the next append starts a new one.
    pub messages_per_file: u64,
}

/// What the spool holds: appended (or being appended) and not yet drained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Held {
    pub records: u64,
    pub messages: u64,
    pub bytes: u64,
}

impl Held {
    fn add(&mut self, other: Held) {
        self.records += other.records;
        self.messages += other.messages;
        self.bytes += other.bytes;
    }

    fn take(&mut self, other: Held) {
        self.records = self.records.saturating_sub(other.records);
        self.messages = self.messages.saturating_sub(other.messages);
        self.bytes = self.bytes.saturating_sub(other.bytes);
    }
}

/// Why the spool could not take or give back records.
#[derive(Debug, Clone, thiserror::Error)]
pub enum SpoolError {
    #[error(
        "the disk spool is full: it holds {held} bytes and may hold {max} (FILE_BUFFER_MAX_BYTES)"
    )]
    Full { held: u64, max: u64 },
    #[error("the disk spool failed: {0}")]
    Io(String),
}

/// Whether an append needs the spool to hold something already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    Always,
    /// Only while it holds records: a caller that would otherwise write to PostgreSQL must not
    /// overtake what waits here, but need not spool once everything is drained.
    WhileHolding,
}

/// What a process found in the directory at open.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovered {
    pub held: Held,
    /// Bytes of torn tails cut off.
    pub dropped_bytes: u64,
}

/// Records read back for the drain, to be [`Spool::commit`]ted once replayed.
#[derive(Debug)]
pub struct Batch {
    pub groups: Vec<SpoolGroup>,
    taken: Held,
    next: (u64, u64),
    finished: Vec<u64>,
}

impl Batch {
    /// Whether committing it moves the drain on (records read, or files finished).
    pub fn moves(&self) -> bool {
        !self.groups.is_empty() || !self.finished.is_empty()
    }
}

/// One broker's spool directory.
pub struct Spool {
    shared: Arc<Shared>,
    jobs: Sender<Job>,
    max_bytes: u64,
    /// Holds the directory's `flock` for as long as the spool lives.
    _lock: File,
}

struct Shared {
    dir: PathBuf,
    key: SpoolKey,
    state: Mutex<State>,
    appended: Notify,
}

struct State {
    held: Held,
    /// The files on disk, in order.
    files: VecDeque<u64>,
    /// The number of the next file the writer opens.
    next_seq: u64,
    /// The file being appended to and its synced length; files before it are complete.
    durable: Option<(u64, u64)>,
    /// Where the drain reads next: (file, offset).
    cursor: (u64, u64),
    /// Set when a failed write could not be undone: appends are refused from then on.
    broken: Option<String>,
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    state.lock().unwrap_or_else(|p| p.into_inner())
}

fn file_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{FILE_PREFIX}{seq:020}{FILE_SUFFIX}"))
}

impl Spool {
    /// Opens (creating it 0700 if needed) and locks `dir`, loads the spool key (derived from
    /// `master`, `QUEEN_ENCRYPTION_KEY`, when given; else the directory's `KEY` file), cuts torn
    /// tails off what an earlier process left, and starts the writer thread.
    pub fn open(
        dir: &Path,
        limits: Limits,
        master: Option<&[u8; key::KEY_LEN]>,
    ) -> io::Result<(Spool, Recovered)> {
        files::prepare_dir(dir)?;
        let lock_file = exclusive_lock(dir)?;
        let key = SpoolKey::open(dir, master)?;
        let (files, recovered) = read::recover(dir, &key)?;
        let next_seq = files.last().map_or(1, |(seq, _)| seq + 1);
        let state = State {
            held: recovered.held,
            files: files.iter().map(|(seq, _)| *seq).collect(),
            next_seq,
            durable: files.last().copied(),
            cursor: (files.first().map_or(next_seq, |(seq, _)| *seq), 0),
            broken: None,
        };
        let shared = Arc::new(Shared {
            dir: dir.to_path_buf(),
            key,
            state: Mutex::new(state),
            appended: Notify::new(),
        });
        let (jobs, queue) = channel();
        let for_writer = shared.clone();
        let per_file = limits.messages_per_file.max(1);
        std::thread::Builder::new()
            .name("queen-spool".into())
            .spawn(move || writer::run(for_writer, queue, per_file, limits.max_bytes))?;
        let spool = Spool {
            shared,
            jobs,
            max_bytes: limits.max_bytes,
            _lock: lock_file,
        };
        Ok((spool, recovered))
    }

    pub fn dir(&self) -> &Path {
        &self.shared.dir
    }

    pub fn held(&self) -> Held {
        lock(&self.shared.state).held
    }

    pub fn is_holding(&self) -> bool {
        self.held().records > 0
    }

    /// False once a failed write could not be undone (appends are then refused).
    pub fn healthy(&self) -> bool {
        lock(&self.shared.state).broken.is_none()
    }

    /// Returns after the next append (or at once if one came since the last call).
    pub async fn appended(&self) {
        self.shared.appended.notified().await;
    }

    /// Appends the records of one request (`bodies`, [`record::body`]; `messages` in all),
    /// sealed, contiguously and synced. `Ok(false)`: `when` was [`When::WhileHolding`] and the
    /// spool held nothing, so nothing was appended. Refused when the records would take the
    /// spool past its byte limit.
    pub async fn append(
        &self,
        bodies: Vec<Vec<u8>>,
        messages: u64,
        when: When,
    ) -> Result<bool, SpoolError> {
        let adding = Held {
            records: bodies.len() as u64,
            messages,
            bytes: bodies.iter().map(|b| sealed_len(b.len())).sum(),
        };
        let (done, synced) = oneshot::channel();
        {
            let mut state = lock(&self.shared.state);
            if let Some(broken) = &state.broken {
                return Err(SpoolError::Io(broken.clone()));
            }
            if when == When::WhileHolding && state.held.records == 0 {
                return Ok(false);
            }
            if state.held.bytes + adding.bytes > self.max_bytes {
                return Err(SpoolError::Full {
                    held: state.held.bytes,
                    max: self.max_bytes,
                });
            }
            state.held.add(adding);
            // Sent under the lock: the writer's order is the order appends were counted in.
            let append = Append {
                bodies,
                messages,
                done,
            };
            self.send(&mut state, Job::Append(append));
        }
        let result = synced
            .await
            .unwrap_or_else(|_| Err("the spool writer is gone".to_string()));
        match result {
            Ok(()) => {
                self.shared.appended.notify_one();
                Ok(true)
            }
            Err(e) => {
                let mut state = lock(&self.shared.state);
                self.release(&mut state, adding);
                Err(SpoolError::Io(e))
            }
        }
    }

    /// Reads up to about `max_messages` (whole records, at least one) from where the drain
    /// stands, only what has been synced. Empty when nothing is there yet.
    pub async fn read(&self, max_messages: u64) -> Result<Batch, SpoolError> {
        let (cursor, durable, files) = {
            let state = lock(&self.shared.state);
            (state.cursor, state.durable, Vec::from(state.files.clone()))
        };
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let at = read::At {
                cursor,
                durable,
                files: &files,
            };
            read::read_from(&shared.dir, &shared.key, at, max_messages.max(1))
        })
        .await
        .map_err(|e| SpoolError::Io(format!("spool read task failed: {e}")))?
    }

    /// Records `batch` as drained: the drain moves past it, files it finished are deleted,
    /// and when nothing is held any more every file goes and appends start a fresh one.
    pub fn commit(&self, batch: Batch) {
        let mut state = lock(&self.shared.state);
        state.cursor = batch.next;
        for seq in batch.finished {
            state.files.retain(|&s| s != seq);
            self.send(&mut state, Job::Remove(seq));
        }
        self.release(&mut state, batch.taken);
    }

    /// Appends the records of `bodies` to the quarantine file (sealed, synced); they are never
    /// replayed.
    pub async fn quarantine(&self, bodies: Vec<Vec<u8>>) -> Result<(), SpoolError> {
        let (done, synced) = oneshot::channel();
        {
            let mut state = lock(&self.shared.state);
            self.send(&mut state, Job::Quarantine { bodies, done });
        }
        synced
            .await
            .unwrap_or_else(|_| Err("the spool writer is gone".to_string()))
            .map_err(SpoolError::Io)
    }

    /// Forgets `taken`; once nothing is held, every file is deleted and the drain waits at the
    /// start of the next file.
    fn release(&self, state: &mut State, taken: Held) {
        state.held.take(taken);
        if state.held.records == 0 {
            let files: Vec<u64> = state.files.drain(..).collect();
            state.durable = None;
            state.cursor = (state.next_seq, 0);
            self.send(state, Job::Reset(files));
        }
    }

    /// Queues a job for the writer (called with the state locked, so jobs keep that order).
    fn send(&self, state: &mut State, job: Job) {
        if self.jobs.send(job).is_err() {
            state.broken = Some("the spool writer thread is gone".into());
        }
    }
}

/// Takes the directory's exclusive lock, or fails naming the other holder's directory.
fn exclusive_lock(dir: &Path) -> io::Result<File> {
    let file = files::open_or_create(&dir.join(LOCK_FILE), false)?;
    // SAFETY: flock(2) on a descriptor this function owns; no memory is passed.
    let locked = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if locked != 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!(
                "{} is in use by another broker ({e}); give each broker its own FILE_BUFFER_DIR",
                dir.display()
            ),
        ));
    }
    Ok(file)
}

#[cfg(test)]
mod tests;
