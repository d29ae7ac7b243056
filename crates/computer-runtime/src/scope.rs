//! Where a path really points, and whether that is inside the session's sandbox.
//!
//! The path-scope audit must not be fooled by `..` or by a symlink inside the working directory
//! that points elsewhere, so a path is judged by what it resolves to: it is walked one component at
//! a time as the kernel would, every symlink met (even a dangling one, even after a folder that
//! does not exist yet) replaced by its target, and `..` applied to what has been resolved so far.

use std::path::{Component, Path, PathBuf};

/// Resolves `path` against `base` (when relative), following symlinks as far as the path exists.
///
/// `~` and `~/…` expand to the home directory. A path that cannot be made absolute (relative with
/// no base) is resolved against the process's current directory.
pub fn resolve(path: &str, base: Option<&Path>) -> PathBuf {
    let expanded = expand_home(path);
    let absolute = if expanded.is_absolute() {
        expanded
    } else {
        match base {
            Some(base) => base.join(expanded),
            None => std::env::current_dir().unwrap_or_else(|_| PathBuf::from("/")).join(expanded),
        }
    };
    resolve_absolute(&absolute)
}

fn expand_home(path: &str) -> PathBuf {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    match (path.strip_prefix('~'), home) {
        (Some(""), Some(home)) => home,
        (Some(rest), Some(home)) if rest.starts_with('/') => home.join(rest.trim_start_matches('/')),
        _ => PathBuf::from(path),
    }
}

fn resolve_absolute(path: &Path) -> PathBuf {
    let mut links = MAX_LINKS;
    resolve_components(path, &mut links)
}

/// The most links one resolution follows in all, as the kernel's own limit (`MAXSYMLINKS`, past
/// which it answers `ELOOP`). Counted over the whole walk, not per level of nesting: a chain of
/// links that each name the next twice would otherwise double the work at every level.
const MAX_LINKS: usize = 40;

/// Walks the path one component at a time, as the kernel does: `..` pops what has been resolved so
/// far, and every symlink met (dangling ones included) is replaced by its target before going on.
/// Components that do not exist are kept as written. Past [`MAX_LINKS`] links in all, the rest are
/// left as they are (the kernel would refuse to open such a path).
fn resolve_components(path: &Path, links: &mut usize) -> PathBuf {
    let mut out = PathBuf::from("/");
    for component in path.components() {
        match component {
            Component::RootDir | Component::Prefix(_) => out = PathBuf::from("/"),
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            Component::Normal(name) => {
                out.push(name);
                let is_link = std::fs::symlink_metadata(&out).is_ok_and(|m| m.file_type().is_symlink());
                if is_link && *links > 0 {
                    *links -= 1;
                    out = match std::fs::read_link(&out) {
                        Ok(target) => {
                            let base = out.parent().map_or_else(|| PathBuf::from("/"), Path::to_path_buf);
                            resolve_components(&base.join(target), links)
                        }
                        Err(_) => out,
                    };
                }
            }
        }
    }
    out
}

/// Normalises `.` and `..` without touching the filesystem.
pub fn lexical(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::ParentDir => {
                out.pop();
            }
            Component::CurDir => {}
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The folders a session may touch without asking.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathScope {
    roots: Vec<PathBuf>,
}

impl PathScope {
    /// The working directory (if any) plus the system temp folders, all resolved.
    ///
    /// With no working directory only the temp folders are in scope, so every other path asks.
    pub fn for_session(working_directory: Option<&Path>) -> Self {
        let mut roots: Vec<PathBuf> = Vec::new();
        if let Some(dir) = working_directory {
            roots.push(resolve(&dir.to_string_lossy(), None));
        }
        for temp in [PathBuf::from("/tmp"), PathBuf::from("/var/tmp"), std::env::temp_dir()] {
            let temp = resolve(&temp.to_string_lossy(), None);
            if !roots.contains(&temp) {
                roots.push(temp);
            }
        }
        Self { roots }
    }

    /// A scope of exactly these roots (resolved).
    pub fn new(roots: impl IntoIterator<Item = PathBuf>) -> Self {
        Self { roots: roots.into_iter().map(|r| resolve(&r.to_string_lossy(), None)).collect() }
    }

    /// The resolved roots.
    pub fn roots(&self) -> &[PathBuf] {
        &self.roots
    }

    /// Whether an already resolved path lies under one of the roots.
    pub fn contains(&self, resolved: &Path) -> bool {
        self.roots.iter().any(|root| resolved.starts_with(root))
    }

    /// Resolves each path (relative ones against `base`) and returns those outside the scope.
    pub fn outside<'a>(&self, paths: impl IntoIterator<Item = &'a str>, base: Option<&Path>) -> Vec<PathBuf> {
        paths
            .into_iter()
            .map(|path| resolve(path, base))
            .filter(|resolved| !self.contains(resolved))
            .collect()
    }
}

/// The project a working directory belongs to: its repository's root (the nearest folder with a
/// `.git`), else the folder itself. Tools keep per-project data under this name.
pub fn project_of(working_directory: &Path) -> String {
    working_directory
        .ancestors()
        .find(|dir| dir.join(".git").exists())
        .unwrap_or(working_directory)
        .display()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resolves_dotdot_symlinks_and_missing_tails() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("src")).unwrap();
        std::os::unix::fs::symlink("/usr", root.join("link")).unwrap();
        let cases = [
            ("src/../src/main.rs", root.join("src/main.rs")),
            ("new/dir/../file", root.join("new/file")),
            ("link/lib", PathBuf::from("/usr/lib")),
            ("link/../etc", PathBuf::from("/etc")),
            ("link/missing/../x", PathBuf::from("/usr/x")),
            ("new/../link/missing/../../etc", PathBuf::from("/etc")),
            ("../../../../../../../../etc/passwd", PathBuf::from("/etc/passwd")),
            ("/etc/./hosts", PathBuf::from("/etc/hosts")),
        ];
        for (input, expected) in cases {
            assert_eq!(resolve(input, Some(&root)), expected, "{input}");
        }
    }

    /// Each link names the next twice (`l1/../l1`), so following links per level of nesting
    /// would take 2^30 steps here; the kernel's budget of 40 links in all ends it at once.
    #[test]
    fn a_chain_of_doubling_links_is_cut_at_the_kernels_budget() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::fs::create_dir(root.join("end")).unwrap();
        for i in 0..30 {
            std::os::unix::fs::symlink(format!("l{0}/../l{0}", i + 1), root.join(format!("l{i}"))).unwrap();
        }
        std::os::unix::fs::symlink("end", root.join("l30")).unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        let path = root.join("l0/file");
        std::thread::spawn(move || done.send(resolve(&path.to_string_lossy(), None)));
        let resolved = finished
            .recv_timeout(std::time::Duration::from_secs(20))
            .expect("the resolution ends (40 links in all), not after 2^30 steps");
        assert!(resolved.starts_with(&root), "{}", resolved.display());
        // A short chain still resolves to its end.
        assert_eq!(resolve("l28/file", Some(&root)), root.join("end/file"));
    }

    #[test]
    fn scope_checks_resolved_paths() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        std::os::unix::fs::symlink("/usr", root.join("escape")).unwrap();
        let scope = PathScope::new([root.clone()]);
        let outside = scope.outside(["a.txt", "escape/bin", "../x", "/usr/bin/env", "sub/../b"], Some(&root));
        let parent = root.parent().unwrap().join("x");
        assert_eq!(outside, vec![PathBuf::from("/usr/bin"), parent, PathBuf::from("/usr/bin/env")]);
    }

    #[test]
    fn session_scope_includes_temp_but_not_the_rest() {
        let scope = PathScope::for_session(None);
        assert!(scope.contains(&resolve("/tmp/x", None)));
        assert!(!scope.contains(&resolve("/etc/passwd", None)));
        assert!(!scope.contains(&resolve("~/.bashrc", None)));
    }
}
