//! The private PostgreSQL launcher: the "embedded default" of DESIGN.md decision 6 and
//! engine.md §12.4.
//!
//! This module owns everything about running a PostgreSQL cluster that belongs to one broker
//! (or to one integration-test binary): finding the machine's server binaries, `initdb` on first
//! run, the settings we write into `postgresql.auto.conf`, starting `postgres -D DIR` as a
//! supervised child that listens on a Unix socket only, readiness, reuse of a live server /
//! removal of a stale `postmaster.pid`, dropping to the `postgres` OS user when we run as root,
//! and shutdown (clean, on drop, and `SIGKILL` for crash tests).
//!
//! It does not own connection pooling, schema management or any broker configuration: callers
//! get a socket directory, a port, a [`tokio_postgres::Config`] or a URL and take it from there.
//!
//! Supervision model:
//! * The postmaster is forked from one dedicated, process-lifetime thread
//!   (`queen-pg-spawner`). `PR_SET_PDEATHSIG` fires when the *thread* that forked the child
//!   exits, not the process; forking from a runtime or test thread would shut the server down
//!   as soon as that thread ends (e.g. the first `#[tokio::test]` of a binary sharing one
//!   cluster). With the dedicated thread the signal fires exactly when the broker process dies.
//! * The death signal is `SIGINT` (PostgreSQL "fast" shutdown), not `SIGTERM` ("smart"
//!   shutdown): smart shutdown waits for every client to disconnect, so one forgotten `psql`
//!   session would keep an orphaned server alive and refusing connections.
//! * A live server found through `postmaster.pid` is *reused, not adopted*: it was started by
//!   someone else (another broker on the same directory, or an operator with `pg_ctl`), so
//!   [`EmbeddedPg::stop`] and drop leave it running ([`EmbeddedPg::is_supervised`] is false).
//! * Stale lock files: a `postmaster.pid` whose PID no longer exists is left for PostgreSQL,
//!   which replaces it itself after checking that no orphaned backend still holds the old
//!   shared memory. One naming a zombie or an unrelated process (PID reuse), which PostgreSQL
//!   would refuse, is removed by us; so is such a socket lock file (`.s.PGSQL.<port>.lock`).
//! * Concurrent starts on one directory (two brokers booting) serialise on an `flock` of the
//!   data directory: the second waits and then reuses the first one's server.

use std::ffi::{CString, OsStr};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ExitStatus, Stdio};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

/// Default port: with `listen_addresses = ''` it only names the socket file (`.s.PGSQL.5432`),
/// so clusters in different socket directories never collide on it.
pub const DEFAULT_PORT: u16 = 5432;
/// Database superuser created by `initdb -U`.
pub const SUPERUSER: &str = "postgres";
/// OS user PostgreSQL runs as when the broker runs as root (PostgreSQL refuses root).
const OS_USER: &str = "postgres";
/// Written after our settings have been appended to `postgresql.auto.conf`. A separate file
/// because `ALTER SYSTEM` rewrites `postgresql.auto.conf` and drops comments: a marker inside it
/// would vanish and make us append our defaults again over the operator's changes.
const SETTINGS_MARKER: &str = "queen-embedded.init";
/// Server log (stdout + stderr of the postmaster; `logging_collector = off`).
const LOG_FILE: &str = "postgres.log";
/// Rotate the log at start beyond this size so a long-lived data dir does not grow forever.
const LOG_ROTATE_BYTES: u64 = 64 * 1024 * 1024;
/// `sizeof(sockaddr_un.sun_path)` is 108 on Linux, including the terminating NUL.
const MAX_SOCKET_PATH: usize = 107;
/// Readiness probe period.
const PROBE_EVERY: Duration = Duration::from_millis(50);
/// How long [`EmbeddedPg::stop`] waits for a fast shutdown before `SIGKILL`.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// Message PostgreSQL prints when backends of a killed postmaster still hold its shared memory;
/// they notice the postmaster's death within moments, so we retry instead of failing.
const SHMEM_IN_USE: &str = "pre-existing shared memory block";

/// Errors of the launcher. The `Display` texts are meant to be shown to an operator as is.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedPgError {
    #[error(
        "PostgreSQL server binaries (initdb, postgres) not found; install them \
         (Debian/Ubuntu: apt-get install postgresql-15; or set PG_BINDIR or DATABASE_URL) \
         [searched: {searched}]"
    )]
    BinariesNotFound { searched: String },

    #[error(
        "running as root, but there is no `postgres` OS user to run PostgreSQL as (PostgreSQL \
         refuses to run as root); install the server package (Debian/Ubuntu: apt-get install \
         postgresql-15, which creates the user), run as a normal user, or set DATABASE_URL"
    )]
    NoPostgresUser,

    #[error(
        "data directory {} is not reachable by the postgres user ({} is not searchable by it); \
         choose a QUEEN_DATA_DIR outside /root or run as a normal user",
        dir.display(),
        blocker.display()
    )]
    DataDirUnreachable { dir: PathBuf, blocker: PathBuf },

    #[error("socket directory {} cannot be used: {reason}", dir.display())]
    UnsafeSocketDir { dir: PathBuf, reason: String },

    #[error("invalid PostgreSQL setting name {0:?} (expected [a-z0-9_.])")]
    InvalidSetting(String),

    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: io::Error,
    },

    #[error("initdb failed for {} ({status}):\n{output}", dir.display())]
    Initdb {
        dir: PathBuf,
        status: String,
        output: String,
    },

    #[error("postgres exited during startup ({status}); last lines of {}:\n{tail}", log.display())]
    ExitedEarly {
        status: String,
        log: PathBuf,
        tail: String,
    },

    #[error(
        "postgres did not accept connections on {} within {timeout:?} (last error: {last_error}); \
         last lines of {}:\n{tail}",
        socket.display(),
        log.display()
    )]
    StartTimeout {
        socket: PathBuf,
        timeout: Duration,
        last_error: String,
        log: PathBuf,
        tail: String,
    },

    #[error("PostgreSQL error: {0}")]
    Postgres(#[from] tokio_postgres::Error),
}

type Result<T, E = EmbeddedPgError> = std::result::Result<T, E>;

fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedPgError {
    let context = context.into();
    move |source| EmbeddedPgError::Io { context, source }
}

/// What to launch. Only `data_dir` is required; [`EmbeddedOptions::new`] fills the rest.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The cluster directory (`DIR`). Created if missing; made absolute and canonical.
    pub data_dir: PathBuf,
    /// `shared_buffers` in MB. `None`: ≈15 % of RAM (cgroup limit aware), clamped to
    /// [128 MB, 4 GB], written once at `initdb` time. `Some`: also forced on every start, so a
    /// test harness gets what it asks for even on a reused directory. Tests should use 128.
    pub shared_buffers_mb: Option<u32>,
    /// `fsync`, `synchronous_commit` and `full_page_writes` off for this run (`--dev-unsafe`).
    /// Never persisted: the on-disk defaults stay durable.
    pub unsafe_no_fsync: bool,
    /// Extra `name = value` settings, passed as `-c name=value` on every start (not persisted).
    pub extra_settings: Vec<(String, String)>,
    /// Port; only names the socket file since TCP is off.
    pub port: u16,
    /// Readiness deadline (crash recovery after `SIGKILL` counts against it).
    pub start_timeout: Duration,
    /// Explicit binaries directory; wins over `PG_BINDIR` and the search.
    pub bindir: Option<PathBuf>,
}

impl EmbeddedOptions {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            shared_buffers_mb: None,
            unsafe_no_fsync: false,
            extra_settings: Vec::new(),
            port: DEFAULT_PORT,
            start_timeout: Duration::from_secs(60),
            bindir: None,
        }
    }

    /// Builder form of [`EmbeddedOptions::shared_buffers_mb`].
    pub fn shared_buffers_mb(mut self, mb: u32) -> Self {
        self.shared_buffers_mb = Some(mb);
        self
    }

    /// Builder form of [`EmbeddedOptions::unsafe_no_fsync`].
    pub fn unsafe_no_fsync(mut self, on: bool) -> Self {
        self.unsafe_no_fsync = on;
        self
    }

    /// Adds one `-c name=value` for every start.
    pub fn setting(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.extra_settings.push((name.into(), value.into()));
        self
    }

    /// Builder form of [`EmbeddedOptions::port`].
    pub fn port(mut self, port: u16) -> Self {
        self.port = port;
        self
    }

    /// Builder form of [`EmbeddedOptions::start_timeout`].
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Builder form of [`EmbeddedOptions::bindir`].
    pub fn bindir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.bindir = Some(dir.into());
        self
    }
}

// ---------------------------------------------------------------------------------------------
// Binaries
// ---------------------------------------------------------------------------------------------

/// The server binaries of one PostgreSQL installation.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    pub bindir: PathBuf,
    pub initdb: PathBuf,
    pub postgres: PathBuf,
    /// Not needed by the launcher (it signals the postmaster directly); offered to utilities.
    pub pg_ctl: Option<PathBuf>,
    pub psql: Option<PathBuf>,
}

impl PgBinaries {
    /// Search order: `explicit`, `PG_BINDIR`, `pg_config --bindir`, the newest
    /// `/usr/lib/postgresql/*/bin`, then `PATH`. A directory counts only if it holds both
    /// `initdb` and `postgres`: Debian's `pg_config --bindir` may say `/usr/bin`, which has
    /// wrappers but no `postgres`.
    pub fn locate(explicit: Option<&Path>) -> Result<Self> {
        let mut searched: Vec<String> = Vec::new();
        let mut candidates: Vec<PathBuf> = Vec::new();
        if let Some(dir) = explicit {
            candidates.push(dir.to_path_buf());
        }
        if let Some(dir) = std::env::var_os("PG_BINDIR").filter(|v| !v.is_empty()) {
            candidates.push(PathBuf::from(dir));
        }
        if let Some(dir) = pg_config_value(Path::new("pg_config"), "--bindir") {
            candidates.push(dir);
        }
        candidates.extend(debian_bindirs(Path::new("/usr/lib/postgresql")));
        if let Some(path) = std::env::var_os("PATH") {
            candidates.extend(std::env::split_paths(&path));
        }
        for dir in candidates {
            if let Some(found) = Self::from_dir(&dir) {
                return Ok(found);
            }
            searched.push(dir.display().to_string());
        }
        searched.dedup();
        Err(EmbeddedPgError::BinariesNotFound {
            searched: searched.join(", "),
        })
    }

    /// `Some` iff `dir` holds executable `initdb` and `postgres`.
    pub fn from_dir(dir: &Path) -> Option<Self> {
        let initdb = dir.join("initdb");
        let postgres = dir.join("postgres");
        if !is_executable(&initdb) || !is_executable(&postgres) {
            return None;
        }
        let opt = |name: &str| Some(dir.join(name)).filter(|p| is_executable(p));
        Some(Self {
            bindir: dir.to_path_buf(),
            initdb,
            postgres,
            pg_ctl: opt("pg_ctl"),
            psql: opt("psql"),
        })
    }

    /// Whether `pg_stat_statements.so` ships with this installation. We only preload it when it
    /// exists: a missing preload library makes the server refuse to start.
    fn has_pg_stat_statements(&self) -> bool {
        let mut libdirs: Vec<PathBuf> = Vec::new();
        // The installation's own pg_config first (Debian has one per version in the bindir);
        // the one on PATH only if it describes this same bindir.
        let own = self.bindir.join("pg_config");
        if is_executable(&own) {
            libdirs.extend(pg_config_value(&own, "--pkglibdir"));
        }
        let same_install = pg_config_value(Path::new("pg_config"), "--bindir")
            .and_then(|d| fs::canonicalize(d).ok())
            .zip(fs::canonicalize(&self.bindir).ok())
            .is_some_and(|(a, b)| a == b);
        if same_install {
            libdirs.extend(pg_config_value(Path::new("pg_config"), "--pkglibdir"));
        }
        if let Some(prefix) = self.bindir.parent() {
            libdirs.push(prefix.join("lib"));
            libdirs.push(prefix.join("lib").join("postgresql"));
            libdirs.push(prefix.join("lib64").join("pgsql"));
        }
        libdirs
            .iter()
            .any(|d| d.join("pg_stat_statements.so").is_file())
    }
}

fn is_executable(path: &Path) -> bool {
    fs::metadata(path)
        .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Runs `pg_config <flag>` and returns its single-line answer as a path.
fn pg_config_value(pg_config: &Path, flag: &str) -> Option<PathBuf> {
    let out = std::process::Command::new(pg_config)
        .arg(flag)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let line = String::from_utf8(out.stdout).ok()?;
    let line = line.trim();
    (!line.is_empty()).then(|| PathBuf::from(line))
}

/// `<root>/<version>/bin`, newest version first (numeric, so 9.6 < 10 < 15 < 16).
fn debian_bindirs(root: &Path) -> Vec<PathBuf> {
    let mut versions: Vec<(Vec<u64>, PathBuf)> = fs::read_dir(root)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let key = parse_version(name.to_str()?)?;
            Some((key, entry.path().join("bin")))
        })
        .collect();
    versions.sort_by(|a, b| b.0.cmp(&a.0));
    versions.into_iter().map(|(_, dir)| dir).collect()
}

fn parse_version(s: &str) -> Option<Vec<u64>> {
    s.split('.').map(|part| part.parse().ok()).collect()
}

// ---------------------------------------------------------------------------------------------
// Running as root: the postgres OS user
// ---------------------------------------------------------------------------------------------

/// Identity the server processes switch to (only when we are root).
#[derive(Debug, Clone)]
struct RunAs {
    uid: libc::uid_t,
    gid: libc::gid_t,
    groups: Vec<libc::gid_t>,
}

impl RunAs {
    /// `None` when not root (the server runs as us).
    fn for_current_process() -> Result<Option<Self>> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Ok(None);
        }
        lookup_user(OS_USER)
            .map_err(io_ctx(format!("looking up OS user {OS_USER:?}")))?
            .map(Some)
            .ok_or(EmbeddedPgError::NoPostgresUser)
    }

    /// Traditional owner/group/other search-permission check on `dir` (ACLs are not consulted).
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
fn chown_recursive(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
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
fn give_to(path: &Path, run_as: Option<&RunAs>) -> Result<()> {
    if let Some(r) = run_as {
        std::os::unix::fs::lchown(path, Some(r.uid), Some(r.gid))
            .map_err(io_ctx(format!("chown {}", path.display())))?;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Child setup (runs between fork and exec)
// ---------------------------------------------------------------------------------------------

/// Builds the `pre_exec` hook. Only async-signal-safe calls happen inside it: everything that
/// allocates (the group list) is computed before the fork.
fn child_setup(
    run_as: Option<RunAs>,
    own_group: bool,
    death_signal: bool,
) -> impl FnMut() -> io::Result<()> + Send + Sync + 'static {
    let parent = std::process::id() as libc::pid_t;
    move || {
        // SAFETY: plain syscalls on the child's own credentials/attributes.
        unsafe {
            if own_group && libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            if let Some(r) = &run_as {
                // Groups first, then gid, then uid: after setuid we could no longer change them.
                if libc::setgroups(r.groups.len(), r.groups.as_ptr()) != 0
                    || libc::setgid(r.gid) != 0
                    || libc::setuid(r.uid) != 0
                {
                    return Err(io::Error::last_os_error());
                }
            }
            if death_signal {
                // After setuid: the kernel clears the death signal on credential changes.
                if libc::prctl(
                    libc::PR_SET_PDEATHSIG,
                    libc::SIGINT as libc::c_ulong,
                    0,
                    0,
                    0,
                ) != 0
                {
                    return Err(io::Error::last_os_error());
                }
                // The parent may have died before prctl: then no signal will ever come.
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
        }
        Ok(())
    }
}

/// Environment a client-side tool might have set that would redirect the server or initdb.
const SCRUBBED_ENV: &[&str] = &[
    "PGDATA",
    "PGHOST",
    "PGHOSTADDR",
    "PGPORT",
    "PGUSER",
    "PGDATABASE",
    "PGOPTIONS",
    "PGPASSWORD",
];

struct SpawnRequest {
    cmd: std::process::Command,
    reply: tokio::sync::oneshot::Sender<io::Result<Child>>,
}

/// Forks `cmd` from the process-lifetime `queen-pg-spawner` thread (see the module docs for
/// why `PR_SET_PDEATHSIG` needs that).
async fn spawn_supervised(cmd: std::process::Command) -> io::Result<Child> {
    static SPAWNER: Mutex<Option<mpsc::Sender<SpawnRequest>>> = Mutex::new(None);
    let sender = {
        let mut guard = SPAWNER.lock().unwrap_or_else(|e| e.into_inner());
        if guard.is_none() {
            let (tx, rx) = mpsc::channel::<SpawnRequest>();
            std::thread::Builder::new()
                .name("queen-pg-spawner".into())
                .spawn(move || {
                    // Never ends: the sender lives in a static.
                    for mut req in rx {
                        if let Err(Ok(mut orphan)) = req.reply.send(req.cmd.spawn()) {
                            // The caller's future was dropped mid-start: nobody will ever
                            // supervise this server, so shut it down right away.
                            // SAFETY: kill(2) has no memory-safety preconditions.
                            unsafe { libc::kill(orphan.id() as libc::pid_t, libc::SIGINT) };
                            let _ = orphan.wait();
                        }
                    }
                })?;
            *guard = Some(tx);
        }
        guard.as_ref().cloned().expect("spawner sender set above")
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    let gone = || io::Error::other("queen-pg-spawner thread is gone");
    sender
        .send(SpawnRequest { cmd, reply })
        .map_err(|_| gone())?;
    answer.await.map_err(|_| gone())?
}

// ---------------------------------------------------------------------------------------------
// /proc helpers
// ---------------------------------------------------------------------------------------------

/// `(state, ppid)` from `/proc/<pid>/stat`; `comm` may contain spaces and parentheses, so parse
/// after the last `)`.
fn proc_stat(pid: i32) -> Option<(char, i32)> {
    let stat = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    Some((state, ppid))
}

/// Whether any process (zombies included) has this pid: what `kill(pid, 0)` would report.
fn pid_exists(pid: i32) -> bool {
    pid > 0 && Path::new(&format!("/proc/{pid}")).exists()
}

/// Alive and not a zombie: a zombie holds no shared memory and no data-dir lock.
fn pid_alive(pid: i32) -> bool {
    pid > 0 && matches!(proc_stat(pid), Some((state, _)) if state != 'Z' && state != 'X')
}

/// Whether `pid` is a postmaster serving `data_dir` (canonical). Guards against PID reuse: a
/// stale `postmaster.pid` may name a live process that is something else entirely, or another
/// cluster's postgres.
fn is_postmaster_of(pid: i32, data_dir: &Path) -> bool {
    let Some(cmdline) = live_postgres_cmdline(pid) else {
        return false;
    };
    let args: Vec<&[u8]> = cmdline
        .split(|b| *b == 0)
        .filter(|a| !a.is_empty())
        .collect();
    // The postmaster chdirs into its data directory: the most reliable witness.
    if let Ok(cwd) = fs::read_link(format!("/proc/{pid}/cwd")) {
        return cwd == data_dir;
    }
    // Not permitted to read cwd (another user): fall back to the `-D` argument.
    let same = |p: &[u8]| fs::canonicalize(OsStr::from_bytes(p)).is_ok_and(|p| p == data_dir);
    args.windows(2).any(|w| w[0] == b"-D" && same(w[1]))
        || args
            .iter()
            .any(|a| a.len() > 2 && a.starts_with(b"-D") && same(&a[2..]))
}

/// The raw `/proc/<pid>/cmdline` if `pid` is alive (not a zombie) and runs a PostgreSQL server
/// binary (`postgres`/`postmaster`).
fn live_postgres_cmdline(pid: i32) -> Option<Vec<u8>> {
    if !pid_alive(pid) {
        return None;
    }
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).ok()?;
    let argv0 = cmdline.split(|b| *b == 0).next()?;
    let base = argv0.rsplit(|b| *b == b'/').next().unwrap_or(argv0);
    (base.starts_with(b"postgres") || base.starts_with(b"postmaster")).then_some(cmdline)
}

/// Removes `<socket dir>/.s.PGSQL.<port>.lock` when it names a zombie or a non-PostgreSQL
/// process: like `postmaster.pid`, PostgreSQL refuses to start over such a file, and the dead
/// postmaster of a crash is often an unreaped zombie. A dead PID is left to PostgreSQL; a live
/// server is left alone (PostgreSQL then reports the conflict).
fn clear_stale_socket_lock(socket_dir: &Path, port: u16) -> Result<()> {
    let path = socket_dir.join(format!(".s.PGSQL.{port}.lock"));
    let Ok(Some(lock)) = read_pidfile(&path) else {
        return Ok(());
    };
    if lock.pid > 0 && (!pid_exists(lock.pid) || live_postgres_cmdline(lock.pid).is_some()) {
        return Ok(());
    }
    warn!(pid = lock.pid, path = %path.display(), "removing stale socket lock file");
    match fs::remove_file(&path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io_ctx(format!("removing {}", path.display()))(e)),
    }
}

/// All descendants of `root` (children, grandchildren, …) from one `/proc` scan.
fn descendants(root: i32) -> Vec<i32> {
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

/// `SIGKILL`s a postmaster and every process below it, as a power cut would. PostgreSQL makes
/// each child its own process group (setsid), so a group kill would miss them; we freeze the
/// postmaster first so it cannot fork while we collect its tree. Returns the pids signalled.
fn kill_tree(pid: i32) -> Vec<i32> {
    // SAFETY: kill(2) has no memory-safety preconditions.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    let deadline = Instant::now() + Duration::from_millis(200);
    while Instant::now() < deadline
        && !matches!(proc_stat(pid), Some(('T', _)) | Some(('Z', _)) | None)
    {
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut all = descendants(pid);
    for &p in &all {
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    unsafe { libc::kill(pid, libc::SIGKILL) };
    all.push(pid);
    all
}

/// Waits until none of `pids` is alive (zombies count as gone).
async fn wait_gone(pids: &[i32], timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if !pids.iter().any(|&p| pid_alive(p)) {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Polls a child we own until it exits (reaping it) or `timeout` passes.
async fn wait_child(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => return Some(status),
            Ok(None) => {}
            Err(e) => {
                warn!(error = %e, "waiting for embedded PostgreSQL failed");
                return None;
            }
        }
        if Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

// ---------------------------------------------------------------------------------------------
// postmaster.pid
// ---------------------------------------------------------------------------------------------

/// The fields of `postmaster.pid` we use (lines 1, 4, 5 and 8 of the file).
#[derive(Debug)]
struct PidFile {
    pid: i32,
    port: Option<u16>,
    socket_dir: Option<PathBuf>,
    status: String,
}

fn read_pidfile(path: &Path) -> io::Result<Option<PidFile>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let lines: Vec<&str> = text.lines().collect();
    let pid = lines
        .first()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or(0);
    Ok(Some(PidFile {
        pid,
        port: lines.get(3).and_then(|l| l.trim().parse().ok()),
        socket_dir: lines
            .get(4)
            .map(|l| l.trim())
            .filter(|l| !l.is_empty())
            .map(PathBuf::from),
        status: lines
            .get(7)
            .map(|l| l.trim().to_string())
            .unwrap_or_default(),
    }))
}

// ---------------------------------------------------------------------------------------------
// Data directory, socket directory, settings
// ---------------------------------------------------------------------------------------------

/// Creates `dir` if needed and returns its canonical path. As root: checks that the postgres
/// user can reach it and hands it over.
fn prepare_data_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<PathBuf> {
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
    // The server refuses a data directory readable by others; initdb sets 0700 but an operator
    // may have created the directory. Best effort: postgres reports it clearly if this fails.
    if let Ok(md) = fs::metadata(&abs) {
        if md.mode() & 0o027 != 0 {
            let _ = fs::set_permissions(&abs, fs::Permissions::from_mode(0o700));
        }
    }
    Ok(abs)
}

/// An exclusive `flock` on the data directory itself (no lock file: `initdb` wants `DIR`
/// empty, and a sibling file would litter the parent), released when dropped or when the
/// process dies. PostgreSQL does not flock its data directory, so there is no interference.
struct StartLock {
    _file: Option<File>,
}

impl StartLock {
    async fn acquire(data_dir: &Path, deadline: Instant) -> Result<Self> {
        let path = data_dir;
        let file = match File::open(path) {
            Ok(f) => f,
            Err(e) => {
                // Not ours to open (postgres reports ownership problems itself): go unlocked.
                debug!(path = %path.display(), error = %e, "no start lock");
                return Ok(Self { _file: None });
            }
        };
        let fd = std::os::unix::io::AsRawFd::as_raw_fd(&file);
        let mut announced = false;
        loop {
            // SAFETY: `fd` is an open descriptor owned by `file`.
            if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
                return Ok(Self { _file: Some(file) });
            }
            let err = io::Error::last_os_error();
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(io_ctx(format!("locking {}", path.display()))(err));
            }
            if Instant::now() >= deadline {
                return Err(io_ctx(format!(
                    "another process is starting PostgreSQL in {}",
                    data_dir.display()
                ))(io::Error::from(io::ErrorKind::TimedOut)));
            }
            if !announced {
                info!(path = %path.display(), "waiting for another start on this data directory");
                announced = true;
            }
            tokio::time::sleep(PROBE_EVERY).await;
        }
    }
}

/// Every existing ancestor of `dir` must be searchable by the server user (ancestors still to
/// be created will get default 0755 permissions).
fn check_reachable(dir: &Path, r: &RunAs) -> Result<()> {
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

/// Characters we accept verbatim in a socket directory. Anything else (commas and spaces split
/// `unix_socket_directories`, quotes need escaping, `%&#?` need URL encoding) sends us to the
/// short fallback directory instead of quoting everywhere.
fn socket_dir_char_ok(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-' | b'~')
}

fn socket_dir_usable(dir: &Path, port: u16) -> bool {
    let bytes = dir.as_os_str().as_bytes();
    let file = format!("/.s.PGSQL.{port}");
    bytes.len() + file.len() <= MAX_SOCKET_PATH && bytes.iter().all(|&b| socket_dir_char_ok(b))
}

/// `DIR` itself when the socket path fits, else `/tmp/queen-pg-<xxh3 of DIR>` (stable, so the
/// same data directory always gets the same socket directory).
fn choose_socket_dir(data_dir: &Path, port: u16) -> PathBuf {
    if socket_dir_usable(data_dir, port) {
        return data_dir.to_path_buf();
    }
    let hash = xxhash_rust::xxh3::xxh3_64(data_dir.as_os_str().as_bytes());
    PathBuf::from(format!("/tmp/queen-pg-{hash:016x}"))
}

/// Creates (0700) or validates the fallback socket directory in world-writable `/tmp`: it must
/// be a real directory owned by the server user, never a symlink planted by someone else.
fn prepare_socket_dir(dir: &Path, run_as: Option<&RunAs>) -> Result<()> {
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

/// ≈15 % of the memory we may use (the smaller of MemTotal and the cgroup limit), clamped to
/// [128 MB, 4 GB]: enough for the hot tables without starving the broker on a shared box.
fn default_shared_buffers_mb() -> u32 {
    let mem_kb = fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| parse_meminfo_total_kb(&s));
    let cgroup_kb = cgroup_memory_limit_bytes().map(|b| b / 1024);
    let kb = match (mem_kb, cgroup_kb) {
        (Some(m), Some(c)) => m.min(c),
        (m, c) => m.or(c).unwrap_or(0),
    };
    ((kb * 15 / 100 / 1024) as u32).clamp(128, 4096)
}

fn parse_meminfo_total_kb(meminfo: &str) -> Option<u64> {
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

fn cgroup_memory_limit_bytes() -> Option<u64> {
    [
        "/sys/fs/cgroup/memory.max",
        "/sys/fs/cgroup/memory/memory.limit_in_bytes",
    ]
    .iter()
    .find_map(|p| fs::read_to_string(p).ok())
    .and_then(|s| s.trim().parse::<u64>().ok()) // "max" (no limit) does not parse
    .filter(|&b| b < (1 << 60)) // cgroup v1 reports "no limit" as a huge number
}

/// A GUC string literal: single-quoted, quotes doubled.
fn quote_setting(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

fn check_setting_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'.');
    if ok {
        Ok(())
    } else {
        Err(EmbeddedPgError::InvalidSetting(name.to_string()))
    }
}

/// The settings appended to `postgresql.auto.conf` once (on PostgreSQL 15 `initdb -c` does not
/// exist). Durability is always on here; `unsafe_no_fsync` only overrides it per run.
fn render_settings(socket_dir: &Path, port: u16, shared_buffers_mb: u32, preload: bool) -> String {
    let mut s = String::from("# queen embedded defaults (written once at first start)\n");
    let mut set = |k: &str, v: &str| s.push_str(&format!("{k} = {}\n", quote_setting(v)));
    set("listen_addresses", "");
    set("unix_socket_directories", &socket_dir.to_string_lossy());
    set("port", &port.to_string());
    set("shared_buffers", &format!("{shared_buffers_mb}MB"));
    set("max_wal_size", "4GB");
    set("fsync", "on");
    set("synchronous_commit", "on");
    set("max_connections", "300");
    if preload {
        set("shared_preload_libraries", "pg_stat_statements");
    }
    set("log_min_messages", "warning");
    set("logging_collector", "off");
    s
}

fn write_settings_once(
    data_dir: &Path,
    socket_dir: &Path,
    opts: &EmbeddedOptions,
    bins: &PgBinaries,
    run_as: Option<&RunAs>,
) -> Result<()> {
    let marker = data_dir.join(SETTINGS_MARKER);
    if marker.exists() {
        return Ok(());
    }
    let shared_buffers = opts
        .shared_buffers_mb
        .unwrap_or_else(default_shared_buffers_mb);
    let preload = bins.has_pg_stat_statements();
    let text = render_settings(socket_dir, opts.port, shared_buffers, preload);
    let auto_conf = data_dir.join("postgresql.auto.conf");
    let mut f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&auto_conf)
        .map_err(io_ctx(format!("opening {}", auto_conf.display())))?;
    f.write_all(text.as_bytes())
        .and_then(|()| f.sync_all())
        .map_err(io_ctx(format!("writing {}", auto_conf.display())))?;
    give_to(&auto_conf, run_as)?;
    fs::write(
        &marker,
        "postgresql.auto.conf holds queen's first-run settings\n",
    )
    .map_err(io_ctx(format!("writing {}", marker.display())))?;
    give_to(&marker, run_as)?;
    info!(
        shared_buffers_mb = shared_buffers,
        pg_stat_statements = preload,
        "wrote embedded PostgreSQL settings"
    );
    Ok(())
}

async fn run_initdb(bins: &PgBinaries, data_dir: &Path, run_as: Option<&RunAs>) -> Result<()> {
    info!(bindir = %bins.bindir.display(), data_dir = %data_dir.display(), "initdb (first run)");
    let mut cmd = tokio::process::Command::new(&bins.initdb);
    cmd.arg("-D")
        .arg(data_dir)
        .args(["-U", SUPERUSER, "--auth=trust", "-E", "UTF8"])
        // C locale: always available (an unset or odd LANG cannot make initdb fail or clash
        // with UTF8) and byte-order collation, which is what a broker's keys want.
        .arg("--no-locale")
        .arg("--no-instructions")
        // The server user may not be able to enter our cwd (e.g. /root).
        .current_dir("/")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    for var in SCRUBBED_ENV {
        cmd.env_remove(var);
    }
    // SAFETY: the hook only performs async-signal-safe syscalls.
    unsafe { cmd.pre_exec(child_setup(run_as.cloned(), false, false)) };
    let out = cmd
        .output()
        .await
        .map_err(io_ctx(format!("running {}", bins.initdb.display())))?;
    if !out.status.success() {
        let mut output = String::from_utf8_lossy(&out.stdout).into_owned();
        output.push_str(&String::from_utf8_lossy(&out.stderr));
        return Err(EmbeddedPgError::Initdb {
            dir: data_dir.to_path_buf(),
            status: out.status.to_string(),
            output: tail_lines(&output, 40),
        });
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Log
// ---------------------------------------------------------------------------------------------

fn tail_lines(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(n)..].join("\n");
    if tail.trim().is_empty() {
        "(no output)".into()
    } else {
        tail
    }
}

/// The last lines the server wrote since byte `from` (this start only, not earlier runs).
fn log_tail(path: &Path, from: u64) -> String {
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

/// Opens the log for appending (rotating an oversized one); returns it and its current size.
fn open_log(path: &Path, run_as: Option<&RunAs>) -> Result<(File, u64)> {
    if fs::metadata(path).is_ok_and(|m| m.len() > LOG_ROTATE_BYTES) {
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

// ---------------------------------------------------------------------------------------------
// The running cluster
// ---------------------------------------------------------------------------------------------

/// A running private cluster. Dropping it without [`EmbeddedPg::stop`] sends the fast-shutdown
/// signal without waiting (and reaps the child on a short-lived thread).
#[derive(Debug)]
pub struct EmbeddedPg {
    opts: EmbeddedOptions,
    bins: PgBinaries,
    data_dir: PathBuf,
    socket_dir: PathBuf,
    port: u16,
    pid: i32,
    /// Our child while we supervise it and it has not been reaped.
    child: Option<Child>,
    supervised: bool,
    log_path: PathBuf,
}

/// Starts (or reuses) the cluster described by `opts` and returns once it accepts connections.
pub async fn start(opts: EmbeddedOptions) -> Result<EmbeddedPg> {
    let bins = PgBinaries::locate(opts.bindir.as_deref())?;
    for (name, _) in &opts.extra_settings {
        check_setting_name(name)?;
    }
    let run_as = RunAs::for_current_process()?;
    let run_as = run_as.as_ref();
    let deadline = Instant::now() + opts.start_timeout;
    let data_dir = prepare_data_dir(&opts.data_dir, run_as)?;
    // Held until we return: two brokers booting on one directory must not both run initdb or
    // both spawn a postmaster; the second one waits and then reuses the first one's server.
    let _start_lock = StartLock::acquire(&data_dir, deadline).await?;
    if !data_dir.join("PG_VERSION").exists() {
        run_initdb(&bins, &data_dir, run_as).await?;
    }
    let socket_dir = choose_socket_dir(&data_dir, opts.port);
    if socket_dir != data_dir {
        prepare_socket_dir(&socket_dir, run_as)?;
    }
    write_settings_once(&data_dir, &socket_dir, &opts, &bins, run_as)?;
    let log_path = data_dir.join(LOG_FILE);

    let pidfile_path = data_dir.join("postmaster.pid");
    let pidfile = read_pidfile(&pidfile_path)
        .map_err(io_ctx(format!("reading {}", pidfile_path.display())))?;
    if let Some(pf) = pidfile {
        if is_postmaster_of(pf.pid, &data_dir) {
            if pf.status != "stopping" {
                let sock = pf.socket_dir.clone().unwrap_or_else(|| socket_dir.clone());
                let port = pf.port.unwrap_or(opts.port);
                let cfg = client_config(&sock, port, "postgres");
                match probe_until(&cfg, deadline, || !pid_alive(pf.pid)).await {
                    Probe::Ready => {
                        info!(
                            pid = pf.pid,
                            data_dir = %data_dir.display(),
                            socket_dir = %sock.display(),
                            "reusing a running embedded PostgreSQL (not supervised by us)"
                        );
                        return Ok(EmbeddedPg {
                            opts,
                            bins,
                            data_dir,
                            socket_dir: sock,
                            port,
                            pid: pf.pid,
                            child: None,
                            supervised: false,
                            log_path,
                        });
                    }
                    Probe::Stopped => {}
                    Probe::TimedOut(last_error) => {
                        return Err(EmbeddedPgError::StartTimeout {
                            socket: sock,
                            timeout: opts.start_timeout,
                            last_error: format!(
                                "a running postgres (pid {}) owns this directory: {last_error}",
                                pf.pid
                            ),
                            tail: log_tail(&log_path, 0),
                            log: log_path,
                        });
                    }
                }
            }
            // A server in shutdown (e.g. one we just dropped): let it finish, then start anew.
            let remaining = deadline.saturating_duration_since(Instant::now());
            if !wait_gone(&[pf.pid], remaining).await {
                return Err(EmbeddedPgError::StartTimeout {
                    socket: socket_dir,
                    timeout: opts.start_timeout,
                    last_error: format!("postgres pid {} is still shutting down", pf.pid),
                    tail: log_tail(&log_path, 0),
                    log: log_path,
                });
            }
        }
        if pf.pid > 0 && !pid_exists(pf.pid) {
            // Dead server (a crash): PostgreSQL replaces such a file itself, after checking that
            // no orphaned backend still uses the old shared memory (the key is in the file), a
            // check we would throw away by deleting it.
            info!(
                pid = pf.pid,
                "stale postmaster.pid (server gone); PostgreSQL will replace it"
            );
        } else if pidfile_path.exists() {
            // Bogus content, a zombie, or a PID now used by an unrelated process: PostgreSQL
            // would refuse to start ("lock file already exists"), so the file must go. Orphaned
            // backends are still detected: PostgreSQL 12+ probes the shared memory key derived
            // from the data directory's inode.
            warn!(pid = pf.pid, path = %pidfile_path.display(), "removing stale postmaster.pid");
            match fs::remove_file(&pidfile_path) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_ctx(format!("removing {}", pidfile_path.display()))(e)),
            }
        }
    }

    let mut pg = EmbeddedPg {
        opts,
        bins,
        data_dir,
        socket_dir,
        port: 0,
        pid: 0,
        child: None,
        supervised: true,
        log_path,
    };
    pg.port = pg.opts.port;
    pg.launch(run_as, deadline).await?;
    Ok(pg)
}

/// Outcome of waiting for a server to accept connections.
enum Probe {
    Ready,
    /// The server process went away.
    Stopped,
    TimedOut(String),
}

/// Tries to connect every [`PROBE_EVERY`] until it works, `stopped()` says the server is gone,
/// or `deadline` passes. "Starting up" / "in recovery" answers simply count as not yet.
async fn probe_until(
    cfg: &tokio_postgres::Config,
    deadline: Instant,
    mut stopped: impl FnMut() -> bool,
) -> Probe {
    loop {
        if stopped() {
            return Probe::Stopped;
        }
        match cfg.connect(tokio_postgres::NoTls).await {
            Ok((client, conn)) => {
                drop(client);
                drop(conn);
                return Probe::Ready;
            }
            Err(e) if Instant::now() >= deadline => return Probe::TimedOut(e.to_string()),
            Err(_) => {}
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
}

fn client_config(socket_dir: &Path, port: u16, dbname: &str) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host_path(socket_dir)
        .port(port)
        .user(SUPERUSER)
        .dbname(dbname)
        .connect_timeout(Duration::from_secs(5));
    cfg
}

/// Percent-encodes everything but RFC 3986 unreserved characters and `/`.
fn url_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl EmbeddedPg {
    /// Same as the free function [`start`].
    pub async fn start(opts: EmbeddedOptions) -> Result<EmbeddedPg> {
        start(opts).await
    }

    /// Spawns the postmaster and waits for readiness; retries while backends of a killed
    /// predecessor still hold its shared memory.
    async fn launch(&mut self, run_as: Option<&RunAs>, deadline: Instant) -> Result<()> {
        let cfg = client_config(&self.socket_dir, self.port, "postgres");
        loop {
            clear_stale_socket_lock(&self.socket_dir, self.port)?;
            let (log, log_start) = open_log(&self.log_path, run_as)?;
            let log_err = log
                .try_clone()
                .map_err(io_ctx(format!("duplicating {}", self.log_path.display())))?;
            let cmd = self.postgres_command(run_as, log, log_err);
            let child = spawn_supervised(cmd)
                .await
                .map_err(io_ctx(format!("starting {}", self.bins.postgres.display())))?;
            self.pid = child.id() as i32;
            self.child = Some(child);
            debug!(pid = self.pid, "postgres spawned, waiting for readiness");

            let mut exited: Option<ExitStatus> = None;
            let probe = {
                let child = self.child.as_mut().expect("child set above");
                probe_until(&cfg, deadline, || match child.try_wait() {
                    Ok(Some(status)) => {
                        exited = Some(status);
                        true
                    }
                    Ok(None) => false,
                    Err(_) => true,
                })
                .await
            };
            match probe {
                Probe::Ready => {
                    info!(
                        bindir = %self.bins.bindir.display(),
                        data_dir = %self.data_dir.display(),
                        socket_dir = %self.socket_dir.display(),
                        pid = self.pid,
                        "embedded PostgreSQL ready"
                    );
                    return Ok(());
                }
                Probe::Stopped => {
                    self.child = None;
                    let tail = log_tail(&self.log_path, log_start);
                    if tail.contains(SHMEM_IN_USE) && Instant::now() < deadline {
                        warn!("old PostgreSQL processes still hold shared memory; retrying");
                        tokio::time::sleep(Duration::from_millis(250)).await;
                        continue;
                    }
                    return Err(EmbeddedPgError::ExitedEarly {
                        status: exited.map_or_else(|| "unknown".into(), |s| s.to_string()),
                        log: self.log_path.clone(),
                        tail,
                    });
                }
                Probe::TimedOut(last_error) => {
                    // Do not leave a half-started server behind.
                    self.shutdown(Duration::from_secs(5)).await;
                    return Err(EmbeddedPgError::StartTimeout {
                        socket: self.socket_dir.clone(),
                        timeout: self.opts.start_timeout,
                        last_error,
                        log: self.log_path.clone(),
                        tail: log_tail(&self.log_path, log_start),
                    });
                }
            }
        }
    }

    fn postgres_command(
        &self,
        run_as: Option<&RunAs>,
        log: File,
        log_err: File,
    ) -> std::process::Command {
        let mut cmd = std::process::Command::new(&self.bins.postgres);
        let mut set = |k: &str, v: &str| {
            cmd.arg("-c").arg(format!("{k}={v}"));
        };
        // Forced on every start, so they hold even if the first-run settings were never
        // written (a crash right after initdb) and when the socket directory moved.
        set("listen_addresses", "");
        set(
            "unix_socket_directories",
            &self.socket_dir.to_string_lossy(),
        );
        set("port", &self.port.to_string());
        if let Some(mb) = self.opts.shared_buffers_mb {
            set("shared_buffers", &format!("{mb}MB"));
        }
        if self.opts.unsafe_no_fsync {
            set("fsync", "off");
            set("synchronous_commit", "off");
            set("full_page_writes", "off");
        }
        for (k, v) in &self.opts.extra_settings {
            set(k, v);
        }
        cmd.arg("-D").arg(&self.data_dir);
        cmd.current_dir("/")
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log_err));
        for var in SCRUBBED_ENV {
            cmd.env_remove(var);
        }
        // SAFETY: the hook only performs async-signal-safe syscalls.
        unsafe { cmd.pre_exec(child_setup(run_as.cloned(), true, true)) };
        cmd
    }

    /// Fast shutdown of a supervised server: `SIGINT`, wait up to `timeout`, then `SIGKILL` the
    /// whole tree. No-op when not supervised or already gone.
    async fn shutdown(&mut self, timeout: Duration) {
        let Some(mut child) = self.child.take() else {
            if !self.supervised && pid_alive(self.pid) {
                info!(
                    pid = self.pid,
                    "leaving reused PostgreSQL running (not ours)"
                );
            }
            return;
        };
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGINT) };
        if let Some(status) = wait_child(&mut child, timeout).await {
            info!(pid = self.pid, %status, "embedded PostgreSQL stopped");
            return;
        }
        warn!(
            pid = self.pid,
            ?timeout,
            "PostgreSQL did not stop in time; killing it"
        );
        let pids = kill_tree(self.pid);
        wait_child(&mut child, Duration::from_secs(5)).await;
        wait_gone(&pids, Duration::from_secs(10)).await;
    }

    /// Fast shutdown (`SIGINT` to the postmaster), waits up to 30 s, then `SIGKILL`. A reused
    /// server that we do not supervise is left running.
    pub async fn stop(mut self) {
        self.shutdown(STOP_TIMEOUT).await;
    }

    /// Crash simulation: `SIGKILL`s the postmaster and all its processes at once and waits for
    /// them to be gone. `postmaster.pid` stays behind, as after a real crash; [`restart`]
    /// (or [`start`]) then goes through stale-pid handling and crash recovery. Works on a reused
    /// server too (an explicit request).
    ///
    /// [`restart`]: EmbeddedPg::restart
    pub async fn kill9(&mut self) {
        if !pid_alive(self.pid) {
            self.child = None;
            return;
        }
        warn!(
            pid = self.pid,
            "SIGKILL to embedded PostgreSQL (crash simulation)"
        );
        let pids = kill_tree(self.pid);
        if let Some(mut child) = self.child.take() {
            wait_child(&mut child, Duration::from_secs(10)).await;
        }
        if !wait_gone(&pids, Duration::from_secs(10)).await {
            warn!("some PostgreSQL processes survived SIGKILL for 10 s");
        }
    }

    /// Stops the server if we supervise it (no-op after [`EmbeddedPg::kill9`]) and starts it
    /// again with the same options. A reused server is not ours to stop, so it is simply
    /// reused again.
    pub async fn restart(&mut self) -> Result<()> {
        self.shutdown(STOP_TIMEOUT).await;
        let fresh = start(self.opts.clone()).await?;
        *self = fresh;
        Ok(())
    }

    /// Directory holding the socket file `.s.PGSQL.<port>`.
    pub fn socket_dir(&self) -> &Path {
        &self.socket_dir
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Canonical data directory.
    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// Postmaster pid.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    pub fn binaries(&self) -> &PgBinaries {
        &self.bins
    }

    /// The server log (`DIR/postgres.log`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// True if we started this server (stop/drop shut it down); false if we reused one.
    pub fn is_supervised(&self) -> bool {
        self.supervised
    }

    /// Whether the postmaster process is alive.
    pub fn is_running(&self) -> bool {
        pid_alive(self.pid)
    }

    /// Client configuration: socket directory as host, superuser `postgres`, trust auth.
    pub fn config(&self, dbname: &str) -> tokio_postgres::Config {
        client_config(&self.socket_dir, self.port, dbname)
    }

    /// libpq-style URL, e.g. `postgresql://postgres@/postgres?host=/abs/dir` (`&port=` only
    /// when not 5432). Parsed by tokio-postgres, deadpool and psql alike.
    pub fn url(&self, dbname: &str) -> String {
        let mut url = format!(
            "postgresql://{SUPERUSER}@/{}?host={}",
            url_encode(dbname),
            url_encode(&self.socket_dir.to_string_lossy())
        );
        if self.port != DEFAULT_PORT {
            url.push_str(&format!("&port={}", self.port));
        }
        url
    }

    /// Connects to `dbname`, driving the connection on a spawned task.
    pub async fn connect(&self, dbname: &str) -> Result<tokio_postgres::Client> {
        let (client, conn) = self.config(dbname).connect(tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                debug!(error = %e, "embedded PostgreSQL connection ended");
            }
        });
        Ok(client)
    }

    /// `CREATE DATABASE "<name>"`; fails if it exists (the test harness wants a fresh one).
    pub async fn create_database(&self, name: &str) -> Result<()> {
        let client = self.connect("postgres").await?;
        client
            .batch_execute(&format!("CREATE DATABASE {}", quote_ident(name)))
            .await?;
        Ok(())
    }

    /// Creates `name` unless it exists; returns whether it was created (for `queen serve`).
    pub async fn ensure_database(&self, name: &str) -> Result<bool> {
        match self.create_database(name).await {
            Ok(()) => Ok(true),
            Err(EmbeddedPgError::Postgres(e))
                if e.code() == Some(&tokio_postgres::error::SqlState::DUPLICATE_DATABASE) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl Drop for EmbeddedPg {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        if !matches!(child.try_wait(), Ok(None)) {
            return;
        }
        // Best effort, non-blocking: fast shutdown finishes on its own. A helper thread reaps
        // the child so it does not linger as a zombie.
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe { libc::kill(self.pid, libc::SIGINT) };
        let _ = std::thread::Builder::new()
            .name("queen-pg-reaper".into())
            .spawn(move || {
                let _ = child.wait();
            });
    }
}

impl fmt::Display for PgBinaries {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.bindir.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_numerically() {
        assert!(parse_version("16").unwrap() > parse_version("9.6").unwrap());
        assert!(parse_version("10").unwrap() > parse_version("9.6").unwrap());
        assert_eq!(parse_version("main"), None);
    }

    #[test]
    fn a_dir_without_postgres_is_rejected() {
        let dir = std::env::temp_dir().join(format!("queen-pgbin-test-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let initdb = dir.join("initdb");
        fs::write(&initdb, "#!/bin/sh\n").unwrap();
        fs::set_permissions(&initdb, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(PgBinaries::from_dir(&dir).is_none());
        let _ = fs::remove_dir_all(&dir);
    }

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

    #[test]
    fn meminfo_and_quoting() {
        let m = "MemTotal:       24683712 kB\nMemFree: 1 kB\n";
        assert_eq!(parse_meminfo_total_kb(m), Some(24683712));
        assert_eq!(quote_setting("it's"), "'it''s'");
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(url_encode("/tmp/a b"), "/tmp/a%20b");
        let mb = default_shared_buffers_mb();
        assert!((128..=4096).contains(&mb));
    }

    #[test]
    fn not_found_message_says_what_to_install() {
        let e = EmbeddedPgError::BinariesNotFound {
            searched: "/usr/bin".into(),
        };
        let s = e.to_string();
        assert!(s.contains("apt-get install postgresql-15"), "{s}");
        assert!(s.contains("PG_BINDIR") && s.contains("DATABASE_URL"), "{s}");
    }
}
