//! Questions about other processes answered from `/proc`: is a pid alive, is it a postmaster
//! of our data directory, which processes descend from it.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `(state, ppid)` from `/proc/<pid>/stat`; `comm` may contain spaces and parentheses, so parse
/// after the last `)`.
pub(super) fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether any process (zombies included) has this pid: what `kill(pid, 0)` would report.
pub(super) fn pid_exists(pid: i32) -> bool {
    pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Alive and not a zombie: a zombie holds no shared memory and no data-dir lock.
pub(super) fn pid_alive(pid: i32) -> bool {
    pid > 0 && matches!(proc_stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// The raw `/proc/<pid>/cmdline` if `pid` is alive and runs a PostgreSQL server binary
/// (`postgres`/`postmaster`).
pub(super) fn live_postgres_cmdline(pid: i32) -> Option<Vec<u8>> {
    if !pid_alive(pid) {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|b| *b == 0).next()?;
    let base = argv0.rsplit(|b| *b == b'/').next().unwrap_or(argv0);
    (base.starts_with(b"postgres") || base.starts_with(b"postmaster")).then_some(cmdline)
}

/// Whether `pid` is a postmaster serving `data_dir` (canonical). Guards against PID reuse: a
/// stale `postmaster.pid` may name an unrelated process or another cluster's postgres.
pub(super) fn is_postmaster_of(pid: i32, data_dir: &Path) -> bool {
    let Some(cmdline) = live_postgres_cmdline(pid) else {
        return false;
    };
    // The postmaster chdirs into its data directory: the most reliable witness.
    if let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) {
        return cwd == data_dir;
    }
    // Not permitted to read cwd (another user): fall back to the `-D` argument.
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    let same = |p: &[u8]| fs::canonicalize(OsStr::from_bytes(p)).is_ok_and(|p| p == data_dir);
    args.windows(2).any(|w| w[0] == b"-D" && same(w[1]))
        || args
            .iter()
            .any(|a| a.len() > 2 && a.starts_with(b"-D") && same(&a[2..]))
}

/// All descendants of `root` (children, grandchildren, …) from one `/proc` scan.
pub(super) fn descendants(root: i32) -> Vec<i32> {
    let mut edges: Vec<(i32, i32)> = Vec::new();
    for entry in fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<i32>().ok())
        else {
            continue;
        };
        if let Some((_, ppid)) = proc_stat(pid) {
            edges.push((pid, ppid));
        }
    }
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let parent = found[i];
        found.extend(edges.iter().filter(|e| e.1 == parent).map(|e| e.0));
        i += 1;
    }
    found.remove(0);
    found
}
