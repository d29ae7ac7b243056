//! The builtin tools through the pipeline: the path-scope audit and the shell audit decide on
//! real paths and real commands.

use std::sync::Arc;

use builtin_tools::Registry;
use computer_runtime::{ComputerRuntime, LocalComputer};
use journal::AttemptStatus;
use tool_core::Services;
use tool_executor::{
    ApprovalMode, BLOCKED_CONTENT, Decided, Decision, Event, Executor, RawCall, Session, SessionConfig,
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
    for (name, tier) in builtin_tools::tiers() {
        toolbox.add_tier(*name, *tier);
    }
    for (tool, api, prepare) in builtin_tools::preparations() {
        toolbox.add_prepare(tool, api, *prepare);
    }
    Executor::builder(Arc::new(toolbox)).build()
}

fn open(executor: &Executor, dir: &std::path::Path, mode: ApprovalMode) -> Arc<Session> {
    executor.open_session(SessionConfig {
        id: format!("s-{mode:?}"),
        tenant: "t".into(),
        working_directory: Some(dir.to_path_buf()),
        policy: SessionPolicy { mode, allow_list: vec![], exclude_temp: false, ..SessionPolicy::default() },
        ..SessionConfig::default()
    })
}

fn call(id: &str, name: &str, arguments: serde_json::Value) -> RawCall {
    RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }
}

#[tokio::test]
async fn inside_runs_outside_asks_headless_blocks() {
    let executor = executor();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::write(dir.path().join("notes.txt"), "inside\n").unwrap();

    let manual = open(&executor, dir.path(), ApprovalMode::Manual);
    let inside = executor
        .execute(&manual, None, call("c1", "readFile", serde_json::json!({"path": "notes.txt"})))
        .await;
    assert_eq!((inside.status, inside.output.content.as_str()), (AttemptStatus::Executed, "inside"));

    // Outside the folder: the call waits for a person; approve it and see it run.
    let mut events = manual.subscribe();
    let broker = executor.local_broker().unwrap().clone();
    let approver = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, reason, .. } = event {
                assert!(reason.contains("/etc/hostname"), "{reason}");
                broker
                    .decide(
                        "t",
                        &approval_id,
                        Decided { decision: Decision::AllowOnce, by: Some("me".into()) },
                    )
                    .unwrap();
                return true;
            }
        }
        false
    });
    let outside = executor
        .execute(&manual, None, call("c2", "readFile", serde_json::json!({"path": "/etc/hostname"})))
        .await;
    assert!(approver.await.unwrap(), "a person was asked");
    assert_eq!(outside.status, AttemptStatus::Executed, "{}", outside.output.content);

    let headless = open(&executor, dir.path(), ApprovalMode::Headless);
    let blocked = executor
        .execute(&headless, None, call("c3", "readFile", serde_json::json!({"path": "/etc/hostname"})))
        .await;
    assert_eq!((blocked.status, blocked.output.content.as_str()), (AttemptStatus::Blocked, BLOCKED_CONTENT));
    let command = executor
        .execute(&headless, None, call("c4", "runCommand", serde_json::json!({"command": "echo hi"})))
        .await;
    assert_eq!(command.status, AttemptStatus::Blocked, "runCommand requires approval");

    let auto = open(&executor, dir.path(), ApprovalMode::AutoRun);
    let ran = executor
        .execute(&auto, None, call("c5", "runCommand", serde_json::json!({"command": "echo hi"})))
        .await;
    assert_eq!(ran.status, AttemptStatus::Executed, "{}", ran.output.content);
    assert!(ran.output.content.contains("hi"));
    // The shell audit's must-ask findings are not skipped by auto-run; nobody answers here, so
    // cancel the session and see the one result come back.
    let auto_for_cancel = auto.clone();
    let mut events = auto.subscribe();
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if matches!(event, Event::PermissionRequested { .. }) {
                auto_for_cancel.cancel();
            }
        }
    });
    let dangerous = executor
        .execute(&auto, None, call("c6", "runCommand", serde_json::json!({"command": "rm -rf ~"})))
        .await;
    assert_eq!(dangerous.output.error.unwrap().kind, tool_core::ErrorKind::Cancelled);
}

/// A session stored by a server with keys and loaded again (a restart, another instance) after
/// its tenant swapped the working directory for a link to another tenant's folder: the folder is
/// not resolved again, so nothing there is read or written, and nobody is asked.
#[tokio::test]
async fn a_reloaded_session_does_not_follow_its_swapped_working_directory() {
    let executor = executor();
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = base.path().canonicalize().unwrap();
    let (mine, theirs) = (base.join("tenant-a"), base.join("tenant-b"));
    std::fs::create_dir_all(mine.join("work")).unwrap();
    std::fs::create_dir_all(&theirs).unwrap();
    std::fs::write(theirs.join("secret.txt"), "b's secret\n").unwrap();
    let config = SessionConfig {
        id: "s-reloaded".into(),
        tenant: "a".into(),
        working_directory: Some(mine.join("work")),
        policy: SessionPolicy { mode: ApprovalMode::Manual, exclude_temp: true, ..SessionPolicy::default() },
        hard_roots: Some(vec![tool_core::FileRoot::writable(&mine)]),
        ..SessionConfig::default()
    };
    // The tenant's command moves its folder away and leaves a link to the other tenant's.
    std::fs::rename(mine.join("work"), mine.join("work-old")).unwrap();
    std::os::unix::fs::symlink(&theirs, mine.join("work")).unwrap();
    let session = executor.open_session(config);
    assert_eq!(session.config.working_directory.as_deref(), Some(mine.join("work").as_path()));
    let mut events = session.subscribe();
    for (id, name, arguments) in [
        ("r1", "readFile", serde_json::json!({"path": "secret.txt"})),
        ("r2", "readFile", serde_json::json!({"path": mine.join("work/secret.txt")})),
        ("w1", "writeFile", serde_json::json!({"path": "planted.txt", "content": "x"})),
    ] {
        let result = executor.execute(&session, None, call(id, name, arguments)).await;
        assert_ne!(result.status, AttemptStatus::Executed, "{name}: {}", result.output.content);
        assert!(!result.output.content.contains("b's secret"), "{}", result.output.content);
    }
    assert!(!theirs.join("planted.txt").exists(), "nothing was written in the other tenant's folder");
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event, Event::PermissionRequested { .. }), "nobody is asked: {event:?}");
    }
}

/// With hard roots, the session's temp folder is one of its folders from the start: a file
/// written there before any command ran (none made the folder yet) is written, not refused.
#[tokio::test]
async fn the_temp_folder_is_usable_before_any_command() {
    let executor = executor();
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let base = base.path().canonicalize().unwrap();
    let work = base.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let temp = base.join("sessions/s-temp");
    let session = executor.open_session(SessionConfig {
        id: "s-temp".into(),
        tenant: "a".into(),
        working_directory: Some(work.clone()),
        temp_directory: Some(temp.clone()),
        policy: SessionPolicy { mode: ApprovalMode::Manual, exclude_temp: true, ..SessionPolicy::default() },
        hard_roots: Some(vec![tool_core::FileRoot::writable(&work)]),
        ..SessionConfig::default()
    });
    let note = temp.join("note.txt");
    let written = executor
        .execute(
            &session,
            None,
            call("t1", "writeFile", serde_json::json!({"path": note, "content": "kept"})),
        )
        .await;
    assert_eq!(written.status, AttemptStatus::Executed, "{}", written.output.content);
    assert_eq!(std::fs::read_to_string(&note).unwrap(), "kept");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::metadata(&temp).unwrap().permissions().mode() & 0o777, 0o700);
}

/// A person approves a read of a file outside the folder; before the call runs, another file is
/// renamed over that path. The runtime opens the file that was shown or none.
#[tokio::test]
async fn an_approved_outside_file_replaced_before_the_call_runs_is_not_read() {
    let executor = executor();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let shown = outside.path().canonicalize().unwrap().join("report.txt");
    std::fs::write(&shown, "the report that was shown\n").unwrap();
    let session = executor.open_session(SessionConfig {
        id: "s-replaced".into(),
        tenant: "t".into(),
        working_directory: Some(dir.path().to_path_buf()),
        policy: SessionPolicy { mode: ApprovalMode::Manual, exclude_temp: true, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    let mut events = session.subscribe();
    let broker = executor.local_broker().unwrap().clone();
    let swap = shown.clone();
    let approver = tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, .. } = event {
                // Between the question and the answer, another file takes the path.
                let other = swap.with_file_name("other.txt");
                std::fs::write(&other, "something else entirely\n").unwrap();
                std::fs::rename(&other, &swap).unwrap();
                broker
                    .decide(
                        "t",
                        &approval_id,
                        Decided { decision: Decision::AllowOnce, by: Some("me".into()) },
                    )
                    .unwrap();
                return;
            }
        }
    });
    let read =
        executor.execute(&session, None, call("r1", "readFile", serde_json::json!({"path": shown}))).await;
    approver.await.unwrap();
    assert_ne!(read.status, AttemptStatus::Executed, "{}", read.output.content);
    assert!(!read.output.content.contains("something else"), "{}", read.output.content);
    assert!(read.output.content.contains("not the file that was approved"), "{}", read.output.content);
}

/// "This command for this session" grants that command word for word: the same command runs
/// without asking again, the same command with more arguments is asked about.
#[tokio::test]
async fn a_session_grant_of_a_command_is_that_command_only() {
    let executor = executor();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let session = open(&executor, dir.path(), ApprovalMode::Manual);
    let mut events = session.subscribe();
    let broker = executor.local_broker().unwrap().clone();
    let answers = tokio::spawn(async move {
        let mut asked = Vec::new();
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, call_id, .. } = event {
                asked.push(call_id.clone());
                let decision = if call_id == "c1" {
                    Decision::AllowSession { argument_prefix: None }
                } else {
                    Decision::Deny
                };
                broker.decide("t", &approval_id, Decided { decision, by: Some("me".into()) }).unwrap();
                if asked.len() == 2 {
                    return asked;
                }
            }
        }
        asked
    });
    let run = |id: &str, command: &str| call(id, "runCommand", serde_json::json!({"command": command}));
    let first = executor.execute(&session, None, run("c1", "touch granted.txt")).await;
    assert_eq!(first.status, AttemptStatus::Executed, "{}", first.output.content);
    let again = executor.execute(&session, None, run("c2", "touch granted.txt")).await;
    assert_eq!(again.status, AttemptStatus::Executed, "the same command is not asked again");
    let more = executor.execute(&session, None, run("c3", "touch granted.txt extra.txt")).await;
    assert_eq!(more.status, AttemptStatus::Denied, "more arguments are asked about: {}", more.output.content);
    assert_eq!(answers.await.unwrap(), ["c1", "c3"]);
    assert!(!dir.path().join("extra.txt").exists());
}

#[tokio::test]
async fn the_engine_the_pipeline_chooses_decides_whether_code_asks() {
    let executor = executor();
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    // Read-only sessions run in-process code (it only computes) and block the full interpreter.
    let read_only = open(&executor, dir.path(), ApprovalMode::ReadOnly);
    let pure = executor
        .execute(
            &read_only,
            None,
            call("c1", "runCode", serde_json::json!({"language": "python", "code": "3 * 14"})),
        )
        .await;
    assert_eq!(pure.status, AttemptStatus::Executed, "{}", pure.output.content);
    assert!(pure.output.content.contains("Out: 42"), "{}", pure.output.content);
    let full = executor
        .execute(
            &read_only,
            None,
            call("c2", "runCode", serde_json::json!({"language": "python", "code": "import os"})),
        )
        .await;
    assert_eq!(full.status, AttemptStatus::Blocked, "{}", full.output.content);
    // A model that names the in-process engine for code needing the machine gets the subset's
    // error, never the machine.
    let named = executor
        .execute(
            &read_only,
            None,
            call("c3", "runCode", serde_json::json!({"language": "python", "code": "import os\nos.listdir('/')", "engine": "in-process"})),
        )
        .await;
    assert_ne!(named.status, AttemptStatus::Executed, "{}", named.output.content);
    assert!(!named.output.content.contains("etc"), "{}", named.output.content);
    // Headless: in-process code runs, the full interpreter would ask and is blocked.
    let headless = open(&executor, dir.path(), ApprovalMode::Headless);
    let full = executor
        .execute(
            &headless,
            None,
            call(
                "c4",
                "runCode",
                serde_json::json!({"language": "python", "code": "import os", "engine": null}),
            ),
        )
        .await;
    assert_eq!(full.status, AttemptStatus::Blocked, "{}", full.output.content);
}

/// Answers every approval of `session` from `answers` (by call id; any other is denied) and
/// returns the ids of the calls a person was asked about, once `until` of them were.
fn answer_by_call(
    executor: &Executor,
    session: &Session,
    answers: std::collections::HashMap<&'static str, Decision>,
) -> Arc<std::sync::Mutex<Vec<String>>> {
    let asked = Arc::new(std::sync::Mutex::new(Vec::new()));
    let mut events = session.subscribe();
    let broker = executor.local_broker().unwrap().clone();
    let seen = Arc::clone(&asked);
    tokio::spawn(async move {
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, call_id, .. } = event {
                seen.lock().unwrap().push(call_id.clone());
                let decision = answers.get(call_id.as_str()).cloned().unwrap_or(Decision::Deny);
                broker.decide("t", &approval_id, Decided { decision, by: Some("me".into()) }).unwrap();
            }
        }
    });
    asked
}

/// "Always" and "for this session" on a file call outside the folder grant the file, or the
/// folder the person chose, never the API for every path: for reads, writes, edits, moves and
/// searches alike. A scope wider than allowed (`/`) or one that does not hold the call is not
/// taken: the call's own files are granted instead.
#[tokio::test]
async fn a_grant_for_one_path_does_not_cover_another() {
    let executor = executor();
    let work = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let outside = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let o = outside.path().canonicalize().unwrap();
    for folder in ["a/sub", "b"] {
        std::fs::create_dir_all(o.join(folder)).unwrap();
    }
    for file in ["a/one", "a/two", "a/sub/three", "b/four", "b/five"] {
        std::fs::write(o.join(file), "old text\n").unwrap();
    }
    let path = |p: &str| o.join(p).display().to_string();
    // Each family: (its API, the arguments naming a file).
    type Args = Box<dyn Fn(&str) -> serde_json::Value>;
    let families: Vec<(&str, Args)> = vec![
        ("readFile", Box::new(|p: &str| serde_json::json!({"path": p}))),
        ("writeFile", Box::new(|p: &str| serde_json::json!({"path": p, "content": "new text\n"}))),
        (
            "editFile",
            Box::new(|p: &str| serde_json::json!({"path": p, "oldText": "text", "newText": "text!"})),
        ),
        ("grepContent", Box::new(|p: &str| serde_json::json!({"pattern": "text", "path": p}))),
        (
            "moveFiles",
            Box::new(
                |p: &str| serde_json::json!({"items": [{"oldPath": p, "newPath": format!("{p}.moved")}]}),
            ),
        ),
    ];
    for (api, args) in families {
        let session = executor.open_session(SessionConfig {
            id: format!("scope-{api}"),
            tenant: "t".into(),
            working_directory: Some(work.path().to_path_buf()),
            policy: SessionPolicy {
                mode: ApprovalMode::Manual,
                exclude_temp: true,
                ..SessionPolicy::default()
            },
            ..SessionConfig::default()
        });
        let answers = std::collections::HashMap::from([
            // "Always" with no scope named: this file alone.
            ("always-file", Decision::AllowAlways { argument_prefix: None }),
            // "For this session" with the folder shown.
            ("session-folder", Decision::AllowSession { argument_prefix: Some(path("a")) }),
            // A scope of `/`, and one that does not hold the call: the file alone.
            ("too-wide", Decision::AllowSession { argument_prefix: Some("/".into()) }),
            ("elsewhere", Decision::AllowAlways { argument_prefix: Some(path("a")) }),
        ]);
        let asked = answer_by_call(&executor, &session, answers);
        let run = async |id: &str, file: &str| {
            let result = executor.execute(&session, None, call(id, api, args(&path(file)))).await;
            (result.status, result.output.content)
        };
        // Moves take the file away: each call of a move names a fresh file.
        let fresh = |name: &str| {
            if api == "moveFiles" {
                let file = format!("{name}-{}", asked.lock().unwrap().len());
                std::fs::write(o.join(&file), "old text\n").unwrap();
                file
            } else {
                name.to_owned()
            }
        };
        let (status, content) = run("always-file", &fresh("a/one")).await;
        assert_eq!(status, AttemptStatus::Executed, "{api}: {content}");
        if api != "moveFiles" {
            let (status, _) = run("same-file", "a/one").await;
            assert_eq!(status, AttemptStatus::Executed, "{api}: the same file is not asked again");
        }
        let (status, _) = run("neighbour", &fresh("a/two")).await;
        assert_eq!(status, AttemptStatus::Denied, "{api}: a file beside the granted one is asked about");

        let (status, content) = run("session-folder", &fresh("a/two")).await;
        assert_eq!(status, AttemptStatus::Executed, "{api}: {content}");
        let (status, content) = run("under-folder", &fresh("a/sub/three")).await;
        assert_eq!(status, AttemptStatus::Executed, "{api}: under the granted folder: {content}");
        let (status, _) = run("other-folder", &fresh("b/four")).await;
        assert_eq!(status, AttemptStatus::Denied, "{api}: a folder beside the granted one is asked about");

        let (status, content) = run("too-wide", &fresh("b/four")).await;
        assert_eq!(status, AttemptStatus::Executed, "{api}: {content}");
        let (status, _) = run("past-too-wide", &fresh("b/five")).await;
        assert_eq!(status, AttemptStatus::Denied, "{api}: `/` granted only the file");
        let (status, content) = run("elsewhere", &fresh("b/five")).await;
        assert_eq!(status, AttemptStatus::Executed, "{api}: {content}");
        let (status, _) = run("past-elsewhere", &fresh("b/six")).await;
        assert_eq!(
            status,
            AttemptStatus::Denied,
            "{api}: a scope not holding the call granted only its file"
        );

        let mut expected =
            vec!["always-file", "neighbour", "session-folder", "other-folder", "too-wide", "past-too-wide"];
        expected.extend(["elsewhere", "past-elsewhere"]);
        assert_eq!(*asked.lock().unwrap(), expected, "{api}");
    }
}
