//! The `sub-agent` tool: `callSubAgent {task, instructions?, tools?}` runs a nested agent loop
//! (the `agent` crate) with its own context over a subset of the session's functions.
//!
//! Its calls are nested calls of the `callSubAgent` call, through the same pipeline and session:
//! approved, sandboxed and journalled as the parent's are (with `parent_call_id` set), cancelled
//! with it, within its deadline. A sub-agent is never given `callSubAgent` (depth one). Several
//! calls in one batch run in parallel. The model comes from the front end's [`SubAgentModels`]
//! (feature `runtime`): the terminal app's own profile or a named one, the server's operator
//! profiles, which a session may name.
//!
//! ```
//! let manifest = builtin_tool_sub_agent::manifest();
//! assert_eq!(manifest.apis[0].name, "callSubAgent");
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "sub-agent";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The system prompt a sub-agent starts from; its tools' roles and the caller's instructions
/// follow.
pub const SUB_AGENT_PROMPT: &str = "\
You are a sub-agent: another agent handed you one task and waits for your answer. You work alone, in
the folder {{working_directory}}, with the tools you are given. Today is {{date}}. You cannot ask that
agent anything, so make reasonable choices and say which. Your final answer is all it will see: make it
complete on its own — what you found or did, with the paths, names and numbers that matter, and what you
could not do — and short.";

/// How long a sub-agent may run by default (its call's timeout).
pub const DEFAULT_TIMEOUT_MS: u64 = 600_000;

tool_core::api_enum! {
    /// The APIs of the `sub-agent` tool.
    pub enum SubAgentApi {
        /// Run a task in a sub-agent.
        Call = "callSubAgent",
    }
}

/// Arguments of `callSubAgent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CallSubAgentArgs {
    /// The task, complete and self-contained: the goal, the paths and names that matter, what to
    /// return.
    pub task: String,
    /// Extra guidance for how to work (style, limits, what to avoid).
    #[serde(default)]
    pub instructions: Option<String>,
    /// The functions it may use (names such as `readFile`, or tool names such as
    /// `local-system`); all of yours when left out.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Sub-agent", "Hand a self-contained task to a sub-agent with its own context").icon("🧩"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<CallSubAgentArgs>(
            SubAgentApi::Call.name(),
            "Run a self-contained task in a sub-agent with its own context and some of your tools; returns its \
             final answer and the calls it made. Several in one message run in parallel.",
        )
        // Its own calls are approved one by one; this one only starts them.
        .tier(Tier::Read)
        .timeout_ms(DEFAULT_TIMEOUT_MS)
        // Its nested calls may wait for a person: it is on record before they are.
        .asks_person(),
    )
}

#[cfg(feature = "runtime")]
mod runtime;

#[cfg(feature = "runtime")]
pub use runtime::{SubAgentLimits, SubAgentModel, SubAgentModels, SubAgentRuntime, UnknownModel, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    /// One card: the task, the calls it made (the card unfolds into them) and its answer.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct SubAgentRender;

    fn title(arguments: &Value) -> String {
        let task = arguments.get("task").and_then(Value::as_str).unwrap_or("…");
        let first = task.lines().next().unwrap_or_default();
        let short: String = first.chars().take(70).collect();
        let more = if short.len() < task.trim_end().len() { "…" } else { "" };
        format!("Sub-agent: {short}{more}")
    }

    impl RenderHooks for SubAgentRender {
        fn inspector(&self, _api: &str, partial: &Value) -> Card {
            Card::new(title(partial)).subtitle("starting…")
        }

        fn placeholder(&self, _api: &str, arguments: &Value) -> Card {
            Card::new(title(arguments)).subtitle("waiting…")
        }

        fn streaming(&self, _api: &str, arguments: &Value, progress: &[tool_core::Progress]) -> Card {
            let last = progress.iter().rev().find_map(|p| p.message.clone());
            let card = Card::new(title(arguments))
                .badge("running", tool_core::Tone::Info)
                .subtitle(last.unwrap_or_else(|| "working…".to_owned()));
            // Its calls so far, a line each, as the front end gathered them.
            let calls: String = progress.iter().filter_map(|p| p.output.as_deref()).collect();
            if calls.trim().is_empty() {
                card
            } else {
                card.block(Block::Code { language: None, text: calls.trim_end().to_owned() })
            }
        }

        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let mut card = Card::new(title(arguments));
            card.badge = Some(status_badge(output));
            let state = output.state.as_ref();
            let calls: Vec<String> = state
                .and_then(|s| s.get("calls"))
                .and_then(Value::as_array)
                .map(|calls| {
                    calls
                        .iter()
                        .map(|c| {
                            let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
                            let status = c.get("status").and_then(Value::as_str).unwrap_or("?");
                            let gist = c.get("gist").and_then(Value::as_str).unwrap_or_default();
                            if gist.is_empty() {
                                format!("{name} [{status}]")
                            } else {
                                format!("{name} [{status}] {gist}")
                            }
                        })
                        .collect()
                })
                .unwrap_or_default();
            let turns = state.and_then(|s| s.get("turns")).and_then(Value::as_u64).unwrap_or(0);
            let tokens = state.and_then(|s| s.get("tokens")).and_then(Value::as_u64).unwrap_or(0);
            let model = state.and_then(|s| s.get("model")).and_then(Value::as_str).unwrap_or("");
            card = card.subtitle(
                format!("{} calls · {turns} replies · {tokens} tokens {model}", calls.len())
                    .trim_end()
                    .to_owned(),
            );
            if !calls.is_empty() {
                card = card.block(Block::List { items: calls, ordered: true });
            }
            let answer = state.and_then(|s| s.get("answer")).and_then(Value::as_str).map(str::to_owned);
            card.block(Block::Markdown { text: answer.unwrap_or_else(|| output.content.clone()) })
        }
    }
}

#[cfg(feature = "render")]
pub use render::SubAgentRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: SubAgentRender = SubAgentRender;
