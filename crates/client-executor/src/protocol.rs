//! The device protocol: JSON text frames over one WebSocket, tagged by `type`.
//!
//! ```text
//! device → server   register {device_id, tools, boot}      first frame, once per connection
//! server → device   registered {device_id, instance_id}
//! server → device   tool_execute {request_id, call_id, session_id, tool, api, arguments,
//!                                 timeout_ms, working_directory}
//! device → server   tool_result {request_id, output}       exactly one per request_id
//! device → server   progress {request_id, progress}
//! server → device   tool_cancel {request_id}
//! server → device   error {message}                        then the server closes
//! ```
//!
//! A request may be sent again after a reconnect; the device answers a repeated `request_id`
//! with the result it already has (or not at all while it still runs), never by running it twice.

use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use tool_core::{Progress, ToolOutput};

/// How much earlier than the server's deadline a device gives up on a call, so that the server
/// receives an explicit timeout result from the device rather than having to make one up.
pub const DEVICE_ALARM_MARGIN: Duration = Duration::from_millis(500);

/// The WebSocket path under which a server accepts devices.
pub const DEVICE_PATH: &str = "/v1/devices/connect";

/// One call for a device to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecuteRequest {
    /// Unique per dispatch; the device answers with it.
    pub request_id: String,
    /// The model's call id.
    pub call_id: String,
    /// The server's session.
    pub session_id: String,
    /// The tool's identifier.
    pub tool: String,
    /// The API.
    pub api: String,
    /// Validated arguments.
    pub arguments: Value,
    /// The server's deadline for this call, in milliseconds from when it was sent.
    pub timeout_ms: u64,
    /// The session's working directory, on the device.
    #[serde(default)]
    pub working_directory: Option<String>,
}

/// What a device sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DeviceMessage {
    /// The first frame: who this is and which tools it runs.
    Register {
        /// A stable id for this device within its tenant; a new connection with the same id
        /// replaces the old one.
        device_id: String,
        /// Tool identifiers it can run.
        tools: Vec<String>,
        /// A fresh id per device process start: requests still open from a connection of another
        /// start are not sent again (that process may have run them), they fail instead.
        #[serde(default)]
        boot: Option<String>,
        /// The folder the device runs calls in (its own choice; shown to its tenant).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        working_directory: Option<String>,
    },
    /// The one result of a request.
    ToolResult {
        /// The request answered.
        request_id: String,
        /// The result.
        output: ToolOutput,
    },
    /// A streaming update of a running request.
    Progress {
        /// The request.
        request_id: String,
        /// The update.
        progress: Progress,
    },
}

/// What a server sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ServerMessage {
    /// The registration was accepted.
    Registered {
        /// The device.
        device_id: String,
        /// The server instance holding the connection.
        instance_id: String,
    },
    /// Run this call.
    ToolExecute(ExecuteRequest),
    /// Stop this call (its result is still expected, or no longer needed).
    ToolCancel {
        /// The request.
        request_id: String,
    },
    /// A protocol error; the server closes the connection after it.
    Error {
        /// What went wrong.
        message: String,
    },
}

/// Why a frame could not be read.
#[derive(Debug, thiserror::Error)]
#[error("malformed device frame: {0}")]
pub struct FrameError(#[from] serde_json::Error);

impl DeviceMessage {
    /// Parses a text frame.
    ///
    /// # Errors
    ///
    /// [`FrameError`] when the text is not one of the messages.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        Ok(serde_json::from_str(text)?)
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

impl ServerMessage {
    /// Parses a text frame.
    ///
    /// # Errors
    ///
    /// [`FrameError`] when the text is not one of the messages.
    pub fn parse(text: &str) -> Result<Self, FrameError> {
        Ok(serde_json::from_str(text)?)
    }

    /// The frame's text.
    pub fn to_text(&self) -> String {
        serde_json::to_string(self).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_with_their_type_tags() {
        let execute = ServerMessage::ToolExecute(ExecuteRequest {
            request_id: "r1".into(),
            call_id: "c1".into(),
            session_id: "s1".into(),
            tool: "local-system".into(),
            api: "readFile".into(),
            arguments: serde_json::json!({"path": "a.txt"}),
            timeout_ms: 30_000,
            working_directory: Some("/w".into()),
        });
        let text = execute.to_text();
        assert!(text.starts_with(r#"{"type":"tool_execute","request_id":"r1""#), "{text}");
        assert_eq!(ServerMessage::parse(&text).unwrap(), execute);

        let result = DeviceMessage::ToolResult { request_id: "r1".into(), output: ToolOutput::ok("hi") };
        assert_eq!(DeviceMessage::parse(&result.to_text()).unwrap(), result);
        assert!(DeviceMessage::parse(r#"{"type":"tool_result"}"#).is_err());
        assert!(DeviceMessage::parse("not json").is_err());
    }
}
