//! The `tool-search` tool: `searchTools` finds the session's deferred tools (a mounted server's
//! hundreds of functions wait behind it once a session has more than its threshold) and declares
//! what it finds to the model from its next turn on.
//!
//! It exports the four parts every builtin tool exports: [`manifest()`] and [`SYSTEM_ROLE`] for
//! the model, `runtime(&Services)` for the machine (feature `runtime`) and `RENDER` for people
//! (feature `render`). The tool is declared only while its session has deferred functions
//! ([`Exposure::WhenDeferred`]); the pipeline hands it the session's [`tool_core::ToolFinder`].
//!
//! ```
//! assert_eq!(builtin_tool_tool_search::manifest().identifier, "tool-search");
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Exposure, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "tool-search";

/// The system-role template (`{{deferred_tools}}`: one line per tool whose functions wait).
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// Matches returned when the call names no limit.
pub const DEFAULT_LIMIT: usize = 5;
/// The most matches one call returns (and declares).
pub const MAX_LIMIT: usize = 20;

tool_core::api_enum! {
    /// The APIs of the `tool-search` tool.
    pub enum ToolSearchApi {
        /// Find deferred tools and declare them.
        Search = "searchTools",
    }
}

/// Arguments of `searchTools`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What the tool should do, in a few words ("create a GitHub issue", "send a Slack message").
    #[schemars(length(min = 1, max = 500))]
    pub query: String,
    /// How many tools to return and declare (default 5, at most 20).
    #[serde(default)]
    #[schemars(range(min = 1, max = 20))]
    pub limit: Option<usize>,
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Tool search", "Finds tools that are not declared yet and declares them"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .exposure(Exposure::WhenDeferred)
    .api(
        ApiSpec::new::<SearchArgs>(
            ToolSearchApi::Search.name(),
            "Search the tools that are available but not declared yet, by what they do. Returns the best \
             matches with their call signatures and declares them to you from your next turn on.",
        )
        .tier(Tier::Read)
        .timeout_ms(15_000),
    )
}

#[cfg(feature = "runtime")]
mod runtime;

#[cfg(feature = "runtime")]
pub use runtime::{ToolSearchRuntime, runtime, signature};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, Field, RenderHooks, ToolOutput};

    /// How people see `searchTools`: the query and the tools it declared.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct ToolSearchRender;

    impl RenderHooks for ToolSearchRender {
        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let query = arguments.get("query").and_then(Value::as_str).unwrap_or_default();
            let mut card = Card::new(format!("Tool search · {query}"));
            card.badge = Some(status_badge(output));
            let state = output.state.as_ref();
            let list = |key: &str| -> Vec<String> {
                state
                    .and_then(|s| s.get(key))
                    .and_then(Value::as_array)
                    .map(|a| {
                        a.iter()
                            .filter_map(|v| v.get("name").and_then(Value::as_str))
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default()
            };
            let found = list("tools");
            if found.is_empty() {
                return card.block(Block::Markdown { text: output.content.clone() });
            }
            let activated: Vec<String> = state
                .and_then(|s| s.get("activated"))
                .and_then(Value::as_array)
                .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                .unwrap_or_default();
            card.block(Block::Fields {
                fields: vec![
                    Field { label: "found".to_owned(), value: found.join(", ") },
                    Field {
                        label: "declared now".to_owned(),
                        value: if activated.is_empty() {
                            "none (already declared)".to_owned()
                        } else {
                            activated.join(", ")
                        },
                    },
                ],
            })
        }
    }
}

#[cfg(feature = "render")]
pub use render::ToolSearchRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: ToolSearchRender = ToolSearchRender;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn manifest_round_trips_and_waits_for_deferred_tools() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
        assert_eq!(manifest.exposure, Exposure::WhenDeferred);
        assert!(SYSTEM_ROLE.contains("{{deferred_tools}}"));
    }
}
