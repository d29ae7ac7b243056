//! The outbox: journal writes that must land, kept until they do.
//!
//! A call that ran has a result the journal must hold; an approval that was decided has a
//! decision it must hold. When the database does not take such a write (Postgres restarting,
//! a full disk under SQLite, a network that stalls past the deadline), the write goes here
//! instead of being lost: appended to a file of this process's (`INSTANCE.outbox` in a folder of
//! the host's state) and retried, oldest first, until the database takes it. A process that dies
//! with writes still waiting leaves its file behind; the next process on the host to open the
//! folder adopts it (the file is held under `flock` while its owner lives, so only a dead
//! owner's file can be taken) and lands its writes before the reconciler looks at any row.
//!
//! Every write here is one of the journal's guarded transitions, so landing one twice changes
//! nothing: a file is replayed whole after a crash, including the writes that had landed.
//!
//! The file's space is reserved when it is made (`fallocate`, [`DEFAULT_RESERVE`] by default), so
//! the writes it exists for can be kept when the disk they would go to is full. Past the reserve
//! the file grows where the disk has room (to 256 MiB); a write the file cannot take whole is kept
//! with its result cut to [`CUT_RESULT_BYTES`], and one it cannot take at all is kept in memory,
//! retried all the same, and said in the log.
//!
//! Record format after an 8-byte magic: `[len: u32 LE][crc32: u32 LE][len bytes of JSON]`; a
//! length of zero (the reserve is zeros) ends the file, and a record whose checksum fails ends it
//! too (a write torn by a crash).

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{Read as _, Seek as _, SeekFrom};
use std::os::unix::fs::FileExt as _;
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{Journal, JournalError, NewAttempt, Settlement};

/// The space a new outbox file reserves: 8 MiB.
pub const DEFAULT_RESERVE: u64 = 8 << 20;

/// The largest an outbox file grows to past its reserve (where the disk has room).
const MAX_SIZE: u64 = 256 << 20;

/// What a result is cut to when its whole cannot be kept (the disk is full past the reserve, or
/// the file is at its largest).
pub const CUT_RESULT_BYTES: usize = 16 * 1024;

const MAGIC: &[u8; 8] = b"THOUTBX1";
const HEADER: u64 = MAGIC.len() as u64;
const SUFFIX: &str = "outbox";

/// One write that must reach the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum OutboxOp {
    /// [`Journal::settle`].
    Settle {
        /// The tenant.
        tenant: String,
        /// The row.
        key: String,
        /// How it ended.
        settlement: Settlement,
    },
    /// [`Journal::upsert_settled`].
    Upsert {
        /// The call.
        attempt: Box<NewAttempt>,
        /// How it ended.
        settlement: Settlement,
    },
    /// [`Journal::decide_approval`].
    Decide {
        /// The tenant.
        tenant: String,
        /// The approval.
        id: String,
        /// The decision's status.
        status: String,
        /// Its detail.
        decision: Value,
        /// Who decided.
        decided_by: Option<String>,
    },
    /// [`Journal::record_decision`].
    RecordDecision {
        /// The tenant.
        tenant: String,
        /// The row.
        key: String,
        /// How it was decided.
        decision: String,
        /// Who decided.
        decided_by: Option<String>,
    },
}

impl OutboxOp {
    /// Applies it; `Ok(_)` whether or not the guard let it move a row (a write that lands twice,
    /// or after the row moved on, has nothing left to do).
    ///
    /// # Errors
    ///
    /// The journal's error: the write did not land.
    pub async fn apply(&self, journal: &dyn Journal) -> Result<bool, JournalError> {
        match self {
            Self::Settle { tenant, key, settlement } => journal.settle(tenant, key, settlement).await,
            Self::Upsert { attempt, settlement } => journal.upsert_settled(attempt, settlement).await,
            Self::Decide { tenant, id, status, decision, decided_by } => {
                journal.decide_approval(tenant, id, status, decision, decided_by.as_deref()).await
            }
            Self::RecordDecision { tenant, key, decision, decided_by } => {
                journal.record_decision(tenant, key, decision, decided_by.as_deref()).await
            }
        }
    }

    /// The settlement it carries for `(tenant, key)`, if it settles that row.
    fn settles(&self, tenant: &str, key: &str) -> Option<&Settlement> {
        match self {
            Self::Settle { tenant: t, key: k, settlement } if t == tenant && k == key => Some(settlement),
            Self::Upsert { attempt, settlement } if attempt.tenant == tenant && attempt.key() == key => {
                Some(settlement)
            }
            _ => None,
        }
    }

    /// Cuts a settlement's result content to [`CUT_RESULT_BYTES`], saying so; false when there
    /// was nothing to cut.
    fn cut(&mut self) -> bool {
        let (Self::Settle { settlement, .. } | Self::Upsert { settlement, .. }) = self else { return false };
        let Some(Value::Object(result)) = &mut settlement.result else { return false };
        let mut cut = false;
        if let Some(Value::String(content)) = result.get_mut("content")
            && content.len() > CUT_RESULT_BYTES
        {
            let mut end = CUT_RESULT_BYTES;
            while !content.is_char_boundary(end) {
                end -= 1;
            }
            content.truncate(end);
            content.push_str(
                "\n[cut: the journal could not take this result when the call ended; the rest was not kept]",
            );
            cut = true;
        }
        if let Some(state) = result.get_mut("state")
            && state.to_string().len() > CUT_RESULT_BYTES
        {
            *state = Value::Null;
            cut = true;
        }
        cut
    }
}

/// Why an outbox could not be opened.
#[derive(Debug, thiserror::Error)]
#[error("outbox {path}: {source}")]
pub struct OutboxError {
    path: PathBuf,
    source: std::io::Error,
}

/// A file of this process's, held under `flock`.
#[derive(Debug)]
struct OutboxFile {
    path: PathBuf,
    file: File,
    /// Where the next record goes.
    end: u64,
    /// The largest it may grow to (past the reserve, only where the disk has room).
    max_size: u64,
}

#[derive(Debug, Default)]
struct State {
    waiting: VecDeque<OutboxOp>,
    file: Option<OutboxFile>,
    /// Writes kept only in memory (the file could not take them).
    volatile: u64,
}

/// Journal writes waiting to land; see the module documentation.
#[derive(Debug, Default)]
pub struct Outbox {
    state: Mutex<State>,
    wake: tokio::sync::Notify,
    /// Writes adopted from dead processes' files at open.
    adopted: usize,
}

impl Outbox {
    /// An outbox kept in memory only (a process with no state folder: its writes are retried,
    /// but a crash loses them).
    pub fn memory() -> Self {
        Self::default()
    }

    /// Opens this process's outbox in `folder` (made if missing, 0700), reserving `reserve`
    /// bytes, and adopts the files of processes that are gone.
    ///
    /// # Errors
    ///
    /// The folder or the file cannot be made, or the file cannot be locked.
    pub fn open(folder: &Path, instance_id: &str, reserve: u64) -> Result<Self, OutboxError> {
        Self::open_sized(folder, instance_id, reserve, MAX_SIZE)
    }

    fn open_sized(
        folder: &Path,
        instance_id: &str,
        reserve: u64,
        max_size: u64,
    ) -> Result<Self, OutboxError> {
        let error = |path: &Path| {
            let path = path.to_path_buf();
            move |source| OutboxError { path, source }
        };
        std::fs::create_dir_all(folder).map_err(error(folder))?;
        let _ = std::fs::set_permissions(folder, std::os::unix::fs::PermissionsExt::from_mode(0o700));
        let name: String = instance_id
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || "-_.".contains(c) { c } else { '_' })
            .collect();
        let path = folder.join(format!("{name}.{SUFFIX}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)
            .map_err(error(&path))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive)
            .map_err(|e| error(&path)(e.into()))?;
        let reserve = reserve.max(HEADER + 4096);
        if let Err(errno) = rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, reserve) {
            // Not every file system reserves space (the file then only has its size).
            tracing::debug!(error = %errno, path = %path.display(), "the outbox's space could not be reserved");
            file.set_len(reserve).map_err(error(&path))?;
        }
        file.write_all_at(MAGIC, 0).map_err(error(&path))?;
        file.write_all_at(&[0; 8], HEADER).map_err(error(&path))?;
        file.sync_all().map_err(error(&path))?;
        let mut state = State {
            file: Some(OutboxFile { path, file, end: HEADER, max_size: max_size.max(reserve) }),
            ..State::default()
        };
        let mut adopted = 0;
        for orphan in orphans(folder, &state.file.as_ref().map(|f| f.path.clone()).unwrap_or_default()) {
            for op in orphan.ops {
                state.append(op);
                adopted += 1;
            }
            // Its writes are ours now (in our file): the dead process's file goes.
            let _ = std::fs::remove_file(&orphan.path);
        }
        Ok(Self { state: Mutex::new(state), wake: tokio::sync::Notify::new(), adopted })
    }

    /// How many writes were adopted from processes that are gone.
    pub fn adopted(&self) -> usize {
        self.adopted
    }

    /// Keeps a write until it lands (in the file first, when it can) and wakes the drain.
    pub fn push(&self, op: OutboxOp) {
        self.lock().append(op);
        self.wake.notify_one();
    }

    /// Writes waiting to land.
    pub fn len(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Whether nothing waits.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes kept in memory only since this process started (the file could not take them).
    pub fn volatile(&self) -> u64 {
        self.lock().volatile
    }

    /// The settlement waiting to land for `(tenant, key)`, if any: the call has ended, and this is
    /// how (a retry of its message gets it rather than "still running").
    pub fn settlement(&self, tenant: &str, key: &str) -> Option<Settlement> {
        self.lock().waiting.iter().rev().find_map(|op| op.settles(tenant, key)).cloned()
    }

    /// Lands every waiting write it can now, oldest first, each within `deadline`; stops at the
    /// first that does not land. Returns how many landed.
    pub async fn flush(&self, journal: &dyn Journal, deadline: Duration) -> usize {
        let mut landed = 0;
        loop {
            let Some(op) = self.lock().waiting.front().cloned() else { return landed };
            match tokio::time::timeout(deadline, op.apply(journal)).await {
                Ok(Ok(_)) => {
                    let mut state = self.lock();
                    // Still the front: only this task pops.
                    if state.waiting.front() == Some(&op) {
                        state.waiting.pop_front();
                    }
                    if state.waiting.is_empty() {
                        state.reset();
                    }
                    landed += 1;
                }
                Ok(Err(error)) => {
                    tracing::debug!(%error, "an outbox write did not land yet");
                    return landed;
                }
                Err(_) => return landed,
            }
        }
    }

    /// Retries the waiting writes until each lands: at once when one is pushed, else with a backoff
    /// from 200 ms to 5 s while the journal refuses them.
    pub fn spawn_drain(
        self: &Arc<Self>,
        journal: Arc<dyn Journal>,
        deadline: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let outbox = self.clone();
        tokio::spawn(async move {
            let mut backoff = Duration::from_millis(200);
            loop {
                if outbox.is_empty() {
                    outbox.wake.notified().await;
                }
                let before = outbox.len();
                let landed = outbox.flush(journal.as_ref(), deadline).await;
                if landed > 0 {
                    tracing::info!(landed, waiting = outbox.len(), "journal writes from the outbox landed");
                }
                if landed < before && !outbox.is_empty() {
                    tokio::select! {
                        () = tokio::time::sleep(backoff) => {}
                        () = outbox.wake.notified() => {}
                    }
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                } else {
                    backoff = Duration::from_millis(200);
                }
            }
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl State {
    fn append(&mut self, mut op: OutboxOp) {
        if let Some(file) = &mut self.file {
            let mut written = file.write(&op);
            if written.is_err() && op.cut() {
                written = file.write(&op);
            }
            if let Err(error) = written {
                self.volatile += 1;
                tracing::error!(%error, path = %file.path.display(), "a journal write could not be kept in the outbox's file: it is kept in memory only until it lands");
            }
        }
        self.waiting.push_back(op);
    }

    /// Everything landed: the file starts over.
    fn reset(&mut self) {
        if let Some(file) = &mut self.file
            && file.end > HEADER
        {
            if let Err(error) = file.file.write_all_at(&[0; 8], HEADER).and_then(|()| file.file.sync_data()) {
                tracing::warn!(%error, "the outbox's file could not be reset");
                return;
            }
            file.end = HEADER;
        }
    }
}

impl OutboxFile {
    /// Appends one record (and a terminator after it), synced before it returns.
    fn write(&mut self, op: &OutboxOp) -> std::io::Result<()> {
        let payload = serde_json::to_vec(op).map_err(std::io::Error::other)?;
        let length = u32::try_from(payload.len()).map_err(std::io::Error::other)?;
        let mut record = Vec::with_capacity(payload.len() + 16);
        record.extend_from_slice(&length.to_le_bytes());
        record.extend_from_slice(&crc32fast::hash(&payload).to_le_bytes());
        record.extend_from_slice(&payload);
        // The terminator: past the reserve the file holds no zeros of its own.
        record.extend_from_slice(&[0; 8]);
        if self.end + record.len() as u64 > self.max_size {
            return Err(std::io::Error::other("the outbox's file is at its largest"));
        }
        self.file.write_all_at(&record, self.end)?;
        self.file.sync_data()?;
        self.end += record.len() as u64 - 8;
        Ok(())
    }
}

/// A dead process's outbox file and its writes.
struct Orphan {
    path: PathBuf,
    ops: Vec<OutboxOp>,
}

/// The outbox files in `folder` (other than `own`) whose process is gone: their lock can be taken.
fn orphans(folder: &Path, own: &Path) -> Vec<Orphan> {
    let Ok(entries) = std::fs::read_dir(folder) else { return Vec::new() };
    let mut found: Vec<(std::time::SystemTime, Orphan)> = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path == own || path.extension().is_none_or(|e| e != SUFFIX) {
            continue;
        }
        let Ok(mut file) = OpenOptions::new().read(true).write(true).open(&path) else { continue };
        // Held by a live process: its writes are its own.
        if rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive).is_err() {
            continue;
        }
        let modified = entry.metadata().and_then(|m| m.modified()).unwrap_or(std::time::UNIX_EPOCH);
        found.push((modified, Orphan { path, ops: read_ops(&mut file) }));
    }
    // The oldest file's writes first.
    found.sort_by_key(|(modified, _)| *modified);
    found.into_iter().map(|(_, orphan)| orphan).collect()
}

/// The records of an outbox file, up to its end (or the first torn record).
fn read_ops(file: &mut File) -> Vec<OutboxOp> {
    let mut ops = Vec::new();
    let mut magic = [0u8; 8];
    if file.seek(SeekFrom::Start(0)).is_err() || file.read_exact(&mut magic).is_err() || &magic != MAGIC {
        return ops;
    }
    loop {
        let mut head = [0u8; 8];
        if file.read_exact(&mut head).is_err() {
            break;
        }
        let length = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_le_bytes([head[4], head[5], head[6], head[7]]);
        if length == 0 {
            break;
        }
        let mut payload = vec![0u8; length];
        if file.read_exact(&mut payload).is_err() || crc32fast::hash(&payload) != crc {
            break;
        }
        match serde_json::from_slice::<OutboxOp>(&payload) {
            Ok(op) => ops.push(op),
            Err(error) => tracing::warn!(%error, "an outbox record does not decode; skipped"),
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AttemptStatus;

    fn settle(key: &str, content: &str) -> OutboxOp {
        OutboxOp::Settle {
            tenant: "t".into(),
            key: key.into(),
            settlement: Settlement {
                status: AttemptStatus::Executed,
                result: Some(serde_json::json!({"content": content, "state": null})),
                error_kind: None,
                error: None,
                decision: Some("policy".into()),
                decided_by: Some("policy".into()),
                duration_ms: Some(1),
                exit_status: None,
            },
        }
    }

    #[test]
    fn a_dead_processs_writes_are_adopted_and_a_live_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let first = Outbox::open(dir.path(), "first", 64 * 1024).unwrap();
        first.push(settle("m:a", "one"));
        first.push(settle("m:b", "two"));
        // Alive (its lock held): a second process leaves its file alone.
        let second = Outbox::open(dir.path(), "second", 64 * 1024).unwrap();
        assert_eq!(second.adopted(), 0);
        assert_eq!(second.len(), 0);
        drop(first);
        let third = Outbox::open(dir.path(), "third", 64 * 1024).unwrap();
        assert_eq!(third.adopted(), 2);
        assert_eq!(third.settlement("t", "m:b").unwrap().decision.as_deref(), Some("policy"));
        assert!(!dir.path().join("first.outbox").exists());
        // Now in the adopter's own file: a crash of the adopter hands them on again.
        drop(third);
        drop(second);
        let fourth = Outbox::open(dir.path(), "fourth", 64 * 1024).unwrap();
        assert_eq!(fourth.len(), 2);
    }

    #[test]
    fn a_torn_record_ends_the_file_and_a_large_result_is_cut_to_fit() {
        let dir = tempfile::tempdir().unwrap();
        let outbox = Outbox::open_sized(dir.path(), "one", 8 * 1024, 32 * 1024).unwrap();
        outbox.push(settle("m:a", "fits"));
        // Past what the file may grow to: cut, still kept.
        let huge = "x".repeat(100 * 1024);
        outbox.push(settle("m:big", &huge));
        let kept = outbox.settlement("t", "m:big").unwrap();
        let content = kept.result.unwrap()["content"].as_str().unwrap().to_owned();
        assert!(
            content.len() < CUT_RESULT_BYTES + 200 && content.ends_with("was not kept]"),
            "{}",
            content.len()
        );
        let path = dir.path().join("one.outbox");
        drop(outbox);
        // Tear the second record: the first is read, the rest ignored.
        let file = OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let first_len = {
            let mut head = [0u8; 4];
            file.read_exact_at(&mut head, HEADER).unwrap();
            u64::from(u32::from_le_bytes(head))
        };
        file.write_all_at(b"garbage!", HEADER + 8 + first_len + 8).unwrap();
        let adopter = Outbox::open(dir.path(), "two", 8 * 1024).unwrap();
        assert_eq!(adopter.adopted(), 1);
        assert!(adopter.settlement("t", "m:a").is_some());
    }
}
