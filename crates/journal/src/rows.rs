//! What both stores share: cleaned values ready to bind, rows as read, and the reconciler's rule.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::instance::local_process_alive;
use crate::pack::{ResultText, StoredResult};
use crate::{
    Attempt, AttemptStatus, JournalError, NewAttempt, PendingApproval, ReconcilePolicy, RememberedDecision,
    SessionRecord, Settlement, has_controls, strip_controls, strip_controls_json,
};

/// Now, in Unix milliseconds.
pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The most rows one query returns.
pub(crate) const MAX_ROWS: u32 = 1000;

/// The error text of an abandoned row.
pub(crate) const ABANDONED_ERROR: &str = "the process that proposed this call ended before it settled";

/// Text as stored: without NUL and other control characters.
pub(crate) fn clean(text: &str) -> String {
    if has_controls(text) { strip_controls(text) } else { text.to_owned() }
}

/// [`clean`] for optional text.
pub(crate) fn clean_opt(text: Option<&str>) -> Option<String> {
    text.map(clean)
}

/// A JSON value as stored: cleaned, as text.
pub(crate) fn json_text(value: &Value) -> String {
    fn dirty(value: &Value) -> bool {
        match value {
            Value::String(text) => has_controls(text),
            Value::Array(items) => items.iter().any(dirty),
            Value::Object(map) => map.iter().any(|(key, value)| has_controls(key) || dirty(value)),
            _ => false,
        }
    }
    if dirty(value) {
        let mut value = value.clone();
        strip_controls_json(&mut value);
        value.to_string()
    } else {
        value.to_string()
    }
}

fn parse_json(column: &str, text: &str) -> Result<Value, JournalError> {
    serde_json::from_str(text).map_err(|e| JournalError::Corrupt(format!("{column} is not JSON: {e}")))
}

fn parse_status(text: &str) -> Result<AttemptStatus, JournalError> {
    AttemptStatus::parse(text).ok_or_else(|| JournalError::Corrupt(format!("unknown status `{text}`")))
}

/// Text as stored, shared: the SQLite writer binds clones of it without copying.
pub(crate) type Text = Arc<str>;

fn text(value: &str) -> Text {
    if has_controls(value) { strip_controls(value).into() } else { value.into() }
}

fn text_opt(value: Option<&str>) -> Option<Text> {
    value.map(text)
}

/// The proposed part of a row, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct AttemptValues {
    pub(crate) tenant: Text,
    pub(crate) key: Text,
    pub(crate) call_id: Text,
    pub(crate) message_id: Option<Text>,
    pub(crate) session_id: Text,
    pub(crate) parent_call_id: Option<Text>,
    pub(crate) user_id: Option<Text>,
    pub(crate) agent_id: Option<Text>,
    pub(crate) tool: Text,
    pub(crate) api: Text,
    pub(crate) function_name: Text,
    pub(crate) arguments: Text,
    pub(crate) tier: Option<Text>,
    pub(crate) instance_id: Text,
    pub(crate) now: i64,
}

impl AttemptValues {
    pub(crate) fn new(attempt: &NewAttempt) -> Self {
        Self {
            tenant: text(&attempt.tenant),
            key: text(&attempt.key()),
            call_id: text(&attempt.call_id),
            message_id: text_opt(attempt.message_id.as_deref()),
            session_id: text(&attempt.session_id),
            parent_call_id: text_opt(attempt.parent_call_id.as_deref()),
            user_id: text_opt(attempt.user_id.as_deref()),
            agent_id: text_opt(attempt.agent_id.as_deref()),
            tool: text(&attempt.tool),
            api: text(&attempt.api),
            function_name: text(&attempt.function_name),
            arguments: json_text(&attempt.arguments).into(),
            tier: text_opt(attempt.tier.as_deref()),
            instance_id: text(&attempt.instance_id),
            now: now_ms(),
        }
    }
}

/// A settlement, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct SettlementValues {
    pub(crate) status: &'static str,
    pub(crate) result: Option<StoredResult>,
    pub(crate) error_kind: Option<Text>,
    pub(crate) error: Option<Text>,
    pub(crate) decision: Option<Text>,
    pub(crate) decided_by: Option<Text>,
    pub(crate) duration_ms: Option<i64>,
    pub(crate) exit_status: Option<i32>,
    pub(crate) now: i64,
}

impl SettlementValues {
    /// `None` for a status a settlement may not have.
    pub(crate) fn new(settlement: &Settlement) -> Option<Self> {
        settlement.status.is_settlement().then(|| Self {
            status: settlement.status.as_str(),
            // The content once: the state's copies of it are stored as references.
            result: settlement
                .result
                .as_ref()
                .map(|result| StoredResult::Text(json_text(&crate::compact::compact(result)).into())),
            error_kind: text_opt(settlement.error_kind.as_deref()),
            error: text_opt(settlement.error.as_deref()),
            decision: text_opt(settlement.decision.as_deref()),
            decided_by: text_opt(settlement.decided_by.as_deref()),
            duration_ms: settlement.duration_ms,
            exit_status: settlement.exit_status,
            now: now_ms(),
        })
    }

    /// With a long result compressed, as the SQLite journal stores it.
    pub(crate) fn packed(mut self) -> Self {
        self.result = self.result.map(StoredResult::pack);
        self
    }
}

/// [`clean`] as shared text, for identifiers the SQLite writer binds.
pub(crate) fn clean_text(value: &str) -> Text {
    text(value)
}

/// An approval, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct ApprovalValues {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) session_id: String,
    pub(crate) attempt_key: String,
    pub(crate) call_id: String,
    pub(crate) tool: String,
    pub(crate) api: String,
    pub(crate) arguments: String,
    pub(crate) reason: String,
    pub(crate) status: String,
    pub(crate) decision: Option<String>,
    pub(crate) decided_by: Option<String>,
    pub(crate) created_at: i64,
    pub(crate) decided_at: Option<i64>,
}

impl ApprovalValues {
    pub(crate) fn new(approval: &PendingApproval) -> Self {
        Self {
            id: clean(&approval.id),
            tenant: clean(&approval.tenant),
            session_id: clean(&approval.session_id),
            attempt_key: clean(&approval.attempt_key),
            call_id: clean(&approval.call_id),
            tool: clean(&approval.tool),
            api: clean(&approval.api),
            arguments: json_text(&approval.arguments),
            reason: clean(&approval.reason),
            status: clean(&approval.status),
            decision: approval.decision.as_ref().map(json_text),
            decided_by: clean_opt(approval.decided_by.as_deref()),
            created_at: approval.created_at,
            decided_at: approval.decided_at,
        }
    }
}

/// A decision on an approval, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct DecisionValues {
    pub(crate) tenant: String,
    pub(crate) id: String,
    pub(crate) status: String,
    pub(crate) decision: String,
    pub(crate) decided_by: Option<String>,
    pub(crate) now: i64,
}

impl DecisionValues {
    /// `None` when the "decision" is `pending`.
    pub(crate) fn new(
        tenant: &str,
        id: &str,
        status: &str,
        decision: &Value,
        decided_by: Option<&str>,
    ) -> Option<Self> {
        let status = clean(status);
        (status != "pending").then(|| Self {
            tenant: clean(tenant),
            id: clean(id),
            status,
            decision: json_text(decision),
            decided_by: clean_opt(decided_by),
            now: now_ms(),
        })
    }
}

/// A remembered decision, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct RememberValues {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) project: String,
    pub(crate) tool: String,
    pub(crate) api: String,
    pub(crate) argument_prefix: Option<String>,
    pub(crate) created_by: Option<String>,
    pub(crate) created_at: i64,
}

impl RememberValues {
    pub(crate) fn new(decision: &RememberedDecision) -> Self {
        Self {
            id: clean(&decision.id),
            tenant: clean(&decision.tenant),
            project: clean(&decision.project),
            tool: clean(&decision.tool),
            api: clean(&decision.api),
            argument_prefix: clean_opt(decision.argument_prefix.as_deref()),
            created_by: clean_opt(decision.created_by.as_deref()),
            created_at: decision.created_at,
        }
    }
}

/// A session, cleaned and ready to bind.
#[derive(Debug, Clone)]
pub(crate) struct SessionValues {
    pub(crate) id: String,
    pub(crate) tenant: String,
    pub(crate) user_id: Option<String>,
    pub(crate) config: String,
    pub(crate) status: String,
    pub(crate) created_at: i64,
    pub(crate) ended_at: Option<i64>,
}

impl SessionValues {
    pub(crate) fn new(session: &SessionRecord) -> Self {
        Self {
            id: clean(&session.id),
            tenant: clean(&session.tenant),
            user_id: clean_opt(session.user_id.as_deref()),
            config: json_text(&session.config),
            status: clean(&session.status),
            created_at: session.created_at,
            ended_at: session.ended_at,
        }
    }
}

/// A `tool_call_attempts` row as read (JSON columns as text on both backends).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct AttemptRow {
    tenant: String,
    key: String,
    call_id: String,
    message_id: Option<String>,
    session_id: String,
    parent_call_id: Option<String>,
    user_id: Option<String>,
    agent_id: Option<String>,
    tool: String,
    api: String,
    function_name: String,
    arguments: String,
    tier: Option<String>,
    instance_id: String,
    status: String,
    result: Option<ResultText>,
    error_kind: Option<String>,
    error: Option<String>,
    decision: Option<String>,
    decided_by: Option<String>,
    duration_ms: Option<i64>,
    exit_status: Option<i32>,
    attempted_at: i64,
    updated_at: i64,
}

impl TryFrom<AttemptRow> for Attempt {
    type Error = JournalError;

    fn try_from(row: AttemptRow) -> Result<Self, JournalError> {
        Ok(Self {
            arguments: parse_json("arguments", &row.arguments)?,
            result: row
                .result
                .map(|text| parse_json("result", &text.0).map(crate::compact::expand))
                .transpose()?,
            status: parse_status(&row.status)?,
            tenant: row.tenant,
            key: row.key,
            call_id: row.call_id,
            message_id: row.message_id,
            session_id: row.session_id,
            parent_call_id: row.parent_call_id,
            user_id: row.user_id,
            agent_id: row.agent_id,
            tool: row.tool,
            api: row.api,
            function_name: row.function_name,
            tier: row.tier,
            instance_id: row.instance_id,
            error_kind: row.error_kind,
            error: row.error,
            decision: row.decision,
            decided_by: row.decided_by,
            duration_ms: row.duration_ms,
            exit_status: row.exit_status,
            attempted_at: row.attempted_at,
            updated_at: row.updated_at,
        })
    }
}

/// A `pending_approvals` row as read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ApprovalRow {
    id: String,
    tenant: String,
    session_id: String,
    attempt_key: String,
    call_id: String,
    tool: String,
    api: String,
    arguments: String,
    reason: String,
    status: String,
    decision: Option<String>,
    decided_by: Option<String>,
    created_at: i64,
    decided_at: Option<i64>,
}

impl TryFrom<ApprovalRow> for PendingApproval {
    type Error = JournalError;

    fn try_from(row: ApprovalRow) -> Result<Self, JournalError> {
        Ok(Self {
            arguments: parse_json("arguments", &row.arguments)?,
            decision: row.decision.as_deref().map(|text| parse_json("decision", text)).transpose()?,
            id: row.id,
            tenant: row.tenant,
            session_id: row.session_id,
            attempt_key: row.attempt_key,
            call_id: row.call_id,
            tool: row.tool,
            api: row.api,
            reason: row.reason,
            status: row.status,
            decided_by: row.decided_by,
            created_at: row.created_at,
            decided_at: row.decided_at,
        })
    }
}

/// A `remembered_decisions` row as read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct RememberedRow {
    id: String,
    tenant: String,
    project: String,
    tool: String,
    api: String,
    argument_prefix: Option<String>,
    created_by: Option<String>,
    created_at: i64,
}

impl From<RememberedRow> for RememberedDecision {
    fn from(row: RememberedRow) -> Self {
        Self {
            id: row.id,
            tenant: row.tenant,
            project: row.project,
            tool: row.tool,
            api: row.api,
            argument_prefix: row.argument_prefix,
            created_by: row.created_by,
            created_at: row.created_at,
        }
    }
}

/// A `sessions` row as read.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct SessionRow {
    id: String,
    tenant: String,
    user_id: Option<String>,
    config: String,
    status: String,
    created_at: i64,
    ended_at: Option<i64>,
}

impl TryFrom<SessionRow> for SessionRecord {
    type Error = JournalError;

    fn try_from(row: SessionRow) -> Result<Self, JournalError> {
        Ok(Self {
            config: parse_json("config", &row.config)?,
            id: row.id,
            tenant: row.tenant,
            user_id: row.user_id,
            status: row.status,
            created_at: row.created_at,
            ended_at: row.ended_at,
        })
    }
}

/// A `journal_instances` row as the reconciler reads it.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InstanceRow {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) pid: i64,
    pub(crate) start_ticks: Option<i64>,
    pub(crate) heartbeat_at: i64,
}

/// The reconciler's rule: which instances (other than the current one) are dead, given the
/// registered instances and the instance ids that own proposed rows.
pub(crate) fn dead_instances(
    registered: &[InstanceRow],
    owners: &[String],
    policy: &ReconcilePolicy,
    now: i64,
    this_host: &str,
) -> Vec<String> {
    let by_id: HashMap<&str, &InstanceRow> = registered.iter().map(|row| (row.id.as_str(), row)).collect();
    let candidates: BTreeSet<&str> =
        registered.iter().map(|row| row.id.as_str()).chain(owners.iter().map(String::as_str)).collect();
    let current = clean(&policy.current_instance);
    candidates
        .into_iter()
        .filter(|id| *id != current)
        .filter(|id| match by_id.get(id) {
            None => true,
            Some(row) => {
                row.heartbeat_at < now.saturating_sub(policy.instance_lease_ms)
                    || (row.host == this_host && !local_process_alive(row.pid, row.start_ticks))
            }
        })
        .map(str::to_owned)
        .collect()
}

/// The cleaned filter of a query: the limit clamped to [`MAX_ROWS`].
pub(crate) fn query_limit(limit: Option<u32>) -> i64 {
    i64::from(limit.unwrap_or(MAX_ROWS).min(MAX_ROWS))
}

/// A `journal_instances` row whole (the operator's view).
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct InstanceRecordRow {
    pub(crate) id: String,
    pub(crate) host: String,
    pub(crate) pid: i64,
    pub(crate) started_at: i64,
    pub(crate) heartbeat_at: i64,
    pub(crate) version: Option<String>,
    pub(crate) address: Option<String>,
    pub(crate) in_flight: Option<i64>,
}

impl From<InstanceRecordRow> for crate::InstanceRecord {
    fn from(row: InstanceRecordRow) -> Self {
        Self {
            id: row.id,
            host: row.host,
            pid: row.pid,
            started_at: row.started_at,
            heartbeat_at: row.heartbeat_at,
            version: row.version,
            address: row.address,
            in_flight: row.in_flight,
        }
    }
}

/// A `console_sessions` row.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ConsoleSessionRow {
    pub(crate) digest: String,
    pub(crate) tenant: String,
    pub(crate) principal: String,
    pub(crate) role: String,
    pub(crate) csrf: String,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
}

impl From<ConsoleSessionRow> for crate::ConsoleSession {
    fn from(row: ConsoleSessionRow) -> Self {
        Self {
            digest: row.digest,
            tenant: row.tenant,
            principal: row.principal,
            role: row.role,
            csrf: row.csrf,
            created_at: row.created_at,
            expires_at: row.expires_at,
        }
    }
}
