//! How a database failure is told to people: PostgreSQL's own message (which tokio-postgres
//! hides behind "db error"), for logs and for the per-item errors of acks and pushes; and the
//! one refusal two callers read, `QENC`.

use crate::error::Error;

/// The server's own message of a database error: `SQLSTATE: message`.
pub fn db_message(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("{}: {}", db.code().code(), db.message()),
        None => e.to_string(),
    }
}

/// The text an item (or a log line) reports for `e`: a database error carries the server's
/// own message, which the error's display hides.
pub fn failure_text(e: &Error) -> String {
    match e {
        Error::Db(db) => format!("database error: {}", db_message(db)),
        other => other.to_string(),
    }
}

/// The queue of a `QENC` refusal (plaintext for a queue that encrypts: seal and call again),
/// if that is what `e` is; the SQL puts the stored queue name in the error's detail.
pub fn must_seal(e: &tokio_postgres::Error) -> Option<String> {
    let db = e.as_db_error()?;
    db.message()
        .starts_with("QENC ")
        .then(|| db.detail().unwrap_or_default().to_string())
}
