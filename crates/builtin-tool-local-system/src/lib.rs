//! The local-system tool: files, search and commands on the machine that runs it.
//!
//! Eleven APIs ([`LocalSystemApi`]) over an injected [`ComputerRuntime`](computer_runtime::ComputerRuntime):
//! read, write and edit files; search by name, glob and grep; move files; run, poll and kill
//! commands; apply or discard a previewed write (in sessions that preview writes). File APIs are guarded by the `pathScope` dynamic audit (anything outside the session's
//! working directory and the temp folders asks a person); `runCommand` always asks unless the
//! session auto-runs.
//!
//! The crate exports the four parts of a tool, as every builtin tool does: [`manifest()`],
//! [`SYSTEM_ROLE`], `runtime(&Services)` building a `LocalSystemRuntime` (feature `runtime`) and
//! `RENDER` (feature `render`).
//!
//! ```
//! let manifest = builtin_tool_local_system::manifest();
//! assert_eq!(manifest.identifier, "local-system");
//! assert_eq!(manifest.apis.len(), 11);
//! ```
#![deny(missing_docs)]

mod args;
mod manifest;
#[cfg(feature = "render")]
mod render;
#[cfg(feature = "runtime")]
mod runtime;

pub use args::*;
pub use manifest::{IDENTIFIER, LocalSystemApi, PATH_SCOPE_AUDIT, SYSTEM_ROLE, manifest};
#[cfg(feature = "render")]
pub use render::LocalSystemRender;
#[cfg(feature = "runtime")]
pub use runtime::{LocalSystemRuntime, runtime};

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: LocalSystemRender = LocalSystemRender;
