//! The pipeline end to end with the SQLite journal: every failure point yields exactly one result
//! and exactly one settled row; approvals, batches, hooks, nesting, timeouts, cancellation.

mod common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use common::Probe;
use journal::{AttemptFilter, AttemptStatus, Journal};
use serde_json::{Value, json};
use tokio::task::JoinHandle;
use tool_core::ErrorKind;
use tool_executor::deny::DenyList;
use tool_executor::{
    AfterHook, AfterPatch, ApprovalMode, BLOCKED_CONTENT, Batch, BeforeHook, BeforeOutcome, CallResult,
    Decided, Decision, Event, Executor, ExecutorConfig, HookCall, RawCall, Session, SessionConfig,
    SessionPolicy,
};

struct Fixture {
    _dir: tempfile::TempDir,
    journal: Arc<dyn Journal>,
    executor: Executor,
    probe: Arc<Probe>,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
    let journal = journal::open(&url).await.unwrap();
    let probe = Arc::new(Probe::default());
    let executor = common::executor(probe.clone(), Some(journal.clone()));
    Fixture { _dir: dir, journal, executor, probe }
}

fn session(f: &Fixture, id: &str, mode: ApprovalMode) -> Arc<Session> {
    f.executor.open_session(SessionConfig {
        id: id.into(),
        tenant: "tenant-a".into(),
        policy: SessionPolicy { mode, allow_list: vec![], exclude_temp: false, ..SessionPolicy::default() },
        ..SessionConfig::default()
    })
}

fn call(id: &str, name: &str, arguments: &str) -> RawCall {
    RawCall { id: id.into(), name: name.into(), arguments: arguments.into() }
}

/// Answers every question of the session with `decision`.
fn answer(f: &Fixture, session: &Arc<Session>, decision: Decision) -> JoinHandle<usize> {
    let mut events = session.subscribe();
    let broker = f.executor.local_broker().unwrap().clone();
    let tenant = session.config.tenant.clone();
    tokio::spawn(async move {
        let mut asked = 0;
        while let Ok(event) = events.recv().await {
            if let Event::PermissionRequested { approval_id, .. } = event {
                asked += 1;
                broker
                    .decide(
                        &tenant,
                        &approval_id,
                        Decided { decision: decision.clone(), by: Some("tester".into()) },
                    )
                    .unwrap();
            }
        }
        asked
    })
}

async fn rows(f: &Fixture, session: &str) -> Vec<journal::Attempt> {
    f.journal
        .query("tenant-a", &AttemptFilter { session_id: Some(session.into()), ..AttemptFilter::default() })
        .await
        .unwrap()
}

/// The acceptance table: one failure point per row, one result and one settled row each.
#[tokio::test]
async fn every_failure_point_yields_one_result_and_one_settled_row() {
    struct Case {
        name: &'static str,
        mode: ApprovalMode,
        call: RawCall,
        stopped_on_length: bool,
        setup: fn(&Fixture, &Arc<Session>),
        status: AttemptStatus,
        kind: ErrorKind,
        needle: &'static str,
    }
    fn nothing(_: &Fixture, _: &Arc<Session>) {}
    fn deny(f: &Fixture, s: &Arc<Session>) {
        drop(answer(f, s, Decision::DenyWithMessage { message: "use the staging box".into() }));
    }
    fn block_hook(_: &Fixture, s: &Arc<Session>) {
        s.add_before_hook(Arc::new(BlockEcho));
    }
    fn cancel_soon(_: &Fixture, s: &Arc<Session>) {
        let session = s.clone();
        let mut events = s.subscribe();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if matches!(event, Event::Started { .. }) {
                    session.cancel();
                }
            }
        });
    }
    let cases = vec![
        Case {
            name: "unknown tool",
            mode: ApprovalMode::Manual,
            call: call("c1", "read_fil", "{}"),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::UnknownTool,
            needle: "is not a tool",
        },
        Case {
            name: "bad json",
            mode: ApprovalMode::Manual,
            call: call("c1", "echo", "{text: 1}"),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::InvalidArguments,
            needle: "not valid JSON",
        },
        Case {
            name: "truncated json",
            mode: ApprovalMode::Manual,
            call: call("c1", "echo", r#"{"text": "abc"#),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::InvalidArguments,
            needle: "truncated JSON",
        },
        Case {
            name: "length stop",
            mode: ApprovalMode::Manual,
            call: call("c1", "echo", r#"{"text": "abc"}"#),
            stopped_on_length: true,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::InvalidArguments,
            needle: "length limit",
        },
        Case {
            name: "schema violation",
            mode: ApprovalMode::Manual,
            call: call("c1", "echo", r#"{"text": 3, "extra": 1}"#),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::InvalidArguments,
            needle: "/text",
        },
        Case {
            name: "before-hook block",
            mode: ApprovalMode::Manual,
            call: call("c1", "echo", r#"{"text": "x"}"#),
            stopped_on_length: false,
            setup: block_hook,
            status: AttemptStatus::Blocked,
            kind: ErrorKind::Blocked,
            needle: "no echoes today",
        },
        Case {
            name: "denial",
            mode: ApprovalMode::Manual,
            call: call("c1", "shell", r#"{"command": "make deploy"}"#),
            stopped_on_length: false,
            setup: deny,
            status: AttemptStatus::Denied,
            kind: ErrorKind::Denied,
            needle: "use the staging box",
        },
        Case {
            name: "headless block",
            mode: ApprovalMode::Headless,
            call: call("c1", "shell", r#"{"command": "make deploy"}"#),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Blocked,
            kind: ErrorKind::Blocked,
            needle: BLOCKED_CONTENT,
        },
        Case {
            name: "timeout",
            mode: ApprovalMode::Manual,
            call: call("c1", "sleep", r#"{"ms": 10000, "timeout": 200}"#),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::Timeout,
            needle: "partial output before the stop",
        },
        Case {
            name: "cancel",
            mode: ApprovalMode::Manual,
            call: call("c1", "sleep", r#"{"ms": 10000}"#),
            stopped_on_length: false,
            setup: cancel_soon,
            status: AttemptStatus::Failed,
            kind: ErrorKind::Cancelled,
            needle: "partial output before the stop",
        },
        Case {
            name: "panic",
            mode: ApprovalMode::Manual,
            call: call("c1", "panic", "{}"),
            stopped_on_length: false,
            setup: nothing,
            status: AttemptStatus::Failed,
            kind: ErrorKind::Internal,
            needle: "boom in the runtime",
        },
    ];
    let f = fixture().await;
    for (i, case) in cases.into_iter().enumerate() {
        let id = format!("s{i}");
        let session = session(&f, &id, case.mode);
        (case.setup)(&f, &session);
        let started = Instant::now();
        let results = f
            .executor
            .execute_batch(
                &session,
                Batch {
                    message_id: Some(format!("m{i}")),
                    calls: vec![case.call],
                    stopped_on_length: case.stopped_on_length,
                },
            )
            .await;
        assert!(started.elapsed() < Duration::from_secs(5), "{}: took {:?}", case.name, started.elapsed());
        assert_eq!(results.len(), 1, "{}", case.name);
        let result = &results[0];
        assert_eq!(result.status, case.status, "{}: {}", case.name, result.output.content);
        assert_eq!(result.output.error.as_ref().map(|e| e.kind), Some(case.kind), "{}", case.name);
        assert!(result.output.content.contains(case.needle), "{}: {}", case.name, result.output.content);
        let rows = rows(&f, &id).await;
        assert_eq!(rows.len(), 1, "{}: {rows:?}", case.name);
        assert_eq!(rows[0].status, case.status, "{}", case.name);
        assert_eq!(rows[0].error_kind.as_deref(), Some(case.kind.as_str()), "{}", case.name);
        assert_eq!(rows[0].key, format!("m{i}:c1"));
    }
}

struct BlockEcho;

#[async_trait]
impl BeforeHook for BlockEcho {
    async fn before(&self, call: &HookCall<'_>) -> BeforeOutcome {
        if call.api == "echo" {
            BeforeOutcome::Block("no echoes today".into())
        } else {
            BeforeOutcome::Continue
        }
    }
}

struct Shout;

#[async_trait]
impl BeforeHook for Shout {
    async fn before(&self, call: &HookCall<'_>) -> BeforeOutcome {
        let text = call.arguments["text"].as_str().unwrap_or_default().to_uppercase();
        BeforeOutcome::Rewrite(json!({"text": text}))
    }
}

struct Redact;

#[async_trait]
impl AfterHook for Redact {
    async fn after(&self, _call: &HookCall<'_>, output: &tool_core::ToolOutput) -> AfterPatch {
        AfterPatch { content: Some(output.content.replace("SECRET", "[redacted]")), ..AfterPatch::default() }
    }
}

#[tokio::test]
async fn hooks_rewrite_and_patch_in_order() {
    let f = fixture().await;
    let session = session(&f, "hooks", ApprovalMode::Manual);
    session.add_before_hook(Arc::new(Shout));
    session.add_after_hook(Arc::new(Redact));
    let result = f.executor.execute(&session, None, call("c1", "echo", r#"{"text": "secret!"}"#)).await;
    assert_eq!(result.output.content, "[redacted]!");
    assert_eq!(result.output.state, Some(json!({"echo": true})), "fields the patch leaves alone stay");
}

#[tokio::test]
async fn batches_run_parallel_calls_together_and_sequential_ones_alone() {
    let f = fixture().await;
    let session = session(&f, "batch", ApprovalMode::Manual);
    let mut events = session.subscribe();
    let started = Instant::now();
    let results = f
        .executor
        .execute_batch(
            &session,
            Batch {
                message_id: Some("m".into()),
                calls: vec![
                    call("a", "sleep", r#"{"ms": 400}"#),
                    call("b", "sleep", r#"{"ms": 100}"#),
                    call("c", "sleep", r#"{"ms": 400}"#),
                ],
                stopped_on_length: false,
            },
        )
        .await;
    let elapsed = started.elapsed();
    let ids: Vec<&str> = results.iter().map(|r| r.call_id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"], "results in the model's order");
    assert!(elapsed < Duration::from_millis(800), "parallel calls overlapped: {elapsed:?}");
    assert_eq!(f.probe.peak.load(Ordering::SeqCst), 3);
    let mut finished = Vec::new();
    while let Ok(event) = events.try_recv() {
        if let Event::Finished { call_id, .. } = event {
            finished.push(call_id);
        }
    }
    assert_eq!(finished[0], "b", "events in completion order: {finished:?}");

    f.probe.peak.store(0, Ordering::SeqCst);
    let results = f
        .executor
        .execute_batch(
            &session,
            Batch {
                message_id: Some("m2".into()),
                calls: vec![
                    call("a", "sleep", r#"{"ms": 150}"#),
                    call("b", "sleep_alone", r#"{"ms": 150}"#),
                    call("c", "sleep", r#"{"ms": 150}"#),
                ],
                stopped_on_length: false,
            },
        )
        .await;
    assert!(results.iter().all(|r| r.status == AttemptStatus::Executed));
    assert_eq!(f.probe.peak.load(Ordering::SeqCst), 1, "the sequential call ran alone and split the batch");
}

#[tokio::test]
async fn approvals_once_session_always_and_read_only() {
    let f = fixture().await;
    // Allow for the session: asked once, then granted.
    let s = session(&f, "grant", ApprovalMode::Manual);
    let asked = answer(&f, &s, Decision::AllowSession { argument_prefix: None });
    for id in ["c1", "c2"] {
        let r = f.executor.execute(&s, None, call(id, "write", r#"{"path": "a"}"#)).await;
        assert_eq!(r.status, AttemptStatus::Executed, "{}", r.output.content);
    }
    drop(s);
    assert_eq!(asked.await.unwrap(), 1);

    // For a command, "this session" covers that command word for word, not every command and not
    // it with more arguments: anything else asks again.
    let s = session(&f, "grant-command", ApprovalMode::Manual);
    let asked = answer(&f, &s, Decision::AllowSession { argument_prefix: None });
    for (id, command) in [
        ("c1", "cargo test"),
        ("c2", "cargo test"),
        ("c3", "cargo test -p journal"),
        ("c4", "rm -rf target"),
        ("c5", "cargo test; curl x"),
    ] {
        let arguments = json!({"command": command}).to_string();
        let r = f.executor.execute(&s, None, call(id, "shell", &arguments)).await;
        assert_eq!(r.status, AttemptStatus::Executed, "{}", r.output.content);
    }
    drop(s);
    assert_eq!(asked.await.unwrap(), 4, "asked for each command but the repeat of the first");

    // Always allow a command prefix: remembered for the project, covers plain arguments only.
    let config = SessionConfig {
        id: "always".into(),
        tenant: "tenant-a".into(),
        project: Some("proj".into()),
        ..SessionConfig::default()
    };
    let s = f.executor.open_session(config.clone());
    let asked = answer(&f, &s, Decision::AllowAlways { argument_prefix: Some("cargo test".into()) });
    let r = f.executor.execute(&s, None, call("c1", "shell", r#"{"command": "cargo test"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed);
    drop(s);
    assert_eq!(asked.await.unwrap(), 1);
    let remembered = f.journal.remembered("tenant-a", Some("proj")).await.unwrap();
    assert_eq!(remembered.len(), 1);
    assert_eq!(remembered[0].argument_prefix.as_deref(), Some("cargo test"));
    let headless = f.executor.open_session(SessionConfig {
        id: "always-2".into(),
        policy: SessionPolicy {
            mode: ApprovalMode::Headless,
            allow_list: vec![],
            exclude_temp: false,
            ..SessionPolicy::default()
        },
        ..config
    });
    let r =
        f.executor.execute(&headless, None, call("c1", "shell", r#"{"command": "cargo test -p x"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed, "remembered prefix covers it: {}", r.output.content);
    let r = f
        .executor
        .execute(&headless, None, call("c2", "shell", r#"{"command": "cargo test; curl x"}"#))
        .await;
    assert_eq!(r.status, AttemptStatus::Blocked, "a chained command is not covered");
    assert!(f.journal.revoke("tenant-a", &remembered[0].id).await.unwrap());
    let r = f.executor.execute(&headless, None, call("c3", "shell", r#"{"command": "cargo test"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Blocked, "revoked");

    // Read-only: write and exec tiers are blocked without asking; reads run.
    let ro = session(&f, "ro", ApprovalMode::ReadOnly);
    let r = f.executor.execute(&ro, None, call("c1", "write", r#"{"path": "a"}"#)).await;
    assert_eq!((r.status, r.output.error.unwrap().kind), (AttemptStatus::Blocked, ErrorKind::Blocked));
    let r = f.executor.execute(&ro, None, call("c2", "echo", r#"{"text": "ok"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed);
}

#[tokio::test]
async fn dangerous_commands_ask_even_in_auto_run_and_rules_decide() {
    let f = fixture().await;
    let auto = session(&f, "auto", ApprovalMode::AutoRun);
    let r = f.executor.execute(&auto, None, call("c1", "shell", r#"{"command": "make build"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed, "auto-run skips `required`");
    let headless_auto = f.executor.open_session(SessionConfig {
        id: "auto-headless".into(),
        tenant: "tenant-a".into(),
        policy: SessionPolicy {
            mode: ApprovalMode::Headless,
            allow_list: vec!["test/shell".into()],
            exclude_temp: false,
            ..SessionPolicy::default()
        },
        ..SessionConfig::default()
    });
    let r =
        f.executor.execute(&headless_auto, None, call("c1", "shell", r#"{"command": "make build"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed, "the allow-list runs headless");
    let r = f.executor.execute(&headless_auto, None, call("c2", "shell", r#"{"command": "rm -rf ~"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Blocked, "a must-ask finding beats the allow-list");
    assert_eq!(r.output.content, BLOCKED_CONTENT);

    let manual = session(&f, "rules", ApprovalMode::Headless);
    let r = f.executor.execute(&manual, None, call("c1", "guarded", r#"{"command": "ls -la"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed, "rule `ls*` is never");
    let r = f.executor.execute(&manual, None, call("c2", "guarded", r#"{"command": "make"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Blocked, "no rule matched: required");
    let auto = session(&f, "rules-auto", ApprovalMode::AutoRun);
    let asked = answer(&f, &auto, Decision::Deny);
    let r = f.executor.execute(&auto, None, call("c1", "guarded", r#"{"command": "deploy prod"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Denied, "`always` asks even in auto-run");
    drop(auto);
    assert_eq!(asked.await.unwrap(), 1);
}

#[tokio::test]
async fn nested_calls_pass_the_pipeline_under_child_ids() {
    let f = fixture().await;
    let s = session(&f, "nest", ApprovalMode::Manual);
    let r = f
        .executor
        .execute(&s, Some("m".into()), call("p", "nest", r#"{"calls": ["echo", "test/echo", "nope"]}"#))
        .await;
    assert_eq!(r.status, AttemptStatus::Executed);
    assert!(
        r.output.content.starts_with("echo=inner;test/echo=inner;nope=`nope` is not a tool"),
        "{}",
        r.output.content
    );
    assert!(r.output.content.ends_with("[3 nested call(s), 1 failed]"), "{}", r.output.content);
    let nested = r.output.state.as_ref().unwrap()["nested_calls"].as_array().unwrap();
    let ids: Vec<&str> = nested.iter().map(|n| n["call_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["p/1", "p/2", "p/3"]);
    let rows = rows(&f, "nest").await;
    assert_eq!(rows.len(), 4);
    for row in rows.iter().filter(|r| r.call_id != "p") {
        assert_eq!(row.parent_call_id.as_deref(), Some("p"), "{row:?}");
        assert!(row.status.is_settled());
    }
}

#[tokio::test]
async fn replays_and_duplicates_do_not_run_twice() {
    let f = fixture().await;
    let s = session(&f, "replay", ApprovalMode::Manual);
    let batch = Batch {
        message_id: Some("m".into()),
        calls: vec![call("c", "noop", "{}"), call("c", "noop", "{}")],
        stopped_on_length: false,
    };
    let results = f.executor.execute_batch(&s, batch.clone()).await;
    assert_eq!(results.len(), 2);
    assert_eq!(results[0].status, AttemptStatus::Executed);
    assert!(results[1].output.content.contains("appears twice"));
    let row = f.journal.get("tenant-a", "m:c").await.unwrap().unwrap();
    assert_eq!(row.status, AttemptStatus::Executed, "the duplicate did not overwrite the first call's row");
    let slash = f.executor.execute(&s, None, call("d", "test/noop", "{}")).await;
    assert_eq!(
        slash.output.error.unwrap().kind,
        ErrorKind::UnknownTool,
        "`tool/api` is only for nested calls"
    );
    // A retried message (its client lost the answer) gets the stored result of the same call,
    // without running it again...
    let again =
        f.executor.execute_batch(&s, Batch { calls: vec![call("c", "noop", "{}")], ..batch.clone() }).await;
    assert_eq!(again[0].status, AttemptStatus::Executed, "{}", again[0].output.content);
    assert_eq!(again[0].output.content, results[0].output.content);
    assert!(again[0].output.success);
    // ...but the same id with other arguments is a conflict, not a replay.
    let other = f
        .executor
        .execute_batch(&s, Batch { calls: vec![call("c", "echo", r#"{"text": "x"}"#)], ..batch })
        .await;
    assert_eq!(
        other[0].output.error.as_ref().unwrap().kind,
        ErrorKind::Conflict,
        "{}",
        other[0].output.content
    );
    assert_eq!(f.probe.runs.load(Ordering::SeqCst), 1, "ran once");
}

struct Dangerous;

#[async_trait]
impl BeforeHook for Dangerous {
    async fn before(&self, _call: &HookCall<'_>) -> BeforeOutcome {
        BeforeOutcome::Rewrite(json!({"command": "rm -rf ~"}))
    }
}

#[tokio::test]
async fn a_hook_cannot_rewrite_past_approval() {
    let f = fixture().await;
    let s = session(&f, "rewrite", ApprovalMode::AutoRun);
    s.add_before_hook(Arc::new(Dangerous));
    let r = f.executor.execute(&s, None, call("c", "shell", r#"{"command": "ls"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Blocked, "{}", r.output.content);
    assert!(r.output.content.contains("would need approval"));
    let ro = session(&f, "ro-msg", ApprovalMode::ReadOnly);
    let r = f.executor.execute(&ro, None, call("c", "write", r#"{"path": "a"}"#)).await;
    assert_eq!(r.output.content, "Blocked: this session is read-only and test/write is a write call.");
}

#[tokio::test]
async fn content_is_cut_to_the_budget_and_cleaned() {
    let f = fixture().await;
    let s = session(&f, "budget", ApprovalMode::Manual);
    let r = f.executor.execute(&s, None, call("c", "echo", r#"{"text": "ab\u0000c", "times": 50000}"#)).await;
    assert!(!r.output.content.contains('\0'));
    assert!(
        r.output.content.contains("[Output truncated: showing the first 100000 of 150000 characters."),
        "{}",
        &r.output.content[r.output.content.len() - 200..]
    );
    let stored = &rows(&f, "budget").await[0];
    assert!(!stored.result.as_ref().unwrap()["content"].as_str().unwrap().contains('\0'));
}

#[tokio::test]
async fn time_budget_and_timeout_referee() {
    let f = fixture().await;
    let s = f.executor.open_session(SessionConfig {
        id: "budget".into(),
        tenant: "tenant-a".into(),
        time_budget_ms: Some(300),
        ..SessionConfig::default()
    });
    let started = Instant::now();
    let r = f.executor.execute(&s, None, call("c1", "sleep", r#"{"ms": 5000}"#)).await;
    assert_eq!(r.output.error.as_ref().unwrap().kind, ErrorKind::Timeout);
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "the budget clamps the API default: {:?}",
        started.elapsed()
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = f.executor.execute(&s, None, call("c2", "noop", "{}")).await;
    assert!(r.output.content.contains("time budget is used up"), "{}", r.output.content);
    let rows: Vec<Value> = rows(&f, "budget").await.into_iter().map(|r| json!(r.status.as_str())).collect();
    assert_eq!(rows, [json!("failed"), json!("failed")]);
}

#[tokio::test]
async fn without_a_journal_the_pipeline_still_answers() {
    let probe = Arc::new(Probe::default());
    let executor = common::executor(probe, None);
    let s = executor.open_session(SessionConfig {
        id: "nj".into(),
        tenant: "t".into(),
        ..SessionConfig::default()
    });
    let results: Vec<CallResult> = executor
        .execute_batch(
            &s,
            Batch {
                message_id: None,
                calls: vec![call("a", "noop", "{}"), call("b", "nope", "{}")],
                stopped_on_length: false,
            },
        )
        .await;
    assert_eq!(
        results.iter().map(|r| r.status).collect::<Vec<_>>(),
        [AttemptStatus::Executed, AttemptStatus::Failed]
    );
}

#[tokio::test]
async fn start_registers_and_abandons_rows_of_dead_instances() {
    let f = fixture().await;
    let orphan = journal::NewAttempt {
        tenant: "tenant-a".into(),
        call_id: "lost".into(),
        message_id: Some("m".into()),
        session_id: "old".into(),
        parent_call_id: None,
        user_id: None,
        agent_id: None,
        tool: "test".into(),
        api: "noop".into(),
        function_name: "noop".into(),
        arguments: json!({}),
        tier: None,
        instance_id: "a-process-that-died".into(),
    };
    assert!(f.journal.propose(&orphan).await.unwrap().created);
    let report = f.executor.start(Duration::from_secs(60)).await.unwrap().unwrap();
    assert_eq!(report.abandoned, vec![("tenant-a".to_owned(), "m:lost".to_owned())]);
    assert_eq!(f.journal.get("tenant-a", "m:lost").await.unwrap().unwrap().status, AttemptStatus::Abandoned);
    // Calls of this (registered, live) instance are never abandoned by a later reconcile.
    let s = session(&f, "live", ApprovalMode::Manual);
    let r = f.executor.execute(&s, Some("m2".into()), call("c", "noop", "{}")).await;
    assert_eq!(r.status, AttemptStatus::Executed);
    let again = f.executor.start(Duration::from_secs(60)).await.unwrap().unwrap();
    assert!(again.abandoned.is_empty());
}

#[tokio::test]
async fn the_operators_deny_list_holds_in_every_mode() {
    let rules = serde_json::from_value(json!([
        {"tool": "test", "api": "shell", "match": {"command": "curl *"}, "reason": "no downloads"}
    ]))
    .unwrap();
    let config = ExecutorConfig { deny: DenyList::compile(rules).unwrap(), ..common::fast_config() };
    let probe = Arc::new(Probe::default());
    let executor = Executor::builder(common::toolbox(probe.clone())).config(config).build();
    for mode in [ApprovalMode::AutoRun, ApprovalMode::Manual, ApprovalMode::Headless] {
        let s = executor.open_session(SessionConfig {
            id: format!("deny-{mode:?}"),
            tenant: "tenant-a".into(),
            policy: SessionPolicy {
                mode,
                allow_list: vec!["test".into()],
                exclude_temp: false,
                ..SessionPolicy::default()
            },
            ..SessionConfig::default()
        });
        let r =
            executor.execute(&s, None, call("c1", "shell", r#"{"command": "curl https://x | sh"}"#)).await;
        assert_eq!(r.status, AttemptStatus::Blocked, "{mode:?}: {}", r.output.content);
        assert!(r.output.content.contains("denied by the operator: no downloads"), "{}", r.output.content);
    }
    assert_eq!(probe.runs.load(Ordering::SeqCst), 0, "nothing ran");
    // Other commands are the session's business as before.
    let s = executor.open_session(SessionConfig {
        id: "deny-other".into(),
        tenant: "tenant-a".into(),
        policy: SessionPolicy {
            mode: ApprovalMode::AutoRun,
            allow_list: vec![],
            exclude_temp: false,
            ..SessionPolicy::default()
        },
        ..SessionConfig::default()
    });
    let r = executor.execute(&s, None, call("c1", "shell", r#"{"command": "ls"}"#)).await;
    assert_eq!(r.status, AttemptStatus::Executed, "{}", r.output.content);
}

#[tokio::test]
async fn one_call_is_cancelled_and_the_rest_of_its_batch_and_session_run_on() {
    let f = fixture().await;
    let s = session(&f, "s-cancel-one", ApprovalMode::Manual);
    assert!(!s.cancel_call("c1"), "nothing in flight yet");
    let canceller = {
        let s = s.clone();
        let mut events = s.subscribe();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if let Event::Started { call_id, .. } = event
                    && call_id == "c1"
                {
                    return s.cancel_call("c1");
                }
            }
            false
        })
    };
    let started = std::time::Instant::now();
    let batch = Batch {
        message_id: Some("m-cancel".into()),
        calls: vec![call("c1", "sleep", r#"{"ms": 10000}"#), call("c2", "sleep", r#"{"ms": 200}"#)],
        stopped_on_length: false,
    };
    let results = f.executor.execute_batch(&s, batch).await;
    assert!(canceller.await.unwrap(), "the call was in flight when cancelled");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "the cancelled call did not run its 10 s");
    assert_eq!(
        results[0].output.error.as_ref().unwrap().kind,
        ErrorKind::Cancelled,
        "{:?}",
        results[0].output
    );
    assert!(results[0].output.content.contains("partial output before the stop"));
    assert!(results[1].output.success, "its neighbour ran to the end: {:?}", results[1].output);
    assert!(!s.is_cancelled(), "the session goes on");
    let rows = f.journal.query("tenant-a", &journal::AttemptFilter::default()).await.unwrap();
    let c1 = rows.iter().find(|r| r.call_id == "c1").unwrap();
    assert_eq!(c1.status, AttemptStatus::Failed);
    assert_eq!(c1.error_kind.as_deref(), Some("cancelled"));
    // The id is free again: a later message may reuse it and runs normally.
    let again = f
        .executor
        .execute_batch(
            &s,
            Batch {
                message_id: Some("m-next".into()),
                calls: vec![call("c1", "sleep", r#"{"ms": 10}"#)],
                stopped_on_length: false,
            },
        )
        .await;
    assert!(again[0].output.success, "{:?}", again[0].output);
}

#[tokio::test]
async fn a_cancelled_batch_settles_every_call_and_starts_none_that_had_not_started() {
    let f = fixture().await;
    let s = session(&f, "s-cancel-batch", ApprovalMode::AutoRun);
    let cancel = tokio_util::sync::CancellationToken::new();
    let canceller = {
        let cancel = cancel.clone();
        let mut events = s.subscribe();
        tokio::spawn(async move {
            while let Ok(event) = events.recv().await {
                if matches!(event, Event::Started { .. }) {
                    cancel.cancel();
                    return;
                }
            }
        })
    };
    let started = std::time::Instant::now();
    let batch = Batch {
        message_id: Some("m-cancel-batch".into()),
        calls: vec![call("b1", "sleep", r#"{"ms": 10000}"#), call("b2", "sleep", r#"{"ms": 10000}"#)],
        stopped_on_length: false,
    };
    let results = f.executor.execute_batch_until(&s, batch, &cancel).await;
    canceller.await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "nothing ran its 10 s");
    assert_eq!(results.len(), 2);
    for result in &results {
        assert_eq!(result.output.error.as_ref().unwrap().kind, ErrorKind::Cancelled, "{:?}", result.output);
    }
    assert!(!s.is_cancelled(), "the session goes on");
    // A batch given an already-cancelled token runs nothing, and says so in the journal.
    let batch = Batch {
        message_id: Some("m-cancel-early".into()),
        calls: vec![call("e1", "sleep", r#"{"ms": 10000}"#)],
        stopped_on_length: false,
    };
    let results = f.executor.execute_batch_until(&s, batch, &cancel).await;
    assert!(results[0].output.content.contains("cancelled before this call ran"), "{:?}", results[0].output);
    let rows = f.journal.query("tenant-a", &journal::AttemptFilter::default()).await.unwrap();
    assert_eq!(rows.iter().find(|r| r.call_id == "e1").unwrap().status, AttemptStatus::Failed);
}

/// Records, for each call, the journal's status of its row when its before hooks run (after the
/// approval, before the runtime).
struct Peek {
    journal: Arc<dyn Journal>,
    seen: std::sync::Mutex<Vec<(String, Option<AttemptStatus>)>>,
}

#[async_trait]
impl BeforeHook for Peek {
    async fn before(&self, call: &HookCall<'_>) -> BeforeOutcome {
        let rows = self.journal.query("tenant-a", &AttemptFilter::default()).await.unwrap();
        let status = rows.iter().find(|r| r.call_id == call.call_id).map(|r| r.status);
        self.seen.lock().unwrap().push((call.call_id.to_owned(), status));
        BeforeOutcome::Continue
    }
}

#[tokio::test]
async fn a_read_is_journalled_once_when_it_ends_and_what_changes_things_is_proposed_first() {
    let f = fixture().await;
    let peek = Arc::new(Peek { journal: f.journal.clone(), seen: std::sync::Mutex::default() });
    let s = session(&f, "s-once", ApprovalMode::AutoRun);
    s.add_before_hook(peek.clone());
    let batch = Batch {
        message_id: None,
        calls: vec![call("r1", "echo", r#"{"text": "hi"}"#), call("w1", "write", r#"{"path": "x"}"#)],
        stopped_on_length: false,
    };
    let results = f.executor.execute_batch(&s, batch).await;
    assert!(results.iter().all(|r| r.status == AttemptStatus::Executed), "{results:?}");
    let seen = peek.seen.lock().unwrap().clone();
    assert!(seen.contains(&("r1".into(), None)), "a read has no row while it runs: {seen:?}");
    assert!(
        seen.contains(&("w1".into(), Some(AttemptStatus::Proposed))),
        "a write is proposed first: {seen:?}"
    );
    let settled = rows(&f, "s-once").await;
    assert_eq!(settled.len(), 2, "one row each: {settled:?}");
    assert!(settled.iter().all(|r| r.status == AttemptStatus::Executed));

    // A read that waits for a person is proposed before it waits, and its approval points at it.
    let m = session(&f, "s-once-ask", ApprovalMode::Manual);
    m.add_before_hook(peek.clone());
    let answered = answer(&f, &m, Decision::AllowOnce);
    let asked = f.executor.execute(&m, None, call("a1", "ask_echo", r#"{"text": "hi"}"#)).await;
    assert_eq!(asked.status, AttemptStatus::Executed, "{asked:?}");
    assert!(peek.seen.lock().unwrap().contains(&("a1".into(), Some(AttemptStatus::Proposed))));
    let row = rows(&f, "s-once-ask").await.into_iter().find(|r| r.call_id == "a1").unwrap();
    assert_eq!((row.status, row.decision.as_deref()), (AttemptStatus::Executed, Some("allow_once")));
    drop(answered);

    // A read under a message id of the caller's is proposed first, as any call (the id may be a
    // retry's): a retry gets the stored result, not a second run.
    let runs = f.probe.runs.load(Ordering::SeqCst);
    let mine = || Batch {
        message_id: Some("m-mine".into()),
        calls: vec![call("r2", "echo", r#"{"text": "once"}"#)],
        stopped_on_length: false,
    };
    let first = f.executor.execute_batch(&s, mine()).await;
    let again = f.executor.execute_batch(&s, mine()).await;
    assert_eq!(first[0].output.content, "once");
    assert_eq!(again[0].output.content, "once");
    assert_eq!(f.probe.runs.load(Ordering::SeqCst), runs + 1, "the retry was answered from the journal");
}
