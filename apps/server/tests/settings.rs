//! The configuration file against the real binary: a file alone starts a keyed server with its
//! workspace roots; a flag wins over the file; a key that names no setting and a value a setting
//! refuses are errors that name them; `check-config` says what holds and masks secrets.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{free_port, wait_healthy as wait_up};

/// The binary with a clean environment (no `TOOLHOST_*` of the machine running the tests).
fn server() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null());
    command
}

struct Setup {
    _dir: tempfile::TempDir,
    root: std::path::PathBuf,
    file: std::path::PathBuf,
}

/// A folder with a workspace, a state folder, a secret file and a configuration file naming them.
fn setup(port: u16, extra: &str) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(root.join("acme")).unwrap();
    std::fs::create_dir_all(root.join("state")).unwrap();
    std::fs::write(root.join("acme/notes.txt"), "from the file's root\n").unwrap();
    std::fs::write(root.join("db-url"), format!("sqlite://{}/journal.db\n", root.join("state").display()))
        .unwrap();
    let key = toolhost_server::auth::stored_form("acme", "key-acme");
    let file = root.join("server.toml");
    std::fs::write(
        &file,
        format!(
            "listen = \"127.0.0.1:{port}\"\n\
             database_url = {{ file = \"{db}\" }}\n\
             state-dir = \"{state}\"\n\
             api-key = [\"{key}\"]\n\
             workspace-root = [\"acme={acme}\"]\n\
             command-max-processes = 128\n\
             {extra}\n",
            db = root.join("db-url").display(),
            state = root.join("state").display(),
            acme = root.join("acme").display(),
        ),
    )
    .unwrap();
    Setup { _dir: dir, root, file }
}

#[tokio::test]
async fn a_configuration_file_alone_starts_a_keyed_server_and_a_flag_wins_over_it() {
    let (file_port, flag_port) = (free_port(), free_port());
    let setup = setup(file_port, "");
    let mut child = server()
        .arg("--config")
        .arg(&setup.file)
        .arg("--listen")
        .arg(format!("127.0.0.1:{flag_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{flag_port}");
    assert!(wait_up(&base).await, "the flag's address is served");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    assert!(
        client.get(format!("http://127.0.0.1:{file_port}/healthz")).send().await.is_err(),
        "not the file's: the flag wins"
    );
    // The file's keys and roots hold: no key, 401; the key opens a session on the file's root.
    let anonymous = client.get(format!("{base}/v1/journal")).send().await.unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let created = client
        .post(format!("{base}/v1/sessions"))
        .bearer_auth("key-acme")
        .json(&serde_json::json!({"working_directory": setup.root.join("acme")}))
        .send()
        .await
        .unwrap();
    assert_eq!(created.status().as_u16(), 201, "{:?}", created.text().await);
    let ready: serde_json::Value = client
        .get(format!("{base}/readyz"))
        .bearer_auth("key-acme")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let limits = ready["command_limits"]["detail"].as_str().unwrap_or_default();
    assert!(limits.contains("128 processes"), "the file's limit: {ready}");
    // A backup of the live journal, by the same configuration.
    let copy = setup.root.join("backup.db");
    let out =
        server().arg("--config").arg(&setup.file).arg("backup").arg("--to").arg(&copy).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let copied = rusqlite::Connection::open(&copy).unwrap();
    let check: String = copied.query_row("PRAGMA integrity_check", [], |row| row.get(0)).unwrap();
    assert_eq!(check, "ok");
    let tables: i64 = copied
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'sessions'",
            [],
            |row| row.get(0),
        )
        .unwrap();
    assert_eq!(tables, 1, "the copy is a journal");
    let sessions: i64 = copied.query_row("SELECT count(*) FROM sessions", [], |row| row.get(0)).unwrap();
    assert_eq!(sessions, 1, "with the session opened above");
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(setup.root.join("state/journal.db").exists(), "the database URL came from its file");
}

#[test]
fn unknown_keys_and_bad_values_are_refused_with_their_names() {
    let unknown = setup(free_port(), "workspace_roots = [\"x\"]");
    let out = server().arg("--config").arg(&unknown.file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("`workspace_roots`") && err.contains("did you mean `workspace-root`"), "{err}");

    let bad = setup(free_port(), "command-cpu-weight = \"heavy\"");
    let out = server().arg("--config").arg(&bad.file).output().unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("configuration file") && err.contains("--command-cpu-weight") && err.contains("heavy"),
        "{err}"
    );

    // An exposure for a tool that does not exist would hide nothing: refused, not ignored.
    for (setting, says) in [
        ("tool-exposure = [\"code_interpreter=hidden\"]", "unknown tool `code_interpreter`"),
        ("tool-exposure = [\"mcp-nothing=hidden\"]", "no server of the MCP configuration mounts"),
        ("tool-exposure = [\"calculator=sometimes\"]", "direct, auto, deferred or hidden"),
    ] {
        let typo = setup(free_port(), setting);
        let out = server().arg("--config").arg(&typo.file).output().unwrap();
        assert!(!out.status.success(), "{setting}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{setting}: {err}");
    }
}

#[test]
fn check_config_prints_the_effective_settings_masked_and_says_what_fails() {
    let setup = setup(free_port(), "");
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("command-max-processes = \"128\""), "{text}");
    assert!(text.contains("api-key = \"****\"") && text.contains("database-url = \"****\""), "{text}");
    assert!(!text.contains("key-acme") && !text.contains("sqlite://"), "secrets stay masked: {text}");
    assert!(text.contains("approval-timeout-secs = \"600\"  # default"), "{text}");
    assert!(text.contains("# ok:") && text.contains("the kernel's sandbox:"), "{text}");
    // An environment variable wins over the file.
    let out = server()
        .env("TOOLHOST_COMMAND_MAX_PROCESSES", "96")
        .arg("--config")
        .arg(&setup.file)
        .arg("check-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("command-max-processes = \"96\"  # from the environment"), "{text}");
    // The example file in the docs is a valid configuration.
    let example = concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/server.example.toml");
    let out = server().arg("--config").arg(example).arg("check-config").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("names no setting") && !err.contains("not valid TOML"), "{err}");

    std::fs::remove_dir_all(setup.root.join("acme")).unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("workspace root") && err.contains("acme"), "{err}");
}

#[test]
fn version_names_the_commit() {
    let out = server().arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .map_or_else(|| "unknown".to_owned(), |out| String::from_utf8_lossy(&out.stdout).trim().to_owned());
    assert!(text.starts_with("toolhost-server "), "{text}");
    // Built from this checkout (the build script runs again when HEAD moves).
    assert!(text.contains(&format!("(commit {head})")), "{text} vs {head}");
}

/// The service unit in `deploy/` is one systemd accepts (`systemd-analyze verify`, with the
/// binary this build made in place of the installed one).
#[test]
fn the_service_unit_verifies() {
    let unit =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../deploy/toolhost-server.service"))
            .unwrap();
    assert!(
        unit.contains("Delegate=yes")
            && unit.contains("Restart=on-failure")
            && unit.contains("NoNewPrivileges=yes")
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("toolhost-server.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/toolhost-server", env!("CARGO_BIN_EXE_toolhost-server")),
    )
    .unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&path)
        .output()
        .expect("systemd-analyze is installed (.ci/run installs systemd)");
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && !said.contains("toolhost-server.service:"), "{said}");
}

/// `--log-format json`: every line a log system reads is one JSON object with its level.
#[tokio::test]
async fn json_logs_are_one_object_a_line() {
    let port = free_port();
    let setup = setup(port, "log-format = \"json\"");
    let mut child = server()
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_up(&format!("http://127.0.0.1:{port}")).await);
    child.kill().unwrap();
    let out = child.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert!(!lines.is_empty(), "the server logged at start");
    for line in lines {
        let object: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert!(object["level"].is_string() && object["timestamp"].is_string(), "{line}");
    }
    assert!(text.contains("toolhost-server listening"), "{text}");
}

/// Readiness for systemd (`Type=notify`): `READY=1` comes once the server serves, and `/readyz`
/// answers ready at that moment.
#[tokio::test]
async fn the_server_tells_systemd_when_it_is_ready() {
    let port = free_port();
    let setup = setup(port, "");
    let socket_path = setup.root.join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut child = server()
        .env("NOTIFY_SOCKET", &socket_path)
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut message = [0u8; 256];
    let size = socket.recv(&mut message).expect("READY=1 within 30 s");
    let message = String::from_utf8_lossy(&message[..size]).into_owned();
    assert!(message.lines().any(|line| line == "READY=1"), "{message}");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let ready =
        client.get(format!("http://127.0.0.1:{port}/readyz")).bearer_auth("key-acme").send().await.unwrap();
    assert_eq!(ready.status().as_u16(), 200, "ready when it said so");
    child.kill().unwrap();
    child.wait().unwrap();
}
