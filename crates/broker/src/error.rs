//! The broker's error type, shared by every floor: what the caller sent wrong, what was not
//! found, what went wrong inside, and whether the database could be reached. It knows nothing
//! of HTTP; `http/error.rs` maps it to statuses and bodies, once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Malformed or invalid request: 400 `{"error"}`.
    #[error("{0}")]
    BadRequest(String),
    /// An invalid option value on /configure: 400 `{"error","invalid"}`.
    #[error("{message}")]
    InvalidOption { message: String, option: String },
    #[error("{0}")]
    NotFound(String),
    /// The request is valid but the state it meets refuses it (a replay into a full queue):
    /// 409 `{"error"}`.
    #[error("{0}")]
    Conflict(String),
    /// No usable credentials (missing, malformed, expired or badly signed token): 401.
    #[error("{0}")]
    Unauthenticated(String),
    /// Valid credentials whose role does not allow the route: 403.
    #[error("{0}")]
    Forbidden(String),
    #[error("request body exceeds the limit of {0} bytes")]
    PayloadTooLarge(usize),
    /// The request body did not arrive within the configured time: 408.
    #[error("request body not received within {0} ms")]
    BodyTimeout(u64),
    /// A compressed body announcing more than the body limit once inflated: 413.
    #[error("decompressed request body exceeds the limit of {0} bytes")]
    DecompressedTooLarge(usize),
    #[error("database unavailable: {0}")]
    Pool(#[from] deadpool_postgres::PoolError),
    /// A statement PostgreSQL failed (made only through `From`, which notes a server refusing
    /// writes, see [`writes_refused_after`]).
    #[error("database error: {0}")]
    Db(#[source] tokio_postgres::Error),
    /// The database could not be reached and nothing was stored: 503 with `Retry-After`.
    #[error("database unavailable: {0}")]
    Unavailable(String),
    /// The broker cannot take this request now, though the database may be fine (push
    /// maintenance with the spool off, a full spool): 503 with `Retry-After`.
    #[error("{0}")]
    TryLater(String),
    /// The broker is too far behind to take this request within its budget; nothing was
    /// read or done: 429 with `Retry-After`.
    #[error("{message}")]
    Overloaded {
        message: String,
        retry_after_secs: u64,
    },
    #[error("{0}")]
    Internal(String),
}

impl Error {
    pub fn bad(msg: impl Into<String>) -> Self {
        Error::BadRequest(msg.into())
    }

    pub fn internal(msg: impl Into<String>) -> Self {
        Error::Internal(msg.into())
    }

    /// This error and every source under it, `": "`-joined. `tokio_postgres::Error` says only
    /// "db error" itself; PostgreSQL's message and detail live in its source.
    pub fn chain(&self) -> String {
        let mut out = self.to_string();
        let mut src = std::error::Error::source(self);
        while let Some(s) = src {
            let text = s.to_string();
            if !out.ends_with(&text) {
                out.push_str(": ");
                out.push_str(&text);
            }
            src = s.source();
        }
        out
    }

    /// The SQLSTATE of a database error, when PostgreSQL reported one.
    pub fn sqlstate(&self) -> Option<&str> {
        match self {
            Error::Db(e) => e.code().map(|c| c.code()),
            _ => None,
        }
    }

    /// Whether the failure is the database being unreachable (an outage, a restart), not a
    /// refusal of what was asked: nothing was done, and the same request works once it is back.
    pub fn is_unavailable(&self) -> bool {
        match self {
            Error::Pool(_) | Error::Unavailable(_) => true,
            Error::Db(e) => connection_lost(e),
            _ => false,
        }
    }
}

/// A connection that broke or could not be made, or a server that cannot take writes now: the
/// connection is closed, an I/O error, or a SQLSTATE [`unavailable_sqlstate`] names.
fn connection_lost(e: &tokio_postgres::Error) -> bool {
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return unavailable_sqlstate(code.code());
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// Whether a SQLSTATE says the database is unavailable rather than refusing the request
/// (docs/engine.md §12.5 tables every SQLSTATE the broker classifies): class 08 (connection
/// exception), 57P01/57P02/57P03 (the server shutting down, crashing, or starting up / in
/// recovery) and 25006 (a read-only transaction: a standby, or a primary being demoted or
/// put in read-only mode). The same request works once a writable primary takes it.
pub fn unavailable_sqlstate(code: &str) -> bool {
    code.starts_with("08") || matches!(code, "25006" | "57P01" | "57P02" | "57P03")
}

impl From<tokio_postgres::Error> for Error {
    fn from(e: tokio_postgres::Error) -> Self {
        if e.code() == Some(&tokio_postgres::error::SqlState::READ_ONLY_SQL_TRANSACTION) {
            note_writes_refused();
        }
        Error::Db(e)
    }
}

/// When a server last refused a write as read-only (25006), in microseconds since [`epoch`]
/// (0: never). The pool retires every connection made before it (`store/server.rs`): a
/// session that met a read-only server keeps reaching it, while a new connection finds the
/// writable primary (`target_session_attrs=read-write`) or a server made writable again
/// (`ALTER DATABASE … SET default_transaction_read_only` binds a session at its start).
static WRITES_REFUSED_AT: AtomicU64 = AtomicU64::new(0);

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn note_writes_refused() {
    let micros = u64::try_from(epoch().elapsed().as_micros()).unwrap_or(u64::MAX);
    WRITES_REFUSED_AT.fetch_max(micros.max(1), Ordering::Relaxed);
}

/// Whether a server refused a write as read-only at or after `made` (a connection's birth).
pub fn writes_refused_after(made: Instant) -> bool {
    match WRITES_REFUSED_AT.load(Ordering::Relaxed) {
        0 => false,
        at => {
            let made = made.saturating_duration_since(epoch()).as_micros();
            u128::from(at) >= made
        }
    }
}

impl From<queen_proto::NameError> for Error {
    fn from(e: queen_proto::NameError) -> Self {
        Error::BadRequest(e.to_string())
    }
}
