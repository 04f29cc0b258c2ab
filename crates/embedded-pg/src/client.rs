//! How clients reach the cluster: `tokio_postgres::Config`, libpq-style URL, a connected
//! client, and database creation for `queen serve` and the test harness.

use std::path::Path;
use std::time::Duration;

use tracing::debug;

use super::{EmbeddedPg, EmbeddedPgError, Result, DEFAULT_PORT, SUPERUSER};

/// Socket directory as host, superuser, trust auth (set by `initdb --auth=trust`).
pub(super) fn client_config(socket_dir: &Path, port: u16, dbname: &str) -> tokio_postgres::Config {
    let mut cfg = tokio_postgres::Config::new();
    cfg.host_path(socket_dir)
        .port(port)
        .user(SUPERUSER)
        .dbname(dbname)
        .connect_timeout(Duration::from_secs(5));
    cfg
}

impl EmbeddedPg {
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

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identifiers_and_urls_are_escaped() {
        assert_eq!(quote_ident("a\"b"), "\"a\"\"b\"");
        assert_eq!(url_encode("/tmp/a b"), "/tmp/a%20b");
    }
}
