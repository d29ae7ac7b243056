//! Client executors on one instance: the reference device, and hand-driven devices for the
//! failure cases. Every call gets exactly one result.

mod common;

use std::time::{Duration, Instant};

use client_executor::DeviceMessage;
use common::{
    OUTSIDE, TestServer, next_execute, next_message, raw_device, send, spawn_device, spawn_device_in, submit,
    wait_for_device, workspace,
};
use serde_json::json;
use tool_core::ToolOutput;

/// A batch of one read of `notes.txt`.
fn read_notes(id: &str) -> serde_json::Value {
    json!([{"id": id, "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}])
}

/// A session whose calls run on any device of the tenant, without questions.
async fn device_session(server: &TestServer, ws: &tempfile::TempDir) -> String {
    server
        .session(json!({"working_directory": ws.path(), "runs_on": "device", "approval_mode": "auto_run"}))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_session_runs_its_calls_on_the_device() {
    let server = TestServer::start().await;
    let ws = workspace();
    let (stop, device) = spawn_device(&server.base, None, "laptop");
    wait_for_device(&server, "laptop").await;
    let sid = server
        .session(json!({"working_directory": ws.path(), "runs_on": "device", "device_id": "laptop", "approval_mode": "auto_run"}))
        .await;
    let read = server.call(&sid, "r1", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(read["status"], "executed", "{read}");
    assert_eq!(read["output"]["content"], "hello from inside");
    let run = server.call(&sid, "r2", "runCommand", json!({"command": "echo $((6 * 7))"})).await;
    assert!(run["output"]["content"].as_str().unwrap().contains("42"), "{run}");
    let failing = server.call(&sid, "r3", "readFile", json!({"path": "missing.txt"})).await;
    assert_eq!(failing["status"], "failed", "a tool error on the device is an error result: {failing}");
    let (_, rows) = server.get(&format!("/v1/journal?session_id={sid}")).await;
    assert_eq!(rows.as_array().unwrap().len(), 3, "the server journals device calls: {rows}");
    let (_, devices) = server.get("/v1/devices").await;
    // (The device's builtin toolbox is the terminal app's; tool search and skills run on the
    // server.)
    assert_eq!(
        devices[0]["tools"],
        json!([
            "local-system",
            "todo",
            "calculator",
            "code-interpreter",
            "tool-search",
            "skills",
            "ask-user"
        ])
    );
    // Code runs on the device too, with its state kept there between calls.
    let code =
        server.call(&sid, "r4", "runCode", json!({"language": "python", "code": "x = 6\nx * 7"})).await;
    assert_eq!(code["output"]["state"]["value"], "42", "{code}");
    let again = server.call(&sid, "r5", "runCode", json!({"language": "python", "code": "x + 1"})).await;
    assert_eq!(again["output"]["state"]["value"], "7", "{again}");
    stop.cancel();
    device.await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_device_the_call_fails_at_once() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = device_session(&server, &ws).await;
    let started = Instant::now();
    let result = server.call(&sid, "n1", "readFile", json!({"path": "notes.txt"})).await;
    assert!(started.elapsed() < Duration::from_secs(3));
    assert_eq!(result["status"], "failed");
    assert_eq!(result["output"]["state"]["type"], "client_executor_unavailable", "{result}");
    // A device of the tenant that does not run the tool does not count.
    let _socket = raw_device(&server.base, None, "todo-only", &["todo"]).await;
    let result = server.call(&sid, "n2", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(result["output"]["state"]["type"], "client_executor_unavailable", "{result}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_device_times_out_and_a_batch_shares_one_deadline() {
    let server = TestServer::start().await;
    let ws = workspace();
    let mut socket = raw_device(&server.base, None, "silent", &["local-system"]).await;
    let sid = server.session(json!({"working_directory": ws.path(), "runs_on": "device", "approval_mode": "auto_run", "time_budget_ms": 1500})).await;
    let started = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|i| json!({"id": format!("t{i}"), "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}))
        .collect();
    let batch = submit(&server, &sid, json!(calls));
    for _ in 0..3 {
        let request = next_execute(&mut socket).await;
        assert!(
            request.timeout_ms <= 1500,
            "the device is told the referee's deadline: {}",
            request.timeout_ms
        );
    }
    let response = tokio::time::timeout(Duration::from_secs(10), batch).await.unwrap().unwrap();
    let elapsed = started.elapsed();
    let results = response["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    for result in results {
        assert_eq!(result["status"], "failed", "{result}");
        assert_eq!(result["output"]["error"]["kind"], "timeout", "{result}");
    }
    // Each wait is the 1.5 s budget plus at most 1 s for the device to answer the cancel; in turn
    // they would take three times that.
    assert!(elapsed < Duration::from_secs(5), "three waits in parallel, not in turn: {elapsed:?}");
    // The device is told to stop.
    let mut cancels = 0;
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_millis(500), next_message(&mut socket)).await
    {
        if matches!(message, client_executor::ServerMessage::ToolCancel { .. }) {
            cancels += 1;
        }
    }
    assert_eq!(cancels, 3);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_device_gets_its_open_request_again_and_only_the_first_answer_counts() {
    let server = TestServer::start().await;
    let ws = workspace();
    let mut first = raw_device(&server.base, None, "flaky", &["local-system"]).await;
    let sid = device_session(&server, &ws).await;
    let pending = submit(&server, &sid, read_notes("f1"));
    let request = next_execute(&mut first).await;
    drop(first);
    // Back within the grace, on a new connection: the same request comes again.
    let mut second = raw_device(&server.base, None, "flaky", &["local-system"]).await;
    let again = next_execute(&mut second).await;
    assert_eq!(again.request_id, request.request_id);
    // Another tenant's device, or a request id nobody sent, changes nothing.
    send(
        &mut second,
        &DeviceMessage::ToolResult { request_id: "dev-unknown".into(), output: ToolOutput::ok("bogus") },
    )
    .await;
    send(
        &mut second,
        &DeviceMessage::ToolResult { request_id: again.request_id.clone(), output: ToolOutput::ok("first") },
    )
    .await;
    send(
        &mut second,
        &DeviceMessage::ToolResult { request_id: again.request_id.clone(), output: ToolOutput::ok("second") },
    )
    .await;
    let response = tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["output"]["content"], "first", "{response}");
    assert_eq!(response["results"][0]["status"], "executed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_disconnects_for_good_fails_its_calls_after_the_grace() {
    let server = TestServer::start().await;
    let ws = workspace();
    let mut socket = raw_device(&server.base, None, "gone", &["local-system"]).await;
    let sid = device_session(&server, &ws).await;
    let pending = submit(&server, &sid, read_notes("g1"));
    next_execute(&mut socket).await;
    let dropped = Instant::now();
    drop(socket);
    let response = tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap();
    assert!(dropped.elapsed() < Duration::from_secs(5), "the grace (1 s here) bounds the wait");
    assert_eq!(
        response["results"][0]["output"]["state"]["type"], "client_executor_disconnected",
        "{response}"
    );
    assert_eq!(response["results"][0]["status"], "failed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_stops_the_command_on_the_device() {
    let server = TestServer::start().await;
    let ws = workspace();
    let (stop, device) = spawn_device(&server.base, None, "worker");
    wait_for_device(&server, "worker").await;
    let sid = device_session(&server, &ws).await;
    let pending = submit(
        &server,
        &sid,
        json!([{"id": "long", "name": "runCommand", "arguments": "{\"command\": \"sleep 30\"}"}]),
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    assert_eq!(server.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    let response = tokio::time::timeout(Duration::from_secs(15), pending).await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert_eq!(response["results"][0]["status"], "failed", "{response}");
    assert_eq!(response["results"][0]["output"]["error"]["kind"], "cancelled", "{response}");
    stop.cancel();
    device.await.unwrap();
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn devices_need_a_key_of_their_tenant_and_a_proper_registration() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.api_keys = vec![toolhost_server::auth::stored_form("acme", "key-acme")];
    let server = TestServer::start_with(dir, args).await.with_key("key-acme");
    let url =
        format!("{}{}", server.base.replace("http://", "ws://"), client_executor::protocol::DEVICE_PATH);
    match tokio_tungstenite::connect_async(url.as_str()).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => assert_eq!(response.status(), 401),
        other => panic!("connected without a key: {:?}", other.map(|_| ())),
    }
    // The reference device stops with a clear error on a bad key instead of retrying forever.
    let mut config = client_executor::device::DeviceConfig::new(server.base.clone(), "d");
    config.api_key = Some("wrong".into());
    let executor = client_executor::device::builtin_executor().unwrap();
    let error = client_executor::device::run(config, executor, Default::default()).await.unwrap_err();
    assert!(error.to_string().contains("401"), "{error}");

    // A registration naming only tools the server does not have is refused with an error frame.
    use tokio_tungstenite::tungstenite::client::IntoClientRequest as _;
    let mut request = url.as_str().into_client_request().unwrap();
    request.headers_mut().insert("authorization", "Bearer key-acme".parse().unwrap());
    let (mut socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
    send(
        &mut socket,
        &DeviceMessage::Register {
            device_id: "d".into(),
            tools: vec!["no-such-tool".into()],
            boot: None,
            working_directory: None,
        },
    )
    .await;
    match next_message(&mut socket).await {
        Some(client_executor::ServerMessage::Error { message }) => {
            assert!(message.contains("none of the offered tools"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    // A device registered under acme serves only acme, with the tools both sides have.
    let _socket =
        raw_device(&server.base, Some("key-acme"), "acme-laptop", &["local-system", "no-such-tool"]).await;
    let (_, devices) = server.get("/v1/devices").await;
    assert_eq!(devices[0]["device_id"], "acme-laptop");
    assert_eq!(devices[0]["tools"], serde_json::json!(["local-system"]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_device_is_not_sent_what_its_previous_run_had() {
    let server = TestServer::start().await;
    let ws = workspace();
    let mut first =
        common::raw_device_boot(&server.base, None, "box", &["local-system"], Some("run-1")).await;
    let sid = device_session(&server, &ws).await;
    let pending = submit(&server, &sid, read_notes("b1"));
    next_execute(&mut first).await;
    drop(first);
    // The same device id, another process: it never saw the request, and the old one may have
    // run it, so the call fails with that said rather than running again.
    let mut second =
        common::raw_device_boot(&server.base, None, "box", &["local-system"], Some("run-2")).await;
    let response = tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["output"]["state"]["type"], "client_executor_restarted", "{response}");
    assert!(
        tokio::time::timeout(Duration::from_millis(500), next_message(&mut second)).await.is_err(),
        "nothing is sent to the new process"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_decides_for_its_own_machine() {
    let server = TestServer::start().await;
    let mine = workspace();
    std::fs::write(mine.path().join("notes.txt"), "on the device").unwrap();
    let (stop, device) = spawn_device_in(&server.base, None, "laptop", Some(mine.path()));
    wait_for_device(&server, "laptop").await;
    // The session names another folder: the device keeps its own.
    let elsewhere = workspace();
    let sid = server
        .session(
            json!({"working_directory": elsewhere.path(), "runs_on": "device", "approval_mode": "auto_run"}),
        )
        .await;
    let read = server.call(&sid, "d1", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(read["output"]["content"], "on the device", "{read}");

    // The server lets a path it cannot judge through (auto-run); the device audits it on its own
    // disk, finds it outside its folder, and — no one being at the device — blocks it.
    // No one is at the device: the agent's question is answered at once with that.
    let asked = server.call(&sid, "d3", "askUser", json!({"question": "Which branch?"})).await;
    assert_eq!(asked["output"]["error"]["kind"], "blocked", "{asked}");
    assert!(asked["output"]["content"].as_str().unwrap().contains("no one is at this device"), "{asked}");
    let outside = server.call(&sid, "d2", "readFile", json!({"path": OUTSIDE})).await;
    assert_ne!(outside["status"], "executed", "{outside}");
    assert!(
        outside["output"]["content"].as_str().unwrap().contains("Blocked by security/privacy"),
        "{outside}"
    );
    assert!(
        outside["output"]["state"]["reason"].as_str().unwrap().contains("outside the working directory"),
        "{outside}"
    );

    stop.cancel();
    device.await.unwrap();
    server.stop().await;
}

/// A person at the device: answers every approval with "yes once", every question with its last
/// option, and counts them.
#[derive(Debug, Default)]
struct PersonSaysYes(std::sync::atomic::AtomicUsize);

#[async_trait::async_trait]
impl tool_executor::ApprovalBroker for PersonSaysYes {
    async fn wait(
        &self,
        request: &tool_executor::approval::ApprovalRequest,
        _cancel: &tokio_util::sync::CancellationToken,
        _timeout: Duration,
    ) -> Option<tool_executor::Decided> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let decision = match &request.question {
            Some(question) => tool_executor::Decision::Answer {
                answer: tool_core::Answer {
                    choices: question.options.last().cloned().into_iter().collect(),
                    text: None,
                },
            },
            None => tool_executor::Decision::AllowOnce,
        };
        Some(tool_executor::Decided { decision, by: Some("person".into()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_with_a_person_asks_them_instead_of_blocking() {
    let server = TestServer::start().await;
    let mine = workspace();
    let person = std::sync::Arc::new(PersonSaysYes::default());
    let toolbox = client_executor::device::builtin_toolbox().unwrap();
    let executor =
        tool_executor::Executor::builder(std::sync::Arc::new(toolbox)).broker(person.clone()).build();
    let mut config = client_executor::device::DeviceConfig::new(server.base.clone(), "desk");
    config.working_directory = Some(mine.path().to_path_buf());
    config.reconnect_delay = Duration::from_millis(100);
    config.person_present = true;
    let stop = tokio_util::sync::CancellationToken::new();
    let device = tokio::spawn(client_executor::device::run(config, executor, stop.clone()));
    wait_for_device(&server, "desk").await;
    let sid = server
        .session(json!({"working_directory": mine.path(), "runs_on": "device", "approval_mode": "auto_run"}))
        .await;
    // The device's own audit flags the path; its person is asked and says yes, so it runs.
    let outside = server.call(&sid, "p1", "readFile", json!({"path": OUTSIDE})).await;
    assert_eq!(outside["status"], "executed", "{outside}");
    assert_eq!(person.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The agent's question goes to the device, whose person answers it.
    let question = json!({"question": "Which branch?", "options": ["main", "release"]});
    let asked = server.call(&sid, "p2", "askUser", question.clone()).await;
    assert_eq!(asked["status"], "executed", "{asked}");
    assert_eq!(asked["output"]["content"], "The person answered: chose \"release\" (answered by person).");
    assert_eq!(person.0.load(std::sync::atomic::Ordering::SeqCst), 2);
    stop.cancel();
    device.await.unwrap().unwrap();
    server.stop().await;
}

/// The race of issue 25 through a device: a racer swaps a link in the session's folder between an
/// inside file and one outside while the server sends reads and writes of the link to the device;
/// the device's runtime opens beneath its pinned folder, so nothing outside is read or written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_cannot_be_raced_out_of_its_folder() {
    let server = TestServer::start().await;
    let ws = workspace();
    // Outside the session's folders, the system temp folders included (a device's session counts
    // those as its own, and a clone of the repository may itself live under /tmp).
    let outside_dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let secret = outside_dir.path().join("secret.txt");
    std::fs::write(&secret, "the outside secret\n").unwrap();
    std::fs::write(ws.path().join("inside.txt"), "inside\n").unwrap();
    let link = ws.path().join("link");
    std::os::unix::fs::symlink(ws.path().join("inside.txt"), &link).unwrap();
    let (stop, device) = spawn_device(&server.base, None, "laptop");
    wait_for_device(&server, "laptop").await;
    let sid = device_session(&server, &ws).await;

    let racing = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let racer = {
        let (racing, ws, secret) = (racing.clone(), ws.path().to_owned(), secret.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            let staged = ws.join("link.next");
            while racing.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if swaps.is_multiple_of(2) { secret.clone() } else { ws.join("inside.txt") };
                let _ = std::fs::remove_file(&staged);
                if std::os::unix::fs::symlink(&target, &staged).is_ok()
                    && std::fs::rename(&staged, ws.join("link")).is_ok()
                {
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let (mut outside_reads, mut inside_reads) = (0, 0);
    let mut refused = None;
    for round in 0..150 {
        let read = server.call(&sid, &format!("r{round}"), "readFile", json!({"path": "link"})).await;
        if read.to_string().contains("the outside secret") {
            outside_reads += 1;
        }
        // What the inside file holds: its first text, or what a write through the link left.
        if read["status"] == "executed"
            && ["inside", "planted"].contains(&read["output"]["content"].as_str().unwrap_or(""))
        {
            inside_reads += 1;
        } else if refused.is_none() {
            refused = Some(read["output"]["content"].clone());
        }
        if round % 5 == 0 {
            server
                .call(
                    &sid,
                    &format!("w{round}"),
                    "writeFile",
                    json!({"path": "link", "content": "planted\n"}),
                )
                .await;
        }
    }
    racing.store(false, std::sync::atomic::Ordering::Relaxed);
    let swaps = racer.join().unwrap();
    // The race was live: the link moved at least once per read on average (how many times
    // more depends on the machine's load: a loaded CI run swapped 851 times in 0.7 s).
    assert!(swaps >= 150, "the racer swapped only {swaps} times in 150 reads");
    assert_eq!(outside_reads, 0, "reads of the outside file through the device");
    // Both sides of the race, without leaving them to the scheduler (a loaded machine can let
    // every racing read land on one target, either one): with the link on the inside file the
    // read runs; with it on the outside file the read fails.
    eprintln!("{inside_reads} of 150 racing reads got the inside file; one refused: {refused:?}");
    let staged = ws.path().join("link.next");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(ws.path().join("inside.txt"), &staged).unwrap();
    std::fs::rename(&staged, ws.path().join("link")).unwrap();
    let pointed_in = server.call(&sid, "r-in", "readFile", json!({"path": "link"})).await;
    assert_eq!(pointed_in["status"], "executed", "{pointed_in}");
    assert!(
        ["inside", "planted"].contains(&pointed_in["output"]["content"].as_str().unwrap_or("")),
        "{pointed_in}"
    );
    let staged = ws.path().join("link.next");
    let _ = std::fs::remove_file(&staged);
    std::os::unix::fs::symlink(&secret, &staged).unwrap();
    std::fs::rename(&staged, ws.path().join("link")).unwrap();
    let pointed_out = server.call(&sid, "r-out", "readFile", json!({"path": "link"})).await;
    assert_ne!(pointed_out["status"], "executed", "{pointed_out}");
    assert!(!pointed_out.to_string().contains("the outside secret"), "{pointed_out}");
    assert_eq!(
        std::fs::read_to_string(&secret).unwrap(),
        "the outside secret\n",
        "the outside file was written"
    );
    stop.cancel();
    device.await.unwrap();
    server.stop().await;
}

/// At shutdown a device is told the server is going away (close code 1001 with the reason), so
/// it reconnects — to another instance behind a balancer — instead of guessing at a lost link.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_is_told_when_the_server_shuts_down() {
    use futures::StreamExt as _;
    use tokio_tungstenite::tungstenite::Message;
    let server = TestServer::start().await;
    let mut socket = raw_device(&server.base, None, "laptop", &["local-system"]).await;
    wait_for_device(&server, "laptop").await;
    let stopping = tokio::spawn(server.stop());
    loop {
        match tokio::time::timeout(Duration::from_secs(15), socket.next()).await.expect("a frame in time") {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), 1001);
                assert!(frame.reason.contains("shutting down"), "{}", frame.reason);
                break;
            }
            Some(Ok(Message::Ping(_) | Message::Pong(_) | Message::Text(_))) => {}
            other => panic!("not told: {other:?}"),
        }
    }
    stopping.await.unwrap();
}
