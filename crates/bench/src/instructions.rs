//! Counting the instructions one process executes during a workload, for an exact A/B of a
//! change (issue 39 item 1): `valgrind --tool=callgrind` around the broker (its counters zeroed
//! with `callgrind_control --zero` before a workload and dumped with `--dump` after it; the
//! dump's `summary:` line is the count), or, where valgrind is missing, `perf stat -e
//! instructions:u -p PID` attached for the workload (needs a CPU and kernel that count
//! instructions: `perf stat -e instructions true` must not say `<not supported>`). Both count
//! user-space instructions of every thread of the process; neither counts the kernel's work
//! for it (system calls, page faults) nor PostgreSQL's.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use tokio::process::{Child, Command};

/// How long a `callgrind_control` command may take (it waits for the process to answer).
const CONTROL_TIMEOUT: Duration = Duration::from_secs(120);

/// Which tool counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    Callgrind,
    Perf,
}

impl Tool {
    /// callgrind when `valgrind` runs, else perf when it can count instructions here.
    pub async fn detect() -> Result<Self> {
        let valgrind = Command::new("valgrind").arg("--version").output().await;
        if valgrind.is_ok_and(|o| o.status.success()) {
            return Ok(Tool::Callgrind);
        }
        let perf = Command::new("perf")
            .args(["stat", "-x", ",", "-e", "instructions:u", "true"])
            .output()
            .await;
        match perf {
            Ok(o)
                if o.status.success()
                    && perf_count(&String::from_utf8_lossy(&o.stderr)).is_some() =>
            {
                Ok(Tool::Perf)
            }
            _ => bail!(
                "counting instructions needs valgrind (Debian `valgrind`) or a perf that counts \
                 `instructions` here (`perf stat -e instructions true` says <not supported> in \
                 most virtual machines)"
            ),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Tool::Callgrind => "callgrind",
            Tool::Perf => "perf stat instructions:u",
        }
    }

    /// The command the broker runs under (callgrind's output goes to `dir`); empty for perf,
    /// which attaches to the running process.
    pub fn wrapper(self, dir: &Path) -> Vec<String> {
        match self {
            Tool::Callgrind => vec![
                "valgrind".into(),
                "--tool=callgrind".into(),
                "--collect-atstart=yes".into(),
                // Names written whole in every dump, so each kept dump annotates on its own.
                "--compress-strings=no".into(),
                format!(
                    "--callgrind-out-file={}",
                    dir.join("callgrind.out").display()
                ),
                format!("--vgdb-prefix={}", dir.join("vgdb").display()),
                "--log-file=".to_string() + &dir.join("valgrind.log").display().to_string(),
            ],
            Tool::Perf => Vec::new(),
        }
    }
}

/// Counts the instructions of process `pid` over workloads, one at a time.
pub struct Counter {
    tool: Tool,
    pid: u32,
    dir: PathBuf,
    /// The broker's `HOST`: vgdb names its pipes after the `HOST` of the process it talks to.
    host: String,
    dumps: u32,
    perf: Option<(Child, PathBuf)>,
}

impl Counter {
    pub fn new(tool: Tool, pid: u32, dir: &Path, host: &str) -> Self {
        Self {
            tool,
            pid,
            dir: dir.to_path_buf(),
            host: host.to_string(),
            dumps: 0,
            perf: None,
        }
    }

    /// Starts counting from zero.
    pub async fn begin(&mut self) -> Result<()> {
        match self.tool {
            Tool::Callgrind => self.control(&["--zero"]).await,
            Tool::Perf => {
                let out = self.dir.join(format!("perf-{}.csv", self.dumps));
                let child = Command::new("perf")
                    .args(["stat", "-x", ",", "-e", "instructions:u", "-o"])
                    .arg(&out)
                    .args(["-p", &self.pid.to_string()])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .context("starting perf stat")?;
                // perf needs a moment to attach before the workload starts.
                tokio::time::sleep(Duration::from_millis(300)).await;
                self.perf = Some((child, out));
                Ok(())
            }
        }
    }

    /// Instructions since `begin`.
    pub async fn end(&mut self, label: &str) -> Result<u64> {
        self.dumps += 1;
        match self.tool {
            Tool::Callgrind => {
                let desc = label.replace(|c: char| !c.is_ascii_alphanumeric(), "_");
                self.control(&[&format!("--dump={desc}")]).await?;
                let file = self.dir.join(format!("callgrind.out.{}", self.dumps));
                wait_for_count(&file, callgrind_count).await
            }
            Tool::Perf => {
                let (mut child, out) = self.perf.take().ok_or_else(|| anyhow!("perf not begun"))?;
                if let Some(id) = child.id() {
                    // SAFETY: kill(2) on our own child; SIGINT makes perf print its counts.
                    unsafe { libc::kill(id as libc::pid_t, libc::SIGINT) };
                }
                tokio::time::timeout(CONTROL_TIMEOUT, child.wait())
                    .await
                    .context("perf stat did not stop")??;
                wait_for_count(&out, perf_count).await
            }
        }
    }

    async fn control(&self, args: &[&str]) -> Result<()> {
        let run = Command::new("callgrind_control")
            .env("HOST", &self.host)
            .arg(format!("--vgdb-prefix={}", self.dir.join("vgdb").display()))
            .args(args)
            .arg(self.pid.to_string())
            .output();
        let out = tokio::time::timeout(CONTROL_TIMEOUT, run)
            .await
            .context("callgrind_control did not answer")?
            .context("running callgrind_control")?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() || !text.contains("OK") {
            bail!(
                "callgrind_control {args:?} failed: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(())
    }
}

/// Polls `file` until `parse` finds a count in it (a dump is written after the command returns).
async fn wait_for_count(file: &Path, parse: fn(&str) -> Option<u64>) -> Result<u64> {
    let deadline = Instant::now() + CONTROL_TIMEOUT;
    loop {
        if let Some(n) = std::fs::read_to_string(file)
            .ok()
            .as_deref()
            .and_then(parse)
        {
            return Ok(n);
        }
        if Instant::now() > deadline {
            bail!("no instruction count in {}", file.display());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The `summary:` of a callgrind dump (all events of the part; `Ir` is the only event
/// collected), else its `totals:`.
pub fn callgrind_count(text: &str) -> Option<u64> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    field("summary:").or_else(|| field("totals:"))
}

/// The count of `perf stat -x ,` output: the first field of the `instructions` line.
pub fn perf_count(text: &str) -> Option<u64> {
    text.lines()
        .find(|l| l.contains("instructions"))
        .and_then(|l| l.split(',').next()?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_summary_of_a_callgrind_dump() {
        let dump = "version: 1\npart: 2\n\npositions: line\nevents: Ir\nsummary: 48340\n\nfn=(1) x\n1 5\ntotals: 49018\n";
        assert_eq!(callgrind_count(dump), Some(48_340));
        assert_eq!(callgrind_count("events: Ir\ntotals: 7\n"), Some(7));
        assert_eq!(callgrind_count("events: Ir\n"), None, "an unfinished dump");
    }

    #[test]
    fn reads_perf_csv_and_refuses_an_uncounted_event() {
        let csv = "# started on Sun Dec  6\n\n123456789,,instructions:u,2000000,100.00,,\n";
        assert_eq!(perf_count(csv), Some(123_456_789));
        assert_eq!(
            perf_count("<not supported>,,instructions:u,0,100.00,,\n"),
            None
        );
    }

    #[test]
    fn callgrind_wraps_the_broker_and_writes_into_the_run_directory() {
        let w = Tool::Callgrind.wrapper(Path::new("/tmp/x"));
        assert_eq!(w[0], "valgrind");
        assert!(w.contains(&"--callgrind-out-file=/tmp/x/callgrind.out".to_string()));
        assert!(Tool::Perf.wrapper(Path::new("/tmp/x")).is_empty());
    }
}
