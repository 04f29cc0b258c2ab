//! The broker's one typed configuration: every flag is also an environment variable,
//! read once at boot and echoed (secrets masked).

use std::path::PathBuf;

use clap::Args;

/// Parses the boolean spellings operators use (`true/false`, `1/0`, `yes/no`, `on/off`);
/// anything else is a boot error rather than a silent default.
fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "yes" | "on" => Ok(true),
        "false" | "0" | "no" | "off" => Ok(false),
        other => Err(format!(
            "not a boolean: {other:?} (use true/false, 1/0, yes/no, on/off)"
        )),
    }
}

/// Options of `queen serve` (its help text describes the embedded PostgreSQL default).
#[derive(Args, Debug, Clone)]
pub struct Config {
    /// HTTP port.
    #[arg(long, env = "PORT", default_value_t = 6632)]
    pub port: u16,
    /// HTTP bind address.
    #[arg(long, env = "HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// External PostgreSQL URL (e.g. postgresql://user:pass@host:5432/db). Unset, and no
    /// PG_HOST either: the embedded PostgreSQL is used.
    #[arg(long, env = "DATABASE_URL")]
    pub database_url: Option<String>,
    /// External PostgreSQL host (alternative to DATABASE_URL).
    #[arg(long, env = "PG_HOST")]
    pub pg_host: Option<String>,
    /// External PostgreSQL port.
    #[arg(long, env = "PG_PORT", default_value_t = 5432)]
    pub pg_port: u16,
    /// External PostgreSQL user.
    #[arg(long, env = "PG_USER", default_value = "postgres")]
    pub pg_user: String,
    /// External PostgreSQL password (masked in the boot log).
    #[arg(long, env = "PG_PASSWORD")]
    pub pg_password: Option<String>,
    /// External PostgreSQL database.
    #[arg(long, env = "PG_DB", default_value = "postgres")]
    pub pg_db: String,
    /// Pooled PostgreSQL connections (created lazily).
    #[arg(long, env = "DB_POOL_SIZE", default_value_t = 160)]
    pub db_pool_size: usize,
    /// Data directory; the embedded cluster lives in `<dir>/pg`.
    #[arg(long, env = "QUEEN_DATA_DIR", default_value = "./queen-data")]
    pub data_dir: PathBuf,
    /// Log filter (error, warn, info, debug, trace or a tracing directive).
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    pub log_level: String,
    /// Request body limit in bytes (413 above it).
    #[arg(long, env = "QUEEN_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Milliseconds a request head (request line and headers) may take to arrive, from its
    /// first byte; past it the connection is closed.
    #[arg(long, env = "QUEEN_HEADER_READ_TIMEOUT_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,
    /// Milliseconds a request may take to deliver its whole body; past it the request gets
    /// 408 and the connection is closed.
    #[arg(long, env = "QUEEN_BODY_READ_TIMEOUT_MS", default_value_t = 60_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_ms: u64,
    /// Milliseconds a connection may stay open with no request in progress and no new one
    /// begun (after it connects, and between keep-alive requests) before the broker closes
    /// it. A long-poll in progress is a request in progress.
    #[arg(long, env = "QUEEN_IDLE_TIMEOUT_MS", default_value_t = 120_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,
    /// Most client connections served at once; further connections wait in the listen
    /// backlog until one closes.
    #[arg(long, env = "QUEEN_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Apply the SQL schema files at boot.
    #[arg(long, env = "QUEEN_APPLY_SCHEMA", default_value = "true", value_parser = parse_bool)]
    pub apply_schema: bool,
    /// Statement timeout of broker SQL calls, in ms.
    #[arg(long, env = "QUEEN_STMT_TIMEOUT_MS", default_value_t = 30_000)]
    pub stmt_timeout_ms: u64,
    /// zstd level of segment blobs.
    #[arg(long, env = "QUEEN_V2_ZSTD_LEVEL", default_value_t = 3)]
    pub zstd_level: i32,
    /// Long-poll deadline (ms) when a pop sends no timeout.
    #[arg(long, env = "DEFAULT_TIMEOUT", default_value_t = 30_000)]
    pub default_timeout_ms: u64,
    /// Long-poll re-check interval for the first attempts (ms).
    #[arg(long, env = "POP_WAIT_INITIAL_INTERVAL_MS", default_value_t = 100)]
    pub pop_wait_initial_ms: u64,
    /// Attempts at the initial interval before backing off.
    #[arg(long, env = "POP_WAIT_BACKOFF_THRESHOLD", default_value_t = 3)]
    pub pop_wait_backoff_threshold: u32,
    /// Growth factor of the re-check interval after the threshold.
    #[arg(long, env = "POP_WAIT_BACKOFF_MULTIPLIER", default_value_t = 2.0)]
    pub pop_wait_backoff_multiplier: f64,
    /// Ceiling of the long-poll re-check interval (ms).
    #[arg(long, env = "POP_WAIT_MAX_INTERVAL_MS", default_value_t = 1000)]
    pub pop_wait_max_ms: u64,
    /// Cheap has-pending probe before a pop takes a connection-heavy path.
    #[arg(long, env = "QUEEN_POP_PENDING_GATE", default_value = "true", value_parser = parse_bool)]
    pub pop_pending_gate: bool,
    /// Wake long-polls of other brokers sharing the database (LISTEN/NOTIFY). Always off
    /// with the embedded PostgreSQL, which serves one broker by construction.
    #[arg(long, env = "QUEEN_PEER_WAKE", default_value = "false", value_parser = parse_bool)]
    pub peer_wake: bool,
    /// Broker-side dedup cache (docs/engine.md §4.2): pushes vouch for their transactionIds so
    /// PostgreSQL probes only the tail of the dedup window. Off: every push probes the window.
    #[arg(long, env = "QUEEN_DEDUP_CACHE", default_value = "true", value_parser = parse_bool)]
    pub dedup_cache: bool,
    /// Memory budget of the dedup cache in MiB (about 16 × msg/s × window_s / 10⁶); least
    /// recently used partitions are evicted beyond it.
    #[arg(long, env = "QUEEN_DEDUP_CACHE_MB", default_value_t = 512)]
    pub dedup_cache_mb: usize,
    /// Ack registry (docs/engine.md §6.4): remember what this broker's leasing pops delivered,
    /// so an ack of exactly that batch, all completed, is one positional cursor advance
    /// instead of a hash resolution. Off: every ack resolves by hash.
    #[arg(long, env = "QUEEN_ACK_REGISTRY", default_value = "true", value_parser = parse_bool)]
    pub ack_registry: bool,
    /// Memory budget of the ack registry in MiB; least recently stored leases are evicted
    /// beyond it (their acks resolve by hash).
    #[arg(long, env = "QUEEN_ACK_REGISTRY_MB", default_value_t = 64)]
    pub ack_registry_mb: usize,
    /// Ack fusion (docs/engine.md §6.5): the registry's positional acks of concurrent requests
    /// commit together, one transaction per flush. Only registry hits are fused, so it does
    /// nothing with the registry off. Off: each hit commits alone.
    #[arg(long, env = "QUEEN_ACK_FUSION", default_value = "true", value_parser = parse_bool)]
    pub ack_fusion: bool,
    /// Shard tasks of ack fusion (one flush in flight per shard).
    #[arg(long, env = "QUEEN_ACK_FUSION_SHARDS", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub ack_fusion_shards: u64,
    /// Embedded PostgreSQL only: fsync and synchronous_commit off. Loses data on a crash.
    #[arg(long, env = "QUEEN_DEV_UNSAFE", default_value = "false", value_parser = parse_bool)]
    pub dev_unsafe: bool,
}

impl Config {
    /// True when no external database is configured and the embedded cluster is used.
    pub fn embedded(&self) -> bool {
        self.database_url.is_none() && self.pg_host.is_none()
    }

    /// The embedded cluster's directory.
    pub fn pg_dir(&self) -> PathBuf {
        self.data_dir.join("pg")
    }

    /// One line per setting, with passwords masked, for the boot log.
    pub fn describe(&self) -> String {
        let url = self.database_url.as_deref().map(mask_url);
        let db = match (&url, &self.pg_host) {
            (Some(u), _) => u.clone(),
            (None, Some(h)) => format!(
                "postgresql://{}:{}@{}:{}/{}",
                self.pg_user,
                if self.pg_password.is_some() {
                    "****"
                } else {
                    ""
                },
                h,
                self.pg_port,
                self.pg_db
            ),
            (None, None) => format!("embedded ({})", self.pg_dir().display()),
        };
        format!(
            "listen={}:{} database={} pool={} data_dir={} log_level={} max_body={} \
             header_read_timeout_ms={} body_read_timeout_ms={} idle_timeout_ms={} \
             max_connections={} \
             apply_schema={} stmt_timeout_ms={} zstd_level={} default_timeout_ms={} \
             pop_wait=[{}ms x{} then x{} max {}ms] pending_gate={} peer_wake={} \
             dedup_cache={} dedup_cache_mb={} ack_registry={} ack_registry_mb={} \
             ack_fusion={} ack_fusion_shards={} dev_unsafe={}",
            self.host,
            self.port,
            db,
            self.db_pool_size,
            self.data_dir.display(),
            self.log_level,
            self.max_body_bytes,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.idle_timeout_ms,
            self.max_connections,
            self.apply_schema,
            self.stmt_timeout_ms,
            self.zstd_level,
            self.default_timeout_ms,
            self.pop_wait_initial_ms,
            self.pop_wait_backoff_threshold,
            self.pop_wait_backoff_multiplier,
            self.pop_wait_max_ms,
            self.pop_pending_gate,
            self.peer_wake,
            self.dedup_cache,
            self.dedup_cache_mb,
            self.ack_registry,
            self.ack_registry_mb,
            self.ack_fusion,
            self.ack_fusion_shards,
            self.dev_unsafe
        )
    }
}

/// Replaces the password of a URL's userinfo with `****`.
fn mask_url(url: &str) -> String {
    let Some(scheme_end) = url.find("://") else {
        return url.to_string();
    };
    let rest = &url[scheme_end + 3..];
    let Some(at) = rest.find('@') else {
        return url.to_string();
    };
    let userinfo = &rest[..at];
    match userinfo.find(':') {
        Some(colon) => format!(
            "{}{}:****{}",
            &url[..scheme_end + 3],
            &userinfo[..colon],
            &rest[at..]
        ),
        None => url.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_passwords() {
        assert_eq!(
            mask_url("postgresql://u:secret@h:5432/db"),
            "postgresql://u:****@h:5432/db"
        );
        assert_eq!(mask_url("postgresql://u@h/db"), "postgresql://u@h/db");
    }

    #[test]
    fn bools() {
        assert_eq!(parse_bool("ON"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("maybe").is_err());
    }
}
