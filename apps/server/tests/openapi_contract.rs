//! The OpenAPI document and the server agree: schemathesis (pinned, installed by
//! `.ci/interop-tools.sh`) runs every check against the real binary, without keys and with them,
//! and finds nothing. The few exceptions are in `tests/interop/schemathesis.toml`, each with its
//! reason.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn schemathesis() -> PathBuf {
    let dir = std::env::var_os("TOOLHOST_INTEROP_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/interop"), PathBuf::from);
    let binary = dir.join("schemathesis/bin/schemathesis");
    assert!(
        binary.exists(),
        "schemathesis is not installed in {}: run `bash .ci/interop-tools.sh` (cargo xtask test does)",
        dir.display()
    );
    binary
}

fn run(keys: Option<&str>) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (data, work) = (root.join("data"), root.join("work"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .env("TOOLHOST_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
        .env("TOOLHOST_STATE_DIR", &data)
        // Fuzzed calls that would ask a person do not hold the run for ten minutes each.
        .env("TOOLHOST_APPROVAL_TIMEOUT_SECS", "1")
        .env("RUST_LOG", "error")
        .env_remove("TOOLHOST_API_KEYS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    if let Some(keys) = keys {
        command
            .env("TOOLHOST_API_KEYS", keys)
            .env("TOOLHOST_WORKSPACE_ROOTS", format!("acme={}", work.display()));
    }
    let _server = Server(command.spawn().unwrap());
    let started = (0..400).any(|_| {
        let up = std::net::TcpStream::connect(("127.0.0.1", port)).is_ok();
        if !up {
            std::thread::sleep(Duration::from_millis(25));
        }
        up
    });
    assert!(started, "the server did not start");
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/schemathesis.toml");
    let mut st = Command::new(schemathesis());
    st.current_dir(&root)
        .arg("--config-file")
        .arg(&config)
        .arg("--no-color")
        .arg("run")
        .arg(format!("http://127.0.0.1:{port}/openapi.json"))
        .args(["--checks", "all", "--max-examples", "20", "--seed", "1", "--request-timeout", "10"]);
    if keys.is_some() {
        st.args(["--header", "Authorization: Bearer key-acme"]);
    }
    let output = st.output().unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "schemathesis found disagreements between /openapi.json and the server:\n{report}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(report.contains("Tested:"), "operations were tested: {report}");
}

#[test]
fn the_document_holds_on_a_server_without_keys() {
    run(None);
}

#[test]
fn the_document_holds_on_a_server_with_keys() {
    run(Some(&toolhost_server::auth::stored_form("acme", "key-acme")));
}
