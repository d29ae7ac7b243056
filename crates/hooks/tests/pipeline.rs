//! A person's hooks in the real pipeline, with real scripts: Claude Code's protocol (exit 2,
//! JSON decisions, updated input, context), its tool names, failures that fail closed, and the
//! journal's `decided_by`.

use std::path::Path;
use std::sync::Arc;

use hooks::{HookSet, Hooks, Origin};
use journal::{AttemptFilter, AttemptStatus, Journal};
use serde_json::{Value, json};
use tool_executor::{
    ApprovalMode, Batch, CallResult, Event, Executor, RawCall, Session, SessionConfig, SessionPolicy,
};

struct World {
    dir: tempfile::TempDir,
    executor: Executor,
    journal: Arc<dyn Journal>,
}

async fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("work")).unwrap();
    let journal = journal::open(&format!("sqlite://{}/journal.db", dir.path().display())).await.unwrap();
    // The builtin tools as a front end has them (tiers, audits and preparations included).
    let toolbox = client_executor::device::builtin_toolbox().expect("the builtin tools");
    let executor = Executor::builder(Arc::new(toolbox)).journal(journal.clone()).build();
    World { dir, executor, journal }
}

impl World {
    fn work(&self) -> std::path::PathBuf {
        self.dir.path().join("work")
    }

    /// A script in the test's folder.
    fn script(&self, name: &str, body: &str) -> String {
        let path = self.dir.path().join(name);
        std::fs::write(&path, body).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        path.display().to_string()
    }

    fn session(&self, id: &str, mode: ApprovalMode, hooks: Option<Value>) -> Arc<Session> {
        let session = self.executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "t".into(),
            working_directory: Some(self.work()),
            policy: SessionPolicy { mode, ..SessionPolicy::default() },
            ..SessionConfig::default()
        });
        if let Some(hooks) = hooks {
            let mut set = HookSet::default();
            set.add_value(&hooks, Path::new("hooks.json"), Origin::Person).unwrap();
            assert!(set.warnings.is_empty(), "{:?}", set.warnings);
            session.set_call_hooks(Some(Arc::new(Hooks::new(set))));
        }
        session
    }

    async fn call(&self, session: &Arc<Session>, id: &str, name: &str, arguments: Value) -> CallResult {
        let batch = Batch {
            message_id: None,
            calls: vec![RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }],
            stopped_on_length: false,
        };
        self.executor.execute_batch(session, batch).await.pop().unwrap()
    }

    async fn row(&self, session: &str, call_id: &str) -> journal::Attempt {
        let filter = AttemptFilter { session_id: Some(session.into()), ..AttemptFilter::default() };
        let rows = self.journal.query("t", &filter).await.unwrap();
        rows.into_iter().find(|row| row.call_id == call_id).expect("a journal row")
    }
}

fn one(event: &str, matcher: &str, command: &str) -> Value {
    json!({"hooks": {event: [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}})
}

/// After the bash command validator of Claude Code's hooks reference: exit 2 with the issues on
/// standard error.
const VALIDATOR: &str = r#"#!/usr/bin/env python3
import json, re, sys
data = json.load(sys.stdin)
if data.get("tool_name") != "Bash":
    sys.exit(0)
command = data.get("tool_input", {}).get("command", "")
rules = [
    (r"\bgrep\b(?!.*\|)", "Use 'rg' (ripgrep) instead of 'grep' for better performance"),
    (r"\bfind\s+\S+\s+-name\b", "Use 'rg --files -g pattern' instead of 'find -name'"),
]
issues = [message for pattern, message in rules if re.search(pattern, command)]
if issues:
    for message in issues:
        print("- " + message, file=sys.stderr)
    sys.exit(2)
"#;

#[tokio::test]
async fn exit_2_blocks_with_standard_error_as_the_reason_and_the_journal_names_the_hook() {
    let w = world().await;
    let validator = w.script("validator.py", VALIDATOR);
    let session = w.session("s1", ApprovalMode::AutoRun, Some(one("PreToolUse", "Bash", &validator)));

    let blocked = w.call(&session, "c1", "runCommand", json!({"command": "grep -r needle ."})).await;
    assert_eq!(blocked.status, AttemptStatus::Blocked, "{:?}", blocked.output);
    assert!(blocked.output.content.contains("Use 'rg' (ripgrep)"), "{}", blocked.output.content);
    let row = w.row("s1", "c1").await;
    assert_eq!(row.status, AttemptStatus::Blocked);
    assert_eq!(row.decided_by.as_deref(), Some("hook:validator.py"));
    assert_eq!(row.decision.as_deref(), Some("hook_deny"));

    // What the validator lets through runs; other tools are not its business.
    let ran = w.call(&session, "c2", "runCommand", json!({"command": "echo fine"})).await;
    assert_eq!(ran.status, AttemptStatus::Executed, "{:?}", ran.output);
    std::fs::write(w.work().join("a.txt"), "grep me").unwrap();
    let read = w.call(&session, "c3", "readFile", json!({"path": "a.txt"})).await;
    assert_eq!(read.status, AttemptStatus::Executed);
}

#[tokio::test]
async fn a_hook_sees_claude_codes_names_and_fields() {
    let w = world().await;
    let seen = w.dir.path().join("seen.json");
    let hook = w.script(
        "record.sh",
        &format!(
            "#!/bin/sh\ncat > {}\necho \"$CLAUDE_PROJECT_DIR\" > {}.dir\n",
            seen.display(),
            seen.display()
        ),
    );
    let session = w.session("s2", ApprovalMode::AutoRun, Some(one("PreToolUse", "Edit|Write", &hook)));
    let result = w.call(&session, "c1", "writeFile", json!({"path": "notes.md", "content": "hello"})).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    let input: Value = serde_json::from_slice(&std::fs::read(&seen).unwrap()).unwrap();
    assert_eq!(input["hook_event_name"], "PreToolUse");
    assert_eq!(input["tool_name"], "Write");
    // The path absolute, as Claude Code sends it.
    let absolute = w.work().join("notes.md").display().to_string();
    assert_eq!(input["tool_input"], json!({"file_path": absolute, "content": "hello"}));
    assert_eq!(input["tool_use_id"], "c1");
    assert_eq!(input["session_id"], "s2");
    assert_eq!(input["cwd"], w.work().display().to_string());
    assert_eq!(input["permission_mode"], "acceptEdits");
    assert_eq!(input["toolhost"]["api"], "writeFile");
    let dir = std::fs::read_to_string(format!("{}.dir", seen.display())).unwrap();
    assert_eq!(dir.trim(), w.work().display().to_string());
}

const ALLOW: &str = r#"#!/bin/sh
cat > /dev/null
printf '%s' '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "allow", "permissionDecisionReason": "notes are fine"}}'
"#;

#[tokio::test]
async fn allow_answers_for_the_person_but_policys_blocks_stand() {
    let w = world().await;
    let allow = w.script("allow-notes.sh", ALLOW);
    // Headless: a command that writes would be blocked for want of a person; the hook answers
    // for them.
    let session = w.session("s3", ApprovalMode::Headless, Some(one("PreToolUse", "Bash", &allow)));
    let write = json!({"command": "printf x > notes.md"});
    let result = w.call(&session, "c1", "runCommand", write.clone()).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    let row = w.row("s3", "c1").await;
    assert_eq!(row.decided_by.as_deref(), Some("hook:allow-notes.sh"));
    assert_eq!(row.decision.as_deref(), Some("hook_allow"));
    assert_eq!(std::fs::read_to_string(w.work().join("notes.md")).unwrap(), "x");

    // Without the hook the same call is blocked.
    let bare = w.session("s3b", ApprovalMode::Headless, None);
    let result = w.call(&bare, "c1", "runCommand", json!({"command": "printf x > other.md"})).await;
    assert_eq!(result.status, AttemptStatus::Blocked);

    // Read-only mode is policy's, not a person's: the hook cannot lift it.
    let read_only = w.session("s3c", ApprovalMode::ReadOnly, Some(one("PreToolUse", "Bash", &allow)));
    let result = w.call(&read_only, "c1", "runCommand", json!({"command": "printf x > third.md"})).await;
    assert_eq!(result.status, AttemptStatus::Blocked, "{:?}", result.output);
    assert!(!w.work().join("third.md").exists());
}

#[tokio::test]
async fn ask_makes_a_person_look_at_what_policy_would_run() {
    let w = world().await;
    let ask = w.script(
        "ask.sh",
        "#!/bin/sh\nprintf '%s' '{\"hookSpecificOutput\": {\"permissionDecision\": \"ask\", \"permissionDecisionReason\": \"secrets live here\"}}'\n",
    );
    std::fs::write(w.work().join("a.txt"), "x").unwrap();
    // Headless: nobody can be asked, so it does not run.
    let session = w.session("s4", ApprovalMode::Headless, Some(one("PreToolUse", "Read", &ask)));
    let result = w.call(&session, "c1", "readFile", json!({"path": "a.txt"})).await;
    assert_eq!(result.status, AttemptStatus::Blocked, "{:?}", result.output);
    assert_eq!(result.output.state.as_ref().unwrap()["reason"], "a hook asks: secrets live here");

    // With a person: they are asked.
    let manual = w.session("s4b", ApprovalMode::Manual, Some(one("PreToolUse", "Read", &ask)));
    let mut events = manual.subscribe();
    let broker = w.executor.local_broker().unwrap().clone();
    let answer = tokio::spawn(async move {
        loop {
            if let Ok(Event::PermissionRequested { approval_id, reason, .. }) = events.recv().await {
                assert!(reason.contains("secrets live here"));
                broker
                    .decide(
                        "t",
                        &approval_id,
                        tool_executor::Decided {
                            decision: tool_executor::Decision::AllowOnce,
                            by: Some("me".into()),
                        },
                    )
                    .unwrap();
                return;
            }
        }
    });
    let result = w.call(&manual, "c1", "readFile", json!({"path": "a.txt"})).await;
    answer.await.unwrap();
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    assert_eq!(w.row("s4b", "c1").await.decided_by.as_deref(), Some("me"));
}

#[tokio::test]
async fn updated_input_is_what_runs_and_the_journal_keeps_both() {
    let w = world().await;
    let rewrite = w.script(
        "rewrite.py",
        r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
command = data["tool_input"]["command"]
print(json.dumps({"hookSpecificOutput": {"hookEventName": "PreToolUse",
    "updatedInput": dict(data["tool_input"], command=command.replace("original", "rewritten")),
    "additionalContext": "commands are rewritten by policy"}}))
"#,
    );
    let session = w.session("s5", ApprovalMode::AutoRun, Some(one("PreToolUse", "Bash", &rewrite)));
    let result = w.call(&session, "c1", "runCommand", json!({"command": "echo original"})).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    assert!(result.output.content.contains("rewritten"), "{}", result.output.content);
    assert!(!result.output.content.contains("original"), "{}", result.output.content);
    assert!(
        result.output.content.contains("<hook-context>\ncommands are rewritten by policy\n</hook-context>")
    );
    let row = w.row("s5", "c1").await;
    assert_eq!(row.arguments["command"], "echo original", "the journal keeps what the model asked");
    let hooks = &row.result.unwrap()["state"]["hooks"];
    assert!(hooks.to_string().contains("echo rewritten"), "{hooks}");

    // A rewrite into something the tool cannot take does not run.
    let bad = w.script(
        "bad.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"updatedInput\": {\"cmd\": \"ls\"}}}'\n",
    );
    let session = w.session("s5b", ApprovalMode::AutoRun, Some(one("PreToolUse", "Bash", &bad)));
    let result = w.call(&session, "c1", "runCommand", json!({"command": "echo x"})).await;
    assert_eq!(result.status, AttemptStatus::Failed);
    assert!(result.output.content.contains("invalid shape"), "{}", result.output.content);
}

#[tokio::test]
async fn failures_are_reported_and_block_only_where_the_hook_says_so() {
    let w = world().await;
    for (name, hook, status) in [
        // `[ … ] && exit 2` as a script's last line leaves 1 when nothing matched: the call goes on.
        ("crash", json!({"type": "command", "command": "exit 1"}), AttemptStatus::Executed),
        ("slow", json!({"type": "command", "command": "sleep 20", "timeout": 1}), AttemptStatus::Executed),
        (
            "strict",
            json!({"type": "command", "command": "exit 1", "onFailure": "block"}),
            AttemptStatus::Blocked,
        ),
        (
            "strict-slow",
            json!({"type": "command", "command": "sleep 20", "timeout": 1, "onFailure": "block"}),
            AttemptStatus::Blocked,
        ),
    ] {
        let config = json!({"PreToolUse": [{"matcher": "runCommand", "hooks": [hook]}]});
        let session = w.session(name, ApprovalMode::AutoRun, Some(config));
        let mut events = session.subscribe();
        let started = std::time::Instant::now();
        let result = w.call(&session, "c1", "runCommand", json!({"command": "echo ran"})).await;
        assert_eq!(result.status, status, "{name}: {:?}", result.output);
        assert!(started.elapsed() < std::time::Duration::from_secs(10), "{name}");
        let mut noted = false;
        while let Ok(event) = events.try_recv() {
            noted |= matches!(event, Event::HookNote { ref message, .. } if message.starts_with("failed"));
        }
        assert!(noted, "{name}: the failure was not reported");
    }
    // Text that is not JSON is text, as in Claude Code: no decision, no failure.
    let config = json!({"PreToolUse": [{"matcher": "runCommand", "hooks": [{"type": "command", "command": "echo '{not json'"}]}]});
    let session = w.session("garbled", ApprovalMode::AutoRun, Some(config));
    let result = w.call(&session, "c1", "runCommand", json!({"command": "echo ran"})).await;
    assert_eq!(result.status, AttemptStatus::Executed);
}

#[tokio::test]
async fn a_hooks_allow_never_covers_what_always_needs_a_person() {
    let w = world().await;
    let allow = w.script("allow-all.sh", ALLOW);
    // A file that configures hooks: the model cannot have a hook approve writing it.
    let session = w.session("s11", ApprovalMode::Headless, Some(one("PreToolUse", "*", &allow)));
    let result = w
        .call(
            &session,
            "c1",
            "writeFile",
            json!({"path": ".claude/settings.json", "content": "{\"hooks\": {}}"}),
        )
        .await;
    assert_eq!(result.status, AttemptStatus::Blocked, "{:?}", result.output);
    assert!(!w.work().join(".claude/settings.json").exists());
    // The same write elsewhere is the hook's to allow.
    let result = w.call(&session, "c2", "runCommand", json!({"command": "printf x > fine.txt"})).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
}

#[tokio::test]
async fn one_hooks_rewrite_does_not_ride_on_another_hooks_allow() {
    let w = world().await;
    let allow = w.script("allow.sh", ALLOW);
    let rewrite = w.script(
        "rewrite.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"updatedInput\": {\"command\": \"printf rewritten > r.txt\"}}}'\n",
    );
    let config = json!({"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": allow}, {"type": "command", "command": rewrite}
    ]}]});
    // Headless: without the allow the rewritten command would need a person, so it is blocked.
    let session = w.session("s12", ApprovalMode::Headless, Some(config));
    let result = w.call(&session, "c1", "runCommand", json!({"command": "printf original > r.txt"})).await;
    assert_eq!(result.status, AttemptStatus::Blocked, "{:?}", result.output);
    assert!(!w.work().join("r.txt").exists());
}

#[tokio::test]
async fn permission_request_hooks_answer_where_a_person_would_be_asked() {
    let w = world().await;
    let allow = w.script(
        "approve.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"PermissionRequest\", \"decision\": {\"behavior\": \"allow\"}}}'\n",
    );
    let deny = w.script(
        "refuse.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"decision\": {\"behavior\": \"deny\", \"message\": \"not on Fridays\"}}}'\n",
    );
    let session = w.session("s7", ApprovalMode::Manual, Some(one("PermissionRequest", "Bash", &allow)));
    let mut events = session.subscribe();
    let result = w.call(&session, "c1", "runCommand", json!({"command": "printf x > n.md"})).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    assert_eq!(w.row("s7", "c1").await.decided_by.as_deref(), Some("hook:approve.sh"));
    assert_eq!(std::fs::read_to_string(w.work().join("n.md")).unwrap(), "x");
    while let Ok(event) = events.try_recv() {
        assert!(!matches!(event, Event::PermissionRequested { .. }), "a person was asked");
    }

    let session = w.session("s7b", ApprovalMode::Manual, Some(one("PermissionRequest", "Bash", &deny)));
    let result = w.call(&session, "c1", "runCommand", json!({"command": "printf x > m.md"})).await;
    assert_eq!(result.status, AttemptStatus::Denied, "{:?}", result.output);
    assert!(result.output.content.contains("not on Fridays"));
    let row = w.row("s7b", "c1").await;
    assert_eq!(row.decided_by.as_deref(), Some("hook:refuse.sh"));
    assert!(!w.work().join("m.md").exists());
}

#[tokio::test]
async fn post_tool_use_context_and_exit_2_reach_the_model() {
    let w = world().await;
    let remind = w.script(
        "remind.sh",
        "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"PostToolUse\", \"additionalContext\": \"Run the formatter next.\"}}'\n",
    );
    let lint = w.script("lint.sh", "#!/bin/sh\necho 'line 1: trailing space' >&2\nexit 2\n");
    let config = json!({"hooks": {"PostToolUse": [
        {"matcher": "Write", "hooks": [{"type": "command", "command": remind}]},
        {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": lint}]}
    ]}});
    let session = w.session("s8", ApprovalMode::AutoRun, Some(config));
    let result = w.call(&session, "c1", "writeFile", json!({"path": "w.md", "content": "x "})).await;
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    assert!(result.output.content.contains("Run the formatter next."), "{}", result.output.content);
    assert!(result.output.content.contains("line 1: trailing space"), "{}", result.output.content);
    // The file was written: PostToolUse comes after.
    assert_eq!(std::fs::read_to_string(w.work().join("w.md")).unwrap(), "x ");
}

#[tokio::test]
async fn deny_wins_over_allow_and_the_same_command_runs_once() {
    let w = world().await;
    let counter = w.dir.path().join("count");
    let count = w.script("count.sh", &format!("#!/bin/sh\necho x >> {}\n", counter.display()));
    let allow = w.script("allow.sh", ALLOW);
    let deny = w.script("deny.sh", "#!/bin/sh\necho 'no writes today' >&2\nexit 2\n");
    let config = json!({"PreToolUse": [
        {"matcher": "Write", "hooks": [{"type": "command", "command": allow}, {"type": "command", "command": count}]},
        {"matcher": "*", "hooks": [{"type": "command", "command": deny}, {"type": "command", "command": count}]}
    ]});
    let session = w.session("s9", ApprovalMode::AutoRun, Some(config));
    let result = w.call(&session, "c1", "writeFile", json!({"path": "d.md", "content": "x"})).await;
    assert_eq!(result.status, AttemptStatus::Blocked, "{:?}", result.output);
    assert!(result.output.content.contains("no writes today"));
    assert_eq!(w.row("s9", "c1").await.decided_by.as_deref(), Some("hook:deny.sh"));
    assert_eq!(std::fs::read_to_string(&counter).unwrap().lines().count(), 1);
}

#[tokio::test]
async fn turn_hooks_block_prompts_add_context_and_keep_the_agent_going() {
    let w = world().await;
    let place = hooks::Place { session_id: "s10".into(), cwd: Some(w.work()), mode: ApprovalMode::Manual };
    let guard = w.script(
        "prompt-guard.py",
        r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if "password" in data["prompt"]:
    print(json.dumps({"decision": "block", "reason": "Prompts must not carry passwords."}))
else:
    print("The build command is `make check`.")
"#,
    );
    let start = w.script("start.sh", "#!/bin/sh\necho '{\"hookSpecificOutput\": {\"hookEventName\": \"SessionStart\", \"additionalContext\": \"Open issues: 3\"}}'\n");
    let stop = w.script(
        "stop.py",
        r#"#!/usr/bin/env python3
import json, sys
data = json.load(sys.stdin)
if not data["stop_hook_active"] and "tests pass" not in data["last_assistant_message"]:
    print(json.dumps({"decision": "block", "reason": "Run the tests before you finish."}))
"#,
    );
    let config = json!({"hooks": {
        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": guard}]}],
        "SessionStart": [{"matcher": "startup", "hooks": [{"type": "command", "command": start}]}],
        "Stop": [{"hooks": [{"type": "command", "command": stop}]}]
    }});
    let mut set = HookSet::default();
    set.add_value(&config, Path::new("hooks.json"), Origin::Person).unwrap();
    let hooks = Hooks::new(set);

    let blocked = hooks.user_prompt_submit(&place, "my password is hunter2").await;
    assert_eq!(
        blocked.block,
        Some(("hook:prompt-guard.py".into(), "Prompts must not carry passwords.".into()))
    );
    let fine = hooks.user_prompt_submit(&place, "build it").await;
    assert_eq!(fine.block, None);
    assert_eq!(fine.context, ["The build command is `make check`."]);

    let started = hooks.session_start(&place, "startup").await;
    assert_eq!(started.context, ["Open issues: 3"]);
    assert!(hooks.session_start(&place, "resume").await.context.is_empty(), "the matcher is on the source");

    let stop_early = hooks.stop(&place, false, "Done.").await;
    assert_eq!(
        stop_early.block.map(|(_, reason)| reason).as_deref(),
        Some("Run the tests before you finish.")
    );
    assert_eq!(hooks.stop(&place, true, "Done.").await.block, None, "stop_hook_active lets it stop");
    assert_eq!(hooks.stop(&place, false, "Done, tests pass.").await.block, None);
}

#[test]
fn a_folders_own_hooks_run_only_when_it_is_trusted() {
    let config = tempfile::tempdir().unwrap();
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(config.path().join("hooks.json"), one("Stop", "", "echo mine").to_string()).unwrap();
    std::fs::create_dir(folder.path().join(".claude")).unwrap();
    std::fs::write(
        folder.path().join(".claude/settings.json"),
        json!({"permissions": {}, "hooks": {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo theirs"}]}]}}).to_string(),
    )
    .unwrap();
    std::fs::create_dir(folder.path().join(".toolhost")).unwrap();
    std::fs::write(
        folder.path().join(".toolhost/hooks.json"),
        one("PostToolUse", "Write", "echo ours").to_string(),
    )
    .unwrap();

    let untrusted = hooks::for_folder(Some(config.path()), folder.path(), false);
    assert_eq!(untrusted.hooks.len(), 1);
    assert_eq!(untrusted.hooks[0].origin, Origin::Person);
    assert!(untrusted.warnings.iter().any(|w| w.contains("not trusted")), "{:?}", untrusted.warnings);

    let trusted = hooks::for_folder(Some(config.path()), folder.path(), true);
    let commands: Vec<_> = trusted.hooks.iter().map(|h| (h.event.as_str(), h.origin.clone())).collect();
    assert_eq!(
        commands,
        [("Stop", Origin::Person), ("PostToolUse", Origin::Project), ("PreToolUse", Origin::Project)]
    );
    assert!(trusted.warnings.is_empty(), "{:?}", trusted.warnings);
}

/// A `PermissionRequest` hook that lets the person decide is told which approval the person will
/// decide, whose tenant it is and where it is decided, so that a script can post its own link.
#[tokio::test]
async fn permission_request_hooks_get_the_approval_they_stand_before() {
    let w = world().await;
    let seen = w.dir.path().join("payload.json");
    let tell = w.script("tell.sh", &format!("#!/bin/sh\ncat > {}\n", seen.display()));
    let session = w.executor.open_session(SessionConfig {
        id: "s9".into(),
        tenant: "t".into(),
        working_directory: Some(w.work()),
        policy: SessionPolicy { mode: ApprovalMode::Manual, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    let mut set = HookSet::default();
    set.add_value(&one("PermissionRequest", "Bash", &tell), Path::new("hooks.json"), Origin::Operator)
        .unwrap();
    let hooks = Hooks::new(set).with_approval_url("https://toolhost.example/console/approvals/{id}");
    session.set_call_hooks(Some(Arc::new(hooks)));
    let mut events = session.subscribe();
    let call = {
        let (executor, session) = (w.executor.clone(), session.clone());
        tokio::spawn(async move {
            let batch = Batch {
                message_id: None,
                calls: vec![RawCall {
                    id: "c1".into(),
                    name: "runCommand".into(),
                    arguments: json!({"command": "printf x > p.md"}).to_string(),
                }],
                stopped_on_length: false,
            };
            executor.execute_batch(&session, batch).await.pop().unwrap()
        })
    };
    let approval = loop {
        if let Event::PermissionRequested { approval_id, .. } =
            tokio::time::timeout(std::time::Duration::from_secs(20), events.recv()).await.unwrap().unwrap()
        {
            break approval_id;
        }
    };
    let payload: Value = serde_json::from_str(&std::fs::read_to_string(&seen).unwrap()).unwrap();
    assert_eq!(payload["hook_event_name"], "PermissionRequest", "{payload}");
    assert_eq!(payload["approval_id"], approval.as_str(), "{payload}");
    assert_eq!(payload["tenant"], "t");
    assert_eq!(payload["session_id"], "s9");
    assert_eq!(payload["approval_url"], format!("https://toolhost.example/console/approvals/{approval}"));
    let decided =
        tool_executor::Decided { decision: tool_executor::Decision::Deny, by: Some("t/person/ann".into()) };
    w.executor.local_broker().unwrap().decide("t", &approval, decided).unwrap();
    assert_eq!(call.await.unwrap().status, AttemptStatus::Denied);
}
