//! Toolhost as an MCP server, driven by rmcp's own client: over stdio (`toolhost-server
//! mcp-stdio`, the real binary) and over streamable HTTP (`/mcp` with a bearer key). Every call is
//! a journal row like any other call.

mod common;

use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};

fn arguments(value: Value) -> serde_json::Map<String, Value> {
    value.as_object().unwrap().clone()
}

fn text(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap()[0]["text"].as_str().unwrap_or_default().to_owned()
}

/// `toolhost-server mcp-stdio` on a fresh folder holding `notes.txt`, with rmcp's client on it;
/// also the journal's URL and the folder (kept alive by the returned guard).
async fn stdio(
    approval_mode: &str,
    notes: &str,
) -> (rmcp::service::RunningService<rmcp::RoleClient, ()>, String, tempfile::TempDir) {
    stdio_with(approval_mode, notes, &[]).await
}

/// [`stdio`] with more variables in the server's environment.
async fn stdio_with(
    approval_mode: &str,
    notes: &str,
    more: &[(&str, &str)],
) -> (rmcp::service::RunningService<rmcp::RoleClient, ()>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let (data, work) = (dir.path().join("data"), dir.path().join("work"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("notes.txt"), notes).unwrap();
    let database = format!("sqlite://{}/journal.db", data.display());
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .args(["mcp-stdio", "--approval-mode", approval_mode, "--working-directory"])
        .arg(&work)
        .env("TOOLHOST_DATABASE_URL", &database)
        .env("TOOLHOST_STATE_DIR", &data)
        .env("RUST_LOG", "warn")
        .envs(more.iter().copied())
        .env_remove("TOOLHOST_API_KEYS");
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    (client, database, dir)
}

#[tokio::test]
async fn a_local_client_over_stdio_gets_the_tools_behind_the_pipeline() {
    let (client, database, _dir) = stdio("headless", "hello over stdio\n").await;

    let tools = client.list_all_tools().await.unwrap();
    let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
    for expected in ["readFile", "writeFile", "runCommand", "todo_write"] {
        assert!(names.contains(&expected), "{expected} in {names:?}");
    }
    let read = tools.iter().find(|t| t.name == "readFile").unwrap();
    let annotations = serde_json::to_value(read.annotations.as_ref().unwrap()).unwrap();
    assert_eq!(annotations["readOnlyHint"], true);
    assert_eq!(annotations["idempotentHint"], true);
    let run = tools.iter().find(|t| t.name == "runCommand").unwrap();
    let annotations = serde_json::to_value(run.annotations.as_ref().unwrap()).unwrap();
    assert_eq!(
        (annotations["destructiveHint"].as_bool(), annotations["openWorldHint"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(read.input_schema["properties"]["path"]["type"], "string");

    let inside = client
        .call_tool(
            CallToolRequestParams::new("readFile").with_arguments(arguments(json!({"path": "notes.txt"}))),
        )
        .await
        .unwrap();
    assert_eq!(inside.is_error, Some(false));
    assert!(text(&inside).contains("hello over stdio"), "{}", text(&inside));
    // The text is the result: no structured content for a client to show the model instead; the
    // state rides in `_meta`.
    assert!(inside.structured_content.is_none(), "{inside:?}");
    let meta = inside.meta.as_ref().expect("the state in _meta");
    assert_eq!(meta.0["toolhost/state"]["total_lines"], 1, "{meta:?}");

    // Outside the folder a person would be asked; on stdio (headless) it is blocked, with the reason.
    let outside = client
        .call_tool(
            CallToolRequestParams::new("readFile")
                .with_arguments(arguments(json!({"path": "/etc/hostname"}))),
        )
        .await
        .unwrap();
    assert_eq!(outside.is_error, Some(true));
    assert!(text(&outside).contains("Blocked"), "{}", text(&outside));

    // An unknown tool is the protocol error the specification lists (-32602), with the closest
    // names the pipeline found.
    let unknown = client.call_tool(CallToolRequestParams::new("readFle")).await.unwrap_err();
    let said = unknown.to_string();
    assert!(
        said.contains("-32602") || said.contains("Invalid params") || said.contains("InvalidParams"),
        "{said}"
    );
    assert!(said.contains("readFile"), "the closest name is offered: {said}");
    client.cancel().await.unwrap();

    let journal = journal::open(&database).await.unwrap();
    let rows = journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
    let by_status: Vec<(String, String)> =
        rows.iter().map(|r| (r.function_name.clone(), r.status.as_str().to_owned())).collect();
    assert!(by_status.contains(&("readFile".into(), "executed".into())), "{by_status:?}");
    assert!(by_status.contains(&("readFile".into(), "blocked".into())), "{by_status:?}");
}

#[tokio::test]
async fn a_client_over_http_is_a_tenant_session_and_its_calls_are_journalled() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(work.join("a.txt"), "over http\n").unwrap();
    let mut args = common::args(dir.path());
    args.api_keys = vec![toolhost_server::auth::stored_form("acme", "key-acme")];
    args.workspace_roots = vec![format!("acme={}", work.display()).parse().unwrap()];
    let server = common::TestServer::start_with(tempfile::tempdir().unwrap(), args).await;

    // Without a key: refused like the rest of the API.
    let refused = reqwest::Client::new()
        .post(server.url("/mcp"))
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), 401);

    let config = rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
        server.url("/mcp"),
    )
    .auth_header("key-acme");
    let transport = StreamableHttpClientTransport::from_config(config);
    let client = ().serve(transport).await.unwrap();
    let tools = client.list_all_tools().await.unwrap();
    assert!(tools.iter().any(|t| t.name == "readFile"));
    let result = client
        .call_tool(CallToolRequestParams::new("readFile").with_arguments(arguments(json!({"path": "a.txt"}))))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(false), "{}", text(&result));
    assert!(text(&result).contains("over http"));
    client.cancel().await.unwrap();

    let rows = server.state.journal.query("acme", &journal::AttemptFilter::default()).await.unwrap();
    let row = rows.iter().find(|r| r.function_name == "readFile").expect("the call is in the journal");
    assert_eq!(row.status.as_str(), "executed");
    assert_eq!(row.arguments, json!({"path": "a.txt"}));
}

#[tokio::test]
async fn a_cancellation_notification_cancels_that_call_and_the_session_goes_on() {
    let (client, database, _dir) = stdio("auto_run", "still here\n").await;
    let request = rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(
        CallToolRequestParams::new("runCommand").with_arguments(arguments(json!({"command": "sleep 30"}))),
    ));
    let started = std::time::Instant::now();
    let handle = client
        .send_cancellable_request(request, rmcp::service::PeerRequestOptions::no_options())
        .await
        .unwrap();
    let journal = journal::open(&database).await.unwrap();
    let running = async {
        loop {
            let rows = journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
            if rows.iter().any(|r| r.function_name == "runCommand") {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), running).await.expect("the command started");
    handle.cancel(Some("the person pressed Esc".into())).await.unwrap();

    let settled = async {
        loop {
            let rows = journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
            if let Some(row) =
                rows.iter().find(|r| r.function_name == "runCommand" && r.status.as_str() != "proposed")
            {
                return row.clone();
            }
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
    };
    let row =
        tokio::time::timeout(std::time::Duration::from_secs(15), settled).await.expect("the call settled");
    assert_eq!(row.status.as_str(), "failed");
    assert_eq!(row.error_kind.as_deref(), Some("cancelled"), "{row:?}");
    assert!(started.elapsed() < std::time::Duration::from_secs(20), "it did not sleep its 30 s");

    let after = client
        .call_tool(
            CallToolRequestParams::new("readFile").with_arguments(arguments(json!({"path": "notes.txt"}))),
        )
        .await
        .unwrap();
    assert!(text(&after).contains("still here"), "the session goes on: {}", text(&after));
    client.cancel().await.unwrap();
}

/// Posts one JSON-RPC message to `/mcp` and returns the response's headers and body text.
async fn post_mcp(
    server: &common::TestServer,
    key: &str,
    session: Option<&str>,
    body: Value,
) -> (reqwest::header::HeaderMap, String) {
    let (_, headers, text) = send_mcp(server, key, session, body).await;
    (headers, text)
}

/// Posts one JSON-RPC message to `/mcp`; returns the status, the headers and the body text.
async fn send_mcp(
    server: &common::TestServer,
    key: &str,
    session: Option<&str>,
    body: Value,
) -> (u16, reqwest::header::HeaderMap, String) {
    let mut request = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .post(server.url("/mcp"))
        .bearer_auth(key)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-06-18")
        .json(&body);
    if let Some(session) = session {
        request = request.header("mcp-session-id", session);
    }
    let response = request.send().await.unwrap();
    let (status, headers) = (response.status().as_u16(), response.headers().clone());
    (status, headers, response.text().await.unwrap())
}

/// A keyed server of two tenants, each with a `secret.txt` in its root, and a second agent key of
/// acme's (`key-acme-2`); returns it with an MCP session id that `key-acme` initialised.
async fn two_tenants_and_an_acme_session() -> (common::TestServer, tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let (acme, globex) = (dir.path().join("acme"), dir.path().join("globex"));
    std::fs::create_dir_all(&acme).unwrap();
    std::fs::create_dir_all(&globex).unwrap();
    std::fs::write(acme.join("secret.txt"), "acme's secret\n").unwrap();
    std::fs::write(globex.join("secret.txt"), "globex's secret\n").unwrap();
    let mut args = common::args(dir.path());
    args.api_keys = vec![
        toolhost_server::auth::stored_form("acme", "key-acme"),
        toolhost_server::auth::stored_form_as(
            "acme",
            toolhost_server::auth::Role::Agent,
            "bot2",
            "key-acme-2",
        ),
        toolhost_server::auth::stored_form("globex", "key-globex"),
    ];
    args.workspace_roots = vec![
        format!("acme={}", acme.display()).parse().unwrap(),
        format!("globex={}", globex.display()).parse().unwrap(),
    ];
    let server = common::TestServer::start_with(tempfile::tempdir().unwrap(), args).await;
    let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}});
    let (headers, _) = post_mcp(&server, "key-acme", None, initialize).await;
    let session = headers.get("mcp-session-id").expect("a legacy session id").to_str().unwrap().to_owned();
    (server, dir, session)
}

#[tokio::test]
async fn a_session_id_does_not_let_another_tenant_in() {
    let (server, _dir, session) = two_tenants_and_an_acme_session().await;
    post_mcp(
        &server,
        "key-acme",
        Some(&session),
        json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
    )
    .await;
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "readFile", "arguments": {"path": "secret.txt"}}});
    let (_, own) = post_mcp(&server, "key-acme", Some(&session), read.clone()).await;
    assert!(own.contains("acme's secret"), "the session's own tenant reads: {own}");
    let (_, other) = post_mcp(&server, "key-globex", Some(&session), read).await;
    assert!(!other.contains("acme's secret"), "{other}");
    assert!(other.contains("no MCP session"), "{other}");
}

#[tokio::test]
async fn an_mcp_session_belongs_to_the_key_that_initialised_it() {
    let (server, _dir, session) = two_tenants_and_an_acme_session().await;
    // The session opens its Toolhost session on the first tool call: another key gets there
    // first, and is answered as for an id that does not exist, whoever's key it is.
    let read = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call",
        "params": {"name": "readFile", "arguments": {"path": "secret.txt"}}});
    for key in ["key-globex", "key-acme-2"] {
        let (status, _, text) = send_mcp(&server, key, Some(&session), read.clone()).await;
        assert_eq!(status, 404, "{key}: {text}");
        assert!(!text.contains("secret"), "{key}: {text}");
    }
    let (_, own) = post_mcp(&server, "key-acme", Some(&session), read).await;
    assert!(own.contains("acme's secret"), "the key that opened it reads its own folder: {own}");
}

#[tokio::test]
async fn stdio_answers_file_calls_with_a_blocking_pool_of_one() {
    // Tokio's standard input holds a blocking thread while it waits for the client: the file tools
    // must still get the one thread they were given.
    let (client, _database, _dir) =
        stdio_with("headless", "one thread is enough\n", &[("TOOLHOST_BLOCKING_THREADS", "1")]).await;
    for _ in 0..3 {
        let call = client.call_tool(
            CallToolRequestParams::new("readFile").with_arguments(arguments(json!({"path": "notes.txt"}))),
        );
        let read = tokio::time::timeout(std::time::Duration::from_secs(20), call)
            .await
            .expect("a file call over stdio hung with a blocking pool of one")
            .unwrap();
        assert!(text(&read).contains("one thread is enough"), "{}", text(&read));
    }
    client.cancel().await.unwrap();
}

/// Over stdio, commands have no network by default (as `toolhost mcp`'s), and the operator's
/// setting gives it them.
#[tokio::test]
async fn stdio_commands_have_no_network_unless_the_setting_says_so() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepting = std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            drop(stream);
        }
    });
    let command = format!(
        "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('connected')\""
    );
    let run = |more: &'static [(&'static str, &'static str)]| {
        let command = command.clone();
        async move {
            let (client, _database, _dir) = stdio_with("auto_run", "x\n", more).await;
            let result = client
                .call_tool(
                    CallToolRequestParams::new("runCommand")
                        .with_arguments(arguments(json!({"command": command}))),
                )
                .await
                .unwrap();
            client.cancel().await.unwrap();
            text(&result)
        }
    };
    let closed = run(&[]).await;
    assert!(!closed.contains("connected"), "no network by default: {closed}");
    let open = run(&[("TOOLHOST_SANDBOX_NETWORK", "on")]).await;
    assert!(open.contains("connected"), "the setting gives it: {open}");
    // Let the listener's thread end (one connection came; a second one closes it).
    let _ = std::net::TcpStream::connect(("127.0.0.1", port));
    accepting.join().unwrap();
}

/// Each SSE event of `body`: its `data:` lines joined.
fn sse_data(body: &str) -> Vec<String> {
    body.replace("\r\n", "\n")
        .split("\n\n")
        .filter(|event| !event.trim().is_empty())
        .map(|event| {
            event
                .lines()
                .filter_map(|l| l.strip_prefix("data:"))
                .map(str::trim)
                .collect::<Vec<_>>()
                .join("\n")
        })
        .collect()
}

/// A client of 2025-06-18 (before SEP-1699's priming events) reads every event's data as JSON-RPC
/// and drops the connection on an empty one (Gemini CLI did): its streams carry none, from the
/// `initialize` on; a 2025-11-25 client still gets the priming event it can resume from.
#[tokio::test]
async fn streams_prime_only_clients_that_expect_it() {
    let (server, _dir, _) = two_tenants_and_an_acme_session().await;
    for (version, primed) in [("2025-03-26", false), ("2025-06-18", false), ("2025-11-25", true)] {
        let post = |session: Option<String>, header: bool, body: Value| {
            let mut request = reqwest::Client::builder()
                .no_proxy()
                .build()
                .unwrap()
                .post(server.url("/mcp"))
                .bearer_auth("key-acme")
                .header("accept", "application/json, text/event-stream")
                .json(&body);
            if header {
                request = request.header("mcp-protocol-version", version);
            }
            if let Some(session) = session {
                request = request.header("mcp-session-id", session);
            }
            request.send()
        };
        let initialize = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "gemini-like", "version": "1"}}});
        let response = post(None, false, initialize).await.unwrap();
        let session = response.headers().get("mcp-session-id").map(|v| v.to_str().unwrap().to_owned());
        let events = sse_data(&response.text().await.unwrap());
        assert_eq!(events.iter().any(String::is_empty), primed, "{version} initialize: {events:?}");
        assert!(events.iter().any(|e| e.contains("\"protocolVersion\"")), "{version}: {events:?}");
        post(
            session.clone(),
            version != "2025-03-26",
            json!({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        )
        .await
        .unwrap();
        let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
        let response = post(session, version != "2025-03-26", list).await.unwrap();
        let events = sse_data(&response.text().await.unwrap());
        assert_eq!(events.iter().any(String::is_empty), primed, "{version} tools/list: {events:?}");
        for event in events.iter().filter(|e| !e.is_empty()) {
            let message: Value =
                serde_json::from_str(event).unwrap_or_else(|e| panic!("{version}: {e}: {event}"));
            assert_eq!(message["jsonrpc"], "2.0");
        }
        assert!(events.iter().any(|e| e.contains("readFile")), "{version}: {events:?}");
    }
}
