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
    /// Whether grants with these scopes cover the whole call (`None` is a legacy grant of the
    /// API for every path).
    pub fn covered_by<'a>(&self, scopes: impl Iterator<Item = Option<&'a str>> + Clone) -> bool {
        if scopes.clone().any(|scope| scope.is_none()) {
            return true;
        }
        self.resolved
            && !self.paths.is_empty()
            && self
                .paths
                .iter()
                .all(|path| scopes.clone().any(|scope| scope.is_some_and(|s| covers(s, path))))
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
    let home = home();
    let mut add = |path: Option<PathBuf>| match path {
        Some(path) if !paths.contains(&path) => paths.push(path),
        Some(_) => {}
        None => resolved = false,
    };
    if named.is_empty() {
        // A call that names no file works in its working directory.
        add(working_directory.and_then(|dir| resolve(dir, None, None)));
    }
    for path in named {
        add(resolve(Path::new(path), working_directory, home.as_deref()));
    }
    Some(CallPaths { paths, resolved })
}

/// `path` (relative to `working_directory`, `~` for the home folder) as it resolves on disk: its
/// nearest existing ancestor's canonical form, joined with the names below it that do not exist
/// yet. `None` when those names climb (`..`) or nothing resolves.
pub fn resolve(path: &Path, working_directory: Option<&Path>, home: Option<&Path>) -> Option<PathBuf> {
    let text = path.to_str()?;
    let absolute = if text == "~" {
        home?.to_path_buf()
    } else if let Some(rest) = text.strip_prefix("~/") {
        home?.join(rest)
    } else if path.is_absolute() {
        path.to_path_buf()
    } else {
        working_directory?.join(path)
    };
    for ancestor in absolute.ancestors() {
        if let Ok(real) = ancestor.canonicalize() {
            let below = absolute.strip_prefix(ancestor).ok()?;
            if below.as_os_str().is_empty() {
                return Some(real);
            }
            if below.components().all(|c| matches!(c, Component::Normal(_))) {
                return Some(real.join(below));
            }
            return None;
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
        || home
            .is_some_and(|home| holds_home(home) || resolve(home, None, None).is_some_and(|h| holds_home(&h)))
}

/// The scope "for this session" and "always" offer for `paths`: the folder holding them (their
/// nearest common folder), unless that is `/` or the home folder, when it is the one file itself;
/// `None` when several files share no narrower folder (then each file alone is granted).
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
    if !too_wide(&common, home.as_deref()) {
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
    if !paths.resolved {
        return Vec::new();
    }
    let home = home();
    if let Some(asked) = asked.map(str::trim).filter(|a| !a.is_empty()) {
        let scope = resolve(Path::new(asked), working_directory, home.as_deref());
        match scope {
            Some(scope)
                if !too_wide(&scope, home.as_deref())
                    && paths.paths.iter().all(|p| p.starts_with(&scope)) =>
            {
                return vec![scope.display().to_string()];
            }
            _ => tracing::info!(
                scope = asked,
                "the scope asked for is wider than allowed or does not cover the call; granting its files alone"
            ),
        }
    }
    paths.paths.iter().map(|p| p.display().to_string()).collect()
}

/// How a grant or rule's `argument_prefix` reads for a person, after `tool/api`: for a command
/// "commands starting `cargo test`", for a call naming files "within /etc" (with none, a rule
/// made before grants had scopes: "any file"), else nothing.
pub fn describe(spec: Option<&ApiSpec>, prefix: Option<&str>) -> String {
    let names_files = spec.is_some_and(|spec| !spec.path_params.is_empty() && spec.command_param.is_none());
    match (prefix, names_files) {
        (Some(scope), true) => format!("within {scope}"),
        (None, true) => "any file".to_owned(),
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
            CallPaths { paths: vec![resolve(&home, None, None).unwrap().join(".profile")], resolved: true };
        let profile = in_home.paths[0].display().to_string();
        assert_eq!(suggest(&in_home).as_deref(), Some(profile.as_str()));
        assert_eq!(chosen(&in_home, Some("~"), None), std::slice::from_ref(&profile));
        // Nor a folder holding the home folder.
        let holding = resolve(&home, None, None).unwrap().parent().unwrap().display().to_string();
        assert_eq!(chosen(&in_home, Some(&holding), None), std::slice::from_ref(&profile));
        // A scope that does not hold the call is not taken either.
        assert_eq!(chosen(&in_home, Some("/usr"), None), [profile]);
    }
}
