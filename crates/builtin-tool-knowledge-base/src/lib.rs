//! The knowledge-base tool: folders of documentation a person or operator added (Markdown, text,
//! HTML through the web tool's extractor, source code, PDF text), cut into chunks that follow
//! their structure, kept in the journal's database (SQLite by default, Postgres across instances)
//! through the knowledge store (`tool_core::knowledge`) and ranked by the tool's own BM25 index
//! ([`index`]), built from the store and rebuilt when a base changes.
//!
//! The model searches ([`KnowledgeBaseApi::Search`]), reads around a hit
//! ([`KnowledgeBaseApi::Read`]) and lists the bases it can see ([`KnowledgeBaseApi::List`]);
//! people add, sync and remove bases with [`ingest::add_base`] (`toolhost kb`, the server's
//! `/v1/knowledge-bases`).
//!
//! ```
//! let manifest = builtin_tool_knowledge_base::manifest();
//! let names: Vec<&str> = manifest.apis.iter().map(|api| api.name.as_str()).collect();
//! assert_eq!(names, ["searchKnowledgeBase", "readKnowledgeBase", "listKnowledgeBases"]);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

pub mod chunk;
pub mod query;

/// The tool's identifier.
pub const IDENTIFIER: &str = "knowledge-base";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// Hits a search returns unless asked for another number.
pub const DEFAULT_HITS: u32 = 5;

/// The most hits a search returns.
pub const MAX_HITS: u32 = 20;

/// The most lines one read returns.
pub const MAX_READ_LINES: u32 = 400;

tool_core::api_enum! {
    /// The APIs of the knowledge-base tool.
    pub enum KnowledgeBaseApi {
        /// Find passages.
        Search = "searchKnowledgeBase",
        /// Read a source around a passage.
        Read = "readKnowledgeBase",
        /// The bases there are.
        List = "listKnowledgeBases",
    }
}

/// Arguments of `searchKnowledgeBase`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// What to look for: a question or keywords, in the words the documents would use.
    pub query: String,
    /// Only this base (by name); leave out to search every base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    /// How many passages (default 5, at most 20).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Arguments of `readKnowledgeBase`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The `source` of a search hit.
    pub source: String,
    /// Lines to read: `N-M`, `N-` or `N` (default: from line 1; at most 400 lines).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub range: Option<String>,
    /// The base the source is in, when several hold it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
}

/// Arguments of `listKnowledgeBases`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

/// The tool's manifest: reading what people added, so nothing to approve.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Knowledge base", "Search the documentation people added").icon("📚"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<SearchArgs>(
            KnowledgeBaseApi::Search.name(),
            "Search the knowledge bases (documentation people added) for passages. Returns \
             <hit source heading lines score>passage</hit>; cite the source and lines you use.",
        )
        .tier(Tier::Read)
        .timeout_ms(15_000),
    )
    .api(
        ApiSpec::new::<ReadArgs>(
            KnowledgeBaseApi::Read.name(),
            "Read lines of a knowledge-base source around a search hit, with line numbers.",
        )
        .tier(Tier::Read)
        .timeout_ms(15_000),
    )
    .api(
        ApiSpec::new::<ListArgs>(
            KnowledgeBaseApi::List.name(),
            "List the knowledge bases you can search, with their sizes.",
        )
        .tier(Tier::Read)
        .timeout_ms(10_000),
    )
}

/// A line range as the model writes it: `N-M`, `N-`, `N` (1-based, inclusive); `None` when it is
/// not one.
pub fn parse_range(range: &str) -> Option<(u32, Option<u32>)> {
    let range = range.trim().trim_start_matches(':');
    let (first, last) = match range.split_once('-') {
        Some((first, last)) => (first.trim(), Some(last.trim())),
        None => (range, None),
    };
    let first: u32 = first.parse().ok().filter(|n| *n >= 1)?;
    match last {
        None => Some((first, Some(first))),
        Some("") => Some((first, None)),
        Some(last) => {
            let last: u32 = last.parse().ok()?;
            (last >= first).then_some((first, Some(last)))
        }
    }
}

#[cfg(feature = "runtime")]
pub mod index;
#[cfg(feature = "runtime")]
pub mod ingest;

#[cfg(feature = "runtime")]
mod runtime;
#[cfg(feature = "runtime")]
pub use runtime::{KnowledgeBaseRuntime, runtime};

#[cfg(feature = "render")]
mod render;
#[cfg(feature = "render")]
pub use render::{KnowledgeBaseRender, RENDER};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("10-20"), Some((10, Some(20))));
        assert_eq!(parse_range(":5-"), Some((5, None)));
        assert_eq!(parse_range("7"), Some((7, Some(7))));
        assert_eq!(parse_range("0-3"), None);
        assert_eq!(parse_range("9-3"), None);
        assert_eq!(parse_range("a-b"), None);
    }

    #[test]
    fn manifest_round_trips() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
    }
}
