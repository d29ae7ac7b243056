//! A person's or operator's own programs around each call: Claude Code's `PreToolUse`,
//! `PermissionRequest` and `PostToolUse` hooks. The pipeline asks them at three points; what runs
//! them (commands, webhooks, their configuration and protocol) lives in the `hooks` crate.
//!
//! - **Before approval** ([`CallHooks::pre_tool_use`]): a hook may deny the call, allow it without
//!   asking a person, insist that a person is asked, rewrite its input (validated again, then
//!   approved as rewritten) and add context for the model. Policy's own blocks (the operator's
//!   deny list, read-only mode, files outside a hard root) stand whatever a hook answers.
//! - **Instead of a person** ([`CallHooks::permission_request`]): where a person would be asked, a
//!   hook may answer for them.
//! - **After a call that succeeded** ([`CallHooks::post_tool_use`]): context or a reason for the
//!   model, appended to what it reads.
//!
//! A hook's decision is journalled with `decided_by` = `hook:NAME`.

use async_trait::async_trait;
use serde_json::Value;
use tool_core::ToolOutput;

use crate::session::SessionConfig;

/// What hooks see of a call.
#[derive(Debug, Clone, Copy)]
pub struct HookedCall<'a> {
    /// The call id.
    pub call_id: &'a str,
    /// The function name the model used.
    pub function: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The API.
    pub api: &'a str,
    /// The arguments (validated).
    pub arguments: &'a Value,
    /// The session the call is in.
    pub session: &'a SessionConfig,
}

/// What a hook decided about a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookDecision {
    /// Run it without asking a person (policy's blocks still stand).
    Allow,
    /// Do not run it.
    Deny,
    /// Ask a person even if policy would run it.
    Ask,
}

/// The combined answer of the hooks that matched a call at one point.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct HookAnswer {
    /// The decision, if a hook made one.
    pub decision: Option<HookDecision>,
    /// The hook that made it (`hook:NAME`), journalled as `decided_by`.
    pub decided_by: Option<String>,
    /// Why (for a denial: what the model is told).
    pub reason: Option<String>,
    /// New arguments for the call.
    pub updated_input: Option<Value>,
    /// Text for the model (appended to the result it reads).
    pub context: Vec<String>,
    /// What people are told: hooks that failed, timed out or said something for the person.
    pub notes: Vec<HookNote>,
}

/// Something a hook run reports to people.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookNote {
    /// The hook (`hook:NAME`).
    pub hook: String,
    /// What happened.
    pub message: String,
}

/// The hooks of a session.
#[async_trait]
pub trait CallHooks: Send + Sync {
    /// Whether any hook could match this call at all (no process is started otherwise).
    fn matches(&self, event: &str, call: &HookedCall<'_>) -> bool;

    /// `PreToolUse`: before approval.
    async fn pre_tool_use(&self, call: &HookedCall<'_>) -> HookAnswer;

    /// `PermissionRequest`: a person is about to be asked, for `reason`, as approval
    /// `approval_id` (what a person decides it by, should the hooks not answer).
    async fn permission_request(&self, call: &HookedCall<'_>, reason: &str, approval_id: &str) -> HookAnswer;

    /// `PostToolUse`: the call succeeded with `output`.
    async fn post_tool_use(&self, call: &HookedCall<'_>, output: &ToolOutput) -> HookAnswer;
}
