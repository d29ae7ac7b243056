//! A session: the boundary (working directory, policy, time budget), the names its model sees,
//! its hooks, grants and event stream.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;
use tool_core::{
    CallSandbox, FileBoundary, FileRoot, OutsideFiles, SandboxPolicy, ToolError, ToolNames, ToolOutput,
};

use crate::approval::SessionPolicy;
use crate::events::Event;

/// How a session is opened.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionConfig {
    /// The session's id.
    pub id: String,
    /// The tenant it belongs to.
    pub tenant: String,
    /// The user.
    #[serde(default)]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The sandbox boundary: relative paths resolve here, the path-scope audit allows it.
    #[serde(default)]
    pub working_directory: Option<PathBuf>,
    /// Approval mode and allow-list.
    #[serde(default)]
    pub policy: SessionPolicy,
    /// The sandbox its commands run in (workspace-write without network unless opened otherwise).
    #[serde(default)]
    pub sandbox: SandboxPolicy,
    /// The session's own temp folder: its commands' `TMPDIR` and full outputs, inside its path
    /// scope and writable in its sandbox.
    #[serde(default)]
    pub temp_directory: Option<PathBuf>,
    /// Run every call alone, in the model's order.
    #[serde(default)]
    pub sequential: bool,
    /// The most time all calls of the session may take, from its start.
    #[serde(default)]
    pub time_budget_ms: Option<u64>,
    /// The tools the model is offered (identifiers); `None` offers every tool of the toolbox.
    #[serde(default)]
    pub active_tools: Option<Vec<String>>,
    /// Which of them are declared from the start and which wait behind tool search.
    #[serde(default)]
    pub exposure: crate::exposure::ExposureConfig,
    /// Where "always allow" decisions are kept; defaults to the working directory.
    #[serde(default)]
    pub project: Option<String>,
    /// The hard limit of the session's files, when it has one (a server with keys: the tenant's
    /// workspace roots and the folders the operator granted it). A file call never opens a path
    /// beneath none of these and none of the session's own folders, whoever approves it; the
    /// path-scope audit refuses such a path instead of asking. `None`: a path outside may be
    /// opened once a person approves it, exactly as shown (no link in it).
    #[serde(default)]
    pub hard_roots: Option<Vec<FileRoot>>,
    /// Paths no file call opens in any mode, inside the roots or out (the server's own files).
    #[serde(default)]
    pub protected_paths: Vec<PathBuf>,
    /// Writes and edits show their change first (a diff and a token), applied or discarded by a
    /// second call whose approval shows the change itself.
    #[serde(default)]
    pub preview_writes: bool,
    /// The session's skills, as the front end found them for it (not stored: a front end that
    /// loads the session again finds them again, from the folders it trusts then).
    #[serde(skip)]
    pub skills: std::sync::Arc<tool_core::SkillSet>,
}

/// What a hook sees of a call.
#[derive(Debug, Clone, Copy)]
pub struct HookCall<'a> {
    /// The call id.
    pub call_id: &'a str,
    /// The call's journal key (unique in the tenant, where a call id is only unique in its
    /// message).
    pub key: &'a str,
    /// The tool.
    pub tool: &'a str,
    /// The API.
    pub api: &'a str,
    /// The arguments (validated).
    pub arguments: &'a Value,
}

/// What a before hook decides.
#[derive(Debug, Clone, PartialEq)]
pub enum BeforeOutcome {
    /// Go on unchanged.
    Continue,
    /// Go on with these arguments (validated again).
    Rewrite(Value),
    /// Do not run; the model is told why.
    Block(String),
}

/// Runs before a call, after approval.
#[async_trait]
pub trait BeforeHook: Send + Sync {
    /// Decides about one call.
    async fn before(&self, call: &HookCall<'_>) -> BeforeOutcome;
}

/// Field-wise replacements an after hook makes; `None` keeps a field.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AfterPatch {
    /// New content.
    pub content: Option<String>,
    /// New state (`Some(None)` removes it).
    pub state: Option<Option<Value>>,
    /// New success flag.
    pub success: Option<bool>,
    /// New error (`Some(None)` clears it).
    pub error: Option<Option<ToolError>>,
}

impl AfterPatch {
    /// Applies the patch.
    pub fn apply(self, output: &mut ToolOutput) {
        if let Some(content) = self.content {
            output.content = content;
        }
        if let Some(state) = self.state {
            output.state = state;
        }
        if let Some(success) = self.success {
            output.success = success;
        }
        if let Some(error) = self.error {
            output.error = error;
        }
    }
}

/// Runs after a call, before its result is recorded.
#[async_trait]
pub trait AfterHook: Send + Sync {
    /// Patches one result.
    async fn after(&self, call: &HookCall<'_>, output: &ToolOutput) -> AfterPatch;
}

/// An open session.
pub struct Session {
    /// How it was opened.
    pub config: SessionConfig,
    /// The names its model sees.
    pub names: ToolNames,
    pub(crate) deadline: Option<Instant>,
    pub(crate) cancel: CancellationToken,
    /// Made on the first subscription: a session nobody watches keeps no event buffer.
    pub(crate) events: std::sync::OnceLock<broadcast::Sender<Event>>,
    pub(crate) before: RwLock<Vec<Arc<dyn BeforeHook>>>,
    pub(crate) after: RwLock<Vec<Arc<dyn AfterHook>>>,
    /// A person's or operator's hooks (`PreToolUse`, `PermissionRequest`, `PostToolUse`).
    pub(crate) call_hooks: RwLock<Option<Arc<dyn crate::call_hooks::CallHooks>>>,
    pub(crate) unknown_names: AtomicU32,
    pub(crate) grants: Mutex<Vec<Grant>>,
    pub(crate) batch_lock: Arc<tokio::sync::RwLock<()>>,
    /// The sandbox every call of the session shares, made once from its config.
    pub(crate) sandbox: Arc<CallSandbox>,
    /// Each running call's cancellation (a child of the session's), by call id.
    pub(crate) calls: Mutex<std::collections::HashMap<String, CancellationToken>>,
    /// Which functions are declared, deferred or hidden, and what tool search found.
    pub(crate) exposures: crate::exposure::Exposures,
    /// Sees every event (the executor's tap), set once when the session opens.
    pub(crate) tap: std::sync::OnceLock<Arc<dyn crate::events::EventTap>>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("id", &self.config.id)
            .field("tenant", &self.config.tenant)
            .finish_non_exhaustive()
    }
}

/// A decision that holds for the rest of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    tool: String,
    api: String,
    /// For commands: only those this prefix covers; for calls naming files, only files within
    /// this scope.
    prefix: Option<String>,
    /// The prefix is the whole command: only it, word for word.
    exact: bool,
}

/// Where a session's file calls may open files: its working directory and temp folder, the
/// system temp folders where they count as the session's, and its hard roots; each resolved now,
/// when the session opens, so the runtime pins exactly these folders (with no link in their
/// paths) on first use.
///
/// With hard roots, the working directory is taken as stored (resolved when the session was
/// created; see `Executor::open_session`) and only if it lies beneath one of them: a folder the
/// tenant swapped for a link since is not followed to wherever the link leads.
fn file_boundary(config: &SessionConfig) -> FileBoundary {
    let mut roots: Vec<FileRoot> = Vec::new();
    let mut add = |root: FileRoot, resolve: bool| {
        let root = if resolve { FileRoot { path: resolved(&root.path), ..root } } else { root };
        match roots.iter_mut().find(|r| r.path == root.path) {
            // The same folder granted twice: writable if either grant is.
            Some(known) => known.writable |= root.writable,
            None => roots.push(root),
        }
    };
    let hard: Option<Vec<PathBuf>> =
        config.hard_roots.as_ref().map(|roots| roots.iter().map(|root| resolved(&root.path)).collect());
    match (&config.working_directory, &hard) {
        (Some(dir), None) => add(FileRoot::writable(dir), true),
        (Some(dir), Some(hard)) if hard.iter().any(|root| dir.starts_with(root)) => {
            add(FileRoot::writable(dir), false);
        }
        _ => {}
    }
    config.temp_directory.iter().for_each(|dir| add(FileRoot::writable(dir), true));
    if !config.policy.exclude_temp {
        for temp in [PathBuf::from("/tmp"), PathBuf::from("/var/tmp"), std::env::temp_dir()] {
            add(FileRoot::writable(temp), true);
        }
    }
    config.hard_roots.iter().flatten().cloned().for_each(|root| add(root, true));
    FileBoundary {
        roots,
        outside: if config.hard_roots.is_some() { OutsideFiles::Refuse } else { OutsideFiles::Exact },
        protected: config.protected_paths.clone(),
        pins: tool_core::Pins::default(),
        approved: Vec::new(),
    }
}

/// A folder as it resolves now (links and `..` followed): canonical where it exists, else its
/// nearest existing ancestor's canonical form joined with the rest (a temp folder made later).
fn resolved(path: &std::path::Path) -> PathBuf {
    let mut missing = Vec::new();
    let mut current = path.to_path_buf();
    loop {
        if let Ok(real) = current.canonicalize() {
            return missing.iter().rev().fold(real, |acc: PathBuf, name: &std::ffi::OsString| acc.join(name));
        }
        match (current.file_name().map(ToOwned::to_owned), current.parent()) {
            (Some(name), Some(parent)) => {
                missing.push(name);
                current = parent.to_path_buf();
            }
            _ => return path.to_path_buf(),
        }
    }
}

/// Events a slow subscriber may fall behind by before it misses some (it is told how many).
const EVENT_BUFFER: usize = 1024;

impl Session {
    pub(crate) fn new(
        config: SessionConfig,
        names: ToolNames,
        exposures: crate::exposure::Exposures,
    ) -> Self {
        // The temp folder is the session's from the start, not only once a command made it: a
        // file call there before any command would find no folder to pin, and be refused as
        // outside. Private (0700): other users of the machine do not read a session's files.
        if let Some(temp) = &config.temp_directory {
            use std::os::unix::fs::DirBuilderExt;
            if let Err(error) = std::fs::DirBuilder::new().recursive(true).mode(0o700).create(temp) {
                tracing::warn!(%error, folder = %temp.display(), "could not make the session's temp folder");
            }
        }
        let sandbox = Arc::new(CallSandbox {
            policy: config.sandbox.clone(),
            temp_directory: config.temp_directory.clone(),
            files: file_boundary(&config),
            tenant: Some(config.tenant.clone()),
        });
        let deadline = config.time_budget_ms.map(|ms| Instant::now() + Duration::from_millis(ms));
        Self {
            config,
            names,
            deadline,
            cancel: CancellationToken::new(),
            events: std::sync::OnceLock::new(),
            before: RwLock::new(Vec::new()),
            after: RwLock::new(Vec::new()),
            call_hooks: RwLock::new(None),
            unknown_names: AtomicU32::new(0),
            grants: Mutex::new(Vec::new()),
            batch_lock: Arc::new(tokio::sync::RwLock::new(())),
            sandbox,
            calls: Mutex::new(std::collections::HashMap::new()),
            exposures,
            tap: std::sync::OnceLock::new(),
        }
    }

    /// Cancels one call of the session that is waiting for approval or running (not the
    /// session): it settles as cancelled. Returns whether such a call was found; a call id not in
    /// flight is left alone, since a later message may reuse it.
    pub fn cancel_call(&self, call_id: &str) -> bool {
        let calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        match calls.get(call_id) {
            Some(token) => {
                token.cancel();
                true
            }
            None => false,
        }
    }

    /// The cancellation of one call: fires with the session's (or with its batch's, a child of
    /// the session's, when given), or alone by [`Self::cancel_call`].
    pub(crate) fn call_token(&self, call_id: &str, batch: Option<&CancellationToken>) -> CancellationToken {
        let mut calls = self.calls.lock().unwrap_or_else(|p| p.into_inner());
        calls
            .entry(call_id.to_owned())
            .or_insert_with(|| {
                batch.map_or_else(|| self.cancel.child_token(), CancellationToken::child_token)
            })
            .clone()
    }

    /// The call has settled: its token is dropped.
    pub(crate) fn forget_call(&self, call_id: &str) {
        self.calls.lock().unwrap_or_else(|p| p.into_inner()).remove(call_id);
    }

    /// The session's id.
    pub fn id(&self) -> &str {
        &self.config.id
    }

    /// Subscribes to the session's events (completion order).
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.events.get_or_init(|| broadcast::channel(EVENT_BUFFER).0).subscribe()
    }

    /// Adds a before hook (run in the order added).
    pub fn add_before_hook(&self, hook: Arc<dyn BeforeHook>) {
        self.before.write().unwrap_or_else(|p| p.into_inner()).push(hook);
    }

    /// Adds an after hook (run in the order added).
    pub fn add_after_hook(&self, hook: Arc<dyn AfterHook>) {
        self.after.write().unwrap_or_else(|p| p.into_inner()).push(hook);
    }

    /// Where the session's file calls may open files (what a front end that opens files on the
    /// session's behalf, such as a rewind, opens them beneath).
    pub fn file_boundary(&self) -> &tool_core::sandbox::FileBoundary {
        &self.sandbox.files
    }

    /// Gives the session a person's or operator's hooks (replacing any it had).
    pub fn set_call_hooks(&self, hooks: Option<Arc<dyn crate::call_hooks::CallHooks>>) {
        *self.call_hooks.write().unwrap_or_else(|p| p.into_inner()) = hooks;
    }

    /// The session's person's or operator's hooks, if any.
    pub fn call_hooks(&self) -> Option<Arc<dyn crate::call_hooks::CallHooks>> {
        self.call_hooks.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Cancels every call in flight; each still yields its one result.
    pub fn cancel(&self) {
        self.cancel.cancel();
    }

    /// Whether the session was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.cancel.is_cancelled()
    }

    /// Time left in the session's budget.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }

    /// Whether this session granted the call for its lifetime: `tool/api`, and for a command the
    /// prefix it was granted for, for a call naming files the scopes holding every one of them
    /// (see [`crate::scope`]).
    pub fn granted(
        &self,
        tool: &str,
        api: &str,
        command: Option<&str>,
        paths: Option<&crate::scope::CallPaths>,
    ) -> bool {
        let grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        let mut mine = grants.iter().filter(|grant| grant.tool == tool && grant.api == api);
        if let Some(paths) = paths {
            return paths.covered_by(mine.map(|grant| grant.prefix.as_deref()));
        }
        mine.any(|grant| match (&grant.prefix, command) {
            (None, _) => true,
            (Some(exact), Some(command)) if grant.exact => exact == command.trim(),
            (Some(prefix), Some(command)) => crate::approval::prefix_covers(prefix, command),
            (Some(_), None) => false,
        })
    }

    /// Grants `tool/api` for the session within each of `scopes` (files or folders, resolved).
    pub(crate) fn grant_scopes(&self, tool: &str, api: &str, scopes: &[String]) {
        for scope in scopes {
            self.grant(tool, api, Some(scope.clone()));
        }
    }

    pub(crate) fn grant(&self, tool: &str, api: &str, prefix: Option<String>) {
        self.add_grant(Grant { tool: tool.to_owned(), api: api.to_owned(), prefix, exact: false });
    }

    /// A grant of this one command only: the same command again, never it with more arguments.
    pub(crate) fn grant_exact(&self, tool: &str, api: &str, command: &str) {
        let prefix = Some(command.trim().to_owned());
        self.add_grant(Grant { tool: tool.to_owned(), api: api.to_owned(), prefix, exact: true });
    }

    fn add_grant(&self, grant: Grant) {
        let mut grants = self.grants.lock().unwrap_or_else(|p| p.into_inner());
        if !grants.contains(&grant) {
            grants.push(grant);
        }
    }

    pub(crate) fn set_tap(&self, tap: Arc<dyn crate::events::EventTap>) {
        let _ = self.tap.set(tap);
    }

    pub(crate) fn emit(&self, event: Event) {
        if let Some(tap) = self.tap.get() {
            tap.event(self, &event);
        }
        // No subscriber is fine: events are for whoever listens.
        if let Some(events) = self.events.get() {
            let _ = events.send(event);
        }
    }

    pub(crate) fn count_unknown(&self) -> u32 {
        self.unknown_names.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub(crate) fn project(&self) -> String {
        self.config.project.clone().unwrap_or_else(|| {
            self.config.working_directory.as_ref().map(|d| d.display().to_string()).unwrap_or_default()
        })
    }

    pub(crate) fn before_hooks(&self) -> Vec<Arc<dyn BeforeHook>> {
        self.before.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub(crate) fn after_hooks(&self) -> Vec<Arc<dyn AfterHook>> {
        self.after.read().unwrap_or_else(|p| p.into_inner()).clone()
    }
}
