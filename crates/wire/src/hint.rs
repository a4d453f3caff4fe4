//! A cache hint the hot paths share: load a line that will be read soon.
//!
//! The crate's one `unsafe` block: a prefetch never faults and changes no
//! result, whatever the address (it is not dereferenced).

/// Hints the CPU to load the cache line at `p` into all cache levels (no
/// effect on results; nothing on other architectures).
#[inline(always)]
#[allow(unsafe_code)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is a hint; it never faults, whatever the address.
    unsafe {
        core::arch::x86_64::_mm_prefetch(p as *const i8, core::arch::x86_64::_MM_HINT_T0);
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
