//! Approvals asked of the person behind an MCP client, through MCP elicitation.
//!
//! When the pipeline must ask about a call of an MCP connection whose client declared the
//! elicitation capability (form mode), [`Elicitation`] sends that client an `elicitation/create`
//! request: the call, the reason it needs a person, and a form with one choice (allow once, allow
//! for this session, deny) and an optional reason for the model. The client shows it to its
//! person. Questions of every other session — and of connections whose client cannot elicit — go
//! to the app's own broker (the approvals API, a terminal) as before.
//!
//! Clients of the newest revision (2026-07-28) cannot be sent requests: their call returns an
//! input-required result instead, holding the same form and an opaque `requestState`, while the
//! call waits in the pipeline; the client retries the call with the person's answer and the state,
//! and gets the call's result (or the next question). The state is a random handle to the call
//! kept here, never data the client could forge; a retry must come with the credentials of the
//! call's own session, and a call whose question is never answered settles when the pipeline's
//! approval wait ends.
//!
//! An accepted form with `allow_once` or `allow_session` is that decision; a declined, cancelled or
//! unanswered form, or one whose answer is not in the form, is a denial — never an approval.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

use async_trait::async_trait;
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
};
use rmcp::service::Peer;
use rmcp::service::RequestContext;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalBroker, CallResult, Decided, Decision};

use crate::{Backend, OpenError, Opened};

/// The key of the approval form among a call's input requests.
pub(crate) const APPROVAL: &str = "approval";

/// A question about a call that asks in rounds, for its `tools/call` handler to hand the client.
pub(crate) struct Question {
    pub(crate) request: ApprovalRequest,
    pub(crate) answer: oneshot::Sender<Decided>,
}

/// A call that asks in rounds, running in the pipeline while its question travels.
pub(crate) struct Parked {
    /// Its session.
    pub(crate) opened: Opened,
    /// Its call id in the pipeline.
    pub(crate) call_id: String,
    /// Its questions, as the pipeline asks them.
    pub(crate) questions: mpsc::UnboundedReceiver<Question>,
    /// Its results, when it has settled.
    pub(crate) result: oneshot::Receiver<Result<Vec<CallResult>, OpenError>>,
    /// The question the client was handed, until its answer comes.
    pub(crate) pending: Option<Question>,
    /// The session must be ended with the call (its connection lived for one request).
    pub(crate) owns_session: bool,
    /// The client's name, for `decided_by`.
    pub(crate) client: String,
}

/// The approval broker of an app that serves MCP: the sessions of eliciting clients are asked
/// through their client; every other question goes to `fallback`.
pub struct Elicitation {
    fallback: Arc<dyn ApprovalBroker>,
    /// The client of each session that can be asked, with its name for `decided_by`.
    clients: Mutex<HashMap<String, (Peer<RoleServer>, String)>>,
    /// Calls that ask in rounds, by session and call id: where their questions go.
    calls: Mutex<HashMap<(String, String), mpsc::UnboundedSender<Question>>>,
    /// Calls whose question is with the client, by the `requestState` it was handed.
    parked: Mutex<HashMap<String, Parked>>,
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
        Arc::new(Self {
            fallback,
            clients: Mutex::new(HashMap::new()),
            calls: Mutex::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
        })
    }

    /// The questions of this call go to its `tools/call` handler from now on.
    pub(crate) fn route_call(&self, session: &str, call_id: &str) -> mpsc::UnboundedReceiver<Question> {
        let (sender, receiver) = mpsc::unbounded_channel();
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert((session.to_owned(), call_id.to_owned()), sender);
        receiver
    }

    /// The call has settled.
    pub(crate) fn unroute_call(&self, session: &str, call_id: &str) {
        self.calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&(session.to_owned(), call_id.to_owned()));
    }

    /// Keeps a call whose question goes to the client; returns the handle the client echoes. A
    /// call never retried is dropped once the pipeline's wait for its answer is surely over (its
    /// question then settles unanswered), and its session ended if it owns it.
    pub(crate) fn park(self: &Arc<Self>, parked: Parked, backend: Arc<dyn Backend>) -> String {
        let mut bytes = [0_u8; 16];
        // Without randomness the handle is still unique; it is checked against the session's
        // credentials on retry either way.
        if getrandom::fill(&mut bytes).is_err() {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos());
            bytes = nanos.to_le_bytes();
        }
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let wait = parked.opened.executor.config().approval_timeout + Duration::from_secs(60);
        self.parked.lock().unwrap_or_else(|p| p.into_inner()).insert(token.clone(), parked);
        let this = self.clone();
        let key = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            if let Some(parked) = this.take(&key) {
                this.unroute_call(parked.opened.session.id(), &parked.call_id);
                if parked.owns_session {
                    backend.close(parked.opened.clone()).await;
                }
            }
        });
        token
    }

    /// The parked call of this handle, taken out.
    pub(crate) fn take(&self, token: &str) -> Option<Parked> {
        self.parked.lock().unwrap_or_else(|p| p.into_inner()).remove(token)
    }

    /// Puts back a call taken by a request that may not have it.
    pub(crate) fn put_back(&self, token: String, parked: Parked) {
        self.parked.lock().unwrap_or_else(|p| p.into_inner()).insert(token, parked);
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

/// Whether this request's client asks in rounds: it speaks 2026-07-28 or newer (no server-to-client
/// requests) and declared form elicitation in the request's own `_meta`.
pub(crate) fn asks_in_rounds(context: &RequestContext<RoleServer>) -> bool {
    let modern = context.meta.protocol_version().is_some_and(|v| !v.has_initialize());
    let form = context
        .meta
        .client_capabilities()
        .and_then(|c| c.elicitation)
        .is_some_and(|e| e.form.is_some() || e.url.is_none());
    modern && form
}

/// The approval form as an input request of an input-required result.
pub(crate) fn input_request(request: &ApprovalRequest) -> Option<InputRequest> {
    let params = ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(request),
        requested_schema: form()?,
    };
    Some(InputRequest::Elicitation(ElicitRequest::new(params)))
}

/// The decision the client's answer to the form means (its `ElicitResult`, as JSON); no answer or
/// a malformed one denies.
pub(crate) fn decided_from_response(response: Option<&Value>, client: &str) -> Decided {
    let result = response.and_then(|r| serde_json::from_value::<ElicitResult>(r.clone()).ok());
    let decision = match result {
        Some(result) => decision_of(&result.action, result.content.as_ref()),
        None => Decision::DenyWithMessage { message: "the approval form was not answered".into() },
    };
    Decided { decision, by: Some(format!("mcp-client:{client}")) }
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
        let round = self
            .calls
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&(request.session_id.clone(), request.call_id.clone()))
            .cloned();
        if let Some(round) = round {
            let (answer, answered) = oneshot::channel();
            if round.send(Question { request: request.clone(), answer }).is_err() {
                return None;
            }
            return tokio::select! {
                decided = answered => decided.ok(),
                () = cancel.cancelled() => None,
                () = tokio::time::sleep(timeout) => None,
            };
        }
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
