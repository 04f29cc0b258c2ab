//! The durable first-run settings appended once to `postgresql.auto.conf` (socket-only
//! listening, `shared_buffers` sized from RAM, `pg_stat_statements` when available), and
//! validation of caller-supplied setting names.

use std::fs::{self, OpenOptions};
use std::io::Write;
use std::path::Path;

use tracing::info;

use super::run_as::{give_to, RunAs};
use super::{io_ctx, EmbeddedOptions, EmbeddedPgError, PgBinaries, Result};

/// Written after our settings have been appended. A separate file because `ALTER SYSTEM`
/// rewrites `postgresql.auto.conf` without comments: a marker inside it would vanish and make
/// us append our defaults again over the operator's changes.
const SETTINGS_MARKER: &str = "queen-embedded.init";

/// Appends our settings to `postgresql.auto.conf` unless an earlier start already did.
pub(super) fn write_once(
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

/// `initdb -c` does not exist on PostgreSQL 15, hence the append. Durability is always on
/// here; `unsafe_no_fsync` only overrides it per run.
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

/// Extra settings travel as `-c name=value` arguments: a name outside `[a-z0-9_.]` is a typo
/// or an attempt to smuggle in another option.
pub(super) fn check_setting_name(name: &str) -> Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_quoting_and_default_size() {
        let m = "MemTotal:       24683712 kB\nMemFree: 1 kB\n";
        assert_eq!(parse_meminfo_total_kb(m), Some(24683712));
        assert_eq!(quote_setting("it's"), "'it''s'");
        let mb = default_shared_buffers_mb();
        assert!((128..=4096).contains(&mb));
    }
}
