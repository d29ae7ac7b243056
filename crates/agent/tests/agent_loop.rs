//! The loop against scripted servers on loopback that speak each provider's real streaming wire
//! format, with the real pipeline and builtin tools on a temp folder. Each test asserts what the
//! model was sent: every call got exactly one result, in order, with the right ids.

use std::sync::Arc;
use std::time::Duration;

use agent::{
    Agent, AgentConfig, AgentEvent, AnthropicClient, Delta, Message, ModelClient, OpenAiClient, Outcome,
    ProviderError, RetryPolicy,
};
use serde_json::{Value, json};
use test_support::model::{Scripted, ScriptedModel, anthropic_reply, openai_reply};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tool_executor::{ApprovalMode, Executor, Session, SessionConfig, SessionPolicy, Toolbox};

fn executor() -> Executor {
    let computer: Arc<dyn computer_runtime::ComputerRuntime> =
        Arc::new(computer_runtime::LocalComputer::default());
    let services = tool_core::Services::new().with(computer).with(Arc::new(builtin_tools::url_router()));
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in builtin_tools::Registry::builtin().available_runtimes(&services).0 {
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

fn session(executor: &Executor, folder: &std::path::Path, mode: ApprovalMode) -> Arc<Session> {
    executor.open_session(SessionConfig {
        id: format!("agent-test-{}", std::process::id()),
        tenant: "local".into(),
        working_directory: Some(folder.to_owned()),
        policy: SessionPolicy { mode, ..SessionPolicy::default() },
        active_tools: Some(vec!["local-system".into()]),
        ..SessionConfig::default()
    })
}

/// An agent in auto-run mode over `folder`, with its own pipeline.
fn auto_run(client: Arc<dyn ModelClient>, folder: &std::path::Path, config: AgentConfig) -> Agent {
    let executor = executor();
    let session = session(&executor, folder, ApprovalMode::AutoRun);
    Agent::new(client, executor, session, config)
}

fn fast() -> RetryPolicy {
    RetryPolicy { attempts: 3, initial_delay: Duration::from_millis(10), max_delay: Duration::from_secs(1) }
}

fn openai(server: &ScriptedModel) -> Arc<dyn ModelClient> {
    Arc::new(
        OpenAiClient::new(reqwest::Client::new(), server.base_url(), Some("sk-test".into()), "scripted")
            .with_retry(fast()),
    )
}

fn anthropic(server: &ScriptedModel) -> Arc<dyn ModelClient> {
    Arc::new(
        AnthropicClient::new(reqwest::Client::new(), server.base_url(), Some("ant-test".into()), "scripted")
            .with_retry(fast()),
    )
}

async fn run(agent: &mut Agent, input: &str) -> (Outcome, Vec<AgentEvent>) {
    let (tx, mut rx) = mpsc::unbounded_channel();
    let outcome = agent.run(input, &tx, &CancellationToken::new()).await;
    drop(tx);
    let mut events = Vec::new();
    while let Some(event) = rx.recv().await {
        events.push(event);
    }
    (outcome, events)
}

fn write_args(path: &str, content: &str) -> String {
    json!({ "path": path, "content": content }).to_string()
}

#[tokio::test]
async fn openai_calls_run_through_the_pipeline_and_come_back_in_order() {
    let folder = tempfile::tempdir().unwrap();
    let a = write_args("a.txt", "alpha");
    let b = write_args("b.txt", "beta");
    let server = ScriptedModel::start(vec![
        openai_reply(
            "Two files.",
            "Writing both.",
            &[("call_a", "writeFile", &a), ("call_b", "writeFile", &b)],
            "tool_calls",
        ),
        openai_reply("", "Done: a.txt and b.txt.", &[], "stop"),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (outcome, events) = run(&mut agent, "write two files").await;

    assert_eq!(outcome, Outcome::Answered { text: "Done: a.txt and b.txt.".into(), truncated: false });
    assert_eq!(std::fs::read_to_string(folder.path().join("a.txt")).unwrap(), "alpha");
    assert_eq!(std::fs::read_to_string(folder.path().join("b.txt")).unwrap(), "beta");
    let streamed: String = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delta(Delta::Text(t)) => Some(t.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(streamed, "Writing both.Done: a.txt and b.txt.");
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Delta(Delta::Reasoning(_)))), "reasoning is shown");

    let received = server.received();
    assert_eq!(received.len(), 2);
    assert_eq!(received[0].path, "/v1/chat/completions");
    assert_eq!(received[0].header("authorization"), Some("Bearer sk-test"));
    let first = &received[0].body;
    assert_eq!(first["stream"], true);
    assert_eq!(first["messages"][0]["role"], "system");
    assert!(
        first["messages"][0]["content"]
            .as_str()
            .unwrap()
            .contains(&folder.path().canonicalize().unwrap().display().to_string())
    );
    let names: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"writeFile") && names.contains(&"runCommand"), "{names:?}");
    assert!(first["tools"].as_array().unwrap().iter().all(|t| t["function"]["strict"] == true));

    let messages = received[1].body["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "tool"]);
    let calls = messages[2]["tool_calls"].as_array().unwrap();
    assert_eq!(calls[0]["id"], "call_a");
    assert_eq!(
        calls[0]["function"]["arguments"],
        a.as_str(),
        "fragments interleaved across indexes reassemble"
    );
    assert_eq!(calls[1]["id"], "call_b");
    assert_eq!(calls[1]["function"]["arguments"], b.as_str());
    assert_eq!(messages[3]["tool_call_id"], "call_a");
    assert_eq!(messages[4]["tool_call_id"], "call_b");
    assert!(messages[2].get("reasoning_content").is_none(), "reasoning is not sent back");
    assert_eq!(agent.usage().input_tokens, 200);
}

#[tokio::test]
async fn anthropic_blocks_round_trip_with_thinking_and_grouped_results() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("notes.txt"), "line one\nline two\n").unwrap();
    let read = json!({ "path": "notes.txt" }).to_string();
    let write = write_args("out.txt", "copied");
    let server = ScriptedModel::start(vec![
        anthropic_reply(
            "I should read first.",
            "Reading.",
            &[("toolu_1", "readFile", &read), ("toolu_2", "writeFile", &write)],
            "tool_use",
        ),
        anthropic_reply("", "Finished.", &[], "end_turn"),
    ])
    .await;
    let mut agent = auto_run(anthropic(&server), folder.path(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "copy it").await;
    assert_eq!(outcome, Outcome::Answered { text: "Finished.".into(), truncated: false });

    let received = server.received();
    assert_eq!(received[0].path, "/v1/messages");
    assert_eq!(received[0].header("x-api-key"), Some("ant-test"));
    assert_eq!(received[0].header("anthropic-version"), Some("2023-06-01"));
    let first = &received[0].body;
    let system = first["system"].as_str().unwrap();
    assert_eq!(system.matches("Today is").count(), 1, "the date once, not once per tool: {system}");
    assert!(!system.contains("\n\n\n"), "{system}");
    assert!(
        first["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == "readFile" && t["input_schema"].is_object())
    );

    let messages = received[1].body["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 3, "{messages:#?}");
    let assistant = messages[1]["content"].as_array().unwrap();
    let kinds: Vec<&str> = assistant.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["thinking", "text", "tool_use", "tool_use"]);
    assert_eq!(assistant[0]["signature"], "c2lnbmVk", "the thinking block goes back signed");
    assert_eq!(assistant[2]["input"], json!({ "path": "notes.txt" }));
    let results = messages[2]["content"].as_array().unwrap();
    assert_eq!(messages[2]["role"], "user");
    let ids: Vec<&str> = results.iter().map(|r| r["tool_use_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["toolu_1", "toolu_2"], "both results in one user message, in order");
    assert!(results[0]["content"].as_str().unwrap().contains("line two"));
    assert_eq!(results[0]["is_error"], false);
    assert_eq!(std::fs::read_to_string(folder.path().join("out.txt")).unwrap(), "copied");
}

#[tokio::test]
async fn a_reply_cut_by_the_length_limit_fails_its_calls_with_that_reason() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply(
            "",
            "",
            &[("call_cut", "writeFile", r#"{"path": "big.txt", "content": "abc"#)],
            "length",
        ),
        openai_reply("", "I will write it in parts.", &[], "stop"),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (_, events) = run(&mut agent, "write a big file").await;
    let results = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Results(r) => Some(r),
            _ => None,
        })
        .unwrap();
    assert!(!results[0].output.success);
    assert!(!folder.path().join("big.txt").exists());
    let tool = &server.received()[1].body["messages"][3];
    assert_eq!(tool["tool_call_id"], "call_cut");
    assert!(tool["content"].as_str().unwrap().to_lowercase().contains("length"), "{tool}");
}

#[tokio::test]
async fn rate_limits_and_outages_are_retried_and_a_bad_key_is_not() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        Scripted::error(429, json!({ "error": { "message": "slow down", "type": "rate_limit_error" } }))
            .header("retry-after", "0"),
        Scripted::error(503, json!({ "error": { "message": "overloaded" } })),
        openai_reply("", "Hello.", &[], "stop"),
        Scripted::error(401, json!({ "error": { "message": "Incorrect API key provided" } })),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (outcome, events) = run(&mut agent, "hi").await;
    assert_eq!(outcome, Outcome::Answered { text: "Hello.".into(), truncated: false });
    let retries: Vec<(u32, String)> = events
        .iter()
        .filter_map(|e| match e {
            AgentEvent::Delta(Delta::Retrying { attempt, reason, .. }) => Some((*attempt, reason.clone())),
            _ => None,
        })
        .collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries[0].1.contains("429") && retries[0].1.contains("slow down"), "{retries:?}");
    assert_eq!(server.received().len(), 3);

    let (outcome, _) = run(&mut agent, "again").await;
    match outcome {
        Outcome::Failed(ProviderError::Auth { status: 401, message, .. }) => {
            assert!(message.contains("Incorrect API key"))
        }
        other => panic!("expected an auth failure, got {other:?}"),
    }
    assert_eq!(server.received().len(), 4, "a refused key is not retried");
}

#[tokio::test]
async fn a_stream_dropped_before_anything_showed_is_retried_and_one_dropped_midway_is_resumed() {
    let folder = tempfile::tempdir().unwrap();
    let whole = openai_reply("", "A complete answer.", &[], "stop");
    let server = ScriptedModel::start(vec![
        whole.clone().cut_after(1), // only the role chunk: nothing shown yet
        whole.clone(),
        whole.clone().cut_after(3), // two text pieces shown, then the connection ends
        openai_reply("", " And the rest.", &[], "stop"),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "one").await;
    assert_eq!(outcome, Outcome::Answered { text: "A complete answer.".into(), truncated: false });
    let (outcome, events) = run(&mut agent, "two").await;
    assert_eq!(outcome, Outcome::Answered { text: " And the rest.".into(), truncated: false });
    assert!(
        events.iter().any(|e| matches!(e, AgentEvent::Resumed { reason } if reason.contains("continue"))),
        "the person is told: {events:?}"
    );
    // The model got what arrived as its own words and was asked to go on.
    let asked = server.received()[3].body["messages"].as_array().unwrap().clone();
    let (said, note) = (&asked[asked.len() - 2], &asked[asked.len() - 1]);
    assert_eq!(said["role"], "assistant");
    assert!(
        !said["content"].as_str().unwrap().is_empty()
            && "A complete answer.".starts_with(said["content"].as_str().unwrap()),
        "{said}"
    );
    assert!(note["content"].as_str().unwrap().contains("Continue exactly where it stopped"), "{note}");
}

#[tokio::test]
async fn a_turn_that_fails_before_any_answer_is_not_joined_to_the_next() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        Scripted::error(400, json!({"error": {"message": "bad request"}})),
        openai_reply("", "Fine.", &[], "stop"),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "two").await;
    assert!(matches!(outcome, Outcome::Failed(ProviderError::Rejected { .. })), "{outcome:?}");
    // The model reads "three" alone.
    let (outcome, _) = run(&mut agent, "three").await;
    assert!(matches!(outcome, Outcome::Answered { .. }), "{outcome:?}");
    let messages = server.received()[1].body["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap();
    assert_eq!(
        (last["role"].as_str(), last["content"].as_str()),
        (Some("user"), Some("three")),
        "{messages:?}"
    );
    assert!(
        !messages.iter().any(|m| m["content"].as_str().is_some_and(|c| c.contains("two"))),
        "{messages:?}"
    );
}

/// A stream silent past the profile's stall timeout counts as broken: retried when nothing was
/// shown, resumed when text was.
#[tokio::test]
async fn a_stalled_stream_times_out_and_is_retried_or_resumed() {
    let folder = tempfile::tempdir().unwrap();
    let whole = openai_reply("", "A complete answer.", &[], "stop");
    let server = ScriptedModel::start(vec![
        whole.clone().hang_after(1),
        whole.clone(),
        whole.clone().hang_after(3),
        openai_reply("", " And the rest.", &[], "stop"),
    ])
    .await;
    let file = agent::ConfigFile {
        profile: Some("scripted".into()),
        sub_agent: None,
        theme: None,
        temp_inside: None,
        profiles: [(
            "scripted".to_owned(),
            agent::config::ProfileSpec {
                base_url: Some(server.base_url().to_owned()),
                stall_timeout_secs: Some(1),
                ..Default::default()
            },
        )]
        .into(),
    };
    let env = |name: &str| (name == "OPENAI_API_KEY").then(|| "sk-test".to_owned());
    let profile = agent::config::resolve(&file, "config.toml", &agent::Overrides::default(), &env).unwrap();
    assert_eq!(profile.stall_timeout, Duration::from_secs(1));
    let mut agent = auto_run(profile.client().unwrap(), folder.path(), AgentConfig::default());
    let started = std::time::Instant::now();
    let (outcome, events) = run(&mut agent, "one").await;
    assert_eq!(outcome, Outcome::Answered { text: "A complete answer.".into(), truncated: false });
    assert!(
        events.iter().any(
            |e| matches!(e, AgentEvent::Delta(Delta::Retrying { reason, .. }) if reason.contains("timed out"))
        ),
        "{events:?}"
    );
    let (outcome, events) = run(&mut agent, "two").await;
    assert_eq!(outcome, Outcome::Answered { text: " And the rest.".into(), truncated: false });
    assert!(events.iter().any(|e| matches!(e, AgentEvent::Resumed { .. })), "{events:?}");
    assert!(started.elapsed() < Duration::from_secs(30), "neither stall waited for ever");
}

#[tokio::test]
async fn cancelling_a_streaming_reply_keeps_what_was_said_and_tells_the_model() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "I will start by reading every file in the project.", &[], "stop").hang_after(3),
        openai_reply("", "Understood.", &[], "stop"),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (tx, mut rx) = mpsc::unbounded_channel();
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    let watcher = tokio::spawn(async move {
        while let Some(event) = rx.recv().await {
            if matches!(event, AgentEvent::Delta(Delta::Text(_))) {
                canceller.cancel();
            }
        }
    });
    let outcome = tokio::time::timeout(Duration::from_secs(10), agent.run("go", &tx, &cancel)).await.unwrap();
    drop(tx);
    watcher.await.unwrap();
    assert_eq!(outcome, Outcome::Cancelled);

    let (outcome, _) = run(&mut agent, "stop, do something else").await;
    assert_eq!(outcome, Outcome::Answered { text: "Understood.".into(), truncated: false });
    let messages = server.received()[1].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "user"]);
    assert!(messages[2]["content"].as_str().unwrap().ends_with("[cut off]"));
    let last = messages[3]["content"].as_str().unwrap();
    assert!(last.contains("interrupted") && last.ends_with("stop, do something else"), "{last}");
}

#[tokio::test]
async fn cancelling_while_a_command_runs_settles_it_as_cancelled_with_one_result() {
    let folder = tempfile::tempdir().unwrap();
    let command = json!({ "command": "sleep 30" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("call_sleep", "runCommand", &command)], "tool_calls"),
        openai_reply("", "Stopped.", &[], "stop"),
    ])
    .await;
    let executor = executor();
    let session = session(&executor, folder.path(), ApprovalMode::AutoRun);
    let mut calls = session.subscribe();
    let mut agent = Agent::new(openai(&server), executor.clone(), session, AgentConfig::default());
    let cancel = CancellationToken::new();
    let canceller = cancel.clone();
    tokio::spawn(async move {
        while let Ok(event) = calls.recv().await {
            if matches!(event, tool_executor::Event::Started { .. }) {
                canceller.cancel();
            }
        }
    });
    let (tx, mut rx) = mpsc::unbounded_channel();
    let started = std::time::Instant::now();
    let outcome =
        tokio::time::timeout(Duration::from_secs(20), agent.run("wait", &tx, &cancel)).await.unwrap();
    assert_eq!(outcome, Outcome::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(15), "the command was stopped, not waited for");
    drop(tx);
    let mut results = Vec::new();
    while let Some(event) = rx.recv().await {
        if let AgentEvent::Results(r) = event {
            results.extend(r);
        }
    }
    assert_eq!(results.len(), 1);
    assert_eq!(results[0].call_id, "call_sleep");
    assert!(!results[0].output.success);

    run(&mut agent, "ok").await;
    let messages = server.received()[1].body["messages"].as_array().unwrap().clone();
    let roles: Vec<&str> = messages.iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
    assert_eq!(messages[3]["tool_call_id"], "call_sleep");
}

#[tokio::test]
async fn a_model_that_keeps_calling_stops_at_the_turn_limit() {
    let folder = tempfile::tempdir().unwrap();
    let list = json!({ "pattern": "*" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("c1", "globFiles", &list)], "tool_calls"),
        openai_reply("", "", &[("c2", "globFiles", &list)], "tool_calls"),
    ])
    .await;
    let config = AgentConfig { max_turns: 2, ..AgentConfig::default() };
    let mut agent = auto_run(openai(&server), folder.path(), config);
    let (outcome, _) = run(&mut agent, "list forever").await;
    assert_eq!(outcome, Outcome::TurnLimit { turns: 2 });
    let tool_results = agent.messages().iter().filter(|m| matches!(m, Message::Tool { .. })).count();
    assert_eq!(tool_results, 2, "both replies' calls were answered");
}

#[tokio::test]
async fn old_results_are_elided_then_summarised_when_the_window_fills() {
    let folder = tempfile::tempdir().unwrap();
    std::fs::write(folder.path().join("big.txt"), format!("{}\n", "x".repeat(99)).repeat(300)).unwrap();
    let read = json!({ "path": "big.txt" }).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("r1", "readFile", &read)], "tool_calls"),
        openai_reply("", "", &[("r2", "readFile", &read)], "tool_calls"),
        openai_reply("", "It is all x.", &[], "stop"),
    ])
    .await;
    // Room for one big result (30 000 characters, about 10 000 tokens), not two.
    let base = auto_run(openai(&server), folder.path(), AgentConfig::default()).estimated_tokens();
    let config =
        AgentConfig { context_window: (base + 15_000) * 5 / 4, max_tokens: 1_000, ..AgentConfig::default() };
    let mut agent = auto_run(openai(&server), folder.path(), config);
    let (outcome, events) = run(&mut agent, "what is in big.txt?").await;
    assert_eq!(outcome, Outcome::Answered { text: "It is all x.".into(), truncated: false });
    let compaction = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Compacted(c) => Some(*c),
            _ => None,
        })
        .unwrap();
    assert_eq!((compaction.elided_results, compaction.summarised_messages), (1, 0));
    assert!(compaction.after_tokens < compaction.before_tokens);
    let messages = server.received()[2].body["messages"].as_array().unwrap().clone();
    assert!(messages[3]["content"].as_str().unwrap().starts_with("[Removed to fit"), "{}", messages[3]);
    assert!(messages[5]["content"].as_str().unwrap().len() > 20_000, "the newest result stays whole");

    // A request too long to fit even then is summarised by the model.
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("g1", "globFiles", r#"{"pattern":"*"}"#)], "tool_calls"),
        openai_reply("", "The person pasted a long log and asked for its cause.", &[], "stop"),
        openai_reply("", "The cause is the missing file.", &[], "stop"),
    ])
    .await;
    let config =
        AgentConfig { context_window: (base + 5_000) * 5 / 4, max_tokens: 1_000, ..AgentConfig::default() };
    let mut agent = auto_run(openai(&server), folder.path(), config);
    // About 8 000 tokens of pasted log: more than the window leaves, and no tool result to elide.
    let log = format!("why does this fail?\n{}", "error: file missing\n".repeat(1_200));
    let (outcome, events) = run(&mut agent, &log).await;
    assert_eq!(
        outcome,
        Outcome::Answered { text: "The cause is the missing file.".into(), truncated: false }
    );
    let compaction = events
        .iter()
        .find_map(|e| match e {
            AgentEvent::Compacted(c) => Some(*c),
            _ => None,
        })
        .unwrap();
    assert_eq!(compaction.summarised_messages, 1);
    let received = server.received();
    let summary_request = received[1].body["messages"].as_array().unwrap();
    assert!(
        summary_request.last().unwrap()["content"]
            .as_str()
            .unwrap()
            .starts_with("Summarise the conversation")
    );
    let after: Vec<Value> = received[2].body["messages"].as_array().unwrap().clone();
    let first = after[1]["content"].as_str().unwrap();
    assert!(
        first.contains("The person pasted a long log") && first.contains("The person's latest request"),
        "{first:.200}"
    );
    assert_eq!(after[2]["tool_calls"][0]["id"], "g1", "the latest reply and its result stay");
    assert_eq!(after[3]["tool_call_id"], "g1");
}

/// A wrong base URL shows itself: the error names the address that did not answer the API.
#[tokio::test]
async fn a_not_found_names_the_url() {
    let folder = tempfile::tempdir().unwrap();
    let server =
        ScriptedModel::start(vec![Scripted::error(404, json!({"error": {"message": "Not Found"}}))]).await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "hi").await;
    let Outcome::Failed(error) = outcome else { panic!("{outcome:?}") };
    let text = error.to_string();
    assert!(text.contains(&format!("{}/chat/completions", server.base_url())), "{text}");
    assert!(text.contains("check the base URL"), "{text}");
}

#[tokio::test]
async fn a_preference_saved_in_one_session_shapes_the_next() {
    let folder = tempfile::tempdir().unwrap();
    let data = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", data.path().join("journal.db").display());
    let stores = journal::open_stores(&url).await.unwrap();
    let computer: Arc<dyn computer_runtime::ComputerRuntime> =
        Arc::new(computer_runtime::LocalComputer::default());
    let services = tool_core::Services::new().with(computer).with(stores.records).with(stores.knowledge);
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in builtin_tools::Registry::builtin().available_runtimes(&services).0 {
        toolbox.add_tool(manifest, runtime).unwrap();
    }
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let open = |id: &str| {
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "local".into(),
            user_id: Some("ada".into()),
            working_directory: Some(folder.path().to_owned()),
            policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
            active_tools: Some(vec!["memory".into()]),
            ..SessionConfig::default()
        })
    };
    let save =
        json!({"category": "preferences", "title": "Language", "content": "Ada wants answers in French"});
    let search = json!({"query": "answer language"});
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("c1", "addMemory", &save.to_string())], "tool_calls"),
        openai_reply("", "Noted: French from now on.", &[], "stop"),
        openai_reply("", "", &[("c2", "searchMemory", &search.to_string())], "tool_calls"),
        openai_reply("", "Bonjour Ada !", &[], "stop"),
    ])
    .await;
    let mut first = Agent::new(openai(&server), executor.clone(), open("monday"), AgentConfig::default());
    let (outcome, _) = run(&mut first, "Please always answer in French.").await;
    assert!(matches!(outcome, Outcome::Answered { .. }), "{outcome:?}");
    let mut second = Agent::new(openai(&server), executor.clone(), open("tuesday"), AgentConfig::default());
    let (outcome, _) = run(&mut second, "Hello!").await;
    assert_eq!(outcome, Outcome::Answered { text: "Bonjour Ada !".into(), truncated: false });

    let received = server.received();
    assert_eq!(received.len(), 4);
    // The model was taught when to save, and the next session's search found the preference.
    let system = received[2].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("searchMemory"), "the memory role is in the system prompt");
    let messages = received[3].body["messages"].as_array().unwrap();
    let tool = messages.iter().find(|m| m["role"] == "tool").unwrap();
    assert!(tool["content"].as_str().unwrap().contains("Ada wants answers in French"), "{tool}");
    assert!(
        messages
            .iter()
            .all(|m| !m["content"].as_str().unwrap_or("").contains("Please always answer in French")),
        "the second session is a new conversation: only memory carried the preference"
    );
}

/// Tool search through the loop: a deferred tool is not declared at first, `searchTools` finds it,
/// the next request declares it, and the model calls it.
#[tokio::test]
async fn a_tool_found_by_search_is_declared_in_the_next_request() {
    let folder = tempfile::tempdir().unwrap();
    let executor = executor();
    // A session whose calculator is declared or not as `exposure` says.
    let open = |id: &str, exposure: tool_core::Exposure| {
        let mut config = tool_executor::ExposureConfig::default();
        config.tools.insert("calculator".into(), exposure);
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "local".into(),
            working_directory: Some(folder.path().to_owned()),
            policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
            active_tools: Some(vec!["local-system".into(), "calculator".into(), "tool-search".into()]),
            exposure: config,
            ..SessionConfig::default()
        })
    };
    let session = open("tool-search-loop", tool_core::Exposure::Deferred);
    let search = json!({"query": "evaluate an arithmetic expression"}).to_string();
    let sum = json!({"expression": "2^10 + 1"}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("s1", "searchTools", &search)], "tool_calls"),
        openai_reply("", "", &[("c1", "calculate", &sum)], "tool_calls"),
        openai_reply("", "It is 1025.", &[], "stop"),
    ])
    .await;
    let mut agent = Agent::new(openai(&server), executor.clone(), session.clone(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "What is 2^10 + 1?").await;
    assert_eq!(outcome, Outcome::Answered { text: "It is 1025.".into(), truncated: false });

    let received = server.received();
    let declared = |n: usize| -> Vec<String> {
        received[n].body["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = declared(0);
    assert!(first.contains(&"searchTools".to_owned()) && first.contains(&"readFile".to_owned()), "{first:?}");
    assert!(!first.contains(&"calculate".to_owned()), "a deferred tool is not declared at first: {first:?}");
    let system = received[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.contains("- calculator (1 function)"), "the model knows what it can search: {system}");
    assert!(!system.contains("fend syntax"), "a deferred tool's role waits with it");
    assert!(declared(1).contains(&"calculate".to_owned()), "found, it is declared next: {:?}", declared(1));
    let messages = received[1].body["messages"].as_array().unwrap();
    let found = messages.iter().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap();
    assert!(found.contains("<tool name=\"calculate\" server=\"calculator\">"), "{found}");
    assert!(found.contains("calculate(expression: string"), "the call signature: {found}");
    let messages = received[2].body["messages"].as_array().unwrap();
    let result = messages.iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap();
    assert!(result.contains("1025"), "{result}");

    // Without deferred tools, tool search is not declared at all, and a hidden tool is refused.
    let plain = open("tool-search-none", tool_core::Exposure::Hidden);
    let tools = agent::declarations(&executor, &plain, tool_core::provider::Provider::Openai);
    let names: Vec<&str> = tools.iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"searchTools") && !names.contains(&"calculate"), "{names:?}");
    let batch = tool_executor::Batch {
        message_id: None,
        calls: vec![tool_executor::RawCall { id: "h1".into(), name: "calculate".into(), arguments: sum }],
        stopped_on_length: false,
    };
    let result = executor.execute_batch(&plain, batch).await.pop().unwrap();
    assert_eq!(result.output.error.unwrap().kind, tool_core::ErrorKind::UnknownTool, "hidden from the model");
}

#[tokio::test]
async fn skills_are_listed_activated_and_their_files_read() {
    let folder = tempfile::tempdir().unwrap();
    let executor = executor();
    let fixtures = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../builtin-tool-skills/tests/fixtures/accepted");
    let found = builtin_tool_skills::discover::discover(&[builtin_tool_skills::discover::SkillRoot::new(
        &fixtures,
        tool_core::SkillSource::Project,
    )]);
    let open = |id: &str, skills: tool_core::SkillSet| {
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "local".into(),
            working_directory: Some(folder.path().to_owned()),
            policy: SessionPolicy { mode: ApprovalMode::Manual, ..SessionPolicy::default() },
            active_tools: Some(vec!["local-system".into(), "skills".into()]),
            skills: Arc::new(skills),
            ..SessionConfig::default()
        })
    };
    let session = open("skills-loop", found.set());
    let activate = json!({"name": "pdf-forms"}).to_string();
    let read = json!({"path": "skill://pdf-forms/references/field-types.md:3-4"}).to_string();
    let server = ScriptedModel::start(vec![
        openai_reply("", "", &[("a1", "activateSkill", &activate)], "tool_calls"),
        openai_reply("", "", &[("r1", "readFile", &read)], "tool_calls"),
        openai_reply("", "Text fields take strings.", &[], "stop"),
    ])
    .await;
    let mut agent = Agent::new(openai(&server), executor.clone(), session.clone(), AgentConfig::default());
    let (outcome, _) = run(&mut agent, "How do I fill this PDF form?").await;
    assert_eq!(outcome, Outcome::Answered { text: "Text fields take strings.".into(), truncated: false });

    let received = server.received();
    let system = received[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(
        system.contains("- pdf-forms: Fills in and checks PDF forms."),
        "names and descriptions: {system}"
    );
    assert!(!system.contains("List the form fields"), "not the body: {system}");
    let tools = received[0].body["tools"].as_array().unwrap();
    let declared =
        tools.iter().find(|t| t["function"]["name"] == "activateSkill").expect("activateSkill declared");
    assert_eq!(
        declared["function"]["parameters"]["properties"]["name"]["enum"],
        json!(["changelog", "pdf-forms", "sql-2"]),
        "the session's skills as an enum"
    );
    let result = |n: usize| -> String {
        let messages = received[n].body["messages"].as_array().unwrap();
        messages.iter().rev().find(|m| m["role"] == "tool").unwrap()["content"].as_str().unwrap().to_owned()
    };
    let body = result(1);
    assert!(body.contains("<skill name=\"pdf-forms\"") && body.contains("1. List the form fields"), "{body}");
    assert!(body.contains("- references/field-types.md"), "{body}");
    let lines = result(2);
    assert!(lines.starts_with("Text fields take strings.\nCheck boxes take true or false."), "{lines}");
    assert!(!lines.contains("# Field types"), "only the lines asked for: {lines}");
    // Both ran in a manual session with no one to ask: reading a skill asks nothing.

    // Out of the skill's folder: refused, whatever the path says.
    let batch = tool_executor::Batch {
        message_id: None,
        calls: vec![tool_executor::RawCall {
            id: "x1".into(),
            name: "readFile".into(),
            arguments: json!({"path": "skill://pdf-forms/../../../../../../etc/hostname"}).to_string(),
        }],
        stopped_on_length: false,
    };
    let out = executor.execute_batch(&session, batch).await.pop().unwrap();
    assert!(!out.output.success, "{}", out.output.content);

    // A session without skills declares no activateSkill and says nothing of skills.
    let plain = open("skills-none", tool_core::SkillSet::default());
    let names: Vec<String> = agent::declarations(&executor, &plain, tool_core::provider::Provider::Openai)
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        !names.contains(&"activateSkill".to_owned()) && names.contains(&"readFile".to_owned()),
        "{names:?}"
    );
    assert!(!agent::system_prompt(&executor, &plain).contains("# Skills"));
}

/// `/compact` of a conversation smaller than the summary the model writes keeps the conversation:
/// nothing is summarised, and the tokens stay as they were (it used to report growth).
#[tokio::test]
async fn compacting_a_conversation_smaller_than_its_summary_keeps_it() {
    let folder = tempfile::tempdir().unwrap();
    let server = ScriptedModel::start(vec![
        openai_reply("", "Hi.", &[], "stop"),
        openai_reply(
            "",
            "The person greeted the agent and the agent greeted them back; nothing was asked or done yet, \
             and there is nothing left to do.",
            &[],
            "stop",
        ),
    ])
    .await;
    let mut agent = auto_run(openai(&server), folder.path(), AgentConfig::default());
    run(&mut agent, "hello").await;
    let before = agent.messages().to_vec();
    let compaction = agent.compact_now(&CancellationToken::new()).await.unwrap().unwrap();
    assert_eq!((compaction.summarised_messages, compaction.after_tokens), (0, compaction.before_tokens));
    assert_eq!(agent.messages(), before.as_slice());
    assert_eq!(server.received().len(), 2, "the summary was asked for");
}
