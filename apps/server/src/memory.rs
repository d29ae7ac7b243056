//! The allocator's side of resident memory.
//!
//! The server allocates with mimalloc (see `main.rs`). By default mimalloc keeps freed pages for a
//! second before it returns them to the system, per thread. In a 30-minute soak (docs/benchmarks.md,
//! "Soak") a purge delay of 0 held resident memory at 100–108 MiB for the first ten minutes where
//! the default held 137–147, at no cost in calls per second; both then rose to the same plateau
//! (about 160 MiB). So the server makes 0 the default at start; mimalloc's own reading of the
//! environment (`MIMALLOC_PURGE_DELAY` in any case, or its older name `MIMALLOC_RESET_DELAY`)
//! still wins. Much of the rise was threads, each with pages of its own: with the blocking pool
//! capped in `main` (`--blocking-threads`, 32 threads here) a later soak ended at 110–113 MiB,
//! against 140–142 with Tokio's cap of 512 in the same session. Most of what was left was
//! transparent huge pages over mimalloc's arena, which the server now turns off for itself
//! ([`keep_huge_pages_off`]): the same soak then held 51–53 MiB from its first minute to its
//! end.

/// Bytes Rust code has allocated and not freed yet, when the server is built with the `heap-stats`
/// feature and its allocator is [`Counted`]; `None` otherwise. Set beside the resident size, it
/// tells Rust data that grows (a leak) from memory the allocator keeps. SQLite and zstd allocate
/// through the C library's allocator, outside this count.
pub fn live_heap_bytes() -> Option<i64> {
    // A process whose allocator is `Counted` always holds something: 0 means it is not installed
    // (a test binary built with the feature, say).
    #[cfg(feature = "heap-stats")]
    return Some(counted::live_bytes()).filter(|bytes| *bytes > 0);
    #[cfg(not(feature = "heap-stats"))]
    None
}

#[cfg(feature = "heap-stats")]
pub use counted::Counted;

/// mimalloc wrapped in counters of live bytes: a diagnostic build (`--features heap-stats`), not the
/// default, since it adds an atomic add to every allocation and free.
#[cfg(feature = "heap-stats")]
mod counted {
    use std::alloc::{GlobalAlloc, Layout};
    use std::cell::Cell;
    use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering::Relaxed};

    /// Counters, one cache line each, shared out among threads so that they seldom contend.
    const STRIPES: usize = 16;

    #[repr(align(64))]
    struct Stripe(AtomicI64);

    static LIVE: [Stripe; STRIPES] = [const { Stripe(AtomicI64::new(0)) }; STRIPES];
    static NEXT: AtomicUsize = AtomicUsize::new(0);

    thread_local! {
        // Constant-initialised and without a destructor: reading it never allocates, so the
        // allocator may use it, even while the thread is being torn down.
        static STRIPE: Cell<usize> = const { Cell::new(usize::MAX) };
    }

    fn add(bytes: i64) {
        let stripe = STRIPE
            .try_with(|mine| {
                if mine.get() == usize::MAX {
                    mine.set(NEXT.fetch_add(1, Relaxed) % STRIPES);
                }
                mine.get()
            })
            .unwrap_or(0);
        LIVE[stripe].0.fetch_add(bytes, Relaxed);
    }

    fn size(layout: Layout) -> i64 {
        i64::try_from(layout.size()).unwrap_or(i64::MAX)
    }

    /// The sum of all threads' counters.
    pub(super) fn live_bytes() -> i64 {
        LIVE.iter().map(|stripe| stripe.0.load(Relaxed)).sum()
    }

    /// mimalloc, counting the bytes asked for and not yet freed.
    #[derive(Debug, Default, Clone, Copy)]
    pub struct Counted;

    // SAFETY: every method hands the same layout and pointer on to mimalloc, which upholds
    // `GlobalAlloc`'s contract; the counting around it only touches atomics and a constant-initialised
    // thread-local, and never allocates.
    #[allow(unsafe_code)]
    unsafe impl GlobalAlloc for Counted {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc`, passed on.
            let pointer = unsafe { mimalloc::MiMalloc.alloc(layout) };
            if !pointer.is_null() {
                add(size(layout));
            }
            pointer
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
            let pointer = unsafe { mimalloc::MiMalloc.alloc_zeroed(layout) };
            if !pointer.is_null() {
                add(size(layout));
            }
            pointer
        }

        unsafe fn dealloc(&self, pointer: *mut u8, layout: Layout) {
            // SAFETY: the caller's contract for `dealloc`, passed on.
            unsafe { mimalloc::MiMalloc.dealloc(pointer, layout) };
            add(-size(layout));
        }

        unsafe fn realloc(&self, pointer: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            // SAFETY: the caller's contract for `realloc`, passed on.
            let moved = unsafe { mimalloc::MiMalloc.realloc(pointer, layout, new_size) };
            if !moved.is_null() {
                add(i64::try_from(new_size).unwrap_or(i64::MAX) - size(layout));
            }
            moved
        }
    }
}

/// mimalloc's `mi_option_allow_thp` (`mimalloc.h`, version 3), likewise not exported.
const ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// Keeps transparent huge pages out of the server's memory, unless the environment allows them
/// (`MIMALLOC_ALLOW_THP=1`, read by mimalloc itself). Returns whether this call turned them off.
///
/// mimalloc asks the kernel for huge pages over its arena (`madvise(MADV_HUGEPAGE)`), so under
/// Linux's default `madvise` policy a page fault there maps 2 MiB at once, and `khugepaged` later
/// fills in whole 2 MiB ranges where a few 4 KiB pages were in use: in an 800 s soak the server
/// held 88–100 MiB resident with them, and 44–48 MiB without, for the same 4–6 MiB of Rust data
/// (docs/benchmarks.md, "Huge pages and the reconciler"). mimalloc reads its options, and maps
/// its first arena, before `main` runs, so telling mimalloc is not enough: the process turns them
/// off for itself (`PR_SET_THP_DISABLE`, which also covers memory already mapped and
/// `khugepaged`). Children would inherit that; `sandbox::huge_pages` gives the commands and MCP
/// servers the server starts the host's policy back. Call it before any other thread exists, as
/// [`return_freed_memory_promptly`].
pub fn keep_huge_pages_off() -> bool {
    // SAFETY: as in `return_freed_memory_promptly`: one checked entry of mimalloc's option table,
    // written before other threads start.
    #[allow(unsafe_code)]
    let allowed = unsafe {
        libmimalloc_sys::mi_option_set_default(ALLOW_THP, 0);
        libmimalloc_sys::mi_option_get(ALLOW_THP) != 0
    };
    // Off already (the host's choice, or `MIMALLOC_ALLOW_THP=0`): `turn_off` leaves it, and has
    // nothing to give back.
    !allowed && sandbox::huge_pages::turn_off()
}

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, version 3 of the library that
/// `libmimalloc-sys` builds): `libmimalloc-sys` does not export the constant.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Makes mimalloc return freed memory to the system at once, unless the environment sets the purge
/// delay. Call it before any other thread exists (mimalloc's options are not synchronised).
/// Returns the purge delay in force afterwards, in milliseconds.
pub fn return_freed_memory_promptly() -> i64 {
    // SAFETY: `mi_option_set_default` writes one entry of mimalloc's option table (an index it
    // checks) only when the environment did not set it; called before other threads start, so
    // nothing reads the entry meanwhile.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set_default(PURGE_DELAY, 0);
    }
    purge_delay()
}

/// The purge delay mimalloc uses now (milliseconds; -1: never).
pub fn purge_delay() -> i64 {
    // SAFETY: `mi_option_get` reads one entry of mimalloc's option table (reading the environment
    // the first time); any index is checked against the table's length by mimalloc itself.
    #[allow(unsafe_code)]
    let value = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
    #[allow(clippy::useless_conversion, reason = "`c_long` is 32 bits wide on some targets")]
    i64::from(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[cfg(feature = "heap-stats")]
    #[global_allocator]
    static ALLOCATOR: Counted = Counted;

    #[cfg(feature = "heap-stats")]
    #[test]
    fn the_counted_allocator_follows_live_bytes_through_growth_and_frees() {
        // Steps far larger than what other tests' threads allocate meanwhile under `cargo test`
        // (never touched, so they cost no memory).
        const STEP: i64 = 64 << 20;
        const MARGIN: i64 = 8 << 20;
        let before = live_heap_bytes().expect("counted in this build");
        let mut held: Vec<u8> = Vec::with_capacity(64 << 20);
        let grown = live_heap_bytes().unwrap();
        held.reserve_exact(256 << 20);
        held.push(1);
        let reallocated = live_heap_bytes().unwrap();
        let zeroed = vec![0u8; 64 << 20];
        let with_zeroed = live_heap_bytes().unwrap();
        drop((held, zeroed));
        let after = live_heap_bytes().unwrap();
        assert!((grown - before - STEP).abs() < MARGIN, "{before} -> {grown}");
        assert!((reallocated - grown - 3 * STEP).abs() < MARGIN, "{grown} -> {reallocated}");
        assert!((with_zeroed - reallocated - STEP).abs() < MARGIN, "{reallocated} -> {with_zeroed}");
        assert!((after - before).abs() < MARGIN, "{before} -> {after}");
        let text = crate::metrics::Metrics::default().render(&crate::metrics::Gauges::default());
        assert!(
            text.contains("\n# TYPE toolhost_heap_live_bytes gauge\ntoolhost_heap_live_bytes "),
            "{text}"
        );
    }

    /// The operator's setting for huge pages, read by mimalloc itself.
    const ALLOW_THP_ENV: &str = "MIMALLOC_ALLOW_THP";

    #[test]
    fn huge_pages_go_off_for_the_process_unless_the_environment_allows_them() {
        use sandbox::huge_pages;
        // SAFETY: reads one checked entry of mimalloc's option table.
        #[allow(unsafe_code)]
        let option = || unsafe { libmimalloc_sys::mi_option_get(ALLOW_THP) };
        if std::env::var_os(ALLOW_THP_ENV).is_some() {
            // mimalloc's reading of the variable wins: whatever it made of it stays.
            let before = option();
            keep_huge_pages_off();
            assert_eq!(option(), before);
            return;
        }
        // mimalloc's default on Linux (allowed): the index is the right one.
        assert_eq!(option(), 1);
        let was_off = huge_pages::disabled();
        let turned_off = keep_huge_pages_off();
        assert_eq!(option(), 0);
        if was_off == Some(false) {
            assert!(turned_off);
            assert_eq!(huge_pages::disabled(), Some(true), "the kernel's flag follows the option");
        } else {
            assert!(!turned_off, "a flag set before is the host's, and not the server's to give back");
        }
    }

    #[cfg(not(feature = "heap-stats"))]
    #[test]
    fn without_the_feature_no_live_bytes_are_claimed() {
        assert_eq!(live_heap_bytes(), None);
        assert!(
            !crate::metrics::Metrics::default().render(&crate::metrics::Gauges::default()).contains("heap")
        );
    }

    /// The operator's setting, read by mimalloc itself (the name as documented).
    const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

    #[test]
    fn the_option_is_mimallocs_purge_delay_and_the_server_turns_it_to_zero() {
        // Before anything sets it, the option holds mimalloc's own default for the purge delay
        // (1 000 ms in version 3) or the environment's value: the index is the right one.
        let expected = std::env::var(PURGE_DELAY_ENV).ok().and_then(|v| v.parse().ok()).unwrap_or(1000);
        assert_eq!(purge_delay(), expected);
        let now = return_freed_memory_promptly();
        if std::env::var_os(PURGE_DELAY_ENV).is_none() {
            assert_eq!(now, 0);
        } else {
            assert_eq!(now, expected, "the operator's setting wins");
        }
    }
}
