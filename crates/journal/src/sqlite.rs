//! The SQLite journal: WAL, one writer thread with group commit, a small read-only pool.

use std::collections::HashSet;
use std::os::unix::fs::OpenOptionsExt as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use rusqlite::ToSql;
use serde_json::Value;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
};
use sqlx::{ConnectOptions, Connection, Row, Sqlite};
use tokio::sync::{mpsc, oneshot};

mod knowledge;
mod records;

use crate::rows::{
    ABANDONED_ERROR, ApprovalRow, ApprovalValues, AttemptRow, AttemptValues, DecisionValues, InstanceRow,
    MAX_ROWS, RememberValues, RememberedRow, SessionRow, SessionValues, SettlementValues, Text, clean,
    clean_text, dead_instances, now_ms, query_limit,
};
use crate::{
    Attempt, AttemptFilter, InstanceInfo, Journal, JournalError, NewAttempt, PendingApproval, Proposed,
    ReconcilePolicy, ReconcileReport, RememberedDecision, SessionFilter, SessionRecord, Settlement,
    host_name,
};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The migrations a new database runs: version and description.
pub(crate) fn migrations() -> impl Iterator<Item = (i64, String)> {
    MIGRATOR.iter().map(|migration| (migration.version, migration.description.to_string()))
}

/// The most operations one group commit takes.
const MAX_BATCH: usize = 256;
/// Read connections of a file database.
const READERS: u32 = 4;
/// How long a statement waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the checkpointer copies the write-ahead log into the database (small, frequent
/// checkpoints keep the server's p99 lowest; see docs/benchmarks.md).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);
/// How long the writer's `RESTART` checkpoint waits for readers (see `restart_log`).
const RESTART_WAIT: Duration = Duration::from_secs(1);

/// How the SQLite journal keeps its write-ahead log small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteTuning {
    /// Past this much the write-ahead log is checkpointed whole so that it starts over (by the
    /// writer between two batches, when it finds the file past this or the checkpointer asks: it
    /// copies what the last checkpoint left and syncs, 4-9 ms measured; see `checkpoint_loop`
    /// and `write_loop`), and the file is cut back to this size (`journal_size_limit`) when it
    /// does. (A `RESTART` or `TRUNCATE` checkpoint on another
    /// connection held the writer longer: p99 22-25 ms and 39 ms at 64 clients.) Below it,
    /// checkpoints are `PASSIVE`, on a connection of their own, and never wait. A read longer
    /// than a second can hold the log past this until it is done. Under constant writes a
    /// `PASSIVE` checkpoint never lets the log start over, so without this bound it grows without
    /// end (2.3 GB in 25 s of load was measured).
    pub wal_truncate_bytes: u64,
}

impl Default for SqliteTuning {
    fn default() -> Self {
        Self { wal_truncate_bytes: 32 * 1024 * 1024 }
    }
}

const ATTEMPT_COLUMNS: &str = "tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments, tier, instance_id, status, result, error_kind, error, decision, decided_by, \
     duration_ms, exit_status, attempted_at, updated_at";

const EXPIRE_RESULTS: &str = "UPDATE tool_call_attempts SET \
     result = json_object('content', substr(json_extract(result, '$.content'), 1, ?3), 'expired', json('true')), \
     updated_at = ?5 WHERE rowid IN (SELECT rowid FROM tool_call_attempts \
     WHERE status IN ('executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned') \
     AND attempted_at >= ?1 AND attempted_at < ?2 AND typeof(result) = 'text' \
     AND json_extract(CASE WHEN typeof(result) = 'text' THEN result END, '$.expired') IS NULL LIMIT ?4)";

/// Packed results (see `pack`) are cut in Rust, which can decompress them: read through the read
/// pool, their previews made in the caller's task, and written by the writer in one transaction.
const PACKED_RESULTS: &str = "SELECT tenant, key, result FROM tool_call_attempts \
     WHERE status IN ('executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned') \
     AND attempted_at >= ?1 AND attempted_at < ?2 AND typeof(result) = 'blob' LIMIT ?3";
const CUT_PACKED_RESULT: &str = "UPDATE tool_call_attempts SET result = ?3, updated_at = ?4 \
     WHERE tenant = ?1 AND key = ?2 AND typeof(result) = 'blob'";

const PROPOSE: &str = "INSERT INTO tool_call_attempts (tenant, key, call_id, message_id, session_id, parent_call_id, \
     user_id, agent_id, tool, api, function_name, arguments, tier, instance_id, status, attempted_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, 'proposed', ?15, ?15) \
     ON CONFLICT (tenant, key) DO NOTHING";

const SETTLE: &str = "UPDATE tool_call_attempts SET status = ?3, result = ?4, error_kind = ?5, error = ?6, \
     decision = ?7, decided_by = ?8, duration_ms = ?9, exit_status = ?10, updated_at = ?11 \
     WHERE tenant = ?1 AND key = ?2 AND status = 'proposed'";

/// The merged statement of a phase: proposes (op 0), settles (op 1) and upserts (op 2) in one
/// upsert. A settle is admitted only when its row exists (a settle of a missing row inserts
/// nothing); it then always conflicts, and its placeholder proposed columns are never written:
/// every conflict goes through the one guard, which moves only a `proposed` row to a settled
/// status. `RETURNING` names exactly the rows that moved, which is enough because the rows of a
/// phase are distinct.
const MERGED_HEAD: &str = "WITH v (op, tenant, key, call_id, message_id, session_id, parent_call_id, user_id, \
     agent_id, tool, api, function_name, arguments, tier, instance_id, status, result, error_kind, error, decision, \
     decided_by, duration_ms, exit_status, at) AS (";
const MERGED_TAIL: &str = ") INSERT INTO tool_call_attempts (tenant, key, call_id, message_id, session_id, \
     parent_call_id, user_id, agent_id, tool, api, function_name, arguments, tier, instance_id, status, result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at) \
     SELECT tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, tool, api, \
     function_name, arguments, tier, instance_id, status, result, error_kind, error, decision, decided_by, \
     duration_ms, exit_status, at, at FROM v \
     WHERE op <> 1 OR EXISTS (SELECT 1 FROM tool_call_attempts AS a WHERE a.tenant = v.tenant AND a.key = v.key) \
     ON CONFLICT (tenant, key) DO UPDATE SET status = excluded.status, result = excluded.result, \
     error_kind = excluded.error_kind, error = excluded.error, decision = excluded.decision, \
     decided_by = excluded.decided_by, duration_ms = excluded.duration_ms, exit_status = excluded.exit_status, \
     updated_at = excluded.updated_at \
     WHERE tool_call_attempts.status = 'proposed' AND excluded.status <> 'proposed' \
     RETURNING tenant, key";

const UPSERT_SETTLED: &str = "INSERT INTO tool_call_attempts (tenant, key, call_id, message_id, session_id, \
     parent_call_id, user_id, agent_id, tool, api, function_name, arguments, tier, instance_id, status, result, \
     error_kind, error, decision, decided_by, duration_ms, exit_status, attempted_at, updated_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21, ?22, \
     ?23, ?23) \
     ON CONFLICT (tenant, key) DO UPDATE SET status = excluded.status, result = excluded.result, \
     error_kind = excluded.error_kind, error = excluded.error, decision = excluded.decision, \
     decided_by = excluded.decided_by, duration_ms = excluded.duration_ms, exit_status = excluded.exit_status, \
     updated_at = excluded.updated_at \
     WHERE tool_call_attempts.status = 'proposed'";

const CONFIRM: &str = "UPDATE tool_call_attempts SET status = 'confirmed', updated_at = ?3 \
     WHERE tenant = ?1 AND key = ?2 AND status = 'executed'";

const RECORD_DECISION: &str = "UPDATE tool_call_attempts SET decision = ?3, decided_by = ?4, updated_at = ?5 \
     WHERE tenant = ?1 AND key = ?2 AND status = 'proposed'";

const UNDO: &str = "UPDATE tool_call_attempts SET status = 'compensated', updated_at = ?3 \
     WHERE tenant = ?1 AND key = ?2 AND status IN ('executed', 'confirmed')";

const REGISTER_INSTANCE: &str = "INSERT INTO journal_instances (id, host, pid, start_ticks, started_at, heartbeat_at, \
     version, address, in_flight) VALUES (?1, ?2, ?3, ?4, ?5, ?5, ?6, ?7, ?8) \
     ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, start_ticks = excluded.start_ticks, \
     heartbeat_at = excluded.heartbeat_at, version = excluded.version, address = excluded.address, \
     in_flight = excluded.in_flight";

const SESSION_SELECT: &str = "SELECT id, tenant, user_id, config, status, created_at, ended_at FROM sessions";

const PUT_CONSOLE_SESSION: &str = "INSERT INTO console_sessions (digest, tenant, principal, role, csrf, created_at, \
     expires_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) ON CONFLICT (digest) DO NOTHING";

const FORGET_CONSOLE_SESSIONS: &str = "DELETE FROM console_sessions WHERE expires_at < ?1";

const END_CONSOLE_SESSION: &str = "DELETE FROM console_sessions WHERE digest = ?1";

const HEARTBEAT: &str = "UPDATE journal_instances SET heartbeat_at = ?2 WHERE id = ?1";

const ABANDON: &str = "UPDATE tool_call_attempts SET status = 'abandoned', error_kind = 'abandoned', error = ?2, \
     updated_at = ?3 WHERE status = 'proposed' AND instance_id = ?1 RETURNING tenant, key";

const FORGET_INSTANCE: &str = "DELETE FROM journal_instances WHERE id = ?1";

const INSERT_APPROVAL: &str = "INSERT INTO pending_approvals (id, tenant, session_id, attempt_key, call_id, tool, \
     api, arguments, reason, status, decision, decided_by, created_at, decided_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14) \
     ON CONFLICT (tenant, id) DO NOTHING";

const DECIDE_APPROVAL: &str = "UPDATE pending_approvals SET status = ?3, decision = ?4, decided_by = ?5, \
     decided_at = ?6 WHERE tenant = ?1 AND id = ?2 AND status = 'pending'";

const REMEMBER: &str = "INSERT INTO remembered_decisions (id, tenant, project, tool, api, argument_prefix, \
     created_by, created_at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
     ON CONFLICT (tenant, id) DO UPDATE SET project = excluded.project, tool = excluded.tool, api = excluded.api, \
     argument_prefix = excluded.argument_prefix, created_by = excluded.created_by, created_at = excluded.created_at";

const REVOKE: &str = "DELETE FROM remembered_decisions WHERE tenant = ?1 AND id = ?2";

const PUT_SESSION: &str = "INSERT INTO sessions (id, tenant, user_id, config, status, created_at, ended_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7) \
     ON CONFLICT (tenant, id) DO UPDATE SET user_id = excluded.user_id, config = excluded.config, \
     status = excluded.status, created_at = excluded.created_at, ended_at = excluded.ended_at";

const END_SESSION: &str = "UPDATE sessions SET status = 'ended', ended_at = ?3 \
     WHERE tenant = ?1 AND id = ?2 AND status = 'active'";

const INSERT_RECORD: &str = "INSERT INTO records (tenant, id, collection, person, project, tag, title, body, \
     metadata, created_at, updated_at) SELECT ?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?10 \
     WHERE (SELECT count(*) FROM records WHERE tenant = ?1 AND collection = ?3 AND person = ?4) < ?11";
const UPDATE_RECORD: &str = "UPDATE records SET tag = COALESCE(?5, tag), title = COALESCE(?6, title), \
     body = COALESCE(?7, body), metadata = COALESCE(?8, metadata), updated_at = ?9 \
     WHERE tenant = ?1 AND person = ?2 AND collection = ?3 AND id = ?4";
const REMOVE_RECORD: &str =
    "DELETE FROM records WHERE tenant = ?1 AND person = ?2 AND collection = ?3 AND id = ?4";
const GET_RECORD: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM records r WHERE r.tenant = ?1 AND r.person = ?2 AND r.collection = ?3 AND r.id = ?4"
);
const LIST_RECORDS: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", 0.0 AS score FROM records r WHERE r.tenant = ?1 AND r.collection = ?2 AND r.person = ?3 \
     AND (?4 = 'any' OR r.project IS NULL OR (?4 = 'with' AND r.project = ?5)) AND (?6 IS NULL OR r.tag = ?6) \
     ORDER BY r.updated_at DESC, r.id LIMIT ?7"
);
const SEARCH_RECORDS: &str = concat!(
    "SELECT ",
    record_columns!(),
    ", -bm25(records_fts, 2.0, 1.0) AS score FROM records_fts JOIN records r ON r.rowid = records_fts.rowid \
     WHERE records_fts MATCH ?8 AND r.tenant = ?1 AND r.collection = ?2 AND r.person = ?3 \
     AND (?4 = 'any' OR r.project IS NULL OR (?4 = 'with' AND r.project = ?5)) AND (?6 IS NULL OR r.tag = ?6) \
     ORDER BY score DESC, r.updated_at DESC LIMIT ?7"
);

const SET_RECORD_VECTOR: &str = "UPDATE records SET embedding_model = ?5, embedding = ?6 \
     WHERE tenant = ?1 AND person = ?2 AND collection = ?3 AND id = ?4";
const RECORD_VECTORS: &str = "SELECT r.id, r.embedding FROM records r WHERE r.tenant = ?1 AND r.collection = ?2 \
     AND r.person = ?3 AND (?4 = 'any' OR r.project IS NULL OR (?4 = 'with' AND r.project = ?5)) \
     AND (?6 IS NULL OR r.tag = ?6) AND r.embedding_model = ?7 AND r.embedding IS NOT NULL";

const PRUNE_ATTEMPTS: &str = "DELETE FROM tool_call_attempts WHERE rowid IN (SELECT rowid FROM tool_call_attempts \
     WHERE status IN ('executed', 'confirmed', 'compensated', 'failed', 'blocked', 'denied', 'abandoned') \
     AND attempted_at < ?1 LIMIT ?2)";
const PRUNE_APPROVALS: &str = "DELETE FROM pending_approvals WHERE rowid IN (SELECT rowid FROM pending_approvals \
     WHERE status <> 'pending' AND created_at < ?1 LIMIT ?2)";
const PRUNE_SESSIONS: &str = "DELETE FROM sessions WHERE rowid IN (SELECT rowid FROM sessions \
     WHERE status = 'ended' AND ended_at < ?1 LIMIT ?2)";

const GET_ATTEMPT: &str = "SELECT tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments, tier, instance_id, status, result, error_kind, error, decision, decided_by, \
     duration_ms, exit_status, attempted_at, updated_at FROM tool_call_attempts WHERE tenant = ?1 AND key = ?2";

const UNCONFIRMED: &str = "SELECT tenant, key, call_id, message_id, session_id, parent_call_id, user_id, agent_id, \
     tool, api, function_name, arguments, tier, instance_id, status, result, error_kind, error, decision, decided_by, \
     duration_ms, exit_status, attempted_at, updated_at FROM tool_call_attempts \
     WHERE status = 'executed' AND attempted_at < ?1 AND updated_at < ?1 ORDER BY attempted_at, rowid LIMIT ?2";

const INSTANCES: &str = "SELECT id, host, pid, start_ticks, heartbeat_at FROM journal_instances";

const PROPOSED_OWNERS: &str = "SELECT DISTINCT instance_id FROM tool_call_attempts WHERE status = 'proposed'";

const GET_APPROVAL: &str = "SELECT id, tenant, session_id, attempt_key, call_id, tool, api, arguments, reason, \
     status, decision, decided_by, created_at, decided_at FROM pending_approvals WHERE tenant = ?1 AND id = ?2";

const PENDING_APPROVALS: &str = "SELECT id, tenant, session_id, attempt_key, call_id, tool, api, arguments, reason, \
     status, decision, decided_by, created_at, decided_at FROM pending_approvals \
     WHERE tenant = ?1 AND status = 'pending' AND (?2 IS NULL OR session_id = ?2) ORDER BY created_at, id";

const REMEMBERED: &str = "SELECT id, tenant, project, tool, api, argument_prefix, created_by, created_at \
     FROM remembered_decisions WHERE tenant = ?1 AND (?2 IS NULL OR project = ?2) ORDER BY created_at, id";

const GET_SESSION: &str = "SELECT id, tenant, user_id, config, status, created_at, ended_at FROM sessions \
     WHERE tenant = ?1 AND id = ?2";

/// The SQLite journal. See the crate documentation for the design (one writer thread, group
/// commit, a small read pool).
#[derive(Debug)]
pub struct SqliteJournal {
    writer: mpsc::Sender<Pending>,
    /// The writer's connection, which a quick write takes itself when it is the only write.
    direct: Arc<Writer>,
    /// Writes under way (queued, running, or being answered).
    in_flight: Arc<AtomicUsize>,
    reads: SqlitePool,
    /// The private directory of a `sqlite::memory:` journal, held for its removal on drop (after
    /// the fields above: the writer's queue closes, then the read pool).
    _scratch: Option<tempfile::TempDir>,
}

impl SqliteJournal {
    /// Opens (and migrates) the database a `sqlite:` URL names: `sqlite://PATH` (created when
    /// missing), or `sqlite::memory:` for a private, throwaway database (a file in a directory of
    /// its own, removed when the journal is dropped). Starts the writer thread, and the
    /// checkpointer task on the current Tokio runtime; both stop when the journal is dropped.
    ///
    /// # Errors
    ///
    /// [`JournalError::Database`] for a URL SQLite cannot parse or a file it cannot open,
    /// [`JournalError::Migrate`] when the migrations fail, [`JournalError::Sqlite`] when the
    /// writer cannot open the file, [`JournalError::Corrupt`] when it will not take WAL mode.
    pub async fn open(url: &str) -> Result<Self, JournalError> {
        Self::open_with(url, SqliteTuning::default()).await
    }

    /// [`open`](Self::open) with its write-ahead log bounded by `tuning`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn open_with(url: &str, tuning: SqliteTuning) -> Result<Self, JournalError> {
        let mut options =
            SqliteConnectOptions::from_str(url)?.busy_timeout(BUSY_TIMEOUT).create_if_missing(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let scratch = if in_memory {
            // A directory of its own (owner only, a fresh random name), removed on drop with the
            // database, its log and its shared memory in it.
            let mut builder = tempfile::Builder::new();
            builder.prefix("toolhost-journal-");
            #[cfg(unix)]
            builder.permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700));
            let scratch = builder.tempdir().map_err(|e| JournalError::Database(sqlx::Error::Io(e)))?;
            options = SqliteConnectOptions::new()
                .filename(scratch.path().join("journal.db"))
                .busy_timeout(BUSY_TIMEOUT)
                .create_if_missing(true);
            Some(scratch)
        } else {
            None
        };
        // The schema, by sqlx's migrator; the mode is kept in the file.
        let mut migrate = options.clone().journal_mode(SqliteJournalMode::Wal).connect().await?;
        MIGRATOR.run(&mut migrate).await?;
        migrate.close().await?;
        let path = options.get_filename().to_path_buf();
        let mut wal_path = path.clone().into_os_string();
        wal_path.push("-wal");
        let wal_path = std::path::PathBuf::from(wal_path);
        let (opened, ready) = oneshot::channel();
        let (writer, queue) = mpsc::channel(4 * MAX_BATCH);
        std::thread::Builder::new()
            .name("journal-writer".into())
            .spawn(move || match open_writer(&path, tuning) {
                Ok(conn) => {
                    let shared = Arc::new(Writer {
                        conn: Mutex::new(conn),
                        restart: Arc::default(),
                        last_batch: AtomicUsize::new(0),
                    });
                    let _ = opened.send(Ok(Arc::clone(&shared)));
                    write_loop(&shared, queue, &wal_path, tuning.wal_truncate_bytes);
                }
                Err(e) => {
                    let _ = opened.send(Err(e));
                }
            })
            .map_err(|e| JournalError::Database(sqlx::Error::Io(e)))?;
        let direct = ready.await.map_err(|_| JournalError::WriterGone)??;
        let checkpointer = options.clone().connect().await?;
        tokio::spawn(checkpoint_loop(checkpointer, writer.downgrade(), tuning, Arc::clone(&direct.restart)));
        let reads = SqlitePoolOptions::new()
            .max_connections(READERS)
            .connect_lazy_with(options.pragma("query_only", "ON"));
        Ok(Self { writer, direct, in_flight: Arc::new(AtomicUsize::new(0)), reads, _scratch: scratch })
    }

    async fn write(&self, op: Op) -> Result<Outcome, JournalError> {
        let counted = InFlight::count(&self.in_flight);
        let op = match self.write_here(op, counted.alone) {
            Ok(outcome) => return outcome,
            Err(op) => op,
        };
        let (reply, answer) = oneshot::channel();
        // Counted until the writer is done with it, even if this caller goes away: a later write
        // must not pass it on the caller's thread.
        self.writer
            .send(Pending { op, reply, _counted: Some(counted) })
            .await
            .map_err(|_| JournalError::WriterGone)?;
        answer.await.map_err(|_| JournalError::WriterGone)?
    }

    /// A quick write (one row) that is the only write under way (`alone`): run here, on the
    /// caller's thread, as a batch of one, instead of waking the writer thread and being woken by
    /// it (one caller's p50 from 0.28-0.31 ms to 0.22 ms, docs/benchmarks.md). Concurrent writes
    /// go to the writer thread and commit in groups; run here, they would each commit alone and
    /// hold the Tokio workers that also poll the readers (whose reads, kept open, then held the
    /// log past its bound in `tests/wal.rs`). A `RESTART` the checkpointer asked for is left to
    /// the writer thread: the write then goes there. `Err(op)` when the write must be queued.
    fn write_here(&self, op: Op, alone: bool) -> Result<Result<Outcome, JournalError>, Op> {
        if !alone
            || !op.is_quick()
            || self.direct.restart.wanted.load(Ordering::Acquire)
            // Under load, one caller's write can still find itself alone for a moment after a
            // batch is answered; run here, it would commit alone while the others queue behind
            // it (7% fewer calls/s at 64 clients). The writer's last batch says whether callers
            // are many.
            || self.direct.last_batch.load(Ordering::Relaxed) > 1
        {
            return Err(op);
        }
        let Ok(conn) = self.direct.conn.try_lock() else { return Err(op) };
        if !conn.is_autocommit() {
            // A batch whose commit and rollback both failed left its transaction open: the writer
            // thread ends it first.
            return Err(op);
        }
        // A batch of one quick write is that one statement (`run_batch` with no transaction).
        match run_one(&conn, &op) {
            // Another process holds the database: this thread does not wait (see `busy`), the
            // writer thread does.
            Err(e) if e.sqlite_error_code() == Some(rusqlite::ErrorCode::DatabaseBusy) => Err(op),
            done => Ok(done.map_err(JournalError::from)),
        }
    }

    async fn write_moved(&self, op: Op) -> Result<bool, JournalError> {
        match self.write(op).await? {
            Outcome::Moved(moved) => Ok(moved),
            other => Err(JournalError::Corrupt(format!("the writer answered {other:?} to a guarded write"))),
        }
    }

    async fn write_done(&self, op: Op) -> Result<(), JournalError> {
        self.write(op).await.map(|_| ())
    }
}

/// The writer's connection: WAL, `synchronous = NORMAL`, no automatic checkpoints (the
/// checkpointer and the writer's restarts do them), statement journals in memory.
fn open_writer(path: &std::path::Path, tuning: SqliteTuning) -> Result<rusqlite::Connection, JournalError> {
    let conn = rusqlite::Connection::open_with_flags(
        path,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    conn.busy_handler(Some(busy))?;
    let mode: String = conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0))?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(JournalError::Corrupt(format!("the journal file stays in `{mode}` mode, not WAL")));
    }
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    // Statement journals (multi-row statements keep one) in memory, not temp files.
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    // Checkpoints run on a connection of their own (`checkpoint_loop`), so a commit never waits
    // for one (with its fsync) to finish.
    conn.pragma_update(None, "wal_autocheckpoint", 0)?;
    // When a checkpoint lets the log start over, a file larger than this is cut back.
    conn.pragma_update(
        None,
        "journal_size_limit",
        i64::try_from(tuning.wal_truncate_bytes).unwrap_or(i64::MAX),
    )?;
    conn.set_prepared_statement_cache_capacity(512);
    Ok(conn)
}

/// One write, as the writer thread runs it.
#[derive(Debug, Clone)]
enum Op {
    Propose(AttemptValues),
    Settle {
        tenant: Text,
        key: Text,
        settlement: SettlementValues,
    },
    UpsertSettled(AttemptValues, SettlementValues),
    Confirm {
        tenant: String,
        key: String,
        now: i64,
    },
    Undo {
        tenant: String,
        key: String,
        now: i64,
    },
    RecordDecision {
        tenant: String,
        key: String,
        decision: String,
        decided_by: Option<String>,
        now: i64,
    },
    RegisterInstance {
        id: String,
        host: String,
        pid: i64,
        start_ticks: Option<i64>,
        now: i64,
        version: Option<String>,
        address: Option<String>,
        in_flight: Option<i64>,
    },
    /// A console session kept (expired ones forgotten at the same time).
    PutConsoleSession([String; 5], i64, i64),
    EndConsoleSession(String),
    Heartbeat {
        id: String,
        now: i64,
    },
    Abandon {
        instances: Vec<String>,
        now: i64,
    },
    InsertApproval(ApprovalValues),
    DecideApproval(DecisionValues),
    Remember(RememberValues),
    Revoke {
        tenant: String,
        id: String,
    },
    PutSession(SessionValues),
    EndSession {
        tenant: String,
        id: String,
        now: i64,
    },
    Prune {
        before: i64,
        limit: u32,
    },
    ExpireResults {
        after: i64,
        before: i64,
        keep: u32,
        limit: u32,
        now: i64,
    },
    /// Compressed results replaced by their previews, made outside the writer: `(tenant, key,
    /// preview)`; a row is cut only if its result is still compressed.
    CutResults {
        rows: Vec<(String, String, String)>,
        now: i64,
    },
    /// A record, unless its owner holds `limit` of its collection already (`Moved(false)`).
    InsertRecord {
        record: [Option<String>; 9],
        now: i64,
        limit: i64,
    },
    /// A record's changes (`None` keeps a field): tenant, person, collection, id, then tag,
    /// title, body, metadata.
    UpdateRecord {
        key: [String; 4],
        patch: [Option<String>; 4],
        now: i64,
    },
    RemoveRecord {
        key: [String; 4],
    },
    /// A record's vector and its model set, or both cleared: tenant, person, collection, id.
    SetRecordVector {
        key: [String; 4],
        model: Option<String>,
        bytes: Option<Vec<u8>>,
    },
    /// A knowledge base made, or its roots replaced: tenant, id, person, name, roots (JSON), and
    /// its embeddings model.
    PutBase {
        values: [String; 5],
        model: Option<String>,
        now: i64,
    },
    /// A knowledge base and all it holds removed (`Moved(false)` when there was none).
    RemoveBase {
        tenant: String,
        id: String,
    },
    /// Sources of a base stored, each replacing its path's, and others removed
    /// (`Moved(false)` when the base is gone).
    ApplySources {
        tenant: String,
        base: String,
        put: Vec<tool_core::knowledge::NewSource>,
        remove: Vec<String>,
        now: i64,
    },
}

impl Op {
    /// The attempt row the operation touches, when it touches exactly one.
    fn attempt_row(&self) -> Option<(&str, &str)> {
        match self {
            Self::Propose(values) | Self::UpsertSettled(values, _) => Some((&values.tenant, &values.key)),
            Self::Settle { tenant, key, .. } => Some((tenant, key)),
            Self::Confirm { tenant, key, .. }
            | Self::Undo { tenant, key, .. }
            | Self::RecordDecision { tenant, key, .. } => Some((tenant, key)),
            _ => None,
        }
    }

    /// Whether the operation writes one row (its caller may run it: `write_here`); not a prune,
    /// an expiry or an abandon, which may take long.
    fn is_quick(&self) -> bool {
        !matches!(
            self,
            Self::Abandon { .. }
                | Self::Prune { .. }
                | Self::ExpireResults { .. }
                | Self::CutResults { .. }
                | Self::RemoveBase { .. }
                | Self::ApplySources { .. }
        )
    }

    /// Whether the operation runs several statements that must stand or fall together: it runs
    /// in a transaction even alone.
    fn is_compound(&self) -> bool {
        matches!(self, Self::RemoveBase { .. } | Self::ApplySources { .. })
    }

    /// Whether the operation may touch any attempt row: it then runs alone.
    fn is_barrier(&self) -> bool {
        matches!(self, Self::Abandon { .. } | Self::CutResults { .. })
    }
}

/// What a write answers.
#[derive(Debug)]
enum Outcome {
    Done,
    Moved(bool),
    Abandoned(Vec<(String, String)>),
    Deleted(u64),
}

struct Pending {
    op: Op,
    reply: oneshot::Sender<Result<Outcome, JournalError>>,
    /// The write's place in [`SqliteJournal::in_flight`] (`None` in unit tests of batches).
    _counted: Option<InFlight>,
}

impl Pending {
    /// Answers the caller, which is no longer counted as under way by then: its next write may
    /// run on its own thread.
    fn answer(self, result: Result<Outcome, JournalError>) {
        let Self { reply, _counted: counted, .. } = self;
        drop(counted);
        let _ = reply.send(result);
    }
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.op.fmt(f)
    }
}

/// Copies committed pages from the write-ahead log into the database every [`CHECKPOINT_EVERY`],
/// without blocking the writer or readers (`PASSIVE`), until the journal is dropped. A checkpoint
/// that finds readers in the way does what it can and the next one goes on; a busy database is
/// not an error here.
///
/// Under constant writes the log never starts over this way: a write begins while this pass is
/// still copying, so the log is never wholly copied between two writes. When the log holds more
/// than [`SqliteTuning::wal_truncate_bytes`], this asks the writer (`restart`) for a `RESTART`
/// checkpoint between two batches (`restart_log`): with no write running, it copies all that is
/// left (4-9 ms measured: what this pass left, and two syncs), waits for readers of older
/// snapshots, and the writer's next commit starts the log over and cuts the file back to the bound
/// (`journal_size_limit`). No pass runs here until the writer has done it.
///
/// Why the writer: a `RESTART` checkpoint on this connection held the write lock, and the writer
/// slept in SQLite's busy handler (1, 2, 5, 10 … ms between tries) past its end (p99 24 ms at 64
/// clients, against 7 ms with the bound out of reach). Why `RESTART` and not one more `PASSIVE`
/// pass: readers that never pause (two of them, in `tests/wal.rs`) always hold a mark in the log,
/// so it never started over and reached 88 MB against a bound of 2 MiB.
async fn checkpoint_loop(
    mut connection: SqliteConnection,
    alive: mpsc::WeakSender<Pending>,
    tuning: SqliteTuning,
    restart: Arc<Restart>,
) {
    // The log's frames are pages with a 24-byte header.
    let page: i64 = sqlx::query_scalar("PRAGMA page_size").fetch_one(&mut connection).await.unwrap_or(4096);
    let bound = i64::try_from(tuning.wal_truncate_bytes).unwrap_or(i64::MAX) / (page + 24);
    let mut ticks = tokio::time::interval(CHECKPOINT_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        if alive.strong_count() == 0 {
            return;
        }
        if restart.wanted.load(Ordering::Acquire) {
            continue;
        }
        // (busy, frames in the log, frames copied): the frames, not the file, which keeps its size
        // until the next commit after the log starts over. A log of as many frames as when the
        // writer last restarted it has had no commit since, which will start it over: nothing to
        // ask for again (asking anyway made a second restart, a second stall of the writer).
        let checkpoint: Result<(i64, i64, i64), _> =
            sqlx::query_as("PRAGMA wal_checkpoint(PASSIVE)").fetch_one(&mut connection).await;
        if checkpoint
            .is_ok_and(|(_, frames, _)| frames > bound && frames != restart.after.load(Ordering::Acquire))
        {
            restart.wanted.store(true, Ordering::Release);
        }
    }
}

/// The writer's `RESTART` checkpoint: it copies what is left of the log and waits for the readers
/// of older snapshots, so that the next commit starts the log over. It waits for them
/// a second at most ([`RESTART_WAIT`]), not the busy timeout (5 s): a longer read then keeps the
/// log growing a while longer (the checkpointer asks again) instead of holding every write. (At
/// 100 ms, two readers that never pause in `tests/wal.rs` took the log to 7 times its bound; with
/// the busy timeout that test ran 34-58 s instead of 7-12 s, its writers waiting.)
/// Returns the frames in the log when it is done.
fn restart_log(conn: &rusqlite::Connection) -> Option<i64> {
    let _ = conn.busy_timeout(RESTART_WAIT);
    let frames = conn.query_row("PRAGMA wal_checkpoint(RESTART)", [], |row| row.get::<_, i64>(1)).ok();
    let _ = conn.busy_handler(Some(busy));
    frames
}

/// The writer's busy handler, called with the number of tries so far when another connection (a
/// `RESTART` on the checkpointer's, another process's) holds a lock. On the writer thread it waits
/// as SQLite's own `busy_timeout` would: sleeps growing to 100 ms, up to [`BUSY_TIMEOUT`] in all.
/// On a Tokio worker (a write its caller runs, `write_here`) it gives up at once: the write goes
/// to the writer thread's queue instead of holding a thread that serves every other request.
fn busy(tries: i32) -> bool {
    if tokio::runtime::Handle::try_current().is_ok() {
        return false;
    }
    let tries = u64::try_from(tries).unwrap_or(0);
    // Slept so far: 1, 2, 4 … 64 ms, then 100 ms a try.
    let slept = if tries < 7 { (1 << tries) - 1 } else { 127 + (tries - 7) * 100 };
    if slept >= u64::try_from(BUSY_TIMEOUT.as_millis()).unwrap_or(u64::MAX) {
        return false;
    }
    std::thread::sleep(Duration::from_millis(if tries < 7 { 1 << tries } else { 100 }));
    true
}

/// One write counted in [`SqliteJournal::in_flight`] until it is dropped: by its caller when it
/// ran on the caller's thread, by the writer thread once it answered a queued one.
struct InFlight {
    count: Arc<AtomicUsize>,
    /// No other write was under way when this one began.
    alone: bool,
}

impl InFlight {
    fn count(count: &Arc<AtomicUsize>) -> Self {
        Self { alone: count.fetch_add(1, Ordering::AcqRel) == 0, count: Arc::clone(count) }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The writer's connection, shared by the writer thread and the quick writes of `write_here`, and
/// the checkpointer's requests to it.
#[derive(Debug)]
struct Writer {
    conn: Mutex<rusqlite::Connection>,
    /// Shared with the checkpointer, which holds nothing else of the writer's.
    restart: Arc<Restart>,
    /// The operations of the writer thread's last batch.
    last_batch: AtomicUsize,
}

/// The checkpointer's request that the writer restart the log, and the log's frames when the
/// writer last did.
#[derive(Debug)]
struct Restart {
    wanted: AtomicBool,
    after: AtomicI64,
}

impl Default for Restart {
    fn default() -> Self {
        Self { wanted: AtomicBool::new(false), after: AtomicI64::new(-1) }
    }
}

/// Why a backup was not made.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    /// The journal is not an SQLite file (Postgres: `pg_dump`; in memory: nothing to copy).
    #[error("{0}")]
    NotAFile(String),
    /// The copy's path is taken: a backup never overwrites.
    #[error("{} exists already: a backup never overwrites a file; name a new one", .0.display())]
    Exists(std::path::PathBuf),
    /// The copy could not be made.
    #[error("cannot make {}: {source}", .path.display())]
    Create {
        /// The copy.
        path: std::path::PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// SQLite refused.
    #[error("SQLite: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// Copies the live SQLite journal a URL names to `to`, consistently (`VACUUM INTO`), while
/// writers go on. The copy is readable by its owner only (0600): it holds every call's arguments
/// and results. Returns its size in bytes.
///
/// # Errors
///
/// [`BackupError`]: not an SQLite file, `to` exists, the copy cannot be made or SQLite refuses.
pub fn backup(url: &str, to: &std::path::Path) -> Result<u64, BackupError> {
    let Some(path) = sqlite_path(url) else {
        return Err(BackupError::NotAFile(if url.starts_with("sqlite:") {
            "the journal is in memory: there is nothing to back up".into()
        } else {
            "the journal is not an SQLite file".into()
        }));
    };
    // Made here, empty and private, so that SQLite writes the copy into a file only its owner
    // reads (VACUUM INTO takes an empty file).
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to).map_err(|source| {
        match source.kind() {
            std::io::ErrorKind::AlreadyExists => BackupError::Exists(to.to_path_buf()),
            _ => BackupError::Create { path: to.to_path_buf(), source },
        }
    })?;
    let copy = (|| {
        let conn = rusqlite::Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )?;
        conn.busy_timeout(BUSY_TIMEOUT)?;
        conn.execute("VACUUM INTO ?1", [to.to_string_lossy().as_ref()])?;
        Ok::<_, rusqlite::Error>(())
    })();
    if let Err(error) = copy {
        let _ = std::fs::remove_file(to);
        return Err(error.into());
    }
    Ok(std::fs::metadata(to).map(|m| m.len()).unwrap_or(0))
}

/// The file of a `sqlite://PATH[?…]` (or `sqlite:PATH`) URL; `None` for another URL or an
/// in-memory database. (Its write-ahead log is `PATH-wal`, its shared memory `PATH-shm`.)
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next()?;
    (!path.is_empty() && !path.starts_with(":memory:")).then(|| std::path::PathBuf::from(path))
}

/// The writer thread: takes what is queued, runs it in one transaction, answers after the commit;
/// between two batches, a `RESTART` when `checkpoint_loop` asked for one or the log's file `wal`
/// is past `bound`. Ends when the journal (every
/// sender) is gone.
fn write_loop(writer: &Writer, mut queue: mpsc::Receiver<Pending>, wal: &std::path::Path, bound: u64) {
    let restart = &writer.restart;
    let mut last_try = std::time::Instant::now();
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.blocking_recv_many(&mut batch, MAX_BATCH) > 0 {
        // A write that ran on its caller's thread (`write_here`) may hold the connection: a
        // batch of one, soon done. A panic while it was held left no transaction open (a batch
        // ends each one it begins), so the connection is taken all the same.
        let conn = writer.conn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        writer.last_batch.store(batch.len(), Ordering::Relaxed);
        run_batch(&conn, &mut batch);
        if !conn.is_autocommit() {
            // Its commit and its rollback failed: the next write must not run inside it.
            let _ = exec(&conn, "ROLLBACK");
        }
        // The writer also checks the log itself (one `stat`, at most every 50 ms): waiting for
        // the checkpointer's ask alone, this writer (about 2.5 times faster than the sqlx one)
        // filled the log to 6-7 times its bound in `tests/wal.rs` with fast readers. The file is
        // cut back to the bound by the commit that starts the log over, so past the bound means
        // the log's frames are.
        let over = last_try.elapsed() >= CHECKPOINT_EVERY
            && std::fs::metadata(wal).is_ok_and(|meta| meta.len() > bound);
        if over || restart.wanted.load(Ordering::Acquire) {
            last_try = std::time::Instant::now();
            let frames = restart_log(&conn);
            restart.after.store(frames.unwrap_or(-1), Ordering::Release);
            restart.wanted.store(false, Ordering::Release);
        }
        batch.clear();
    }
}

/// One statement (or, for an abandon, a few) of a batch.
#[derive(Debug)]
enum Step {
    /// One operation on its own.
    One(usize),
    /// Proposes, settles and upserts of distinct rows, as one merged statement.
    Merged(Vec<usize>),
}

/// Plans a batch: one step per operation, or (`merged`) phases of operations on distinct attempt
/// rows in which the proposes, settles and upserts become one merged statement.
fn plan(batch: &[Pending], merged: bool) -> Vec<Step> {
    if !merged {
        return (0..batch.len()).map(Step::One).collect();
    }
    let mut steps = Vec::new();
    let mut start = 0;
    while start < batch.len() {
        let end = phase_end(batch, start);
        let mut group = Vec::new();
        for (index, pending) in batch.iter().enumerate().take(end).skip(start) {
            match &pending.op {
                Op::Propose(_) | Op::Settle { .. } | Op::UpsertSettled(..) => group.push(index),
                _ => steps.push(Step::One(index)),
            }
        }
        match group.len() {
            0 => {}
            1 => steps.push(Step::One(group[0])),
            _ => steps.push(Step::Merged(group)),
        }
        start = end;
    }
    steps
}

/// Where the phase that starts at `start` ends: before the first operation on a row already in
/// the phase, or around a barrier.
fn phase_end(batch: &[Pending], start: usize) -> usize {
    if batch[start].op.is_barrier() {
        return start + 1;
    }
    let mut rows = HashSet::new();
    let mut end = start;
    while let Some(pending) = batch.get(end) {
        if pending.op.is_barrier() || pending.op.attempt_row().is_some_and(|row| !rows.insert(row)) {
            break;
        }
        end += 1;
    }
    end
}

/// Why a planned batch did not run to the end.
enum Failure {
    /// A merged statement failed: which operation caused it is unknown, so the batch is run
    /// again one operation at a time.
    Merged,
    /// This operation failed.
    One(usize, rusqlite::Error),
}

/// Runs one statement that returns no rows.
fn exec(conn: &rusqlite::Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

/// Runs a batch until it commits, taking out each operation that fails (see the crate docs).
fn run_batch(conn: &rusqlite::Connection, batch: &mut Vec<Pending>) {
    let mut merged = true;
    while !batch.is_empty() {
        let steps = plan(batch, merged);
        // A batch of one statement needs no transaction around it: the statement is atomic,
        // and a merged statement reports exactly what it moved.
        let single = matches!(steps.as_slice(), [Step::Merged(_)])
            || matches!(steps.as_slice(), [Step::One(index)]
                if !batch[*index].op.is_barrier() && !batch[*index].op.is_compound());
        if !single && let Err(e) = exec(conn, "BEGIN IMMEDIATE") {
            return fail_all(batch, e);
        }
        match run_steps(conn, batch, &steps) {
            Ok(outcomes) => {
                if !single && let Err(e) = exec(conn, "COMMIT") {
                    let _ = exec(conn, "ROLLBACK");
                    return fail_all(batch, e);
                }
                for (pending, outcome) in batch.drain(..).zip(outcomes) {
                    pending.answer(Ok(outcome));
                }
                return;
            }
            Err(failure) => {
                if !single && !conn.is_autocommit() {
                    // SQLite may already have rolled back (on some errors it does).
                    let _ = exec(conn, "ROLLBACK");
                }
                match failure {
                    Failure::Merged => merged = false,
                    Failure::One(index, e) => {
                        let pending = batch.remove(index);
                        pending.answer(Err(e.into()));
                    }
                }
            }
        }
    }
}

/// Answers every operation of the batch with the error (shared when there are several).
fn fail_all(batch: &mut Vec<Pending>, error: rusqlite::Error) {
    let shared = Arc::new(error);
    for pending in batch.drain(..) {
        pending.answer(Err(JournalError::Sqlite(Arc::clone(&shared))));
    }
}

/// Runs the planned steps.
fn run_steps(
    conn: &rusqlite::Connection,
    batch: &[Pending],
    steps: &[Step],
) -> Result<Vec<Outcome>, Failure> {
    let mut outcomes: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
    for step in steps {
        match step {
            Step::One(index) => {
                outcomes[*index] =
                    Some(run_one(conn, &batch[*index].op).map_err(|e| Failure::One(*index, e))?);
            }
            Step::Merged(group) => {
                let moved = run_merged(conn, batch, group).map_err(|_| Failure::Merged)?;
                let moved: HashSet<(&str, &str)> =
                    moved.iter().map(|(tenant, key)| (tenant.as_str(), key.as_str())).collect();
                for index in group {
                    let row = batch[*index].op.attempt_row();
                    outcomes[*index] = Some(Outcome::Moved(row.is_some_and(|row| moved.contains(&row))));
                }
            }
        }
    }
    Ok(outcomes.into_iter().map(|outcome| outcome.unwrap_or(Outcome::Done)).collect())
}

/// Columns of one row of the merged statement's `VALUES`.
const MERGED_COLUMNS: usize = 24;

/// The merged statement for `rows` rows. Everything is bound (none of it spelled in the SQL), so
/// the text depends only on the number of rows and the prepared statement is reused.
fn merged_sql(rows: usize) -> String {
    let row = format!("({})", vec!["?"; MERGED_COLUMNS].join(", "));
    format!("{MERGED_HEAD}VALUES {}{MERGED_TAIL}", vec![row.as_str(); rows].join(", "))
}

/// One merged statement; returns the (tenant, key) rows it moved.
fn run_merged(
    conn: &rusqlite::Connection,
    batch: &[Pending],
    group: &[usize],
) -> rusqlite::Result<Vec<(String, String)>> {
    // Placeholders for the NOT NULL columns of a settle (never written: see MERGED_HEAD), and for
    // the settlement columns of a propose.
    const NOTHING: Option<&str> = None;
    let mut values: Vec<&dyn ToSql> = Vec::with_capacity(group.len() * MERGED_COLUMNS);
    for index in group {
        let (op, attempt, tenant, key, settlement, at): (&i64, _, _, _, _, _) = match &batch[*index].op {
            Op::Propose(v) => (&0, Some(v), &v.tenant, &v.key, None, &v.now),
            Op::Settle { tenant, key, settlement } => {
                (&1, None, tenant, key, Some(settlement), &settlement.now)
            }
            Op::UpsertSettled(v, settlement) => (&2, Some(v), &v.tenant, &v.key, Some(settlement), &v.now),
            // The plan puts nothing else in a merged step.
            _ => continue,
        };
        values.extend([op as &dyn ToSql, tenant, key]);
        match attempt {
            // Its columns after the tenant and key.
            Some(v) => values.extend_from_slice(&attempt_values(v)[2..]),
            None => values.extend([
                &"" as &dyn ToSql,
                &NOTHING,
                &"",
                &NOTHING,
                &NOTHING,
                &NOTHING,
                &"",
                &"",
                &"",
                &"null",
                &NOTHING,
                &"",
            ]),
        }
        match settlement {
            Some(s) => values.extend(settlement_values(s)),
            None => values.extend([
                &"proposed" as &dyn ToSql,
                &NOTHING,
                &NOTHING,
                &NOTHING,
                &NOTHING,
                &NOTHING,
                &NOTHING,
                &NOTHING,
                at,
            ]),
        }
    }
    let mut statement = conn.prepare_cached(&merged_sql(values.len() / MERGED_COLUMNS))?;
    let mut rows = statement.query(values.as_slice())?;
    let mut moved = Vec::new();
    while let Some(row) = rows.next()? {
        moved.push((row.get(0)?, row.get(1)?));
    }
    Ok(moved)
}

/// A proposed call's columns, in the order PROPOSE and UPSERT_SETTLED list them.
fn attempt_values(v: &AttemptValues) -> [&dyn ToSql; 14] {
    [
        &v.tenant,
        &v.key,
        &v.call_id,
        &v.message_id,
        &v.session_id,
        &v.parent_call_id,
        &v.user_id,
        &v.agent_id,
        &v.tool,
        &v.api,
        &v.function_name,
        &v.arguments,
        &v.tier,
        &v.instance_id,
    ]
}

/// A settlement's columns, in the order SETTLE and UPSERT_SETTLED list them.
fn settlement_values(s: &SettlementValues) -> [&dyn ToSql; 9] {
    [
        &s.status,
        &s.result,
        &s.error_kind,
        &s.error,
        &s.decision,
        &s.decided_by,
        &s.duration_ms,
        &s.exit_status,
        &s.now,
    ]
}

/// What an expired result keeps, as `EXPIRE_RESULTS` writes it for a result stored as text:
/// `{"content": its first `keep` characters, "expired": true}`.
fn expired_preview(json: Option<&str>, keep: u32) -> String {
    let keep = usize::try_from(keep).unwrap_or(usize::MAX);
    let content = match json.and_then(|text| serde_json::from_str::<Value>(text).ok()) {
        Some(Value::Object(mut result)) => match result.remove("content") {
            Some(Value::String(text)) => Value::String(text.chars().take(keep).collect()),
            None | Some(Value::Null) => Value::Null,
            // As SQLite's `json_extract` gives a boolean.
            Some(Value::Bool(true)) => Value::String("1".into()),
            Some(Value::Bool(false)) => Value::String("0".into()),
            Some(other) => Value::String(other.to_string().chars().take(keep).collect()),
        },
        _ => Value::Null,
    };
    serde_json::json!({"content": content, "expired": true}).to_string()
}

/// Runs one operation as its own statement(s).
fn run_one(conn: &rusqlite::Connection, op: &Op) -> rusqlite::Result<Outcome> {
    let run = |sql: &str, values: &[&dyn ToSql]| conn.prepare_cached(sql)?.execute(values);
    let moved = |changed: usize| Outcome::Moved(changed == 1);
    Ok(match op {
        Op::InsertRecord { record: [a, b, c, d, e, f, g, h, i], now, limit } => {
            moved(run(INSERT_RECORD, &[a, b, c, d, e, f, g, h, i, now, limit])?)
        }
        Op::UpdateRecord { key: [a, b, c, d], patch: [e, f, g, h], now } => {
            moved(run(UPDATE_RECORD, &[a, b, c, d, e, f, g, h, now])?)
        }
        Op::RemoveRecord { key: [a, b, c, d] } => moved(run(REMOVE_RECORD, &[a, b, c, d])?),
        Op::SetRecordVector { key: [a, b, c, d], model, bytes } => {
            moved(run(SET_RECORD_VECTOR, &[a, b, c, d, model, bytes])?)
        }
        Op::PutBase { .. } | Op::RemoveBase { .. } | Op::ApplySources { .. } => knowledge::run(conn, op)?,
        Op::Propose(v) => {
            let [a, b, c, d, e, f, g, h, i, j, k, l, m, n] = attempt_values(v);
            moved(run(PROPOSE, &[a, b, c, d, e, f, g, h, i, j, k, l, m, n, &v.now])?)
        }
        Op::Settle { tenant, key, settlement: s } => {
            let [a, b, c, d, e, f, g, h, i] = settlement_values(s);
            moved(run(SETTLE, &[tenant, key, a, b, c, d, e, f, g, h, i])?)
        }
        Op::UpsertSettled(v, s) => {
            let mut values = attempt_values(v).to_vec();
            values.extend(settlement_values(s));
            moved(run(UPSERT_SETTLED, &values)?)
        }
        Op::Confirm { tenant, key, now } => moved(run(CONFIRM, &[tenant, key, now])?),
        Op::Undo { tenant, key, now } => moved(run(UNDO, &[tenant, key, now])?),
        Op::RecordDecision { tenant, key, decision, decided_by, now } => {
            moved(run(RECORD_DECISION, &[tenant, key, decision, decided_by, now])?)
        }
        Op::RegisterInstance { id, host, pid, start_ticks, now, version, address, in_flight } => {
            run(REGISTER_INSTANCE, &[id, host, pid, start_ticks, now, version, address, in_flight])?;
            Outcome::Done
        }
        Op::PutConsoleSession([digest, tenant, principal, role, csrf], created_at, expires_at) => {
            run(FORGET_CONSOLE_SESSIONS, &[created_at])?;
            run(PUT_CONSOLE_SESSION, &[digest, tenant, principal, role, csrf, created_at, expires_at])?;
            Outcome::Done
        }
        Op::EndConsoleSession(digest) => moved(run(END_CONSOLE_SESSION, &[digest])?),
        Op::Heartbeat { id, now } => {
            run(HEARTBEAT, &[id, now])?;
            Outcome::Done
        }
        Op::Abandon { instances, now } => {
            let mut abandoned = Vec::new();
            for instance in instances {
                let mut statement = conn.prepare_cached(ABANDON)?;
                let mut rows = statement.query(rusqlite::params![instance, ABANDONED_ERROR, now])?;
                while let Some(row) = rows.next()? {
                    abandoned.push((row.get(0)?, row.get(1)?));
                }
                run(FORGET_INSTANCE, &[instance])?;
            }
            Outcome::Abandoned(abandoned)
        }
        Op::InsertApproval(a) => {
            run(
                INSERT_APPROVAL,
                &[
                    &a.id,
                    &a.tenant,
                    &a.session_id,
                    &a.attempt_key,
                    &a.call_id,
                    &a.tool,
                    &a.api,
                    &a.arguments,
                    &a.reason,
                    &a.status,
                    &a.decision,
                    &a.decided_by,
                    &a.created_at,
                    &a.decided_at,
                ],
            )?;
            Outcome::Done
        }
        Op::DecideApproval(d) => {
            moved(run(DECIDE_APPROVAL, &[&d.tenant, &d.id, &d.status, &d.decision, &d.decided_by, &d.now])?)
        }
        Op::Remember(r) => {
            run(
                REMEMBER,
                &[
                    &r.id,
                    &r.tenant,
                    &r.project,
                    &r.tool,
                    &r.api,
                    &r.argument_prefix,
                    &r.created_by,
                    &r.created_at,
                ],
            )?;
            Outcome::Done
        }
        Op::Revoke { tenant, id } => moved(run(REVOKE, &[tenant, id])?),
        Op::PutSession(s) => {
            run(
                PUT_SESSION,
                &[&s.id, &s.tenant, &s.user_id, &s.config, &s.status, &s.created_at, &s.ended_at],
            )?;
            Outcome::Done
        }
        Op::EndSession { tenant, id, now } => moved(run(END_SESSION, &[tenant, id, now])?),
        Op::ExpireResults { after, before, keep, limit, now } => Outcome::Deleted(
            run(EXPIRE_RESULTS, &[after, before, keep, limit, now])?.try_into().unwrap_or(u64::MAX),
        ),
        Op::CutResults { rows, now } => {
            let mut cut = 0;
            for (tenant, key, preview) in rows {
                cut += run(CUT_PACKED_RESULT, &[tenant, key, preview, now])?.try_into().unwrap_or(u64::MAX);
            }
            Outcome::Deleted(cut)
        }
        Op::Prune { before, limit } => {
            let mut deleted = 0u64;
            for statement in [PRUNE_ATTEMPTS, PRUNE_APPROVALS, PRUNE_SESSIONS] {
                let left = u64::from(*limit).saturating_sub(deleted);
                if left == 0 {
                    break;
                }
                deleted += run(statement, &[before, &i64::try_from(left).unwrap_or(i64::MAX)])?
                    .try_into()
                    .unwrap_or(u64::MAX);
            }
            Outcome::Deleted(deleted)
        }
    })
}

impl SqliteJournal {
    journal_reads!(Sqlite, reads);
}

#[async_trait]
impl Journal for SqliteJournal {
    async fn propose(&self, attempt: &NewAttempt) -> Result<Proposed, JournalError> {
        let values = AttemptValues::new(attempt);
        let key = values.key.clone();
        let created = self.write_moved(Op::Propose(values)).await?;
        Ok(Proposed { key: key.to_string(), created })
    }

    async fn settle(&self, tenant: &str, key: &str, settlement: &Settlement) -> Result<bool, JournalError> {
        let Some(settlement) = SettlementValues::new(settlement).map(SettlementValues::packed) else {
            return Ok(false);
        };
        self.write_moved(Op::Settle { tenant: clean_text(tenant), key: clean_text(key), settlement }).await
    }

    async fn upsert_settled(
        &self,
        attempt: &NewAttempt,
        settlement: &Settlement,
    ) -> Result<bool, JournalError> {
        let Some(settlement) = SettlementValues::new(settlement).map(SettlementValues::packed) else {
            return Ok(false);
        };
        self.write_moved(Op::UpsertSettled(AttemptValues::new(attempt), settlement)).await
    }

    async fn confirm(&self, tenant: &str, key: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::Confirm { tenant: clean(tenant), key: clean(key), now: now_ms() }).await
    }

    async fn record_decision(
        &self,
        tenant: &str,
        key: &str,
        decision: &str,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError> {
        self.write_moved(Op::RecordDecision {
            tenant: clean(tenant),
            key: clean(key),
            decision: clean(decision),
            decided_by: decided_by.map(clean),
            now: now_ms(),
        })
        .await
    }

    async fn mark_undone(&self, tenant: &str, key: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::Undo { tenant: clean(tenant), key: clean(key), now: now_ms() }).await
    }

    async fn get(&self, tenant: &str, key: &str) -> Result<Option<Attempt>, JournalError> {
        self.read_attempt(tenant, key).await
    }

    async fn query(&self, tenant: &str, filter: &AttemptFilter) -> Result<Vec<Attempt>, JournalError> {
        self.read_attempts(tenant, filter).await
    }

    async fn register_instance(&self, instance: &InstanceInfo) -> Result<(), JournalError> {
        self.write_done(Op::RegisterInstance {
            id: clean(&instance.id),
            host: clean(&instance.host),
            pid: i64::from(instance.pid),
            start_ticks: instance.start_ticks.and_then(|ticks| i64::try_from(ticks).ok()),
            now: now_ms(),
            version: instance.version.as_deref().map(clean),
            address: instance.address.as_deref().map(clean),
            in_flight: instance.in_flight.and_then(|n| i64::try_from(n).ok()),
        })
        .await
    }

    async fn heartbeat(&self, instance_id: &str) -> Result<(), JournalError> {
        self.write_done(Op::Heartbeat { id: clean(instance_id), now: now_ms() }).await
    }

    async fn reconcile(&self, policy: &ReconcilePolicy) -> Result<ReconcileReport, JournalError> {
        let now = now_ms();
        let registered: Vec<InstanceRow> = sqlx::query_as(INSTANCES).fetch_all(&self.reads).await?;
        let owners: Vec<String> = sqlx::query(PROPOSED_OWNERS)
            .fetch_all(&self.reads)
            .await?
            .iter()
            .map(|row| row.try_get(0))
            .collect::<Result<_, _>>()?;
        let dead = dead_instances(&registered, &owners, policy, now, &host_name());
        let abandoned = if dead.is_empty() {
            Vec::new()
        } else {
            match self.write(Op::Abandon { instances: dead, now }).await? {
                Outcome::Abandoned(rows) => rows,
                other => {
                    return Err(JournalError::Corrupt(format!(
                        "the writer answered {other:?} to an abandon"
                    )));
                }
            }
        };
        let Some(after) = policy.unconfirmed_after_ms else {
            return Ok(ReconcileReport { abandoned, unconfirmed: Vec::new() });
        };
        let rows: Vec<AttemptRow> = sqlx::query_as(UNCONFIRMED)
            .bind(now.saturating_sub(after))
            .bind(i64::from(MAX_ROWS))
            .fetch_all(&self.reads)
            .await?;
        let unconfirmed = rows.into_iter().map(Attempt::try_from).collect::<Result<_, _>>()?;
        Ok(ReconcileReport { abandoned, unconfirmed })
    }

    async fn insert_approval(&self, approval: &PendingApproval) -> Result<(), JournalError> {
        self.write_done(Op::InsertApproval(ApprovalValues::new(approval))).await
    }

    async fn decide_approval(
        &self,
        tenant: &str,
        id: &str,
        status: &str,
        decision: &Value,
        decided_by: Option<&str>,
    ) -> Result<bool, JournalError> {
        let Some(decision) = DecisionValues::new(tenant, id, status, decision, decided_by) else {
            return Ok(false);
        };
        self.write_moved(Op::DecideApproval(decision)).await
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
        self.write_done(Op::Remember(RememberValues::new(decision))).await
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
        self.write_moved(Op::Revoke { tenant: clean(tenant), id: clean(id) }).await
    }

    async fn put_session(&self, session: &SessionRecord) -> Result<(), JournalError> {
        self.write_done(Op::PutSession(SessionValues::new(session))).await
    }

    async fn get_session(&self, tenant: &str, id: &str) -> Result<Option<SessionRecord>, JournalError> {
        self.read_session(tenant, id).await
    }

    async fn end_session(&self, tenant: &str, id: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::EndSession { tenant: clean(tenant), id: clean(id), now: now_ms() }).await
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
        let texts = [
            clean(&session.digest),
            clean(&session.tenant),
            clean(&session.principal),
            clean(&session.role),
            clean(&session.csrf),
        ];
        self.write_done(Op::PutConsoleSession(texts, session.created_at, session.expires_at)).await
    }

    async fn console_session(
        &self,
        digest: &str,
        now: i64,
    ) -> Result<Option<crate::ConsoleSession>, JournalError> {
        self.read_console_session(digest, now).await
    }

    async fn end_console_session(&self, digest: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::EndConsoleSession(clean(digest))).await
    }

    async fn expire_results(
        &self,
        after_ms: i64,
        before_ms: i64,
        keep: u32,
        limit: u32,
    ) -> Result<u64, JournalError> {
        let deleted = |outcome: Outcome| match outcome {
            Outcome::Deleted(cut) => Ok(cut),
            other => Err(JournalError::Corrupt(format!("the writer answered {other:?} to an expiry"))),
        };
        let op = Op::ExpireResults { after: after_ms, before: before_ms, keep, limit, now: now_ms() };
        let cut = deleted(self.write(op).await?)?;
        let left = u64::from(limit).saturating_sub(cut);
        if left == 0 {
            return Ok(cut);
        }
        let packed: Vec<(String, String, Vec<u8>)> = sqlx::query_as(PACKED_RESULTS)
            .bind(after_ms)
            .bind(before_ms)
            .bind(i64::try_from(left).unwrap_or(i64::MAX))
            .fetch_all(&self.reads)
            .await?;
        if packed.is_empty() {
            return Ok(cut);
        }
        let rows = packed
            .into_iter()
            // A result that no longer decompresses is cut all the same.
            .map(|(tenant, key, bytes)| {
                (tenant, key, expired_preview(crate::pack::unpack(&bytes).ok().as_deref(), keep))
            })
            .collect();
        Ok(cut + deleted(self.write(Op::CutResults { rows, now: now_ms() }).await?)?)
    }

    async fn prune(&self, before_ms: i64, limit: u32) -> Result<u64, JournalError> {
        match self.write(Op::Prune { before: before_ms, limit }).await? {
            Outcome::Deleted(deleted) => Ok(deleted),
            other => Err(JournalError::Corrupt(format!("the writer answered {other:?} to a prune"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_file_of_a_url() {
        for (url, path) in [
            ("sqlite:///var/lib/toolhost/journal.db", Some("/var/lib/toolhost/journal.db")),
            ("sqlite://journal.db?mode=rwc", Some("journal.db")),
            ("sqlite:data/j.db", Some("data/j.db")),
            ("sqlite::memory:", None),
            ("postgres://u:p@h/db", None),
        ] {
            assert_eq!(sqlite_path(url), path.map(std::path::PathBuf::from), "{url}");
        }
    }
    use crate::{AttemptStatus, NewAttempt};

    fn attempt(tenant: &str, call: &str, arguments: Value) -> AttemptValues {
        AttemptValues::new(&NewAttempt {
            tenant: tenant.into(),
            call_id: call.into(),
            message_id: None,
            session_id: "s".into(),
            parent_call_id: None,
            user_id: None,
            agent_id: None,
            tool: "tool".into(),
            api: "api".into(),
            function_name: "tool__api".into(),
            arguments,
            tier: None,
            instance_id: "i".into(),
        })
    }

    fn settlement(status: AttemptStatus, result: Value) -> SettlementValues {
        SettlementValues::new(&Settlement {
            status,
            result: Some(result),
            error_kind: None,
            error: None,
            decision: None,
            decided_by: None,
            duration_ms: Some(1),
            exit_status: None,
        })
        .unwrap()
    }

    fn settle(tenant: &str, call: &str, status: AttemptStatus) -> Op {
        Op::Settle { tenant: tenant.into(), key: call.into(), settlement: settlement(status, json!(call)) }
    }

    /// Runs `ops` as one batch and returns each answer (`Moved(bool)` as `Some(bool)`).
    async fn batch(conn: &rusqlite::Connection, ops: Vec<Op>) -> Vec<Result<Option<bool>, String>> {
        let mut answers = Vec::new();
        let mut pending = Vec::new();
        for op in ops {
            let (reply, answer) = oneshot::channel();
            pending.push(Pending { op, reply, _counted: None });
            answers.push(answer);
        }
        run_batch(conn, &mut pending);
        let mut results = Vec::new();
        for answer in answers {
            results.push(match answer.await.expect("every operation is answered") {
                Ok(Outcome::Moved(moved)) => Ok(Some(moved)),
                Ok(_) => Ok(None),
                Err(e) => Err(e.to_string()),
            });
        }
        results
    }

    async fn status(
        conn: &rusqlite::Connection,
        tenant: &str,
        key: &str,
    ) -> Option<(String, Option<String>)> {
        use rusqlite::OptionalExtension as _;
        conn.query_row(
            "SELECT status, result FROM tool_call_attempts WHERE tenant = ?1 AND key = ?2",
            [tenant, key],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )
        .optional()
        .unwrap()
    }

    /// A compressed result's preview, made in Rust, is what SQLite writes for the same result
    /// stored as text (`EXPIRE_RESULTS`), whatever its content is.
    #[tokio::test]
    async fn expired_previews_match_what_sqlite_writes() {
        let (_dir, conn) = connection().await;
        let long = "é".repeat(50);
        for result in [
            json!({"content": long, "state": {"x": 1}}),
            json!({"content": "short"}),
            json!({"content": null}),
            json!({"state": "no content"}),
            json!({"content": true}),
            json!({"content": false}),
            json!({"content": 12345}),
            json!({"content": ["a", {"b": 2}]}),
            json!(["not", "an", "object"]),
        ] {
            let text = result.to_string();
            let by_sqlite: String = conn
                .query_row(
                    "SELECT json_object('content', substr(json_extract(?1, '$.content'), 1, ?2), 'expired', json('true'))",
                    rusqlite::params![text, 40],
                    |row| row.get(0),
                )
                .unwrap();
            let by_sqlite: Value = serde_json::from_str(&by_sqlite).unwrap();
            let by_rust: Value = serde_json::from_str(&expired_preview(Some(&text), 40)).unwrap();
            assert_eq!(by_rust, by_sqlite, "{result}");
        }
        let none: Value = serde_json::from_str(&expired_preview(None, 40)).unwrap();
        assert_eq!(none, json!({"content": null, "expired": true}));
    }

    /// `sqlite::memory:` is a file in a private directory (owner only), which goes with the
    /// journal.
    #[tokio::test]
    async fn a_throwaway_journal_leaves_nothing_behind() {
        let journal = SqliteJournal::open("sqlite::memory:").await.unwrap();
        journal.write_done(Op::Heartbeat { id: "i".into(), now: 1 }).await.unwrap();
        let dir = journal._scratch.as_ref().unwrap().path().to_path_buf();
        assert!(dir.join("journal.db").is_file());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt as _;
            assert_eq!(std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777, 0o700);
        }
        drop(journal);
        assert!(!dir.exists(), "{} is left", dir.display());
    }

    /// While another process holds the write lock, a write waits on the writer thread, never on
    /// its caller's: the runtime's one thread goes on serving other tasks, and the write lands
    /// once the lock is released.
    #[tokio::test(flavor = "current_thread")]
    async fn a_write_waits_for_another_process_on_the_writer_thread() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let journal = SqliteJournal::open(&format!("sqlite://{}", path.display())).await.unwrap();
        journal
            .write_done(Op::RegisterInstance {
                id: "i".into(),
                host: "h".into(),
                pid: 1,
                start_ticks: None,
                now: 1,
                version: None,
                address: None,
                in_flight: None,
            })
            .await
            .unwrap();
        let other = rusqlite::Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let write = tokio::spawn(async move {
            let done = journal.write_done(Op::Heartbeat { id: "i".into(), now: 2 }).await;
            (journal, done)
        });
        let started = std::time::Instant::now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        // A write holding this thread in SQLite's busy wait would have kept it 5 s.
        assert!(started.elapsed() < Duration::from_secs(2), "the runtime was held {:?}", started.elapsed());
        assert!(!write.is_finished(), "the write waits for the lock");
        other.execute_batch("COMMIT").unwrap();
        let (_journal, done) = write.await.unwrap();
        done.unwrap();
        let heartbeat: i64 = other
            .query_row("SELECT heartbeat_at FROM journal_instances WHERE id = 'i'", [], |row| row.get(0))
            .unwrap();
        assert_eq!(heartbeat, 2);
    }

    /// A tenant's newest calls without a filter are read through an index, not by sorting all of
    /// its rows (long reads that held the log past its bound in `tests/wal.rs`).
    #[tokio::test]
    async fn an_unfiltered_listing_is_served_by_an_index() {
        let (_dir, conn) = connection().await;
        let sql = format!(
            "EXPLAIN QUERY PLAN SELECT {ATTEMPT_COLUMNS} FROM tool_call_attempts WHERE tenant = ?1 \
             ORDER BY attempted_at DESC, rowid DESC LIMIT ?2"
        );
        let mut statement = conn.prepare(&sql).unwrap();
        let plan: Vec<String> = statement
            .query_map(rusqlite::params!["t", 50], |row| row.get(3))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let plan = plan.join("; ");
        assert!(plan.contains("tool_call_attempts_tenant_time"), "{plan}");
        assert!(!plan.contains("TEMP B-TREE"), "{plan}");
    }

    /// A migrated database and the writer's connection to it.
    async fn connection() -> (tempfile::TempDir, rusqlite::Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("j.db");
        let mut conn =
            SqliteConnectOptions::new().filename(&path).create_if_missing(true).connect().await.unwrap();
        MIGRATOR.run(&mut conn).await.unwrap();
        conn.close().await.unwrap();
        (dir, open_writer(&path, SqliteTuning::default()).unwrap())
    }

    #[tokio::test]
    async fn a_merged_statement_reports_exactly_what_moved() {
        let (_dir, conn) = connection().await;
        use AttemptStatus::{Executed, Failed};
        // Set up: c and g proposed, d and h settled, i proposed (for a duplicate propose).
        let setup = vec![
            Op::Propose(attempt("t", "c", json!(1))),
            Op::Propose(attempt("t", "d", json!(1))),
            Op::Propose(attempt("t", "g", json!("g-proposed"))),
            Op::Propose(attempt("t", "h", json!(1))),
            Op::Propose(attempt("t", "i", json!("first"))),
            Op::Propose(attempt("other", "k", json!("other's"))),
        ];
        assert!(batch(&conn, setup).await.iter().all(|r| r == &Ok(Some(true))));
        assert_eq!(
            batch(&conn, vec![settle("t", "d", Failed), settle("t", "h", Failed)]).await,
            [Ok(Some(true)), Ok(Some(true))]
        );

        let ops = vec![
            Op::Propose(attempt("t", "a", json!(1))),
            Op::Propose(attempt("t", "b", json!(1))),
            settle("t", "c", Executed),
            settle("t", "d", Executed),
            settle("t", "e", Executed),
            Op::UpsertSettled(attempt("t", "f", json!(1)), settlement(Executed, json!("f"))),
            Op::UpsertSettled(attempt("t", "g", json!("changed")), settlement(Executed, json!("g"))),
            Op::UpsertSettled(attempt("t", "h", json!(1)), settlement(Executed, json!("h"))),
            Op::Propose(attempt("t", "i", json!("second"))),
            settle("t", "k", Executed),
        ];
        let steps = plan(
            &ops.iter()
                .map(|op| Pending { op: op.clone(), reply: oneshot::channel().0, _counted: None })
                .collect::<Vec<_>>(),
            true,
        );
        assert!(
            matches!(steps.as_slice(), [Step::Merged(group)] if group.len() == 10),
            "one merged statement: {steps:?}"
        );
        let moved = batch(&conn, ops).await;
        let expected = [true, true, true, false, false, true, true, false, false, false];
        assert_eq!(moved, expected.map(|m| Ok(Some(m))));
        assert_eq!(status(&conn, "t", "c").await, Some(("executed".into(), Some("\"c\"".into()))));
        assert_eq!(
            status(&conn, "t", "d").await,
            Some(("failed".into(), Some("\"d\"".into()))),
            "a settled row keeps its settlement"
        );
        assert_eq!(status(&conn, "t", "e").await, None, "a settle creates nothing");
        assert_eq!(status(&conn, "t", "f").await, Some(("executed".into(), Some("\"f\"".into()))));
        assert_eq!(status(&conn, "t", "h").await, Some(("failed".into(), Some("\"h\"".into()))));
        assert_eq!(
            status(&conn, "other", "k").await,
            Some(("proposed".into(), None)),
            "another tenant's row is untouched"
        );
        assert_eq!(status(&conn, "t", "k").await, None);
        let (arguments, call_id): (String, String) = conn
            .query_row(
                "SELECT arguments, call_id FROM tool_call_attempts WHERE tenant = 't' AND key = 'g'",
                [],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (arguments.as_str(), call_id.as_str()),
            ("\"g-proposed\"", "g"),
            "an upsert keeps what was proposed"
        );
        let arguments: String = conn
            .query_row(
                "SELECT arguments FROM tool_call_attempts WHERE tenant = 't' AND key = 'i'",
                [],
                |row| row.get(0),
            )
            .unwrap();
        assert_eq!(arguments, "\"first\"");
    }

    #[tokio::test]
    async fn operations_on_one_row_run_in_order_within_a_batch() {
        let (_dir, conn) = connection().await;
        let ops = vec![
            Op::Propose(attempt("t", "x", json!(1))),
            settle("t", "x", AttemptStatus::Executed),
            settle("t", "x", AttemptStatus::Failed),
            Op::Propose(attempt("t", "y", json!("first"))),
            Op::Propose(attempt("t", "y", json!("second"))),
            Op::Confirm { tenant: "t".into(), key: "x".into(), now: 1 },
        ];
        assert_eq!(
            batch(&conn, ops).await,
            [
                Ok(Some(true)),
                Ok(Some(true)),
                Ok(Some(false)),
                Ok(Some(true)),
                Ok(Some(false)),
                Ok(Some(true))
            ]
        );
        assert_eq!(status(&conn, "t", "x").await, Some(("confirmed".into(), Some("\"x\"".into()))));
    }

    #[tokio::test]
    async fn a_failing_operation_fails_alone_and_the_rest_commits() {
        let (_dir, conn) = connection().await;
        let ops = vec![
            Op::Propose(attempt("t", "ok-1", json!(1))),
            Op::Propose(attempt("t", "", json!(1))),
            Op::Propose(attempt("t", "ok-2", json!(1))),
            Op::Heartbeat { id: "nobody".into(), now: 1 },
            settle("t", "ok-1", AttemptStatus::Executed),
        ];
        let answers = batch(&conn, ops).await;
        assert_eq!(answers[0], Ok(Some(true)));
        assert!(answers[1].as_ref().is_err_and(|e| e.contains("CHECK")), "{:?}", answers[1]);
        assert_eq!(answers[2], Ok(Some(true)));
        assert_eq!(answers[3], Ok(None));
        assert_eq!(answers[4], Ok(Some(true)));
        assert_eq!(status(&conn, "t", "ok-1").await.unwrap().0, "executed");
        assert_eq!(status(&conn, "t", "ok-2").await.unwrap().0, "proposed");
        // Nothing is left open.
        assert_eq!(batch(&conn, vec![Op::Propose(attempt("t", "after", json!(1)))]).await, [Ok(Some(true))]);
    }

    #[tokio::test]
    async fn an_abandon_is_a_barrier() {
        let (_dir, conn) = connection().await;
        let mut dead = attempt("t", "dead", json!(1));
        dead.instance_id = "gone".into();
        let ops = vec![
            Op::Propose(dead),
            Op::Abandon { instances: vec!["gone".into()], now: 1 },
            settle("t", "dead", AttemptStatus::Executed),
        ];
        let mut answers = Vec::new();
        let mut pending = Vec::new();
        for op in ops {
            let (reply, answer) = oneshot::channel();
            pending.push(Pending { op, reply, _counted: None });
            answers.push(answer);
        }
        let steps = plan(&pending, true);
        assert_eq!(steps.len(), 3, "{steps:?}");
        run_batch(&conn, &mut pending);
        assert!(matches!(answers.remove(0).await.unwrap(), Ok(Outcome::Moved(true))));
        match answers.remove(0).await.unwrap() {
            Ok(Outcome::Abandoned(rows)) => assert_eq!(rows, [("t".to_owned(), "dead".to_owned())]),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(answers.remove(0).await.unwrap(), Ok(Outcome::Moved(false))),
            "the abandon ran first"
        );
        assert_eq!(status(&conn, "t", "dead").await.unwrap().0, "abandoned");
    }
}
