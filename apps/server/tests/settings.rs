//! The configuration file against the real binary: a file alone starts a keyed server with its
//! workspace roots; a flag wins over the file; a key that names no setting and a value a setting
//! refuses are errors that name them; `check-config` says what holds and masks secrets.

use std::process::{Command, Stdio};
use std::time::Duration;

mod common;

use common::{free_port, wait_healthy as wait_up};

/// The binary with a clean environment (no `TOOLHOST_*` of the machine running the tests).
fn server() -> Command {
    let mut command = common::server_binary();
    // The tests here read what it says.
    command.stdout(Stdio::piped()).stderr(Stdio::piped());
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
    // The file, the line and the key as the file spells it.
    let at = format!("{}:7: command-cpu-weight:", bad.file.display());
    assert!(err.contains(&at) && err.contains("heavy"), "{err}");

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
    // No variable that would win over the configuration file's settings (a journal URL above all).
    assert!(!unit.lines().any(|line| line.starts_with("Environment=")), "{unit}");
    // Closed: systemd rates the unit's exposure 4.0 or less ("OK").
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&path)
        .output()
        .expect("systemd-analyze runs");
    let rated = String::from_utf8_lossy(&out.stdout);
    let level: f64 = rated
        .lines()
        .find_map(|line| line.split("exposure level for").nth(1))
        .and_then(|rest| rest.split_whitespace().nth(1))
        .and_then(|level| level.parse().ok())
        .unwrap_or_else(|| {
            panic!("no exposure level in:\n{rated}\n{}", String::from_utf8_lossy(&out.stderr))
        });
    assert!(level <= 4.0, "exposure {level}:\n{rated}");
}

/// `--log-format json`: every line a log system reads is one JSON object with its level.
#[tokio::test]
async fn json_logs_are_one_object_a_line() {
    let port = free_port();
    let setup = setup(port, "log-format = \"json\"");
    let child = server()
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_up(&format!("http://127.0.0.1:{port}")).await);
    let out = stopped(child);
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

/// `check-config` finds what parses and is still wrong, says each with the file and line of its
/// setting, exits 1, and writes nothing.
#[test]
fn check_config_finds_settings_that_parse_and_are_wrong() {
    let check = |extra: &str| {
        let setup = setup(free_port(), extra);
        let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
        (
            setup,
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    // One key under two tenants (the file already gives acme this key), named with its line.
    let twice = toolhost_server::auth::stored_form("globex", "key-acme");
    let (setup, _, _, _) = check("");
    std::fs::write(setup.root.join("keys"), format!("# the keys\n{twice}\n")).unwrap();
    let with_keys = std::fs::read_to_string(&setup.file).unwrap()
        + &format!("api-keys-file = \"{}\"\n", setup.root.join("keys").display());
    std::fs::write(&setup.file, with_keys).unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "{}:2: this key is also api-key #1 (tenant `acme`",
            setup.root.join("keys").display()
        )),
        "{err}"
    );

    // A tenant named in a root that no key has, with its line; roots shared between tenants.
    let (setup, code, _, err) = check("tenant-path = [\"acne=ro:/etc\"]");
    assert_eq!(code, Some(1));
    assert!(
        err.contains(&format!(
            "{}:7: tenant-path: no key belongs to the tenant `acne` (did you mean `acme`?)",
            setup.file.display()
        )),
        "{err}"
    );
    // Notifications: a channel that cannot be made, a tenant no key has; secrets masked.
    let (_, code, out, err) = check(
        "[[notify.webhook]]\ntenant = \"acne\"\nurl = \"ftp://hooks.example/T0KEN\"\nsecret = \"s3cret\"\n\n\
         [[notify.email]]\ntenant = \"*\"\nsmtp = \"smtp://mail.example:587\"\nfrom = \"toolhost@example.com\"\n\
         to = [\"ops@example.com\"]\npassword = \"pa55\"",
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(err.contains("notify.webhook: webhook url ftp://hooks.example"), "{err}");
    assert!(
        err.contains("notify.webhook: no key belongs to the tenant `acne` (did you mean `acme`?)"),
        "{err}"
    );
    assert!(out.contains("notify.email = { tenant = \"*\", smtp = \"smtp://mail.example:587\""), "{out}");
    for secret in ["T0KEN", "s3cret", "pa55"] {
        assert!(!out.contains(secret) && !err.contains(secret), "{secret} shown: {out}{err}");
    }
    let (_, code, _, err) = check(&format!("hooks = \"{}\"", "/nonexistent/hooks.json"));
    assert_eq!(code, Some(1));
    assert!(err.contains("hooks: /nonexistent/hooks.json does not exist"), "{err}");
    let (setup, _, _, _) = check("");
    std::fs::write(setup.root.join("deny.json"), r#"[{"tool": "local-sytem", "api": "runCommand"}]"#)
        .unwrap();
    let denied = std::fs::read_to_string(&setup.file).unwrap()
        + &format!("deny-rules-file = \"{}\"\n", setup.root.join("deny.json").display());
    std::fs::write(&setup.file, denied).unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("did you mean `local-system`"), "{err}");

    // Unreachable databases are named with their address; nothing is created.
    let port = free_port();
    let (_, code, _, err) = check(&format!("redis-url = \"redis://127.0.0.1:{port}/\""));
    assert_eq!(code, Some(1));
    assert!(err.contains(&format!("redis-url: Redis at 127.0.0.1:{port}")), "{err}");
    let setup = self::setup(free_port(), "");
    let text = std::fs::read_to_string(&setup.file)
        .unwrap()
        .replace("database_url = { file", "# database_url = { file");
    let pg = format!("database-url = \"postgres://toolhost@127.0.0.1:{port}/nothing\"\n");
    std::fs::write(&setup.file, text + &pg).unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("database-url: the journal's database cannot be used") && !err.contains(" at line "),
        "{err}"
    );
    // A new SQLite journal is not made by a check, and its pending migrations are named.
    let (setup, code, out, err) = check("");
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("does not exist yet: the start makes it"), "{out}");
    assert!(!setup.root.join("state/journal.db").exists(), "check-config made the journal");
    // A variable that overrides the file's setting is said.
    let out = server()
        .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/other.db", setup.root.display()))
        .arg("--config")
        .arg(&setup.file)
        .arg("check-config")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("# note: TOOLHOST_DATABASE_URL in the environment overrides database-url of the configuration file"),
        "{text}"
    );
    // A file that does not parse is exit 1 for check-config too.
    let (setup, _, _, _) = check("");
    std::fs::write(&setup.file, "listen = [").unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    // `localhost` is an address to listen on.
    let setup = self::setup(free_port(), "");
    let text = std::fs::read_to_string(&setup.file)
        .unwrap()
        .replace("listen = \"127.0.0.1:", "listen = \"localhost:");
    std::fs::write(&setup.file, text).unwrap();
    let out = server().arg("--config").arg(&setup.file).arg("check-config").output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Keys reload without a restart: on `SIGHUP` and when the keys file changes. A bad file is
/// refused and the keys in force are kept; `SIGHUP` never ends the process.
#[tokio::test]
async fn keys_reload_on_sighup_and_when_their_file_changes_and_a_bad_file_is_refused() {
    let port = free_port();
    let setup = setup(port, "");
    let keys = setup.root.join("keys");
    let stored = |tenant: &str, key: &str| toolhost_server::auth::stored_form(tenant, key);
    std::fs::write(&keys, format!("{}\n", stored("acme", "key-one"))).unwrap();
    let text =
        std::fs::read_to_string(&setup.file).unwrap() + &format!("api-keys-file = \"{}\"\n", keys.display());
    std::fs::write(&setup.file, text).unwrap();
    let mut child = server()
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_up(&base).await);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let status = |key: &'static str| {
        let (client, base) = (client.clone(), base.clone());
        async move {
            client.get(format!("{base}/v1/journal")).bearer_auth(key).send().await.unwrap().status().as_u16()
        }
    };
    assert_eq!(status("key-one").await, 200);
    assert_eq!(status("key-two").await, 401);
    let hup = |child: &std::process::Child| {
        assert!(Command::new("kill").args(["-HUP", &child.id().to_string()]).status().unwrap().success());
    };

    // SIGHUP: the file as it is now.
    std::fs::write(&keys, format!("{}\n", stored("acme", "key-two"))).unwrap();
    hup(&child);
    let waited = std::time::Instant::now();
    while status("key-two").await != 200 {
        assert!(waited.elapsed() < Duration::from_secs(10), "SIGHUP did not reload the keys");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(status("key-one").await, 401, "the old key went");
    assert!(child.try_wait().unwrap().is_none(), "SIGHUP ended the server");

    // A bad file (a key under two tenants): refused, the keys in force stay.
    std::fs::write(&keys, format!("{}\n{}\n", stored("acme", "key-three"), stored("globex", "key-three")))
        .unwrap();
    hup(&child);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(status("key-two").await, 200);
    assert_eq!(status("key-three").await, 401);

    // A change to the file alone is noticed.
    std::fs::write(&keys, format!("{}\n", stored("acme", "key-four"))).unwrap();
    let waited = std::time::Instant::now();
    while status("key-four").await != 200 {
        assert!(waited.elapsed() < Duration::from_secs(10), "the changed keys file was not reloaded");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = stopped(child);
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(log.contains("reload refused") && log.contains("this key is also"), "{log}");
}

/// The audit trail: each request one `request` event with its id (the caller's `X-Request-Id`,
/// returned), tenant, key, route, status and latency; refused keys and approvals as events.
#[tokio::test]
async fn every_request_and_approval_is_an_audit_event_with_its_request_id() {
    let port = free_port();
    let setup = setup(port, "log-format = \"json\"");
    let child = server()
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_up(&base).await);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let response = client
        .get(format!("{base}/v1/journal"))
        .bearer_auth("key-acme")
        .header("x-request-id", "trace-42")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["x-request-id"], "trace-42");
    let made = client.get(format!("{base}/v1/journal")).bearer_auth("key-acme").send().await.unwrap();
    assert!(made.headers()["x-request-id"].to_str().unwrap().starts_with("req-"));
    let refused = client.get(format!("{base}/v1/journal")).bearer_auth("nope").send().await.unwrap();
    assert_eq!(refused.status(), 401);
    let out = stopped(child);
    let events: Vec<serde_json::Value> =
        String::from_utf8_lossy(&out.stderr).lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let request = events
        .iter()
        .find(|e| e["event"] == "request" && e["request_id"] == "trace-42")
        .unwrap_or_else(|| panic!("no request event: {events:?}"));
    assert_eq!(request["tenant"], "acme", "{request}");
    assert_eq!(request["route"], "/v1/journal", "{request}");
    assert_eq!(request["status"], 200, "{request}");
    assert!(request["key"].as_str().unwrap().starts_with("acme/agent/"), "{request}");
    assert!(request["latency_ms"].is_number() && request["instance"].is_string(), "{request}");
    let refusal = events.iter().find(|e| e["event"] == "auth.refused").expect("a refused key is an event");
    assert_eq!(refusal["reason"], "unknown API key", "{refusal}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains("nope"), "the refused key itself is never logged");
}

/// Traces over OTLP, against a loopback collector: a request carrying a `traceparent` joins that
/// trace, and each call is an `execute_tool {function}` span under it, with its stages below.
#[tokio::test]
async fn traces_join_the_callers_trace_and_show_each_stage_of_a_call() {
    use std::sync::{Arc, Mutex};
    let received: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let collector = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let collector_address = collector.local_addr().unwrap();
    let kept = received.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |axum::Json(body): axum::Json<serde_json::Value>| {
            let kept = kept.clone();
            async move {
                kept.lock().unwrap().push(body);
                "{}"
            }
        }),
    );
    tokio::spawn(async move { axum::serve(collector, app).await.unwrap() });

    let port = free_port();
    let setup = setup(port, &format!("otlp-endpoint = \"http://{collector_address}\""));
    let mut child = server()
        .arg("--config")
        .arg(&setup.file)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_up(&base).await);
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let session: serde_json::Value = client
        .post(format!("{base}/v1/sessions"))
        .bearer_auth("key-acme")
        .json(&serde_json::json!({"working_directory": setup.root.join("acme")}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = session["id"].as_str().unwrap_or_else(|| panic!("{session}"));
    let trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller = "00f067aa0ba902b7";
    let answer = client
        .post(format!("{base}/v1/sessions/{sid}/calls"))
        .bearer_auth("key-acme")
        .header("traceparent", format!("00-{trace}-{caller}-01"))
        .json(&serde_json::json!({"calls": [{"id": "t1", "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    let spans = || -> Vec<serde_json::Value> {
        received
            .lock()
            .unwrap()
            .iter()
            .flat_map(|body| body["resourceSpans"].as_array().cloned().unwrap_or_default())
            .flat_map(|resource| resource["scopeSpans"].as_array().cloned().unwrap_or_default())
            .flat_map(|scope| scope["spans"].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let started = std::time::Instant::now();
    while !spans().iter().any(|s| s["name"] == "execute_tool readFile") {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no call span reached the collector: {:?}",
            spans()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // An MCP client's call carries its trace in `_meta.traceparent`.
    let mcp_trace = "0af7651916cd43dd8448eb211c80319c";
    let mcp_caller = "b7ad6b7169203331";
    {
        use rmcp::ServiceExt as _;
        use rmcp::model::RequestParamsMeta as _;
        let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
            format!("{base}/mcp"),
        )
        .auth_header("key-acme");
        let client =
            ().serve(rmcp::transport::StreamableHttpClientTransport::from_config(config)).await.unwrap();
        let mut call = rmcp::model::CallToolRequestParams::new("readFile")
            .with_arguments(serde_json::json!({"path": "notes.txt"}).as_object().unwrap().clone());
        call.set_traceparent(&format!("00-{mcp_trace}-{mcp_caller}-01"));
        let result = client.call_tool(call).await.unwrap();
        assert_eq!(result.is_error, Some(false), "{result:?}");
        client.cancel().await.unwrap();
    }
    let started = std::time::Instant::now();
    while !spans().iter().any(|s| s["name"] == "execute_tool readFile" && s["traceId"] == mcp_trace) {
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "no MCP call span joined its client's trace: {:?}",
            spans()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let spans = spans();
    let joined =
        spans.iter().find(|s| s["name"] == "tools/call readFile").unwrap_or_else(|| panic!("{spans:?}"));
    assert_eq!(
        (&joined["traceId"], &joined["parentSpanId"]),
        (&serde_json::json!(mcp_trace), &serde_json::json!(mcp_caller))
    );
    let named = |name: &str| {
        spans
            .iter()
            .find(|s| s["name"] == name && s["traceId"] == trace)
            .unwrap_or_else(|| panic!("no {name}: {spans:?}"))
            .clone()
    };
    let request = named("POST /v1/sessions/{id}/calls");
    assert_eq!(request["traceId"], trace, "{request}");
    assert_eq!(request["parentSpanId"], caller, "{request}");
    let call = named("execute_tool readFile");
    assert_eq!(call["traceId"], trace);
    assert_eq!(call["parentSpanId"], request["spanId"], "the call is the request's child");
    let attribute = |span: &serde_json::Value, key: &str| {
        span["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == key)
            .map(|a| a["value"]["stringValue"].clone())
    };
    assert_eq!(attribute(&call, "gen_ai.tool.call.id"), Some(serde_json::json!("t1")));
    assert_eq!(attribute(&call, "gen_ai.operation.name"), Some(serde_json::json!("execute_tool")));
    // A read inside the folder: approved by policy, run, settled (a read is proposed only when it
    // must wait for a person).
    for stage in ["approval", "run", "journal.settle"] {
        let stage = named(stage);
        assert_eq!(stage["parentSpanId"], call["spanId"], "{stage}");
        assert_eq!(stage["traceId"], trace);
    }
}

/// Stops a server with SIGTERM (as systemd does; the log lines it still holds are written) and
/// returns what it printed.
fn stopped(child: std::process::Child) -> std::process::Output {
    let sent = std::process::Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap();
    assert!(sent.success());
    child.wait_with_output().unwrap()
}
