//! The broker's memory over a fuzz run (issue 9 item 11: names must not make it grow without
//! bound): resident size before the first request, after each route and after the last,
//! and the kernel's high-water mark, read from `/proc/<pid>/status`.

/// One reading of a process's `VmRSS` and `VmHWM`, in KiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub rss_kib: u64,
    pub hwm_kib: u64,
}

/// Reads `pid`'s status; `None` when the process is gone or the kernel has no `/proc`.
pub fn sample(pid: u32) -> Option<Sample> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_status(&status)
}

fn parse_status(status: &str) -> Option<Sample> {
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.trim().trim_end_matches("kB").trim().parse().ok())
    };
    Some(Sample {
        rss_kib: field("VmRSS:")?,
        hwm_kib: field("VmHWM:")?,
    })
}

/// The samples of one run. A broker restarted mid-run starts a new process, whose
/// high-water mark starts over; `restarts` says so in the report.
#[derive(Default)]
pub struct Trace {
    pub before: Option<Sample>,
    pub after_route: Vec<Option<Sample>>,
    pub restarts: usize,
}

impl Trace {
    /// The report's lines: before, after, peak (MiB) and the RSS after every route.
    pub fn render(&self) -> String {
        let mib = |s: Option<Sample>, f: fn(Sample) -> u64| {
            s.map_or("?".to_string(), |s| format!("{:.1}", f(s) as f64 / 1024.0))
        };
        let last = self.after_route.last().copied().flatten();
        let per_route: Vec<String> = self
            .after_route
            .iter()
            .map(|s| mib(*s, |s| s.rss_kib))
            .collect();
        let mut out = format!(
            "broker memory (MiB): RSS before {}, after {}, peak (VmHWM) {}",
            mib(self.before, |s| s.rss_kib),
            mib(last, |s| s.rss_kib),
            mib(last, |s| s.hwm_kib),
        );
        if self.restarts > 0 {
            out += &format!(
                " — the broker was restarted {}×: the peak is the last process's",
                self.restarts
            );
        }
        out += &format!("\nRSS after each route (MiB): {}", per_route.join(" "));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_rss_and_high_water_mark() {
        let status = "Name:\tqueen\nVmPeak:\t  900 kB\nVmHWM:\t    2048 kB\nVmRSS:\t    1024 kB\n";
        assert_eq!(
            parse_status(status),
            Some(Sample {
                rss_kib: 1024,
                hwm_kib: 2048
            })
        );
        assert_eq!(parse_status("Name:\tkthreadd\n"), None);
    }

    #[test]
    fn this_process_has_a_resident_size() {
        let s = sample(std::process::id()).expect("/proc/self/status");
        assert!(s.rss_kib > 0 && s.hwm_kib >= s.rss_kib);
    }
}
