//! What "for this session" and "always" grant a call that names files: a path scope (the file, or
//! a folder shown to the person), never the API for every path.
//!
//! A grant for `readFile` made on `/etc/hostname` must not let `readFile` of `/etc/ssh/ssh_config`
//! or `writeFile` of `~/.profile` run unasked. So for an API with path parameters (and no command
//! parameter, whose grants are prefixes), a grant or a remembered rule holds a scope: an absolute
//! path, resolved as it is on disk (links followed), and a later call is covered only when every
//! path it names, resolved the same way, is that scope or lies beneath it. A path that cannot be
//! resolved safely (a `..` below a folder that does not exist) is covered by nothing.
//!
//! The scope a person is offered ([`suggest`]) is the file's folder, never `/` and never the home
//! folder itself (then the file alone); one a front end sends is taken only when it covers the call
//! it was asked for and is neither of those ([`chosen`]); without one, the call's own files.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;
use tool_core::ApiSpec;

/// The files a call names, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPaths {
    /// Each path the call names (or its working directory, when it names none), resolved.
    pub paths: Vec<PathBuf>,
    /// Every path resolved; when not, no grant covers the call.
    pub resolved: bool,
}

impl CallPaths {
    /// Whether grants with these scopes cover the whole call. A scope counts only when it is an
    /// absolute path that is not too wide ([`too_wide`]); none (a rule saved before grants had
    /// scopes, or one an API client wrote) covers nothing: such a call asks again.
    pub fn covered_by<'a>(&self, scopes: impl Iterator<Item = Option<&'a str>> + Clone) -> bool {
        let home = home();
        let usable = |scope: &str| {
            let scope = Path::new(scope);
            scope.is_absolute() && !too_wide(scope, home.as_deref())
        };
        self.resolved
            && !self.paths.is_empty()
            && self
                .paths
                .iter()
                .all(|path| scopes.clone().flatten().any(|scope| usable(scope) && covers(scope, path)))
    }

    /// Paths that cannot be granted: the call may run once, and nothing is remembered.
    pub fn ungrantable() -> Self {
        Self { paths: Vec::new(), resolved: false }
    }
}

/// The files `arguments` names for an API whose grants are path scopes; `None` for an API that
/// names no files or runs a command (its grants are command prefixes).
pub fn call_paths(spec: &ApiSpec, arguments: &Value, working_directory: Option<&Path>) -> Option<CallPaths> {
    if spec.path_params.is_empty() || spec.command_param.is_some() {
        return None;
    }
    let named: Vec<&str> = spec.path_params.iter().flat_map(|param| param.select(arguments)).collect();
    let mut resolved = true;
    let mut paths = Vec::new();
    let mut add = |path: Option<PathBuf>| match path {
        Some(path) if !paths.contains(&path) => paths.push(path),
        Some(_) => {}
        None => resolved = false,
    };
    if named.is_empty() {
        // A call that names no file works in its working directory.
        add(working_directory.and_then(|dir| resolve(dir, None)));
    }
    for path in named {
        add(resolve(Path::new(path), working_directory));
    }
    Some(CallPaths { paths, resolved })
}

/// `path` (relative to `working_directory`) as it resolves on disk: its
/// nearest existing ancestor's canonical form, joined with the names below it that do not exist
/// yet. `None` when those names climb (`..`), it starts with `~` (a name to the file tools, the
/// home folder to a person), the result is not UTF-8, or nothing resolves.
pub fn resolve(path: &Path, working_directory: Option<&Path>) -> Option<PathBuf> {
    let text = path.to_str()?;
    // `~` is the shell's: the file tools take it as a name, so a grant never guesses for them.
    let absolute = if text == "~" || text.starts_with("~/") {
        return None;
    } else if path.is_absolute() {
        path.to_path_buf()
    } else {
        working_directory?.join(path)
    };
    for ancestor in absolute.ancestors() {
        if let Ok(real) = ancestor.canonicalize() {
            let below = absolute.strip_prefix(ancestor).ok()?;
            let resolved = if below.as_os_str().is_empty() {
                real
            } else if below.components().all(|c| matches!(c, Component::Normal(_))) {
                real.join(below)
            } else {
                return None;
            };
            // Scopes are kept as text: a name that is not UTF-8 would be kept as another name.
            return resolved.to_str().is_some().then_some(resolved);
        }
    }
    None
}

/// Whether `scope` (a resolved absolute path) covers `path` (resolved): it is the same path or a
/// folder holding it (by whole names: `/etc` does not cover `/etcetera`).
pub fn covers(scope: &str, path: &Path) -> bool {
    path.starts_with(scope)
}

/// Whether `scope` is too wide to offer or take: the file system's root, or the home folder or a
/// folder holding it (`/home`).
fn too_wide(scope: &Path, home: Option<&Path>) -> bool {
    let holds_home = |home: &Path| home.starts_with(scope);
    scope.parent().is_none()
        || home.is_some_and(|home| holds_home(home) || resolve(home, None).is_some_and(|h| holds_home(&h)))
}

/// Folders whose every file is a secret or the machine's own state: never offered as a scope
/// (the file alone is), though a person may still type one.
fn sensitive(folder: &Path, home: Option<&Path>) -> bool {
    const UNDER_HOME: &[&str] =
        &[".ssh", ".gnupg", ".aws", ".config", ".kube", ".docker", ".netrc", ".azure", ".gcloud"];
    const SYSTEM: &[&str] = &["/proc", "/sys", "/dev", "/boot", "/root", "/etc/ssh", "/etc/ssl/private"];
    SYSTEM.iter().any(|root| folder.starts_with(root))
        || home.is_some_and(|home| UNDER_HOME.iter().any(|name| folder.starts_with(home.join(name))))
}

/// The scope "for this session" and "always" offer for `paths`: the folder holding them (their
/// nearest common folder), unless that is `/`, the home folder or a folder of secrets (`~/.ssh`,
/// `/proc`…), when it is the one file itself; `None` when several files share no narrower folder
/// (then each file alone is granted).
pub fn suggest(paths: &CallPaths) -> Option<String> {
    if !paths.resolved {
        return None;
    }
    let home = home();
    let mut common: Option<PathBuf> = None;
    for path in &paths.paths {
        let folder =
            if paths.paths.len() == 1 && path.is_dir() { path.clone() } else { path.parent()?.to_path_buf() };
        common = Some(match common {
            None => folder,
            Some(known) => known.ancestors().find(|a| folder.starts_with(a))?.to_path_buf(),
        });
    }
    let common = common?;
    let home = home.map(|h| resolve(&h, None).unwrap_or(h));
    if !too_wide(&common, home.as_deref()) && !sensitive(&common, home.as_deref()) {
        return Some(common.display().to_string());
    }
    match paths.paths.as_slice() {
        [one] if !too_wide(one, home.as_deref()) => Some(one.display().to_string()),
        _ => None,
    }
}

/// The scopes a decision grants for a call naming `paths`: the one a person chose (`asked`, a
/// path relative to `working_directory` or absolute) when it covers the whole call and is not too
/// wide, else each of the call's own files. Empty when the call's paths did not resolve (it runs
/// once; nothing is granted).
pub fn chosen(paths: &CallPaths, asked: Option<&str>, working_directory: Option<&Path>) -> Vec<String> {
    let home = home();
    // A call on `/` or the home folder itself runs once: remembering its own path would be the
    // widest grant of all.
    if !paths.resolved || paths.paths.iter().any(|p| too_wide(p, home.as_deref())) {
        return Vec::new();
    }
    if let Some(asked) = asked.map(str::trim).filter(|a| !a.is_empty()) {
        let scope = resolve(Path::new(asked), working_directory);
        // A scope shown as an absolute path must still be that path: one swapped for a link
        // since is not the folder the person saw.
        let as_shown =
            |scope: &Path| !Path::new(asked).is_absolute() || scope == Path::new(asked.trim_end_matches('/'));
        match scope {
            Some(scope)
                if as_shown(&scope)
                    && !too_wide(&scope, home.as_deref())
                    && paths.paths.iter().all(|p| p.starts_with(&scope)) =>
            {
                return vec![scope.display().to_string()];
            }
            _ => tracing::info!(
                scope = asked,
                "the scope asked for is wider than allowed, not as shown, or does not cover the call; granting its files alone"
            ),
        }
    }
    paths.paths.iter().map(|p| p.display().to_string()).collect()
}

/// How a grant or rule's `argument_prefix` reads for a person, after `tool/api`: for a command
/// "commands starting `cargo test`", for a call naming files "within /etc" (with none, a rule
/// made before grants had scopes, which covers nothing now), else nothing.
pub fn describe(spec: Option<&ApiSpec>, prefix: Option<&str>) -> String {
    let names_files = spec.is_some_and(|spec| !spec.path_params.is_empty() && spec.command_param.is_none());
    match (prefix, names_files) {
        (Some(scope), true) => format!("within {scope}"),
        (None, true) => {
            "with no scope (saved before grants had scopes: it covers nothing now; revoke it)".to_owned()
        }
        (Some(prefix), false) => format!("commands starting `{prefix}`"),
        (None, false) => String::new(),
    }
}

fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from).filter(|h| h.is_absolute())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use tool_core::PathParam;

    fn spec() -> ApiSpec {
        ApiSpec::new::<serde_json::Value>("readFile", "reads").path_param(PathParam::new("path"))
    }

    #[test]
    fn a_scope_covers_its_folder_by_whole_names_and_nothing_beside_it() {
        let root = tempfile::tempdir().unwrap();
        let etc = root.path().canonicalize().unwrap().join("etc");
        std::fs::create_dir_all(etc.join("ssh")).unwrap();
        std::fs::write(etc.join("hostname"), "box").unwrap();
        std::fs::create_dir_all(root.path().join("etcetera")).unwrap();
        let at = |p: &str| call_paths(&spec(), &json!({"path": p}), Some(root.path())).unwrap();

        let hostname = at("etc/hostname");
        assert_eq!(hostname.paths, [etc.join("hostname")]);
        // The file alone: covers it, not its neighbour.
        let file = chosen(&hostname, None, Some(root.path()));
        assert_eq!(file, [etc.join("hostname").display().to_string()]);
        assert!(hostname.covered_by(file.iter().map(|s| Some(s.as_str()))));
        assert!(!at("etc/ssh/ssh_config").covered_by(file.iter().map(|s| Some(s.as_str()))));
        // The folder offered: covers what is under it, not a name that merely starts the same.
        let folder = suggest(&hostname).unwrap();
        assert_eq!(folder, etc.display().to_string());
        let scopes = chosen(&hostname, Some(&folder), Some(root.path()));
        let covered = |p: &str| at(p).covered_by(scopes.iter().map(|s| Some(s.as_str())));
        assert!(covered("etc/ssh/ssh_config") && covered("etc/new-file"));
        assert!(!covered("etcetera/x") && !covered("hostname") && !covered("etc/../etcetera/x"));
        // A climb below a missing folder resolves to nothing, so nothing covers it.
        assert!(!covered("etc/missing/../../etcetera/x"));
    }

    #[test]
    fn a_link_is_judged_by_where_it_leads() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("granted")).unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("granted/door")).unwrap();
        let scopes = [base.join("granted").display().to_string()];
        let through = call_paths(&spec(), &json!({"path": "granted/door/key"}), Some(&base)).unwrap();
        assert_eq!(through.paths, [base.join("secret/key")]);
        assert!(!through.covered_by(scopes.iter().map(|s| Some(s.as_str()))));
    }

    #[test]
    fn the_root_and_the_home_folder_are_never_a_scope() {
        let home = home().expect("tests run with HOME set");
        let root_file = CallPaths { paths: vec![PathBuf::from("/hostname")], resolved: true };
        assert_eq!(suggest(&root_file).as_deref(), Some("/hostname"));
        assert_eq!(chosen(&root_file, Some("/"), None), ["/hostname"]);
        let in_home =
            CallPaths { paths: vec![resolve(&home, None).unwrap().join(".profile")], resolved: true };
        let profile = in_home.paths[0].display().to_string();
        assert_eq!(suggest(&in_home).as_deref(), Some(profile.as_str()));
        assert_eq!(chosen(&in_home, Some("~"), None), std::slice::from_ref(&profile));
        // Nor a folder holding the home folder.
        let holding = resolve(&home, None).unwrap().parent().unwrap().display().to_string();
        assert_eq!(chosen(&in_home, Some(&holding), None), std::slice::from_ref(&profile));
        // A scope that does not hold the call is not taken either.
        assert_eq!(chosen(&in_home, Some("/usr"), None), [profile]);
        // A call on `/` or the home folder itself grants nothing, whatever is asked: its own path
        // would be the widest scope of all.
        let root = CallPaths { paths: vec![PathBuf::from("/")], resolved: true };
        assert!(chosen(&root, None, None).is_empty() && suggest(&root).is_none());
        let home_itself = CallPaths { paths: vec![resolve(&home, None).unwrap()], resolved: true };
        assert!(chosen(&home_itself, None, None).is_empty());
        // Scopes too wide, relative or empty cover nothing, and a rule with none covers nothing.
        let ssh =
            CallPaths { paths: vec![resolve(&home, None).unwrap().join(".ssh/id_ed25519")], resolved: true };
        for scope in ["/", "", "etc", home.to_str().unwrap()] {
            assert!(!ssh.covered_by([Some(scope)].into_iter()), "{scope:?}");
        }
        assert!(!ssh.covered_by([None].into_iter()));
        // A secret's folder is never offered: the file alone is.
        assert_eq!(suggest(&ssh), Some(ssh.paths[0].display().to_string()));
        // `~` is a name to the file tools: nothing is granted for it.
        assert_eq!(resolve(Path::new("~/.profile"), Some(Path::new("/tmp"))), None);
    }

    #[test]
    fn a_scope_shown_then_swapped_for_a_link_is_not_granted() {
        let root = tempfile::tempdir().unwrap();
        let base = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(base.join("shared/in")).unwrap();
        std::fs::create_dir_all(base.join("secret")).unwrap();
        std::fs::write(base.join("secret/key"), "k").unwrap();
        let shown = base.join("shared/in").display().to_string();
        // Shown `shared/in`; before the decision it became a link to `secret`.
        std::fs::remove_dir(base.join("shared/in")).unwrap();
        std::os::unix::fs::symlink(base.join("secret"), base.join("shared/in")).unwrap();
        let now = call_paths(&spec(), &json!({"path": "shared/in/key"}), Some(&base)).unwrap();
        assert_eq!(chosen(&now, Some(&shown), Some(&base)), [base.join("secret/key").display().to_string()]);
    }
}
