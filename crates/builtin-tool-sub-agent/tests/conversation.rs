//! Sub-agents against a scripted model on loopback (the OpenAI streaming wire format), with the
//! real pipeline, builtin tools and SQLite journal in a temp folder: parallel sub-agents, a call
//! a person denies inside one, cancellation, limits, and the tools a sub-agent is given.

use std::sync::Arc;
use std::time::Duration;

use agent::{AgentConfig, OpenAiClient};
use builtin_tool_sub_agent::{SubAgentLimits, SubAgentModel, SubAgentModels};
use journal::{AttemptFilter, AttemptStatus, Journal};
use serde_json::{Value, json};
use test_support::model::{ScriptedModel, openai_reply};
use tool_executor::{
    ApprovalMode, Batch, CallResult, Decided, Decision, Executor, RawCall, Session, SessionConfig,
    SessionPolicy,
};

struct World {
    _dir: tempfile::TempDir,
    folder: std::path::PathBuf,
    executor: Executor,
    journal: Arc<dyn Journal>,
    session: Arc<Session>,
}

async fn world(server: &ScriptedModel, mode: ApprovalMode, limits: SubAgentLimits) -> World {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("work");
    std::fs::create_dir(&folder).unwrap();
    let folder = folder.canonicalize().unwrap();
    let journal = journal::open(&format!("sqlite://{}/journal.db", dir.path().display())).await.unwrap();
    let client =
        Arc::new(OpenAiClient::new(reqwest::Client::new(), server.base_url(), None, "scripted-small"));
    let models = SubAgentModels::new()
        .with_model(SubAgentModel { name: "small".into(), client, config: AgentConfig::default() })
        .with_limits(limits);
    let services = tool_core::Services::new().with(Arc::new(models));
    let toolbox = client_executor::device::builtin_toolbox_with(services).expect("the builtin tools");
    assert!(toolbox.tool("sub-agent").is_some(), "with a model, the tool is there");
    let executor = Executor::builder(Arc::new(toolbox)).journal(journal.clone()).build();
    let session = executor.open_session(SessionConfig {
        id: "s1".into(),
        tenant: "t".into(),
        working_directory: Some(folder.clone()),
        policy: SessionPolicy { mode, ..SessionPolicy::default() },
        ..SessionConfig::default()
    });
    World { _dir: dir, folder, executor, journal, session }
}

fn call(id: &str, name: &str, arguments: Value) -> RawCall {
    RawCall { id: id.into(), name: name.into(), arguments: arguments.to_string() }
}

impl World {
    async fn batch(&self, calls: Vec<RawCall>) -> Vec<CallResult> {
        let batch = Batch { message_id: Some("m1".into()), calls, stopped_on_length: false };
        self.executor.execute_batch(&self.session, batch).await
    }

    async fn rows(&self) -> Vec<journal::Attempt> {
        self.journal.query("t", &AttemptFilter::default()).await.unwrap()
    }
}

fn command(command: &str) -> String {
    json!({ "command": command }).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_sub_agents_run_in_parallel_through_the_pipeline_and_return_their_answers() {
    // Each sub-agent's command waits until both have started: only sub-agents that run at the
    // same time both see two marks.
    let rendezvous = "mkdir -p marks && touch marks/$$ && for i in $(seq 100); do \
                      [ $(ls marks | wc -l) -ge 2 ] && echo both-running && exit 0; sleep 0.05; done; echo alone";
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("c1", "runCommand", &command(rendezvous))], "tool_calls"),
        openai_reply("", "", &[("c1", "runCommand", &command(rendezvous))], "tool_calls"),
        openai_reply("", "Both ran; the folder has two marks.", &[], "stop"),
        openai_reply("", "Both ran; the folder has two marks.", &[], "stop"),
    ])
    .await;
    let world = world(&server, ApprovalMode::AutoRun, SubAgentLimits::default()).await;
    let task =
        |what: &str| json!({ "task": format!("Run the rendezvous ({what})."), "tools": ["local-system"] });
    let results =
        world.batch(vec![call("a", "callSubAgent", task("a")), call("b", "callSubAgent", task("b"))]).await;
    for result in &results {
        assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
        assert!(
            result.output.content.starts_with("Both ran; the folder has two marks."),
            "{}",
            result.output.content
        );
        assert!(
            result.output.content.contains("[sub-agent (small): 1 calls — runCommand;"),
            "{}",
            result.output.content
        );
        let state = result.output.state.as_ref().unwrap();
        assert_eq!(state["calls"][0]["status"], "executed", "{state}");
        assert_eq!(state["outcome"], "answered");
    }
    assert_eq!(std::fs::read_dir(world.folder.join("marks")).unwrap().count(), 2);

    // The nested calls are journalled, each linked to its sub-agent's call, and both saw the
    // other running.
    let rows = world.rows().await;
    let nested: Vec<&journal::Attempt> = rows.iter().filter(|r| r.parent_call_id.is_some()).collect();
    assert_eq!(nested.len(), 2, "{rows:?}");
    for row in &nested {
        assert!(["a", "b"].contains(&row.parent_call_id.as_deref().unwrap()), "{row:?}");
        assert_eq!(row.status, AttemptStatus::Executed);
        assert!(row.result.as_ref().unwrap().to_string().contains("both-running"), "{row:?}");
    }

    // What the sub-agents' model was sent: its own prompt and task, the tools it was given, and
    // never callSubAgent.
    let received = server.received();
    let first = &received[0].body;
    assert!(first["messages"][0]["content"].as_str().unwrap().contains("You are a sub-agent"), "{first}");
    assert!(first["messages"][1]["content"].as_str().unwrap().starts_with("Run the rendezvous"), "{first}");
    let names: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"runCommand") && names.contains(&"readFile"), "{names:?}");
    assert!(!names.contains(&"callSubAgent") && !names.contains(&"calculate"), "{names:?}");
}

/// The summary says how calls ended: a command that ran and exited 1 "failed"; it was executed, not
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_summary_counts_a_command_that_exited_1_as_failed_not_unexecuted() {
    let server = ScriptedModel::start(vec![
        openai_reply(
            "",
            "",
            &[("c1", "runCommand", &command("exit 1")), ("c2", "runCommand", &command("true"))],
            "tool_calls",
        ),
        openai_reply("", "One check failed.", &[], "stop"),
    ])
    .await;
    let world = world(&server, ApprovalMode::AutoRun, SubAgentLimits::default()).await;
    let batch = Batch {
        message_id: Some("m1".into()),
        calls: vec![call("s", "callSubAgent", json!({"task": "Run the two checks."}))],
        stopped_on_length: false,
    };
    let results =
        tokio::time::timeout(Duration::from_secs(30), world.executor.execute_batch(&world.session, batch))
            .await
            .unwrap();
    let content = &results[0].output.content;
    assert!(content.contains("2 calls — runCommand ×2 (1 failed);"), "{content}");
    assert!(!content.contains("not executed"), "{content}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_inside_a_sub_agent_asks_the_person_and_their_denial_reaches_it() {
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("w1", "runCommand", &command("touch made-by-sub-agent"))], "tool_calls"),
        openai_reply("", "The person did not let me create the file.", &[], "stop"),
    ])
    .await;
    let world = world(&server, ApprovalMode::Manual, SubAgentLimits::default()).await;
    let broker = world.executor.local_broker().unwrap().clone();
    let waiting = {
        let executor = world.executor.clone();
        let session = world.session.clone();
        tokio::spawn(async move {
            let batch = Batch {
                message_id: Some("m1".into()),
                calls: vec![call("s", "callSubAgent", json!({"task": "Create made-by-sub-agent."}))],
                stopped_on_length: false,
            };
            executor.execute_batch(&session, batch).await
        })
    };
    let pending = loop {
        if let Some(pending) = broker.pending("t", None).pop() {
            break pending;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!((pending.api.as_str(), pending.call_id.as_str()), ("runCommand", "s/1"), "{pending:?}");
    broker
        .decide(
            "t",
            &pending.id,
            Decided {
                decision: Decision::DenyWithMessage { message: "not in this folder".into() },
                by: Some("ann".into()),
            },
        )
        .unwrap();
    let results = tokio::time::timeout(Duration::from_secs(20), waiting).await.unwrap().unwrap();
    let result = &results[0];
    assert_eq!(result.status, AttemptStatus::Executed, "{:?}", result.output);
    assert!(result.output.content.contains("runCommand (1 denied)"), "{}", result.output.content);
    assert!(!world.folder.join("made-by-sub-agent").exists());
    let told = &server.received()[1].body["messages"];
    let denial = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == "w1").unwrap();
    assert!(denial["content"].as_str().unwrap().contains("not in this folder"), "{denial}");
    let rows = world.rows().await;
    let row = rows.iter().find(|r| r.call_id == "s/1").unwrap();
    assert_eq!((row.status, row.decided_by.as_deref()), (AttemptStatus::Denied, Some("ann")));
    assert_eq!(row.parent_call_id.as_deref(), Some("s"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelling_the_parent_cancels_the_sub_agent_and_its_running_call() {
    let server = ScriptedModel::start(vec![openai_reply(
        "",
        "",
        &[("long", "runCommand", &command("sleep 30; touch too-late"))],
        "tool_calls",
    )])
    .await;
    let world = world(&server, ApprovalMode::AutoRun, SubAgentLimits::default()).await;
    let cancel = tokio_util::sync::CancellationToken::new();
    let running = {
        let executor = world.executor.clone();
        let session = world.session.clone();
        let cancel = cancel.clone();
        tokio::spawn(async move {
            let batch = Batch {
                message_id: Some("m1".into()),
                calls: vec![call("s", "callSubAgent", json!({"task": "Wait a long time."}))],
                stopped_on_length: false,
            };
            executor.execute_batch_until(&session, batch, &cancel).await
        })
    };
    // Once the nested command runs, the parent is cancelled.
    loop {
        let rows = world.rows().await;
        if rows.iter().any(|r| r.call_id == "s/1") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    cancel.cancel();
    let results =
        tokio::time::timeout(Duration::from_secs(10), running).await.expect("the cancel is prompt").unwrap();
    assert_eq!(
        results[0].output.error.as_ref().unwrap().kind,
        tool_core::ErrorKind::Cancelled,
        "{:?}",
        results[0].output
    );
    let rows = world.rows().await;
    let nested = rows.iter().find(|r| r.call_id == "s/1").unwrap();
    assert_eq!(nested.status, AttemptStatus::Failed, "{nested:?}");
    assert_eq!(nested.error_kind.as_deref(), Some("cancelled"), "{nested:?}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!world.folder.join("too-late").exists(), "the command was killed with it");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_stop_a_sub_agent_and_tools_are_checked() {
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("r1", "globFiles", &json!({"pattern": "*"}).to_string())], "tool_calls"),
        openai_reply("", "", &[("r2", "globFiles", &json!({"pattern": "*"}).to_string())], "tool_calls"),
    ])
    .await;
    let world =
        world(&server, ApprovalMode::AutoRun, SubAgentLimits { max_turns: 2, token_budget: 1_000_000 }).await;
    let results = world.batch(vec![call("s", "callSubAgent", json!({"task": "List forever."}))]).await;
    let output = &results[0].output;
    assert_eq!(output.error.as_ref().unwrap().kind, tool_core::ErrorKind::Execution, "{output:?}");
    assert!(output.content.contains("still working after 2 replies"), "{}", output.content);
    assert!(output.content.contains("2 calls — globFiles ×2"), "{}", output.content);
    assert_eq!(server.remaining(), 0);

    // A sub-agent is never given callSubAgent, nor a function the session does not have.
    let results = world
        .batch(vec![
            call("t1", "callSubAgent", json!({"task": "x", "tools": ["callSubAgent"]})),
            call("t2", "callSubAgent", json!({"task": "x", "tools": ["readFile", "launchRockets"]})),
            call("t3", "callSubAgent", json!({"task": "  "})),
        ])
        .await;
    for result in &results {
        assert_eq!(
            result.output.error.as_ref().unwrap().kind,
            tool_core::ErrorKind::InvalidArguments,
            "{:?}",
            result.output
        );
    }
    assert!(results[0].output.content.contains("callSubAgent is not among"), "{}", results[0].output.content);
    assert!(
        results[1].output.content.contains("launchRockets is not among"),
        "{}",
        results[1].output.content
    );
    assert_eq!(server.received().len(), 2, "no model was asked for refused tasks");
}

/// A sub-agent's model that calls what it was not given — `callSubAgent` (which would nest
/// without end), or a function outside its `tools` — gets a refusal, and nothing runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sub_agent_cannot_call_what_it_was_not_given() {
    let server = ScriptedModel::start(vec![
        openai_reply(
            "",
            "",
            &[
                ("x1", "callSubAgent", &json!({"task": "go deeper"}).to_string()),
                ("x2", "runCommand", &command("touch not-given")),
            ],
            "tool_calls",
        ),
        openai_reply("", "I could only read.", &[], "stop"),
    ])
    .await;
    let world = world(&server, ApprovalMode::AutoRun, SubAgentLimits::default()).await;
    let results = world
        .batch(vec![call("s", "callSubAgent", json!({"task": "Read only.", "tools": ["readFile"]}))])
        .await;
    assert_eq!(results[0].status, AttemptStatus::Executed, "{:?}", results[0].output);
    let told = &server.received()[1].body["messages"];
    for id in ["x1", "x2"] {
        let refusal = told.as_array().unwrap().iter().find(|m| m["tool_call_id"] == id).unwrap();
        assert!(
            refusal["content"].as_str().unwrap().contains("is not one of the functions you were given"),
            "{refusal}"
        );
    }
    assert_eq!(server.received().len(), 2, "no second sub-agent asked the model");
    assert!(!world.folder.join("not-given").exists());
    let rows = world.rows().await;
    assert!(rows.iter().all(|r| r.parent_call_id.is_none()), "nothing ran under it: {rows:?}");
}
