//! Opening a path once, beneath a folder pinned for the session: the race-free half of the path
//! audit.
//!
//! The path-scope audit decides on what a path resolves to. If the runtime then opened the path
//! string again, a symbolic link swapped in between (by a command of the same session, say) would
//! lead it elsewhere: measured on the server before this module, one read in six of a racing loop
//! returned another tenant's file, as root. So every file operation opens through an [`Opener`]:
//!
//! * The path is matched to the deepest root of the session's [`FileBoundary`] that holds it, as
//!   written or as it resolves, and opened relative to a handle on that root, pinned on the
//!   session's first use, with `openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)`. The kernel
//!   follows links only while they stay beneath the root, and `..` cannot climb out of it, so
//!   whatever a racer swaps in, the file opened is beneath the root.
//! * A path beneath no root is refused ([`OutsideFiles::Refuse`], a server with keys) or opened
//!   exactly as written with `RESOLVE_NO_SYMLINKS` ([`OutsideFiles::Exact`]): what a person
//!   approved, with no link in any component that could be swapped after they saw it.
//! * What was opened is checked against the protected paths (the server's own files) by what the
//!   kernel says the handle is (`/proc/self/fd`), not by the string.
//! * Writes create their temporary file and rename it inside the handle of the checked parent
//!   folder; moves rename between two checked parents with `RENAME_NOREPLACE`.
//!
//! Walks (glob, name search, grep) list folders by path, as ripgrep's walker does, and then open
//! or check every entry they report beneath the handle of the folder searched, with
//! `O_NOFOLLOW`: an entry reached through a folder swapped for a link is dropped, never read.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, OnceLock};

use rustix::fs::{Mode, OFlags};
use rustix::io::Errno;
use tool_core::sandbox::{FileBoundary, OutsideFiles};

use crate::error::ComputerError;

/// Opens paths for one call within its session's [`FileBoundary`].
#[derive(Clone)]
pub struct Opener {
    pinned: Arc<Pinned>,
    outside: OutsideFiles,
    /// The files a person approved for this call, by device and inode (usually none: an empty
    /// `Vec` costs no allocation on each file call).
    approved: Vec<tool_core::ApprovedFile>,
}

impl std::fmt::Debug for Opener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opener")
            .field("roots", &self.pinned.roots.iter().map(|r| &r.path).collect::<Vec<_>>())
            .field("outside", &self.outside)
            .finish()
    }
}

/// A session's roots and the handles on them, each pinned when first needed (a session's temp
/// folder is made by its first command, so it may not exist when the session opens).
struct Pinned {
    /// Deepest first, so the first root holding a path is the most specific.
    roots: Vec<Root>,
    /// Canonical where they exist.
    protected: Vec<PathBuf>,
}

struct Root {
    path: PathBuf,
    writable: bool,
    fd: OnceLock<OwnedFd>,
    /// A protected path lies beneath it (or it beneath one): what is opened here is checked.
    holds_protected: bool,
    /// A read-only root lies beneath this writable one: a folder opened here to write into is
    /// checked by what it really is, since a link inside may lead into the read-only one.
    holds_read_only: bool,
}

impl Root {
    /// The handle on the root, opened now if it was not yet. A root is opened with no symbolic
    /// link in any component (the session resolved it when it opened): if one was swapped in
    /// since, the root is not pinned and paths under it are treated as outside.
    fn handle(&self) -> Option<BorrowedFd<'_>> {
        if let Some(fd) = self.fd.get() {
            return Some(fd.as_fd());
        }
        let fd = retry(|| {
            sys::open(
                rustix::fs::CWD,
                &self.path,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Resolve::Exact,
            )
        })
        .ok()?;
        Some(self.fd.get_or_init(|| fd).as_fd())
    }
}

/// What must still be checked of what [`Opener::attempt`] opened.
#[derive(Debug, Clone, Copy)]
struct Checks {
    /// It could be a protected path (opened outside the roots, or beneath a root holding one).
    exposed: bool,
    /// It was opened beneath a writable root that holds a read-only one.
    read_only_beneath: bool,
    /// It was opened outside the roots, exactly as given: an approved file must still be itself.
    exact: bool,
}

/// How a path is resolved relative to the handle it is opened from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Resolve {
    /// Links followed while they stay beneath the handle; `..` never above it.
    Beneath,
    /// No link in any component (an absolute path, from `/`).
    Exact,
}

/// A folder opened for writing into, and the name to write in it.
#[derive(Debug)]
pub struct Parent {
    /// The folder (an `O_PATH` handle).
    pub fd: OwnedFd,
    /// The last component of the path.
    pub name: OsString,
}

impl Opener {
    /// The opener of a session: its roots are pinned on first use and shared by every call.
    pub fn new(boundary: &FileBoundary) -> Self {
        let pinned = boundary
            .pins
            .get_or_pin::<Arc<Pinned>, std::convert::Infallible>(|| Ok(Arc::new(Pinned::of(boundary))))
            .ok()
            .and_then(|any| any.downcast_ref::<Arc<Pinned>>().cloned())
            .unwrap_or_else(|| Arc::new(Pinned::of(boundary)));
        Self { pinned, outside: boundary.outside, approved: boundary.approved.clone() }
    }

    /// An opener with one writable root and nothing protected (tests, benches, tools that work
    /// on one folder of their own).
    pub fn rooted(root: &Path) -> Self {
        let boundary = FileBoundary {
            roots: vec![tool_core::FileRoot::writable(root.canonicalize().unwrap_or_else(|_| root.into()))],
            ..FileBoundary::default()
        };
        Self::new(&boundary)
    }

    /// The first `limit` bytes of the regular file at `path`, opened once beneath the roots (for
    /// a front end that reads a file a person named, such as an `@path` in a prompt).
    ///
    /// # Errors
    ///
    /// As [`Opener::open`], and a path that is not a regular file.
    pub fn read_prefix(&self, path: &Path, limit: usize) -> Result<Vec<u8>, ComputerError> {
        use std::io::Read as _;
        let fd = self.open(path, OFlags::RDONLY)?;
        let stat = rustix::fs::fstat(&fd).map_err(|e| ComputerError::io(path, e.into()))?;
        match rustix::fs::FileType::from_raw_mode(stat.st_mode) {
            rustix::fs::FileType::RegularFile => {}
            rustix::fs::FileType::Directory => {
                return Err(ComputerError::IsDirectory { path: path.to_path_buf() });
            }
            _ => return Err(ComputerError::NotRegular { path: path.to_path_buf(), what: "special file" }),
        }
        let mut bytes = Vec::new();
        std::fs::File::from(fd)
            .take(limit as u64)
            .read_to_end(&mut bytes)
            .map_err(|e| ComputerError::io(path, e))?;
        Ok(bytes)
    }

    /// Opens `path` with `flags` (`O_CLOEXEC` is added). The final component is followed when it
    /// is a link (within the same rules) unless `flags` has `O_NOFOLLOW`.
    ///
    /// # Errors
    ///
    /// The path is outside a hard boundary, goes through a link outside the roots, is protected,
    /// or the open failed.
    pub fn open(&self, path: &Path, flags: OFlags) -> Result<OwnedFd, ComputerError> {
        let (fd, checks) = self.attempt(path, false, |base, rest, resolve| {
            sys::open(base, rest, flags | OFlags::CLOEXEC, resolve)
        })?;
        if checks.exposed {
            self.guard(&fd, None, path)?;
        }
        if checks.exact {
            self.still_approved(path, rustix::fs::fstat(&fd).ok())?;
        }
        Ok(fd)
    }

    /// Whether anything opened beneath the folder `fd` could be a protected path, so that each
    /// entry a walk opens there must be checked (most folders hold none, and need no check).
    pub(crate) fn exposed_beneath(&self, fd: &OwnedFd) -> bool {
        if self.pinned.protected.is_empty() {
            return false;
        }
        match real_path(fd) {
            Some(real) => self.pinned.protected.iter().any(|p| p.starts_with(&real) || real.starts_with(p)),
            None => true,
        }
    }

    /// Opens the folder that holds `path` for writing into it, making missing folders on the
    /// way when `create` is set.
    ///
    /// # Errors
    ///
    /// As [`Opener::open`], and a folder that may only be read.
    pub fn parent(&self, path: &Path, create: bool) -> Result<Parent, ComputerError> {
        let Some(Component::Normal(name)) = path.components().next_back() else {
            return Err(ComputerError::InvalidRequest(format!("{} names no file", path.display())));
        };
        let folder = path.parent().unwrap_or(Path::new("/"));
        let (fd, checks) = self.attempt(folder, true, |base, rest, resolve| {
            match sys::open(base, rest, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, resolve) {
                Err(Errno::NOENT) if create => make_folders(base, rest, resolve),
                other => other,
            }
        })?;
        if checks.read_only_beneath {
            let real = real_path(&fd);
            if let Some(root) =
                self.pinned.roots.iter().find(|root| {
                    !root.writable && real.as_ref().is_none_or(|real| real.starts_with(&root.path))
                })
            {
                return Err(ComputerError::ReadOnlyRoot {
                    path: path.to_path_buf(),
                    root: root.path.clone(),
                });
            }
        }
        if checks.exposed {
            self.guard(&fd, Some(name), path)?;
        }
        if checks.exact {
            let entry = rustix::fs::statat(&fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).ok();
            self.still_approved(path, entry)?;
        }
        Ok(Parent { fd, name: name.to_owned() })
    }

    /// Refuses a path a person approved when what is there now (`now`: its status, `None` when
    /// nothing is) is not the file they were shown. Paths not approved, or that named nothing
    /// when they were, pass.
    fn still_approved(&self, path: &Path, now: Option<rustix::fs::Stat>) -> Result<(), ComputerError> {
        let Some(approved) = self.approved.iter().find(|a| a.path == path) else { return Ok(()) };
        match now {
            Some(stat) if stat.st_dev == approved.device && stat.st_ino == approved.inode => Ok(()),
            _ => Err(ComputerError::Replaced { path: path.to_path_buf() }),
        }
    }

    /// Refuses a handle on one of the protected paths (or, with `name`, an entry of that name in
    /// the folder `fd`).
    pub(crate) fn guard(
        &self,
        fd: &OwnedFd,
        name: Option<&OsStr>,
        shown: &Path,
    ) -> Result<(), ComputerError> {
        if self.pinned.protected.is_empty() {
            return Ok(());
        }
        let Some(mut real) = real_path(fd) else {
            // Whatever it is, it cannot be shown not to be protected.
            return Err(ComputerError::Protected { path: shown.to_path_buf() });
        };
        if let Some(name) = name {
            real.push(name);
        }
        // A protected path itself, anything beneath one, and (for an entry to be written, moved
        // or removed) any folder above one: renaming that would carry the protected files along.
        let above = name.is_some();
        if self.pinned.protected.iter().any(|p| real.starts_with(p) || (above && p.starts_with(&real))) {
            return Err(ComputerError::Protected { path: shown.to_path_buf() });
        }
        Ok(())
    }

    /// Tries each place `path` may be beneath, then what the boundary allows outside; with what
    /// was opened, whether it could be a protected path (opened outside the roots, or beneath a
    /// root that holds one) and must be checked, and whether the root it was opened beneath holds
    /// a read-only root that a write must be checked against.
    fn attempt<T>(
        &self,
        path: &Path,
        write: bool,
        mut open: impl FnMut(BorrowedFd<'_>, &Path, Resolve) -> Result<T, Errno>,
    ) -> Result<(T, Checks), ComputerError> {
        if !path.is_absolute() {
            return Err(ComputerError::InvalidRequest(format!(
                "{} is relative; the runtime opens absolute paths only",
                path.display()
            )));
        }
        // The deepest root holding the path as written; then, only if that fails, the deepest
        // holding it as it resolves now (a hint only: the kernel decides beneath the root, and
        // resolving costs a look at every component); then the path itself exactly, where the
        // boundary allows that.
        let mut tried: Option<(usize, PathBuf)> = None;
        let mut try_beneath = |candidate: &Path| -> Option<Result<(T, Checks), ComputerError>> {
            let (index, root) =
                self.pinned.roots.iter().enumerate().find(|(_, r)| candidate.starts_with(&r.path))?;
            let rest = candidate.strip_prefix(&root.path).ok()?.to_path_buf();
            if tried.as_ref().is_some_and(|(i, r)| *i == index && *r == rest) {
                return None;
            }
            tried = Some((index, rest.clone()));
            let fd = root.handle()?;
            if write && !root.writable {
                return Some(Err(ComputerError::ReadOnlyRoot {
                    path: path.to_path_buf(),
                    root: root.path.clone(),
                }));
            }
            match retry(|| open(fd, &rest, Resolve::Beneath)) {
                // It leads out of this root: another place may hold it.
                Err(Errno::XDEV) => None,
                Err(errno) => Some(Err(ComputerError::io(path, errno.into()))),
                Ok(value) => Some(Ok((
                    value,
                    Checks {
                        exposed: root.holds_protected,
                        read_only_beneath: root.holds_read_only,
                        exact: false,
                    },
                ))),
            }
        };
        if let Some(done) = try_beneath(path) {
            return done;
        }
        let resolved = crate::scope::resolve(&path.to_string_lossy(), None);
        if let Some(done) = try_beneath(&resolved) {
            return done;
        }
        if self.outside == OutsideFiles::Exact {
            let slash = retry(|| {
                sys::open(
                    rustix::fs::CWD,
                    Path::new("/"),
                    OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                    Resolve::Exact,
                )
            })
            .map_err(|e| ComputerError::io("/", e.into()))?;
            let rest = path.strip_prefix("/").unwrap_or(path);
            return match retry(|| open(slash.as_fd(), rest, Resolve::Exact)) {
                Err(Errno::LOOP) => Err(ComputerError::ThroughLink { path: path.to_path_buf() }),
                Err(errno) => Err(ComputerError::io(path, errno.into())),
                Ok(value) => Ok((
                    value,
                    Checks {
                        exposed: !self.pinned.protected.is_empty(),
                        read_only_beneath: false,
                        exact: true,
                    },
                )),
            };
        }
        Err(ComputerError::Outside { path: path.to_path_buf(), roots: self.describe_roots() })
    }

    fn describe_roots(&self) -> String {
        let roots: Vec<String> = self
            .pinned
            .roots
            .iter()
            .map(|r| format!("{}{}", r.path.display(), if r.writable { "" } else { " (read-only)" }))
            .collect();
        if roots.is_empty() { "it has none".to_owned() } else { roots.join(", ") }
    }
}

impl Pinned {
    fn of(boundary: &FileBoundary) -> Self {
        // Resolved as they are now; one not made yet (a journal's `-wal` file) by its folder's real
        // path, so that it matches what a handle on it will say it is.
        let protected: Vec<PathBuf> =
            boundary.protected.iter().map(|p| crate::scope::resolve(&p.to_string_lossy(), None)).collect();
        let mut roots: Vec<Root> = boundary
            .roots
            .iter()
            .map(|root| Root {
                path: root.path.clone(),
                writable: root.writable,
                fd: OnceLock::new(),
                holds_protected: protected
                    .iter()
                    .any(|p| p.starts_with(&root.path) || root.path.starts_with(p)),
                holds_read_only: root.writable
                    && boundary.roots.iter().any(|other| {
                        !other.writable && other.path != root.path && other.path.starts_with(&root.path)
                    }),
            })
            .collect();
        roots.sort_by_key(|root| std::cmp::Reverse(root.path.components().count()));
        Self { roots, protected }
    }
}

/// Opens an entry found by a walk beneath the folder handle `base`, never following a link in
/// its last component, nor out of `base` in any other.
pub(crate) fn open_entry(base: &OwnedFd, relative: &Path, flags: OFlags) -> Result<OwnedFd, Errno> {
    retry(|| sys::open(base.as_fd(), relative, flags | OFlags::NOFOLLOW | OFlags::CLOEXEC, Resolve::Beneath))
}

/// Opens a regular file again through its `O_PATH` handle, so that the file read is the one
/// checked; the open does not block (a FIFO swapped in is caught by the check after it).
pub(crate) fn reopen(fd: &OwnedFd, flags: OFlags) -> Result<OwnedFd, Errno> {
    let magic = format!("/proc/self/fd/{}", fd.as_raw_fd());
    rustix::fs::open(magic.as_str(), flags | OFlags::CLOEXEC, Mode::empty())
}

/// Where a handle really is, as the kernel names it.
pub(crate) fn real_path(fd: &impl AsRawFd) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/self/fd/{}", fd.as_raw_fd())).ok().filter(|p| p.is_absolute())
}

/// Makes the missing folders of `rest` beneath `base`, each one in the handle of its parent,
/// and returns the handle of the last.
fn make_folders(base: BorrowedFd<'_>, rest: &Path, resolve: Resolve) -> Result<OwnedFd, Errno> {
    let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut current = sys::open(base, Path::new(""), flags, resolve)?;
    let mut prefix = PathBuf::new();
    for component in rest.components() {
        let Component::Normal(name) = component else {
            // `..` or `.` in a path whose folders do not exist: as the kernel would say.
            return Err(Errno::NOENT);
        };
        prefix.push(name);
        current = match sys::open(base, &prefix, flags, resolve) {
            Ok(fd) => fd,
            Err(Errno::NOENT) => {
                match rustix::fs::mkdirat(&current, name, Mode::from_raw_mode(0o777)) {
                    Ok(()) | Err(Errno::EXIST) => {}
                    Err(errno) => return Err(errno),
                }
                sys::open(base, &prefix, flags, resolve)?
            }
            Err(errno) => return Err(errno),
        };
    }
    Ok(current)
}

/// `openat2` answers `EAGAIN` when a rename elsewhere raced its walk of `..`: try again.
fn retry<T>(mut f: impl FnMut() -> Result<T, Errno>) -> Result<T, Errno> {
    let mut left = 64;
    loop {
        match f() {
            Err(Errno::AGAIN | Errno::INTR) if left > 0 => left -= 1,
            other => return other,
        }
    }
}

#[cfg(target_os = "linux")]
mod sys {
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::path::Path;

    use rustix::fs::{Mode, OFlags, ResolveFlags};
    use rustix::io::Errno;

    use super::Resolve;

    pub(super) fn open(
        base: BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
        resolve: Resolve,
    ) -> Result<OwnedFd, Errno> {
        let how = match resolve {
            Resolve::Beneath => ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS,
            Resolve::Exact => ResolveFlags::NO_SYMLINKS | ResolveFlags::NO_MAGICLINKS,
        };
        let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
        let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o600) } else { Mode::empty() };
        rustix::fs::openat2(base, path, flags, mode, how)
    }
}

/// Without `openat2` (not Linux) the kernel cannot hold a walk beneath a folder: links are
/// followed as `openat` follows them. Toolhost's servers run on Linux; this keeps the terminal
/// app building elsewhere, with that weaker guarantee.
#[cfg(not(target_os = "linux"))]
mod sys {
    use std::os::fd::{BorrowedFd, OwnedFd};
    use std::path::Path;

    use rustix::fs::{Mode, OFlags};
    use rustix::io::Errno;

    use super::Resolve;

    pub(super) fn open(
        base: BorrowedFd<'_>,
        path: &Path,
        flags: OFlags,
        _resolve: Resolve,
    ) -> Result<OwnedFd, Errno> {
        let path = if path.as_os_str().is_empty() { Path::new(".") } else { path };
        let mode = if flags.contains(OFlags::CREATE) { Mode::from_raw_mode(0o600) } else { Mode::empty() };
        rustix::fs::openat(base, path, flags, mode)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use tool_core::FileRoot;

    use super::*;

    fn boundary(roots: Vec<FileRoot>, outside: OutsideFiles, protected: Vec<PathBuf>) -> FileBoundary {
        FileBoundary { roots, outside, protected, ..FileBoundary::default() }
    }

    #[test]
    fn opens_beneath_roots_and_refuses_or_exacts_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (inside, other) = (base.join("inside"), base.join("other"));
        fs::create_dir_all(inside.join("sub")).unwrap();
        fs::create_dir_all(&other).unwrap();
        fs::write(inside.join("sub/a.txt"), "a").unwrap();
        fs::write(other.join("secret.txt"), "secret").unwrap();
        std::os::unix::fs::symlink(&other, inside.join("out")).unwrap();
        std::os::unix::fs::symlink("sub/a.txt", inside.join("rel-link")).unwrap();
        std::os::unix::fs::symlink(&inside, base.join("via")).unwrap();

        let hard = Opener::new(&boundary(vec![FileRoot::writable(&inside)], OutsideFiles::Refuse, vec![]));
        let exact = Opener::new(&boundary(vec![FileRoot::writable(&inside)], OutsideFiles::Exact, vec![]));
        let read = OFlags::RDONLY;
        let content = |fd: OwnedFd| {
            let mut text = String::new();
            std::io::Read::read_to_string(&mut fs::File::from(fd), &mut text).unwrap();
            text
        };
        // (path, hard outcome, exact outcome): Ok(content) or the error's variant.
        let cases: Vec<(PathBuf, &str, &str)> = vec![
            (inside.join("sub/a.txt"), "a", "a"),
            (inside.join("rel-link"), "a", "a"),
            (inside.join("sub/../sub/a.txt"), "a", "a"),
            // Through a link whose path resolves inside: opened beneath the root it resolves to.
            (base.join("via/sub/a.txt"), "a", "a"),
            (inside.join("out/secret.txt"), "Outside", "Through"),
            (inside.join("../other/secret.txt"), "Outside", "secret"),
            (other.join("secret.txt"), "Outside", "secret"),
        ];
        for (path, want_hard, want_exact) in cases {
            for (opener, want) in [(&hard, want_hard), (&exact, want_exact)] {
                let got = match opener.open(&path, read) {
                    Ok(fd) => content(fd),
                    Err(ComputerError::Outside { .. }) => "Outside".into(),
                    Err(ComputerError::ThroughLink { .. }) => "Through".into(),
                    Err(other) => format!("{other}"),
                };
                assert_eq!(got, want, "{} with {opener:?}", path.display());
            }
        }
    }

    #[test]
    fn writes_respect_read_only_roots_and_protected_paths() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (work, shared, state) = (base.join("work"), base.join("shared"), base.join("work/.state"));
        fs::create_dir_all(&state).unwrap();
        fs::create_dir_all(&shared).unwrap();
        fs::write(state.join("keys"), "digest").unwrap();
        let opener = Opener::new(&boundary(
            vec![FileRoot::writable(&work), FileRoot::read_only(&shared)],
            OutsideFiles::Refuse,
            vec![state.clone()],
        ));
        assert!(matches!(opener.parent(&shared.join("x"), true), Err(ComputerError::ReadOnlyRoot { .. })));
        assert!(matches!(
            opener.open(&state.join("keys"), OFlags::RDONLY),
            Err(ComputerError::Protected { .. })
        ));
        assert!(matches!(opener.parent(&state.join("new"), true), Err(ComputerError::Protected { .. })));
        assert!(matches!(opener.open(&state, OFlags::PATH), Err(ComputerError::Protected { .. })));
        // A folder above a protected one is not given out to be written, moved or removed:
        // renaming it would carry the protected files along.
        let deep = work.join("deep/.state");
        fs::create_dir_all(&deep).unwrap();
        let deeper = Opener::new(&boundary(
            vec![FileRoot::writable(&work)],
            OutsideFiles::Refuse,
            vec![deep.clone(), work.join("later/journal.db-wal")],
        ));
        assert!(matches!(deeper.parent(&work.join("deep"), false), Err(ComputerError::Protected { .. })));
        assert!(deeper.open(&work.join("deep"), OFlags::PATH).is_ok(), "it may still be looked at");
        // A protected file not made yet is known by its folder's real path.
        fs::create_dir_all(work.join("later")).unwrap();
        std::os::unix::fs::symlink(work.join("later"), work.join("alias")).unwrap();
        assert!(matches!(
            deeper.parent(&work.join("alias/journal.db-wal"), true),
            Err(ComputerError::Protected { .. })
        ));
        let parent = opener.parent(&work.join("a/b/c.txt"), true).unwrap();
        assert_eq!(parent.name, "c.txt");
        assert_eq!(real_path(&parent.fd).unwrap(), work.join("a/b"));
        // A link inside that points at the protected folder does not get there either.
        std::os::unix::fs::symlink(&state, work.join("st")).unwrap();
        assert!(matches!(
            opener.open(&work.join("st/keys"), OFlags::RDONLY),
            Err(ComputerError::Protected { .. })
        ));
    }

    #[test]
    fn a_read_only_root_inside_a_writable_one_is_not_written_through_a_link() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (work, shared) = (base.join("work"), base.join("work/shared"));
        fs::create_dir_all(&shared).unwrap();
        fs::write(shared.join("f"), "kept").unwrap();
        let opener = Opener::new(&boundary(
            vec![FileRoot::writable(&work), FileRoot::read_only(&shared)],
            OutsideFiles::Refuse,
            vec![],
        ));
        std::os::unix::fs::symlink(&shared, work.join("door")).unwrap();
        for path in [shared.join("new"), work.join("door/new"), work.join("door/f")] {
            assert!(
                matches!(opener.parent(&path, true), Err(ComputerError::ReadOnlyRoot { .. })),
                "{}",
                path.display()
            );
        }
        assert!(opener.open(&work.join("door/f"), OFlags::RDONLY).is_ok(), "reading through it is fine");
        assert!(opener.parent(&work.join("elsewhere/new"), true).is_ok());
    }

    #[test]
    fn an_approved_file_outside_must_still_be_the_one_shown() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (work, outside) = (base.join("work"), base.join("outside"));
        fs::create_dir_all(&work).unwrap();
        fs::create_dir_all(&outside).unwrap();
        let shown = outside.join("notes.txt");
        fs::write(&shown, "what was shown").unwrap();
        let meta = fs::metadata(&shown).unwrap();
        let mut files = boundary(vec![FileRoot::writable(&work)], OutsideFiles::Exact, vec![]);
        files.approved =
            vec![tool_core::ApprovedFile { path: shown.clone(), device: meta.dev(), inode: meta.ino() }];
        let opener = Opener::new(&files);
        assert!(opener.open(&shown, OFlags::RDONLY).is_ok(), "the same file opens");
        assert!(opener.parent(&shown, false).is_ok());
        // Renamed over by someone who may write there: another file at the same path.
        fs::write(outside.join("other.txt"), "something else").unwrap();
        fs::rename(outside.join("other.txt"), &shown).unwrap();
        assert!(matches!(opener.open(&shown, OFlags::RDONLY), Err(ComputerError::Replaced { .. })));
        assert!(matches!(opener.parent(&shown, false), Err(ComputerError::Replaced { .. })));
        fs::remove_file(&shown).unwrap();
        assert!(matches!(opener.parent(&shown, true), Err(ComputerError::Replaced { .. })), "removed");
        // A path nobody approved outside is opened as before (exactly, no link).
        fs::write(outside.join("free.txt"), "x").unwrap();
        assert!(opener.open(&outside.join("free.txt"), OFlags::RDONLY).is_ok());
    }

    #[test]
    fn a_root_swapped_for_a_link_is_not_pinned() {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (work, elsewhere) = (base.join("work"), base.join("elsewhere"));
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join("f"), "x").unwrap();
        std::os::unix::fs::symlink(&elsewhere, &work).unwrap();
        let opener = Opener::new(&boundary(vec![FileRoot::writable(&work)], OutsideFiles::Refuse, vec![]));
        assert!(matches!(opener.open(&work.join("f"), OFlags::RDONLY), Err(ComputerError::Outside { .. })));
    }
}
