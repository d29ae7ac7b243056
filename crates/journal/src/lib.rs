//! The journal: a durable record of every tool call, approval and session.
//!
//! Every call is journalled before it runs (`proposed`) and settled after (`executed`, `failed`,
//! `blocked`, `denied`). A write only ever moves the row that the call proposed, that is still
//! open, and that belongs to the caller's tenant: the guarded transitions are the only way a row
//! changes. A reconciler turns rows whose owning process is gone into `abandoned` — never silently
//! dropped — and reports executed rows that were never confirmed.
//!
//! Rows are keyed `message_id:call_id` when there is a message id, else the bare call id (models
//! reuse call ids across turns), and always scoped by tenant.
//!
//! Two implementations share one trait and one test suite: SQLite ([`SqliteJournal`]: embedded,
//! the default; WAL, one writer, group commits) and Postgres ([`PostgresJournal`]: several
//! instances). [`open`] picks one from a URL. Each runs its own embedded migrations when it opens
//! (`migrations/sqlite`, `migrations/postgres`).
//!
//! # Guarded transitions
//!
//! Every write is one guarded statement whose `WHERE` clause *is* the state machine:
//!
//! | operation | statement | moves |
//! |---|---|---|
//! | [`Journal::propose`] | `INSERT … ON CONFLICT (tenant, key) DO NOTHING` | nothing → `proposed` |
//! | [`Journal::settle`] | `UPDATE … WHERE tenant = ? AND key = ? AND status = 'proposed'` | `proposed` → executed, failed, blocked, denied |
//! | [`Journal::upsert_settled`] | `INSERT … ON CONFLICT DO UPDATE … WHERE status = 'proposed'` | nothing or `proposed` → settled |
//! | [`Journal::record_decision`] | `UPDATE … WHERE … AND status = 'proposed'` | `proposed` → `proposed`, with who let it run |
//! | [`Journal::confirm`] | `UPDATE … WHERE … AND status = 'executed'` | `executed` → `confirmed` |
//! | [`Journal::reconcile`] | `UPDATE … WHERE status = 'proposed' AND instance_id = ?` | `proposed` → `abandoned` |
//! | [`Journal::decide_approval`] | `UPDATE … WHERE tenant = ? AND id = ? AND status = 'pending'` | first decision wins |
//!
//! So a late settle (a retry, a timeout racing a result, a reconciler that got there first)
//! changes nothing and returns `false`, and a tenant can never move another tenant's row even
//! when both use the same call and message ids: the primary key is `(tenant, key)` and every
//! statement names the tenant. A settlement whose status is not one of executed, failed, blocked
//! or denied ([`AttemptStatus::is_settlement`]) is refused without touching the database: the
//! call returns `Ok(false)`.
//!
//! All stored text goes through [`strip_controls`] / [`strip_controls_json`] first (Postgres
//! rejects NUL), identifiers included, and the identifiers given to lookups are cleaned the same
//! way, so `get(tenant, &attempt.key())` finds what `propose(&attempt)` stored. An empty key is
//! refused by the database (a `CHECK`): calls without any id would otherwise collide.
//!
//! # SQLite: one writer, group commit
//!
//! SQLite allows one writer at a time, and a commit costs far more than a statement. So
//! [`SqliteJournal`] owns exactly one write connection, driven by a writer thread of its own that
//! calls SQLite directly (`rusqlite`, on the same bundled library as sqlx): every write (propose,
//! settle, approvals, sessions…) is sent to it over a channel with a reply slot. The thread takes whatever is queued (up to 256 operations), runs all of it in one transaction, and only
//! then answers each caller, so an answer always means "committed".
//!
//! Inside a batch, the proposes, settles and upserts of distinct rows become **one** statement:
//! an `INSERT … SELECT … FROM (VALUES …) ON CONFLICT (tenant, key) DO UPDATE … WHERE status =
//! 'proposed' AND excluded.status <> 'proposed' RETURNING tenant, key`. A propose inserts its row
//! or, on a conflict, changes nothing; a settle is admitted only when its row exists (so it never
//! creates one) and then always lands in the guarded `DO UPDATE`, which writes only the settlement
//! columns; an upsert inserts a settled row or settles a proposed one. `RETURNING` names exactly
//! the rows that moved, so each caller gets its own answer. Two operations on the same row never
//! share a statement (the batch is cut into phases at the second one, and an abandon runs alone),
//! so their order and the guards hold exactly as if they had run one by one. A batch that is one
//! statement runs without `BEGIN`/`COMMIT` around it (a statement is atomic); any other batch runs
//! in `BEGIN IMMEDIATE` … `COMMIT`. (Through sqlx, every statement was a round trip to its SQLite
//! worker thread, and the writer a task: two more thread hops a write.)
//!
//! A quick write (one row) that is the only write under way, while the writer's last batch was of
//! one operation, runs on its caller's thread instead (the connection is behind a mutex): at one
//! caller the wake-ups of the writer thread and back were most of a write's cost (one client's
//! p50 through the server from 0.28-0.34 ms to 0.22 ms, `docs/benchmarks.md`). Such a write never
//! waits for another process's lock on a Tokio worker: it gives up at once and is queued.
//!
//! When a statement of a batch fails, the transaction is rolled back and the batch is run again
//! one operation per statement; the operation that fails then gets the error, is taken out, and
//! the rest is run again, so only the failing caller sees an error and nobody is answered for a
//! write that was rolled back. If the commit itself fails, every caller of the batch gets the
//! error. Reads use a separate pool of four `query_only` connections: WAL lets them run alongside
//! the writer, and since answers come after the commit a caller always reads its own writes. The
//! database runs in WAL mode with `synchronous = NORMAL` (a commit survives the process being
//! killed; the last commits may be lost if the machine loses power), statement journals in memory
//! and a 5 s busy timeout for other processes that open the same file.
//!
//! `sqlite::memory:` opens a private, throwaway database: a file in a directory of its own under the
//! system's temporary folder, removed when the journal is dropped. (An in-memory database lives in
//! one connection, and the writer thread and the read pool are several.)
//!
//! # Postgres
//!
//! [`PostgresJournal`] runs the same guarded statements on a `PgPool` (16 connections); JSON is
//! stored as `JSONB`, times as `BIGINT` Unix milliseconds, as in SQLite. Two planner traps are
//! avoided on purpose: the single-row guards compare `status COLLATE "C"` (the same equality) so
//! that a status index, full of dead `proposed` entries between vacuums, is never chosen over the
//! primary key; and connections plan each statement afresh (`plan_cache_mode =
//! force_custom_plan`), because a generic plan cached while the table was empty can keep
//! scanning a tenant-prefixed index for `tenant = $1 AND key = $2` as the table grows.
//!
//! # Instances and the reconciler
//!
//! Each process registers itself ([`Journal::register_instance`], usually with
//! [`current_instance`]) before it proposes anything, and keeps its heartbeat fresh
//! ([`spawn_heartbeat`]). Every row records the instance that proposed it. At start (and from time
//! to time) [`Journal::reconcile`] looks at each other instance that owns `proposed` rows, or is
//! registered, and declares it dead when
//!
//! * it has no row in `journal_instances` (it never registered, or was pruned), or
//! * its heartbeat is older than [`ReconcilePolicy::instance_lease_ms`], or
//! * it ran on this host and its pid is gone, is a zombie, or now belongs to another process
//!   (the start time in clock ticks, field 22 of `/proc/<pid>/stat`, differs).
//!
//! The proposed rows of a dead instance become `abandoned` (error kind `abandoned`) and its
//! instance row is deleted; rows of [`ReconcilePolicy::current_instance`] are never touched.
//! Executed rows settled longer than [`ReconcilePolicy::unconfirmed_after_ms`] ago are reported
//! (at most 1 000, oldest attempted first, whole) and left as they are; without a threshold none
//! are read. The query walks the
//! `(status, attempted_at)` index (a call is attempted before it settles), so it stays quick on a
//! journal of millions of rows: ordered by the settle time it scanned them all, for seconds, and a
//! `TRUNCATE` checkpoint waiting behind it held the writer as long (seen in the soak run).
#![deny(missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

mod instance;
#[macro_use]
mod reads;
pub mod outbox;
mod pack;
#[macro_use]
mod knowledge;
#[macro_use]
mod records;
mod postgres;
mod rows;
mod sqlite;

pub mod compact;
pub use instance::{current_instance, host_name, new_instance_id};
pub use postgres::PostgresJournal;
pub use sqlite::{BackupError, SqliteJournal, SqliteTuning, backup, sqlite_path};

/// Opens the journal a URL names and runs its migrations.
///
/// * `sqlite://PATH` or `sqlite:PATH` (the file is created if missing) → [`SqliteJournal`];
/// * `sqlite::memory:` → a private, throwaway [`SqliteJournal`] (gone when it is dropped);
/// * `postgres://…` or `postgresql://…` → [`PostgresJournal`].
///
/// Must be called inside a Tokio runtime: the SQLite journal spawns its checkpointer on it.
///
/// # Errors
///
/// [`JournalError::UnsupportedUrl`] for any other scheme; [`JournalError::Database`] when the
/// database cannot be opened; [`JournalError::Migrate`] when its migrations fail.
pub async fn open(url: &str) -> Result<Arc<dyn Journal>, JournalError> {
    if url.starts_with("sqlite:") {
        Ok(Arc::new(SqliteJournal::open(url).await?))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Arc::new(PostgresJournal::open(url).await?))
    } else {
        // Keep credentials out of the error: only the scheme is shown.
        let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
        Err(JournalError::UnsupportedUrl(format!("{scheme}:…")))
    }
}

/// What [`inspect`] found of a journal's database, without changing anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspection {
    /// What it is (`SQLite at PATH`, `Postgres at HOST:PORT/DB`…), without credentials.
    pub describe: String,
    /// The file does not exist yet: the server makes it at start.
    pub missing: bool,
    /// Migrations the next start will run, by description, oldest first.
    pub pending: Vec<String>,
}

/// Looks at the database a URL names as [`open`] would use it, changing nothing: the file is not
/// created, no migration runs, no table is made. Says which migrations a start would run.
///
/// # Errors
///
/// [`JournalError::UnsupportedUrl`]; [`JournalError::Database`] when the database cannot be
/// reached, read or logged into, or does not answer within `timeout`.
pub async fn inspect(url: &str, timeout: Duration) -> Result<Inspection, JournalError> {
    use sqlx::ConnectOptions as _;
    let timed_out = || JournalError::Database(sqlx::Error::PoolTimedOut);
    if url.starts_with("sqlite:") {
        let Some(path) = sqlite_path(url) else {
            return Ok(Inspection {
                describe: "SQLite in memory (nothing is kept)".into(),
                missing: false,
                pending: Vec::new(),
            });
        };
        let describe = format!("SQLite at {}", path.display());
        if !path.exists() {
            let pending = sqlite::migrations().map(|(_, description)| description).collect();
            return Ok(Inspection { describe, missing: true, pending });
        }
        let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&path).read_only(true);
        let mut conn = tokio::time::timeout(timeout, options.connect()).await.map_err(|_| timed_out())??;
        let applied = applied_migrations!(&mut conn)?;
        let pending =
            sqlite::migrations().filter(|(version, _)| !applied.contains(version)).map(|(_, d)| d).collect();
        return Ok(Inspection { describe, missing: false, pending });
    }
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        let options: sqlx::postgres::PgConnectOptions = url.parse()?;
        let describe = format!(
            "Postgres at {}:{}/{}",
            options.get_host(),
            options.get_port(),
            options.get_database().unwrap_or("(the user's database)")
        );
        let mut conn = tokio::time::timeout(timeout, options.connect()).await.map_err(|_| timed_out())??;
        let applied = tokio::time::timeout(timeout, async { applied_migrations!(&mut conn) })
            .await
            .map_err(|_| timed_out())??;
        let pending = postgres::migrations()
            .filter(|(version, _)| !applied.contains(version))
            .map(|(_, d)| d)
            .collect();
        return Ok(Inspection { describe, missing: false, pending });
    }
    let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
    Err(JournalError::UnsupportedUrl(format!("{scheme}:…")))
}

/// The versions of the migrations a database has run (none when it has no migrations table yet).
macro_rules! applied_migrations {
    ($conn:expr) => {
        match sqlx::query_as::<_, (i64,)>("SELECT version FROM _sqlx_migrations WHERE success")
            .fetch_all($conn)
            .await
        {
            Ok(rows) => Ok::<Vec<i64>, JournalError>(rows.into_iter().map(|(version,)| version).collect()),
            // No table yet: nothing has run.
            Err(sqlx::Error::Database(error)) if error.message().contains("_sqlx_migrations") => {
                Ok(Vec::new())
            }
            Err(error) => Err(error.into()),
        }
    };
}
use applied_migrations;

/// The stores on one database: the journal, and the services tools that keep data receive.
#[derive(Debug, Clone)]
pub struct Stores {
    /// The journal.
    pub journal: Arc<dyn Journal>,
    /// Records (memories, documents): `tool_core::storage::RecordStore`.
    pub records: Arc<dyn tool_core::storage::RecordStore>,
    /// Knowledge bases: `tool_core::knowledge::KnowledgeStore`.
    pub knowledge: Arc<dyn tool_core::knowledge::KnowledgeStore>,
}

impl Stores {
    fn of<T>(store: Arc<T>) -> Self
    where
        T: Journal + tool_core::storage::RecordStore + tool_core::knowledge::KnowledgeStore + 'static,
    {
        Self { journal: store.clone(), records: store.clone(), knowledge: store }
    }
}

/// Opens the journal a URL names (as [`open`]) and the stores tools use on the same database.
///
/// # Errors
///
/// As [`open`].
pub async fn open_stores(url: &str) -> Result<Stores, JournalError> {
    if url.starts_with("sqlite:") {
        Ok(Stores::of(Arc::new(SqliteJournal::open(url).await?)))
    } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        Ok(Stores::of(Arc::new(PostgresJournal::open(url).await?)))
    } else {
        let scheme = url.split_once(':').map_or(url, |(scheme, _)| scheme);
        Err(JournalError::UnsupportedUrl(format!("{scheme}:…")))
    }
}

/// Keeps an instance registered: calls [`Journal::register_instance`] now and then every `every`,
/// until the returned task is aborted (or its runtime stops). Registering (an upsert) rather than
/// only refreshing the heartbeat brings the row back if a reconciler pruned it during a stall.
/// Failures are retried at the next tick. Choose `every` well below the reconcilers'
/// [`ReconcilePolicy::instance_lease_ms`] (a third of it, say).
pub fn spawn_heartbeat(
    journal: Arc<dyn Journal>,
    instance: InstanceInfo,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticks.tick().await;
            // A failed beat is retried at the next tick; the lease covers a few misses.
            let _ = journal.register_instance(&instance).await;
        }
    })
}

/// The row key of a call: `message_id:call_id`, or the bare call id without a message id.
pub fn attempt_key(message_id: Option<&str>, call_id: &str) -> String {
    match message_id {
        Some(message) if !message.is_empty() => format!("{message}:{call_id}"),
        _ => call_id.to_owned(),
    }
}

/// Where a call stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub enum AttemptStatus {
    /// Recorded, not yet settled.
    Proposed,
    /// Ran and succeeded.
    Executed,
    /// Executed and acknowledged by the caller (the model saw the result).
    Confirmed,
    /// Executed, then undone.
    Compensated,
    /// Ran (or tried to) and failed: errors, timeouts, cancellations.
    Failed,
    /// Policy blocked it without asking (headless, read-only, hooks).
    Blocked,
    /// A person denied it.
    Denied,
    /// Proposed by a process that died before settling it.
    Abandoned,
}

impl AttemptStatus {
    /// The stable string stored in the database.
    pub const fn as_str(self) -> &'static str {
        match self {
            Self::Proposed => "proposed",
            Self::Executed => "executed",
            Self::Confirmed => "confirmed",
            Self::Compensated => "compensated",
            Self::Failed => "failed",
            Self::Blocked => "blocked",
            Self::Denied => "denied",
            Self::Abandoned => "abandoned",
        }
    }

    /// Parses the stored string.
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Proposed,
            Self::Executed,
            Self::Confirmed,
            Self::Compensated,
            Self::Failed,
            Self::Blocked,
            Self::Denied,
            Self::Abandoned,
        ]
        .into_iter()
        .find(|s| s.as_str() == text)
    }

    /// Whether the row is settled (anything but `proposed`).
    pub const fn is_settled(self) -> bool {
        !matches!(self, Self::Proposed)
    }

    /// Whether [`Journal::settle`] and [`Journal::upsert_settled`] accept this status: executed,
    /// failed, blocked or denied. (`confirmed` and `compensated` follow `executed`; `abandoned`
    /// is the reconciler's.)
    pub const fn is_settlement(self) -> bool {
        matches!(self, Self::Executed | Self::Failed | Self::Blocked | Self::Denied)
    }
}

/// A call about to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewAttempt {
    /// The tenant that owns the call.
    pub tenant: String,
    /// The model's call id (`<parent>/<n>` for nested calls).
    pub call_id: String,
    /// The model message that carried the call.
    pub message_id: Option<String>,
    /// The session.
    pub session_id: String,
    /// The parent call of a nested call.
    pub parent_call_id: Option<String>,
    /// The user on whose behalf it runs.
    pub user_id: Option<String>,
    /// The agent that asked.
    pub agent_id: Option<String>,
    /// The tool's identifier.
    pub tool: String,
    /// The API (action) name.
    pub api: String,
    /// The function name as the model sent it.
    pub function_name: String,
    /// The arguments (after preparation).
    pub arguments: Value,
    /// read, write or exec.
    pub tier: Option<String>,
    /// The process instance that proposed the row (for the reconciler).
    pub instance_id: String,
}

impl NewAttempt {
    /// The row key.
    pub fn key(&self) -> String {
        attempt_key(self.message_id.as_deref(), &self.call_id)
    }
}

/// The outcome of a propose.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proposed {
    /// The row key.
    pub key: String,
    /// False when a row with this key already existed for the tenant (left untouched).
    pub created: bool,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Settlement {
    /// executed, failed, blocked or denied.
    pub status: AttemptStatus,
    /// The result: `{content, state}` as stored (NUL and control characters stripped).
    pub result: Option<Value>,
    /// The error kind (`timeout`, `denied`…).
    pub error_kind: Option<String>,
    /// The error message.
    pub error: Option<String>,
    /// How approval was decided (`policy`, `allow_once`, `allow_session`, `allow_always`,
    /// `deny`, `headless_block`…).
    pub decision: Option<String>,
    /// Who decided (a user id, `policy`, `auto_run`).
    pub decided_by: Option<String>,
    /// Run time in milliseconds.
    pub duration_ms: Option<i64>,
    /// A command's exit status, when there was one.
    pub exit_status: Option<i32>,
}

/// One journalled call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Attempt {
    /// The tenant.
    pub tenant: String,
    /// The row key.
    pub key: String,
    /// The call as proposed.
    pub call_id: String,
    /// The message id.
    pub message_id: Option<String>,
    /// The session.
    pub session_id: String,
    /// The parent call.
    pub parent_call_id: Option<String>,
    /// The user.
    pub user_id: Option<String>,
    /// The agent.
    pub agent_id: Option<String>,
    /// The tool.
    pub tool: String,
    /// The API.
    pub api: String,
    /// The function name the model used.
    pub function_name: String,
    /// The arguments.
    pub arguments: Value,
    /// The tier.
    pub tier: Option<String>,
    /// The owning instance.
    pub instance_id: String,
    /// Where it stands.
    pub status: AttemptStatus,
    /// The result.
    pub result: Option<Value>,
    /// The error kind.
    pub error_kind: Option<String>,
    /// The error message.
    pub error: Option<String>,
    /// The approval decision.
    pub decision: Option<String>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// Run time.
    pub duration_ms: Option<i64>,
    /// Exit status.
    pub exit_status: Option<i32>,
    /// When it was proposed (Unix milliseconds).
    pub attempted_at: i64,
    /// When it last changed (Unix milliseconds).
    pub updated_at: i64,
}

/// What to list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttemptFilter {
    /// Only this session.
    pub session_id: Option<String>,
    /// Only this status.
    pub status: Option<AttemptStatus>,
    /// Only this tool.
    pub tool: Option<String>,
    /// Proposed at or after (Unix milliseconds).
    pub since: Option<i64>,
    /// Proposed before (Unix milliseconds).
    pub until: Option<i64>,
    /// Only rows decided this way (`policy`, `allow_once`, `deny`, `headless_block`…).
    #[serde(default)]
    pub decision: Option<String>,
    /// Only this agent's (the client that proposed them).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The page after this row (its `attempted_at` and `key`, as the last row of the page before
    /// gave them): rows older than it, ordered by time then key.
    #[serde(default)]
    pub after: Option<(i64, String)>,
    /// At most this many rows (newest first); the store caps it at 1000.
    pub limit: Option<u32>,
}

/// A running process that proposes rows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceInfo {
    /// A fresh id per process start.
    pub id: String,
    /// The host name.
    pub host: String,
    /// The process id.
    pub pid: u32,
    /// The process's start time in clock ticks since boot (field 22 of `/proc/<pid>/stat`), to
    /// tell a live process from a reused pid.
    pub start_ticks: Option<u64>,
    /// The version it runs (shown to operators).
    #[serde(default)]
    pub version: Option<String>,
    /// Where it serves (shown to operators).
    #[serde(default)]
    pub address: Option<String>,
    /// Calls it runs now, as of its last heartbeat.
    #[serde(default)]
    pub in_flight: Option<u64>,
}

/// An instance as its last heartbeat left it (what the console's operator page shows).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InstanceRecord {
    /// Its id.
    pub id: String,
    /// Its host.
    pub host: String,
    /// Its process id there.
    pub pid: i64,
    /// When it registered (Unix milliseconds).
    pub started_at: i64,
    /// Its last heartbeat (Unix milliseconds; the database's clock on Postgres).
    pub heartbeat_at: i64,
    /// The version it runs.
    pub version: Option<String>,
    /// Where it serves.
    pub address: Option<String>,
    /// Calls it ran at its last heartbeat.
    pub in_flight: Option<i64>,
}

/// Which sessions to list.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionFilter {
    /// Only `active` or `ended` ones.
    pub status: Option<String>,
    /// The page after this session (its `created_at` and id): older ones.
    pub after: Option<(i64, String)>,
    /// At most this many (newest first); capped at 1000.
    pub limit: Option<u32>,
}

/// A person signed in to the console: the cookie's token is kept as its SHA-256 only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConsoleSession {
    /// The SHA-256 (hex) of the cookie's token.
    pub digest: String,
    /// The tenant.
    pub tenant: String,
    /// Who (`TENANT/ROLE/NAME`).
    pub principal: String,
    /// The key's role.
    pub role: String,
    /// The token every form of this session carries (CSRF).
    pub csrf: String,
    /// When it began (Unix milliseconds).
    pub created_at: i64,
    /// When it ends.
    pub expires_at: i64,
}

/// What the reconciler did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ReconcileReport {
    /// Keys (tenant, key) of proposed rows turned `abandoned`.
    pub abandoned: Vec<(String, String)>,
    /// Executed rows older than the threshold that were never confirmed (left as they are).
    pub unconfirmed: Vec<Attempt>,
}

/// When the reconciler acts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReconcilePolicy {
    /// This process (its rows are never abandoned).
    pub current_instance: String,
    /// An instance whose heartbeat is older than this is presumed dead (milliseconds).
    pub instance_lease_ms: i64,
    /// Executed rows older than this are reported as unconfirmed (milliseconds); `None` does
    /// not look for them, so a periodic run that only abandons reads no rows.
    pub unconfirmed_after_ms: Option<i64>,
}

/// A question to a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct PendingApproval {
    /// The approval's id.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The session.
    pub session_id: String,
    /// The call's row key.
    pub attempt_key: String,
    /// The call id.
    pub call_id: String,
    /// The tool.
    pub tool: String,
    /// The API.
    pub api: String,
    /// The arguments shown to the person.
    pub arguments: Value,
    /// Why a person is asked.
    pub reason: String,
    /// `pending`, or the decision once made.
    pub status: String,
    /// The decision's detail (message for the model, remembered prefix…).
    pub decision: Option<Value>,
    /// Who decided.
    pub decided_by: Option<String>,
    /// When it was asked (Unix milliseconds).
    pub created_at: i64,
    /// When it was decided.
    pub decided_at: Option<i64>,
}

/// An "always allow" kept per tenant and project.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RememberedDecision {
    /// The decision's id.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The project (a working directory, or a name the front end chooses).
    pub project: String,
    /// The tool.
    pub tool: String,
    /// The API, or `*` for every API of the tool.
    pub api: String,
    /// For commands: the argument prefix allowed (`cargo test`); `None` allows any arguments.
    pub argument_prefix: Option<String>,
    /// Who made it.
    pub created_by: Option<String>,
    /// When (Unix milliseconds).
    pub created_at: i64,
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionRecord {
    /// The session's id.
    pub id: String,
    /// The tenant.
    pub tenant: String,
    /// The user.
    pub user_id: Option<String>,
    /// Everything else (working directory, mode, allow-list, budget…) as the front end defines it.
    pub config: Value,
    /// `active` or `ended`.
    pub status: String,
    /// When it was created (Unix milliseconds).
    pub created_at: i64,
    /// When it ended.
    pub ended_at: Option<i64>,
}

/// Why a journal operation failed.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The database refused or is unreachable.
    #[error("journal database error: {0}")]
    Database(#[from] sqlx::Error),
    /// SQLite refused a write (the writer thread's statements); an error that failed a whole
    /// batch is shared by its operations.
    #[error("journal database error: {0}")]
    Sqlite(Arc<rusqlite::Error>),
    /// Migrations failed.
    #[error("journal migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// A URL the journal cannot open.
    #[error("unsupported journal url `{0}`: use sqlite://PATH, sqlite::memory: or postgres://…")]
    UnsupportedUrl(String),
    /// A stored value that does not decode.
    #[error("corrupt journal row: {0}")]
    Corrupt(String),
    /// The SQLite writer thread is gone.
    #[error("the journal writer has stopped")]
    WriterGone,
}

impl From<rusqlite::Error> for JournalError {
    fn from(error: rusqlite::Error) -> Self {
        Self::Sqlite(Arc::new(error))
    }
}

/// The store behind the journal.
///
/// Every method is tenant-scoped except the instance methods and [`Journal::reconcile`], which
/// act for the whole database. Identifiers given to lookups are cleaned with [`strip_controls`]
/// like the stored ones.
///
/// # Errors
///
/// Every method returns [`JournalError::Database`] (or, for a SQLite write,
/// [`JournalError::Sqlite`]) when the database refuses the statement or cannot be reached, [`JournalError::Corrupt`] when a stored row does not decode, and (SQLite)
/// [`JournalError::WriterGone`] when the writer thread has stopped. A guard
/// that does not match is not an error: the method returns `false` (or `created: false`).
#[async_trait]
pub trait Journal: Send + Sync + std::fmt::Debug {
    /// Records a call as proposed; an existing row with the same tenant and key is left as it is.
    async fn propose(&self, attempt: &NewAttempt) -> Result<Proposed, JournalError>;
    /// Settles a proposed row; returns whether it moved (false if it is not `proposed`, or not
    /// this tenant's). `settlement.status` must be executed, failed, blocked or denied
    /// ([`AttemptStatus::is_settlement`]); any other status is refused: nothing is written and
    /// the result is `Ok(false)`.
    async fn settle(&self, tenant: &str, key: &str, settlement: &Settlement) -> Result<bool, JournalError>;
    /// Records a settled call whose propose failed: inserts it settled, or settles the row if it
    /// is still proposed (its proposed fields are kept); a settled row is left as it is. Returns
    /// whether a row was written. A status that is not a settlement is refused as in
    /// [`Journal::settle`].
    async fn upsert_settled(
        &self,
        attempt: &NewAttempt,
        settlement: &Settlement,
    ) -> Result<bool, JournalError>;
    /// Records on a proposed row how it was allowed to run (`decision`, `decided_by`) before it
    /// runs, so that a crash while it runs leaves the row with who let it run; returns whether the
    /// row was still proposed. Its settlement writes the same fields again.
    async fn record_decision(
        &self,
        tenant: &str,
        key: &str,
        decision: &str,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError>;
    /// Marks an executed row confirmed; returns whether it moved.
    async fn confirm(&self, tenant: &str, key: &str) -> Result<bool, JournalError>;
    /// Marks an executed (or confirmed) row `compensated`: what it did was undone (a rewind put
    /// its files back); returns whether it moved.
    async fn mark_undone(&self, tenant: &str, key: &str) -> Result<bool, JournalError>;
    /// One row.
    async fn get(&self, tenant: &str, key: &str) -> Result<Option<Attempt>, JournalError>;
    /// Rows of a tenant, newest first.
    async fn query(&self, tenant: &str, filter: &AttemptFilter) -> Result<Vec<Attempt>, JournalError>;

    /// Registers (or re-registers) this process and sets its heartbeat.
    async fn register_instance(&self, instance: &InstanceInfo) -> Result<(), JournalError>;
    /// Refreshes this process's heartbeat (does nothing when the instance is not registered:
    /// [`spawn_heartbeat`] re-registers instead).
    async fn heartbeat(&self, instance_id: &str) -> Result<(), JournalError>;
    /// Abandons proposed rows of dead instances and reports old unconfirmed executed rows (see
    /// the crate documentation for what "dead" means). Dead instances' rows in
    /// `journal_instances` are deleted.
    async fn reconcile(&self, policy: &ReconcilePolicy) -> Result<ReconcileReport, JournalError>;

    /// Stores a question to a person; an approval with the same tenant and id is left as it is
    /// (a retried insert cannot reopen a decided question).
    async fn insert_approval(&self, approval: &PendingApproval) -> Result<(), JournalError>;
    /// Decides a pending approval; returns whether it was still pending (first decision wins).
    /// `status` is the decision (`approved`, `denied`…); `pending` is refused (`Ok(false)`).
    async fn decide_approval(
        &self,
        tenant: &str,
        id: &str,
        status: &str,
        decision: &Value,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError>;
    /// One approval.
    async fn get_approval(&self, tenant: &str, id: &str) -> Result<Option<PendingApproval>, JournalError>;
    /// Approvals still pending, oldest first.
    async fn list_pending_approvals(
        &self,
        tenant: &str,
        session_id: Option<&str>,
    ) -> Result<Vec<PendingApproval>, JournalError>;

    /// Approvals decided, expired or given up, the latest first (at most `limit`, capped at 1000).
    async fn decided_approvals(&self, tenant: &str, limit: u32)
    -> Result<Vec<PendingApproval>, JournalError>;

    /// Stores an "always allow" (replacing one of the same tenant and id).
    async fn remember(&self, decision: &RememberedDecision) -> Result<(), JournalError>;
    /// Remembered decisions of a tenant (of one project, when given), oldest first.
    async fn remembered(
        &self,
        tenant: &str,
        project: Option<&str>,
    ) -> Result<Vec<RememberedDecision>, JournalError>;
    /// Revokes one; returns whether it existed.
    async fn revoke(&self, tenant: &str, id: &str) -> Result<bool, JournalError>;

    /// Creates or replaces a session.
    async fn put_session(&self, session: &SessionRecord) -> Result<(), JournalError>;
    /// One session.
    async fn get_session(&self, tenant: &str, id: &str) -> Result<Option<SessionRecord>, JournalError>;
    /// Ends a session; returns whether it was active.
    async fn end_session(&self, tenant: &str, id: &str) -> Result<bool, JournalError>;
    /// A tenant's sessions, newest first.
    async fn list_sessions(
        &self,
        tenant: &str,
        filter: &SessionFilter,
    ) -> Result<Vec<SessionRecord>, JournalError>;

    /// The registered instances, as their last heartbeats left them.
    async fn instances(&self) -> Result<Vec<InstanceRecord>, JournalError>;

    /// Keeps a console session (and forgets the expired ones).
    async fn put_console_session(&self, session: &ConsoleSession) -> Result<(), JournalError>;
    /// The console session of a token's digest, if it has not expired at `now_ms`.
    async fn console_session(
        &self,
        digest: &str,
        now_ms: i64,
    ) -> Result<Option<ConsoleSession>, JournalError>;
    /// Ends a console session (signing out); returns whether there was one.
    async fn end_console_session(&self, digest: &str) -> Result<bool, JournalError>;

    /// Deletes up to `limit` rows older than `before_ms` that nothing will move again: settled
    /// calls (by when they were attempted), decided approvals and ended sessions, for every
    /// tenant. A call still `proposed`, a pending approval, an active session and remembered
    /// decisions are never pruned. Returns how many rows went; call again until it returns less
    /// than `limit` (small batches keep the writer free between them).
    async fn prune(&self, before_ms: i64, limit: u32) -> Result<u64, JournalError>;

    /// Cuts the stored result of up to `limit` settled calls attempted in `[after_ms, before_ms)`
    /// down to a preview — `{"content": its first `keep` characters, "expired": true}` — and
    /// keeps the row (the call, its arguments, status, decision, who decided, timings). Results
    /// already cut are left as they are. Returns how many were cut; call again until it returns
    /// less than `limit`. So the full content may expire before the row does.
    async fn expire_results(
        &self,
        after_ms: i64,
        before_ms: i64,
        keep: u32,
        limit: u32,
    ) -> Result<u64, JournalError>;
}

/// Prunes everything [`Journal::prune`] may before `before_ms`, `batch` rows at a time, pausing
/// `pause` between batches so that writers are never held for long. Returns how many rows went.
///
/// # Errors
///
/// The journal's error; what was deleted before it stays deleted.
pub async fn prune_all(
    journal: &dyn Journal,
    before_ms: i64,
    batch: u32,
    pause: Duration,
) -> Result<u64, JournalError> {
    in_batches(batch, pause, || journal.prune(before_ms, batch)).await
}

/// Runs `step` (one batch of at most `batch` rows) until a batch comes back short, pausing
/// between batches; returns the rows done in all.
async fn in_batches<F, Fut>(batch: u32, pause: Duration, mut step: F) -> Result<u64, JournalError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<u64, JournalError>>,
{
    let mut total = 0;
    loop {
        let done = step().await?;
        total += done;
        if done < u64::from(batch) {
            return Ok(total);
        }
        tokio::time::sleep(pause).await;
    }
}

/// Cuts every result [`Journal::expire_results`] may in `[after_ms, before_ms)`, `batch` rows at a
/// time with `pause` between batches. Returns how many were cut.
///
/// # Errors
///
/// The journal's error; what was cut before it stays cut.
pub async fn expire_all(
    journal: &dyn Journal,
    after_ms: i64,
    before_ms: i64,
    keep: u32,
    batch: u32,
    pause: Duration,
) -> Result<u64, JournalError> {
    in_batches(batch, pause, || journal.expire_results(after_ms, before_ms, keep, batch)).await
}

/// Removes NUL and other control characters (but newlines and tabs) from text that will be
/// stored: NUL bytes break Postgres text columns, and the others only hide what happened.
pub fn strip_controls(text: &str) -> String {
    text.chars().filter(|c| !c.is_control() || *c == '\n' || *c == '\t' || *c == '\r').collect()
}

/// Whether [`strip_controls`] would change `text`.
pub fn has_controls(text: &str) -> bool {
    text.chars().any(|c| c.is_control() && !matches!(c, '\n' | '\t' | '\r'))
}

/// [`strip_controls`] applied to every string inside a JSON value, object keys included (a NUL
/// in a key breaks Postgres `JSONB` as much as one in a value). Key order is kept; when two keys
/// become equal, the later one wins.
pub fn strip_controls_json(value: &mut Value) {
    match value {
        Value::String(text) if has_controls(text) => *text = strip_controls(text),
        Value::Array(items) => items.iter_mut().for_each(strip_controls_json),
        Value::Object(map) => {
            if map.keys().any(|key| has_controls(key)) {
                let entries = std::mem::take(map);
                *map = entries.into_iter().map(|(key, value)| (strip_controls(&key), value)).collect();
            }
            map.values_mut().for_each(strip_controls_json);
        }
        _ => {}
    }
}
