//! The broker's one typed configuration: every flag is also an environment variable,
//! read once at boot and echoed (secrets masked).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

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

/// How log lines are written (docs/wire.md §15, "Logs").
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

impl LogFormat {
    pub fn as_str(self) -> &'static str {
        match self {
            LogFormat::Text => "text",
            LogFormat::Json => "json",
        }
    }
}

/// A positive, finite number of days (fractions allowed).
fn parse_days(s: &str) -> Result<f64, String> {
    match s.trim().parse::<f64>() {
        Ok(d) if d.is_finite() && d > 0.0 && d <= 36_500.0 => Ok(d),
        _ => Err(format!("not a number of days between 0 and 36500: {s:?}")),
    }
}

/// `QUEEN_PEER_WAKE`: cross-broker wake on, off, or `auto` (on exactly when the database is
/// not the embedded one, which serves one broker by construction).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PeerWake {
    Auto,
    On,
    Off,
}

/// `auto`, or one of the boolean spellings of [`parse_bool`].
fn parse_peer_wake(s: &str) -> Result<PeerWake, String> {
    if s.trim().eq_ignore_ascii_case("auto") {
        return Ok(PeerWake::Auto);
    }
    parse_bool(s)
        .map(|on| if on { PeerWake::On } else { PeerWake::Off })
        .map_err(|e| format!("{e}, or auto"))
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
    /// Log line format: text, or json (one object per line). Colours only when stdout is a
    /// terminal.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Most queues with series of their own on /metrics/prometheus (those with the most
    /// pending messages), and most (queue, group) lag series; totals cover every queue.
    #[arg(long, env = "QUEEN_METRICS_MAX_QUEUES", default_value_t = 100, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    pub metrics_max_queues: u32,
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
    /// Pop autopilot (docs/engine.md §5.7): a pop sending `autopilot=true` has the knobs it left
    /// unset (`partitions`, `batch`) sized from its hot-list ring, and the answer echoes them.
    /// Off: the flag is ignored (the defaults apply) and nothing is echoed.
    #[arg(long, env = "QUEEN_POP_AUTOPILOT", default_value = "true", value_parser = parse_bool)]
    pub pop_autopilot: bool,
    /// Most partitions one autopilot pop may claim (at most the `partitions` cap, 512).
    #[arg(long, env = "QUEEN_POP_AUTOPILOT_MAX_PARTITIONS", default_value_t = 256, value_parser = clap::value_parser!(i32).range(1..))]
    pub pop_autopilot_max_partitions: i32,
    /// Wake long-polls of other brokers sharing the database, and feed their hot-list rings
    /// (LISTEN/NOTIFY): auto (on with an external database), true or false. Always off with
    /// the embedded PostgreSQL, which serves one broker by construction.
    #[arg(long, env = "QUEEN_PEER_WAKE", default_value = "auto", value_parser = parse_peer_wake)]
    pub peer_wake: PeerWake,
    /// Hot-list ring (docs/engine.md §7): wildcard pops claim only partitions this broker
    /// knows have work, and a pop with none costs no SQL. Off: the SQL candidate scan.
    #[arg(long, env = "QUEEN_HOTLIST", default_value = "true", value_parser = parse_bool)]
    pub hotlist: bool,
    /// Each hot-list ring is refilled from PostgreSQL at least this often (ms) while pops use
    /// it: the floor for work no notification announced.
    #[arg(long, env = "QUEEN_HOTLIST_RESEED_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub hotlist_reseed_ms: u64,
    /// A hot-list ring no pop consulted for this long (ms) is dropped.
    #[arg(long, env = "QUEEN_HOTLIST_UNSERVED_TRIM_MS", default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub hotlist_unserved_trim_ms: u64,
    /// Broker-side dedup cache (docs/engine.md §4.2): pushes vouch for their transactionIds so
    /// PostgreSQL probes only the tail of the dedup window. Off: every push probes the window.
    #[arg(long, env = "QUEEN_DEDUP_CACHE", default_value = "true", value_parser = parse_bool)]
    pub dedup_cache: bool,
    /// Memory budget of the dedup cache in MiB (about 16 × msg/s × window_s / 10⁶); least
    /// recently used partitions are evicted beyond it.
    #[arg(long, env = "QUEEN_DEDUP_CACHE_MB", default_value_t = 512)]
    pub dedup_cache_mb: usize,
    /// Milliseconds between two runs of the retention loop (docs/engine.md §10.3): rules 1 and
    /// 2, the hash-sidecar purge, max-wait eviction and partition cleanup. One broker of a
    /// database runs it at a time; the others try to take it over at the same cadence.
    #[arg(long, env = "RETENTION_INTERVAL", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(50..))]
    pub retention_interval_ms: u64,
    /// Rows (segments or sidecar rows) one retention step deletes at most: one short
    /// transaction holding one partition's allocator lock.
    #[arg(long, env = "RETENTION_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(i32).range(1..=100_000))]
    pub retention_batch_size: i32,
    /// Partitions the retention loop works on at once, each on its own connection.
    #[arg(long, env = "RETENTION_PARALLELISM", default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=16))]
    pub retention_parallelism: u16,
    /// Due partitions one run takes per phase, oldest first; 0 derives
    /// RETENTION_BATCH_SIZE × RETENTION_PARALLELISM × 5.
    #[arg(long, env = "QUEEN_RETENTION_DUE_CAP", default_value_t = 0, value_parser = clap::value_parser!(i32).range(0..))]
    pub retention_due_cap: i32,
    /// Milliseconds between two watermark safety walks (the first runs when a broker starts
    /// running the loop).
    #[arg(long, env = "QUEEN_RETENTION_SAFETY_WALK_MS", default_value_t = 86_400_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub retention_safety_walk_ms: u64,
    /// Floor of the hash-sidecar purge horizon in seconds: sidecar rows older than
    /// GREATEST(dedup window, completedRetentionSeconds, this) are purged (ours; upstream
    /// fixes it at 900).
    #[arg(long, env = "QUEEN_SIDECAR_PURGE_FLOOR_SECONDS", default_value_t = 900, value_parser = clap::value_parser!(i32).range(0..))]
    pub sidecar_purge_floor_s: i32,
    /// Days a partition must stay idle (no push) and empty before it is deleted; fractions
    /// of a day are accepted.
    #[arg(long, env = "PARTITION_CLEANUP_DAYS", default_value_t = 30.0, value_parser = parse_days)]
    pub partition_cleanup_days: f64,
    /// Delete idle, empty partitions (see PARTITION_CLEANUP_DAYS).
    #[arg(long, env = "QUEEN_PARTITION_CLEANUP_ENABLED", default_value = "true", value_parser = parse_bool)]
    pub partition_cleanup_enabled: bool,
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
    /// AES-256 key (64 hex digits) sealing the payloads of queues with `encryptionEnabled`
    /// (docs/engine.md §3.1). Unset: such queues cannot be configured. Never echoed.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY", value_parser = EncryptionKey::from_hex, hide_env_values = true)]
    pub encryption_key: Option<EncryptionKey>,
    /// The disk spool (docs/engine.md §4.6): while push maintenance is on or PostgreSQL cannot
    /// be reached, pushes are written to local disk, answered `buffered`, and replayed once
    /// PostgreSQL takes writes again. Off: such pushes answer 503.
    #[arg(long, env = "FILE_BUFFER_ENABLED", default_value = "true", value_parser = parse_bool)]
    pub file_buffer_enabled: bool,
    /// The spool's directory (default `<QUEEN_DATA_DIR>/spool/<PORT>`). One broker per
    /// directory: a second one refuses to start on it.
    #[arg(long, env = "FILE_BUFFER_DIR")]
    pub file_buffer_dir: Option<PathBuf>,
    /// Milliseconds between the drain's looks at a spool it could not replay yet; the first
    /// step of its backoff, which grows to 5 s while PostgreSQL stays unreachable.
    #[arg(long, env = "FILE_BUFFER_FLUSH_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_flush_ms: u64,
    /// Messages the drain replays per round (whole spool records, at least one).
    #[arg(long, env = "FILE_BUFFER_MAX_BATCH", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_max_batch: u64,
    /// Messages per spool file; the next append starts a new file, so drained files can be
    /// deleted while the drain goes on.
    #[arg(long, env = "FILE_BUFFER_EVENTS_PER_FILE", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_events_per_file: u64,
    /// Bytes the spool may hold; a push that would take it further answers 503.
    #[arg(long, env = "FILE_BUFFER_MAX_BYTES", default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_max_bytes: u64,
    /// Bearer-token authentication (docs/wire.md §1).
    #[command(flatten)]
    pub jwt: JwtConfig,
}

/// The at-rest encryption key. Its `Debug` (and the boot log) says only that it is set.
#[derive(Clone)]
pub struct EncryptionKey([u8; queen_proto::encryption::KEY_LEN]);

impl EncryptionKey {
    /// Reads `QUEEN_ENCRYPTION_KEY`; a malformed key is a boot error that does not repeat it.
    pub fn from_hex(s: &str) -> Result<Self, String> {
        queen_proto::encryption::key_from_hex(s.trim())
            .map(EncryptionKey)
            .map_err(|e| format!("QUEEN_ENCRYPTION_KEY must be 64 hex digits: {e}"))
    }

    pub fn bytes(&self) -> &[u8; queen_proto::encryption::KEY_LEN] {
        &self.0
    }
}

impl std::fmt::Debug for EncryptionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EncryptionKey(set)")
    }
}

/// A signature algorithm `JWT_ALGORITHM` may name.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum JwtAlgorithm {
    /// Every algorithm a configured key source can verify.
    #[value(name = "auto")]
    Auto,
    #[value(name = "HS256")]
    Hs256,
    #[value(name = "RS256")]
    Rs256,
    #[value(name = "ES256")]
    Es256,
}

impl JwtAlgorithm {
    pub fn name(self) -> &'static str {
        match self {
            JwtAlgorithm::Auto => "auto",
            JwtAlgorithm::Hs256 => "HS256",
            JwtAlgorithm::Rs256 => "RS256",
            JwtAlgorithm::Es256 => "ES256",
        }
    }
}

/// JWT authentication (docs/wire.md §1, README "Authentication"). Off by default; on, every
/// route but the public ones needs `Authorization: Bearer <jwt>`.
#[derive(Args, Debug, Clone)]
pub struct JwtConfig {
    /// Require a valid bearer token on every non-public route.
    #[arg(long = "jwt-enabled", env = "JWT_ENABLED", default_value = "false", value_parser = parse_bool)]
    pub enabled: bool,
    /// Accepted signature algorithms, comma-separated (HS256, RS256, ES256); `auto`: every
    /// algorithm a configured key source can verify.
    #[arg(
        long = "jwt-algorithm",
        env = "JWT_ALGORITHM",
        default_value = "auto",
        value_delimiter = ',',
        ignore_case = true
    )]
    pub algorithms: Vec<JwtAlgorithm>,
    /// HS256 shared secret (masked in the boot log).
    #[arg(long = "jwt-secret", env = "JWT_SECRET", hide_env_values = true)]
    pub secret: Option<String>,
    /// RS256 or ES256 public key: the PEM text itself, or the path of a PEM file.
    #[arg(
        long = "jwt-public-key",
        env = "JWT_PUBLIC_KEY",
        hide_env_values = true
    )]
    pub public_key: Option<String>,
    /// URL of a JWKS document (RS256/ES256 keys by `kid`), fetched on first use and cached.
    #[arg(long = "jwt-jwks-url", env = "JWT_JWKS_URL")]
    pub jwks_url: Option<String>,
    /// Seconds a fetched JWKS document is used before it is fetched again.
    #[arg(long = "jwt-jwks-refresh-interval", env = "JWT_JWKS_REFRESH_INTERVAL", default_value_t = 3600, value_parser = clap::value_parser!(u64).range(1..))]
    pub jwks_refresh_interval_s: u64,
    /// Milliseconds one JWKS fetch may take.
    #[arg(long = "jwt-jwks-timeout-ms", env = "JWT_JWKS_TIMEOUT_MS", default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    pub jwks_timeout_ms: u64,
    /// Least milliseconds between two JWKS fetches: a token naming an unknown `kid` refetches
    /// the document at most this often, so a flood of bad kids cannot hammer the JWKS server.
    #[arg(
        long = "jwt-jwks-min-refetch-ms",
        env = "JWT_JWKS_MIN_REFETCH_MS",
        default_value_t = 10_000
    )]
    pub jwks_min_refetch_ms: u64,
    /// Required `iss` claim (unset: not checked).
    #[arg(long = "jwt-issuer", env = "JWT_ISSUER")]
    pub issuer: Option<String>,
    /// Required `aud` claim, one of the token's audiences (unset: not checked).
    #[arg(long = "jwt-audience", env = "JWT_AUDIENCE")]
    pub audience: Option<String>,
    /// Seconds of clock skew allowed on `exp` and `nbf`.
    #[arg(long = "jwt-clock-skew", env = "JWT_CLOCK_SKEW", default_value_t = 30)]
    pub clock_skew_s: u64,
    /// Extra paths served without a token, comma-separated: an exact path, or a prefix when
    /// the entry ends with `/`.
    #[arg(long = "jwt-skip-paths", env = "JWT_SKIP_PATHS", value_delimiter = ',')]
    pub skip_paths: Vec<String>,
}

impl JwtConfig {
    /// The algorithms accepted: those named, or with `auto` every one a key source serves.
    pub fn accepted(&self) -> Vec<JwtAlgorithm> {
        if self.algorithms.contains(&JwtAlgorithm::Auto) {
            let mut out = Vec::new();
            if self.secret.is_some() {
                out.push(JwtAlgorithm::Hs256);
            }
            if self.public_key.is_some() || self.jwks_url.is_some() {
                out.extend([JwtAlgorithm::Rs256, JwtAlgorithm::Es256]);
            }
            return out;
        }
        self.algorithms.clone()
    }

    /// The skip paths as configured, blanks dropped.
    pub fn skip_paths(&self) -> impl Iterator<Item = &str> {
        self.skip_paths
            .iter()
            .map(|p| p.trim())
            .filter(|p| !p.is_empty())
    }

    /// Refuses the combinations that cannot work, with the fix in the message: auth on without
    /// any key source, an algorithm without its key source, an empty secret, a skip path that
    /// is not a path.
    pub fn check(&self) -> Result<(), String> {
        if !self.enabled {
            return Ok(());
        }
        if self.secret.as_deref() == Some("") {
            return Err("JWT_SECRET is set but empty".into());
        }
        if self.secret.is_none() && self.public_key.is_none() && self.jwks_url.is_none() {
            return Err(
                "JWT_ENABLED=true needs a key: set JWT_SECRET (HS256), JWT_PUBLIC_KEY \
                        (RS256/ES256, PEM) or JWT_JWKS_URL (RS256/ES256)"
                    .into(),
            );
        }
        if self.algorithms.contains(&JwtAlgorithm::Auto) && self.algorithms.len() > 1 {
            return Err("JWT_ALGORITHM=auto cannot be combined with named algorithms".into());
        }
        for alg in self.accepted() {
            let served = match alg {
                JwtAlgorithm::Hs256 => self.secret.is_some(),
                _ => self.public_key.is_some() || self.jwks_url.is_some(),
            };
            if !served {
                let needs = match alg {
                    JwtAlgorithm::Hs256 => "JWT_SECRET",
                    _ => "JWT_PUBLIC_KEY or JWT_JWKS_URL",
                };
                return Err(format!(
                    "JWT_ALGORITHM names {} but {needs} is not set",
                    alg.name()
                ));
            }
        }
        if let Some(bad) = self.skip_paths().find(|p| !p.starts_with('/')) {
            return Err(format!(
                "JWT_SKIP_PATHS entry {bad:?} is not a path (must start with /)"
            ));
        }
        Ok(())
    }

    /// The boot-log line: which key sources are set, never the secret or key itself.
    pub fn describe(&self) -> String {
        if !self.enabled {
            return "jwt=off".into();
        }
        let set = |v: &Option<String>| if v.is_some() { "set" } else { "unset" };
        let algorithms: Vec<&str> = self.accepted().iter().map(|a| a.name()).collect();
        format!(
            "jwt=on algorithms={} secret={} public_key={} jwks_url={} jwks_refresh_interval_s={} \
             jwks_timeout_ms={} jwks_min_refetch_ms={} issuer={} audience={} clock_skew_s={} \
             skip_paths=[{}]",
            algorithms.join(","),
            set(&self.secret),
            set(&self.public_key),
            self.jwks_url
                .as_deref()
                .map(mask_url)
                .unwrap_or_else(|| "unset".into()),
            self.jwks_refresh_interval_s,
            self.jwks_timeout_ms,
            self.jwks_min_refetch_ms,
            self.issuer.as_deref().unwrap_or("unset"),
            self.audience.as_deref().unwrap_or("unset"),
            self.clock_skew_s,
            self.skip_paths().collect::<Vec<_>>().join(","),
        )
    }
}

impl Config {
    /// Refuses configurations that cannot work (before anything is started).
    pub fn check(&self) -> Result<(), String> {
        self.jwt.check()
    }

    /// True when no external database is configured and the embedded cluster is used.
    pub fn embedded(&self) -> bool {
        self.database_url.is_none() && self.pg_host.is_none()
    }

    /// Whether cross-broker wake runs: `auto` means with an external database.
    pub fn peer_wake_on(&self) -> bool {
        match self.peer_wake {
            PeerWake::On => true,
            PeerWake::Off => false,
            PeerWake::Auto => !self.embedded(),
        }
    }

    /// The embedded cluster's directory.
    pub fn pg_dir(&self) -> PathBuf {
        self.data_dir.join("pg")
    }

    /// Due partitions per phase and run of the retention loop (`QUEEN_RETENTION_DUE_CAP`, 0 =
    /// batch × parallelism × 5).
    pub fn retention_due_cap(&self) -> i32 {
        if self.retention_due_cap > 0 {
            return self.retention_due_cap;
        }
        self.retention_batch_size
            .saturating_mul(i32::from(self.retention_parallelism))
            .saturating_mul(5)
    }

    /// How long a partition must stay idle and empty before partition cleanup deletes it.
    pub fn partition_cleanup_age(&self) -> std::time::Duration {
        std::time::Duration::from_secs_f64(self.partition_cleanup_days * 86_400.0)
    }

    /// The disk spool's directory: `FILE_BUFFER_DIR`, else one per port under the data
    /// directory (brokers of one host differ by port, and keep it across restarts).
    pub fn spool_dir(&self) -> PathBuf {
        self.file_buffer_dir
            .clone()
            .unwrap_or_else(|| self.data_dir.join("spool").join(self.port.to_string()))
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
            "listen={}:{} database={} pool={} data_dir={} log_level={} log_format={} \
             metrics_max_queues={} max_body={} \
             header_read_timeout_ms={} body_read_timeout_ms={} idle_timeout_ms={} \
             max_connections={} \
             apply_schema={} stmt_timeout_ms={} zstd_level={} default_timeout_ms={} \
             pop_wait=[{}ms x{} then x{} max {}ms] pending_gate={} \
             pop_autopilot={} (max {} partitions) peer_wake={:?} ({}) \
             hotlist={} hotlist_reseed_ms={} hotlist_unserved_trim_ms={} \
             dedup_cache={} dedup_cache_mb={} ack_registry={} ack_registry_mb={} \
             ack_fusion={} ack_fusion_shards={} retention=[every {}ms batch {} x{} due_cap {} \
             safety_walk {}ms sidecar_floor {}s] partition_cleanup={}@{}d dev_unsafe={} \
             encryption_key={} spool={} spool_dir={} spool_flush_ms={} spool_max_batch={} \
             spool_events_per_file={} spool_max_bytes={} {}",
            self.host,
            self.port,
            db,
            self.db_pool_size,
            self.data_dir.display(),
            self.log_level,
            self.log_format.as_str(),
            self.metrics_max_queues,
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
            self.pop_autopilot,
            self.pop_autopilot_max_partitions,
            self.peer_wake,
            if self.peer_wake_on() { "on" } else { "off" },
            self.hotlist,
            self.hotlist_reseed_ms,
            self.hotlist_unserved_trim_ms,
            self.dedup_cache,
            self.dedup_cache_mb,
            self.ack_registry,
            self.ack_registry_mb,
            self.ack_fusion,
            self.ack_fusion_shards,
            self.retention_interval_ms,
            self.retention_batch_size,
            self.retention_parallelism,
            self.retention_due_cap(),
            self.retention_safety_walk_ms,
            self.sidecar_purge_floor_s,
            self.partition_cleanup_enabled,
            self.partition_cleanup_days,
            self.dev_unsafe,
            if self.encryption_key.is_some() {
                "set"
            } else {
                "unset"
            },
            self.file_buffer_enabled,
            self.spool_dir().display(),
            self.file_buffer_flush_ms,
            self.file_buffer_max_batch,
            self.file_buffer_events_per_file,
            self.file_buffer_max_bytes,
            self.jwt.describe()
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
    fn days() {
        assert_eq!(parse_days("0.5"), Ok(0.5));
        assert!(parse_days("0").is_err());
        assert!(parse_days("-1").is_err());
        assert!(parse_days("NaN").is_err());
        assert!(parse_days("soon").is_err());
    }

    #[test]
    fn encryption_keys_are_checked_and_never_shown() {
        let hex = "ab".repeat(32);
        let key = EncryptionKey::from_hex(&hex).expect("64 hex digits");
        assert_eq!(key.bytes()[0], 0xab);
        assert!(!format!("{key:?}").contains("ab"));
        let err = EncryptionKey::from_hex("secret-but-short").expect_err("too short");
        assert!(!err.contains("secret"), "{err}");
    }

    #[test]
    fn peer_wake_is_auto_by_default_and_on_only_with_an_external_database() {
        assert_eq!(parse_peer_wake("AUTO"), Ok(PeerWake::Auto));
        assert_eq!(parse_peer_wake("on"), Ok(PeerWake::On));
        assert_eq!(parse_peer_wake("0"), Ok(PeerWake::Off));
        assert!(parse_peer_wake("sometimes").is_err());
        #[derive(clap::Parser)]
        struct Serve {
            #[command(flatten)]
            cfg: Config,
        }
        let mut cfg = <Serve as clap::Parser>::parse_from(["queen"]).cfg;
        cfg.database_url = None;
        cfg.pg_host = None;
        assert_eq!(cfg.peer_wake, PeerWake::Auto);
        assert!(!cfg.peer_wake_on(), "embedded: one broker");
        cfg.pg_host = Some("db.internal".into());
        assert!(cfg.peer_wake_on(), "external: brokers may share it");
        cfg.peer_wake = PeerWake::Off;
        assert!(!cfg.peer_wake_on());
    }

    #[test]
    fn bools() {
        assert_eq!(parse_bool("ON"), Ok(true));
        assert_eq!(parse_bool("0"), Ok(false));
        assert!(parse_bool("maybe").is_err());
    }

    fn jwt(args: &[&str]) -> JwtConfig {
        #[derive(clap::Parser)]
        struct Only {
            #[command(flatten)]
            jwt: JwtConfig,
        }
        let argv = std::iter::once("queen").chain(args.iter().copied());
        <Only as clap::Parser>::try_parse_from(argv)
            .expect("parses")
            .jwt
    }

    #[test]
    fn jwt_combinations() {
        assert!(jwt(&[]).check().is_ok(), "off needs nothing");
        let no_key = jwt(&["--jwt-enabled"]).check().expect_err("no key");
        assert!(no_key.contains("JWT_SECRET"), "{no_key}");
        let hs = jwt(&["--jwt-enabled", "--jwt-secret", "s"]);
        assert!(hs.check().is_ok());
        assert_eq!(hs.accepted(), vec![JwtAlgorithm::Hs256]);
        let rs_without_key = jwt(&["--jwt-enabled", "--jwt-secret=s", "--jwt-algorithm=RS256"]);
        let e = rs_without_key.check().expect_err("RS256 has no key");
        assert!(e.contains("RS256") && e.contains("JWT_JWKS_URL"), "{e}");
        let both = jwt(&[
            "--jwt-enabled",
            "--jwt-jwks-url=http://127.0.0.1:1/jwks",
            "--jwt-algorithm=hs256,ES256",
            "--jwt-secret=s",
        ]);
        assert!(both.check().is_ok());
        assert_eq!(
            both.accepted(),
            vec![JwtAlgorithm::Hs256, JwtAlgorithm::Es256]
        );
        let empty = jwt(&["--jwt-enabled", "--jwt-secret="]);
        assert!(empty.check().expect_err("empty").contains("empty"));
        let skip = jwt(&["--jwt-enabled", "--jwt-secret=s", "--jwt-skip-paths=/a/, b"]);
        assert!(skip.check().expect_err("not a path").contains("\"b\""));
    }

    #[test]
    fn jwt_describe_hides_secrets() {
        let cfg = jwt(&[
            "--jwt-enabled",
            "--jwt-secret=hunter2",
            "--jwt-jwks-url=http://u:pw@127.0.0.1:1/jwks",
        ]);
        let line = cfg.describe();
        assert!(!line.contains("hunter2") && !line.contains("pw@"), "{line}");
        assert!(line.contains("secret=set") && line.contains("algorithms=HS256,RS256,ES256"));
        assert_eq!(jwt(&[]).describe(), "jwt=off");
    }
}
