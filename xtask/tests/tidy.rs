//! Tidy checks, run as ordinary tests so `cargo test` enforces them.

use std::fs;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// Every `.rs` file of the project (not `target/`, not hidden folders).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let entry = entry.unwrap();
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            rust_files(&path, out);
        } else if name.ends_with(".rs") || name.ends_with(".rs.tmpl") {
            out.push(path);
        }
    }
}

/// The crates of the workspace: folders with a Cargo.toml under crates/ and apps/, plus xtask.
fn crates() -> Vec<PathBuf> {
    let root = root();
    let mut found = vec![root.join("xtask")];
    for group in ["crates", "apps"] {
        let Ok(entries) = fs::read_dir(root.join(group)) else { continue };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.join("Cargo.toml").exists() {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

#[test]
fn every_crate_has_crate_docs() {
    for krate in crates() {
        let entry = ["src/lib.rs", "src/main.rs"].iter().map(|f| krate.join(f)).find(|p| p.exists());
        let entry = entry.unwrap_or_else(|| panic!("{} has no lib.rs or main.rs", krate.display()));
        let text = fs::read_to_string(&entry).unwrap();
        assert!(text.trim_start().starts_with("//!"), "{} must start with crate docs (//!)", entry.display());
    }
}

#[test]
fn no_unfinished_code_or_ignored_tests() {
    // Built from pieces so this file does not trip its own check.
    let banned = [concat!("todo", "!("), concat!("unimplemented", "!("), concat!("#[", "ignore")];
    let mut files = Vec::new();
    rust_files(&root(), &mut files);
    assert!(files.len() > 10, "found only {} Rust files", files.len());
    let mut problems = Vec::new();
    for file in files {
        let text = fs::read_to_string(&file).unwrap();
        for (n, line) in text.lines().enumerate() {
            for needle in banned {
                if line.contains(needle) {
                    problems.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
                }
            }
        }
    }
    assert!(problems.is_empty(), "unfinished code or ignored tests:\n{}", problems.join("\n"));
}

#[test]
fn architecture_doc_names_every_crate() {
    let doc = fs::read_to_string(root().join("docs/ARCHITECTURE.md")).expect("docs/ARCHITECTURE.md exists");
    for krate in crates() {
        let name = krate.file_name().unwrap().to_string_lossy().into_owned();
        // Tools created by new-tool are covered by the builtin-tool-* section.
        if name.starts_with("builtin-tool-")
            && !["builtin-tool-local-system", "builtin-tool-todo"].contains(&name.as_str())
        {
            continue;
        }
        let named = doc.contains(&format!("`{name}`")) || doc.contains(&format!("/{name}`"));
        assert!(named, "docs/ARCHITECTURE.md does not describe `{name}`");
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = fs::read_to_string(root().join("README.md")).unwrap();
    let ci = fs::read_to_string(root().join(".ci/run")).unwrap();
    let command = "cargo xtask test";
    assert!(readme.contains(command), "README.md must give `{command}`");
    assert!(ci.contains(command), ".ci/run must run `{command}`");
}
