//! Rewinding a session that runs on the server: `POST /v1/sessions/{id}/rewind` puts its files
//! back, refuses to overwrite what changed since unless forced, marks the undone calls in the
//! journal, and is the session's person's (or an approver's) to ask for.

mod common;

use common::{TestServer, workspace};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_rewound_to_before_a_call() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let write = server.call(&sid, "w1", "writeFile", json!({"path": "plan.md", "content": "# Plan\n"})).await;
    assert_eq!(write["status"], "executed", "{write}");
    let command = server
        .call(&sid, "r1", "runCommand", json!({"command": "rm notes.txt && printf x > made.txt"}))
        .await;
    assert_eq!(command["status"], "executed", "{command}");
    assert!(!ws.path().join("notes.txt").exists());

    let (status, view) = server.post(&format!("/v1/sessions/{sid}/rewind"), json!({})).await;
    assert_eq!(status, 200, "{view}");
    assert_eq!(view["undone"], json!(["r1"]));
    assert_eq!(std::fs::read_to_string(ws.path().join("notes.txt")).unwrap(), "hello from inside\n");
    assert!(!ws.path().join("made.txt").exists());
    assert!(ws.path().join("plan.md").exists());

    // A file changed since the last call is not overwritten unless forced.
    std::fs::write(ws.path().join("plan.md"), "# My plan\n").unwrap();
    let (status, refused) =
        server.post(&format!("/v1/sessions/{sid}/rewind"), json!({"to_call": "w1"})).await;
    assert_eq!(status, 409, "{refused}");
    assert!(refused["error"]["message"].as_str().unwrap().contains("plan.md changed since"), "{refused}");
    let (status, forced) =
        server.post(&format!("/v1/sessions/{sid}/rewind"), json!({"to_call": "w1", "force": true})).await;
    assert_eq!(status, 200, "{forced}");
    assert_eq!(forced["removed"], json!(["plan.md"]));
    assert!(!ws.path().join("plan.md").exists());

    let (status, unknown) =
        server.post(&format!("/v1/sessions/{sid}/rewind"), json!({"to_call": "w1"})).await;
    assert_eq!(status, 404, "an undone call is not rewound twice: {unknown}");
    let rows = server.state.journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
    let status_of = |id: &str| rows.iter().find(|r| r.call_id == id).unwrap().status;
    assert_eq!(status_of("w1"), journal::AttemptStatus::Compensated);
    assert_eq!(status_of("r1"), journal::AttemptStatus::Compensated);
    assert_eq!(rows.iter().filter(|r| r.api == "rewind").count(), 2);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_sessions_person_or_an_approver_may_rewind() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    let ws = workspace();
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::shared(ws.path())];
    use toolhost_server::auth::{Role, stored_form_as};
    args.api_keys = vec![
        stored_form_as("acme", Role::Person, "ann", "key-ann"),
        stored_form_as("acme", Role::Person, "bob", "key-bob"),
        stored_form_as("acme", Role::Agent, "ann", "key-agent"),
        stored_form_as("acme", Role::Approver, "lead", "key-lead"),
    ];
    let ann = TestServer::start_with(dir, args).await.with_key("key-ann");
    let sid = ann.session(json!({"working_directory": ws.path(), "approval_mode": "manual"})).await;
    // A write inside the folder runs without asking.
    let write = ann.call(&sid, "w1", "writeFile", json!({"path": "a.md", "content": "x"})).await;
    assert_eq!(write["status"], "executed", "{write}");
    let path = format!("/v1/sessions/{sid}/rewind");
    for key in ["key-bob", "key-agent"] {
        let (status, body) = ann.as_key(key).post(&path, json!({})).await;
        assert_eq!(status, 403, "{key}: {body}");
    }
    assert!(ws.path().join("a.md").exists());
    let (status, body) = ann.as_key("key-lead").post(&path, json!({})).await;
    assert_eq!(status, 200, "{body}");
    assert!(!ws.path().join("a.md").exists());
    ann.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_keeps_its_own_checkpoints_and_rewinds_its_own_machine() {
    let server = TestServer::start().await;
    let mine = workspace();
    let folder = mine.path().canonicalize().unwrap();
    let data = tempfile::tempdir().unwrap();
    let store = std::sync::Arc::new(
        checkpoints::Store::open(data.path(), checkpoints::DEFAULT_MAX_FILE_BYTES).unwrap(),
    );
    let mut config = client_executor::device::DeviceConfig::new(server.base.as_str(), "laptop");
    config.working_directory = Some(folder.clone());
    config.reconnect_delay = std::time::Duration::from_millis(100);
    let kept = store.clone();
    config.session_setup = Some(client_executor::device::SessionSetup(std::sync::Arc::new(move |session| {
        checkpoints::Checkpointer::attach(kept.clone(), session);
    })));
    let executor = client_executor::device::builtin_executor().unwrap();
    let stop = tokio_util::sync::CancellationToken::new();
    let device = tokio::spawn({
        let stop = stop.clone();
        async move { client_executor::device::run(config, executor, stop).await.unwrap() }
    });
    common::wait_for_device(&server, "laptop").await;
    let sid = server
        .session(json!({"working_directory": folder, "runs_on": "device", "approval_mode": "auto_run"}))
        .await;
    let edit = server
        .call(&sid, "e1", "editFile", json!({"path": "notes.txt", "oldText": "hello", "newText": "goodbye"}))
        .await;
    assert_eq!(edit["status"], "executed", "{edit}");
    assert_eq!(std::fs::read_to_string(folder.join("notes.txt")).unwrap(), "goodbye from inside\n");

    // The server does not rewind a device's files…
    let (status, body) = server.post(&format!("/v1/sessions/{sid}/rewind"), json!({})).await;
    assert_eq!(status, 409, "{body}");
    // … the device does, from what it kept.
    let opener = computer_runtime::beneath::Opener::rooted(&folder);
    let plan = checkpoints::plan(&store, &opener, &folder, &sid, None).unwrap();
    assert_eq!(plan.calls, ["e1"]);
    checkpoints::apply(&store, &opener, &folder, &plan, false).unwrap();
    assert_eq!(std::fs::read_to_string(folder.join("notes.txt")).unwrap(), "hello from inside\n");
    stop.cancel();
    let _ = device.await;
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_forgets_its_checkpoints() {
    let server = TestServer::start().await;
    let ws = workspace();
    let folder = ws.path().canonicalize().unwrap();
    let sid = server.session(json!({"working_directory": folder, "approval_mode": "auto_run"})).await;
    let write = server.call(&sid, "w1", "writeFile", json!({"path": "a.md", "content": "x"})).await;
    assert_eq!(write["status"], "executed", "{write}");
    let store = server.state.checkpoints.clone().unwrap();
    assert_eq!(checkpoints::calls(&store, &folder, &sid).unwrap().len(), 1);
    let (status, _) = server.delete(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(status, 200);
    for _ in 0..100 {
        if checkpoints::calls(&store, &folder, &sid).unwrap().is_empty() {
            server.stop().await;
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    panic!("the ended session's checkpoints were kept");
}
