//! The broker's one typed configuration: every flag is also an environment variable,
//! read once at boot and echoed (secrets masked).

use std::path::PathBuf;

use clap::{Args, ValueEnum};

mod browser;
mod jwt;
mod mask;

pub use browser::BrowserConfig;
pub use jwt::{DefaultRole, JwtAlgorithm, JwtConfig, SkipPath};
use mask::{mask_dsn, KeyParser};

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

/// Who may read `/metrics` and `/metrics/prometheus` when auth is on (`QUEEN_METRICS_ACCESS`,
/// docs/wire.md §15): anyone, or a token with at least the named role.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsAccess {
    /// No token needed.
    Public,
    #[value(name = "read-only")]
    ReadOnly,
    #[value(name = "read-write")]
    ReadWrite,
    Admin,
}

impl MetricsAccess {
    pub fn as_str(self) -> &'static str {
        match self {
            MetricsAccess::Public => "public",
            MetricsAccess::ReadOnly => "read-only",
            MetricsAccess::ReadWrite => "read-write",
            MetricsAccess::Admin => "admin",
        }
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
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
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
    #[arg(long, env = "PG_PASSWORD", hide_env_values = true)]
    pub pg_password: Option<String>,
    /// External PostgreSQL database.
    #[arg(long, env = "PG_DB", default_value = "postgres")]
    pub pg_db: String,
    /// Pooled PostgreSQL connections (created lazily).
    #[arg(long, env = "DB_POOL_SIZE", default_value_t = 160)]
    pub db_pool_size: usize,
    /// Memory budget in MiB of the pooled connections' buffers (docs/performance.md §7.3): a
    /// connection keeps the capacity of the largest statement it sent and answer it read;
    /// beyond the budget, connections holding large buffers are closed between requests
    /// (idle ones first) and the pool opens fresh ones when needed.
    #[arg(long, env = "QUEEN_DB_BUFFERS_MB", default_value_t = 16)]
    pub db_buffers_mb: usize,
    /// Push transactions a broker runs on PostgreSQL at once (the push lane of admission,
    /// docs/engine.md §9). Pushes that find none free wait and join the next bundle, so a
    /// low cap is what makes bundles grow when PostgreSQL is the bottleneck.
    #[arg(long, env = "QUEEN_ADMISSION_PUSH_CAP", default_value_t = 4, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=4096))]
    pub admission_push_cap: usize,
    /// How long a push may expect to wait for push fusion before it may be refused, before
    /// its body is parsed, with 429 and `Retry-After` (docs/engine.md §9, the push door); 0
    /// turns the door off.
    #[arg(long, env = "QUEEN_PUSH_WAIT_BUDGET_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub push_wait_budget_ms: u64,
    /// Push fusion shards: tasks that own disjoint sets of partitions and bundle their ready
    /// ones (docs/engine.md §4.3). A bundle only takes one shard's partitions, so fewer
    /// shards make bigger bundles while pushes wait for the push cap; one (upstream: 8)
    /// handles well over 100 000 arrivals a second.
    #[arg(long, env = "QUEEN_V2_FUSION_SHARDS", default_value_t = 1, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub fusion_shards: usize,
    /// Partitions one push bundle (one transaction, one commit) carries at most
    /// (docs/engine.md §4.3).
    #[arg(long, env = "QUEEN_V2_BUNDLE_MAX", default_value_t = 64, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=10_000))]
    pub bundle_max: usize,
    /// Payload bytes one push bundle carries beyond its first partition (docs/engine.md §4.3):
    /// a pooled connection keeps the buffers of the largest statement it sent, so this bounds
    /// the broker's memory as much as the bundle.
    #[arg(long, env = "QUEEN_V2_BUNDLE_MAX_BYTES", default_value_t = 1 << 20, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..))]
    pub bundle_max_bytes: usize,
    /// Build and compress a partition's next push segment while its previous one is written
    /// (docs/engine.md §4.3); off, a hot partition builds, writes and commits one at a time.
    #[arg(long, env = "QUEEN_V2_PUSH_PIPELINE", default_value = "true", value_parser = parse_bool)]
    pub push_pipeline: bool,
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
    /// Milliseconds one queue sample of /metrics/prometheus serves every scrape (per tenant);
    /// concurrent scrapes share one read whatever this is.
    #[arg(long, env = "QUEEN_METRICS_CACHE_MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub metrics_cache_ms: u64,
    /// Who may read /metrics and /metrics/prometheus when JWT_ENABLED is on: `public`, or a
    /// token with at least the role `read-only`, `read-write` or `admin`.
    #[arg(
        long,
        env = "QUEEN_METRICS_ACCESS",
        value_enum,
        default_value = "public"
    )]
    pub metrics_access: MetricsAccess,
    /// Request body limit in bytes (413 above it).
    #[arg(long, env = "QUEEN_MAX_BODY_BYTES", default_value_t = 64 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// MiB that the compressed binary bodies in flight may inflate to, all together: a body is
    /// charged what its headers announce before anything is inflated, and holds the charge
    /// until it is answered. A body that does not fit now answers 503 with Retry-After; one
    /// announcing more than this alone (or than QUEEN_MAX_BODY_BYTES), 413.
    #[arg(long, env = "QUEEN_BODY_BUDGET_MB", default_value_t = 256, value_parser = clap::value_parser!(u64).range(1..=1_048_576))]
    pub body_budget_mb: u64,
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
    /// Bytes of read buffer an HTTP connection may hold: the largest request head accepted,
    /// and what an open connection keeps between requests (bodies are read in pieces of at
    /// most this size). hyper's own default is about 400 KiB; 16 KiB keeps the buffers of
    /// many keep-alive connections small (docs/performance.md §7.2).
    #[arg(long, env = "QUEEN_HTTP_READ_BUFFER_BYTES", default_value_t = 16 * 1024, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(8192..=16 * 1024 * 1024))]
    pub http_read_buffer_bytes: usize,
    /// Most client connections served at once. Beyond it (or beyond a peer's share) a
    /// connection is still accepted into a small spare pool that answers `/health` and a 503
    /// with Retry-After to anything else; when that is full too it is closed at once.
    #[arg(long, env = "QUEEN_MAX_CONNECTIONS", default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// Percent of QUEEN_MAX_CONNECTIONS (and of the spare pool) one peer may hold: an IPv4
    /// address, or an IPv6 /64. 100 turns the share off (behind one reverse proxy every client
    /// is one peer).
    #[arg(long, env = "QUEEN_PEER_CONNECTION_SHARE", default_value_t = 50, value_parser = clap::value_parser!(u8).range(1..=100))]
    pub peer_connection_share: u8,
    /// Milliseconds a new connection may stay silent before the broker closes it and frees
    /// its slot (the idle timeout applies between the requests of a connection that sent one).
    #[arg(long, env = "QUEEN_FIRST_BYTE_TIMEOUT_MS", default_value_t = 5_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub first_byte_timeout_ms: u64,
    /// Apply the SQL schema files at boot.
    #[arg(long, env = "QUEEN_APPLY_SCHEMA", default_value = "true", value_parser = parse_bool)]
    pub apply_schema: bool,
    /// Statement timeout of broker SQL calls, in ms.
    #[arg(long, env = "QUEEN_STMT_TIMEOUT_MS", default_value_t = 30_000)]
    pub stmt_timeout_ms: u64,
    /// zstd level of segment blobs. 1, not upstream's 3: the same ratio on JSON and on
    /// base64 payloads at half the CPU (docs/engine.md §3.2), and zstd was the broker's
    /// largest cost in batched pushes.
    #[arg(long, env = "QUEEN_V2_ZSTD_LEVEL", default_value_t = 1)]
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
    /// Memory budget of the dedup cache in MiB, charged with its real heap use (about 8 bytes
    /// per in-window transactionId: 8 × msg/s × window_s / 2²⁰ MiB for a partition); least
    /// recently used partitions are evicted beyond it, and a partition too large for it is
    /// never hydrated (its pushes probe the whole window in SQL, as with the cache off).
    #[arg(long, env = "QUEEN_DEDUP_CACHE_MB", default_value_t = 16)]
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
    /// Memory budget of the segment cache in MiB (docs/engine.md §5.8): the frames of segments
    /// this broker committed lately to queues being consumed, so their pops skip the
    /// decompression; oldest out first beyond it. 0 turns it off: every pop decompresses.
    #[arg(long, env = "QUEEN_SEGMENT_CACHE_MB", default_value_t = 4)]
    pub segment_cache_mb: usize,
    /// Ack fusion (docs/engine.md §6.5): the registry's positional acks of concurrent requests
    /// commit together, one transaction per flush. Only registry hits are fused, so it does
    /// nothing with the registry off. Off: each hit commits alone.
    #[arg(long, env = "QUEEN_ACK_FUSION", default_value = "true", value_parser = parse_bool)]
    pub ack_fusion: bool,
    /// Shard tasks of ack fusion (one flush in flight per shard).
    #[arg(long, env = "QUEEN_ACK_FUSION_SHARDS", default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=1024))]
    pub ack_fusion_shards: u64,
    /// glibc's mmap threshold in KiB, fixed at boot: allocations this large are mapped and
    /// unmapped on their own instead of coming from the heap, so buffers freed after a burst
    /// leave the broker's RSS (glibc otherwise raises the threshold as large blocks are freed,
    /// up to 32 MiB). 256 keeps a pop's decompressed segment and its rendered answer (a batch of
    /// 100 one-KiB messages) on the heap, which the periodic trim returns (docs/performance.md
    /// §7.2). 0 keeps glibc's dynamic default; `MALLOC_MMAP_THRESHOLD_` overrides.
    #[arg(long, env = "QUEEN_MALLOC_MMAP_THRESHOLD_KB", default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(0..=32 * 1024))]
    pub malloc_mmap_threshold_kb: usize,
    /// Period in ms at which glibc's `malloc_trim` hands the heap arenas' free pages back to
    /// the kernel (docs/performance.md §7.2): memory freed after a burst otherwise stays in the
    /// broker's RSS. 0 = never.
    #[arg(long, env = "QUEEN_MALLOC_TRIM_MS", default_value_t = 1000)]
    pub malloc_trim_ms: u64,
    /// Embedded PostgreSQL only: fsync and synchronous_commit off. Loses data on a crash.
    #[arg(long, env = "QUEEN_DEV_UNSAFE", default_value = "false", value_parser = parse_bool)]
    pub dev_unsafe: bool,
    /// AES-256 key (64 hex digits) sealing the payloads of queues with `encryptionEnabled`
    /// (docs/engine.md §3.1). Unset: such queues cannot be configured. Never echoed.
    #[arg(long, env = "QUEEN_ENCRYPTION_KEY", value_parser = KeyParser, hide_env_values = true)]
    pub encryption_key: Option<EncryptionKey>,
    /// The disk spool (docs/engine.md §4.6): while push maintenance is on or PostgreSQL cannot
    /// be reached, pushes are written to local disk, answered `buffered`, and replayed once
    /// PostgreSQL takes writes again. Off: such pushes answer 503.
    #[arg(long, env = "FILE_BUFFER_ENABLED", default_value = "true", value_parser = parse_bool)]
    pub file_buffer_enabled: bool,
    /// The spool's directory (default `<QUEEN_DATA_DIR>/spool/<PORT>`). One broker per
    /// directory: a second one refuses to start on it. Created 0700; it must belong to the
    /// broker's user.
    #[arg(long, env = "FILE_BUFFER_DIR")]
    pub file_buffer_dir: Option<PathBuf>,
    /// Milliseconds between the drain's looks at a spool it could not replay yet; the first
    /// step of its backoff, which grows to 250 ms while PostgreSQL stays unreachable.
    #[arg(long, env = "FILE_BUFFER_FLUSH_MS", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_flush_ms: u64,
    /// Messages the drain replays per round (whole spool records, at least one). 1 000, not
    /// upstream's 100: every push waits in the spool until it is empty, and at 100 a round
    /// the backlog of a 30 s failover kept direct pushes out for a second (docs/engine.md §4.6).
    #[arg(long, env = "FILE_BUFFER_MAX_BATCH", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_max_batch: u64,
    /// Messages per spool file; the next append starts a new file, so drained files can be
    /// deleted while the drain goes on.
    #[arg(long, env = "FILE_BUFFER_EVENTS_PER_FILE", default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_events_per_file: u64,
    /// Bytes the spool may hold; a push that would take it further answers 503. The
    /// quarantine files (records the drain gave up on) stay within it too.
    #[arg(long, env = "FILE_BUFFER_MAX_BYTES", default_value_t = 1 << 30, value_parser = clap::value_parser!(u64).range(1..))]
    pub file_buffer_max_bytes: u64,
    /// Bearer-token authentication (docs/wire.md §1).
    #[command(flatten)]
    pub jwt: JwtConfig,
    /// Cross-site requests and DNS rebinding (docs/wire.md §1.4).
    #[command(flatten)]
    pub browser: BrowserConfig,
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

impl Config {
    /// Refuses configurations that cannot work (before anything is started).
    pub fn check(&self) -> Result<(), String> {
        self.jwt.check()?;
        self.browser.check()
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

    /// The in-flight budget of inflated body bytes (`QUEEN_BODY_BUDGET_MB`).
    pub fn body_budget_bytes(&self) -> usize {
        usize::try_from(self.body_budget_mb)
            .ok()
            .and_then(|mb| mb.checked_mul(1 << 20))
            .unwrap_or(usize::MAX)
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
        let url = self.database_url.as_deref().map(mask_dsn);
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
            "listen={}:{} database={} pool={} db_buffers_mb={} push_cap={} push_wait_budget_ms={} fusion_shards={} bundle_max={} bundle_max_bytes={} push_pipeline={} data_dir={} log_level={} log_format={} \
             metrics_max_queues={} metrics_cache_ms={} metrics_access={} max_body={} body_budget_mb={} \
             header_read_timeout_ms={} body_read_timeout_ms={} idle_timeout_ms={} \
             http_read_buffer_bytes={} max_connections={} peer_connection_share={}% \
             first_byte_timeout_ms={} \
             apply_schema={} stmt_timeout_ms={} zstd_level={} default_timeout_ms={} \
             pop_wait=[{}ms x{} then x{} max {}ms] pending_gate={} \
             pop_autopilot={} (max {} partitions) peer_wake={:?} ({}) \
             hotlist={} hotlist_reseed_ms={} hotlist_unserved_trim_ms={} \
             dedup_cache={} dedup_cache_mb={} ack_registry={} ack_registry_mb={} segment_cache_mb={} \
             ack_fusion={} ack_fusion_shards={} retention=[every {}ms batch {} x{} due_cap {} \
             safety_walk {}ms sidecar_floor {}s] partition_cleanup={}@{}d malloc_mmap_threshold_kb={} malloc_trim_ms={} dev_unsafe={} \
             encryption_key={} spool={} spool_dir={} spool_flush_ms={} spool_max_batch={} \
             spool_events_per_file={} spool_max_bytes={} {} {}",
            self.host,
            self.port,
            db,
            self.db_pool_size,
            self.db_buffers_mb,
            self.admission_push_cap,
            self.push_wait_budget_ms,
            self.fusion_shards,
            self.bundle_max,
            self.bundle_max_bytes,
            self.push_pipeline,
            self.data_dir.display(),
            self.log_level,
            self.log_format.as_str(),
            self.metrics_max_queues,
            self.metrics_cache_ms,
            self.metrics_access.as_str(),
            self.max_body_bytes,
            self.body_budget_mb,
            self.header_read_timeout_ms,
            self.body_read_timeout_ms,
            self.idle_timeout_ms,
            self.http_read_buffer_bytes,
            self.max_connections,
            self.peer_connection_share,
            self.first_byte_timeout_ms,
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
            self.segment_cache_mb,
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
            self.malloc_mmap_threshold_kb,
            self.malloc_trim_ms,
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
            self.jwt.describe(),
            self.browser.describe()
        )
    }
}

#[cfg(test)]
mod tests;
