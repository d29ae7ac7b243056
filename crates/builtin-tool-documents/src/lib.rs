//! The documents tool: the model's own documents for the person — reports, plans, drafts —
//! kept in the journal's database through the storage service, for a session or for a project,
//! read by line ranges and edited with the same exact-then-fuzzy engine as files.
//!
//! ```
//! let manifest = builtin_tool_documents::manifest();
//! let names: Vec<&str> = manifest.apis.iter().map(|api| api.name.as_str()).collect();
//! assert_eq!(names, ["createDocument", "readDocument", "editDocument", "listDocuments"]);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "documents";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The collection documents are kept in.
pub const COLLECTION: &str = "documents";

/// The largest document, in bytes.
pub const MAX_BYTES: usize = 1 << 20;

/// The longest name.
pub const MAX_NAME: usize = 120;

/// How many documents one person keeps.
pub const MAX_DOCUMENTS: u64 = 1_000;

tool_core::api_enum! {
    /// The APIs of the documents tool.
    pub enum DocumentsApi {
        /// Write a new document.
        Create = "createDocument",
        /// Read a document, whole or by lines.
        Read = "readDocument",
        /// Change parts of a document.
        Edit = "editDocument",
        /// List the documents.
        List = "listDocuments",
    }
}

/// Where a document lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// This conversation only.
    Session,
    /// Every session in this project (the working folder's repository).
    Project,
}

impl Scope {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Session => "session",
            Self::Project => "project",
        }
    }
}

/// Arguments of `createDocument`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// Its name, unique in its scope (e.g. `release-plan.md`).
    pub name: String,
    /// The whole text (Markdown is shown formatted; at most 1 MiB).
    pub content: String,
    /// `session` (default): this conversation; `project`: every session in this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// Arguments of `readDocument`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// The document's name (or id).
    pub name: String,
    /// Lines to read, `N-M` (1-based, inclusive), `N-` or `N`; the whole document when left out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lines: Option<String>,
}

/// One replacement in a document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditItem {
    /// The exact text to replace (copied from the document).
    pub old_text: String,
    /// Its replacement.
    pub new_text: String,
    /// Replace every occurrence rather than exactly one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_all: Option<bool>,
}

/// Arguments of `editDocument`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// The document's name (or id).
    pub name: String,
    /// The replacements, matched against the current text and applied together.
    pub edits: Vec<EditItem>,
}

/// Arguments of `listDocuments`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {}

/// The tool's manifest. Documents are the model's own workspace for the person: writes are
/// journalled as writes (a read-only session may not make them) but ask no one.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Documents", "The agent's documents for the person").icon("📄"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<CreateArgs>(
            DocumentsApi::Create.name(),
            "Write a new document for the person (a report, plan or draft) that outlives this reply.",
        )
        .tier(Tier::Write)
        .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<ReadArgs>(DocumentsApi::Read.name(), "Read a document, whole or a range of lines.")
            .tier(Tier::Read)
            .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<EditArgs>(
            DocumentsApi::Edit.name(),
            "Replace exact passages of a document (as editFile does for files).",
        )
        .tier(Tier::Write)
        .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<ListArgs>(
            DocumentsApi::List.name(),
            "List this session's and this project's documents.",
        )
        .tier(Tier::Read)
        .timeout_ms(10_000),
    )
}

/// Where a scope's documents are kept: the record's project field names the session or the
/// project, so that one query finds one scope's.
pub fn place(scope: Scope, session_id: &str, project: Option<&str>) -> Option<String> {
    match scope {
        Scope::Session => Some(format!("session:{session_id}")),
        Scope::Project => project.map(|project| format!("project:{project}")),
    }
}

/// A line selector: `N-M`, `N-` or `N` (1-based, inclusive) → the 0-based start and the end
/// (exclusive; `None` to the end).
pub fn parse_lines(selector: &str) -> Result<(usize, Option<usize>), String> {
    let bad = || format!("`{selector}` is not a line range; use N-M, N- or N (1-based)");
    let number = |text: &str| text.trim().parse::<usize>().ok().filter(|n| *n >= 1);
    match selector.split_once('-') {
        Some((start, "")) => Ok((number(start).ok_or_else(bad)? - 1, None)),
        Some((start, end)) => {
            let (start, end) = (number(start).ok_or_else(bad)?, number(end).ok_or_else(bad)?);
            if end < start {
                return Err(format!("`{selector}` ends before it starts"));
            }
            Ok((start - 1, Some(end)))
        }
        None => {
            let line = number(selector).ok_or_else(bad)?;
            Ok((line - 1, Some(line)))
        }
    }
}

#[cfg(feature = "runtime")]
mod runtime;
#[cfg(feature = "runtime")]
pub use runtime::{DocumentsRuntime, runtime, visible_documents};

#[cfg(feature = "render")]
mod render;
#[cfg(feature = "render")]
pub use render::{DocumentsRender, RENDER};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_selectors() {
        assert_eq!(parse_lines("3-5"), Ok((2, Some(5))));
        assert_eq!(parse_lines("7-"), Ok((6, None)));
        assert_eq!(parse_lines("4"), Ok((3, Some(4))));
        for bad in ["0-2", "a-b", "5-3", "", "-3"] {
            assert!(parse_lines(bad).is_err(), "{bad}");
        }
    }
}
