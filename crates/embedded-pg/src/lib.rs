//! The private PostgreSQL launcher: the "embedded default" of docs/design.md decision 6 and
//! docs/engine.md §12.4. A crate of its own that knows nothing of the broker, so the broker,
//! its test harness and the tools (queen-chaos) share one launcher. This file owns the public
//! API (options, the [`EmbeddedPgError`] type, [`start`], the [`EmbeddedPg`] handle) and the
//! start sequence; the submodules own the steps.
//!
//! A cluster belongs to one broker (or one integration-test binary): we find the server
//! binaries, `initdb` on first run, write our settings once, and run `postgres -D DIR` as a
//! supervised child listening on a Unix socket only. A live server found through
//! `postmaster.pid` was started by someone else (another broker on the directory, an operator):
//! it is reused but never stopped by us ([`EmbeddedPg::is_supervised`] is false).
//! [`EmbeddedPg::supervise`] keeps the server running for the broker's life: a server that
//! dies is reaped and started again (supervisor.rs).
//!
//! Connection pooling, schema and broker configuration are not ours: callers get a socket
//! directory, a port, a [`tokio_postgres::Config`] or a URL.

mod binaries;
mod client;
mod dirs;
mod locks;
mod probe;
mod process;
mod procfs;
mod run_as;
mod server_log;
mod settings;
mod supervisor;

use std::io;
use std::path::{Path, PathBuf};
use std::process::Child;
use std::time::{Duration, Instant};

pub use binaries::PgBinaries;
pub use supervisor::Supervisor;

use locks::StartLock;
use run_as::RunAs;

/// With `listen_addresses = ''` the port only names the socket file (`.s.PGSQL.5432`), so
/// clusters in different socket directories never collide on it.
pub const DEFAULT_PORT: u16 = 5432;
/// Database superuser created by `initdb -U`.
pub const SUPERUSER: &str = "postgres";

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

/// `map_err` adapter that names what we were doing when an I/O call failed.
fn io_ctx(context: impl Into<String>) -> impl FnOnce(io::Error) -> EmbeddedPgError {
    let context = context.into();
    move |source| EmbeddedPgError::Io { context, source }
}

/// What to launch. Only `data_dir` is required; [`EmbeddedOptions::new`] fills the rest.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The cluster directory (`DIR`). Created if missing; made absolute and canonical.
    pub data_dir: PathBuf,
    /// `shared_buffers` in MB. `None`: ≈15 % of RAM (cgroup aware), written once at `initdb`
    /// time. `Some`: also forced on every start, so a test harness gets it even on a reused
    /// directory. Tests should use 128.
    pub shared_buffers_mb: Option<u32>,
    /// `fsync`, `synchronous_commit` and `full_page_writes` off for this run (`--dev-unsafe`).
    /// Never persisted: the on-disk defaults stay durable.
    pub unsafe_no_fsync: bool,
    /// Extra `name = value` settings, passed as `-c name=value` on every start (not persisted).
    pub extra_settings: Vec<(String, String)>,
    /// Only names the socket file, since TCP is off.
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
}

/// A running private cluster. Dropping it without [`EmbeddedPg::stop`] sends the fast-shutdown
/// signal without waiting.
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
        settings::check_setting_name(name)?;
    }
    let run_as = RunAs::for_current_process()?;
    let run_as = run_as.as_ref();
    let deadline = Instant::now() + opts.start_timeout;
    let data_dir = dirs::prepare_data_dir(&opts.data_dir, run_as)?;
    // Held until we return: two brokers booting on one directory must not both run initdb or
    // both spawn a postmaster; the second one waits and then reuses the first one's server.
    let _start_lock = StartLock::acquire(&data_dir, deadline).await?;
    if !data_dir.join("PG_VERSION").exists() {
        process::run_initdb(&bins, &data_dir, run_as).await?;
    }
    let socket_dir = dirs::choose_socket_dir(&data_dir, opts.port);
    if socket_dir != data_dir {
        dirs::prepare_socket_dir(&socket_dir, run_as)?;
    }
    settings::write_once(&data_dir, &socket_dir, &opts, &bins, run_as)?;

    let mut pg = EmbeddedPg {
        port: opts.port,
        log_path: data_dir.join(server_log::FILE_NAME),
        opts,
        bins,
        data_dir,
        socket_dir,
        pid: 0,
        child: None,
        supervised: true,
    };
    if pg.reuse_live_server(deadline).await? {
        return Ok(pg);
    }
    pg.launch(run_as, deadline).await?;
    Ok(pg)
}

impl EmbeddedPg {
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

    /// The server log (`DIR/postgres.log`).
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }

    /// True if we started this server (stop/drop shut it down); false if we reused one.
    pub fn is_supervised(&self) -> bool {
        self.supervised
    }

    /// The error for a server that did not become ready, quoting its log from `log_from`.
    fn start_timeout_error(
        &self,
        socket: PathBuf,
        last_error: String,
        log_from: u64,
    ) -> EmbeddedPgError {
        EmbeddedPgError::StartTimeout {
            socket,
            timeout: self.opts.start_timeout,
            last_error,
            log: self.log_path.clone(),
            tail: server_log::tail(&self.log_path, log_from),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
