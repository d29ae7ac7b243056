//! The one way a person's decision reaches a waiting call, whatever the front end: the API
//! (`POST /v1/approvals/{id}`), the console, a terminal's approver inbox. It checks that the key
//! may decide, that the decision fits what waits (an answer for a question, an approval's kinds
//! for a call), delivers it where the call waits — this instance's broker, or the instance that
//! proposed the call, through the cluster — and names who decided and from where (`decided_by`).
//! What happens once a call has its decision is the pipeline's (`tool_executor`), not this
//! module's.

use std::sync::Arc;

use journal::PendingApproval;
use serde::Serialize;
use tool_executor::{Decided, Decision};
use utoipa::ToSchema;

use crate::auth::Principal;
use crate::cluster::ClusterMessage;
use crate::error::ApiError;
use crate::state::AppState;

/// Where a decision was made, as `decided_by` says it after the key (`TENANT/ROLE/NAME via
/// console`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Via {
    /// The JSON API (`decided_by` is the key alone).
    Api,
    /// The web console.
    Console,
    /// A client that said where it decided through the API (`terminal` for the terminal app's
    /// inbox).
    Client(String),
}

impl Via {
    /// A client's word for where it decided: lower-case letters, digits and `-`, at most 32.
    ///
    /// # Errors
    ///
    /// 400 for anything else.
    pub fn client(word: String) -> Result<Self, ApiError> {
        let fits = (1..=32).contains(&word.len())
            && word.starts_with(|c: char| c.is_ascii_lowercase())
            && word.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-');
        if fits {
            Ok(Self::Client(word))
        } else {
            Err(ApiError::bad_request("via: a lower-case word such as `terminal`"))
        }
    }

    /// Who decided, as the journal records it.
    pub fn decided_by(&self, principal: &Principal) -> String {
        match self {
            Self::Api => principal.id.clone(),
            Self::Console => format!("{} via console", principal.id),
            Self::Client(word) => format!("{} via {word}", principal.id),
        }
    }
}

/// What happened to a decision.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct DecisionOutcome {
    /// The approval.
    pub approval_id: String,
    /// The decision's name.
    pub decision: String,
    /// `delivered` (the waiting call has it) or `forwarded` (sent to the instance that waits).
    pub outcome: String,
}

/// The question a journalled approval row holds, if it is one.
pub fn question_of(row: &PendingApproval) -> Option<tool_core::Question> {
    (row.reason == tool_executor::approval::QUESTION)
        .then(|| serde_json::from_value(row.arguments.clone()).ok())
        .flatten()
}

/// For a call naming files, the scope "for this session" and "always" offer (see
/// [`tool_executor::scope`]): `Some(None)` when no folder can be offered (these files alone, or
/// nothing: a device's files are not this machine's to resolve); `None` for a call that names no
/// files.
pub fn scope_offer(
    state: &AppState,
    row: &PendingApproval,
    session: Option<&crate::state::SessionView>,
) -> Option<Option<String>> {
    let api = state.executor.toolbox().tool(&row.tool)?.api(&row.api)?;
    let working_directory = session.and_then(|s| s.working_directory.as_deref()).map(std::path::Path::new);
    let paths = tool_executor::scope::call_paths(&api.spec, &row.arguments, working_directory)?;
    if session.is_some_and(|s| s.runs_on != crate::state::RunsOn::Server) {
        return Some(None);
    }
    Some(tool_executor::scope::suggest(&paths))
}

/// A session's settings, as the journal keeps them.
pub async fn session_view(
    state: &AppState,
    tenant: &str,
    session_id: &str,
) -> Option<crate::state::SessionView> {
    let record = state.journal.get_session(tenant, session_id).await.ok()??;
    serde_json::from_value::<crate::state::SessionView>(record.config).ok()
}

/// Delivers `decision` on approval `id` of the principal's tenant, made through `via`.
///
/// # Errors
///
/// 403 for a key that may not decide; 400 for a decision that does not fit what waits; 404 when
/// nothing waits under that id (decided already, expired, another tenant's); 503 when the
/// instance that waits cannot be told.
pub async fn decide(
    state: &Arc<AppState>,
    principal: &Principal,
    id: &str,
    decision: Decision,
    via: Via,
) -> Result<DecisionOutcome, ApiError> {
    principal.must_decide(state.args.agent_keys_decide)?;
    let tenant = &principal.tenant;
    let name = decision.name().to_owned();
    let by = Some(via.decided_by(principal));
    let decided = Decided { decision: decision.clone(), by: by.clone() };
    match state.broker.decide(tenant, id, decided) {
        Ok(()) => return Ok(delivered(id, &name, "delivered", principal, &via)),
        Err(tool_executor::approval::DecideError::Unfit(why)) => return Err(ApiError::bad_request(why)),
        Err(tool_executor::approval::DecideError::NotFound(_)) => {}
    }
    // Not waiting here: with a cluster, the instance that proposed the call may hold it.
    if let Some(cluster) = &state.cluster
        && let Some(row) = state.journal.get_approval(tenant, id).await?
        && row.status == "pending"
        && let Some(attempt) = state.journal.get(tenant, &row.attempt_key).await?
        && attempt.instance_id != state.instance_id
    {
        // What the waiting instance would refuse is refused here, where the caller hears why.
        let waiting = tool_executor::approval::ApprovalRequest {
            id: row.id.clone(),
            tenant: row.tenant.clone(),
            session_id: row.session_id.clone(),
            call_id: row.call_id.clone(),
            tool: row.tool.clone(),
            api: row.api.clone(),
            arguments: row.arguments.clone(),
            reason: row.reason.clone(),
            question: question_of(&row),
            scope: None,
        };
        if let Err(tool_executor::approval::DecideError::Unfit(why)) = waiting.admits(&decision) {
            return Err(ApiError::bad_request(why));
        }
        let message =
            ClusterMessage::Decision { tenant: tenant.clone(), approval_id: id.to_owned(), decision, by };
        if !cluster.send(&attempt.instance_id, &message).await {
            return Err(ApiError::unavailable(
                "the decision could not be passed to the instance that waits for it",
            ));
        }
        return Ok(delivered(id, &name, "forwarded", principal, &via));
    }
    Err(ApiError::not_found("pending approval", id))
}

fn delivered(id: &str, name: &str, outcome: &str, principal: &Principal, via: &Via) -> DecisionOutcome {
    tracing::debug!(approval = %id, decision = name, outcome, by = %principal.id, ?via, "decision delivered");
    DecisionOutcome { approval_id: id.to_owned(), decision: name.to_owned(), outcome: outcome.to_owned() }
}

/// The calls and questions waiting for a person of `tenant` (one session's, when given), oldest
/// first: on one instance what its broker holds (rows a previous run left open wait for no one);
/// with a cluster, the journal's pending rows.
///
/// # Errors
///
/// The journal's.
pub async fn pending(
    state: &AppState,
    tenant: &str,
    session: Option<&str>,
) -> Result<Vec<PendingApproval>, ApiError> {
    let mut rows = state.journal.list_pending_approvals(tenant, session).await?;
    if state.cluster.is_none() {
        let live: Vec<String> = state.broker.pending(tenant, session).into_iter().map(|r| r.id).collect();
        rows.retain(|row| live.contains(&row.id));
    }
    rows.sort_by_key(|row| row.created_at);
    Ok(rows)
}
