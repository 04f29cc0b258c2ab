//! Reading spool files back: the scan at open ([`recover`]: torn tails cut off, files that are
//! not this broker's refused) and the drain's reads ([`read_from`]: whole records from where it
//! stands, within what is synced). Every read checks the file's header and opens each record
//! under the spool key (`spool/record.rs`).

use std::fs::File;
use std::io::{self, BufReader, Seek, SeekFrom};
use std::path::Path;

use super::files::{self, FileId, Header, FILE_HEADER_LEN};
use super::key::SpoolKey;
use super::record::{read_next, Next};
use super::{file_path, Batch, Held, Recovered, SpoolError, FILE_PREFIX, FILE_SUFFIX};

/// The spool files of `dir` in order, with their lengths after torn tails are cut off; empty
/// ones (and ones whose creation was cut short) are deleted. A file that is not this broker's
/// (the earlier unsealed format, another key, a record that does not open) is an error.
pub(super) fn recover(dir: &Path, key: &SpoolKey) -> io::Result<(Vec<(u64, u64)>, Recovered)> {
    let mut seqs: Vec<u64> = std::fs::read_dir(dir)?
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            name.strip_prefix(FILE_PREFIX)?
                .strip_suffix(FILE_SUFFIX)?
                .parse()
                .ok()
        })
        .collect();
    seqs.sort_unstable();
    let mut recovered = Recovered::default();
    let mut files = Vec::new();
    for seq in seqs {
        let path = file_path(dir, seq);
        let (held, valid, len) = scan(&path, key)?;
        if valid < len {
            let file = files::open_own(&path, true)?;
            file.set_len(valid)?;
            file.sync_all()?;
            recovered.dropped_bytes += len - valid;
        }
        if valid <= FILE_HEADER_LEN {
            std::fs::remove_file(&path)?;
            continue;
        }
        recovered.held.add(held);
        files.push((seq, valid));
    }
    files::sync_dir(dir)?;
    Ok((files, recovered))
}

/// What one file holds up to its first torn record: (held, valid length, file length). A file
/// whose header was cut short has a valid length of 0.
fn scan(path: &Path, key: &SpoolKey) -> io::Result<(Held, u64, u64)> {
    let file = files::open_own(path, false)?;
    let len = file.metadata()?.len();
    let mut r = BufReader::new(file);
    let id = match files::read_header(&mut r, len, path, key)? {
        Header::Ours(id) => id,
        Header::Torn => return Ok((Held::default(), 0, len)),
    };
    let mut held = Held::default();
    let mut valid = FILE_HEADER_LEN;
    loop {
        match read_next(&mut r, len - valid, key, &id)? {
            Next::Record(group, size) => {
                valid += size;
                held.add(Held {
                    records: 1,
                    messages: group.items.len() as u64,
                    bytes: size,
                });
            }
            Next::End => break,
            Next::Torn(why) => {
                tracing::warn!(
                    path = %path.display(),
                    at = valid,
                    dropped = len - valid,
                    why = %why,
                    "spool file ends in a torn record (a write cut short, never answered); cutting it off"
                );
                break;
            }
            Next::Forged(why) => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!(
                        "{} at byte {valid}: {why}; nothing of it is replayed: move the file \
                         out of the directory to start",
                        path.display()
                    ),
                ))
            }
        }
    }
    Ok((held, valid, len))
}

/// Where the drain stands and what is on disk.
pub(super) struct At<'a> {
    /// (file, offset) the drain reads next; offset 0 is the file's start.
    pub cursor: (u64, u64),
    /// The file being appended to and its synced length.
    pub durable: Option<(u64, u64)>,
    pub files: &'a [u64],
}

/// An open spool file positioned at `at` (past its header at least), and its id.
fn open_at(dir: &Path, key: &SpoolKey, seq: u64, at: u64) -> io::Result<(File, FileId, u64)> {
    let path = file_path(dir, seq);
    let mut file = files::open_own(&path, false)?;
    let len = file.metadata()?.len();
    let id = match files::read_header(&mut file, len, &path, key)? {
        Header::Ours(id) => id,
        Header::Torn => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{}: its header is cut short", path.display()),
            ))
        }
    };
    let at = at.max(FILE_HEADER_LEN);
    file.seek(SeekFrom::Start(at))?;
    Ok((file, id, at))
}

/// Reads records from the cursor on, within what is synced, until `max_messages` are taken or
/// nothing more is there.
pub(super) fn read_from(
    dir: &Path,
    key: &SpoolKey,
    at: At<'_>,
    max_messages: u64,
) -> Result<Batch, SpoolError> {
    let io = |e: io::Error| SpoolError::Io(format!("reading the spool: {e}"));
    let mut batch = Batch {
        groups: Vec::new(),
        taken: Held::default(),
        next: at.cursor,
        finished: Vec::new(),
    };
    let Some((last, last_len)) = at.durable else {
        return Ok(batch);
    };
    let files = at.files;
    let (mut seq, mut offset) = at.cursor;
    while batch.taken.messages < max_messages && seq <= last && files.contains(&seq) {
        let (file, id, from) = open_at(dir, key, seq, offset).map_err(io)?;
        offset = from;
        let end = if seq == last {
            last_len
        } else {
            file.metadata().map_err(io)?.len()
        };
        let mut r = BufReader::new(file);
        while batch.taken.messages < max_messages && offset < end {
            match read_next(&mut r, end - offset, key, &id).map_err(io)? {
                Next::Record(group, size) => {
                    offset += size;
                    batch.taken.add(Held {
                        records: 1,
                        messages: group.items.len() as u64,
                        bytes: size,
                    });
                    batch.groups.push(group);
                }
                Next::End => break,
                Next::Torn(why) | Next::Forged(why) => {
                    return Err(SpoolError::Io(format!(
                        "{} is damaged at byte {offset}: {why}",
                        file_path(dir, seq).display()
                    )))
                }
            }
        }
        batch.next = (seq, offset);
        if offset < end || seq == last {
            break;
        }
        // A complete file read to its end: the drain moves to the next one.
        batch.finished.push(seq);
        match files.iter().find(|&&s| s > seq) {
            Some(&next) => (seq, offset) = (next, 0),
            None => break,
        }
        batch.next = (seq, offset);
    }
    Ok(batch)
}
