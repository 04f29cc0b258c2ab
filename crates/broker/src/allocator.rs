//! Process-wide settings of the C allocator (glibc's malloc), applied once at boot before any
//! thread starts (docs/performance.md, "Memory").
//!
//! glibc serves allocations above its mmap threshold (128 KiB at start) with `mmap`, handed
//! back to the kernel on free, but by default raises that threshold to the size of every such
//! block freed, up to 32 MiB. The broker's large buffers (request bodies, segment blobs, the
//! PostgreSQL connections' bind and codec buffers) then come from the heap arenas, where freed
//! space stays resident and fragments: the broker's RSS climbed to about twice its live heap
//! under push load. Fixing the threshold keeps those buffers on `mmap`.
//!
//! Below the threshold, memory freed inside the arenas stays resident too: after a burst of
//! pops and acks the broker's RSS stood ~16 MB above what `malloc_trim` brings it back to. A
//! thread started at boot calls `malloc_trim(0)` at a fixed period, which hands every free page
//! of every arena back to the kernel (docs/performance.md §7.2).

use std::time::Duration;

/// Sets glibc's mmap threshold to `kib` KiB (which also turns its dynamic raise off); 0 leaves
/// glibc's default. An environment variable of glibc's own (`MALLOC_MMAP_THRESHOLD_`) wins.
/// Answers whether the setting was applied.
pub fn fix_mmap_threshold(kib: usize) -> bool {
    if kib == 0 || std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some() {
        return false;
    }
    apply(kib.saturating_mul(1024))
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn apply(bytes: usize) -> bool {
    let Ok(bytes) = libc::c_int::try_from(bytes) else {
        return false;
    };
    // SAFETY: mallopt only adjusts the allocator's parameters; it is called before the
    // runtime starts any thread.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, bytes) == 1 }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn apply(_bytes: usize) -> bool {
    false
}

/// Starts the thread that returns free arena pages to the kernel every `every`; a zero period
/// starts nothing. Answers whether it runs.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub fn start_trimmer(every: Duration) -> bool {
    if every.is_zero() {
        return false;
    }
    std::thread::Builder::new()
        .name("queen-malloc-trim".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            // SAFETY: malloc_trim only returns free pages to the kernel; it takes the arenas'
            // locks like any allocation does.
            unsafe {
                libc::malloc_trim(0);
            }
        })
        .is_ok()
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub fn start_trimmer(_every: Duration) -> bool {
    false
}
