//! The server log `DIR/postgres.log` (the postmaster's stdout and stderr, since
//! `logging_collector = off`): opening and rotating it, and the tail we quote in errors.

use std::fs::{self, File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use super::run_as::{give_to, RunAs};
use super::{io_ctx, Result};

pub(super) const FILE_NAME: &str = "postgres.log";
/// Rotated at start beyond this size so a long-lived data directory does not grow forever.
const ROTATE_BYTES: u64 = 64 * 1024 * 1024;

/// Opens the log for appending (rotating an oversized one); returns it and its current size,
/// which is where this run's output starts.
pub(super) fn open(path: &Path, run_as: Option<&RunAs>) -> Result<(File, u64)> {
    if fs::metadata(path).is_ok_and(|m| m.len() > ROTATE_BYTES) {
        let _ = fs::rename(path, path.with_extension("log.1"));
    }
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(io_ctx(format!("opening {}", path.display())))?;
    give_to(path, run_as)?;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    Ok((file, len))
}

/// The last lines the server wrote since byte `from` (this start only, not earlier runs).
pub(super) fn tail(path: &Path, from: u64) -> String {
    let mut text = String::new();
    if let Ok(mut f) = File::open(path) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        // At most the last 64 KiB of this run.
        let start = from.max(len.saturating_sub(64 * 1024));
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let mut bytes = Vec::new();
            let _ = f.read_to_end(&mut bytes);
            text = String::from_utf8_lossy(&bytes).into_owned();
        }
    }
    tail_lines(&text, 30)
}

/// The last `n` lines of `text`, or a placeholder so an error message never ends blank.
pub(super) fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.trim().is_empty() {
        "(no output)".into()
    } else {
        tail
    }
}
