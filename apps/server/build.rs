// The commit the binary is built from, for `--version` (`unknown` outside a git checkout); the
// terminal app includes this file as its own build script.

use std::path::Path;
use std::process::Command;

fn main() {
    let git = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.git");
    let commit = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_owned())
        .filter(|commit| !commit.is_empty())
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=TOOLHOST_COMMIT={commit}");
    // Built again when HEAD moves: the branch it names, or HEAD itself when detached.
    println!("cargo:rerun-if-changed={}", git.join("HEAD").display());
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(reference) = head.trim().strip_prefix("ref: ")
    {
        // Only files that exist: cargo takes a missing one as changed, and would build the
        // server again on every run (a fresh clone has no packed-refs).
        for file in [git.join(reference), git.join("packed-refs")] {
            if file.exists() {
                println!("cargo:rerun-if-changed={}", file.display());
            }
        }
    }
}
