//! The allocator's side of resident memory.
//!
//! The server allocates with mimalloc (see `main.rs`). By default mimalloc keeps freed pages for a
//! second before it returns them to the system, per thread, and under steady load some are never
//! returned: a 30-minute soak grew from 92 to 149 MiB resident, with `MIMALLOC_PURGE_DELAY=0` it
//! stayed at 84–91 MiB at the same throughput (docs/benchmarks.md, "Soak"). mimalloc reads its
//! environment before `main` runs, so the server sets the option itself at start, unless the
//! operator's environment already names it.

/// mimalloc's `mi_option_purge_delay` (`mimalloc.h`, version 3 of the library that
/// `libmimalloc-sys` builds): `libmimalloc-sys` does not export the constant.
const PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// The operator's own setting, which wins over the server's.
const PURGE_DELAY_ENV: &str = "MIMALLOC_PURGE_DELAY";

/// Makes mimalloc return freed memory to the system at once, unless `MIMALLOC_PURGE_DELAY` is set
/// in the environment. Returns the purge delay in force afterwards, in milliseconds.
pub fn return_freed_memory_promptly() -> i64 {
    if std::env::var_os(PURGE_DELAY_ENV).is_none() {
        set_purge_delay(0);
    }
    purge_delay()
}

/// The purge delay mimalloc uses now (milliseconds; -1: never).
pub fn purge_delay() -> i64 {
    // SAFETY: `mi_option_get` reads one entry of mimalloc's option table; any index is checked
    // against the table's length by mimalloc itself.
    #[allow(unsafe_code)]
    let value = unsafe { libmimalloc_sys::mi_option_get(PURGE_DELAY) };
    #[allow(clippy::useless_conversion, reason = "`c_long` is 32 bits wide on some targets")]
    i64::from(value)
}

fn set_purge_delay(ms: i64) {
    let value = std::os::raw::c_long::try_from(ms).unwrap_or(0);
    // SAFETY: `mi_option_set` writes one entry of mimalloc's option table (an index it checks);
    // mimalloc reads options on each use, so setting one while threads allocate is allowed.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(PURGE_DELAY, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
