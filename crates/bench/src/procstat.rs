//! Process accounting from `/proc`: CPU seconds and peak RSS of the broker, and the CPU of a
//! whole PostgreSQL cluster (postmaster, its live children, and its reaped children).

use std::fs;

/// Clock ticks per second for `/proc/<pid>/stat` times.
fn ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as f64
    } else {
        100.0
    }
}

/// The fields of `/proc/<pid>/stat` after the command name (which may contain spaces).
fn stat_fields(pid: u32) -> Option<Vec<u64>> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = text.rsplit_once(')')?.1;
    // rest starts with the state letter (field 3); keep numeric fields from field 4 on.
    Some(
        rest.split_whitespace()
            .skip(1)
            .map(|f| f.parse().unwrap_or(0))
            .collect(),
    )
}

/// Indexes into `stat_fields`' vector, which starts at proc(5) field 4 (ppid): field N is at
/// index N - 4.
const PPID: usize = 0;
const UTIME: usize = 10;
const STIME: usize = 11;
const CUTIME: usize = 12;
const CSTIME: usize = 13;

/// User + system CPU seconds of `pid` itself (not its children).
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let f = stat_fields(pid)?;
    Some((f.get(UTIME)? + f.get(STIME)?) as f64 / ticks_per_second())
}

/// CPU seconds of a PostgreSQL cluster: the postmaster's own and reaped children's time plus
/// every live child's. Backends that exit move from the second sum into the first, so the
/// total is monotone and deltas count short-lived connections too.
pub fn cluster_cpu_seconds(postmaster: u32) -> Option<f64> {
    let pm = stat_fields(postmaster)?;
    let mut ticks = pm.get(UTIME)? + pm.get(STIME)? + pm.get(CUTIME)? + pm.get(CSTIME)?;
    for entry in fs::read_dir("/proc").ok()?.flatten() {
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        if let Some(f) = stat_fields(pid) {
            if f.get(PPID).copied() == Some(u64::from(postmaster)) {
                ticks += f.get(UTIME).copied().unwrap_or(0) + f.get(STIME).copied().unwrap_or(0);
            }
        }
    }
    Some(ticks as f64 / ticks_per_second())
}

/// A `kB` field of `/proc/<pid>/status` (e.g. `VmHWM`) in bytes.
fn status_bytes(pid: u32, field: &str) -> Option<u64> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status
        .lines()
        .find(|l| l.split(':').next() == Some(field))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Peak resident set size (`VmHWM`) of `pid` in bytes.
pub fn peak_rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmHWM")
}

/// Current resident set size (`VmRSS`) of `pid` in bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    status_bytes(pid, "VmRSS")
}

/// Resets `VmHWM` to the current RSS (writing 5 to `clear_refs`, Linux ≥ 4.0), so each result
/// row reports its own peak. Needs to own the process (or root); false when it could not.
pub fn reset_peak_rss(pid: u32) -> bool {
    fs::write(format!("/proc/{pid}/clear_refs"), "5").is_ok()
}

/// CPU seconds the whole machine spent busy (all cores: user, nice, system, irq, softirq,
/// steal from the first line of `/proc/stat`).
pub fn machine_busy_seconds() -> Option<f64> {
    let stat = fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .map(|v| v.parse().unwrap_or(0))
        .collect();
    let busy =
        f.first()? + f.get(1)? + f.get(2)? + f.get(5)? + f.get(6)? + f.get(7).copied().unwrap_or(0);
    Some(busy as f64 / ticks_per_second())
}

/// This process's CPU seconds including reaped children (pgbench, pip).
pub fn self_cpu_seconds() -> Option<f64> {
    let f = stat_fields(std::process::id())?;
    Some(
        (f.get(UTIME)? + f.get(STIME)? + f.get(CUTIME)? + f.get(CSTIME)?) as f64
            / ticks_per_second(),
    )
}

/// Raises the open-file soft limit to the hard limit: 1 000 parked long-polls need as many
/// sockets, and a spawned broker inherits the limit.
pub fn raise_nofile_limit() {
    // SAFETY: getrlimit/setrlimit write/read only the struct we pass.
    unsafe {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_process() {
        let me = std::process::id();
        assert!(cpu_seconds(me).is_some());
        assert!(peak_rss_bytes(me).unwrap() > 0);
        assert!(rss_bytes(me).unwrap() > 0);
        assert!(cluster_cpu_seconds(me).is_some());
        assert!(cpu_seconds(u32::MAX).is_none());
        assert!(machine_busy_seconds().unwrap() >= self_cpu_seconds().unwrap());
    }
}
