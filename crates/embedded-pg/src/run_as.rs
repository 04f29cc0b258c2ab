//! Running as root: PostgreSQL refuses root, so its processes switch to the `postgres` OS user.
//! Owns that identity (lookup, the switch in the forked child), handing our files over to it
//! (chown) and checking that it can reach the data directory.

use std::ffi::CString;
use std::fs;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use super::{io_ctx, EmbeddedPgError, Result};

const OS_USER: &str = "postgres";

/// Identity the server processes switch to (only when we are root).
#[derive(Debug, Clone)]
pub(super) struct RunAs {
    pub(super) uid: libc::uid_t,
    pub(super) gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl RunAs {
    /// `None` when not root (the server runs as us).
    pub(super) fn for_current_process() -> Result<Option<Self>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        lookup_user(OS_USER)
            .map_err(io_ctx(format!("looking up OS user {OS_USER:?}")))?
            .map(Some)
            .ok_or(EmbeddedPgError::NoPostgresUser)
    }

    /// Switches the calling process to this identity. Runs between fork and exec, so it makes
    /// only async-signal-safe syscalls (the group list was collected before the fork).
    pub(super) fn switch_to(&self) -> io::Result<()> {
        // Groups first, then gid, then uid: after setuid we could no longer change them.
        // SAFETY: plain syscalls on the calling process's own credentials.
        let failed = unsafe {
            libc::setgroups(self.groups.len(), self.groups.as_ptr()) != 0
                || libc::setgid(self.gid) != 0
                || libc::setuid(self.uid) != 0
        };
        if failed {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Traditional owner/group/other search-permission check (ACLs are not consulted).
    fn can_search(&self, md: &fs::Metadata) -> bool {
        let mode = md.mode();
        if md.uid() == self.uid {
            mode & 0o100 != 0
        } else if md.gid() == self.gid || self.groups.contains(&md.gid()) {
            mode & 0o010 != 0
        } else {
            mode & 0o001 != 0
        }
    }
}

fn lookup_user(name: &str) -> io::Result<Option<RunAs>> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: an all-zero passwd is a valid out-parameter; getpwnam_r (unlike getpwnam) writes
    // only into the buffers we pass, so concurrent lookups on other threads are fine.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    let rc = unsafe {
        libc::getpwnam_r(
            cname.as_ptr(),
            &mut pwd,
            buf.as_mut_ptr(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    if result.is_null() {
        return Ok(None);
    }
    let (uid, gid) = (pwd.pw_uid, pwd.pw_gid);

    let mut groups: Vec<libc::gid_t> = vec![0; 64];
    loop {
        let mut n = groups.len() as libc::c_int;
        // SAFETY: `groups` has room for `n` entries; on -1 `n` holds the needed size.
        let rc = unsafe { libc::getgrouplist(cname.as_ptr(), gid, groups.as_mut_ptr(), &mut n) };
        if rc >= 0 {
            groups.truncate(n.max(0) as usize);
            break;
        }
        let want = (n.max(0) as usize).max(groups.len() * 2);
        groups.resize(want, 0);
    }
    Ok(Some(RunAs { uid, gid, groups }))
}

/// `chown -R` without following symlinks (tablespace links in `pg_tblspc` stay untouched).
pub(super) fn chown_recursive(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    std::os::unix::fs::lchown(path, Some(uid), Some(gid))?;
    let md = fs::symlink_metadata(path)?;
    if md.is_dir() {
        for entry in fs::read_dir(path)? {
            chown_recursive(&entry?.path(), uid, gid)?;
        }
    }
    Ok(())
}

/// Gives a file we created as root to the server user (no-op when not root).
pub(super) fn give_to(path: &Path, run_as: Option<&RunAs>) -> Result<()> {
    if let Some(r) = run_as {
        std::os::unix::fs::lchown(path, Some(r.uid), Some(r.gid))
            .map_err(io_ctx(format!("chown {}", path.display())))?;
    }
    Ok(())
}

/// Every existing ancestor of `dir` must be searchable by the server user (ancestors still to
/// be created will get default 0755 permissions).
pub(super) fn check_reachable(dir: &Path, r: &RunAs) -> Result<()> {
    for parent in dir.ancestors().skip(1) {
        let md = match fs::metadata(parent) {
            Ok(md) => md,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(io_ctx(format!("stat {}", parent.display()))(e)),
        };
        if !r.can_search(&md) {
            return Err(EmbeddedPgError::DataDirUnreachable {
                dir: dir.to_path_buf(),
                blocker: parent.to_path_buf(),
            });
        }
    }
    Ok(())
}
