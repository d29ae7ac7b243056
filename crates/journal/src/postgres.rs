//! The Postgres journal: the same guarded statements on a connection pool.

use std::str::FromStr;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::Migrator;
use sqlx::postgres::{PgConnectOptions, PgPool, PgPoolOptions, PgQueryResult};
use sqlx::{Postgres, Row};

mod knowledge;

use crate::rows::{
    ABANDONED_ERROR, ApprovalRow, ApprovalValues, AttemptRow, AttemptValues, DecisionValues, InstanceRow,
    MAX_ROWS, RememberValues, RememberedRow, SessionRow, SessionValues, SettlementValues, clean,
    dead_instances, now_ms, query_limit,
};
use crate::{
    Attempt, AttemptFilter, InstanceInfo, Journal, JournalError, NewAttempt, PendingApproval, Proposed,
    ReconcilePolicy, ReconcileReport, RememberedDecision, SessionFilter, SessionRecord, Settlement,
    host_name,
};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/postgres");

/// The migrations a new database runs: version and description.
pub(crate) fn migrations() -> impl Iterator<Item = (i64, String)> {
    MIGRATOR.iter().map(|migration| (migration.version, migration.description.to_string()))
}

/// Connections of the pool.
const CONNECTIONS: u32 = 16;

// The single-row guards compare `status COLLATE "C"`: the same bytewise equality, but it cannot
// drive an index scan. Otherwise the planner may pick a status index over the primary key (few
// live rows are `proposed`), and every settle leaves a dead `proposed` entry there until vacuum:
// a settle then scans a growing index (measured: 4 ms per call after 20 000 calls).

/// The columns of an attempt, JSON as text so both backends decode alike.
const ATTEMPT_COLUMNS: &str = "tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments::text AS arguments, tier, instance_id, status, result::text AS result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at";

const PROPOSE: &str = "INSERT INTO tool_call_attempts (tenant, key, call_id, message_id, session_id, parent_call_id, \
     user_id, agent_id, tool, api, function_name, arguments, tier, instance_id, status, attempted_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, 'proposed', $15, $15) \
     ON CONFLICT (tenant, key) DO NOTHING";

const SETTLE: &str = "UPDATE tool_call_attempts SET status = $3, result = $4::jsonb, error_kind = $5, error = $6, \
     decision = $7, decided_by = $8, duration_ms = $9, exit_status = $10, updated_at = $11 \
     WHERE tenant = $1 AND key = $2 AND status COLLATE \"C\" = 'proposed'";

const UPSERT_SETTLED: &str = "INSERT INTO tool_call_attempts (tenant, key, call_id, message_id, session_id, \
     parent_call_id, user_id, agent_id, tool, api, function_name, arguments, tier, instance_id, status, result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, $15, $16::jsonb, $17, $18, $19, \
     $20, $21, $22, $23, $23) \
     ON CONFLICT (tenant, key) DO UPDATE SET status = excluded.status, result = excluded.result, \
     error_kind = excluded.error_kind, error = excluded.error, decision = excluded.decision, \
     decided_by = excluded.decided_by, duration_ms = excluded.duration_ms, exit_status = excluded.exit_status, \
     updated_at = excluded.updated_at \
     WHERE tool_call_attempts.status = 'proposed'";

const CONFIRM: &str = "UPDATE tool_call_attempts SET status = 'confirmed', updated_at = $3 \
     WHERE tenant = $1 AND key = $2 AND status COLLATE \"C\" = 'executed'";

const RECORD_DECISION: &str = "UPDATE tool_call_attempts SET decision = $3, decided_by = $4, updated_at = $5 \
     WHERE tenant = $1 AND key = $2 AND status COLLATE \"C\" = 'proposed'";

const UNDO: &str = "UPDATE tool_call_attempts SET status = 'compensated', updated_at = $3 \
     WHERE tenant = $1 AND key = $2 AND status COLLATE \"C\" IN ('executed', 'confirmed')";

// Heartbeats are the database's time, and so is the reconciler's "now": instances on hosts whose
// clocks differ are judged by one clock.
const REGISTER_INSTANCE: &str = "INSERT INTO journal_instances (id, host, pid, start_ticks, started_at, heartbeat_at, \
     version, address, in_flight) \
     VALUES ($1, $2, $3, $4, (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT, \
     (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT, $5, $6, $7) \
     ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, start_ticks = excluded.start_ticks, \
     heartbeat_at = excluded.heartbeat_at, version = excluded.version, address = excluded.address, \
     in_flight = excluded.in_flight";

const SESSION_SELECT: &str =
    "SELECT id, tenant, user_id, config::text AS config, status, created_at, ended_at FROM sessions";

const PUT_CONSOLE_SESSION: &str = "INSERT INTO console_sessions (digest, tenant, principal, role, csrf, created_at, \
     expires_at) VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (digest) DO NOTHING";

const FORGET_CONSOLE_SESSIONS: &str = "DELETE FROM console_sessions WHERE expires_at < $1";

const END_CONSOLE_SESSION: &str = "DELETE FROM console_sessions WHERE digest = $1";

const HEARTBEAT: &str = "UPDATE journal_instances SET heartbeat_at = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT WHERE id = $1";

const DATABASE_NOW: &str = "SELECT (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

const ABANDON: &str = "UPDATE tool_call_attempts SET status = 'abandoned', error_kind = 'abandoned', error = $2, \
     updated_at = $3 WHERE status = 'proposed' AND instance_id = $1 RETURNING tenant, key";

const FORGET_INSTANCE: &str = "DELETE FROM journal_instances WHERE id = $1";

const INSERT_APPROVAL: &str = "INSERT INTO pending_approvals (id, tenant, session_id, attempt_key, call_id, tool, \
     api, arguments, reason, status, decision, decided_by, created_at, decided_at) \
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8::jsonb, $9, $10, $11::jsonb, $12, $13, $14) \
     ON CONFLICT (tenant, id) DO NOTHING";

const DECIDE_APPROVAL: &str = "UPDATE pending_approvals SET status = $3, decision = $4::jsonb, decided_by = $5, \
     decided_at = $6 WHERE tenant = $1 AND id = $2 AND status COLLATE \"C\" = 'pending'";

const REMEMBER: &str = "INSERT INTO remembered_decisions (id, tenant, project, tool, api, argument_prefix, \
     created_by, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8) \
     ON CONFLICT (tenant, id) DO UPDATE SET project = excluded.project, tool = excluded.tool, api = excluded.api, \
     argument_prefix = excluded.argument_prefix, created_by = excluded.created_by, created_at = excluded.created_at";

const REVOKE: &str = "DELETE FROM remembered_decisions WHERE tenant = $1 AND id = $2";

const PUT_SESSION: &str = "INSERT INTO sessions (id, tenant, user_id, config, status, created_at, ended_at) \
     VALUES ($1, $2, $3, $4::jsonb, $5, $6, $7) \
     ON CONFLICT (tenant, id) DO UPDATE SET user_id = excluded.user_id, config = excluded.config, \
     status = excluded.status, created_at = excluded.created_at, ended_at = excluded.ended_at";

const END_SESSION: &str = "UPDATE sessions SET status = 'ended', ended_at = $3 \
     WHERE tenant = $1 AND id = $2 AND status = 'active'";

const PRUNE_ATTEMPTS: &str = "DELETE FROM tool_call_attempts WHERE ctid IN (SELECT ctid FROM tool_call_attempts \
     WHERE status IN ('executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned') \
     AND attempted_at < $1 LIMIT $2)";
const PRUNE_APPROVALS: &str = "DELETE FROM pending_approvals WHERE ctid IN (SELECT ctid FROM pending_approvals \
     WHERE status <> 'pending' AND created_at < $1 LIMIT $2)";
const PRUNE_SESSIONS: &str = "DELETE FROM sessions WHERE ctid IN (SELECT ctid FROM sessions \
     WHERE status = 'ended' AND ended_at < $1 LIMIT $2)";

const EXPIRE_RESULTS: &str = "UPDATE tool_call_attempts SET \
     result = jsonb_build_object('content', left(result->>'content', $3), 'expired', true), updated_at = $5 \
     WHERE ctid IN (SELECT ctid FROM tool_call_attempts \
     WHERE status IN ('executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned') \
     AND attempted_at >= $1 AND attempted_at < $2 AND result IS NOT NULL AND NOT (result ? 'expired') LIMIT $4)";

const GET_ATTEMPT: &str = "SELECT tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments::text AS arguments, tier, instance_id, status, result::text AS result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at \
     FROM tool_call_attempts WHERE tenant = $1 AND key = $2";

const UNCONFIRMED: &str = "SELECT tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments::text AS arguments, tier, instance_id, status, result::text AS result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at \
     FROM tool_call_attempts WHERE status = 'executed' AND attempted_at < $1 AND updated_at < $1 \
     ORDER BY attempted_at, seq LIMIT $2";

const INSTANCES: &str = "SELECT id, host, pid, start_ticks, heartbeat_at FROM journal_instances";

const PROPOSED_OWNERS: &str = "SELECT DISTINCT instance_id FROM tool_call_attempts WHERE status = 'proposed'";

const GET_APPROVAL: &str = "SELECT id, tenant, session_id, attempt_key, call_id, tool, api, \
     arguments::text AS arguments, reason, status, decision::text AS decision, decided_by, created_at, decided_at \
     FROM pending_approvals WHERE tenant = $1 AND id = $2";

const PENDING_APPROVALS: &str = "SELECT id, tenant, session_id, attempt_key, call_id, tool, api, \
     arguments::text AS arguments, reason, status, decision::text AS decision, decided_by, created_at, decided_at \
     FROM pending_approvals WHERE tenant = $1 AND status = 'pending' AND ($2::text IS NULL OR session_id = $2) \
     ORDER BY created_at, id";

const REMEMBERED: &str = "SELECT id, tenant, project, tool, api, argument_prefix, created_by, created_at \
     FROM remembered_decisions WHERE tenant = $1 AND ($2::text IS NULL OR project = $2) ORDER BY created_at, id";

const GET_SESSION: &str = "SELECT id, tenant, user_id, config::text AS config, status, created_at, ended_at \
     FROM sessions WHERE tenant = $1 AND id = $2";

/// The Postgres journal: a pool of 16 connections; every write is one guarded statement (the
/// reconciler's abandon runs in one transaction).
#[derive(Debug, Clone)]
pub struct PostgresJournal {
    pool: PgPool,
}

impl PostgresJournal {
    /// Connects to a `postgres://` URL and runs the migrations.
    ///
    /// # Errors
    ///
    /// [`JournalError::Database`] when the server cannot be reached or refuses the login,
    /// [`JournalError::Migrate`] when the migrations fail.
    pub async fn open(url: &str) -> Result<Self, JournalError> {
        // Plan every statement with the table as it is now. A generic plan cached while the
        // table was empty (before autovacuum first analyzes it) ties the primary key with the
        // tenant-prefixed indexes, may pick one of those for a `tenant = $1 AND key = $2`
        // lookup, and keeps scanning all of the tenant's rows on every settle as the table grows
        // (measured: 4 ms per call after 20 000 calls instead of 0.5 ms).
        let options = PgConnectOptions::from_str(url)?.options([("plan_cache_mode", "force_custom_plan")]);
        let pool = Self::pool_options().connect_with(options).await?;
        Self::with_pool(pool).await
    }

    /// The pool's settings: a connection is checked before it is handed out (one the server
    /// closed in a restart is replaced, not failed on), an acquire gives up after 2 s (a caller
    /// with a deadline of its own is not held past it by a queue of waiters), and connections
    /// idle for five minutes are closed.
    fn pool_options() -> PgPoolOptions {
        PgPoolOptions::new()
            .max_connections(CONNECTIONS)
            .acquire_timeout(std::time::Duration::from_secs(2))
            .idle_timeout(std::time::Duration::from_secs(300))
            .test_before_acquire(true)
    }

    /// Uses an existing pool (and runs the migrations on it). Give its connections
    /// `plan_cache_mode = force_custom_plan`, as [`PostgresJournal::open`] does (see there).
    ///
    /// # Errors
    ///
    /// [`JournalError::Migrate`] when the migrations fail.
    pub async fn with_pool(pool: PgPool) -> Result<Self, JournalError> {
        MIGRATOR.run(&pool).await?;
        Ok(Self { pool })
    }
}

fn moved(done: PgQueryResult) -> bool {
    done.rows_affected() == 1
}

impl PostgresJournal {
    journal_reads!(Postgres, pool);
}

#[async_trait]
impl Journal for PostgresJournal {
    async fn propose(&self, attempt: &NewAttempt) -> Result<Proposed, JournalError> {
        let v = AttemptValues::new(attempt);
        let done = sqlx::query(PROPOSE)
            .bind(&*v.tenant)
            .bind(&*v.key)
            .bind(&*v.call_id)
            .bind(v.message_id.as_deref())
            .bind(&*v.session_id)
            .bind(v.parent_call_id.as_deref())
            .bind(v.user_id.as_deref())
            .bind(v.agent_id.as_deref())
            .bind(&*v.tool)
            .bind(&*v.api)
            .bind(&*v.function_name)
            .bind(&*v.arguments)
            .bind(v.tier.as_deref())
            .bind(&*v.instance_id)
            .bind(v.now)
            .execute(&self.pool)
            .await?;
        Ok(Proposed { created: moved(done), key: v.key.to_string() })
    }

    async fn settle(&self, tenant: &str, key: &str, settlement: &Settlement) -> Result<bool, JournalError> {
        let Some(s) = SettlementValues::new(settlement) else { return Ok(false) };
        let result = s.result.as_ref().map(crate::pack::StoredResult::json).transpose()?;
        let done = sqlx::query(SETTLE)
            .bind(clean(tenant))
            .bind(clean(key))
            .bind(s.status)
            .bind(result.as_deref())
            .bind(s.error_kind.as_deref())
            .bind(s.error.as_deref())
            .bind(s.decision.as_deref())
            .bind(s.decided_by.as_deref())
            .bind(s.duration_ms)
            .bind(s.exit_status)
            .bind(s.now)
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn upsert_settled(
        &self,
        attempt: &NewAttempt,
        settlement: &Settlement,
    ) -> Result<bool, JournalError> {
        let Some(s) = SettlementValues::new(settlement) else { return Ok(false) };
        let result = s.result.as_ref().map(crate::pack::StoredResult::json).transpose()?;
        let v = AttemptValues::new(attempt);
        let done = sqlx::query(UPSERT_SETTLED)
            .bind(&*v.tenant)
            .bind(&*v.key)
            .bind(&*v.call_id)
            .bind(v.message_id.as_deref())
            .bind(&*v.session_id)
            .bind(v.parent_call_id.as_deref())
            .bind(v.user_id.as_deref())
            .bind(v.agent_id.as_deref())
            .bind(&*v.tool)
            .bind(&*v.api)
            .bind(&*v.function_name)
            .bind(&*v.arguments)
            .bind(v.tier.as_deref())
            .bind(&*v.instance_id)
            .bind(s.status)
            .bind(result.as_deref())
            .bind(s.error_kind.as_deref())
            .bind(s.error.as_deref())
            .bind(s.decision.as_deref())
            .bind(s.decided_by.as_deref())
            .bind(s.duration_ms)
            .bind(s.exit_status)
            .bind(s.now)
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn confirm(&self, tenant: &str, key: &str) -> Result<bool, JournalError> {
        let done = sqlx::query(CONFIRM)
            .bind(clean(tenant))
            .bind(clean(key))
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn record_decision(
        &self,
        tenant: &str,
        key: &str,
        decision: &str,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError> {
        let done = sqlx::query(RECORD_DECISION)
            .bind(clean(tenant))
            .bind(clean(key))
            .bind(clean(decision))
            .bind(decided_by.map(clean))
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn mark_undone(&self, tenant: &str, key: &str) -> Result<bool, JournalError> {
        let done =
            sqlx::query(UNDO).bind(clean(tenant)).bind(clean(key)).bind(now_ms()).execute(&self.pool).await?;
        Ok(moved(done))
    }

    async fn get(&self, tenant: &str, key: &str) -> Result<Option<Attempt>, JournalError> {
        self.read_attempt(tenant, key).await
    }

    async fn query(&self, tenant: &str, filter: &AttemptFilter) -> Result<Vec<Attempt>, JournalError> {
        self.read_attempts(tenant, filter).await
    }

    async fn register_instance(&self, instance: &InstanceInfo) -> Result<(), JournalError> {
        sqlx::query(REGISTER_INSTANCE)
            .bind(clean(&instance.id))
            .bind(clean(&instance.host))
            .bind(i64::from(instance.pid))
            .bind(instance.start_ticks.and_then(|ticks| i64::try_from(ticks).ok()))
            .bind(instance.version.as_deref().map(clean))
            .bind(instance.address.as_deref().map(clean))
            .bind(instance.in_flight.and_then(|n| i64::try_from(n).ok()))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn heartbeat(&self, instance_id: &str) -> Result<(), JournalError> {
        sqlx::query(HEARTBEAT).bind(clean(instance_id)).execute(&self.pool).await?;
        Ok(())
    }

    async fn reconcile(&self, policy: &ReconcilePolicy) -> Result<ReconcileReport, JournalError> {
        let now: i64 = sqlx::query_scalar(DATABASE_NOW).fetch_one(&self.pool).await?;
        let registered: Vec<InstanceRow> = sqlx::query_as(INSTANCES).fetch_all(&self.pool).await?;
        let owners: Vec<String> = sqlx::query(PROPOSED_OWNERS)
            .fetch_all(&self.pool)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        let dead = dead_instances(&registered, &owners, policy, now, &host_name());
        let mut abandoned = Vec::new();
        if !dead.is_empty() {
            let mut tx = self.pool.begin().await?;
            for instance in &dead {
                let rows = sqlx::query(ABANDON)
                    .bind(instance)
                    .bind(ABANDONED_ERROR)
                    .bind(now)
                    .fetch_all(&mut *tx)
                    .await?;
                for row in rows {
                    abandoned.push((row.try_get(0)?, row.try_get(1)?));
                }
                sqlx::query(FORGET_INSTANCE).bind(instance).execute(&mut *tx).await?;
            }
            tx.commit().await?;
        }
        let Some(after) = policy.unconfirmed_after_ms else {
            return Ok(ReconcileReport { abandoned, unconfirmed: Vec::new() });
        };
        let rows: Vec<AttemptRow> = sqlx::query_as(UNCONFIRMED)
            .bind(now.saturating_sub(after))
            .bind(i64::from(MAX_ROWS))
            .fetch_all(&self.pool)
            .await?;
        let unconfirmed = rows.into_iter().map(Attempt::try_from).collect::<Result<_, _>>()?;
        Ok(ReconcileReport { abandoned, unconfirmed })
    }

    async fn insert_approval(&self, approval: &PendingApproval) -> Result<(), JournalError> {
        let a = ApprovalValues::new(approval);
        sqlx::query(INSERT_APPROVAL)
            .bind(&a.id)
            .bind(&a.tenant)
            .bind(&a.session_id)
            .bind(&a.attempt_key)
            .bind(&a.call_id)
            .bind(&a.tool)
            .bind(&a.api)
            .bind(&a.arguments)
            .bind(&a.reason)
            .bind(&a.status)
            .bind(&a.decision)
            .bind(&a.decided_by)
            .bind(a.created_at)
            .bind(a.decided_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn decide_approval(
        &self,
        tenant: &str,
        id: &str,
        status: &str,
        decision: &Value,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError> {
        let Some(d) = DecisionValues::new(tenant, id, status, decision, decided_by) else { return Ok(false) };
        let done = sqlx::query(DECIDE_APPROVAL)
            .bind(&d.tenant)
            .bind(&d.id)
            .bind(&d.status)
            .bind(&d.decision)
            .bind(&d.decided_by)
            .bind(d.now)
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn get_approval(&self, tenant: &str, id: &str) -> Result<Option<PendingApproval>, JournalError> {
        self.read_approval(tenant, id).await
    }

    async fn list_pending_approvals(
        &self,
        tenant: &str,
        session_id: Option<&str>,
    ) -> Result<Vec<PendingApproval>, JournalError> {
        self.read_pending_approvals(tenant, session_id).await
    }

    async fn remember(&self, decision: &RememberedDecision) -> Result<(), JournalError> {
        let r = RememberValues::new(decision);
        sqlx::query(REMEMBER)
            .bind(&r.id)
            .bind(&r.tenant)
            .bind(&r.project)
            .bind(&r.tool)
            .bind(&r.api)
            .bind(&r.argument_prefix)
            .bind(&r.created_by)
            .bind(r.created_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn decided_approvals(
        &self,
        tenant: &str,
        limit: u32,
    ) -> Result<Vec<PendingApproval>, JournalError> {
        self.read_decided_approvals(tenant, limit).await
    }

    async fn remembered(
        &self,
        tenant: &str,
        project: Option<&str>,
    ) -> Result<Vec<RememberedDecision>, JournalError> {
        self.read_remembered(tenant, project).await
    }

    async fn revoke(&self, tenant: &str, id: &str) -> Result<bool, JournalError> {
        let done = sqlx::query(REVOKE).bind(clean(tenant)).bind(clean(id)).execute(&self.pool).await?;
        Ok(moved(done))
    }

    async fn put_session(&self, session: &SessionRecord) -> Result<(), JournalError> {
        let s = SessionValues::new(session);
        sqlx::query(PUT_SESSION)
            .bind(&s.id)
            .bind(&s.tenant)
            .bind(s.user_id.as_deref())
            .bind(&s.config)
            .bind(&s.status)
            .bind(s.created_at)
            .bind(s.ended_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn get_session(&self, tenant: &str, id: &str) -> Result<Option<SessionRecord>, JournalError> {
        self.read_session(tenant, id).await
    }

    async fn end_session(&self, tenant: &str, id: &str) -> Result<bool, JournalError> {
        let done = sqlx::query(END_SESSION)
            .bind(clean(tenant))
            .bind(clean(id))
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(moved(done))
    }

    async fn list_sessions(
        &self,
        tenant: &str,
        filter: &SessionFilter,
    ) -> Result<Vec<SessionRecord>, JournalError> {
        self.read_sessions(tenant, filter).await
    }

    async fn instances(&self) -> Result<Vec<crate::InstanceRecord>, JournalError> {
        self.read_instances().await
    }

    async fn put_console_session(&self, session: &crate::ConsoleSession) -> Result<(), JournalError> {
        sqlx::query(FORGET_CONSOLE_SESSIONS).bind(now_ms()).execute(&self.pool).await?;
        sqlx::query(PUT_CONSOLE_SESSION)
            .bind(clean(&session.digest))
            .bind(clean(&session.tenant))
            .bind(clean(&session.principal))
            .bind(clean(&session.role))
            .bind(clean(&session.csrf))
            .bind(session.created_at)
            .bind(session.expires_at)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    async fn console_session(
        &self,
        digest: &str,
        now: i64,
    ) -> Result<Option<crate::ConsoleSession>, JournalError> {
        self.read_console_session(digest, now).await
    }

    async fn end_console_session(&self, digest: &str) -> Result<bool, JournalError> {
        let done = sqlx::query(END_CONSOLE_SESSION).bind(clean(digest)).execute(&self.pool).await?;
        Ok(moved(done))
    }

    async fn expire_results(
        &self,
        after_ms: i64,
        before_ms: i64,
        keep: u32,
        limit: u32,
    ) -> Result<u64, JournalError> {
        let done = sqlx::query(EXPIRE_RESULTS)
            .bind(after_ms)
            .bind(before_ms)
            .bind(i32::try_from(keep).unwrap_or(i32::MAX))
            .bind(i64::from(limit))
            .bind(now_ms())
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn prune(&self, before_ms: i64, limit: u32) -> Result<u64, JournalError> {
        // Each statement is a batch of its own: short transactions, no long lock on the table.
        let mut deleted = 0u64;
        for statement in [PRUNE_ATTEMPTS, PRUNE_APPROVALS, PRUNE_SESSIONS] {
            let left = u64::from(limit).saturating_sub(deleted);
            if left == 0 {
                break;
            }
            let done = sqlx::query(statement)
                .bind(before_ms)
                .bind(i64::try_from(left).unwrap_or(i64::MAX))
                .execute(&self.pool)
                .await?;
            deleted += done.rows_affected();
        }
        Ok(deleted)
    }
}

const INSERT_RECORD: &str = "INSERT INTO records (tenant, id, collection, person, project, tag, title, body, \
     metadata, created_at, updated_at) SELECT $1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10, $10 \
     WHERE (SELECT count(*) FROM records WHERE tenant = $1 AND collection = $3 AND person = $4) < $11";
const UPDATE_RECORD: &str = "UPDATE records SET tag = COALESCE($5, tag), title = COALESCE($6, title), \
     body = COALESCE($7, body), metadata = COALESCE($8::jsonb, metadata), updated_at = $9 \
     WHERE tenant = $1 AND person = $2 AND collection = $3 AND id = $4";
const REMOVE_RECORD: &str =
    "DELETE FROM records WHERE tenant = $1 AND person = $2 AND collection = $3 AND id = $4";
const GET_RECORD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM records r WHERE r.tenant = $1 AND r.person = $2 AND r.collection = $3 AND r.id = $4"
);
const LIST_RECORDS: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", 0.0::float8 AS score FROM records r WHERE r.tenant = $1 AND r.collection = $2 AND r.person = $3 \
     AND ($4 = 'any' OR r.project IS NULL OR ($4 = 'with' AND r.project = $5)) AND ($6::text IS NULL OR r.tag = $6) \
     ORDER BY r.updated_at DESC, r.id LIMIT $7"
);
const SEARCH_RECORDS: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", ts_rank(r.search, to_tsquery('english', $8))::float8 AS score FROM records r \
     WHERE r.search @@ to_tsquery('english', $8) AND r.tenant = $1 AND r.collection = $2 AND r.person = $3 \
     AND ($4 = 'any' OR r.project IS NULL OR ($4 = 'with' AND r.project = $5)) AND ($6::text IS NULL OR r.tag = $6) \
     ORDER BY score DESC, r.updated_at DESC LIMIT $7"
);

const SET_RECORD_VECTOR: &str = "UPDATE records SET embedding_model = $5, embedding = $6 \
     WHERE tenant = $1 AND person = $2 AND collection = $3 AND id = $4";
const RECORD_VECTORS: &str = "SELECT r.id, r.embedding FROM records r WHERE r.tenant = $1 AND r.collection = $2 \
     AND r.person = $3 AND ($4 = 'any' OR r.project IS NULL OR ($4 = 'with' AND r.project = $5)) \
     AND ($6::text IS NULL OR r.tag = $6) AND r.embedding_model = $7 AND r.embedding IS NOT NULL";

impl tool_core::storage::RecordStore for PostgresJournal {
    fn insert_record(
        &self,
        record: tool_core::storage::NewRecord,
        limit: u64,
    ) -> futures::future::BoxFuture<'_, Result<tool_core::storage::Record, tool_core::storage::StorageError>>
    {
        Box::pin(async move {
            use crate::records::{sqlx_backend, text};
            let id = crate::records::new_id()?;
            let owner = tool_core::storage::Owner {
                tenant: text(&record.owner.tenant),
                person: text(&record.owner.person),
            };
            let collection = text(&record.collection);
            let limit_i = i64::try_from(limit).unwrap_or(i64::MAX);
            // Counted and inserted under a lock per owner and collection, so that instances racing
            // for the last place cannot both take it.
            let mut tx = self.pool.begin().await.map_err(sqlx_backend)?;
            sqlx::query("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))")
                .bind(format!("records/{}/{}/{}", owner.tenant, owner.person, collection))
                .execute(&mut *tx)
                .await
                .map_err(sqlx_backend)?;
            let done = sqlx::query(INSERT_RECORD)
                .bind(&owner.tenant)
                .bind(&id)
                .bind(&collection)
                .bind(&owner.person)
                .bind(record.project.as_deref().map(text))
                .bind(text(&record.tag))
                .bind(text(&record.title))
                .bind(text(&record.body))
                .bind(crate::rows::json_text(&record.metadata))
                .bind(crate::rows::now_ms())
                .bind(limit_i)
                .execute(&mut *tx)
                .await
                .map_err(sqlx_backend)?;
            tx.commit().await.map_err(sqlx_backend)?;
            if done.rows_affected() != 1 {
                return Err(tool_core::storage::StorageError::Full { limit });
            }
            self.get_record(&owner, &collection, &id)
                .await?
                .ok_or_else(|| tool_core::storage::StorageError::Backend("the stored record is gone".into()))
        })
    }

    fn update_record<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
        patch: tool_core::storage::RecordPatch,
    ) -> futures::future::BoxFuture<'a, Result<tool_core::storage::Record, tool_core::storage::StorageError>>
    {
        Box::pin(async move {
            use crate::records::{sqlx_backend, text};
            let done = sqlx::query(UPDATE_RECORD)
                .bind(text(&owner.tenant))
                .bind(text(&owner.person))
                .bind(text(collection))
                .bind(text(id))
                .bind(patch.tag.as_deref().map(text))
                .bind(patch.title.as_deref().map(text))
                .bind(patch.body.as_deref().map(text))
                .bind(patch.metadata.map(|m| crate::rows::json_text(&m)))
                .bind(crate::rows::now_ms())
                .execute(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            if done.rows_affected() != 1 {
                return Err(tool_core::storage::StorageError::NotFound(id.to_owned()));
            }
            self.get_record(owner, collection, id)
                .await?
                .ok_or_else(|| tool_core::storage::StorageError::NotFound(id.to_owned()))
        })
    }

    fn remove_record<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
    ) -> futures::future::BoxFuture<'a, Result<bool, tool_core::storage::StorageError>> {
        Box::pin(async move {
            use crate::records::{sqlx_backend, text};
            let done = sqlx::query(REMOVE_RECORD)
                .bind(text(&owner.tenant))
                .bind(text(&owner.person))
                .bind(text(collection))
                .bind(text(id))
                .execute(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            Ok(done.rows_affected() == 1)
        })
    }

    fn find_records(
        &self,
        query: tool_core::storage::RecordQuery,
    ) -> futures::future::BoxFuture<
        '_,
        Result<Vec<tool_core::storage::RecordHit>, tool_core::storage::StorageError>,
    > {
        Box::pin(async move {
            use crate::records::sqlx_backend;
            let words = query.text.as_deref().map(tool_core::storage::query_words).unwrap_or_default();
            if query.text.is_some() && words.is_empty() {
                return Ok(Vec::new());
            }
            let sql = if query.text.is_some() { SEARCH_RECORDS } else { LIST_RECORDS };
            let mut statement =
                bind_record_filter!(sqlx::query_as::<_, crate::records::ScoredRow>(sql), query)
                    .bind(i64::from(query.limit));
            if query.text.is_some() {
                statement = statement.bind(words.join(" | "));
            }
            let rows = statement.fetch_all(&self.pool).await.map_err(sqlx_backend)?;
            Ok(rows.into_iter().map(crate::records::ScoredRow::into_hit).collect())
        })
    }

    fn set_record_vector<'a>(
        &'a self,
        owner: &'a tool_core::storage::Owner,
        collection: &'a str,
        id: &'a str,
        vector: Option<(&'a str, Vec<f32>)>,
    ) -> futures::future::BoxFuture<'a, Result<(), tool_core::storage::StorageError>> {
        Box::pin(async move {
            use crate::records::{sqlx_backend, text};
            let (model, bytes) = match vector {
                Some((model, vector)) => (Some(text(model)), Some(tool_core::embed::to_bytes(&vector))),
                None => (None, None),
            };
            sqlx::query(SET_RECORD_VECTOR)
                .bind(text(&owner.tenant))
                .bind(text(&owner.person))
                .bind(text(collection))
                .bind(text(id))
                .bind(model)
                .bind(bytes)
                .execute(&self.pool)
                .await
                .map_err(sqlx_backend)?;
            Ok(())
        })
    }

    record_reads!(pool);
}
