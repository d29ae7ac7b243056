//! Argument types of every API; the schemas the model sees are derived from these.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Arguments of `readFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadFileArgs {
    /// The file to read, absolute or relative to the working directory, or an internal address
    /// such as `skill://NAME/PATH`. A `:N-M` suffix reads lines N to M (`:N-` from N on, `:raw`
    /// the text without notes).
    pub path: String,
    /// First line to read, 1-based. Default 1.
    #[serde(default)]
    pub offset: Option<u64>,
    /// How many lines to read. Default and maximum 2000.
    #[serde(default)]
    pub limit: Option<u64>,
}

/// Arguments of `writeFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct WriteFileArgs {
    /// The file to write; missing parent folders are created.
    pub path: String,
    /// The whole new content of the file.
    pub content: String,
    /// Set by resolveChange when it applies a previewed change; never set it yourself.
    #[serde(default)]
    pub preview_token: Option<String>,
}

/// One replacement in `editFile`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditItem {
    /// The exact text to replace, unique in the file unless `replaceAll`.
    pub old_text: String,
    /// The text to put in its place.
    pub new_text: String,
    /// Replace every occurrence instead of exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `editFile`: either one replacement (`oldText`, `newText`) or several (`edits`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct EditFileArgs {
    /// The file to edit.
    pub path: String,
    /// The exact text to replace (single-edit form).
    #[serde(default)]
    pub old_text: Option<String>,
    /// The replacement (single-edit form).
    #[serde(default)]
    pub new_text: Option<String>,
    /// Replace every occurrence (single-edit form).
    #[serde(default)]
    pub replace_all: Option<bool>,
    /// Several replacements, all matched against the current file and applied together; they
    /// must not overlap.
    #[serde(default)]
    pub edits: Option<Vec<EditItem>>,
    /// Set by resolveChange when it applies a previewed change; never set it yourself.
    #[serde(default)]
    pub preview_token: Option<String>,
}

/// Arguments of `searchFiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SearchFilesArgs {
    /// Text the file or folder name contains (case-insensitive), or a glob on the name (`*.md`).
    pub query: String,
    /// The folder to search. Default: the working directory.
    #[serde(default)]
    pub directory: Option<String>,
    /// Include hidden files and folders.
    #[serde(default)]
    pub include_hidden: Option<bool>,
    /// At most this many results. Default 200.
    #[serde(default)]
    pub limit: Option<u32>,
}

/// One move of `moveFiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MoveEntry {
    /// The current path.
    pub old_path: String,
    /// The new path; it must not exist.
    pub new_path: String,
}

/// Arguments of `moveFiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MoveFilesArgs {
    /// The moves; each succeeds or fails on its own.
    pub items: Vec<MoveEntry>,
}

/// Arguments of `globFiles`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GlobFilesArgs {
    /// A glob such as `**/*.rs` or `src/*.{ts,tsx}`; `*` stays within a folder, `**` crosses
    /// folders.
    pub pattern: String,
    /// The folder the pattern is relative to. Default: the working directory.
    #[serde(default)]
    pub directory: Option<String>,
    /// Include hidden files and folders.
    #[serde(default)]
    pub include_hidden: Option<bool>,
    /// Include files excluded by ignore files and dependency folders such as node_modules.
    #[serde(default)]
    pub include_ignored: Option<bool>,
}

/// Arguments of `grepContent`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GrepContentArgs {
    /// A regular expression (Rust syntax), or literal text with `fixedStrings`.
    pub pattern: String,
    /// A file or folder to search. Default: the working directory.
    #[serde(default)]
    pub path: Option<String>,
    /// Only files matching this glob (`*.rs`, `src/**/*.ts`).
    #[serde(default)]
    pub glob: Option<String>,
    /// Match case-insensitively.
    #[serde(default)]
    pub case_insensitive: Option<bool>,
    /// Treat the pattern as literal text.
    #[serde(default)]
    pub fixed_strings: Option<bool>,
    /// Include hidden files and folders.
    #[serde(default)]
    pub include_hidden: Option<bool>,
    /// At most this many matching lines. Default 200.
    #[serde(default)]
    pub max_results: Option<u32>,
}

/// Arguments of `runCommand`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RunCommandArgs {
    /// The shell command line, run with bash in the working directory.
    pub command: String,
    /// What the command does, in a few words, for the person approving it.
    #[serde(default)]
    pub description: Option<String>,
    /// Run in the background and return at once with a command id.
    #[serde(default)]
    pub background: Option<bool>,
    /// Timeout in milliseconds for a foreground command. Default 60000, maximum 600000.
    #[serde(default)]
    pub timeout: Option<u64>,
    /// Run outside the sandbox, only after it denied something the command really needs; a person is always asked first.
    #[serde(default)]
    pub escalate: Option<bool>,
}

/// Arguments of `getCommandOutput`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct CommandIdArgs {
    /// The id `runCommand` returned for a background command.
    pub command_id: String,
}

/// Arguments of `killCommand`.
pub type KillCommandArgs = CommandIdArgs;

/// What to do with a previewed change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum ChangeAction {
    /// Make the change (a person approves it as the write it is).
    Apply,
    /// Drop it.
    Discard,
}

/// Arguments of `resolveChange`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResolveChangeArgs {
    /// The token a previewed writeFile or editFile returned.
    pub token: String,
    /// `apply` or `discard`.
    pub action: ChangeAction,
}
