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
//! against 140–142 with Tokio's cap of 512 in the same session.

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
