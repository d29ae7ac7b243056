//! What the journal's smaller test files share.

use journal::{AttemptStatus, NewAttempt, Settlement};
use serde_json::Value;

/// A `readFile` call of tenant `t`, message `m`, session `s`.
pub fn read_call(call_id: &str, arguments: Value) -> NewAttempt {
    NewAttempt {
        tenant: "t".into(),
        call_id: call_id.into(),
        message_id: Some("m".into()),
        session_id: "s".into(),
        parent_call_id: None,
        user_id: None,
        agent_id: None,
        tool: "local-system".into(),
        api: "readFile".into(),
        function_name: "readFile".into(),
        arguments,
        tier: None,
        instance_id: "i".into(),
    }
}

/// An executed settlement with this result.
pub fn executed(result: Value) -> Settlement {
    Settlement {
        status: AttemptStatus::Executed,
        result: Some(result),
        error_kind: None,
        error: None,
        decision: None,
        decided_by: None,
        duration_ms: Some(1),
        exit_status: None,
    }
}
