//! Process-wide settings of the C allocator (glibc's malloc), applied once at boot before any
//! thread starts (docs/performance.md, "Memory").
//!
//! glibc serves allocations above its mmap threshold (128 KiB at start) with `mmap`, handed
//! back to the kernel on free, but by default raises that threshold to the size of every such
//! block freed, up to 32 MiB. The broker's large buffers (request bodies, segment blobs, the
//! PostgreSQL connections' bind and codec buffers) then come from the heap arenas, where freed
//! space stays resident and fragments: the broker's RSS climbed to about twice its live heap
//! under push load. Fixing the threshold keeps those buffers on `mmap`.

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
