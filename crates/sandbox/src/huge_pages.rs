//! Transparent huge pages for the commands a process starts.
//!
//! A process that turns huge pages off for itself ([`turn_off`], as the server does to keep its
//! allocator's memory small) passes the flag (`PR_SET_THP_DISABLE`) on to every child, across
//! `exec`. The commands it runs for tenants and the MCP servers it starts should run under the
//! host's policy instead, so every spawn clears the flag in the child ([`restore`]) once this
//! process set it itself. A flag the process inherited from its own parent is the host's policy,
//! and stays. Elsewhere than on Linux there is no such flag, and all of this does nothing.

use std::sync::atomic::{AtomicBool, Ordering};

/// Set once this process turned huge pages off for itself.
static GIVE_BACK: AtomicBool = AtomicBool::new(false);

/// Turns huge pages off for this process if they are on, and from then on has [`restore`] give
/// children the host's policy back. Returns whether it turned them off (`false` when they were off
/// already, by the host's choice, or the kernel has no such flag).
pub fn turn_off() -> bool {
    if disabled() != Some(false) {
        return false;
    }
    let off = set_disabled(true);
    if off {
        GIVE_BACK.store(true, Ordering::Relaxed);
    }
    off
}

/// Whether huge pages are off for this process (`PR_GET_THP_DISABLE`); `None` where the kernel
/// cannot say.
pub fn disabled() -> Option<bool> {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only reads a flag of this process.
        #[allow(unsafe_code)]
        let answer = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
        (answer >= 0).then_some(answer == 1)
    }
    #[cfg(not(target_os = "linux"))]
    None
}

/// Clears the flag in `command`'s child when this process turned huge pages off for itself.
pub fn restore(command: &mut std::process::Command) {
    #[cfg(target_os = "linux")]
    if GIVE_BACK.load(Ordering::Relaxed) {
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl with integer arguments is async-signal-safe and touches no memory of ours.
        #[allow(unsafe_code)]
        unsafe {
            command.pre_exec(|| {
                // Only a flag of the child; a kernel without it changes nothing.
                let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
                Ok(())
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = command;
}

fn set_disabled(off: bool) -> bool {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: prctl with integer arguments only sets a flag of this process.
        #[allow(unsafe_code)]
        let done = unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, libc::c_ulong::from(off), 0, 0, 0) };
        done == 0
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = off;
        false
    }
}
