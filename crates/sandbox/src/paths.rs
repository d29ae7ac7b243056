//! Which paths a policy grants, as plain data: computed before any kernel object is made, so the
//! rules can be tested and printed on any machine.
//!
//! Landlock only grants, it never denies. A denied path inside a granted folder is honoured by
//! granting the folder's other entries instead of the folder itself, down to the denied path.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tool_core::sandbox::{ReadAccess, SandboxMode, SandboxPolicy};

use crate::Layout;

/// What programs need to read on a confined machine: binaries, libraries, configuration, the
/// process's own view of itself.
pub const SYSTEM_READ: &[&str] = &[
    "/usr",
    "/bin",
    "/sbin",
    "/lib",
    "/lib32",
    "/lib64",
    "/libx32",
    "/etc",
    "/proc",
    "/sys/devices/system/cpu",
];

/// Never readable by a sandboxed command, whatever the policy.
pub const SYSTEM_SECRETS: &[&str] = &[
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/sudoers.d",
    "/etc/ssh",
    "/etc/ssl/private",
];

/// Devices every program may open for reading and writing. Not `/dev/tty`: a command could open
/// the server's controlling terminal and push keystrokes into it (`TIOCSTI`).
pub const DEVICES: &[&str] = &["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"];

/// The paths a policy grants for one command; every path is canonical and existed when it was
/// resolved.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Grants {
    /// Readable (and executable) system trees: the same for every command of a policy, so they
    /// are resolved once and shared (see [`system_reads`]).
    pub system: Arc<[PathBuf]>,
    /// Readable (and executable) trees of the session.
    pub read: Vec<PathBuf>,
    /// Readable and writable trees.
    pub write: Vec<PathBuf>,
    /// Devices opened for reading and writing (the command's own output files are granted by
    /// descriptor, see [`Layout::output_files`]).
    pub files: Vec<PathBuf>,
}

impl Grants {
    /// The grants of `policy` for a command laid out as `layout`.
    pub fn of(policy: &SandboxPolicy, layout: &Layout) -> Self {
        if policy.mode == SandboxMode::Off {
            return Self::default();
        }
        let (system, denied) = system_reads(policy.reads, &policy.deny_read);

        let mut writable: Vec<&Path> = Vec::new();
        if policy.mode == SandboxMode::WorkspaceWrite {
            writable.push(&layout.working_directory);
            writable.extend(layout.temp_directory.as_deref());
            writable.extend(policy.writable_roots.iter().map(PathBuf::as_path));
        }
        let mut readable: Vec<&Path> = Vec::new();
        if policy.reads == ReadAccess::Confined {
            readable.push(&layout.working_directory);
            readable.extend(layout.temp_directory.as_deref());
            readable.extend(policy.readable_roots.iter().map(PathBuf::as_path));
        }
        let write = expand_all(&writable, &denied);
        let read = expand_all(&readable, &denied)
            .into_iter()
            .filter(|path| !write.iter().any(|w| path.starts_with(w)))
            .collect();
        let files = DEVICES
            .iter()
            .map(Path::new)
            .filter_map(canonical)
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        Self { system, read, write, files }
    }

    /// Every readable tree, system and session.
    pub fn readable(&self) -> impl Iterator<Item = &PathBuf> {
        self.system.iter().chain(&self.read)
    }
}

/// How long a resolved system read set is reused: an entry made in `/` or `/etc` after that is
/// simply not readable until then (closed, never open).
const SYSTEM_TTL: Duration = Duration::from_secs(10);

type SystemKey = (ReadAccess, Vec<PathBuf>);
type SystemEntry = (Instant, Arc<[PathBuf]>, Arc<[PathBuf]>);

/// The system trees readable under `reads` with `deny_read` (and [`SYSTEM_SECRETS`]) carved out,
/// and the canonical denied paths. Resolving them walks `/` and `/etc`, which costs milliseconds:
/// it is done once per policy and reused for [`SYSTEM_TTL`].
pub fn system_reads(reads: ReadAccess, deny_read: &[PathBuf]) -> (Arc<[PathBuf]>, Arc<[PathBuf]>) {
    static CACHE: Mutex<Vec<(SystemKey, SystemEntry)>> = Mutex::new(Vec::new());
    let key: SystemKey = (reads, deny_read.to_vec());
    let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, (at, system, denied))) = cache.iter().find(|(k, _)| *k == key)
        && at.elapsed() < SYSTEM_TTL
    {
        return (system.clone(), denied.clone());
    }
    let denied: Vec<PathBuf> = deny_read
        .iter()
        .map(PathBuf::as_path)
        .chain(SYSTEM_SECRETS.iter().map(Path::new))
        .filter_map(canonical)
        .collect();
    let roots: Vec<&Path> = match reads {
        ReadAccess::Anywhere => vec![Path::new("/")],
        ReadAccess::Confined => SYSTEM_READ.iter().map(Path::new).collect(),
    };
    let system: Arc<[PathBuf]> = expand_all(&roots, &denied).into();
    let denied: Arc<[PathBuf]> = denied.into();
    cache.retain(|(k, _)| *k != key);
    // A handful of policies per process at most; keep the cache from growing with odd ones.
    if cache.len() >= 8 {
        cache.remove(0);
    }
    cache.push((key, (Instant::now(), system.clone(), denied.clone())));
    (system, denied)
}

fn canonical(path: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(path).ok()
}

/// Canonical roots with every denied path carved out, without duplicates or nested repeats.
fn expand_all(roots: &[&Path], denied: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = BTreeSet::new();
    for root in roots.iter().filter_map(|root| canonical(root)) {
        expand(root, denied, &mut out, 0);
    }
    // A tree inside another granted tree adds nothing. Paths sort component by component, so a
    // tree's descendants follow it directly.
    let mut kept: Vec<PathBuf> = Vec::with_capacity(out.len());
    for path in out {
        if !kept.last().is_some_and(|last| path.starts_with(last)) {
            kept.push(path);
        }
    }
    kept
}

/// Deep enough for any real path to a denied folder; a deeper one is left out whole (closed).
const MAX_DEPTH: usize = 32;

fn expand(root: PathBuf, denied: &[PathBuf], out: &mut BTreeSet<PathBuf>, depth: usize) {
    if denied.iter().any(|deny| root.starts_with(deny)) {
        return;
    }
    if !denied.iter().any(|deny| deny.starts_with(&root)) {
        out.insert(root);
        return;
    }
    // A denied path lies strictly inside: grant the other entries, one level down.
    let Ok(entries) = std::fs::read_dir(&root) else { return };
    if depth >= MAX_DEPTH {
        return;
    }
    for entry in entries.flatten() {
        // Links are never followed: a link inside a granted tree (one a command may have made)
        // must not grant its target, and a loop of links must not be walked. Through a link the
        // kernel checks the target on its own, which is then granted only if it is itself.
        match entry.file_type() {
            Ok(kind) if !kind.is_symlink() => expand(entry.path(), denied, out, depth + 1),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use tool_core::sandbox::NetworkAccess;

    use super::*;

    fn layout(dir: &Path) -> Layout {
        Layout {
            working_directory: dir.join("work"),
            temp_directory: Some(dir.join("tmp")),
            output_files: vec![],
        }
    }

    #[test]
    fn a_denied_folder_is_carved_out_of_a_granted_one() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        for sub in ["work", "tmp", "data/journal", "data/keep", "other"] {
            fs::create_dir_all(root.join(sub)).unwrap();
        }
        // A link that leads into the denied folder grants nothing.
        std::os::unix::fs::symlink(root.join("data/journal"), root.join("link")).unwrap();
        let policy = SandboxPolicy {
            reads: ReadAccess::Confined,
            readable_roots: vec![root.clone()],
            deny_read: vec![root.join("data/journal")],
            ..SandboxPolicy::workspace_write()
        };
        let grants = Grants::of(&policy, &layout(&root));
        assert_eq!(grants.write, vec![root.join("tmp"), root.join("work")]);
        for granted in [root.join("data/keep"), root.join("other")] {
            assert!(grants.read.contains(&granted), "{granted:?} in {:?}", grants.read);
        }
        assert!(!grants.readable().any(|p| p.starts_with(root.join("data/journal"))), "{:?}", grants.read);
        assert!(!grants.read.contains(&root), "the parent itself is not granted whole");
        // The system secrets are carved out of /etc.
        assert!(!grants.readable().any(|p| p == Path::new("/etc") || p.starts_with("/etc/ssh")));
        assert!(grants.readable().any(|p| p == Path::new("/etc/passwd")));
    }

    #[test]
    fn links_inside_a_carved_tree_are_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let root = fs::canonicalize(dir.path()).unwrap();
        fs::create_dir_all(root.join("work/secret")).unwrap();
        fs::create_dir_all(root.join("work/src")).unwrap();
        // Made by a command: a link out, and two links that loop.
        std::os::unix::fs::symlink("/etc", root.join("work/escape")).unwrap();
        std::os::unix::fs::symlink(".", root.join("work/a")).unwrap();
        std::os::unix::fs::symlink(".", root.join("work/b")).unwrap();
        let policy =
            SandboxPolicy { deny_read: vec![root.join("work/secret")], ..SandboxPolicy::workspace_write() };
        let layout =
            Layout { working_directory: root.join("work"), temp_directory: None, output_files: vec![] };
        let grants = Grants::of(&policy, &layout);
        assert_eq!(grants.write, vec![root.join("work/src")], "only the real folder, not the links");
    }

    #[test]
    fn read_only_grants_no_writes_and_off_grants_nothing() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir_all(dir.path().join("work")).unwrap();
        let grants = Grants::of(&SandboxPolicy::read_only(), &layout(dir.path()));
        assert!(grants.write.is_empty());
        assert!(grants.files.contains(&PathBuf::from("/dev/null")));
        assert_eq!(
            Grants::of(&SandboxPolicy::off().with_network(NetworkAccess::On), &layout(dir.path())),
            Grants::default()
        );
    }
}
