//! Transparent huge pages for the commands a process starts.
//!
//! A process that turns huge pages off for itself (`prctl(PR_SET_THP_DISABLE)`, as the server does
//! to keep its allocator's memory small) passes the flag on to every child, across `exec`. The
//! commands it runs for tenants and the MCP servers it starts should run under the host's policy
//! instead, so the process says once that it set the flag itself ([`given_back_to_children`]) and
//! every spawn clears it in the child ([`restore`]). A flag the process inherited from its own
//! parent is the host's policy, and stays.

use std::sync::atomic::{AtomicBool, Ordering};

static GIVE_BACK: AtomicBool = AtomicBool::new(false);

/// Marks that this process turned huge pages off for itself: from now on [`restore`] clears the
/// flag in the children it is given.
pub fn given_back_to_children() {
    GIVE_BACK.store(true, Ordering::Relaxed);
}

/// Clears the flag in `command`'s child when this process set it for itself (see the module).
#[allow(unsafe_code)]
pub fn restore(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    if !GIVE_BACK.load(Ordering::Relaxed) {
        return;
    }
    // SAFETY: prctl with integer arguments is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            // Only a flag of the child; a kernel without it changes nothing.
            let _ = libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0);
            Ok(())
        });
    }
}

/// Whether huge pages are off for this process (`PR_GET_THP_DISABLE`); `None` where the kernel
/// cannot say.
#[allow(unsafe_code)]
pub fn disabled() -> Option<bool> {
    // SAFETY: prctl with integer arguments only reads a flag of this process.
    let answer = unsafe { libc::prctl(libc::PR_GET_THP_DISABLE, 0, 0, 0, 0) };
    (answer >= 0).then_some(answer == 1)
}

/// Turns huge pages off for this process; returns whether the kernel took it.
#[allow(unsafe_code)]
pub fn disable() -> bool {
    // SAFETY: prctl with integer arguments only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) == 0 }
}

/// Turns huge pages back on for this process (undoes [`disable`]); returns whether the kernel took
/// it.
#[allow(unsafe_code)]
pub fn enable() -> bool {
    // SAFETY: as in `disable`.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) == 0 }
}
