//! The operator's hooks (`--hooks`) on the server: a command hook guards every session's calls, a
//! webhook to an audit system answers permission requests, and webhooks reach only public
//! addresses and what `--hooks-allow` names.

mod common;

use std::sync::{Arc, Mutex};

use common::{TestServer, workspace};
use serde_json::{Value, json};

/// An audit system on loopback: records each event, allows each permission request.
async fn audit_server() -> (String, Arc<Mutex<Vec<Value>>>) {
    let seen: Arc<Mutex<Vec<Value>>> = Arc::default();
    let log = seen.clone();
    let app = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |axum::Json(event): axum::Json<Value>| {
            let log = log.clone();
            async move {
                let answer = if event["hook_event_name"] == "PermissionRequest" {
                    json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "allow"}}})
                } else {
                    json!({})
                };
                log.lock().unwrap().push(event);
                axum::Json(answer)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, seen)
}

fn hooks_file(dir: &std::path::Path, audit: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let guard = dir.join("no-network.sh");
    std::fs::write(
        &guard,
        "#!/bin/sh\nif grep -q curl; then echo 'no network tools in sessions' >&2; exit 2; fi\n",
    )
    .unwrap();
    std::fs::set_permissions(&guard, std::fs::Permissions::from_mode(0o755)).unwrap();
    let file = dir.join("hooks.json");
    let config = json!({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": guard.display().to_string()}]}],
        "PermissionRequest": [{"matcher": "Bash", "hooks": [{"type": "http", "url": audit, "timeout": 5}]}]
    }});
    std::fs::write(&file, config.to_string()).unwrap();
    file
}

async fn decided_by(server: &TestServer, call_id: &str) -> Option<String> {
    let rows = server.state.journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
    rows.into_iter().find(|r| r.call_id == call_id).and_then(|r| r.decided_by)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operators_hooks_guard_every_session_and_webhooks_answer_for_a_person() {
    let (audit, seen) = audit_server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.hooks = Some(hooks_file(dir.path(), &audit));
    args.hooks_allow = vec!["127.0.0.1".into()];
    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "manual"})).await;

    let blocked = server.call(&sid, "c1", "runCommand", json!({"command": "curl https://example.com"})).await;
    assert_eq!(blocked["status"], "blocked", "{blocked}");
    assert!(
        blocked["output"]["content"].as_str().unwrap().contains("no network tools in sessions"),
        "{blocked}"
    );
    assert_eq!(decided_by(&server, "c1").await.as_deref(), Some("hook:no-network.sh"));

    // A command that would wait for a person is answered by the audit system.
    let ran = server.call(&sid, "c2", "runCommand", json!({"command": "printf hi > out.txt"})).await;
    assert_eq!(ran["status"], "executed", "{ran}");
    assert_eq!(std::fs::read_to_string(ws.path().join("out.txt")).unwrap(), "hi");
    assert_eq!(decided_by(&server, "c2").await, Some(format!("hook:{audit}")));
    let events = seen.lock().unwrap().clone();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["tool_name"], "Bash");
    assert_eq!(events[0]["tool_input"]["command"], "printf hi > out.txt");
    assert_eq!(events[0]["session_id"], sid);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_to_a_private_address_is_refused_unless_the_operator_allows_it() {
    let (audit, seen) = audit_server().await;
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.hooks = Some(hooks_file(dir.path(), &audit));
    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "manual"})).await;
    let mut events = server.state.session("local", &sid).await.unwrap().session.subscribe();

    // The webhook cannot be reached, so the person is asked (and the failure reported).
    let call = common::submit(
        &server,
        &sid,
        json!([{"id": "c1", "name": "runCommand", "arguments": json!({"command": "printf hi > out.txt"}).to_string()}]),
    );
    let approval = server.wait_for_approval("c1").await;
    let (status, _) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 200);
    let result = call.await.unwrap();
    assert_eq!(result["results"][0]["status"], "denied", "{result}");
    assert!(seen.lock().unwrap().is_empty(), "the loopback audit system was reached");
    let mut reported = None;
    while let Ok(event) = events.try_recv() {
        if let tool_executor::Event::HookNote { message, .. } = event {
            reported = Some(message);
        }
    }
    let reported = reported.expect("the webhook's failure was not reported");
    assert!(reported.contains("loopback") && reported.contains("--hooks-allow"), "{reported}");
    server.stop().await;
}
