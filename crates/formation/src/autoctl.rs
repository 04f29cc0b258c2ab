//! Running `pg_autoctl` for one formation: as the `postgres` OS user when we are root (it
//! refuses root, like PostgreSQL itself), in a clean environment whose XDG directories lie in
//! the formation's scratch directory (so nothing lands in a home directory or `/tmp`), with
//! the `pg_ctl` of the installation that ships the `pgautofailover` extension. One-shot
//! commands (`create monitor`, `perform switchover`, `drop node`) and the long-running keeper
//! (`pg_autoctl create … --run`) of a node, each keeper in a process group of its own.

use std::fs::OpenOptions;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use queen_embedded_pg::PgBinaries;

/// The Debian packages that bring `pg_autoctl` and the monitor's extension.
pub const PACKAGES: &str = "pg-auto-failover-cli postgresql-15-auto-failover";
/// How long one `pg_autoctl` command (a switchover waits for the new primary) may take.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(180);
const OS_USER: &str = "postgres";

pub(crate) struct Autoctl {
    dir: PathBuf,
    bindir: PathBuf,
    /// (uid, gid) of the `postgres` OS user when we are root.
    user: Option<(u32, u32)>,
}

impl Autoctl {
    /// Finds `pg_autoctl` and a PostgreSQL installation with the extension, and hands `dir`
    /// (created here) to the user `pg_autoctl` runs as.
    pub(crate) fn new(dir: &Path) -> Result<Self> {
        let missing = || {
            format!(
                "pg_auto_failover is not installed: run ./scripts/setup.sh \
                 (or apt-get install -y {PACKAGES})"
            )
        };
        if !Command::new("pg_autoctl")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
        {
            bail!("{}", missing());
        }
        let bin = PgBinaries::locate(None).context("locating the PostgreSQL server binaries")?;
        if !extension_installed(&bin.bindir) {
            bail!(
                "{} ({} has no pgautofailover extension)",
                missing(),
                bin.bindir.display()
            );
        }
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        let user = if is_root() {
            Some(lookup_user(OS_USER)?)
        } else {
            None
        };
        let me = Self {
            dir: dir.to_path_buf(),
            bindir: bin.bindir,
            user,
        };
        for sub in ["config", "data", "run"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        me.give(dir)?;
        for sub in ["config", "data", "run"] {
            me.give(&dir.join(sub))?;
        }
        Ok(me)
    }

    /// Hands a path we created to the user `pg_autoctl` runs as (nothing when not root).
    pub(crate) fn give(&self, path: &Path) -> Result<()> {
        if let Some((uid, gid)) = self.user {
            std::os::unix::fs::chown(path, Some(uid), Some(gid))
                .with_context(|| format!("chown {}", path.display()))?;
        }
        Ok(())
    }

    fn command(&self, args: &[&str], log: &Path) -> Result<Command> {
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(log)
            .with_context(|| format!("opening {}", log.display()))?;
        let mut cmd = Command::new("pg_autoctl");
        cmd.args(args)
            .env_clear()
            .env(
                "PATH",
                format!("{}:/usr/local/bin:/usr/bin:/bin", self.bindir.display()),
            )
            .env("PG_CONFIG", self.bindir.join("pg_config"))
            .env("HOME", &self.dir)
            .env("XDG_CONFIG_HOME", self.dir.join("config"))
            .env("XDG_DATA_HOME", self.dir.join("data"))
            .env("XDG_RUNTIME_DIR", self.dir.join("run"))
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log);
        if let Some((uid, gid)) = self.user {
            cmd.uid(uid).gid(gid);
        }
        Ok(cmd)
    }

    /// Runs a one-shot command to its end; its output goes to `log`, whose tail an error shows.
    pub(crate) async fn run(&self, args: &[&str], log: &Path) -> Result<()> {
        let mut cmd = tokio::process::Command::from(self.command(args, log)?);
        cmd.kill_on_drop(true);
        let status = tokio::time::timeout(COMMAND_TIMEOUT, cmd.status())
            .await
            .with_context(|| {
                format!(
                    "pg_autoctl {} took over {COMMAND_TIMEOUT:?}",
                    args.join(" ")
                )
            })?
            .context("running pg_autoctl")?;
        if !status.success() {
            bail!(
                "pg_autoctl {} failed ({status}); {}:\n{}",
                args.join(" "),
                log.display(),
                tail(log, 15)
            );
        }
        Ok(())
    }

    /// Starts a long-running `pg_autoctl` (a keeper) in a process group of its own, so the
    /// whole node (keeper, its services and the postmaster they start) can be signalled at
    /// once. It gets SIGTERM if the thread that started it ends (parent-death signal, set
    /// after the switch of user, which would clear it).
    pub(crate) fn spawn(&self, args: &[&str], log: &Path) -> Result<Child> {
        let mut cmd = self.command(args, log)?;
        cmd.process_group(0);
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                Ok(())
            });
        }
        cmd.spawn()
            .with_context(|| format!("starting pg_autoctl {}", args.join(" ")))
    }
}

/// The last `n` lines of a log (empty if unreadable).
pub(crate) fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

fn lookup_user(name: &str) -> Result<(u32, u32)> {
    let id = |flag: &str| -> Result<u32> {
        let out = Command::new("id")
            .args([flag, name])
            .output()
            .context("running id")?;
        if !out.status.success() {
            bail!(
                "running as root, but there is no `{name}` OS user for pg_autoctl \
                 (it refuses root): run ./scripts/setup.sh, which creates it"
            );
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .with_context(|| format!("id {flag} {name}"))
    };
    Ok((id("-u")?, id("-g")?))
}

/// The installation's `<sharedir>/extension/pgautofailover.control` exists.
fn extension_installed(bindir: &Path) -> bool {
    Command::new(bindir.join("pg_config"))
        .arg("--sharedir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .is_some_and(|share| share.join("extension/pgautofailover.control").is_file())
}
