//! `searchTools` over a session's deferred functions: ranking, activation, bad input, and the
//! hybrid mode with an embeddings model (and without one that answers).

use std::sync::{Arc, Mutex};

use builtin_tool_tool_search::ToolSearchRuntime;
use futures::future::BoxFuture;
use serde_json::{Value, json};
use tool_core::embed::{EmbedError, Embedder};
use tool_core::{CallContext, ErrorKind, FoundTool, ToolFinder, ToolRuntime};

/// A session's deferred functions as the pipeline would hand them (the pipeline's own finder is
/// exercised by the agent-loop and server tests).
#[derive(Debug, Default)]
struct Deferred {
    tools: Vec<FoundTool>,
    activated: Mutex<Vec<String>>,
}

impl ToolFinder for Deferred {
    fn deferred(&self) -> Vec<FoundTool> {
        let activated = self.activated.lock().unwrap();
        self.tools.iter().cloned().map(|t| FoundTool { declared: activated.contains(&t.name), ..t }).collect()
    }

    fn activate(&self, names: &[String]) -> Vec<String> {
        let mut activated = self.activated.lock().unwrap();
        let new: Vec<String> = names.iter().filter(|n| !activated.contains(n)).cloned().collect();
        activated.extend(new.iter().cloned());
        new
    }
}

fn tool(server: &str, name: &str, description: &str, parameters: Value) -> FoundTool {
    FoundTool {
        name: format!("{server}__{name}"),
        tool: format!("mcp-{server}"),
        title: format!("MCP server {server}"),
        description: description.into(),
        parameters,
        declared: false,
    }
}

fn finder() -> Arc<Deferred> {
    Arc::new(Deferred {
        tools: vec![
            tool(
                "slack",
                "post_message",
                "Post a message to a channel",
                json!({"type": "object", "properties": {"channel": {"type": "string"}, "text": {"type": "string"}}, "required": ["channel", "text"]}),
            ),
            tool("slack", "list_channels", "List the workspace's channels", json!({"type": "object"})),
            tool(
                "github",
                "create_issue",
                "Create a new issue in a repository",
                json!({"type": "object", "properties": {"repo": {"type": "string"}, "title": {"type": "string"}, "labels": {"type": "array", "items": {"type": "string"}}}, "required": ["repo", "title"]}),
            ),
            tool(
                "maps",
                "elevation",
                "Get the elevation of locations",
                json!({"type": "object", "properties": {"locations": {"type": "array"}}}),
            ),
        ],
        activated: Mutex::default(),
    })
}

fn context(finder: &Arc<Deferred>) -> CallContext {
    let mut context = CallContext::new("c1", "session-1");
    context.finder = Some(finder.clone() as Arc<dyn ToolFinder>);
    context
}

async fn search(runtime: &ToolSearchRuntime, args: Value, context: &CallContext) -> tool_core::ToolOutput {
    runtime.execute("searchTools", args, context).await
}

#[tokio::test]
async fn finds_declares_and_says_what_it_declared() {
    let runtime = ToolSearchRuntime::new(None);
    let finder = finder();
    let context = context(&finder);
    let output = search(
        &runtime,
        json!({"query": "send a message to the team's slack channel", "limit": 2}),
        &context,
    )
    .await;
    assert!(output.success, "{}", output.content);
    assert_eq!(
        output.content.find("<tool name="),
        output.content.find("<tool name=\"slack__post_message\""),
        "the best match first: {}",
        output.content
    );
    assert!(
        output.content.contains("slack__post_message(channel: string, text: string)"),
        "{}",
        output.content
    );
    assert!(output.content.contains("declared to you from your next turn on"), "{}", output.content);
    assert_eq!(output.content.matches("<tool name=").count(), 2, "the limit holds");
    let activated = finder.activated.lock().unwrap().clone();
    assert!(activated.contains(&"slack__post_message".to_owned()), "{activated:?}");
    assert_eq!(output.state.as_ref().unwrap()["activated"].as_array().unwrap().len(), activated.len());

    // Found again: already declared, nothing new.
    let again = search(&runtime, json!({"query": "post a slack message", "limit": 1}), &context).await;
    assert!(again.content.contains("already declared"), "{}", again.content);
    assert_eq!(again.state.unwrap()["activated"], json!([]));

    // Nothing shares a word: a clear answer naming where deferred tools come from.
    let none = search(&runtime, json!({"query": "zebra"}), &context).await;
    assert!(none.success && none.content.contains("No deferred tool matches"), "{}", none.content);
    assert!(none.content.contains("slack, github, maps"), "{}", none.content);
}

#[tokio::test]
async fn bad_input_is_an_error_the_model_can_act_on() {
    let runtime = ToolSearchRuntime::new(None);
    let finder = finder();
    let context = context(&finder);
    for args in [
        json!({"query": "  "}),
        json!({"query": "x", "limit": 0}),
        json!({"query": "x", "limit": 21}),
        json!({"q": "x"}),
    ] {
        let output = search(&runtime, args.clone(), &context).await;
        assert_eq!(output.error.map(|e| e.kind), Some(ErrorKind::InvalidArguments), "{args}");
    }
    // A session with nothing deferred has no finder.
    let output = search(&runtime, json!({"query": "issue"}), &CallContext::new("c", "s")).await;
    let error = output.error.unwrap();
    assert_eq!(error.kind, ErrorKind::NotFound);
    assert!(error.message.contains("already declared"), "{}", error.message);
    assert!(finder.activated.lock().unwrap().is_empty(), "nothing activated by bad calls");
}

/// Embeds a text as counts of a few concepts (stands in for the remote embeddings endpoint).
#[derive(Debug)]
struct Concepts {
    fail: bool,
}

impl Embedder for Concepts {
    fn model(&self) -> &str {
        "concepts"
    }

    fn embed<'a>(&'a self, texts: &'a [String]) -> BoxFuture<'a, Result<Vec<Vec<f32>>, EmbedError>> {
        Box::pin(async move {
            if self.fail {
                return Err(EmbedError("refused".into()));
            }
            let groups: [&[&str]; 2] =
                [&["elevation", "high", "altitude", "sea"], &["message", "channel", "post"]];
            Ok(texts
                .iter()
                .map(|text| {
                    let text = text.to_lowercase();
                    let mut vector: Vec<f32> = groups
                        .iter()
                        .map(|g| g.iter().filter(|w| text.contains(**w)).count() as f32)
                        .collect();
                    vector.push(0.1);
                    tool_core::embed::normalized(vector)
                })
                .collect())
        })
    }
}

#[tokio::test]
async fn meaning_finds_what_words_miss_and_a_dead_endpoint_falls_back_to_words() {
    let finder = finder();
    let context = context(&finder);
    let question = json!({"query": "how tall above the sea is Denver", "limit": 1});
    let hybrid = ToolSearchRuntime::new(Some(Arc::new(Concepts { fail: false })));
    let output = search(&hybrid, question.clone(), &context).await;
    assert!(output.content.contains("maps__elevation"), "{}", output.content);
    assert!(!output.content.contains("words only"), "{}", output.content);

    let finder = self::finder();
    let context = self::context(&finder);
    let dead = ToolSearchRuntime::new(Some(Arc::new(Concepts { fail: true })));
    let output = search(&dead, json!({"query": "create an issue", "limit": 1}), &context).await;
    assert!(output.success && output.content.contains("github__create_issue"), "{}", output.content);
    assert!(output.content.contains("Searched by words only"), "{}", output.content);
}
