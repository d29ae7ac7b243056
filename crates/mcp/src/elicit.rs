//! Approvals asked of the person behind an MCP client, through MCP elicitation.
//!
//! When the pipeline must ask about a call of an MCP connection whose client declared the
//! elicitation capability (form mode), [`Elicitation`] sends that client an `elicitation/create`
//! request: the call, the reason it needs a person, and a form with one choice (allow once, allow
//! for this session, deny) and an optional reason for the model. The client shows it to its
//! person. Questions of every other session — and of connections whose client cannot elicit — go
//! to the app's own broker (the approvals API, a terminal) as before.
//!
//! An accepted form with `allow_once` or `allow_session` is that decision; a declined, cancelled or
//! unanswered form, or one whose answer is not in the form, is a denial — never an approval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::RoleServer;
use rmcp::model::{ElicitRequestParams, ElicitationAction, ElicitationSchema};
use rmcp::service::Peer;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalBroker, Decided, Decision};

/// The approval broker of an app that serves MCP: the sessions of eliciting clients are asked
/// through their client; every other question goes to `fallback`.
pub struct Elicitation {
    fallback: Arc<dyn ApprovalBroker>,
    /// The client of each session that can be asked, with its name for `decided_by`.
    clients: Mutex<HashMap<String, (Peer<RoleServer>, String)>>,
}

impl std::fmt::Debug for Elicitation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sessions = self.clients.lock().map_or(0, |c| c.len());
        f.debug_struct("Elicitation").field("fallback", &self.fallback).field("sessions", &sessions).finish()
    }
}

impl Elicitation {
    /// A broker asking eliciting clients, and `fallback` for the rest.
    pub fn new(fallback: Arc<dyn ApprovalBroker>) -> Arc<Self> {
        Arc::new(Self { fallback, clients: Mutex::new(HashMap::new()) })
    }

    /// The questions of `session` go to this client from now on.
    pub(crate) fn register(&self, session: &str, peer: Peer<RoleServer>, client: String) {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).insert(session.to_owned(), (peer, client));
    }

    /// The session's connection is gone.
    pub(crate) fn unregister(&self, session: &str) {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).remove(session);
    }

    /// Whether `session`'s questions go to its MCP client.
    pub fn asks_client(&self, session: &str) -> bool {
        self.clients.lock().unwrap_or_else(|p| p.into_inner()).contains_key(session)
    }
}

/// Whether this client can be asked: it declared form elicitation, and speaks a protocol revision
/// that still lets a server send it requests.
pub(crate) fn can_elicit(peer: &Peer<RoleServer>) -> bool {
    let revision_allows = peer.peer_info().is_some_and(|info| info.protocol_version.has_initialize());
    revision_allows && peer.supported_elicitation_modes().contains(&rmcp::service::ElicitationMode::Form)
}

/// The question: what would run, and why a person is asked.
fn message(request: &ApprovalRequest) -> String {
    let arguments = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
    let arguments: String = arguments.chars().take(2000).collect();
    format!(
        "Toolhost needs your approval to run {}/{}.\nWhy: {}\nArguments:\n{arguments}",
        request.tool, request.api, request.reason
    )
}

/// The form: one required choice, and a reason the model reads when it is denied.
fn form() -> Option<ElicitationSchema> {
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": {
                "type": "string",
                "title": "Decision",
                "oneOf": [
                    { "const": "allow_once", "title": "Allow once" },
                    { "const": "allow_session", "title": "Allow for this session" },
                    { "const": "deny", "title": "Deny" }
                ]
            },
            "reason": {
                "type": "string",
                "title": "Reason",
                "description": "Why not (told to the agent when you deny)",
                "maxLength": 500
            }
        },
        "required": ["decision"]
    });
    serde_json::from_value(schema).ok()
}

/// The decision an answer means; anything but a clear "allow" denies.
fn decision_of(action: &ElicitationAction, content: Option<&Value>) -> Decision {
    let field = |name: &str| content.and_then(|c| c.get(name)).and_then(Value::as_str);
    let reason = field("reason").map(str::trim).filter(|r| !r.is_empty());
    match (action, field("decision")) {
        (ElicitationAction::Accept, Some("allow_once")) => Decision::AllowOnce,
        (ElicitationAction::Accept, Some("allow_session")) => {
            Decision::AllowSession { argument_prefix: None }
        }
        (ElicitationAction::Accept, Some("deny")) => match reason {
            Some(reason) => Decision::DenyWithMessage { message: reason.to_owned() },
            None => Decision::Deny,
        },
        (ElicitationAction::Accept, _) => {
            Decision::DenyWithMessage { message: "the approval form came back without a decision".into() }
        }
        _ => Decision::Deny,
    }
}

#[async_trait]
impl ApprovalBroker for Elicitation {
    async fn wait(
        &self,
        request: &ApprovalRequest,
        cancel: &CancellationToken,
        timeout: Duration,
    ) -> Option<Decided> {
        let client = self.clients.lock().unwrap_or_else(|p| p.into_inner()).get(&request.session_id).cloned();
        let Some((peer, name)) = client else {
            return self.fallback.wait(request, cancel, timeout).await;
        };
        let requested_schema = form()?;
        let params = ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: message(request),
            requested_schema,
        };
        let asked = peer.create_elicitation_with_timeout(params, Some(timeout));
        let answer = tokio::select! {
            answer = asked => answer,
            () = cancel.cancelled() => return None,
        };
        match answer {
            Ok(result) => Some(Decided {
                decision: decision_of(&result.action, result.content.as_ref()),
                by: Some(format!("mcp-client:{name}")),
            }),
            // Timed out, or the client went away or failed: no decision (the pipeline settles the
            // call as it does any unanswered question).
            Err(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        let schema = serde_json::to_value(form().expect("the form parses")).unwrap();
        assert_eq!(schema["required"], json!(["decision"]));
        assert_eq!(schema["properties"]["decision"]["oneOf"][0]["const"], "allow_once");
    }

    #[test]
    fn only_a_clear_allow_allows() {
        let accept = ElicitationAction::Accept;
        assert_eq!(decision_of(&accept, Some(&json!({"decision": "allow_once"}))), Decision::AllowOnce);
        assert_eq!(
            decision_of(&accept, Some(&json!({"decision": "allow_session"}))),
            Decision::AllowSession { argument_prefix: None }
        );
        assert_eq!(
            decision_of(&accept, Some(&json!({"decision": "deny", "reason": " not on main "}))),
            Decision::DenyWithMessage { message: "not on main".into() }
        );
        assert!(matches!(
            decision_of(&accept, Some(&json!({"decision": "yes please"}))),
            Decision::DenyWithMessage { .. }
        ));
        assert!(matches!(decision_of(&accept, None), Decision::DenyWithMessage { .. }));
        assert_eq!(
            decision_of(&ElicitationAction::Decline, Some(&json!({"decision": "allow_once"}))),
            Decision::Deny
        );
        assert_eq!(decision_of(&ElicitationAction::Cancel, None), Decision::Deny);
    }
}
