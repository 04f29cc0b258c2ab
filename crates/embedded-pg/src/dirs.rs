//! The data directory (created, canonical, owned by the server user, 0700) and the socket
//! directory (`DIR` itself, or a short private fallback under `/tmp` when `DIR` cannot hold a
//! socket path).

use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tracing::info;

use super::run_as::{check_reachable, chown_recursive, give_to, RunAs};
use super::{io_ctx, EmbeddedPgError, Result};

/// `sizeof(sockaddr_un.sun_path)` is 108 on Linux, including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;

/// Creates `dir` if needed and returns its canonical path. As root: checks that the postgres
/// user can reach it and hands it over.
pub(super) fn prepare_data_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<PathBuf> {
    let abs: PathBuf = if dir.is_absolute() {
        dir.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(io_ctx("reading the current directory"))?
            .join(dir)
    };
    // Drops `.` components, so messages say /root/qd rather than /root/./qd.
    let abs: PathBuf = abs.components().collect();
    // Check before creating anything, so a refused /root/... leaves no directories behind.
    if let Some(r) = run_as {
        check_reachable(&abs, r)?;
    }
    // Parents with default permissions (a 0700 parent would lock the postgres user out).
    fs::create_dir_all(&abs).map_err(io_ctx(format!("creating {}", abs.display())))?;
    let abs = fs::canonicalize(&abs).map_err(io_ctx(format!("resolving {}", abs.display())))?;
    if let Some(r) = run_as {
        // Again on the resolved path: a symlink may lead somewhere else.
        check_reachable(&abs, r)?;
        let md = fs::metadata(&abs).map_err(io_ctx(format!("stat {}", abs.display())))?;
        if md.uid() != r.uid {
            // Whole tree: postgres refuses files it cannot write (e.g. after a root-run restore).
            info!(data_dir = %abs.display(), "handing the data directory to the postgres user");
            chown_recursive(&abs, r.uid, r.gid)
                .map_err(io_ctx(format!("chown -R {}", abs.display())))?;
        }
    }
    // The server refuses a data directory readable by others, and an operator may have created
    // it. Best effort: postgres reports it clearly if this fails.
    if let Ok(md) = fs::metadata(&abs) {
        if md.mode() & 0o027 != 0 {
            let _ = fs::set_permissions(&abs, fs::Permissions::from_mode(0o700));
        }
    }
    Ok(abs)
}

/// Characters we accept verbatim in a socket directory. Anything else (commas and spaces split
/// `unix_socket_directories`, quotes need escaping, `%&#?` need URL encoding) sends us to the
/// fallback directory instead of quoting everywhere.
fn socket_dir_char_ok(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-' | b'~')
}

fn socket_dir_usable(dir: &Path, port: u16) -> bool {
    let bytes = dir.as_os_str().as_bytes();
    let file = format!("/.s.PGSQL.{port}");
    bytes.len() + file.len() <= MAX_SOCKET_PATH && bytes.iter().all(|&b| socket_dir_char_ok(b))
}

/// `DIR` itself when usable, else `/tmp/queen-pg-<xxh3 of DIR>`: stable, so the same data
/// directory always gets the same socket directory.
pub(super) fn choose_socket_dir(data_dir: &Path, port: u16) -> PathBuf {
    if socket_dir_usable(data_dir, port) {
        return data_dir.to_path_buf();
    }
    let hash = xxhash_rust::xxh3::xxh3_64(data_dir.as_os_str().as_bytes());
    PathBuf::from(format!("/tmp/queen-pg-{hash:016x}"))
}

/// Creates (0700) or validates the fallback socket directory. `/tmp` is world-writable, so it
/// must be a real directory owned by the server user, never a symlink planted by someone else.
pub(super) fn prepare_socket_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<()> {
    let owner = match run_as {
        Some(r) => r.uid,
        // SAFETY: geteuid has no preconditions.
        None => unsafe { libc::geteuid() },
    };
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => give_to(dir, run_as)?,
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            let md =
                fs::symlink_metadata(dir).map_err(io_ctx(format!("stat {}", dir.display())))?;
            if !md.is_dir() {
                return Err(EmbeddedPgError::UnsafeSocketDir {
                    dir: dir.to_path_buf(),
                    reason: "exists and is not a directory".into(),
                });
            }
            if md.uid() != owner {
                // Root created it on an earlier run and then failed: safe to hand over.
                if md.uid() == 0 && run_as.is_some() {
                    give_to(dir, run_as)?;
                } else {
                    return Err(EmbeddedPgError::UnsafeSocketDir {
                        dir: dir.to_path_buf(),
                        reason: format!("owned by uid {}, expected uid {owner}", md.uid()),
                    });
                }
            }
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(io_ctx(format!("chmod 0700 {}", dir.display())))?;
        }
        Err(e) => return Err(io_ctx(format!("creating {}", dir.display()))(e)),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_or_odd_socket_dirs_fall_back_to_tmp() {
        let short = Path::new("/tmp/q");
        assert_eq!(choose_socket_dir(short, 5432), short);
        let long = PathBuf::from(format!("/tmp/{}", "x".repeat(100)));
        let fallback = choose_socket_dir(&long, 5432);
        assert!(fallback.to_string_lossy().starts_with("/tmp/queen-pg-"));
        assert_eq!(fallback, choose_socket_dir(&long, 5432), "stable");
        assert!(choose_socket_dir(Path::new("/tmp/a,b"), 5432)
            .to_string_lossy()
            .starts_with("/tmp/queen-pg-"));
        // 107 bytes exactly is allowed.
        let exact = PathBuf::from(format!("/{}", "y".repeat(107 - 1 - "/.s.PGSQL.5432".len())));
        assert!(socket_dir_usable(&exact, 5432));
        let over = PathBuf::from(format!("/{}", "y".repeat(107 - "/.s.PGSQL.5432".len())));
        assert!(!socket_dir_usable(&over, 5432));
    }
}
