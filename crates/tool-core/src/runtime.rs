//! The runtime contract: how a tool runs one call.
//!
//! A runtime receives its services by injection when the registry builds it for a request, and
//! implements [`ToolRuntime`]. It never panics or hangs on bad input: every failure becomes a
//! [`ToolOutput`] with `success == false` and a typed [`ToolError`] the model can act on.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::future::BoxFuture;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sandbox::CallSandbox;

/// Runs the calls of one tool.
pub trait ToolRuntime: Send + Sync {
    /// Executes `api` with already validated `arguments`.
    ///
    /// The future must finish soon after `context.cancel` fires, and must not outlive
    /// `context.deadline` by more than a short grace period.
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput>;
}

/// What a call produced: `content` for the model, `state` for people, both from one call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolOutput {
    /// Text the model reads back.
    pub content: String,
    /// Structured state for render hooks and the journal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<Value>,
    /// Whether the call did what was asked.
    pub success: bool,
    /// Why it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<ToolError>,
}

impl ToolOutput {
    /// A successful output.
    pub fn ok(content: impl Into<String>) -> Self {
        Self { content: content.into(), state: None, success: true, error: None }
    }

    /// A failed output whose content is the error message.
    pub fn error(kind: ErrorKind, message: impl Into<String>) -> Self {
        let message = message.into();
        Self {
            content: message.clone(),
            state: None,
            success: false,
            error: Some(ToolError { kind, message }),
        }
    }

    /// Attaches state.
    #[must_use]
    pub fn with_state(mut self, state: Value) -> Self {
        self.state = Some(state);
        self
    }

    /// Attaches state serialised from `state`; a serialisation failure leaves the state empty.
    #[must_use]
    pub fn with_state_of<T: Serialize>(mut self, state: &T) -> Self {
        self.state = serde_json::to_value(state).ok();
        self
    }
}

/// A typed error of a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct ToolError {
    /// The class of failure.
    pub kind: ErrorKind,
    /// What went wrong and what to do next.
    pub message: String,
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind.as_str(), self.message)
    }
}

impl std::error::Error for ToolError {}

/// Classes of call failure, stable strings in the journal and over the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum ErrorKind {
    /// The model named a tool or API that does not exist.
    UnknownTool,
    /// The arguments do not parse or do not fit the schema.
    InvalidArguments,
    /// A file, command or other target does not exist.
    NotFound,
    /// The operating system refused.
    PermissionDenied,
    /// The target is in a state that forbids the call (exists already, ambiguous match…).
    Conflict,
    /// The call ran out of time.
    Timeout,
    /// The call was cancelled.
    Cancelled,
    /// Policy blocked the call without asking (headless, read-only).
    Blocked,
    /// A person denied the call.
    Denied,
    /// The tool ran and failed (non-zero exit, remote error).
    Execution,
    /// A bug or an unexpected failure inside Toolhost.
    Internal,
    /// Something the call needs before it may run is out of service for now (the journal could
    /// not record it): nothing ran; the same call may be retried in a few seconds.
    Unavailable,
}

impl ErrorKind {
    /// The stable string form.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::UnknownTool => "unknown_tool",
            Self::InvalidArguments => "invalid_arguments",
            Self::NotFound => "not_found",
            Self::PermissionDenied => "permission_denied",
            Self::Conflict => "conflict",
            Self::Timeout => "timeout",
            Self::Cancelled => "cancelled",
            Self::Blocked => "blocked",
            Self::Denied => "denied",
            Self::Execution => "execution",
            Self::Internal => "internal",
            Self::Unavailable => "unavailable",
        }
    }
}

/// Everything a runtime knows about the call it runs.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// The call id (`<parent>/<n>` for nested calls).
    pub call_id: String,
    /// The session the call belongs to.
    pub session_id: String,
    /// The user on whose behalf it runs.
    pub user_id: Option<String>,
    /// The session's working directory: the sandbox boundary comes from here, never from the
    /// model's arguments.
    pub working_directory: Option<PathBuf>,
    /// The sandbox the call's commands run in, from the session (never from the arguments).
    pub sandbox: Arc<CallSandbox>,
    /// Fires when the call is cancelled or its deadline passes.
    pub cancel: CancellationToken,
    /// When the call must be done.
    pub deadline: Option<Instant>,
    /// Where streaming progress goes.
    pub progress: ProgressSink,
    /// How this call runs other tools (through the same pipeline), when the front end allows it.
    pub nested: Option<NestedCaller>,
    /// The session's deferred functions and the way to declare them (tool search), when the front
    /// end's pipeline offers it.
    pub finder: Option<Arc<dyn ToolFinder>>,
    /// The session's skills (the `skills` tool activates them, `skill://` reads their files).
    pub skills: Arc<crate::skills::SkillSet>,
    /// Show the change this call would make, with a token to apply it, instead of making it (a
    /// session that previews writes, an API that is `previewable`).
    pub preview: bool,
    /// How this call asks the session's person a question, when the front end's pipeline can.
    pub asker: Option<crate::ask::PersonAsker>,
    /// The functions the session's model is given (a sub-agent declares some of them to its own
    /// model), when the front end's pipeline offers them.
    pub tools: Option<Arc<dyn SessionTools>>,
}

/// A function of the session, as its model is given it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionFunction {
    /// The name the model calls it by.
    pub name: String,
    /// The tool it belongs to (identifier).
    pub tool: String,
    /// The API, as the session declares it.
    pub api: crate::ApiSpec,
}

/// What a running call may know of its session's tools.
pub trait SessionTools: Send + Sync + fmt::Debug {
    /// The functions the session's model is given now (direct ones, and deferred ones tool search
    /// found), in a stable order.
    fn functions(&self) -> Vec<SessionFunction>;

    /// The system roles of these tools (identifiers), rendered for the session, joined by blank
    /// lines.
    fn roles(&self, tools: &[String]) -> String;
}

/// A function the session keeps out of the model's declarations until tool search finds it.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundTool {
    /// The name the model calls it by in this session.
    pub name: String,
    /// The tool it belongs to (identifier).
    pub tool: String,
    /// The tool's title (for a mounted MCP server, its name).
    pub title: String,
    /// The function's description.
    pub description: String,
    /// Its parameters' JSON Schema.
    pub parameters: serde_json::Value,
    /// Already declared to the model (found earlier in the session).
    pub declared: bool,
}

/// A session's deferred functions, as the pipeline hands them to tool search.
pub trait ToolFinder: Send + Sync + fmt::Debug {
    /// Every deferred function of the session, in a stable order.
    fn deferred(&self) -> Vec<FoundTool>;

    /// Declares these functions (by model-facing name) to the model from its next turn on;
    /// returns the names that were deferred and undeclared until now. Unknown names are ignored.
    fn activate(&self, names: &[String]) -> Vec<String>;
}

impl CallContext {
    /// A context with fresh cancellation, no deadline and no progress sink.
    pub fn new(call_id: impl Into<String>, session_id: impl Into<String>) -> Self {
        Self {
            call_id: call_id.into(),
            session_id: session_id.into(),
            user_id: None,
            working_directory: None,
            sandbox: Arc::default(),
            cancel: CancellationToken::new(),
            deadline: None,
            progress: ProgressSink::default(),
            nested: None,
            finder: None,
            skills: Arc::default(),
            preview: false,
            asker: None,
            tools: None,
        }
    }

    /// Sets the working directory.
    #[must_use]
    pub fn with_working_directory(mut self, dir: impl Into<PathBuf>) -> Self {
        self.working_directory = Some(dir.into());
        self
    }

    /// Sets the sandbox the call's commands run in.
    #[must_use]
    pub fn with_sandbox(mut self, sandbox: Arc<CallSandbox>) -> Self {
        self.sandbox = sandbox;
        self
    }

    /// Sets the deadline.
    #[must_use]
    pub fn with_deadline(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Sets the progress sink.
    #[must_use]
    pub fn with_progress(mut self, progress: ProgressSink) -> Self {
        self.progress = progress;
        self
    }

    /// Calls another tool by function name (or `tool/api`) through the pipeline that runs this
    /// call: approval, timeout and journal apply to it as to any call, under a child id.
    pub async fn call_tool(&self, name: &str, arguments: Value) -> ToolOutput {
        match &self.nested {
            Some(nested) => (nested.0)(name.to_owned(), arguments).await,
            None => {
                ToolOutput::error(ErrorKind::Internal, "this front end does not let tools call other tools")
            }
        }
    }

    /// Asks the session's person `question` and waits for the answer (or for the call's
    /// cancellation or deadline): through the same channel as approvals, journalled with who
    /// answered. A front end with no way to ask answers [`crate::Asked::NoOne`] at once.
    pub async fn ask(&self, question: crate::ask::Question) -> crate::ask::Asked {
        match &self.asker {
            Some(asker) => asker.ask(question).await,
            None => crate::ask::Asked::NoOne {
                reason: "this front end has no way to ask the person questions".into(),
            },
        }
    }

    /// Time left before the deadline, if there is one.
    pub fn remaining(&self) -> Option<std::time::Duration> {
        self.deadline.map(|deadline| deadline.saturating_duration_since(Instant::now()))
    }
}

/// A streaming update from a running call.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Progress {
    /// A short status line.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Completion between 0 and 1, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fraction: Option<f32>,
    /// Output appended since the last update.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<String>,
}

/// Where a runtime sends progress; cheap to clone; a default sink drops everything.
#[derive(Clone, Default)]
pub struct ProgressSink(Option<Arc<dyn Fn(Progress) + Send + Sync>>);

impl ProgressSink {
    /// A sink that calls `f` for each update.
    pub fn new(f: impl Fn(Progress) + Send + Sync + 'static) -> Self {
        Self(Some(Arc::new(f)))
    }

    /// Sends an update.
    pub fn send(&self, progress: Progress) {
        if let Some(f) = &self.0 {
            f(progress);
        }
    }

    /// Sends a status message.
    pub fn message(&self, message: impl Into<String>) {
        self.send(Progress { message: Some(message.into()), ..Progress::default() });
    }
}

impl fmt::Debug for ProgressSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(if self.0.is_some() { "ProgressSink(..)" } else { "ProgressSink(none)" })
    }
}

/// A handle through which a running call starts nested calls.
#[derive(Clone)]
pub struct NestedCaller(Arc<dyn Fn(String, Value) -> BoxFuture<'static, ToolOutput> + Send + Sync>);

impl NestedCaller {
    /// A caller that runs `f(name, arguments)`.
    pub fn new(f: impl Fn(String, Value) -> BoxFuture<'static, ToolOutput> + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }

    /// Runs `name` with `arguments` as a nested call.
    pub fn call(&self, name: String, arguments: Value) -> BoxFuture<'static, ToolOutput> {
        (self.0)(name, arguments)
    }
}

impl fmt::Debug for NestedCaller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("NestedCaller(..)")
    }
}

/// Deserialises validated arguments into the API's argument type.
///
/// # Errors
///
/// An `invalid_arguments` output naming the problem, ready to return to the model.
pub fn parse_arguments<T: DeserializeOwned>(api: &str, mut arguments: Value) -> Result<T, ToolOutput> {
    crate::provider::drop_null_fields(&mut arguments);
    serde_json::from_value(arguments).map_err(|error| {
        ToolOutput::error(
            ErrorKind::InvalidArguments,
            format!("invalid arguments for {api}: {error}; check the parameter schema and retry"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Deserialize)]
    struct Args {
        #[allow(dead_code)]
        path: String,
    }

    #[test]
    fn parse_errors_become_invalid_argument_outputs() {
        let error = parse_arguments::<Args>("readFile", json!({"path": 3})).unwrap_err();
        assert!(!error.success);
        assert_eq!(error.error.as_ref().unwrap().kind, ErrorKind::InvalidArguments);
        assert!(error.content.starts_with("invalid arguments for readFile: invalid type"));
    }

    #[derive(Debug, Deserialize, PartialEq)]
    struct Optional {
        path: String,
        limit: Option<u32>,
        #[serde(default)]
        all: bool,
    }

    #[test]
    fn strict_mode_nulls_read_as_missing() {
        let parsed: Optional =
            parse_arguments("t", json!({"path": "a", "limit": null, "all": null})).unwrap();
        assert_eq!(parsed, Optional { path: "a".into(), limit: None, all: false });
    }

    #[test]
    fn outputs_round_trip() {
        let output =
            ToolOutput::error(ErrorKind::Timeout, "took too long").with_state(json!({"partial": "abc"}));
        let json = serde_json::to_value(&output).unwrap();
        assert_eq!(json["error"]["kind"], "timeout");
        let back: ToolOutput = serde_json::from_value(json).unwrap();
        assert_eq!(back, output);
        for kind in [ErrorKind::UnknownTool, ErrorKind::InvalidArguments, ErrorKind::Internal] {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
        }
    }

    #[test]
    fn progress_sink_delivers() {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let sink = {
            let seen = seen.clone();
            ProgressSink::new(move |p| seen.lock().unwrap().push(p.message.unwrap_or_default()))
        };
        sink.message("one");
        ProgressSink::default().message("dropped");
        sink.message("two");
        assert_eq!(*seen.lock().unwrap(), ["one", "two"]);
    }
}
