//! Writes previewed before they are made: in a session that previews writes, `writeFile` and
//! `editFile` show the change and a token; `resolveChange` applies it through the pipeline (a
//! nested write, approved — the person sees the change itself — and journalled) or discards it.

use std::sync::Arc;

use builtin_tools::Registry;
use computer_runtime::{ComputerRuntime, LocalComputer};
use journal::AttemptStatus;
use serde_json::{Value, json};
use tool_core::Services;
use tool_executor::{
    ApprovalMode, Batch, CallResult, Decided, Decision, Event, Executor, RawCall, Session, SessionConfig,
    SessionPolicy, Toolbox,
};

fn executor() -> Executor {
    let computer: Arc<dyn ComputerRuntime> = Arc::new(LocalComputer::default());
    let services = Services::new().with(computer);
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in Registry::builtin().available_runtimes(&services).0 {
        toolbox.add_tool(manifest, runtime).unwrap();
    }
    for (name, audit) in builtin_tools::audits() {
        toolbox.add_audit(*name, *audit);
    }
    Executor::builder(Arc::new(toolbox)).build()
}

fn open(executor: &Executor, id: &str, dir: &std::path::Path, preview: bool) -> Arc<Session> {
    executor.open_session(SessionConfig {
        id: id.into(),
        tenant: "t".into(),
        working_directory: Some(dir.to_path_buf()),
        policy: SessionPolicy { mode: ApprovalMode::Manual, exclude_temp: true, ..SessionPolicy::default() },
        preview_writes: preview,
        ..SessionConfig::default()
    })
}

async fn call(
    executor: &Executor,
    session: &Arc<Session>,
    id: &str,
    name: &str,
    arguments: Value,
) -> CallResult {
    let batch = Batch {
        message_id: None,
        calls: vec![RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }],
        stopped_on_length: false,
    };
    executor.execute_batch(session, batch).await.pop().unwrap()
}

fn token(result: &CallResult) -> String {
    result.output.state.as_ref().unwrap()["token"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn a_previewed_write_is_made_only_when_applied_and_never_over_a_changed_file() {
    let executor = executor();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().canonicalize().unwrap();
    std::fs::write(work.join("a.txt"), "one\ntwo\n").unwrap();
    let session = open(&executor, "s1", &work, true);

    let shown =
        call(&executor, &session, "w1", "writeFile", json!({"path": "notes.md", "content": "# Notes\n"}))
            .await;
    assert_eq!(shown.status, AttemptStatus::Executed, "{:?}", shown.output);
    assert!(shown.output.content.starts_with("Preview only"), "{}", shown.output.content);
    assert!(shown.output.content.contains("+# Notes"), "{}", shown.output.content);
    assert!(!work.join("notes.md").exists(), "a preview writes nothing");
    let applied =
        call(&executor, &session, "r1", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(applied.status, AttemptStatus::Executed, "{:?}", applied.output);
    assert_eq!(std::fs::read_to_string(work.join("notes.md")).unwrap(), "# Notes\n");
    let again =
        call(&executor, &session, "r2", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(again.status, AttemptStatus::Failed, "a change is made once");

    // An edit shown, then the file changed by someone else: not made over it.
    let edit = json!({"path": "a.txt", "oldText": "two", "newText": "deux"});
    let shown = call(&executor, &session, "e1", "editFile", edit.clone()).await;
    assert!(
        shown.output.content.contains("-two") && shown.output.content.contains("+deux"),
        "{}",
        shown.output.content
    );
    assert_eq!(std::fs::read_to_string(work.join("a.txt")).unwrap(), "one\ntwo\n");
    std::fs::write(work.join("a.txt"), "one\ntwo\nthree\n").unwrap();
    let stale =
        call(&executor, &session, "r3", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(stale.status, AttemptStatus::Failed);
    assert!(stale.output.content.contains("changed since the preview"), "{}", stale.output.content);
    assert_eq!(std::fs::read_to_string(work.join("a.txt")).unwrap(), "one\ntwo\nthree\n");

    // Discarded: nothing written, and the token is gone.
    let shown = call(&executor, &session, "e2", "editFile", edit).await;
    let dropped = call(
        &executor,
        &session,
        "r4",
        "resolveChange",
        json!({"token": token(&shown), "action": "discard"}),
    )
    .await;
    assert_eq!(dropped.status, AttemptStatus::Executed);
    let after =
        call(&executor, &session, "r5", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(after.status, AttemptStatus::Failed);
    assert_eq!(std::fs::read_to_string(work.join("a.txt")).unwrap(), "one\ntwo\nthree\n");

    // A token is its session's: another session cannot apply it.
    let shown = call(&executor, &session, "w2", "writeFile", json!({"path": "b.txt", "content": "b"})).await;
    let other = open(&executor, "s2", &work, true);
    let stolen =
        call(&executor, &other, "r6", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(stolen.status, AttemptStatus::Failed);
    assert!(!work.join("b.txt").exists());

    // Sessions that do not preview write at once and are not offered resolveChange.
    let plain = open(&executor, "s3", &work, false);
    let written = call(&executor, &plain, "w3", "writeFile", json!({"path": "c.txt", "content": "c"})).await;
    assert_eq!(written.status, AttemptStatus::Executed);
    assert_eq!(std::fs::read_to_string(work.join("c.txt")).unwrap(), "c");
    let hidden =
        call(&executor, &plain, "r7", "resolveChange", json!({"token": "x", "action": "apply"})).await;
    assert_eq!(hidden.output.error.unwrap().kind, tool_core::ErrorKind::UnknownTool);
}

#[tokio::test]
async fn the_person_approves_the_change_itself_when_it_is_applied() {
    let executor = executor();
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    let work = work.canonicalize().unwrap();
    let outside = dir.path().canonicalize().unwrap().join("outside.md");
    let session = open(&executor, "s1", &work, true);
    // Every question is answered yes, and what it showed is kept.
    let broker = executor.local_broker().unwrap().clone();
    let mut events = session.subscribe();
    let asked = Arc::new(std::sync::Mutex::new(Vec::<(String, Value)>::new()));
    let seen = asked.clone();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, .. } = event {
                let pending = broker.pending("t", Some("s1"));
                if let Some(request) = pending.iter().find(|r| r.id == approval_id) {
                    seen.lock().unwrap().push((request.api.clone(), request.arguments.clone()));
                }
                let _ = broker.decide(
                    "t",
                    &approval_id,
                    Decided { decision: Decision::AllowOnce, by: Some("me".into()) },
                );
            }
        }
    });
    let path = outside.display().to_string();
    let shown =
        call(&executor, &session, "w1", "writeFile", json!({"path": path, "content": "outside\n"})).await;
    assert_eq!(shown.status, AttemptStatus::Executed, "{:?}", shown.output);
    assert!(!outside.exists());
    let applied =
        call(&executor, &session, "r1", "resolveChange", json!({"token": token(&shown), "action": "apply"}))
            .await;
    assert_eq!(applied.status, AttemptStatus::Executed, "{:?}", applied.output);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "outside\n");
    let asked = asked.lock().unwrap().clone();
    let write = asked
        .iter()
        .find(|(_, arguments)| arguments.get("previewToken").is_some())
        .expect("the apply was asked about");
    assert_eq!(write.0, "writeFile");
    assert_eq!(write.1["content"], "outside\n", "the person sees the change itself");
}
