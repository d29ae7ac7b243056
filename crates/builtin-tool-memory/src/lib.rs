//! The memory tool: what the agent keeps about the person across sessions — their identity,
//! preferences, experiences and free notes — stored in the journal's database through the
//! storage service (`tool_core::storage::RecordStore`), per tenant and person, and optionally per
//! project (the working folder's repository).
//!
//! ```
//! let manifest = builtin_tool_memory::manifest();
//! let names: Vec<&str> = manifest.apis.iter().map(|api| api.name.as_str()).collect();
//! assert_eq!(names, ["addMemory", "searchMemory", "updateMemory", "removeMemory"]);
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "memory";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The collection memories are kept in.
pub const COLLECTION: &str = "memory";

/// The longest title.
pub const MAX_TITLE: usize = 120;

/// The longest memory.
pub const MAX_CONTENT: usize = 2_000;

/// How many memories one person keeps by default.
pub const DEFAULT_LIMIT: u64 = 1_000;

tool_core::api_enum! {
    /// The APIs of the memory tool.
    pub enum MemoryApi {
        /// Remember something.
        Add = "addMemory",
        /// Find what is remembered.
        Search = "searchMemory",
        /// Change a memory.
        Update = "updateMemory",
        /// Forget a memory.
        Remove = "removeMemory",
    }
}

/// What kind of thing a memory is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    /// Who the person is: name, role, team, languages they work in.
    Identity,
    /// How they like things done: style, tools, formats, what to avoid.
    Preferences,
    /// What happened and was learnt: a decision, a fix that worked, a mistake not to repeat.
    Experiences,
    /// Anything else worth keeping.
    Notes,
}

impl Category {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Identity => "identity",
            Self::Preferences => "preferences",
            Self::Experiences => "experiences",
            Self::Notes => "notes",
        }
    }
}

/// Where a memory applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Everywhere the person works.
    Person,
    /// Only in this project (the working folder's repository).
    Project,
}

/// Arguments of `addMemory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct AddArgs {
    /// What kind of memory.
    pub category: Category,
    /// A short title (at most 120 characters), e.g. "Prefers tabs".
    pub title: String,
    /// The memory itself, one self-contained fact in a sentence or two (at most 2 000
    /// characters). Never a secret.
    pub content: String,
    /// `person` (default): everywhere; `project`: only in this project.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<Scope>,
}

/// Arguments of `searchMemory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for; leave out to list the most recent memories.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<String>,
    /// Only this category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    /// How many to return (default 10, at most 50).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u32>,
}

/// Arguments of `updateMemory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateArgs {
    /// The memory's id (from `searchMemory` or `addMemory`).
    pub id: String,
    /// A new title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// The new content (replaces the old).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// A new category.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
}

/// Arguments of `removeMemory`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveArgs {
    /// The memory's id.
    pub id: String,
}

/// The tool's manifest. Writes are writes: they go through approvals like any other (a mode or
/// an allow-list may let them run).
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Memory", "What the agent remembers about the person").icon("🧠"),
    )
    .intervention(Intervention::Required.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<AddArgs>(
            MemoryApi::Add.name(),
            "Remember one durable fact about the person (a preference, a correction, who they are) \
                 for later sessions.",
        )
        .tier(Tier::Write)
        .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<SearchArgs>(
            MemoryApi::Search.name(),
            "Find what is remembered about the person (full text; without a query, the most recent).",
        )
        .tier(Tier::Read)
        .intervention(Intervention::Never.into())
        .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<UpdateArgs>(MemoryApi::Update.name(), "Change a memory that is out of date.")
            .tier(Tier::Write)
            .timeout_ms(10_000),
    )
    .api(
        ApiSpec::new::<RemoveArgs>(MemoryApi::Remove.name(), "Forget a memory that is wrong or unwanted.")
            .tier(Tier::Write)
            .timeout_ms(10_000),
    )
}

/// The project a working directory belongs to (its repository's root, else the folder).
#[cfg(feature = "runtime")]
pub use computer_runtime::scope::project_of;

#[cfg(feature = "runtime")]
mod runtime;
#[cfg(feature = "runtime")]
pub use runtime::{MemoryRuntime, MemorySettings, runtime};

#[cfg(feature = "render")]
mod render;
#[cfg(feature = "render")]
pub use render::{MemoryRender, RENDER};
