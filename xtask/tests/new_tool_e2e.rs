//! Acceptance: on a copy of the workspace, `cargo xtask new-tool echo-demo` yields a crate that
//! builds, whose test passes, and that `cargo xtask catalogue` lists, with nothing edited by hand.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "target" || name == ".git" {
            continue;
        }
        let (source, dest) = (entry.path(), to.join(&name));
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&source, &dest);
        } else {
            fs::copy(&source, &dest).unwrap();
        }
    }
}

fn cargo(dir: &Path, target: &Path, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO"))
        .args(args)
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "cargo {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

#[test]
fn new_tool_builds_tests_and_is_catalogued() {
    let root = workspace();
    let copy = tempfile::tempdir().unwrap();
    for item in ["Cargo.toml", "Cargo.lock", ".cargo", "crates", "apps", "xtask"] {
        let source = root.join(item);
        if source.is_dir() {
            copy_tree(&source, &copy.path().join(item));
        } else {
            fs::copy(&source, copy.path().join(item)).unwrap();
        }
    }
    // A target folder of its own, kept between runs, so dependencies build once.
    let target = root.join("target").join("xtask-e2e");
    let dir = copy.path();

    let created = cargo(dir, &target, &["xtask", "new-tool", "echo-demo"]);
    assert!(created.contains("builtin-tool-echo-demo"), "{created}");
    let tested = cargo(dir, &target, &["test", "-p", "builtin-tool-echo-demo"]);
    assert!(tested.contains("test tests::echo_round_trip ... ok"), "{tested}");
    let catalogue = cargo(dir, &target, &["xtask", "catalogue", "--format", "openai"]);
    assert!(catalogue.contains("\"name\": \"echo\""), "{catalogue}");
    let again = Command::new(env!("CARGO"))
        .args(["xtask", "new-tool", "echo-demo"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", &target)
        .output()
        .unwrap();
    assert!(!again.status.success());
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
}
