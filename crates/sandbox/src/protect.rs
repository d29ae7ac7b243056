//! Folders inside a writable tree that stay read-only: a repository's hooks and configuration, and
//! the project's Toolhost configuration.
//!
//! A command that may write in the working directory could otherwise plant a git hook (or set
//! `core.hooksPath` / `core.fsmonitor` in `.git/config`) that runs, unsandboxed, the next time the
//! person uses git there — or rewrite the project's Toolhost configuration to widen its own rules.
//! Landlock only grants, so it cannot take a subfolder back out of a writable tree. Instead the
//! command gets a mount namespace of its own in which each protected path is bind-mounted
//! read-only over itself: writes there fail with "Read-only file system", for the command and
//! everything it starts, and nothing changes for anyone else.
//!
//! The same namespace seals the rest of the filesystem: everything but the writable folders is
//! remounted read-only, so what Landlock does not govern — `chmod`, `chown`, timestamps, extended
//! attributes — cannot touch files outside either. That matters most for a server running as root:
//! a command keeps uid 0 (without capabilities), and uid 0 owns the system's files.
//!
//! A repository's `.git` folder is bound over itself too (writable): a mountpoint cannot be
//! renamed, so `mv .git elsewhere` cannot carry the repository out from under its read-only hooks.
//!
//! Root (with `CAP_SYS_ADMIN`) makes the namespace directly; anyone else through a user namespace
//! that maps only their own ids. Both happen in the child, before its capabilities are dropped and
//! before the seccomp filter forbids `mount` and `unshare`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What is protected inside each writable root.
pub const PROTECTED: &[&str] = &[
    ".git/hooks",
    ".git/config",
    ".toolhost",
    ".claude/settings.json",
    ".claude/settings.local.json",
    ".claude/hooks",
];

/// The protected paths that exist under `roots`.
pub fn protected_paths(roots: &[PathBuf]) -> Vec<PathBuf> {
    roots
        .iter()
        .flat_map(|root| PROTECTED.iter().map(move |relative| root.join(relative)))
        // A link could point anywhere; only what really is there is bound.
        .filter(|path| std::fs::symlink_metadata(path).is_ok_and(|meta| !meta.file_type().is_symlink()))
        .collect()
}

/// Everything the child needs, made before the fork.
#[derive(Debug, Default)]
pub struct Plan {
    /// Bound read-only over themselves.
    paths: Vec<CString>,
    /// Bound over themselves and left writable: `.git` folders, pinned so they cannot be renamed.
    pinned: Vec<CString>,
    /// Folders left writable when the rest is sealed read-only; empty: nothing is sealed.
    writable: Vec<CString>,
    /// Entered again once the mounts are made: the working directory the child was given still
    /// points into the mounts as they were, which are read-only now.
    cwd: Option<CString>,
    uid_map: Vec<u8>,
    gid_map: Vec<u8>,
}

/// `struct mount_attr` of `mount_setattr(2)`.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const AT_RECURSIVE: libc::c_uint = 0x8000;

fn c_paths(paths: &[PathBuf]) -> io::Result<Vec<CString>> {
    paths.iter().map(|path| CString::new(path.as_os_str().as_bytes()).map_err(io::Error::other)).collect()
}

impl Plan {
    /// A plan for `paths` (nothing happens in the child when it is empty).
    ///
    /// # Errors
    ///
    /// A path with a NUL byte.
    pub fn new(paths: &[PathBuf]) -> io::Result<Self> {
        // SAFETY: getuid and getgid cannot fail and touch no memory.
        #[allow(unsafe_code)]
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        Ok(Self {
            paths: c_paths(paths)?,
            uid_map: format!("{uid} {uid} 1\n").into_bytes(),
            gid_map: format!("{gid} {gid} 1\n").into_bytes(),
            ..Self::default()
        })
    }

    /// Also seals everything but `writable` read-only, and pins the `.git` folders among `pinned`.
    ///
    /// # Errors
    ///
    /// A path with a NUL byte.
    pub fn sealing(mut self, writable: &[PathBuf], pinned: &[PathBuf], cwd: &Path) -> io::Result<Self> {
        self.writable = c_paths(writable)?;
        self.pinned = c_paths(pinned)?;
        self.cwd = Some(CString::new(cwd.as_os_str().as_bytes()).map_err(io::Error::other)?);
        Ok(self)
    }

    /// Whether there is anything to do.
    pub fn is_empty(&self) -> bool {
        self.paths.is_empty() && self.writable.is_empty()
    }

    /// In the child between fork and exec: a mount namespace with every path bound read-only.
    /// Only system calls on the data prepared in [`Plan::new`].
    #[allow(unsafe_code)]
    pub fn apply(&self) -> io::Result<()> {
        if self.is_empty() {
            return Ok(());
        }
        let check = |rc: libc::c_int| if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) };
        // SAFETY: plain system calls on NUL-terminated strings and buffers owned by `self`, which
        // outlives the call; nothing allocates or takes a lock.
        unsafe {
            if libc::unshare(libc::CLONE_NEWNS) != 0 {
                // Not privileged: a user namespace that maps only our own ids grants the right to
                // mount inside it, and nothing outside.
                check(libc::unshare(libc::CLONE_NEWUSER | libc::CLONE_NEWNS))?;
                write_file(c"/proc/self/setgroups", b"deny")?;
                write_file(c"/proc/self/uid_map", &self.uid_map)?;
                write_file(c"/proc/self/gid_map", &self.gid_map)?;
            }
            // Our mounts stay ours: nothing propagates back to the host's namespace.
            check(libc::mount(
                std::ptr::null(),
                c"/".as_ptr(),
                std::ptr::null(),
                libc::MS_REC | libc::MS_PRIVATE,
                std::ptr::null(),
            ))?;
            if !self.writable.is_empty() {
                // The writable folders become mounts of their own, everything is made read-only,
                // then those mounts (only them, not what is mounted below them) writable again.
                for path in &self.writable {
                    bind(path, libc::MS_REC)?;
                }
                set_read_only(c"/", true, AT_RECURSIVE)?;
                for path in &self.writable {
                    set_read_only(path, false, 0)?;
                }
            }
            // Bound after the seal, so they stay writable; a mountpoint cannot be renamed.
            for path in &self.pinned {
                bind(path, 0)?;
            }
            for path in &self.paths {
                bind(path, 0)?;
                // A remount must keep the flags the mount was given (nosuid, nodev… are locked in
                // a user namespace), adding read-only.
                let mut stat: libc::statvfs = std::mem::zeroed();
                check(libc::statvfs(path.as_ptr(), &raw mut stat))?;
                let kept = [
                    (libc::ST_NOSUID, libc::MS_NOSUID),
                    (libc::ST_NODEV, libc::MS_NODEV),
                    (libc::ST_NOEXEC, libc::MS_NOEXEC),
                    (libc::ST_NOATIME, libc::MS_NOATIME),
                    (libc::ST_NODIRATIME, libc::MS_NODIRATIME),
                    (libc::ST_RELATIME, libc::MS_RELATIME),
                ]
                .iter()
                .filter(|(st, _)| stat.f_flag & st != 0)
                .fold(0, |flags, (_, ms)| flags | ms);
                check(libc::mount(
                    std::ptr::null(),
                    path.as_ptr(),
                    std::ptr::null(),
                    libc::MS_REMOUNT | libc::MS_BIND | libc::MS_RDONLY | kept,
                    std::ptr::null(),
                ))?;
            }
            if let Some(cwd) = &self.cwd {
                check(libc::chdir(cwd.as_ptr()))?;
            }
        }
        Ok(())
    }
}

/// Binds a path over itself (a mount of its own). Between fork and exec: one system call.
#[allow(unsafe_code)]
fn bind(path: &std::ffi::CStr, flags: libc::c_ulong) -> io::Result<()> {
    // SAFETY: a NUL-terminated path that lives for the call; no other memory is touched.
    let rc = unsafe {
        libc::mount(path.as_ptr(), path.as_ptr(), std::ptr::null(), libc::MS_BIND | flags, std::ptr::null())
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

/// Sets (or clears) read-only on the mount at `path` (and below it, with `AT_RECURSIVE`).
#[allow(unsafe_code)]
fn set_read_only(path: &std::ffi::CStr, read_only: bool, flags: libc::c_uint) -> io::Result<()> {
    let (attr_set, attr_clr) = if read_only { (MOUNT_ATTR_RDONLY, 0) } else { (0, MOUNT_ATTR_RDONLY) };
    let attr = MountAttr { attr_set, attr_clr, propagation: 0, userns_fd: 0 };
    // SAFETY: mount_setattr reads `attr` (on our stack, alive for the call) and the path.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            path.as_ptr(),
            flags,
            &raw const attr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if rc < 0 { Err(io::Error::last_os_error()) } else { Ok(()) }
}

#[allow(unsafe_code)]
unsafe fn write_file(path: &std::ffi::CStr, bytes: &[u8]) -> io::Result<()> {
    // SAFETY: the caller is in the child between fork and exec; open/write/close on a path and a
    // buffer that live for the call.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        let written = libc::write(fd, bytes.as_ptr().cast(), bytes.len());
        let error = io::Error::last_os_error();
        libc::close(fd);
        if usize::try_from(written).ok() == Some(bytes.len()) { Ok(()) } else { Err(error) }
    }
}

/// Whether this process can make a mount namespace for a child (probed once, by running `true`
/// with a protected folder of its own).
pub fn available() -> bool {
    static AVAILABLE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        let Ok(dir) = tempfile::tempdir() else { return false };
        let Ok(root) = std::fs::canonicalize(dir.path()) else { return false };
        let probe = root.join("probe");
        if std::fs::create_dir(&probe).is_err() {
            return false;
        }
        // Everything sealed but `root`, and `probe` in it read-only: the probe must be able to
        // write beside it and not in it.
        let Ok(plan) = Plan::new(std::slice::from_ref(&probe))
            .and_then(|plan| plan.sealing(std::slice::from_ref(&root), &[], &root))
        else {
            return false;
        };
        let mut command = std::process::Command::new("/bin/sh");
        command.args(["-c", "touch \"$0/../ok\" && ! touch \"$0/x\" 2>/dev/null"]).arg(&probe);
        // SAFETY: as in `Prepared::install`: only system calls on prepared data.
        #[allow(unsafe_code)]
        unsafe {
            use std::os::unix::process::CommandExt;
            command.pre_exec(move || plan.apply());
        }
        command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null());
        command.status().is_ok_and(|status| status.success())
            && !Path::new(&probe).join("x").exists()
            && root.join("ok").exists()
    })
}
