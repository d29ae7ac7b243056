//! Checkpoints and rewind: what the files were before each call that changed them, and putting a
//! folder back to before a chosen call.
//!
//! - **Before a call that can change files** (the file tools' writes, edits and moves, and
//!   foreground commands), [`Checkpointer`] — a session's before and after hooks — keeps what the
//!   affected files are: for the file tools, the paths the call names; for a command, the whole
//!   working tree (`.gitignore`d files and `.git` left out), compared before and after as a shadow
//!   repository outside the workspace would. Contents go to the [`Store`] once, by SHA-256,
//!   compressed; a scan hashes only files whose size, time or inode changed since the folder's
//!   last scan. Files past the size cap are recorded as unrecoverable.
//! - **After the call**, what it changed (before and after) is one [`Entry`] in the session's log,
//!   linked to the call's journal row by session and call id.
//! - **Rewind** ([`plan`], [`apply`]): every file changed by the chosen call or a later one is put
//!   back to what it was before the first of them: created files removed, deleted ones restored,
//!   changed ones put back. A file that is no longer what the last call left (the person changed
//!   it since) is a conflict, not overwritten unless forced. The undone entries are marked, and
//!   [`journal_rewind`] marks their journal rows `compensated` and records the rewind itself.
#![deny(missing_docs)]

pub mod store;
mod tree;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use computer_runtime::beneath::Opener;
use serde::Serialize;
use serde_json::Value;
use tool_core::ToolOutput;
use tool_executor::{AfterHook, AfterPatch, BeforeHook, BeforeOutcome, HookCall};

pub use store::{Change, Collected, Entry, FileState, Store};
pub use tree::{MAX_TREE_FILES, Scan, Tree, scan};

/// The default largest file kept (10 MiB).
pub const DEFAULT_MAX_FILE_BYTES: u64 = 10 * 1024 * 1024;

/// The default most the kept contents may take (5 GiB, compressed).
pub const DEFAULT_BUDGET_BYTES: u64 = 5 * 1024 * 1024 * 1024;

/// What can go wrong.
#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    /// A file could not be opened beneath the session's folders.
    #[error("{0}")]
    Files(String),
    /// A file or the store could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// Content the log names is not in the store.
    #[error("the content {0} is not in the checkpoint store")]
    Missing(String),
    /// Content in the store does not match its hash.
    #[error("the content {0} in the checkpoint store is damaged")]
    Corrupt(String),
    /// The store holds as much as it may.
    #[error("the checkpoint store is full ({0} bytes); what this call changed is not kept")]
    Full(u64),
    /// The folder has more files than a scan takes.
    #[error("the folder has more than {0} files; commands' changes are not checkpointed")]
    TooManyFiles(usize),
    /// No such call among the session's checkpoints.
    #[error("{0}")]
    NotFound(String),
    /// Something that does not read.
    #[error("{0}")]
    Invalid(String),
}

impl CheckpointError {
    pub(crate) fn io(path: &Path, source: std::io::Error) -> Self {
        Self::Io { path: path.to_owned(), source }
    }
}

/// The paths a file tool's call names, as given (relative to the folder or absolute); `None` for
/// a call that changes no files the checkpoints follow, `Some(vec![])` with `tree` for a command.
fn followed(tool: &str, api: &str, arguments: &Value) -> Option<What> {
    if tool != "local-system" {
        return None;
    }
    let text = |key: &str| arguments.get(key).and_then(Value::as_str).map(str::to_owned);
    match api {
        "writeFile" | "editFile" => Some(What::Paths(text("path").into_iter().collect())),
        "moveFiles" => Some(What::Paths(
            arguments
                .get("items")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .flat_map(|item| {
                    ["oldPath", "newPath"]
                        .into_iter()
                        .filter_map(|key| item.get(key).and_then(Value::as_str).map(str::to_owned))
                })
                .collect(),
        )),
        // A background command changes files after its call ends: not followed.
        "runCommand" if arguments.get("background").and_then(Value::as_bool) != Some(true) => {
            Some(What::Tree)
        }
        _ => None,
    }
}

enum What {
    Paths(Vec<String>),
    Tree,
}

/// What is kept between a call's before and after.
enum Pending {
    Files(Vec<(String, Result<FileState, String>)>),
    Tree(Box<Scan>),
    /// What the call changes could not be kept, for this reason.
    Failed(String),
}

/// A session's checkpoints: its before hook keeps what the files were, its after hook records
/// what the call changed. Give the same `Arc` to both hook lists ([`Checkpointer::attach`]).
pub struct Checkpointer {
    store: Arc<Store>,
    opener: Opener,
    folder: PathBuf,
    session: String,
    /// What the files were before each call in flight, by journal key, and when it was kept.
    pending: Mutex<HashMap<String, (std::time::Instant, Pending)>>,
}

/// Longer than any call runs (800 s at most) after its before hooks: a call whose after hooks
/// never ran (a later hook stopped it) leaves nothing behind past this.
const PENDING_FOR: std::time::Duration = std::time::Duration::from_secs(30 * 60);

impl std::fmt::Debug for Checkpointer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpointer").field("folder", &self.folder).field("session", &self.session).finish()
    }
}

impl Checkpointer {
    /// Checkpoints of `session`'s calls in its working folder, files opened beneath its file
    /// boundary, added to its hooks. A session without a working folder has none.
    pub fn attach(store: Arc<Store>, session: &tool_executor::Session) -> Option<Arc<Self>> {
        let folder = session.config.working_directory.clone()?;
        let checkpointer = Arc::new(Self {
            store,
            opener: Opener::new(session.file_boundary()),
            folder,
            session: session.config.id.clone(),
            pending: Mutex::new(HashMap::new()),
        });
        session.add_before_hook(checkpointer.clone());
        session.add_after_hook(checkpointer.clone());
        Some(checkpointer)
    }

    fn record(&self, call: &HookCall<'_>, files: Vec<Change>, incomplete: Option<String>) {
        if files.is_empty() && incomplete.is_none() {
            return;
        }
        if let Some(why) = &incomplete {
            tracing::warn!(call = call.call_id, %why, "a call's changes could not all be checkpointed");
        }
        let summary = match call.api {
            "runCommand" => call.arguments.get("command").and_then(Value::as_str).unwrap_or("").to_owned(),
            _ => files.iter().map(|c| c.path.as_str()).collect::<Vec<_>>().join(", "),
        };
        let entry = Entry {
            call_id: call.call_id.to_owned(),
            key: call.key.to_owned(),
            tool: call.tool.to_owned(),
            api: call.api.to_owned(),
            summary: summary.chars().take(200).collect(),
            at_ms: now_ms(),
            files,
            incomplete,
            undone: false,
        };
        if let Err(error) = self.store.append(&self.folder, &self.session, &entry) {
            tracing::warn!(%error, "a checkpoint could not be recorded");
        }
    }
}

/// The path a call names, as recorded (relative to `folder` when inside it) and as opened.
fn resolve(folder: &Path, given: &str) -> (String, PathBuf) {
    let path = Path::new(given);
    let full = if path.is_absolute() { path.to_owned() } else { folder.join(path) };
    let mut clean = PathBuf::new();
    for component in full.components() {
        match component {
            std::path::Component::ParentDir => {
                clean.pop();
            }
            std::path::Component::CurDir => {}
            other => clean.push(other.as_os_str()),
        }
    }
    let shown = clean
        .strip_prefix(folder)
        .map_or_else(|_| clean.display().to_string(), |relative| relative.display().to_string());
    (shown, clean)
}

/// What the files `paths` name are now (each once), or why one could not be read.
fn capture_paths(
    store: &Store,
    opener: &Opener,
    folder: &Path,
    paths: &[String],
) -> Vec<(String, Result<FileState, String>)> {
    let mut seen: Vec<(String, Result<FileState, String>)> = Vec::new();
    for given in paths {
        let (shown, full) = resolve(folder, given);
        if seen.iter().any(|(s, _)| *s == shown) {
            continue;
        }
        let state = store.capture(opener, &full).map_err(|error| error.to_string());
        seen.push((shown, state));
    }
    seen
}

/// Runs file work off the async threads.
async fn blocking<T: Send + 'static>(work: impl FnOnce() -> T + Send + 'static) -> Option<T> {
    match tokio::task::spawn_blocking(work).await {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(%error, "a checkpoint task failed");
            None
        }
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

#[async_trait]
impl BeforeHook for Checkpointer {
    async fn before(&self, call: &HookCall<'_>) -> BeforeOutcome {
        let Some(what) = followed(call.tool, call.api, call.arguments) else {
            return BeforeOutcome::Continue;
        };
        let (store, opener, folder) = (self.store.clone(), self.opener.clone(), self.folder.clone());
        let pending = blocking(move || match what {
            What::Paths(paths) => Pending::Files(capture_paths(&store, &opener, &folder, &paths)),
            What::Tree => match tree::scan(&store, &opener, &folder) {
                Ok(scan) => Pending::Tree(Box::new(scan)),
                Err(error) => {
                    Pending::Failed(format!("the folder could not be scanned before the command: {error}"))
                }
            },
        })
        .await
        .unwrap_or_else(|| Pending::Failed("the checkpoint task failed".into()));
        let mut kept = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        kept.retain(|_, (at, _)| at.elapsed() < PENDING_FOR);
        kept.insert(call.key.to_owned(), (std::time::Instant::now(), pending));
        BeforeOutcome::Continue
    }
}

#[async_trait]
impl AfterHook for Checkpointer {
    async fn after(&self, call: &HookCall<'_>, _output: &ToolOutput) -> AfterPatch {
        let Some((_, pending)) = self.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(call.key)
        else {
            return AfterPatch::default();
        };
        let (store, opener, folder) = (self.store.clone(), self.opener.clone(), self.folder.clone());
        let (changes, incomplete) = blocking(move || match pending {
            Pending::Failed(why) => (Vec::new(), Some(why)),
            Pending::Files(before) => {
                let paths: Vec<String> = before.iter().map(|(shown, _)| shown.clone()).collect();
                let after: HashMap<String, Result<FileState, String>> =
                    capture_paths(&store, &opener, &folder, &paths).into_iter().collect();
                let mut changes = Vec::new();
                let mut incomplete = None;
                for (path, was) in before {
                    match (was.as_ref(), after.get(&path)) {
                        (Ok(was), Some(Ok(now))) if was == now => {}
                        (Ok(was), Some(Ok(now))) => {
                            changes.push(Change {
                                path: path.clone(),
                                before: was.clone(),
                                after: now.clone(),
                            });
                        }
                        (Err(why), _) | (_, Some(Err(why))) => {
                            incomplete = Some(format!("{path} could not be read: {why}"));
                        }
                        (_, None) => incomplete = Some(format!("{path} was not read after the call")),
                    }
                }
                (changes, incomplete)
            }
            Pending::Tree(before) => match tree::scan(&store, &opener, &folder) {
                Ok(after) => (tree::diff(&before, &after), None),
                Err(error) => {
                    (Vec::new(), Some(format!("the folder could not be scanned after the command: {error}")))
                }
            },
        })
        .await
        .unwrap_or_else(|| (Vec::new(), Some("the checkpoint task failed".into())));
        self.record(call, changes, incomplete);
        AfterPatch::default()
    }
}

/// One file a rewind puts back.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Restore {
    /// The path, as recorded.
    pub path: String,
    /// What it becomes.
    pub to: FileState,
    /// What the last call left it as.
    pub expected: FileState,
    /// It is no longer what the last call left: the person (or something else) changed it since.
    pub conflict: bool,
}

/// What a rewind to before a call would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// The session.
    pub session: String,
    /// The call it rewinds to (before it).
    pub to_call: String,
    /// The calls it undoes (their ids), oldest first.
    pub calls: Vec<String>,
    /// The same calls by [`Entry::id`] (their journal keys).
    pub keys: Vec<String>,
    /// The files it puts back.
    pub restores: Vec<Restore>,
}

impl Plan {
    /// Files changed since the last call (not overwritten unless forced).
    pub fn conflicts(&self) -> impl Iterator<Item = &Restore> {
        self.restores.iter().filter(|r| r.conflict)
    }

    /// Files that cannot be put back (past the size cap when kept).
    pub fn unrecoverable(&self) -> impl Iterator<Item = &Restore> {
        self.restores.iter().filter(|r| !r.to.recoverable())
    }
}

/// What a rewind did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Applied {
    /// Files written back.
    pub restored: Vec<String>,
    /// Files removed (the calls created them).
    pub removed: Vec<String>,
    /// Files left as they are, and why.
    pub skipped: Vec<(String, String)>,
    /// Files that could not be put back, and why (the calls are then not marked undone).
    pub failed: Vec<(String, String)>,
}

/// The session's calls that changed files and are not undone, oldest first.
///
/// # Errors
///
/// The log cannot be read.
pub fn calls(store: &Store, folder: &Path, session: &str) -> Result<Vec<Entry>, CheckpointError> {
    Ok(store.entries(folder, session)?.into_iter().filter(|e| !e.undone).collect())
}

fn full_path(folder: &Path, recorded: &str) -> PathBuf {
    let path = Path::new(recorded);
    if path.is_absolute() { path.to_owned() } else { folder.join(path) }
}

/// What rewinding `folder` to before `to_call` of `session` would do (`None`: before the
/// session's last call that changed files).
///
/// # Errors
///
/// The call changed no files, is undone already, or the log cannot be read.
pub fn plan(
    store: &Store,
    opener: &Opener,
    folder: &Path,
    session: &str,
    to_call: Option<&str>,
) -> Result<Plan, CheckpointError> {
    let entries = calls(store, folder, session)?;
    let start = match to_call {
        // A call id is only unique within its message: the latest call of that id (or the one
        // whose journal key it is).
        Some(id) => entries.iter().rposition(|e| e.call_id == id || e.key == id).ok_or_else(|| {
            CheckpointError::NotFound(format!(
                "the call `{id}` changed no files in this session (or was undone already); `toolhost rewind` lists those that did"
            ))
        })?,
        None => entries
            .len()
            .checked_sub(1)
            .ok_or_else(|| CheckpointError::NotFound("this session changed no files".into()))?,
    };
    let undone = &entries[start..];
    if let Some(entry) = undone.iter().find(|e| e.incomplete.is_some()) {
        return Err(CheckpointError::NotFound(format!(
            "the files cannot be put back to before `{}`: what the call `{}` changed could not all be kept ({})",
            undone[0].call_id,
            entry.call_id,
            entry.incomplete.as_deref().unwrap_or_default()
        )));
    }
    let mut targets: BTreeMap<String, (FileState, FileState)> = BTreeMap::new();
    for entry in undone {
        for change in &entry.files {
            targets
                .entry(change.path.clone())
                .and_modify(|(_, last)| *last = change.after.clone())
                .or_insert_with(|| (change.before.clone(), change.after.clone()));
        }
    }
    let mut restores = Vec::new();
    for (path, (to, expected)) in targets {
        let now = current(store, opener, &full_path(folder, &path), &expected)?;
        restores.push(Restore { conflict: now != expected, path, to, expected });
    }
    Ok(Plan {
        session: session.to_owned(),
        to_call: undone[0].call_id.clone(),
        calls: undone.iter().map(|e| e.call_id.clone()).collect(),
        keys: undone.iter().map(|e| e.id().to_owned()).collect(),
        restores,
    })
}

/// What `path` is now, in the terms `expected` was recorded in (a file past the cap is compared
/// by size and time; content is hashed without being kept).
fn current(
    store: &Store,
    opener: &Opener,
    path: &Path,
    expected: &FileState,
) -> Result<FileState, CheckpointError> {
    use sha2::Digest as _;
    let cap = match expected {
        FileState::TooLarge { .. } => Some(0),
        _ => Some(store.max_file_bytes),
    };
    Ok(match store.read(opener, path, cap)? {
        store::Read::Absent => FileState::Absent,
        store::Read::Large { size, mtime_ns } => FileState::TooLarge { size, mtime_ns },
        store::Read::Bytes { bytes, mode } => FileState::Stored {
            hash: sha2::Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect(),
            mode,
            size: bytes.len() as u64,
        },
    })
}

/// Carries out `plan`: puts each file back, removes the files the calls created, and marks the
/// calls undone in the session's log. Conflicting files are left as they are unless `force`;
/// unrecoverable ones always.
///
/// # Errors
///
/// The store cannot be read or the log written; files already put back stay put back, and what
/// could not be is in the error.
pub fn apply(
    store: &Store,
    opener: &Opener,
    folder: &Path,
    plan: &Plan,
    force: bool,
) -> Result<Applied, CheckpointError> {
    let mut applied = Applied::default();
    for restore in &plan.restores {
        let path = full_path(folder, &restore.path);
        // Looked at again now: the person may have changed it since the plan was shown.
        let conflict = restore.conflict
            || current(store, opener, &path, &restore.expected).map_or(true, |now| now != restore.expected);
        if conflict && !force {
            applied
                .skipped
                .push((restore.path.clone(), "changed since the last call; not overwritten".into()));
            continue;
        }
        let done = match &restore.to {
            FileState::Absent => remove(opener, &path).map(|removed| {
                if removed {
                    applied.removed.push(restore.path.clone());
                }
            }),
            FileState::Stored { hash, mode, .. } => store
                .get(hash)
                .and_then(|bytes| write(opener, &path, &bytes, *mode))
                .map(|()| applied.restored.push(restore.path.clone())),
            FileState::TooLarge { size, .. } => {
                applied
                    .skipped
                    .push((restore.path.clone(), format!("{size} bytes, larger than the checkpoints keep")));
                Ok(())
            }
        };
        if let Err(error) = done {
            applied.failed.push((restore.path.clone(), error.to_string()));
        }
    }
    // Undone only when every file that could be put back was: otherwise the calls stay listed,
    // to try again.
    if applied.failed.is_empty() {
        store.mark_undone(folder, &plan.session, &plan.keys)?;
    }
    Ok(applied)
}

/// Removes the file at `path`, beneath `opener`'s roots; whether there was one.
fn remove(opener: &Opener, path: &Path) -> Result<bool, CheckpointError> {
    let parent = match opener.parent(path, false) {
        Ok(parent) => parent,
        Err(computer_runtime::ComputerError::NotFound { .. }) => return Ok(false),
        Err(error) => return Err(CheckpointError::Files(error.to_string())),
    };
    match rustix::fs::unlinkat(&parent.fd, parent.name.as_os_str(), rustix::fs::AtFlags::empty()) {
        Ok(()) => Ok(true),
        Err(rustix::io::Errno::NOENT) => Ok(false),
        Err(error) => Err(CheckpointError::io(path, error.into())),
    }
}

/// Writes `bytes` to `path` beneath `opener`'s roots (missing folders made), replacing a link
/// there rather than following it, through a temporary file renamed into place.
fn write(opener: &Opener, path: &Path, bytes: &[u8], mode: u32) -> Result<(), CheckpointError> {
    use rustix::fs::{AtFlags, Mode, OFlags};
    use std::io::Write as _;
    let parent = opener.parent(path, true).map_err(|e| CheckpointError::Files(e.to_string()))?;
    let temp = format!(".{}.rewind-{}", parent.name.to_string_lossy(), std::process::id());
    let fd = rustix::fs::openat(
        &parent.fd,
        temp.as_str(),
        OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::from_raw_mode(mode & 0o777),
    )
    .map_err(|e| CheckpointError::io(path, e.into()))?;
    let mut file = std::fs::File::from(fd);
    let written = file
        .write_all(bytes)
        .and_then(|()| rustix::fs::fchmod(&file, Mode::from_raw_mode(mode)).map_err(Into::into))
        .and_then(|()| file.sync_data());
    let renamed = written.and_then(|()| {
        rustix::fs::renameat(&parent.fd, temp.as_str(), &parent.fd, parent.name.as_os_str())
            .map_err(Into::into)
    });
    if let Err(error) = renamed {
        let _ = rustix::fs::unlinkat(&parent.fd, temp.as_str(), AtFlags::empty());
        return Err(CheckpointError::io(path, error));
    }
    Ok(())
}

/// A unified diff of one change (text files; a binary or unrecoverable side is said in words).
pub fn diff(store: &Store, change: &Change) -> String {
    let text = |state: &FileState| -> Result<String, String> {
        match state {
            FileState::Absent => Ok(String::new()),
            FileState::TooLarge { size, .. } => Err(format!("{size} bytes, not kept")),
            FileState::Stored { hash, .. } => match store.get(hash) {
                Ok(bytes) => String::from_utf8(bytes).map_err(|_| "binary".to_owned()),
                Err(error) => Err(error.to_string()),
            },
        }
    };
    match (text(&change.before), text(&change.after)) {
        (Ok(before), Ok(after)) => similar::TextDiff::from_lines(&before, &after)
            .unified_diff()
            .context_radius(2)
            .header(&format!("a/{}", change.path), &format!("b/{}", change.path))
            .to_string(),
        (before, after) => format!(
            "{}: {} → {}\n",
            change.path,
            before.map_or_else(|why| why, |_| "text".into()),
            after.map_or_else(|why| why, |_| "text".into())
        ),
    }
}

/// Marks the undone calls' journal rows `compensated` and records the rewind itself as a row of
/// tool `toolhost`, API `rewind` (its arguments: the call rewound to; its result: what was done).
///
/// # Errors
///
/// The journal cannot be read or written.
pub async fn journal_rewind(
    journal: &dyn journal::Journal,
    tenant: &str,
    plan: &Plan,
    applied: &Applied,
    by: &str,
) -> Result<(), journal::JournalError> {
    if !applied.failed.is_empty() {
        // Nothing is marked undone; the rewind is recorded as failed below.
    } else {
        for key in &plan.keys {
            journal.mark_undone(tenant, key).await?;
        }
    }
    let attempt = journal::NewAttempt {
        tenant: tenant.to_owned(),
        call_id: format!("rewind-{:x}", now_ms()),
        message_id: None,
        session_id: plan.session.clone(),
        parent_call_id: None,
        user_id: None,
        agent_id: None,
        tool: "toolhost".into(),
        api: "rewind".into(),
        function_name: "rewind".into(),
        arguments: serde_json::json!({"to_call": plan.to_call, "calls": plan.calls}),
        tier: Some("write".into()),
        instance_id: String::new(),
    };
    let failed = !applied.failed.is_empty();
    let settlement = journal::Settlement {
        status: if failed { journal::AttemptStatus::Failed } else { journal::AttemptStatus::Executed },
        result: Some(serde_json::json!({"content": format!(
            "{} restored, {} removed, {} left as they are, {} failed",
            applied.restored.len(), applied.removed.len(), applied.skipped.len(), applied.failed.len()
        ), "state": applied})),
        error_kind: failed.then(|| "io".to_owned()),
        error: failed.then(|| format!("{} file(s) could not be put back", applied.failed.len())),
        decision: Some("person".into()),
        decided_by: Some(by.to_owned()),
        duration_ms: Some(0),
        exit_status: None,
    };
    journal.upsert_settled(&attempt, &settlement).await?;
    Ok(())
}
