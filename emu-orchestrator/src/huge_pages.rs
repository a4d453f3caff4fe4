//! The heap of a virtual-time run in transparent huge pages.
//!
//! A virtual-time run is bound by cache and TLB misses: every hop loads a
//! frame that waited in a queue while thousands of other frames moved, and
//! the frames of a loaded fabric spread over a heap of a hundred megabytes
//! or more, far more than the TLB covers in 4 KiB pages. Most Linux
//! distributions give transparent huge pages only to memory that asks for
//! them (`/sys/kernel/mm/transparent_hugepage/enabled` is `madvise`), and
//! glibc's allocator asks only when its `glibc.malloc.hugetlb=1` tunable is
//! set, which it reads once, at start-up. So `weft run` and `weft compare`
//! start themselves again with the tunable added to `GLIBC_TUNABLES`
//! (BENCHMARKS.md, "The heap in huge pages, one optimisation unit, no stack
//! detours": 7-8 % faster on RoCE runs, results identical, the same peak
//! memory).
//!
//! Nothing changes where it would do nothing or could not work: THP
//! `always` (already huge) or `never`, the tunable already set (by the
//! user, or by the start before), `WEFT_SMALL_PAGES` set (to measure
//! without), or no path to the running binary. Another C library than
//! glibc ignores the tunable. A failed start goes on as it is.

use std::ffi::OsString;

/// The tunable that makes glibc's malloc ask for huge pages.
const TUNABLE: &str = "glibc.malloc.hugetlb";

/// Starts this process again with glibc's allocator asking for
/// transparent huge pages, where that changes anything; returns only when
/// it does not.
pub fn heap_in_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        if std::env::var_os("WEFT_SMALL_PAGES").is_some() {
            return;
        }
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
        let tunables = std::env::var_os("GLIBC_TUNABLES");
        let Some(value) = with_tunable(&thp, tunables.as_ref()) else { return };
        let Ok(exe) = std::env::current_exe() else { return };
        // `exec` returns only if it failed: carry on in small pages.
        let _ = std::process::Command::new(exe).args(std::env::args_os().skip(1)).env("GLIBC_TUNABLES", value).exec();
    }
}

/// The `GLIBC_TUNABLES` value to start again with, given the THP mode
/// (the contents of `/sys/kernel/mm/transparent_hugepage/enabled`, the
/// chosen mode in brackets) and the current value; `None` where starting
/// again would change nothing.
fn with_tunable(thp_mode: &str, tunables: Option<&OsString>) -> Option<OsString> {
    if !thp_mode.contains("[madvise]") {
        return None;
    }
    match tunables.map(|t| t.to_str()) {
        None | Some(Some("")) => Some(format!("{TUNABLE}=1").into()),
        Some(Some(t)) if t.contains(TUNABLE) => None,
        Some(Some(t)) => Some(format!("{t}:{TUNABLE}=1").into()),
        // Not UTF-8: leave it alone.
        Some(None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tunable_is_added_once_and_only_where_thp_is_asked_for() {
        let madvise = "always [madvise] never\n";
        assert_eq!(with_tunable(madvise, None), Some("glibc.malloc.hugetlb=1".into()));
        assert_eq!(with_tunable(madvise, Some(&"".into())), Some("glibc.malloc.hugetlb=1".into()));
        assert_eq!(
            with_tunable(madvise, Some(&"glibc.malloc.arena_max=2".into())),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1".into())
        );
        // Set already (the second start, or the user's choice): no loop.
        assert_eq!(with_tunable(madvise, Some(&"glibc.malloc.hugetlb=0".into())), None);
        assert_eq!(with_tunable(madvise, Some(&"glibc.malloc.hugetlb=1".into())), None);
        assert_eq!(with_tunable("[always] madvise never\n", None), None);
        assert_eq!(with_tunable("always madvise [never]\n", None), None);
        assert_eq!(with_tunable("", None), None, "no THP in this kernel");
    }
}
