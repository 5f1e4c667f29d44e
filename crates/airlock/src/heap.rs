//! How the C allocator keeps memory the proxy frees (docs/benchmarks.md, "Freed memory
//! kept for reuse").
//!
//! A transfer allocates and frees a buffer per TLS record and per read. With glibc's
//! defaults, freeing a large block hands the top of a thread's heap back to the kernel
//! and the next allocation faults the same pages in again, zeroed: about a fifth of the
//! proxy's CPU during a download. A fixed trim threshold keeps up to 4 MiB of free memory
//! per heap for reuse instead; a fixed mmap threshold keeps buffers under 1 MiB in the
//! heaps (glibc's adaptive thresholds are turned off by setting either).

/// Sets the allocator's thresholds (glibc only). Call first thing in `main`, before any
/// thread starts. A failure leaves glibc's defaults: only speed depends on it.
pub(crate) fn keep_freed_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        /// Free memory at the top of a heap that is kept rather than returned.
        const TRIM_THRESHOLD: libc::c_int = 4 << 20;
        /// Allocations from this size up get their own mapping (returned when freed).
        const MMAP_THRESHOLD: libc::c_int = 1 << 20;
        // SAFETY: mallopt only changes the allocator's tuning parameters, each set here to
        // a documented parameter number and a value in its range. It runs before any other
        // thread exists, so no allocation races with the change.
        unsafe {
            libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD);
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD);
        }
    }
}
