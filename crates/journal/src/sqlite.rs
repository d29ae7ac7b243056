//! The SQLite journal: WAL, one writer task with group commit, a small read-only pool.

use std::collections::HashSet;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::Value;
use sqlx::migrate::Migrator;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePool, SqlitePoolOptions,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, QueryBuilder, Row, Sqlite};
use tokio::sync::{mpsc, oneshot};

use crate::rows::{
    ABANDONED_ERROR, ApprovalRow, ApprovalValues, AttemptRow, AttemptValues, DecisionValues, InstanceRow,
    MAX_ROWS, RememberValues, RememberedRow, SessionRow, SessionValues, SettlementValues, Text, clean,
    clean_text, dead_instances, now_ms, query_limit,
};
use crate::{
    Attempt, AttemptFilter, InstanceInfo, Journal, JournalError, NewAttempt, PendingApproval, Proposed,
    ReconcilePolicy, ReconcileReport, RememberedDecision, SessionRecord, Settlement, host_name,
};

static MIGRATOR: Migrator = sqlx::migrate!("./migrations/sqlite");

/// The most operations one group commit takes.
const MAX_BATCH: usize = 256;
/// Read connections of a file database.
const READERS: u32 = 4;
/// How long a statement waits for another process's lock.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the checkpointer copies the write-ahead log into the database (small, frequent
/// checkpoints keep the server's p99 lowest; see docs/benchmarks.md).
const CHECKPOINT_EVERY: Duration = Duration::from_millis(50);
/// How long the writer's `RESTART` checkpoint waits for readers (see `restart_log`): 1 s.
const RESTART_WAIT: &str = "PRAGMA busy_timeout = 1000";
/// [`BUSY_TIMEOUT`] back again.
const BUSY_TIMEOUT_PRAGMA: &str = "PRAGMA busy_timeout = 5000";

/// How the SQLite journal keeps its write-ahead log small.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqliteTuning {
    /// Past this much the write-ahead log is checkpointed whole so that it starts over (by the
    /// writer between two batches: it copies what the last checkpoint left and syncs, 4-9 ms
    /// measured; see `checkpoint_loop`), and the file is cut back to this size
    /// (`journal_size_limit`) when it does. (A `RESTART` or `TRUNCATE` checkpoint on another
    /// connection held the writer longer: p99 22-25 ms and 39 ms at 64 clients.) Below it,
    /// checkpoints are `PASSIVE`, on a connection of their own, and never wait. A read longer
    /// than a second can hold the log past this until it is done. Under constant writes a `PASSIVE` checkpoint never lets the log start over, so
    /// without this bound it grows without end (2.3 GB in 25 s of load was measured).
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

const REGISTER_INSTANCE: &str = "INSERT INTO journal_instances (id, host, pid, start_ticks, started_at, heartbeat_at) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?5) \
     ON CONFLICT (id) DO UPDATE SET host = excluded.host, pid = excluded.pid, start_ticks = excluded.start_ticks, \
     heartbeat_at = excluded.heartbeat_at";

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

/// The SQLite journal. See the crate documentation for the design (one writer task, group
/// commit, a read pool).
#[derive(Debug)]
pub struct SqliteJournal {
    writer: mpsc::Sender<Pending>,
    reads: SqlitePool,
}

impl SqliteJournal {
    /// Opens (and migrates) the database a `sqlite:` URL names: `sqlite://PATH` (created when
    /// missing), or `sqlite::memory:` for a private in-memory database. Spawns the writer
    /// task on the current Tokio runtime; it stops when the journal is dropped.
    ///
    /// # Errors
    ///
    /// [`JournalError::Database`] for a URL SQLite cannot parse or a file it cannot open,
    /// [`JournalError::Migrate`] when the migrations fail.
    pub async fn open(url: &str) -> Result<Self, JournalError> {
        Self::open_with(url, SqliteTuning::default()).await
    }

    /// [`open`](Self::open) with its write-ahead log bounded by `tuning`.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn open_with(url: &str, tuning: SqliteTuning) -> Result<Self, JournalError> {
        let options = SqliteConnectOptions::from_str(url)?.busy_timeout(BUSY_TIMEOUT).create_if_missing(true);
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let mut checkpointer = None;
        let (connection, reads) = if in_memory {
            // One connection for everything: an in-memory database lives in its connection.
            let pool = one_connection(options).await?;
            MIGRATOR.run(&pool).await?;
            (WriteConnection::Shared(pool.clone()), pool)
        } else {
            let write_options = options
                .clone()
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                // Statement journals (multi-row statements keep one) in memory, not temp files.
                .pragma("temp_store", "MEMORY")
                // Checkpoints run on a connection of their own (below), so the writer's commits
                // never wait for one (with its fsync) to finish.
                .pragma("wal_autocheckpoint", "0")
                // When a checkpoint lets the log start over, a file larger than this is cut back.
                .pragma("journal_size_limit", tuning.wal_truncate_bytes.to_string())
                .statement_cache_capacity(512);
            let mut connection = write_options.connect().await?;
            MIGRATOR.run(&mut connection).await?;
            checkpointer = Some(options.clone().connect().await?);
            // Readers connect lazily, after the writer created the file and switched it to WAL.
            let reads = SqlitePoolOptions::new()
                .max_connections(READERS)
                .connect_lazy_with(options.pragma("query_only", "ON"));
            (WriteConnection::Owned(connection), reads)
        };
        let (writer, queue) = mpsc::channel(4 * MAX_BATCH);
        let restart = Arc::new(Restart::default());
        tokio::spawn(write_loop(connection, queue, Arc::clone(&restart)));
        if let Some(checkpointer) = checkpointer {
            tokio::spawn(checkpoint_loop(checkpointer, writer.downgrade(), tuning, restart));
        }
        Ok(Self { writer, reads })
    }

    async fn write(&self, op: Op) -> Result<Outcome, JournalError> {
        let (reply, answer) = oneshot::channel();
        self.writer.send(Pending { op, reply }).await.map_err(|_| JournalError::WriterGone)?;
        answer.await.map_err(|_| JournalError::WriterGone)?
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

/// A pool of exactly one connection that never closes it.
async fn one_connection(options: SqliteConnectOptions) -> Result<SqlitePool, sqlx::Error> {
    SqlitePoolOptions::new()
        .max_connections(1)
        .min_connections(1)
        .idle_timeout(None)
        .max_lifetime(None)
        // The writer takes the connection for every batch: no ping round trip each time.
        .test_before_acquire(false)
        .connect_with(options)
        .await
}

/// The writer's connection: its own for a file, the one shared connection for memory.
#[derive(Debug)]
enum WriteConnection {
    Owned(SqliteConnection),
    Shared(SqlitePool),
}

/// One write, as the writer task runs it.
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
    RegisterInstance {
        id: String,
        host: String,
        pid: i64,
        start_ticks: Option<i64>,
        now: i64,
    },
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
}

impl Op {
    /// The attempt row the operation touches, when it touches exactly one.
    fn attempt_row(&self) -> Option<(&str, &str)> {
        match self {
            Self::Propose(values) | Self::UpsertSettled(values, _) => Some((&values.tenant, &values.key)),
            Self::Settle { tenant, key, .. } => Some((tenant, key)),
            Self::Confirm { tenant, key, .. } => Some((tenant, key)),
            _ => None,
        }
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
async fn restart_log(conn: &mut SqliteConnection) -> Option<i64> {
    let _ = sqlx::query(RESTART_WAIT).execute(&mut *conn).await;
    let done: Result<(i64, i64, i64), _> =
        sqlx::query_as("PRAGMA wal_checkpoint(RESTART)").fetch_one(&mut *conn).await;
    let _ = sqlx::query(BUSY_TIMEOUT_PRAGMA).execute(&mut *conn).await;
    done.ok().map(|(_, frames, _)| frames)
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

/// The file of a `sqlite://PATH[?…]` (or `sqlite:PATH`) URL; `None` for another URL or an
/// in-memory database. (Its write-ahead log is `PATH-wal`, its shared memory `PATH-shm`.)
pub fn sqlite_path(url: &str) -> Option<std::path::PathBuf> {
    let path = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:"))?;
    let path = path.split('?').next()?;
    (!path.is_empty() && !path.starts_with(":memory:")).then(|| std::path::PathBuf::from(path))
}

/// The writer task: takes what is queued, runs it in one transaction, answers after the commit;
/// between two batches, the checkpoint `checkpoint_loop` asked for.
async fn write_loop(
    mut connection: WriteConnection,
    mut queue: mpsc::Receiver<Pending>,
    restart: Arc<Restart>,
) {
    let mut batch = Vec::with_capacity(MAX_BATCH);
    while queue.recv_many(&mut batch, MAX_BATCH).await > 0 {
        match &mut connection {
            WriteConnection::Owned(conn) => {
                run_batch(conn, &mut batch).await;
                if restart.wanted.load(Ordering::Acquire) {
                    let frames = restart_log(conn).await;
                    restart.after.store(frames.unwrap_or(-1), Ordering::Release);
                    restart.wanted.store(false, Ordering::Release);
                }
            }
            WriteConnection::Shared(pool) => match pool.acquire().await {
                Ok(mut conn) => run_batch(&mut conn, &mut batch).await,
                Err(e) => fail_all(&mut batch, e),
            },
        }
        batch.clear();
    }
    match connection {
        WriteConnection::Owned(conn) => {
            let _ = conn.close().await;
        }
        WriteConnection::Shared(pool) => pool.close().await,
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
    One(usize, sqlx::Error),
}

/// Runs a batch until it commits, taking out each operation that fails (see the crate docs).
async fn run_batch(conn: &mut SqliteConnection, batch: &mut Vec<Pending>) {
    let mut merged = true;
    while !batch.is_empty() {
        let steps = plan(batch, merged);
        // A batch of one statement needs no transaction around it: the statement is atomic,
        // and a merged statement reports exactly what it moved.
        let single = matches!(steps.as_slice(), [Step::Merged(_)])
            || matches!(steps.as_slice(), [Step::One(index)] if !batch[*index].op.is_barrier());
        if !single && let Err(e) = sqlx::query("BEGIN IMMEDIATE").execute(&mut *conn).await {
            return fail_all(batch, e);
        }
        match run_steps(conn, batch, &steps).await {
            Ok(outcomes) => {
                if !single && let Err(e) = sqlx::query("COMMIT").execute(&mut *conn).await {
                    let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                    return fail_all(batch, e);
                }
                for (pending, outcome) in batch.drain(..).zip(outcomes) {
                    let _ = pending.reply.send(Ok(outcome));
                }
                return;
            }
            Err(failure) => {
                if !single {
                    // SQLite may already have rolled back (on some errors it does): ignore "no transaction".
                    let _ = sqlx::query("ROLLBACK").execute(&mut *conn).await;
                }
                match failure {
                    Failure::Merged => merged = false,
                    Failure::One(index, e) => {
                        let pending = batch.remove(index);
                        let _ = pending.reply.send(Err(JournalError::Database(e)));
                    }
                }
            }
        }
    }
}

/// Answers every operation of the batch with the error (shared when there are several).
fn fail_all(batch: &mut Vec<Pending>, error: sqlx::Error) {
    if batch.len() == 1 {
        let pending = batch.remove(0);
        let _ = pending.reply.send(Err(JournalError::Database(error)));
        return;
    }
    let shared = Arc::new(error);
    for pending in batch.drain(..) {
        let error = sqlx::Error::Io(std::io::Error::other(Arc::clone(&shared)));
        let _ = pending.reply.send(Err(JournalError::Database(error)));
    }
}

/// Runs the planned steps.
async fn run_steps(
    conn: &mut SqliteConnection,
    batch: &[Pending],
    steps: &[Step],
) -> Result<Vec<Outcome>, Failure> {
    let mut outcomes: Vec<Option<Outcome>> = batch.iter().map(|_| None).collect();
    for step in steps {
        match step {
            Step::One(index) => {
                outcomes[*index] =
                    Some(run_one(conn, &batch[*index].op).await.map_err(|e| Failure::One(*index, e))?);
            }
            Step::Merged(group) => {
                let moved = run_merged(conn, batch, group).await.map_err(|_| Failure::Merged)?;
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

/// One merged statement; returns the (tenant, key) rows it moved.
async fn run_merged(
    conn: &mut SqliteConnection,
    batch: &[Pending],
    group: &[usize],
) -> Result<Vec<(String, String)>, sqlx::Error> {
    let mut builder = QueryBuilder::<Sqlite>::new(MERGED_HEAD);
    builder.push_values(group, |mut row, index| {
        let (op, attempt, tenant, key, settlement) = match &batch[*index].op {
            Op::Propose(v) => (0_i64, Some(v), &v.tenant, &v.key, None),
            Op::Settle { tenant, key, settlement } => (1, None, tenant, key, Some(settlement)),
            Op::UpsertSettled(v, settlement) => (2, Some(v), &v.tenant, &v.key, Some(settlement)),
            // The plan puts nothing else in a merged step.
            _ => return,
        };
        // Everything is bound (none of it spelled in the SQL), so the text depends only on the
        // number of rows and the prepared statement is reused.
        row.push_bind(op).push_bind(Arc::clone(tenant)).push_bind(Arc::clone(key));
        match attempt {
            Some(v) => {
                row.push_bind(Arc::clone(&v.call_id))
                    .push_bind(v.message_id.clone())
                    .push_bind(Arc::clone(&v.session_id))
                    .push_bind(v.parent_call_id.clone())
                    .push_bind(v.user_id.clone())
                    .push_bind(v.agent_id.clone())
                    .push_bind(Arc::clone(&v.tool))
                    .push_bind(Arc::clone(&v.api))
                    .push_bind(Arc::clone(&v.function_name))
                    .push_bind(Arc::clone(&v.arguments))
                    .push_bind(v.tier.clone())
                    .push_bind(Arc::clone(&v.instance_id));
            }
            None => {
                // Placeholders for the NOT NULL columns of a settle (never written: see MERGED_HEAD).
                row.push_bind("")
                    .push_bind(None::<&str>)
                    .push_bind("")
                    .push_bind(None::<&str>)
                    .push_bind(None::<&str>)
                    .push_bind(None::<&str>)
                    .push_bind("")
                    .push_bind("")
                    .push_bind("")
                    .push_bind("null")
                    .push_bind(None::<&str>)
                    .push_bind("");
            }
        }
        match settlement {
            Some(s) => {
                row.push_bind(s.status)
                    .push_bind(s.result.clone())
                    .push_bind(s.error_kind.clone())
                    .push_bind(s.error.clone())
                    .push_bind(s.decision.clone())
                    .push_bind(s.decided_by.clone())
                    .push_bind(s.duration_ms)
                    .push_bind(s.exit_status)
                    .push_bind(s.now);
            }
            None => {
                row.push_bind("proposed");
                for _ in 0..7 {
                    row.push_bind(None::<&str>);
                }
                row.push_bind(attempt.map_or(0, |v| v.now));
            }
        }
    });
    builder.push(MERGED_TAIL);
    let rows = builder.build().fetch_all(&mut *conn).await?;
    rows.iter().map(|row| Ok((row.try_get::<String, _>(0)?, row.try_get::<String, _>(1)?))).collect()
}

type SqliteQuery<'q> = sqlx::query::Query<'q, Sqlite, sqlx::sqlite::SqliteArguments>;

/// Binds a proposed call's columns, in the order PROPOSE and UPSERT_SETTLED list them.
fn bind_attempt<'q>(query: SqliteQuery<'q>, v: &AttemptValues) -> SqliteQuery<'q> {
    query
        .bind(Arc::clone(&v.tenant))
        .bind(Arc::clone(&v.key))
        .bind(Arc::clone(&v.call_id))
        .bind(v.message_id.clone())
        .bind(Arc::clone(&v.session_id))
        .bind(v.parent_call_id.clone())
        .bind(v.user_id.clone())
        .bind(v.agent_id.clone())
        .bind(Arc::clone(&v.tool))
        .bind(Arc::clone(&v.api))
        .bind(Arc::clone(&v.function_name))
        .bind(Arc::clone(&v.arguments))
        .bind(v.tier.clone())
        .bind(Arc::clone(&v.instance_id))
}

/// Binds a settlement's columns, in the order SETTLE and UPSERT_SETTLED list them.
fn bind_settlement<'q>(query: SqliteQuery<'q>, s: &SettlementValues) -> SqliteQuery<'q> {
    query
        .bind(s.status)
        .bind(s.result.clone())
        .bind(s.error_kind.clone())
        .bind(s.error.clone())
        .bind(s.decision.clone())
        .bind(s.decided_by.clone())
        .bind(s.duration_ms)
        .bind(s.exit_status)
        .bind(s.now)
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
async fn run_one(conn: &mut SqliteConnection, op: &Op) -> Result<Outcome, sqlx::Error> {
    let moved = |done: sqlx::sqlite::SqliteQueryResult| Outcome::Moved(done.rows_affected() == 1);
    Ok(match op {
        Op::Propose(v) => moved(bind_attempt(sqlx::query(PROPOSE), v).bind(v.now).execute(&mut *conn).await?),
        Op::Settle { tenant, key, settlement: s } => moved(
            bind_settlement(sqlx::query(SETTLE).bind(Arc::clone(tenant)).bind(Arc::clone(key)), s)
                .execute(&mut *conn)
                .await?,
        ),
        Op::UpsertSettled(v, s) => {
            moved(bind_settlement(bind_attempt(sqlx::query(UPSERT_SETTLED), v), s).execute(&mut *conn).await?)
        }
        Op::Confirm { tenant, key, now } => moved(
            sqlx::query(CONFIRM)
                .bind(tenant.as_str())
                .bind(key.as_str())
                .bind(*now)
                .execute(&mut *conn)
                .await?,
        ),
        Op::RegisterInstance { id, host, pid, start_ticks, now } => {
            sqlx::query(REGISTER_INSTANCE)
                .bind(id.as_str())
                .bind(host.as_str())
                .bind(*pid)
                .bind(*start_ticks)
                .bind(*now)
                .execute(&mut *conn)
                .await?;
            Outcome::Done
        }
        Op::Heartbeat { id, now } => {
            sqlx::query(HEARTBEAT).bind(id.as_str()).bind(*now).execute(&mut *conn).await?;
            Outcome::Done
        }
        Op::Abandon { instances, now } => {
            let mut abandoned = Vec::new();
            for instance in instances {
                let rows = sqlx::query(ABANDON)
                    .bind(instance.as_str())
                    .bind(ABANDONED_ERROR)
                    .bind(*now)
                    .fetch_all(&mut *conn)
                    .await?;
                for row in rows {
                    abandoned.push((row.try_get(0)?, row.try_get(1)?));
                }
                sqlx::query(FORGET_INSTANCE).bind(instance.as_str()).execute(&mut *conn).await?;
            }
            Outcome::Abandoned(abandoned)
        }
        Op::InsertApproval(a) => {
            sqlx::query(INSERT_APPROVAL)
                .bind(a.id.as_str())
                .bind(a.tenant.as_str())
                .bind(a.session_id.as_str())
                .bind(a.attempt_key.as_str())
                .bind(a.call_id.as_str())
                .bind(a.tool.as_str())
                .bind(a.api.as_str())
                .bind(a.arguments.as_str())
                .bind(a.reason.as_str())
                .bind(a.status.as_str())
                .bind(a.decision.as_deref())
                .bind(a.decided_by.as_deref())
                .bind(a.created_at)
                .bind(a.decided_at)
                .execute(&mut *conn)
                .await?;
            Outcome::Done
        }
        Op::DecideApproval(d) => moved(
            sqlx::query(DECIDE_APPROVAL)
                .bind(d.tenant.as_str())
                .bind(d.id.as_str())
                .bind(d.status.as_str())
                .bind(d.decision.as_str())
                .bind(d.decided_by.as_deref())
                .bind(d.now)
                .execute(&mut *conn)
                .await?,
        ),
        Op::Remember(r) => {
            sqlx::query(REMEMBER)
                .bind(r.id.as_str())
                .bind(r.tenant.as_str())
                .bind(r.project.as_str())
                .bind(r.tool.as_str())
                .bind(r.api.as_str())
                .bind(r.argument_prefix.as_deref())
                .bind(r.created_by.as_deref())
                .bind(r.created_at)
                .execute(&mut *conn)
                .await?;
            Outcome::Done
        }
        Op::Revoke { tenant, id } => {
            moved(sqlx::query(REVOKE).bind(tenant.as_str()).bind(id.as_str()).execute(&mut *conn).await?)
        }
        Op::PutSession(s) => {
            sqlx::query(PUT_SESSION)
                .bind(s.id.as_str())
                .bind(s.tenant.as_str())
                .bind(s.user_id.as_deref())
                .bind(s.config.as_str())
                .bind(s.status.as_str())
                .bind(s.created_at)
                .bind(s.ended_at)
                .execute(&mut *conn)
                .await?;
            Outcome::Done
        }
        Op::EndSession { tenant, id, now } => moved(
            sqlx::query(END_SESSION)
                .bind(tenant.as_str())
                .bind(id.as_str())
                .bind(*now)
                .execute(&mut *conn)
                .await?,
        ),
        Op::ExpireResults { after, before, keep, limit, now } => {
            let done = sqlx::query(EXPIRE_RESULTS)
                .bind(*after)
                .bind(*before)
                .bind(i64::from(*keep))
                .bind(i64::from(*limit))
                .bind(*now)
                .execute(&mut *conn)
                .await?;
            Outcome::Deleted(done.rows_affected())
        }
        Op::CutResults { rows, now } => {
            let mut cut = 0;
            for (tenant, key, preview) in rows {
                let done = sqlx::query(CUT_PACKED_RESULT)
                    .bind(tenant.as_str())
                    .bind(key.as_str())
                    .bind(preview.as_str())
                    .bind(*now)
                    .execute(&mut *conn)
                    .await?;
                cut += done.rows_affected();
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
                let done = sqlx::query(statement)
                    .bind(*before)
                    .bind(i64::try_from(left).unwrap_or(i64::MAX))
                    .execute(&mut *conn)
                    .await?;
                deleted += done.rows_affected();
            }
            Outcome::Deleted(deleted)
        }
    })
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

    async fn get(&self, tenant: &str, key: &str) -> Result<Option<Attempt>, JournalError> {
        let row: Option<AttemptRow> = sqlx::query_as(GET_ATTEMPT)
            .bind(clean(tenant))
            .bind(clean(key))
            .fetch_optional(&self.reads)
            .await?;
        row.map(Attempt::try_from).transpose()
    }

    async fn query(&self, tenant: &str, filter: &AttemptFilter) -> Result<Vec<Attempt>, JournalError> {
        let mut builder = QueryBuilder::<Sqlite>::new("SELECT ");
        builder
            .push(ATTEMPT_COLUMNS)
            .push(" FROM tool_call_attempts WHERE tenant = ")
            .push_bind(clean(tenant));
        if let Some(session) = &filter.session_id {
            builder.push(" AND session_id = ").push_bind(clean(session));
        }
        if let Some(status) = filter.status {
            builder.push(" AND status = ").push_bind(status.as_str());
        }
        if let Some(tool) = &filter.tool {
            builder.push(" AND tool = ").push_bind(clean(tool));
        }
        if let Some(since) = filter.since {
            builder.push(" AND attempted_at >= ").push_bind(since);
        }
        if let Some(until) = filter.until {
            builder.push(" AND attempted_at < ").push_bind(until);
        }
        builder.push(" ORDER BY attempted_at DESC, rowid DESC LIMIT ").push_bind(query_limit(filter.limit));
        let rows: Vec<AttemptRow> = builder.build_query_as().fetch_all(&self.reads).await?;
        rows.into_iter().map(Attempt::try_from).collect()
    }

    async fn register_instance(&self, instance: &InstanceInfo) -> Result<(), JournalError> {
        self.write_done(Op::RegisterInstance {
            id: clean(&instance.id),
            host: clean(&instance.host),
            pid: i64::from(instance.pid),
            start_ticks: instance.start_ticks.and_then(|ticks| i64::try_from(ticks).ok()),
            now: now_ms(),
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
        let rows: Vec<AttemptRow> = sqlx::query_as(UNCONFIRMED)
            .bind(now.saturating_sub(policy.unconfirmed_after_ms))
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
        let row: Option<ApprovalRow> = sqlx::query_as(GET_APPROVAL)
            .bind(clean(tenant))
            .bind(clean(id))
            .fetch_optional(&self.reads)
            .await?;
        row.map(PendingApproval::try_from).transpose()
    }

    async fn list_pending_approvals(
        &self,
        tenant: &str,
        session_id: Option<&str>,
    ) -> Result<Vec<PendingApproval>, JournalError> {
        let rows: Vec<ApprovalRow> = sqlx::query_as(PENDING_APPROVALS)
            .bind(clean(tenant))
            .bind(session_id.map(clean))
            .fetch_all(&self.reads)
            .await?;
        rows.into_iter().map(PendingApproval::try_from).collect()
    }

    async fn remember(&self, decision: &RememberedDecision) -> Result<(), JournalError> {
        self.write_done(Op::Remember(RememberValues::new(decision))).await
    }

    async fn remembered(
        &self,
        tenant: &str,
        project: Option<&str>,
    ) -> Result<Vec<RememberedDecision>, JournalError> {
        let rows: Vec<RememberedRow> = sqlx::query_as(REMEMBERED)
            .bind(clean(tenant))
            .bind(project.map(clean))
            .fetch_all(&self.reads)
            .await?;
        Ok(rows.into_iter().map(RememberedDecision::from).collect())
    }

    async fn revoke(&self, tenant: &str, id: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::Revoke { tenant: clean(tenant), id: clean(id) }).await
    }

    async fn put_session(&self, session: &SessionRecord) -> Result<(), JournalError> {
        self.write_done(Op::PutSession(SessionValues::new(session))).await
    }

    async fn get_session(&self, tenant: &str, id: &str) -> Result<Option<SessionRecord>, JournalError> {
        let row: Option<SessionRow> = sqlx::query_as(GET_SESSION)
            .bind(clean(tenant))
            .bind(clean(id))
            .fetch_optional(&self.reads)
            .await?;
        row.map(SessionRecord::try_from).transpose()
    }

    async fn end_session(&self, tenant: &str, id: &str) -> Result<bool, JournalError> {
        self.write_moved(Op::EndSession { tenant: clean(tenant), id: clean(id), now: now_ms() }).await
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
    async fn batch(conn: &mut SqliteConnection, ops: Vec<Op>) -> Vec<Result<Option<bool>, String>> {
        let mut answers = Vec::new();
        let mut pending = Vec::new();
        for op in ops {
            let (reply, answer) = oneshot::channel();
            pending.push(Pending { op, reply });
            answers.push(answer);
        }
        run_batch(conn, &mut pending).await;
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
        conn: &mut SqliteConnection,
        tenant: &str,
        key: &str,
    ) -> Option<(String, Option<String>)> {
        sqlx::query_as("SELECT status, result FROM tool_call_attempts WHERE tenant = ?1 AND key = ?2")
            .bind(tenant)
            .bind(key)
            .fetch_optional(&mut *conn)
            .await
            .unwrap()
    }

    #[test]
    fn the_restart_gives_the_busy_timeout_back() {
        assert_eq!(BUSY_TIMEOUT_PRAGMA, format!("PRAGMA busy_timeout = {}", BUSY_TIMEOUT.as_millis()));
    }

    /// A compressed result's preview, made in Rust, is what SQLite writes for the same result
    /// stored as text (`EXPIRE_RESULTS`), whatever its content is.
    #[tokio::test]
    async fn expired_previews_match_what_sqlite_writes() {
        let (_dir, mut conn) = connection().await;
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
            let by_sqlite: String = sqlx::query_scalar(
                "SELECT json_object('content', substr(json_extract(?1, '$.content'), 1, ?2), 'expired', json('true'))",
            )
            .bind(&text)
            .bind(40)
            .fetch_one(&mut conn)
            .await
            .unwrap();
            let by_sqlite: Value = serde_json::from_str(&by_sqlite).unwrap();
            let by_rust: Value = serde_json::from_str(&expired_preview(Some(&text), 40)).unwrap();
            assert_eq!(by_rust, by_sqlite, "{result}");
        }
        let none: Value = serde_json::from_str(&expired_preview(None, 40)).unwrap();
        assert_eq!(none, json!({"content": null, "expired": true}));
    }

    async fn connection() -> (tempfile::TempDir, SqliteConnection) {
        let dir = tempfile::tempdir().unwrap();
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("j.db").display());
        let mut conn = SqliteConnectOptions::from_str(&url).unwrap().connect().await.unwrap();
        MIGRATOR.run(&mut conn).await.unwrap();
        (dir, conn)
    }

    #[tokio::test]
    async fn a_merged_statement_reports_exactly_what_moved() {
        let (_dir, mut conn) = connection().await;
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
        assert!(batch(&mut conn, setup).await.iter().all(|r| r == &Ok(Some(true))));
        assert_eq!(
            batch(&mut conn, vec![settle("t", "d", Failed), settle("t", "h", Failed)]).await,
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
            &ops.iter().map(|op| Pending { op: op.clone(), reply: oneshot::channel().0 }).collect::<Vec<_>>(),
            true,
        );
        assert!(
            matches!(steps.as_slice(), [Step::Merged(group)] if group.len() == 10),
            "one merged statement: {steps:?}"
        );
        let moved = batch(&mut conn, ops).await;
        let expected = [true, true, true, false, false, true, true, false, false, false];
        assert_eq!(moved, expected.map(|m| Ok(Some(m))));
        assert_eq!(status(&mut conn, "t", "c").await, Some(("executed".into(), Some("\"c\"".into()))));
        assert_eq!(
            status(&mut conn, "t", "d").await,
            Some(("failed".into(), Some("\"d\"".into()))),
            "a settled row keeps its settlement"
        );
        assert_eq!(status(&mut conn, "t", "e").await, None, "a settle creates nothing");
        assert_eq!(status(&mut conn, "t", "f").await, Some(("executed".into(), Some("\"f\"".into()))));
        assert_eq!(status(&mut conn, "t", "h").await, Some(("failed".into(), Some("\"h\"".into()))));
        assert_eq!(
            status(&mut conn, "other", "k").await,
            Some(("proposed".into(), None)),
            "another tenant's row is untouched"
        );
        assert_eq!(status(&mut conn, "t", "k").await, None);
        let (arguments, call_id): (String, String) = sqlx::query_as(
            "SELECT arguments, call_id FROM tool_call_attempts WHERE tenant = 't' AND key = 'g'",
        )
        .fetch_one(&mut conn)
        .await
        .unwrap();
        assert_eq!(
            (arguments.as_str(), call_id.as_str()),
            ("\"g-proposed\"", "g"),
            "an upsert keeps what was proposed"
        );
        let arguments: String =
            sqlx::query_scalar("SELECT arguments FROM tool_call_attempts WHERE tenant = 't' AND key = 'i'")
                .fetch_one(&mut conn)
                .await
                .unwrap();
        assert_eq!(arguments, "\"first\"");
    }

    #[tokio::test]
    async fn operations_on_one_row_run_in_order_within_a_batch() {
        let (_dir, mut conn) = connection().await;
        let ops = vec![
            Op::Propose(attempt("t", "x", json!(1))),
            settle("t", "x", AttemptStatus::Executed),
            settle("t", "x", AttemptStatus::Failed),
            Op::Propose(attempt("t", "y", json!("first"))),
            Op::Propose(attempt("t", "y", json!("second"))),
            Op::Confirm { tenant: "t".into(), key: "x".into(), now: 1 },
        ];
        assert_eq!(
            batch(&mut conn, ops).await,
            [
                Ok(Some(true)),
                Ok(Some(true)),
                Ok(Some(false)),
                Ok(Some(true)),
                Ok(Some(false)),
                Ok(Some(true))
            ]
        );
        assert_eq!(status(&mut conn, "t", "x").await, Some(("confirmed".into(), Some("\"x\"".into()))));
    }

    #[tokio::test]
    async fn a_failing_operation_fails_alone_and_the_rest_commits() {
        let (_dir, mut conn) = connection().await;
        let ops = vec![
            Op::Propose(attempt("t", "ok-1", json!(1))),
            Op::Propose(attempt("t", "", json!(1))),
            Op::Propose(attempt("t", "ok-2", json!(1))),
            Op::Heartbeat { id: "nobody".into(), now: 1 },
            settle("t", "ok-1", AttemptStatus::Executed),
        ];
        let answers = batch(&mut conn, ops).await;
        assert_eq!(answers[0], Ok(Some(true)));
        assert!(answers[1].as_ref().is_err_and(|e| e.contains("CHECK")), "{:?}", answers[1]);
        assert_eq!(answers[2], Ok(Some(true)));
        assert_eq!(answers[3], Ok(None));
        assert_eq!(answers[4], Ok(Some(true)));
        assert_eq!(status(&mut conn, "t", "ok-1").await.unwrap().0, "executed");
        assert_eq!(status(&mut conn, "t", "ok-2").await.unwrap().0, "proposed");
        // Nothing is left open.
        assert_eq!(
            batch(&mut conn, vec![Op::Propose(attempt("t", "after", json!(1)))]).await,
            [Ok(Some(true))]
        );
    }

    #[tokio::test]
    async fn an_abandon_is_a_barrier() {
        let (_dir, mut conn) = connection().await;
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
            pending.push(Pending { op, reply });
            answers.push(answer);
        }
        let steps = plan(&pending, true);
        assert_eq!(steps.len(), 3, "{steps:?}");
        run_batch(&mut conn, &mut pending).await;
        assert!(matches!(answers.remove(0).await.unwrap(), Ok(Outcome::Moved(true))));
        match answers.remove(0).await.unwrap() {
            Ok(Outcome::Abandoned(rows)) => assert_eq!(rows, [("t".to_owned(), "dead".to_owned())]),
            other => panic!("{other:?}"),
        }
        assert!(
            matches!(answers.remove(0).await.unwrap(), Ok(Outcome::Moved(false))),
            "the abandon ran first"
        );
        assert_eq!(status(&mut conn, "t", "dead").await.unwrap().0, "abandoned");
    }
}
