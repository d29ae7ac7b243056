//! Files, search and processes for Toolhost tools, shared by the server and the TUI.
//!
//! [`ComputerRuntime`] is the one interface tools use to touch a machine: list, read, write,
//! edit, search by name, move, rename, glob, grep, and run, poll and kill commands. Each operation
//! takes a plain request and returns a typed, serialisable state; [`format`] turns each state into
//! the compact text a model reads. [`LocalComputer`] implements it on this machine; a client
//! executor on a user's device runs the same implementation there.
//!
//! Deciding whether a path may be touched is policy and belongs to the pipeline's audits; [`scope`]
//! provides the resolution they need (`..` and symlinks resolved before any decision). The runtime
//! then opens each path once, beneath the session's folders ([`beneath`]), so that what was decided
//! is what is opened.
//!
//! ```no_run
//! # async fn demo() -> Result<(), computer_runtime::ComputerError> {
//! use computer_runtime::{ComputerRuntime, LocalComputer, files::ReadRequest};
//! use tool_core::{FileBoundary, FileRoot};
//!
//! let computer = LocalComputer::default();
//! let here = std::env::current_dir().unwrap();
//! let files = FileBoundary { roots: vec![FileRoot::writable(&here)], ..FileBoundary::default() };
//! let request = ReadRequest { path: here.join("Cargo.toml"), offset: Some(1), limit: Some(20) };
//! let state = computer.read(&files, request).await?;
//! println!("{}", computer_runtime::format::read(&state));
//! # Ok(()) }
//! ```
#![deny(missing_docs)]

pub mod beneath;
pub mod edit;
pub mod env;
mod error;
pub mod files;
pub mod format;
pub mod interactive;
pub mod ledger;
mod limits;
mod local;
pub mod process;
pub mod scope;
pub mod search;
pub mod terminal;

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::FileBoundary;

pub use error::ComputerError;
pub use local::{LocalComputer, LocalConfig};

use edit::EditSpec;
use files::{
    ListRequest, ListState, MoveItem, MoveResult, MoveState, ReadRequest, ReadState, WriteRequest, WriteState,
};
use process::{CommandSpec, KillState, OutputState, RunState};
use search::{FoundState, GlobRequest, GrepRequest, GrepState, NameSearchRequest};

/// Files, search and processes on one machine.
///
/// Every file operation takes the session's [`FileBoundary`]: the runtime opens each path once,
/// beneath a handle on one of its roots pinned for the session (see [`beneath`]), so a path
/// audited by the pipeline cannot be swapped for a link before it is opened.
#[async_trait]
pub trait ComputerRuntime: Send + Sync + std::fmt::Debug {
    /// Lists one directory.
    async fn list(&self, files: &FileBoundary, request: ListRequest) -> Result<ListState, ComputerError>;
    /// Reads a line range of a text file.
    async fn read(&self, files: &FileBoundary, request: ReadRequest) -> Result<ReadState, ComputerError>;
    /// Writes a whole file atomically.
    async fn write(&self, files: &FileBoundary, request: WriteRequest) -> Result<WriteState, ComputerError>;
    /// Applies find-and-replace edits to a text file.
    async fn edit(&self, files: &FileBoundary, request: EditRequest) -> Result<EditState, ComputerError>;
    /// Finds files and folders by name.
    async fn search(
        &self,
        files: &FileBoundary,
        request: NameSearchRequest,
    ) -> Result<FoundState, ComputerError>;
    /// Moves files; each item succeeds or fails on its own.
    async fn move_items(
        &self,
        files: &FileBoundary,
        items: Vec<MoveItem>,
    ) -> Result<MoveState, ComputerError>;
    /// Renames a file or folder in place.
    async fn rename(
        &self,
        files: &FileBoundary,
        path: PathBuf,
        new_name: String,
    ) -> Result<MoveResult, ComputerError>;
    /// Finds files by glob.
    async fn glob(&self, files: &FileBoundary, request: GlobRequest) -> Result<FoundState, ComputerError>;
    /// Searches file contents.
    async fn grep(&self, files: &FileBoundary, request: GrepRequest) -> Result<GrepState, ComputerError>;
    /// Runs a shell command in the foreground or background.
    async fn run_command(
        &self,
        spec: CommandSpec,
        cancel: &CancellationToken,
    ) -> Result<RunState, ComputerError>;
    /// Output of a background command written since the last poll; only its `owner` (the
    /// session that started it) sees it.
    async fn command_output(&self, owner: &str, command_id: &str) -> Result<OutputState, ComputerError>;
    /// Kills a background command's whole process group; only its `owner` may.
    async fn kill_command(&self, owner: &str, command_id: &str) -> Result<KillState, ComputerError>;
    /// Kills every background command of `owner` (a session that ended) and its long-lived
    /// programs; returns how many background commands.
    async fn end_owner(&self, owner: &str) -> usize;
    /// Starts a long-lived program (an interpreter) for a session, in its sandbox and control
    /// group, talked to through pipes.
    async fn start_interactive(
        &self,
        spec: interactive::InteractiveSpec,
    ) -> Result<interactive::Interactive, ComputerError>;
}

/// Edits to one file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditRequest {
    /// The file.
    pub path: PathBuf,
    /// The edits, all matched against the current content and applied together.
    pub edits: Vec<EditSpec>,
}

/// The outcome of an edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EditState {
    /// The file edited.
    pub path: PathBuf,
    /// Occurrences replaced.
    pub replacements: usize,
    /// Whether a fuzzy match was needed.
    pub fuzzy: bool,
    /// Unified diff of the change.
    pub diff: String,
    /// First changed line (1-based) in the new text.
    pub first_changed_line: usize,
    /// Lines added.
    pub lines_added: usize,
    /// Lines removed.
    pub lines_removed: usize,
}
