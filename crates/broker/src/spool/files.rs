//! How the spool touches the file system (docs/engine.md §4.6): its directory is created 0700
//! and must belong to the broker's user (as the embedded PostgreSQL's directories must); its
//! files are created 0600 with `O_EXCL`, opened with `O_NOFOLLOW`, and must be regular files of
//! that user, so a link planted in the directory is refused instead of followed. Every spool
//! and quarantine file starts with a [`FILE_HEADER_LEN`]-byte header: the format's magic and
//! version, the file's random id (bound into each record's seal, so a record cannot be moved
//! to another file) and the fingerprint of the key that sealed it.

use std::fs::{DirBuilder, File, OpenOptions, Permissions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use rand::rngs::OsRng;
use rand::RngCore;

use super::key::{SpoolKey, ID_LEN};

/// The first bytes of every spool file of this format (version 2: sealed records).
pub const MAGIC: &[u8; 8] = b"QSPOOL\0\x02";
/// Magic, file id (16 bytes), key fingerprint.
pub const FILE_HEADER_LEN: u64 = 8 + 16 + ID_LEN as u64;

/// A file's random id, bound into the seal of each of its records.
pub type FileId = [u8; 16];

/// The broker's effective user id.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

fn unsafe_path(path: &Path, why: String) -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        format!("{} is not safe to use: {why}", path.display()),
    )
}

/// Creates `dir` (mode 0700) or checks the existing one: a real directory (not a link) owned
/// by the broker's user; group and other permissions are taken away.
pub fn prepare_dir(dir: &Path) -> io::Result<()> {
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)?;
    }
    match DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e),
    }
    let md = std::fs::symlink_metadata(dir)?;
    if !md.is_dir() {
        return Err(unsafe_path(
            dir,
            "it exists and is not a directory (a link is not followed)".into(),
        ));
    }
    if md.uid() != euid() {
        return Err(unsafe_path(
            dir,
            format!(
                "it is owned by uid {}, and the broker runs as uid {}",
                md.uid(),
                euid()
            ),
        ));
    }
    if md.mode() & 0o077 != 0 {
        tracing::warn!(dir = %dir.display(), mode = format!("{:o}", md.mode() & 0o777),
            "the spool directory was open to other users; setting it to 0700");
        std::fs::set_permissions(dir, Permissions::from_mode(0o700))?;
    }
    Ok(())
}

/// Creates `path` (mode 0600); fails if anything, a link included, is there already.
pub fn create_new(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| match e.kind() {
            io::ErrorKind::AlreadyExists => io::Error::new(
                e.kind(),
                format!(
                    "{} exists already (a file or link the spool did not create); it is \
                     refused, never followed or overwritten",
                    path.display()
                ),
            ),
            _ => e,
        })
}

/// Opens (creating it 0600 when missing) `path` for appending or locking, never through a link,
/// and checks it is the broker's own regular file.
pub fn open_or_create(path: &Path, append: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(!append)
        .append(append)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| link_refused(path, e))?;
    check_own(path, &file)?;
    Ok(file)
}

/// Opens the existing `path` (read only, or read and write), never through a link, and checks
/// it is the broker's own regular file.
pub fn open_own(path: &Path, write: bool) -> io::Result<File> {
    let file = OpenOptions::new()
        .read(true)
        .write(write)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| link_refused(path, e))?;
    check_own(path, &file)?;
    Ok(file)
}

/// `O_NOFOLLOW` on a link fails with `ELOOP`: say what it means.
fn link_refused(path: &Path, e: io::Error) -> io::Error {
    if e.raw_os_error() == Some(libc::ELOOP) {
        return unsafe_path(
            path,
            "it is a symbolic link, which the spool never follows".into(),
        );
    }
    e
}

fn check_own(path: &Path, file: &File) -> io::Result<()> {
    let md = file.metadata()?;
    if !md.is_file() {
        return Err(unsafe_path(path, "it is not a regular file".into()));
    }
    if md.uid() != euid() {
        return Err(unsafe_path(
            path,
            format!(
                "it is owned by uid {}, and the broker runs as uid {}",
                md.uid(),
                euid()
            ),
        ));
    }
    Ok(())
}

/// Makes a file's creation (or removal) in `dir` durable.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes a new file's header for `key`; its id.
pub fn write_header(file: &mut File, key: &SpoolKey) -> io::Result<FileId> {
    let mut id = [0u8; 16];
    OsRng.fill_bytes(&mut id);
    let mut header = Vec::with_capacity(FILE_HEADER_LEN as usize);
    header.extend_from_slice(MAGIC);
    header.extend_from_slice(&id);
    header.extend_from_slice(&key.id());
    file.write_all(&header)?;
    Ok(id)
}

/// What a file's first bytes say.
#[derive(Debug)]
pub enum Header {
    /// A file of this format sealed under the key: its id.
    Ours(FileId),
    /// Shorter than a header and a prefix of one: a creation cut short, never answered.
    Torn,
}

/// Reads the header of the file `r` (of `len` bytes) at `path`. A file of the earlier
/// unsealed format, of another version, or sealed under another key is an error that says so.
pub fn read_header(r: &mut impl Read, len: u64, path: &Path, key: &SpoolKey) -> io::Result<Header> {
    let mut header = [0u8; FILE_HEADER_LEN as usize];
    let have = len.min(FILE_HEADER_LEN) as usize;
    r.read_exact(&mut header[..have])?;
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let magic_len = have.min(MAGIC.len());
    if header[..magic_len] != MAGIC[..magic_len] {
        if header[..magic_len.min(6)] == MAGIC[..magic_len.min(6)] {
            return Err(refuse(format!(
                "a spool file of format version {}, which this broker does not read",
                header.get(7).copied().unwrap_or_default()
            )));
        }
        return Err(refuse(
            "not a sealed spool file: it was written by an earlier version (whose records are \
             not authenticated, so they are never replayed) or by something else; replay it \
             with the version that wrote it, or move it out of the directory"
                .into(),
        ));
    }
    if have < FILE_HEADER_LEN as usize {
        return Ok(Header::Torn);
    }
    if header[24..] != key.id() {
        return Err(refuse(format!(
            "it was sealed under another key than this broker's spool key ({}): \
             QUEEN_ENCRYPTION_KEY changed, or the KEY file was replaced; start the broker with \
             the key it was written under, or move the file out of the directory",
            key.source
        )));
    }
    let mut id = [0u8; 16];
    id.copy_from_slice(&header[8..24]);
    Ok(Header::Ours(id))
}
