//! `cargo xtask new-tool NAME`: a new builtin tool crate, registered, or nothing at all.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};

const CARGO_TEMPLATE: &str = include_str!("templates/Cargo.toml.tmpl");
const LIB_TEMPLATE: &str = include_str!("templates/lib.rs.tmpl");
const ROLE_TEMPLATE: &str = include_str!("templates/system_role.md.tmpl");

/// One text edit: insert `line` before the marker line in `path`.
struct Insert {
    path: PathBuf,
    marker: &'static str,
    line: String,
}

/// Creates `crates/builtin-tool-NAME` and registers it in the workspace and in `builtin-tools`.
///
/// Every check and every new text is computed before anything is written; if a write fails, the
/// files already changed are restored and the new crate is removed, so a failure leaves the tree
/// as it was.
pub fn create(root: &Path, name: &str) -> Result<PathBuf> {
    validate(name)?;
    let crate_name = format!("builtin-tool-{name}");
    let module = crate_name.replace('-', "_");
    let target = root.join("crates").join(&crate_name);
    if target.exists() {
        bail!("crates/{crate_name} already exists: the tool `{name}` is taken");
    }
    let registry = root.join("crates/builtin-tools/src/registry.rs");
    let inserts = [
        Insert {
            path: root.join("Cargo.toml"),
            marker: "# new-tool: workspace dependencies",
            line: format!(
                "{crate_name} = {{ path = \"crates/{crate_name}\", version = \"0.0.0\", default-features = false }}"
            ),
        },
        Insert {
            path: root.join("crates/builtin-tools/Cargo.toml"),
            marker: "    # new-tool: runtime",
            line: format!("    \"{crate_name}/runtime\","),
        },
        Insert {
            path: root.join("crates/builtin-tools/Cargo.toml"),
            marker: "    # new-tool: render",
            line: format!("    \"{crate_name}/render\","),
        },
        Insert {
            path: root.join("crates/builtin-tools/Cargo.toml"),
            marker: "# new-tool: dependencies",
            line: format!("{crate_name}.workspace = true"),
        },
        Insert {
            path: registry.clone(),
            marker: "        // new-tool: register",
            line: format!("        tool!({module}),"),
        },
    ];

    // Compute every edited file first.
    let mut edited: Vec<(PathBuf, String, String)> = Vec::new();
    for insert in &inserts {
        let current = match edited.iter().position(|(path, _, _)| *path == insert.path) {
            Some(i) => edited.remove(i),
            None => {
                let text = fs::read_to_string(&insert.path)
                    .with_context(|| format!("cannot read {}", insert.path.display()))?;
                (insert.path.clone(), text.clone(), text)
            }
        };
        let (path, original, text) = current;
        if text.lines().any(|l| l.trim() == insert.line.trim()) {
            bail!("{} already registers `{name}`", path.display());
        }
        let Some(at) = text.find(&format!("{}\n", insert.marker)) else {
            bail!(
                "{} has no `{}` line to insert at; restore it from git",
                path.display(),
                insert.marker.trim()
            );
        };
        let updated = format!("{}{}\n{}", &text[..at], insert.line, &text[at..]);
        edited.push((path, original, updated));
    }

    let files = render_crate(name, &module);
    let staging = root.join("crates").join(format!(".{crate_name}.new"));
    let _ = fs::remove_dir_all(&staging);
    let result = (|| -> Result<()> {
        for (relative, text) in &files {
            let path = staging.join(relative);
            fs::create_dir_all(path.parent().unwrap_or(&staging))?;
            fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
        }
        fs::rename(&staging, &target).with_context(|| format!("cannot create {}", target.display()))?;
        for (path, _, updated) in &edited {
            write_replacing(path, updated)?;
        }
        Ok(())
    })();
    if let Err(error) = result {
        for (path, original, _) in &edited {
            let _ = write_replacing(path, original);
        }
        let _ = fs::remove_dir_all(&staging);
        let _ = fs::remove_dir_all(&target);
        return Err(error.context(format!("new-tool {name} failed; nothing was changed")));
    }
    Ok(target)
}

/// A tool name: lowercase kebab-case, starting with a letter, at most 40 characters.
fn validate(name: &str) -> Result<()> {
    let valid = !name.is_empty()
        && name.len() <= 40
        && name.starts_with(|c: char| c.is_ascii_lowercase())
        && !name.ends_with('-')
        && !name.contains("--")
        && name.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
    if !valid {
        bail!(
            "`{name}` is not a valid tool name: use lowercase letters, digits and single hyphens, starting with a letter (e.g. `web-search`), at most 40 characters"
        );
    }
    Ok(())
}

fn render_crate(name: &str, module: &str) -> Vec<(&'static str, String)> {
    let pascal: String = name
        .split('-')
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    let title = name.split('-').collect::<Vec<_>>().join(" ");
    let title = title[..1].to_uppercase() + &title[1..];
    let fill = |template: &str| {
        template
            .replace("{{name}}", name)
            .replace("{{crate}}", module)
            .replace("{{Pascal}}", &pascal)
            .replace("{{Title}}", &title)
    };
    vec![
        ("Cargo.toml", fill(CARGO_TEMPLATE)),
        ("src/lib.rs", fill(LIB_TEMPLATE)),
        ("src/system_role.md", fill(ROLE_TEMPLATE)),
    ]
}

fn write_replacing(path: &Path, text: &str) -> Result<()> {
    let temp = path.with_extension("new-tool.tmp");
    fs::write(&temp, text).with_context(|| format!("cannot write {}", temp.display()))?;
    fs::rename(&temp, path).with_context(|| format!("cannot replace {}", path.display()))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A copy of the files new-tool edits, in a temp folder.
    fn scratch() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        for file in ["Cargo.toml", "crates/builtin-tools/Cargo.toml", "crates/builtin-tools/src/registry.rs"]
        {
            let to = dir.path().join(file);
            fs::create_dir_all(to.parent().unwrap()).unwrap();
            fs::copy(root.join(file), to).unwrap();
        }
        fs::create_dir_all(dir.path().join("crates/builtin-tool-todo")).unwrap();
        dir
    }

    fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
        ["Cargo.toml", "crates/builtin-tools/Cargo.toml", "crates/builtin-tools/src/registry.rs"]
            .iter()
            .map(|f| (PathBuf::from(f), fs::read_to_string(root.join(f)).unwrap()))
            .collect()
    }

    #[test]
    fn creates_and_registers() {
        let dir = scratch();
        let root = dir.path();
        create(root, "web-search").unwrap();
        let lib = fs::read_to_string(root.join("crates/builtin-tool-web-search/src/lib.rs")).unwrap();
        assert!(lib.contains("pub enum WebSearchApi") && lib.contains("IDENTIFIER: &str = \"web-search\""));
        assert!(!lib.contains("{{"), "every placeholder is filled");
        let registry = fs::read_to_string(root.join("crates/builtin-tools/src/registry.rs")).unwrap();
        assert!(registry.contains("        tool!(builtin_tool_web_search),\n        // new-tool: register"));
        let tools = fs::read_to_string(root.join("crates/builtin-tools/Cargo.toml")).unwrap();
        assert!(tools.contains("\"builtin-tool-web-search/runtime\",\n    # new-tool: runtime"));
        assert!(tools.contains("builtin-tool-web-search.workspace = true\n# new-tool: dependencies"));
        let workspace = fs::read_to_string(root.join("Cargo.toml")).unwrap();
        assert!(workspace.contains("builtin-tool-web-search = { path = \"crates/builtin-tool-web-search\""));
        assert!(!root.join("crates/.builtin-tool-web-search.new").exists());
    }

    #[test]
    fn refusals_change_nothing() {
        let dir = scratch();
        let root = dir.path();
        let before = snapshot(root);
        for (name, needle) in [
            ("Bad_Name", "not a valid tool name"),
            ("-x", "not a valid tool name"),
            ("a--b", "not a valid tool name"),
            ("", "not a valid tool name"),
            ("todo", "already exists"),
        ] {
            let error = create(root, name).unwrap_err().to_string();
            assert!(error.contains(needle), "{name}: {error}");
            assert_eq!(snapshot(root), before, "{name} changed files");
        }
        // A registry without its marker: refused before anything is written.
        let registry = root.join("crates/builtin-tools/src/registry.rs");
        let text = fs::read_to_string(&registry).unwrap();
        fs::write(&registry, text.replace("// new-tool: register", "")).unwrap();
        let before = snapshot(root);
        let error = format!("{:#}", create(root, "fresh").unwrap_err());
        assert!(error.contains("no `// new-tool: register` line"), "{error}");
        assert_eq!(snapshot(root), before);
        assert!(!root.join("crates/builtin-tool-fresh").exists());
    }

    #[test]
    fn a_failed_write_rolls_back() {
        let dir = scratch();
        let root = dir.path();
        let before = snapshot(root);
        // Permissions cannot block root, so make the last write fail another way: a folder sits
        // where the registry's temporary file must go.
        let registry = root.join("crates/builtin-tools/src/registry.rs");
        fs::create_dir_all(registry.with_extension("new-tool.tmp")).unwrap();
        let error = format!("{:#}", create(root, "rolled").unwrap_err());
        assert!(error.contains("nothing was changed"), "{error}");
        assert_eq!(snapshot(root), before);
        assert!(!root.join("crates/builtin-tool-rolled").exists());
    }
}
