//! The typed event stream of a session, in completion order.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_core::{Progress, ToolOutput};

/// One thing that happened to a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum Event {
    /// Tool search found deferred functions: the model is given their declarations from its next
    /// turn on (an MCP client is told its tool list changed).
    #[serde(rename = "tools.activated")]
    ToolsActivated {
        /// The call that found them.
        call_id: String,
        /// Their model-facing names.
        names: Vec<String>,
    },
    /// The call was resolved, parsed and journalled.
    #[serde(rename = "call.proposed")]
    Proposed {
        /// The call id.
        call_id: String,
        /// The tool.
        tool: String,
        /// The API.
        api: String,
        /// The validated arguments.
        arguments: Value,
    },
    /// A person is asked.
    #[serde(rename = "permission.requested")]
    PermissionRequested {
        /// The call id.
        call_id: String,
        /// The approval's id, to decide it with.
        approval_id: String,
        /// Why a person is asked.
        reason: String,
    },
    /// The call may run.
    #[serde(rename = "permission.granted")]
    PermissionGranted {
        /// The call id.
        call_id: String,
        /// How (`policy`, `allow_once`, `allow_session`, `allow_always`, `remembered`…).
        decision: String,
        /// Who decided.
        by: String,
        /// The approval a person decided, when one was asked.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_id: Option<String>,
    },
    /// A person (or a hook) denied the call, or no one decided in time.
    #[serde(rename = "permission.denied")]
    PermissionDenied {
        /// The call id.
        call_id: String,
        /// What the model is told.
        message: String,
        /// The approval that was asked, when one was.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        approval_id: Option<String>,
        /// `expired` when no one decided in time.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<String>,
    },
    /// The runtime started.
    #[serde(rename = "call.started")]
    Started {
        /// The call id.
        call_id: String,
        /// The deadline, as milliseconds from now.
        timeout_ms: u64,
    },
    /// A streaming update.
    #[serde(rename = "call.progress")]
    Progress {
        /// The call id.
        call_id: String,
        /// The update.
        progress: Progress,
    },
    /// The call succeeded.
    #[serde(rename = "call.finished")]
    Finished {
        /// The call id.
        call_id: String,
        /// The result.
        output: ToolOutput,
    },
    /// The call failed (errors, timeouts, cancellations, denials).
    #[serde(rename = "call.failed")]
    Failed {
        /// The call id.
        call_id: String,
        /// The result.
        output: ToolOutput,
    },
    /// A person's or operator's hook said something people should see (it failed, timed out,
    /// or had a message for the person).
    #[serde(rename = "hook.note")]
    HookNote {
        /// The call id.
        call_id: String,
        /// The hook (`hook:NAME`).
        hook: String,
        /// What happened.
        message: String,
    },
    /// A call asks the person a question (`askUser`): answer it as an approval, with
    /// `{"kind": "answer", "answer": {...}}`, or decline it with a denial.
    #[serde(rename = "question.asked")]
    QuestionAsked {
        /// The call id.
        call_id: String,
        /// The id to answer it with (on the approvals channel).
        approval_id: String,
        /// The question.
        question: tool_core::Question,
    },
    /// A question was answered, declined, or given up on.
    #[serde(rename = "question.settled")]
    QuestionSettled {
        /// The call id.
        call_id: String,
        /// The question's id.
        approval_id: String,
        /// `answered`, `declined`, `expired` or `cancelled`.
        outcome: String,
        /// Who answered or declined.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        by: Option<String>,
    },
    /// Policy blocked the call without asking.
    #[serde(rename = "call.blocked")]
    Blocked {
        /// The call id.
        call_id: String,
        /// Why.
        reason: String,
    },
}

impl Event {
    /// The call the event is about.
    pub fn call_id(&self) -> &str {
        match self {
            Self::Proposed { call_id, .. }
            | Self::PermissionRequested { call_id, .. }
            | Self::PermissionGranted { call_id, .. }
            | Self::PermissionDenied { call_id, .. }
            | Self::Started { call_id, .. }
            | Self::Progress { call_id, .. }
            | Self::Finished { call_id, .. }
            | Self::Failed { call_id, .. }
            | Self::Blocked { call_id, .. }
            | Self::HookNote { call_id, .. }
            | Self::QuestionAsked { call_id, .. }
            | Self::QuestionSettled { call_id, .. }
            | Self::ToolsActivated { call_id, .. } => call_id,
        }
    }

    /// The event's type string (`call.finished`…).
    pub fn kind(&self) -> &'static str {
        match self {
            Self::Proposed { .. } => "call.proposed",
            Self::PermissionRequested { .. } => "permission.requested",
            Self::PermissionGranted { .. } => "permission.granted",
            Self::PermissionDenied { .. } => "permission.denied",
            Self::Started { .. } => "call.started",
            Self::Progress { .. } => "call.progress",
            Self::Finished { .. } => "call.finished",
            Self::Failed { .. } => "call.failed",
            Self::Blocked { .. } => "call.blocked",
            Self::HookNote { .. } => "hook.note",
            Self::QuestionAsked { .. } => "question.asked",
            Self::QuestionSettled { .. } => "question.settled",
            Self::ToolsActivated { .. } => "tools.activated",
        }
    }
}

/// Sees every event of every session an executor opens, as it is emitted (before the session's
/// own subscribers): how a front end carries events beyond one session's stream (a tenant's
/// stream, other instances). It runs on the pipeline's path: it must not block.
pub trait EventTap: Send + Sync + std::fmt::Debug {
    /// One event of `session`.
    fn event(&self, session: &crate::Session, event: &Event);
}
