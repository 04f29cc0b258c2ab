//! Locating the machine's PostgreSQL server binaries (`initdb`, `postgres`) and asking the
//! installation whether it ships `pg_stat_statements`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use super::{EmbeddedPgError, Result};

/// The server binaries of one PostgreSQL installation.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    pub bindir: PathBuf,
    pub initdb: PathBuf,
    pub postgres: PathBuf,
}

impl PgBinaries {
    /// Search order: `explicit`, `PG_BINDIR`, `pg_config --bindir`, the newest
    /// `/usr/lib/postgresql/*/bin`, then `PATH`. A directory counts only if it holds both
    /// binaries: Debian's `pg_config --bindir` may say `/usr/bin`, which has no `postgres`.
    pub fn locate(explicit: Option<&Path>) -> Result<Self> {
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
        let mut searched: Vec<String> = Vec::new();
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
        Some(Self {
            bindir: dir.to_path_buf(),
            initdb,
            postgres,
        })
    }

    /// We preload `pg_stat_statements` only when it ships: a missing preload library makes the
    /// server refuse to start.
    pub(super) fn has_pg_stat_statements(&self) -> bool {
        let mut libdirs: Vec<PathBuf> = Vec::new();
        // The installation's own pg_config first (Debian has one per version); the one on PATH
        // only if it describes this same bindir.
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

/// `<root>/<version>/bin`, newest version first.
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

/// Numeric components, so that 9.6 < 10 < 15 < 16 (a string sort would put 9.6 last).
fn parse_version(s: &str) -> Option<Vec<u64>> {
    s.split('.').map(|part| part.parse().ok()).collect()
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
}
