//! The executor: every call from every front end passes through here.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::FutureExt;
use journal::outbox::{Outbox, OutboxOp};
use journal::{
    AttemptStatus, Journal, NewAttempt, PendingApproval, RememberedDecision, Settlement, has_controls,
    strip_controls,
};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;
use tool_core::provider::drop_null_fields;
use tool_core::{CallContext, ErrorKind, NestedCaller, ProgressSink, Tier, ToolOutput};
use tracing::{Instrument as _, debug_span};

use crate::approval::{
    ApprovalBroker, ApprovalMode, ApprovalRequest, Decided, Decision, DecisionInput, LocalBroker, Verdict,
    decide, prefix_covers,
};
use crate::call_hooks::{CallHooks, HookAnswer, HookDecision, HookedCall};
use crate::durable::JournalHealth;
use crate::events::{Event, EventTap};
use crate::session::{HookCall, Session, SessionConfig};
use crate::toolbox::Toolbox;

/// The content of a call that policy blocked in headless mode (the seeds' wording).
pub const BLOCKED_CONTENT: &str = "Blocked by security/privacy.";

/// The files `paths` name now (absolute, or joined to `working_directory`; `.` and `..` taken
/// out lexically), by device and inode; paths that name nothing yet are left out.
fn approved_files<'a>(
    paths: impl Iterator<Item = &'a str>,
    working_directory: Option<&std::path::Path>,
) -> Vec<tool_core::ApprovedFile> {
    use std::os::unix::fs::MetadataExt;
    paths
        .filter_map(|given| {
            let given = std::path::Path::new(given);
            let joined =
                if given.is_absolute() { given.to_path_buf() } else { working_directory?.join(given) };
            let mut path = std::path::PathBuf::new();
            for component in joined.components() {
                match component {
                    std::path::Component::ParentDir => {
                        path.pop();
                    }
                    std::path::Component::CurDir => {}
                    other => path.push(other.as_os_str()),
                }
            }
            let metadata = std::fs::symlink_metadata(&path).ok()?;
            Some(tool_core::ApprovedFile { path, device: metadata.dev(), inode: metadata.ino() })
        })
        .collect()
}

/// Whether a call of `spec` with `arguments` in `session` is a preview of a write: the session
/// previews writes, the API is previewable, and the call is not one that applies a preview.
fn previewing(session: &Session, spec: &tool_core::ApiSpec, arguments: &Value) -> bool {
    session.config.preview_writes && spec.previewable && arguments.get("previewToken").is_none()
}

/// The call's tier: a preview changes nothing.
fn tier_in(toolbox: &Toolbox, session: &Session, spec: &tool_core::ApiSpec, arguments: &Value) -> Tier {
    if previewing(session, spec, arguments) { Tier::Read } else { toolbox.tier_of(spec, arguments) }
}

/// What hooks see of `call`, with `arguments`.
fn hooked<'a>(session: &'a Session, call: &'a Prepared, arguments: &'a Value) -> HookedCall<'a> {
    HookedCall {
        call_id: &call.call_id,
        function: &call.name,
        tool: &call.tool,
        api: &call.api,
        arguments,
        session: &session.config,
    }
}

/// Settings of the executor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutorConfig {
    /// Timeout when neither the call nor the API gives one.
    pub default_timeout: Duration,
    /// The shortest timeout the referee allows.
    pub min_timeout: Duration,
    /// The longest timeout the referee allows.
    pub max_timeout: Duration,
    /// How long a runtime has to return its partial output after a timeout or cancel.
    pub stop_grace: Duration,
    /// Characters of content the model gets at most.
    pub content_budget: usize,
    /// How long a question waits for a person.
    pub approval_timeout: Duration,
    /// This process's id in the journal (for the reconciler).
    pub instance_id: String,
    /// Calls that never run, in any mode (the operator's).
    pub deny: crate::deny::DenyList,
    /// How long a journal write may take before the pipeline gives up on it: a propose that does
    /// not land in time refuses its call (see [`crate::durable`]); a settle goes to the outbox.
    pub journal_deadline: Duration,
    /// The version this process runs (its heartbeat says so, for operators).
    pub version: Option<String>,
}

impl Default for ExecutorConfig {
    fn default() -> Self {
        Self {
            default_timeout: Duration::from_secs(120),
            min_timeout: Duration::from_secs(1),
            max_timeout: Duration::from_secs(800),
            stop_grace: Duration::from_secs(3),
            content_budget: 100_000,
            approval_timeout: Duration::from_secs(600),
            instance_id: journal::new_instance_id(),
            deny: crate::deny::DenyList::default(),
            journal_deadline: Duration::from_secs(2),
            version: None,
        }
    }
}

fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    nanos ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_left(40)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// A call exactly as the model produced it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct RawCall {
    /// The model's call id.
    pub id: String,
    /// The function name the model used.
    pub name: String,
    /// The raw argument string.
    pub arguments: String,
}

/// The calls of one model message.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Batch {
    /// The message that carried them.
    #[serde(default)]
    pub message_id: Option<String>,
    /// The calls, in the model's order.
    pub calls: Vec<RawCall>,
    /// The message stopped on the output length limit, so its arguments may be cut.
    #[serde(default)]
    pub stopped_on_length: bool,
}

/// The one result of a call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct CallResult {
    /// The call id.
    pub call_id: String,
    /// The name the model used.
    pub name: String,
    /// The tool it resolved to.
    pub tool: Option<String>,
    /// The API it resolved to.
    pub api: Option<String>,
    /// How it ended.
    pub status: AttemptStatus,
    /// What the model reads (`content`) and people see (`state`).
    pub output: ToolOutput,
    /// Time from start to result.
    pub duration_ms: u64,
}

/// A call that passed preflight.
struct Prepared {
    call_id: String,
    name: String,
    tool: String,
    api: String,
    arguments: Value,
    key: String,
    proposed: bool,
    /// Its key turned out to be another call's: it settles without touching the journal.
    foreign_key: bool,
    attempt: NewAttempt,
    parent_deadline: Option<Instant>,
    sequential: bool,
    /// The cancellation of the batch the call came in, when its caller can cancel the batch: the
    /// call's own token is its child, so a cancel reaches calls that have not started yet.
    batch_cancel: Option<CancellationToken>,
    /// The files the call's paths named when a person was asked about it: the runtime opens
    /// those same files or none.
    approved_files: Vec<tool_core::ApprovedFile>,
    /// What a person's hooks said for the model (appended to the result it reads).
    hook_context: Vec<String>,
    /// What a person's hooks did (kept in the result's state, so the journal has it).
    hook_log: Vec<Value>,
    /// The call's span (`execute_tool {function}`), for traces.
    span: tracing::Span,
}

/// The call a question belongs to.
struct Asking {
    call_id: String,
    key: String,
    tool: String,
    api: String,
    batch_cancel: Option<CancellationToken>,
}

/// What `PreToolUse` hooks decided, for approval.
#[derive(Debug, Default)]
struct PreHookSay {
    /// A hook allowed the call (`hook:NAME`): no person is asked.
    allow_by: Option<String>,
    /// A hook wants a person asked, for this reason.
    ask: Option<String>,
}

/// What is needed to settle a prepared call whose own steps died.
struct Backup {
    call_id: String,
    name: String,
    tool: String,
    api: String,
    key: String,
    attempt: NewAttempt,
    proposed: bool,
}

impl Backup {
    fn of(call: &Prepared) -> Self {
        Self {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            tool: call.tool.clone(),
            api: call.api.clone(),
            key: call.key.clone(),
            attempt: call.attempt.clone(),
            proposed: call.proposed,
        }
    }
}

struct Inner {
    toolbox: Arc<Toolbox>,
    journal: Option<Arc<dyn Journal>>,
    broker: Arc<dyn ApprovalBroker>,
    local_broker: Option<Arc<LocalBroker>>,
    config: ExecutorConfig,
    remembered: Mutex<Vec<RememberedDecision>>,
    /// Whose values are redacted from every output, progress line and journal row.
    credentials: credentials::Credentials,
    /// Journal writes that must land, until they do.
    outbox: Arc<Outbox>,
    /// Whether the outbox's drain runs (started with the first write it holds, or at `start`).
    draining: std::sync::OnceLock<()>,
    /// What the pipeline's own writes say of the journal.
    health: Arc<JournalHealth>,
    /// Sees every event of every session.
    tap: Option<Arc<dyn EventTap>>,
    /// The operator's deny list as it is now (`config.deny` at start; [`Executor::set_deny`]).
    deny: std::sync::RwLock<Arc<crate::deny::DenyList>>,
    /// Calls running now (past preflight, not yet settled).
    in_flight: std::sync::atomic::AtomicU64,
    /// Where this instance serves, for its heartbeat (operators see it).
    address: std::sync::OnceLock<String>,
}

/// The pipeline. Cheap to clone; every clone is the same executor.
#[derive(Clone)]
pub struct Executor {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Executor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor").field("config", &self.inner.config).finish_non_exhaustive()
    }
}

/// Builds an [`Executor`].
pub struct ExecutorBuilder {
    toolbox: Arc<Toolbox>,
    journal: Option<Arc<dyn Journal>>,
    broker: Option<Arc<dyn ApprovalBroker>>,
    config: ExecutorConfig,
    credentials: credentials::Credentials,
    outbox: Option<Arc<Outbox>>,
    tap: Option<Arc<dyn EventTap>>,
}

impl std::fmt::Debug for ExecutorBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutorBuilder").finish_non_exhaustive()
    }
}

impl ExecutorBuilder {
    /// Records every call in this journal.
    #[must_use]
    pub fn journal(mut self, journal: Arc<dyn Journal>) -> Self {
        self.journal = Some(journal);
        self
    }

    /// Delivers questions through this broker (default: an in-process [`LocalBroker`]).
    #[must_use]
    pub fn broker(mut self, broker: Arc<dyn ApprovalBroker>) -> Self {
        self.broker = Some(broker);
        self
    }

    /// Redacts these credentials' values (as they are when a call ends) from every output,
    /// progress line and journal row: whatever a tool returns, no value reaches the model, a
    /// person or the journal.
    #[must_use]
    pub fn credentials(mut self, credentials: credentials::Credentials) -> Self {
        self.credentials = credentials;
        self
    }

    /// Sets the configuration.
    #[must_use]
    pub fn config(mut self, config: ExecutorConfig) -> Self {
        self.config = config;
        self
    }

    /// Keeps journal writes that must land in this outbox until they do (default: one in memory,
    /// which a crash loses).
    #[must_use]
    pub fn outbox(mut self, outbox: Arc<Outbox>) -> Self {
        self.outbox = Some(outbox);
        self
    }

    /// Hands every event of every session this executor opens to `tap` as well.
    #[must_use]
    pub fn tap(mut self, tap: Arc<dyn EventTap>) -> Self {
        self.tap = Some(tap);
        self
    }

    /// The executor.
    pub fn build(self) -> Executor {
        let (broker, local_broker): (Arc<dyn ApprovalBroker>, Option<Arc<LocalBroker>>) = match self.broker {
            Some(broker) => (broker, None),
            None => {
                let local = Arc::new(LocalBroker::new());
                (local.clone(), Some(local))
            }
        };
        let deny = std::sync::RwLock::new(Arc::new(self.config.deny.clone()));
        Executor {
            inner: Arc::new(Inner {
                toolbox: self.toolbox,
                journal: self.journal,
                broker,
                local_broker,
                config: self.config,
                remembered: Mutex::new(Vec::new()),
                credentials: self.credentials,
                outbox: self.outbox.unwrap_or_else(|| Arc::new(Outbox::memory())),
                draining: std::sync::OnceLock::new(),
                health: Arc::new(JournalHealth::default()),
                tap: self.tap,
                deny,
                in_flight: std::sync::atomic::AtomicU64::new(0),
                address: std::sync::OnceLock::new(),
            }),
        }
    }
}

/// What the approval step decides: `Ok((decision, by))` to run, `Err((status, output, decision,
/// by))` not to.
type Approved = Result<(String, Option<String>), (AttemptStatus, ToolOutput, String, Option<String>)>;

/// A call may run: said on the session's stream (with the approval a person decided, if one was
/// asked), and the decision and who made it for the journal.
fn granted(session: &Session, call_id: &str, decision: &str, by: &str, approval: Option<&str>) -> Approved {
    session.emit(Event::PermissionGranted {
        call_id: call_id.to_owned(),
        decision: decision.to_owned(),
        by: by.to_owned(),
        approval_id: approval.map(str::to_owned),
    });
    Ok((decision.to_owned(), Some(by.to_owned())))
}

impl Executor {
    /// A builder over `toolbox`.
    pub fn builder(toolbox: Arc<Toolbox>) -> ExecutorBuilder {
        ExecutorBuilder {
            toolbox,
            journal: None,
            broker: None,
            config: ExecutorConfig::default(),
            credentials: credentials::Credentials::new(),
            outbox: None,
            tap: None,
        }
    }

    /// The toolbox.
    pub fn toolbox(&self) -> &Toolbox {
        &self.inner.toolbox
    }

    /// The journal, if any.
    pub fn journal(&self) -> Option<&Arc<dyn Journal>> {
        self.inner.journal.as_ref()
    }

    /// The in-process broker, when no other broker was given.
    pub fn local_broker(&self) -> Option<&Arc<LocalBroker>> {
        self.inner.local_broker.as_ref()
    }

    /// The configuration.
    pub fn config(&self) -> &ExecutorConfig {
        &self.inner.config
    }

    /// Calls running now through this executor.
    pub fn in_flight(&self) -> u64 {
        self.inner.in_flight.load(Ordering::Relaxed)
    }

    /// Where this instance serves (its heartbeat says so, for operators).
    pub fn set_address(&self, address: String) {
        let _ = self.inner.address.set(address);
    }

    /// Replaces the operator's deny list (a reload): calls decided from now on see the new one.
    pub fn set_deny(&self, deny: crate::deny::DenyList) {
        *self.inner.deny.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(deny);
    }

    /// The operator's deny list as it is now.
    pub fn deny(&self) -> Arc<crate::deny::DenyList> {
        self.inner.deny.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    /// What the pipeline's own journal writes (and the heartbeat) say of the journal.
    pub fn journal_health(&self) -> &Arc<JournalHealth> {
        &self.inner.health
    }

    /// Journal writes waiting to land.
    pub fn outbox(&self) -> &Arc<Outbox> {
        &self.inner.outbox
    }

    /// Keeps a write that the journal did not take, and makes sure something retries it.
    fn keep(&self, op: OutboxOp) {
        self.inner.outbox.push(op);
        self.start_drain();
    }

    fn start_drain(&self) {
        let Some(journal) = self.inner.journal.clone() else { return };
        if tokio::runtime::Handle::try_current().is_err() {
            return;
        }
        self.inner.draining.get_or_init(|| {
            self.inner.outbox.spawn_drain(journal, self.inner.config.journal_deadline);
        });
    }

    /// One journal write within the deadline, noted in the health.
    async fn timed<T>(
        &self,
        write: impl std::future::Future<Output = Result<T, journal::JournalError>>,
    ) -> Result<T, String> {
        self.inner.health.timed(self.inner.config.journal_deadline, write).await
    }

    /// Starts the journal's housekeeping for this process: registers the instance (rows it
    /// proposes are only ever abandoned once it is dead), keeps its heartbeat, reconciles once now
    /// — proposed rows of dead instances become `abandoned`, old unconfirmed executed rows are
    /// reported — and again every `reconcile_every`, abandoning only. Call once at start-up;
    /// without a journal it does nothing.
    ///
    /// # Errors
    ///
    /// The journal's error when registering or the first reconcile fails.
    pub async fn start(
        &self,
        reconcile_every: Duration,
    ) -> Result<Option<journal::ReconcileReport>, journal::JournalError> {
        let Some(journal) = self.inner.journal.clone() else { return Ok(None) };
        let mut instance = journal::current_instance(self.inner.config.instance_id.clone());
        instance.version = self.inner.config.version.clone();
        journal.register_instance(&instance).await?;
        // What a process that died here left waiting lands before any row is judged.
        let waiting = self.inner.outbox.len();
        if waiting > 0 {
            let landed = self.inner.outbox.flush(journal.as_ref(), self.inner.config.journal_deadline).await;
            tracing::info!(
                waiting,
                landed,
                adopted = self.inner.outbox.adopted(),
                "journal writes from the outbox"
            );
        }
        self.start_drain();
        let lease = Duration::from_secs(30);
        // The heartbeat, noted in the health: a reconciler that could not beat itself cannot
        // tell a dead peer from one that could not beat either.
        let (beat, health) = (journal.clone(), self.inner.health.clone());
        let deadline = self.inner.config.journal_deadline;
        let executor = Arc::downgrade(&self.inner);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(lease / 3);
            ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                ticks.tick().await;
                let Some(inner) = executor.upgrade() else { return };
                instance.in_flight = Some(inner.in_flight.load(Ordering::Relaxed));
                instance.address = inner.address.get().cloned();
                drop(inner);
                let _ = health.timed(deadline, beat.register_instance(&instance)).await;
            }
        });
        let policy = journal::ReconcilePolicy {
            current_instance: self.inner.config.instance_id.clone(),
            instance_lease_ms: lease.as_millis() as i64,
            unconfirmed_after_ms: Some(15 * 60 * 1000),
        };
        let report = journal.reconcile(&policy).await?;
        if !report.abandoned.is_empty() || !report.unconfirmed.is_empty() {
            tracing::warn!(
                abandoned = report.abandoned.len(),
                unconfirmed = report.unconfirmed.len(),
                "journal reconciled"
            );
        }
        // Only the start-up run reports unconfirmed rows: later runs abandon, and would otherwise
        // read up to a thousand whole rows a minute, once calls are older than the threshold,
        // only to drop them.
        let policy = journal::ReconcilePolicy { unconfirmed_after_ms: None, ..policy };
        let health = self.inner.health.clone();
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(reconcile_every);
            ticks.tick().await;
            loop {
                ticks.tick().await;
                // After the journal was away, every live peer needs a lease of its own to beat
                // again: until then a stale heartbeat says nothing about being dead.
                if health.is_down() || health.since_failure().is_some_and(|since| since < lease) {
                    tracing::debug!("the journal was away within a lease: not judging other instances yet");
                    continue;
                }
                if let Err(error) = journal.reconcile(&policy).await {
                    tracing::warn!(%error, "periodic reconcile failed");
                }
            }
        });
        Ok(Some(report))
    }

    /// Opens a session: the names its model sees are built from its active tools.
    ///
    /// The working directory is pinned: resolved once, here, to the folder it names now. If a
    /// component is later swapped for a symlink, the path no longer resolves to itself, and the
    /// path-scope audit and the sandbox refuse to treat the new target as the session's folder.
    ///
    /// With hard roots (a server with keys) the folder was resolved when the session was created
    /// and is taken as stored: resolving it again on a later load (a restart, another instance)
    /// would follow a link the tenant's own commands swapped in, perhaps to another tenant's
    /// folder. A stored folder that no longer resolves to itself stays as it is, and so is refused.
    pub fn open_session(&self, mut config: SessionConfig) -> Arc<Session> {
        if let Some(dir) = &config.working_directory
            && let Ok(pinned) = std::fs::canonicalize(dir)
            && (config.hard_roots.is_none() || pinned == *dir)
        {
            config.working_directory = Some(pinned);
        }
        let names = self.inner.toolbox.names(config.active_tools.as_deref());
        let exposures = crate::exposure::resolve(
            &self.inner.toolbox,
            &config.exposure,
            &names,
            &config.skills,
            config.preview_writes,
        );
        let session = Session::new(config, names, exposures);
        if let Some(tap) = &self.inner.tap {
            session.set_tap(tap.clone());
        }
        Arc::new(session)
    }

    /// Runs the calls of one model message: preflight in the model's order, then concurrently
    /// unless a call or the session is sequential (parallel calls share, sequential ones run
    /// alone); results come back in the model's order, one per call.
    ///
    /// Without a message id the batch gets a fresh one: a batch is one model message, and its rows
    /// must not collide with an earlier turn that reused the same call ids. Replays are recognised
    /// (and not run twice) only under a message id the caller gives.
    pub async fn execute_batch(&self, session: &Arc<Session>, batch: Batch) -> Vec<CallResult> {
        self.run_batch(session, batch, None, false).await
    }

    /// [`Self::execute_batch`] for a message whose id the caller has just made (to name the rows
    /// in its answer): no earlier message can have it, so nothing in it is a replay, and its reads
    /// need no look-up before they run.
    pub async fn execute_new_batch(&self, session: &Arc<Session>, batch: Batch) -> Vec<CallResult> {
        self.run_batch(session, batch, None, true).await
    }

    /// [`Self::execute_batch`], cancelled as a whole when `cancel` fires: calls running or waiting
    /// for a person settle as cancelled, and calls that have not started yet never run (each still
    /// gets its one result and journal row). For a front end whose person can stop a turn.
    pub async fn execute_batch_until(
        &self,
        session: &Arc<Session>,
        batch: Batch,
        cancel: &CancellationToken,
    ) -> Vec<CallResult> {
        let batch_cancel = session.cancel.child_token();
        if cancel.is_cancelled() {
            // Already: nothing of the batch starts (the link below would only fire later).
            batch_cancel.cancel();
        }
        let linked = batch_cancel.clone();
        let watched = cancel.clone();
        let link = tokio::spawn(async move {
            watched.cancelled().await;
            linked.cancel();
        });
        let results = self.run_batch(session, batch, Some(batch_cancel), false).await;
        link.abort();
        results
    }

    async fn run_batch(
        &self,
        session: &Arc<Session>,
        mut batch: Batch,
        batch_cancel: Option<CancellationToken>,
        new_message: bool,
    ) -> Vec<CallResult> {
        // A message id the pipeline (or the caller, just now) makes is new: none of its keys can
        // have a row yet.
        let fresh_message = new_message || batch.message_id.is_none();
        if batch.message_id.is_none() {
            batch.message_id = Some(format!("batch-{:x}", unique()));
        }
        #[allow(clippy::large_enum_variant)] // a short-lived list, one per call of a batch
        enum Slot {
            Done(CallResult),
            Running(tokio::task::JoinHandle<CallResult>, Box<Backup>),
        }

        let mut seen = std::collections::HashSet::new();
        let mut prepared = Vec::with_capacity(batch.calls.len());
        for call in batch.calls {
            let duplicate = !seen.insert(call.id.clone());
            let started = Instant::now();
            let span = call_span(session, &call);
            let slot = if duplicate {
                // Not a call of its own: its key is the first call's, whose row (perhaps not
                // written yet, for a read) it must never take.
                let output = ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    format!("call id `{}` appears twice in this message; the second was not run", call.id),
                );
                session.emit(Event::Failed { call_id: call.id.clone(), output: output.clone() });
                Err(CallResult {
                    call_id: call.id.clone(),
                    name: call.name.clone(),
                    tool: None,
                    api: None,
                    status: AttemptStatus::Failed,
                    output,
                    duration_ms: started.elapsed().as_millis() as u64,
                })
            } else {
                self.preflight(
                    session,
                    call,
                    batch.message_id.as_deref(),
                    None,
                    None,
                    batch.stopped_on_length,
                    fresh_message,
                )
                .instrument(span.clone())
                .await
            };
            if let Err(result) = &slot {
                failed(&span, result);
            }
            prepared.push(slot.map(|mut call| {
                call.batch_cancel.clone_from(&batch_cancel);
                call.span = span;
                call
            }));
        }

        // A batch of one runs in this task: no spawn, no thread hop.
        if prepared.len() == 1 {
            match prepared.pop() {
                Some(Ok(call)) => {
                    let _guard = if call.sequential || session.config.sequential {
                        Err(session.batch_lock.clone().write_owned().await)
                    } else {
                        Ok(session.batch_lock.clone().read_owned().await)
                    };
                    return vec![self.run_prepared(session, call).await];
                }
                Some(Err(result)) => return vec![result],
                None => {}
            }
        }

        let mut slots = Vec::with_capacity(prepared.len());
        for item in prepared {
            match item {
                Err(result) => slots.push(Slot::Done(result)),
                Ok(call) => {
                    let lock = session.batch_lock.clone();
                    let exclusive = call.sequential || session.config.sequential;
                    let backup = Box::new(Backup::of(&call));
                    let executor = self.clone();
                    let session = session.clone();
                    let handle = if exclusive {
                        let guard = lock.write_owned().await;
                        tokio::spawn(async move {
                            let result = executor.run_prepared(&session, call).await;
                            drop(guard);
                            result
                        })
                    } else {
                        let guard = lock.read_owned().await;
                        tokio::spawn(async move {
                            let result = executor.run_prepared(&session, call).await;
                            drop(guard);
                            result
                        })
                    };
                    slots.push(Slot::Running(handle, backup));
                }
            }
        }

        let mut results = Vec::with_capacity(slots.len());
        for slot in slots {
            match slot {
                Slot::Done(result) => results.push(result),
                Slot::Running(handle, backup) => match handle.await {
                    Ok(result) => results.push(result),
                    Err(error) => {
                        let message = format!("the pipeline failed on this call: {error}");
                        results.push(self.fail_backup(session, *backup, message).await);
                    }
                },
            }
        }
        results
    }

    /// Runs one call (a batch of one).
    pub async fn execute(
        &self,
        session: &Arc<Session>,
        message_id: Option<String>,
        call: RawCall,
    ) -> CallResult {
        let mut results = self
            .execute_batch(session, Batch { message_id, calls: vec![call], stopped_on_length: false })
            .await;
        results.pop().unwrap_or_else(|| CallResult {
            call_id: String::new(),
            name: String::new(),
            tool: None,
            api: None,
            status: AttemptStatus::Failed,
            output: ToolOutput::error(ErrorKind::Internal, "the call produced no result"),
            duration_ms: 0,
        })
    }

    /// A nested call from a running call: same session and pipeline (approval included), no
    /// batch lock (the parent holds it), deadline within the parent's.
    async fn execute_nested(
        &self,
        session: &Arc<Session>,
        parent: &str,
        message_id: Option<&str>,
        call: RawCall,
        parent_deadline: Option<Instant>,
        parent_cancel: CancellationToken,
    ) -> CallResult {
        match self.preflight(session, call, message_id, Some(parent), parent_deadline, false, false).await {
            Err(result) => result,
            Ok(mut prepared) => {
                // Cancelling the calling call cancels what it started.
                prepared.batch_cancel = Some(parent_cancel);
                self.run_prepared(session, prepared).await
            }
        }
    }

    /// Resolve → parse → prepare → validate → journal (proposed; a read only when it must wait
    /// for a person, see below). `fresh_message`: the pipeline made the message id.
    #[allow(clippy::too_many_arguments)]
    async fn preflight(
        &self,
        session: &Arc<Session>,
        call: RawCall,
        message_id: Option<&str>,
        parent: Option<&str>,
        parent_deadline: Option<Instant>,
        stopped_on_length: bool,
        fresh_message: bool,
    ) -> Result<Prepared, CallResult> {
        let started = Instant::now();
        let toolbox = &self.inner.toolbox;

        // Resolve: the session's names, then `tool/api` (nested calls may use it).
        let active = |tool: &str| {
            session.config.active_tools.as_ref().is_none_or(|tools| tools.iter().any(|t| t == tool))
        };
        // A hidden function is not the model's to call (other tools may); a deferred one it names
        // without having searched for it runs, and is declared from then on.
        let exposure = session.exposure_of(&call.name);
        let visible = parent.is_some() || exposure != tool_core::Exposure::Hidden;
        let resolved = session
            .names
            .resolve(&call.name)
            .filter(|_| visible)
            .map(|(t, a)| (t.to_owned(), a.to_owned()))
            .or_else(|| {
                // `tool/api` is for tools calling tools, and only among the session's active tools.
                parent?;
                let (tool, api) = call.name.split_once('/')?;
                if !active(tool) {
                    return None;
                }
                toolbox.tool(tool)?.api(api)?;
                Some((tool.to_owned(), api.to_owned()))
            });
        let Some((tool, api)) = resolved else {
            let unknown = session.count_unknown();
            let message = unknown_tool_message(session, &call.name, unknown);
            return Err(self
                .fail_early(session, &call, message_id, parent, ErrorKind::UnknownTool, message, started)
                .await);
        };
        if parent.is_none() && exposure == tool_core::Exposure::Deferred {
            // Declaring is not permitting: the call still passes validation and approval.
            session.activate(&call.id, std::slice::from_ref(&call.name));
        }
        let Some(entry) = toolbox.tool(&tool) else {
            let message = format!("the tool `{tool}` is not available in this session");
            return Err(self
                .fail_early(session, &call, message_id, parent, ErrorKind::UnknownTool, message, started)
                .await);
        };
        let Some(compiled) = entry.api(&api) else {
            let message = format!("the tool `{tool}` has no API `{api}`");
            return Err(self
                .fail_early(session, &call, message_id, parent, ErrorKind::UnknownTool, message, started)
                .await);
        };
        let fail = |message: String| (ErrorKind::InvalidArguments, message);

        let parsed: Result<Value, (ErrorKind, String)> = if stopped_on_length {
            Err(fail(format!(
                "The message that carried `{}` was cut off by the output length limit, so its arguments may be incomplete; it was not run. Send the call again with shorter arguments (split large content into several calls).",
                call.name
            )))
        } else {
            parse_arguments(&call.name, &call.arguments).map_err(fail)
        };
        let mut arguments = match parsed {
            Ok(arguments) => arguments,
            Err((kind, message)) => {
                return Err(self
                    .fail_resolved(session, &call, message_id, parent, &tool, &api, kind, message, started)
                    .await);
            }
        };
        if let Some(prepare) = toolbox.prepare(&tool, &api) {
            arguments = prepare(arguments);
        }
        // Strict-mode providers send null for optional parameters the model left out.
        drop_null_fields(&mut arguments);
        let violations = compiled.violations(&arguments);
        if !violations.is_empty() {
            let message = format!(
                "The arguments of `{}` do not match its schema:\n- {}\nFix these and call again.",
                call.name,
                violations.join("\n- ")
            );
            return Err(self
                .fail_resolved(
                    session,
                    &call,
                    message_id,
                    parent,
                    &tool,
                    &api,
                    ErrorKind::InvalidArguments,
                    message,
                    started,
                )
                .await);
        }

        let call_id = call.id.clone();
        let tier = tier_in(toolbox, session, &compiled.spec, &arguments);
        let attempt =
            self.attempt(session, &call, message_id, parent, &tool, &api, arguments.clone(), Some(tier));
        let key = attempt.key();
        // A read changes nothing, so it needs no durable proposal before it runs: it is journalled
        // once, settled, when it ends — one write instead of two. It is proposed first only if it
        // must wait for a person (see `approve`). Only under a new message id, where its key can
        // be no one else's: a caller's own id may be a retry, or shared by a concurrent request,
        // and a call id with a `/` could be a nested call's; those are proposed as any call.
        let deferred = self.inner.journal.is_some()
            && !self.inner.health.is_down()
            && tier == Tier::Read
            && parent.is_none()
            && fresh_message
            && !call.id.contains('/');
        let proposed = match &self.inner.journal {
            None => false,
            Some(_) if deferred => false,
            Some(journal) => {
                match self.timed(journal.propose(&attempt)).instrument(debug_span!("journal.propose")).await {
                    Ok(outcome) if outcome.created => true,
                    Ok(_) => {
                        // A retry of a message (its client lost the answer) gets the stored result of
                        // the same call, as payment APIs answer a repeated idempotency key.
                        if let Some(mut result) =
                            replayed(journal.as_ref(), &self.inner.outbox, &attempt, &call, &tool, &api).await
                        {
                            // A row kept before a credential was held is redacted now too.
                            self.inner.credentials.redactor().redact_output(&mut result.output);
                            // The journal keeps the whole output; the model gets it cut as it was.
                            let key = attempt.key();
                            cut_for_model(
                                &mut result.output.content,
                                self.inner.config.content_budget,
                                Some(&key),
                            );
                            session.emit(Event::Finished {
                                call_id: call_id.clone(),
                                output: result.output.clone(),
                            });
                            return Err(result);
                        }
                        let message = format!(
                            "the call `{call_id}` of this message was already made (with other arguments, or it is \
                         still running); it is not run twice. Use a new call id to run it again, or retry later \
                         for its result."
                        );
                        let output = ToolOutput::error(ErrorKind::Conflict, message);
                        session.emit(Event::Failed { call_id: call_id.clone(), output: output.clone() });
                        return Err(CallResult {
                            call_id,
                            name: call.name,
                            tool: Some(tool),
                            api: Some(api),
                            status: AttemptStatus::Failed,
                            output,
                            duration_ms: started.elapsed().as_millis() as u64,
                        });
                    }
                    Err(error) => {
                        // The record first, always: what the journal cannot hold does not run.
                        tracing::warn!(%error, call_id, "journal propose failed: the call is refused");
                        let output =
                            ToolOutput::error(ErrorKind::Unavailable, crate::durable::refused(&error));
                        session.emit(Event::Failed { call_id: call_id.clone(), output: output.clone() });
                        return Err(CallResult {
                            call_id,
                            name: call.name,
                            tool: Some(tool),
                            api: Some(api),
                            status: AttemptStatus::Failed,
                            output,
                            duration_ms: started.elapsed().as_millis() as u64,
                        });
                    }
                }
            }
        };
        session.emit(Event::Proposed {
            call_id: call_id.clone(),
            tool: tool.clone(),
            api: api.clone(),
            arguments: arguments.clone(),
        });
        let sequential = compiled.spec.execution == tool_core::ExecutionMode::Sequential;
        Ok(Prepared {
            call_id,
            name: call.name,
            tool,
            api,
            arguments,
            key,
            proposed,
            foreign_key: false,
            attempt,
            parent_deadline,
            sequential,
            batch_cancel: None,
            approved_files: Vec::new(),
            hook_context: Vec::new(),
            hook_log: Vec::new(),
            span: tracing::Span::none(),
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn attempt(
        &self,
        session: &Session,
        call: &RawCall,
        message_id: Option<&str>,
        parent: Option<&str>,
        tool: &str,
        api: &str,
        arguments: Value,
        tier: Option<Tier>,
    ) -> NewAttempt {
        NewAttempt {
            tenant: session.config.tenant.clone(),
            call_id: call.id.clone(),
            message_id: message_id.map(str::to_owned),
            session_id: session.config.id.clone(),
            parent_call_id: parent.map(str::to_owned),
            user_id: session.config.user_id.clone(),
            agent_id: session.config.agent_id.clone(),
            tool: tool.to_owned(),
            api: api.to_owned(),
            function_name: call.name.clone(),
            arguments,
            tier: tier.map(|t| format!("{t:?}").to_lowercase()),
            instance_id: self.inner.config.instance_id.clone(),
        }
    }

    /// A failure before the call resolved to a tool.
    #[allow(clippy::too_many_arguments)]
    async fn fail_early(
        &self,
        session: &Session,
        call: &RawCall,
        message_id: Option<&str>,
        parent: Option<&str>,
        kind: ErrorKind,
        message: String,
        started: Instant,
    ) -> CallResult {
        self.fail_resolved(session, call, message_id, parent, "", &call.name, kind, message, started).await
    }

    /// A failure in preflight: one result, one settled row (inserted settled).
    #[allow(clippy::too_many_arguments)]
    async fn fail_resolved(
        &self,
        session: &Session,
        call: &RawCall,
        message_id: Option<&str>,
        parent: Option<&str>,
        tool: &str,
        api: &str,
        kind: ErrorKind,
        message: String,
        started: Instant,
    ) -> CallResult {
        let raw = serde_json::from_str::<Value>(&call.arguments)
            .unwrap_or_else(|_| Value::String(call.arguments.clone()));
        let attempt = self.attempt(session, call, message_id, parent, tool, api, raw, None);
        let output = ToolOutput::error(kind, message);
        let result = CallResult {
            call_id: call.id.clone(),
            name: call.name.clone(),
            tool: (!tool.is_empty()).then(|| tool.to_owned()),
            api: (!tool.is_empty()).then(|| api.to_owned()),
            status: AttemptStatus::Failed,
            output,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        session.emit(Event::Failed { call_id: call.id.clone(), output: result.output.clone() });
        // Propose, then settle: a key that already has a row belongs to another call (a duplicate
        // id, a replay in flight) and is never touched from here.
        if let Some(journal) = &self.inner.journal {
            match self.timed(journal.propose(&attempt)).await {
                Ok(proposed) if proposed.created => {
                    self.record(session, &proposed.key, &attempt, true, &result, None, None, None).await;
                }
                Ok(_) => {}
                // Nothing ran; the failure is still kept, once the journal takes it.
                Err(_) => {
                    self.record(session, &attempt.key(), &attempt, false, &result, None, None, None).await
                }
            }
        }
        result
    }

    /// [`Self::run_steps`] with a panic anywhere in the pipeline's own steps (hooks, audits,
    /// tier functions) turned into one failed result and a settled row.
    async fn run_prepared(&self, session: &Arc<Session>, call: Prepared) -> CallResult {
        let backup = Backup::of(&call);
        let call_id = call.call_id.clone();
        let span = call.span.clone();
        self.inner.in_flight.fetch_add(1, Ordering::Relaxed);
        let steps = AssertUnwindSafe(self.run_steps(session, call)).catch_unwind().instrument(span.clone());
        let result = match steps.await {
            Ok(result) => result,
            Err(_) => {
                let message = "the pipeline failed on this call (a hook, audit or tier function panicked); it may not have run";
                self.fail_backup(session, backup, message.to_owned()).await
            }
        };
        session.forget_call(&call_id);
        self.inner.in_flight.fetch_sub(1, Ordering::Relaxed);
        failed(&span, &result);
        result
    }

    /// The one failed result (and settled row) of a call whose own steps died.
    async fn fail_backup(&self, session: &Session, backup: Backup, message: String) -> CallResult {
        let output = ToolOutput::error(ErrorKind::Internal, message);
        session.emit(Event::Failed { call_id: backup.call_id.clone(), output: output.clone() });
        let result = CallResult {
            call_id: backup.call_id,
            name: backup.name,
            tool: Some(backup.tool),
            api: Some(backup.api),
            status: AttemptStatus::Failed,
            output,
            duration_ms: 0,
        };
        self.record(session, &backup.key, &backup.attempt, backup.proposed, &result, None, None, None).await;
        result
    }

    /// Approve → before hooks → timeout → run → after hooks → record.
    async fn run_steps(&self, session: &Arc<Session>, mut call: Prepared) -> CallResult {
        let started = Instant::now();
        if session.is_cancelled()
            || session.call_token(&call.call_id, call.batch_cancel.as_ref()).is_cancelled()
        {
            let what = if session.is_cancelled() { "The session" } else { "The call" };
            let output = ToolOutput::error(
                ErrorKind::Cancelled,
                format!("{what} was cancelled before this call ran."),
            );
            return self.finish(session, &call, AttemptStatus::Failed, output, started, None, None).await;
        }
        let hooks = session.call_hooks();
        let said = match &hooks {
            Some(hooks) => match self.pre_tool_use(session, hooks.as_ref(), &mut call, started).await {
                Ok(said) => said,
                Err(result) => return *result,
            },
            None => PreHookSay::default(),
        };
        let (decision, decided_by) = match self
            .approve(session, &mut call, &said, hooks.as_deref())
            .instrument(debug_span!("approval"))
            .await
        {
            Ok(granted) => granted,
            Err((status, output, decision, decided_by)) => {
                return self
                    .finish(session, &call, status, output, started, Some(decision), decided_by)
                    .await;
            }
        };
        let toolbox = &self.inner.toolbox;
        let entry = toolbox.tool(&call.tool).expect("preflight resolved the tool");
        let compiled = entry.api(&call.api).expect("preflight resolved the API");

        // Before hooks, in order.
        let mut arguments = call.arguments.clone();
        for hook in session.before_hooks() {
            let view = HookCall {
                call_id: &call.call_id,
                key: &call.key,
                tool: &call.tool,
                api: &call.api,
                arguments: &arguments,
            };
            match hook.before(&view).await {
                crate::session::BeforeOutcome::Continue => {}
                crate::session::BeforeOutcome::Rewrite(new) => {
                    let violations = compiled.violations(&new);
                    if !violations.is_empty() {
                        let output = ToolOutput::error(
                            ErrorKind::Internal,
                            format!(
                                "a hook rewrote the arguments into an invalid shape: {}",
                                violations.join("; ")
                            ),
                        );
                        return self
                            .finish(
                                session,
                                &call,
                                AttemptStatus::Failed,
                                output,
                                started,
                                Some(decision),
                                decided_by,
                            )
                            .await;
                    }
                    // Approval was decided on the old arguments: the new ones must pass on their own.
                    let tier = tier_in(toolbox, session, &compiled.spec, &new);
                    let input = self.decision_input(session, entry, compiled, &new, tier);
                    if !matches!(decide(toolbox, &input), Verdict::Run(_)) {
                        let reason = "a hook rewrote the arguments into a call that would need approval";
                        return self
                            .blocked_by_hook(session, &call, reason, started, decision, decided_by)
                            .await;
                    }
                    arguments = new;
                }
                crate::session::BeforeOutcome::Block(reason) => {
                    return self
                        .blocked_by_hook(session, &call, &reason, started, decision, decided_by)
                        .await;
                }
            }
        }

        // A hook's rewrite can make a read into a call that changes something: that is on record
        // before it runs, as any such call; so is a call that may wait for a person's answer.
        if !call.proposed
            && !call.foreign_key
            && (compiled.spec.asks_person
                || tier_in(toolbox, session, &compiled.spec, &arguments) != Tier::Read)
            && let Err(output) = self.propose_late(&mut call).await
        {
            return self
                .finish(session, &call, AttemptStatus::Failed, output, started, Some(decision), decided_by)
                .await;
        }
        // One referee for the timeout.
        let timeout =
            match self.referee(&arguments, &compiled.spec, session.remaining(), call.parent_deadline) {
                Some(timeout) => timeout,
                None => {
                    let why = if session.remaining().is_some_and(|r| r.is_zero()) {
                        "the session's time budget is used up; this call was not run"
                    } else {
                        "the calling tool's time is up; this nested call was not run"
                    };
                    let output = ToolOutput::error(ErrorKind::Timeout, why);
                    return self
                        .finish(
                            session,
                            &call,
                            AttemptStatus::Failed,
                            output,
                            started,
                            Some(decision),
                            decided_by,
                        )
                        .await;
                }
            };
        let deadline = Instant::now() + timeout;
        session
            .emit(Event::Started { call_id: call.call_id.clone(), timeout_ms: timeout.as_millis() as u64 });

        let nested_count = Arc::new(AtomicU32::new(0));
        let nested_log: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(Vec::new()));
        let context = self.context(session, &call, deadline, nested_count, nested_log.clone());
        let mut output = self
            .dispatch(entry.runtime.clone(), &call.api, arguments.clone(), context, timeout)
            .instrument(debug_span!("run", tool = %call.tool, api = %call.api))
            .await;

        // After hooks, field by field.
        for hook in session.after_hooks() {
            let view = HookCall {
                call_id: &call.call_id,
                key: &call.key,
                tool: &call.tool,
                api: &call.api,
                arguments: &arguments,
            };
            hook.after(&view, &output).await.apply(&mut output);
        }
        if output.success
            && let Some(hooks) = &hooks
        {
            let view = hooked(session, &call, &arguments);
            if hooks.matches("PostToolUse", &view) {
                // A cancel stops waiting for them: the call already ran, its result stands.
                let token = session.call_token(&call.call_id, call.batch_cancel.as_ref());
                let answer = tokio::select! {
                    answer = hooks.post_tool_use(&view, &output) => answer,
                    () = token.cancelled() => HookAnswer::default(),
                };
                if answer.decision == Some(HookDecision::Deny)
                    && let Some(reason) = &answer.reason
                {
                    call.hook_context.push(reason.clone());
                }
                self.absorb(session, &mut call, "PostToolUse", &answer);
            }
        }
        let nested = std::mem::take(&mut *nested_log.lock().unwrap_or_else(|p| p.into_inner()));
        if !nested.is_empty() {
            let failed = nested.iter().filter(|n| n["status"] != "executed").count();
            output.content.push_str(&format!("\n\n[{} nested call(s), {failed} failed]", nested.len()));
            let mut state = output.state.take().unwrap_or_else(|| json!({}));
            if let Value::Object(map) = &mut state {
                map.insert("nested_calls".into(), Value::Array(nested));
            } else {
                state = json!({"value": state, "nested_calls": nested});
            }
            output.state = Some(state);
        }
        let status = if output.success { AttemptStatus::Executed } else { AttemptStatus::Failed };
        self.finish(session, &call, status, output, started, Some(decision), decided_by).await
    }

    /// A call a before hook stopped (or rewrote into something that would need approval).
    async fn blocked_by_hook(
        &self,
        session: &Session,
        call: &Prepared,
        reason: &str,
        started: Instant,
        decision: String,
        decided_by: Option<String>,
    ) -> CallResult {
        session.emit(Event::Blocked { call_id: call.call_id.clone(), reason: reason.to_owned() });
        let output = ToolOutput::error(ErrorKind::Blocked, format!("Blocked before running: {reason}."))
            .with_state(json!({"type": "blocked", "reason": reason}));
        self.finish(session, call, AttemptStatus::Blocked, output, started, Some(decision), decided_by).await
    }

    fn context(
        &self,
        session: &Arc<Session>,
        call: &Prepared,
        deadline: Instant,
        nested_count: Arc<AtomicU32>,
        nested_log: Arc<Mutex<Vec<Value>>>,
    ) -> CallContext {
        let progress = {
            let session = session.clone();
            let call_id = call.call_id.clone();
            let credentials = self.inner.credentials.clone();
            ProgressSink::new(move |mut progress| {
                let redactor = credentials.redactor();
                for text in [&mut progress.message, &mut progress.output].into_iter().flatten() {
                    redactor.redact_string(text);
                }
                session.emit(Event::Progress { call_id: call_id.clone(), progress })
            })
        };
        let call_cancel = session.call_token(&call.call_id, call.batch_cancel.as_ref());
        let nested = {
            let executor = self.clone();
            let session = session.clone();
            let parent = call.call_id.clone();
            let message_id = call.attempt.message_id.clone();
            let call_cancel = call_cancel.clone();
            NestedCaller::new(move |name, arguments| {
                let executor = executor.clone();
                let session = session.clone();
                let parent = parent.clone();
                let message_id = message_id.clone();
                let parent_cancel = call_cancel.clone();
                let n = nested_count.fetch_add(1, Ordering::Relaxed) + 1;
                let log = nested_log.clone();
                Box::pin(async move {
                    let raw = RawCall { id: format!("{parent}/{n}"), name, arguments: arguments.to_string() };
                    let result = executor
                        .execute_nested(
                            &session,
                            &parent,
                            message_id.as_deref(),
                            raw,
                            Some(deadline),
                            parent_cancel,
                        )
                        .await;
                    log.lock().unwrap_or_else(|p| p.into_inner()).push(json!({
                        "call_id": result.call_id,
                        "tool": result.tool,
                        "api": result.api,
                        "status": result.status.as_str(),
                    }));
                    result.output
                })
            })
        };
        let mut context = CallContext::new(call.call_id.clone(), session.config.id.clone())
            .with_deadline(deadline)
            .with_progress(progress);
        context.user_id = session.config.user_id.clone();
        context.working_directory = session.config.working_directory.clone();
        context.sandbox = if call.approved_files.is_empty() {
            session.sandbox.clone()
        } else {
            // This call's own copy (the pinned handles stay shared), with what was approved.
            let mut sandbox = (*session.sandbox).clone();
            sandbox.files.approved.clone_from(&call.approved_files);
            Arc::new(sandbox)
        };
        context.cancel = call_cancel;
        context.nested = Some(nested);
        context.asker = Some(self.asker(session, call));
        context.tools = Some(Arc::new(crate::exposure::SessionCatalogue {
            toolbox: self.inner.toolbox.clone(),
            session: session.clone(),
        }));
        context.skills = session.config.skills.clone();
        context.preview = self
            .inner
            .toolbox
            .tool(&call.tool)
            .and_then(|entry| entry.api(&call.api))
            .is_some_and(|compiled| previewing(session, &compiled.spec, &call.arguments));
        if session.has_deferred() {
            context.finder = Some(Arc::new(crate::exposure::SessionFinder {
                toolbox: self.inner.toolbox.clone(),
                session: session.clone(),
                call_id: call.call_id.clone(),
            }));
        }
        context
    }

    /// Puts what waits for a person (an approval or a question) on record, pointing at its call.
    /// What cannot be put on record is not asked (see [`crate::durable`]).
    ///
    /// # Errors
    ///
    /// The journal did not take it in time.
    async fn journal_pending(&self, request: &ApprovalRequest, attempt_key: &str) -> Result<(), String> {
        let Some(journal) = &self.inner.journal else { return Ok(()) };
        let row = PendingApproval {
            id: request.id.clone(),
            tenant: request.tenant.clone(),
            session_id: request.session_id.clone(),
            attempt_key: attempt_key.to_owned(),
            call_id: request.call_id.clone(),
            tool: request.tool.clone(),
            api: request.api.clone(),
            arguments: request.arguments.clone(),
            reason: request.reason.clone(),
            status: "pending".into(),
            decision: None,
            decided_by: None,
            created_at: now_ms(),
            decided_at: None,
        };
        self.timed(journal.insert_approval(&row)).await.inspect_err(|error| {
            tracing::warn!(%error, "journal insert_approval failed: the person is not asked");
        })
    }

    /// Records a person's (or a hook's) decision on the approval's row, or keeps it until the
    /// journal takes it.
    async fn journal_decided(
        &self,
        request: &ApprovalRequest,
        status: &str,
        detail: &Value,
        by: Option<&str>,
    ) {
        let Some(journal) = &self.inner.journal else { return };
        if let Err(error) =
            self.timed(journal.decide_approval(&request.tenant, &request.id, status, detail, by)).await
        {
            tracing::warn!(%error, "journal decide_approval failed: kept in the outbox");
            self.keep(OutboxOp::Decide {
                tenant: request.tenant.clone(),
                id: request.id.clone(),
                status: status.to_owned(),
                decision: detail.clone(),
                decided_by: by.map(str::to_owned),
            });
        }
    }

    /// Puts who let a call run on its row before it runs (a person or a hook decided: a crash
    /// while it runs must not lose who), or keeps it until the journal takes it.
    async fn journal_allowed(&self, session: &Session, call: &Prepared, decision: &str, by: &str) {
        let Some(journal) = &self.inner.journal else { return };
        if !call.proposed || call.foreign_key {
            return;
        }
        let tenant = &session.config.tenant;
        if let Err(error) = self.timed(journal.record_decision(tenant, &call.key, decision, Some(by))).await {
            tracing::warn!(%error, "journal record_decision failed: kept in the outbox");
            self.keep(OutboxOp::RecordDecision {
                tenant: tenant.clone(),
                key: call.key.clone(),
                decision: decision.to_owned(),
                decided_by: Some(by.to_owned()),
            });
        }
    }

    /// How `call` asks the session's person a question: on the approvals channel, as a question
    /// (the broker shows it; the journal keeps it with the answer and who gave it). A session with
    /// no person answers at once that no one can.
    fn asker(&self, session: &Arc<Session>, call: &Prepared) -> tool_core::PersonAsker {
        let executor = self.clone();
        let session = session.clone();
        let (call_id, key, tool, api) =
            (call.call_id.clone(), call.key.clone(), call.tool.clone(), call.api.clone());
        let batch_cancel = call.batch_cancel.clone();
        tool_core::PersonAsker::new(move |question| {
            let executor = executor.clone();
            let session = session.clone();
            let asking = Asking {
                call_id: call_id.clone(),
                key: key.clone(),
                tool: tool.clone(),
                api: api.clone(),
                batch_cancel: batch_cancel.clone(),
            };
            Box::pin(async move { executor.ask_person(&session, asking, question).await })
        })
    }

    async fn ask_person(
        &self,
        session: &Session,
        call: Asking,
        question: tool_core::Question,
    ) -> tool_core::Asked {
        use tool_core::Asked;
        let policy = &session.config.policy;
        if policy.no_person || policy.mode == ApprovalMode::Headless {
            return Asked::NoOne {
                reason: if policy.no_person {
                    "no one is at this device to answer".into()
                } else {
                    "the session runs headless: no person is there to answer".into()
                },
            };
        }
        let request = ApprovalRequest {
            id: format!("appr-{:x}", unique()),
            tenant: session.config.tenant.clone(),
            session_id: session.config.id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            api: call.api.clone(),
            arguments: serde_json::to_value(&question).unwrap_or(Value::Null),
            reason: crate::approval::QUESTION.to_owned(),
            question: Some(question.clone()),
            scope: None,
        };
        if let Err(error) = self.journal_pending(&request, &call.key).await {
            return Asked::NoOne {
                reason: format!("the question could not be put on record ({error}); it was not asked"),
            };
        }
        session.emit(Event::QuestionAsked {
            call_id: call.call_id.clone(),
            approval_id: request.id.clone(),
            question: question.clone(),
        });
        let token = session.call_token(&call.call_id, call.batch_cancel.as_ref());
        let mut wait = self.inner.config.approval_timeout;
        if let Some(remaining) = session.remaining() {
            wait = wait.min(remaining);
        }
        let decided = tokio::time::timeout(wait, self.inner.broker.wait(&request, &token, wait))
            .await
            .unwrap_or_default();
        // A broker that does not know questions may answer one as an approval: only an answer
        // that fits is one; an approval is no answer, a denial declines.
        let asked = match decided {
            Some(Decided { decision: Decision::Answer { answer }, by }) => {
                match question.check_answer(&answer) {
                    Ok(()) => Asked::Answered { answer, by: by.unwrap_or_else(|| "a person".into()) },
                    Err(why) => Asked::Declined {
                        by: by.unwrap_or_else(|| "a person".into()),
                        message: Some(format!("the answer given did not fit the question ({why})")),
                    },
                }
            }
            Some(Decided { decision: Decision::DenyWithMessage { message }, by })
                if by.as_deref() == Some(crate::approval::NO_ONE) =>
            {
                Asked::NoOne { reason: message }
            }
            Some(Decided { decision: Decision::DenyWithMessage { message }, by }) => {
                Asked::Declined { by: by.unwrap_or_else(|| "a person".into()), message: Some(message) }
            }
            Some(Decided { by, .. }) => {
                Asked::Declined { by: by.unwrap_or_else(|| "a person".into()), message: None }
            }
            None if token.is_cancelled() => Asked::Cancelled,
            None => Asked::TimedOut,
        };
        let (status, detail, by) = match &asked {
            Asked::Answered { answer, by } => {
                ("answered", json!({"kind": "answer", "answer": answer}), Some(by.clone()))
            }
            Asked::Declined { by, message } => {
                ("declined", json!({"kind": "decline", "message": message}), Some(by.clone()))
            }
            Asked::Cancelled => ("cancelled", Value::Null, None),
            Asked::TimedOut | Asked::NoOne { .. } => ("expired", Value::Null, None),
        };
        self.journal_decided(&request, status, &detail, by.as_deref()).await;
        session.emit(Event::QuestionSettled {
            call_id: call.call_id,
            approval_id: request.id,
            outcome: status.to_owned(),
            by,
        });
        asked
    }

    /// Arguments → API default → global default, clamped to [min, max] (and the API's own max),
    /// to the session's remaining budget and to a parent's deadline. `None` when no time is left.
    fn referee(
        &self,
        arguments: &Value,
        spec: &tool_core::ApiSpec,
        remaining: Option<Duration>,
        parent_deadline: Option<Instant>,
    ) -> Option<Duration> {
        let config = &self.inner.config;
        // `timeout` in milliseconds (commands), or `timeoutSecs` in seconds (code).
        let asked =
            arguments.get("timeout").and_then(Value::as_u64).map(Duration::from_millis).or_else(|| {
                arguments
                    .get("timeoutSecs")
                    .and_then(Value::as_u64)
                    .map(|s| Duration::from_secs(s.min(86_400)))
            });
        let wanted =
            asked.or(spec.default_timeout_ms.map(Duration::from_millis)).unwrap_or(config.default_timeout);
        let max = spec
            .max_timeout_ms
            .map_or(config.max_timeout, |ms| Duration::from_millis(ms).min(config.max_timeout));
        let mut timeout = wanted.clamp(config.min_timeout, max.max(config.min_timeout));
        for limit in [remaining, parent_deadline.map(|d| d.saturating_duration_since(Instant::now()))]
            .into_iter()
            .flatten()
        {
            if limit.is_zero() {
                return None;
            }
            timeout = timeout.min(limit);
        }
        Some(timeout)
    }

    /// Runs the runtime future in this task, panics caught at its boundary (an error result),
    /// under the deadline and the session's cancellation; on expiry the runtime's token fires and
    /// it has a grace period to return what it has.
    async fn dispatch(
        &self,
        runtime: Arc<dyn tool_core::ToolRuntime>,
        api: &str,
        arguments: Value,
        context: CallContext,
        timeout: Duration,
    ) -> ToolOutput {
        let token = context.cancel.clone();
        let deadline = context.deadline.unwrap_or_else(|| Instant::now() + timeout);
        // The runtime runs inside this task (no spawn, no thread hop): a panic is caught at the
        // future's boundary, and an abort is dropping the future.
        let mut handle =
            std::pin::pin!(AssertUnwindSafe(runtime.execute(api, arguments, &context)).catch_unwind());
        let joined = |result: std::thread::Result<ToolOutput>| match result {
            Ok(output) => output,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                ToolOutput::error(
                    ErrorKind::Internal,
                    format!("the tool crashed ({message}); this is a bug in the tool, not in your call"),
                )
            }
        };
        let (stop, early) = tokio::select! {
            biased;
            result = &mut handle => {
                // The runtime may notice the cancellation before this select does and return
                // normally: it still stopped because of the cancel or the deadline.
                let output = joined(result);
                // A runtime that returns after the session's cancel reached its token stopped
                // because of it; one that merely finished at the deadline, unsignalled, did its
                // work and keeps its result (calling it failed would make the model repeat it).
                if token.is_cancelled() {
                    (ErrorKind::Cancelled, Some(output))
                } else {
                    return output;
                }
            }
            () = tokio::time::sleep_until(deadline.into()) => (ErrorKind::Timeout, None),
            () = token.cancelled() => (ErrorKind::Cancelled, None),
        };
        token.cancel();
        let grace = self.inner.config.stop_grace;
        let what = match stop {
            ErrorKind::Timeout => format!("The call timed out after {} ms", timeout.as_millis()),
            _ => "The call was cancelled".to_owned(),
        };
        let output = match early {
            Some(output) => output,
            None => match tokio::time::timeout(grace, &mut handle).await {
                Ok(result) => joined(result),
                Err(_) => {
                    return ToolOutput::error(
                        stop,
                        format!(
                            "{what} and did not stop within {} ms; it produced no result.",
                            grace.as_millis()
                        ),
                    );
                }
            },
        };
        if output.error.as_ref().is_some_and(|e| e.kind == stop) {
            return output;
        }
        let content = if output.content.is_empty() {
            format!("{what}.")
        } else {
            format!("{what}. Output so far:\n{}", output.content)
        };
        ToolOutput {
            content: content.clone(),
            state: output.state,
            success: false,
            error: Some(tool_core::ToolError { kind: stop, message: content }),
        }
    }

    /// Proposes a call that was to be journalled only when it ended (a read), now that it must be
    /// on record first. A key that turns out to be another call's is an error result: the call
    /// then neither runs nor writes under that key. A journal that fails is logged, and the call
    /// is settled by an upsert as when its first propose fails.
    async fn propose_late(&self, call: &mut Prepared) -> Result<(), ToolOutput> {
        let Some(journal) = &self.inner.journal else { return Ok(()) };
        if call.proposed {
            return Ok(());
        }
        match self.timed(journal.propose(&call.attempt)).await {
            Ok(outcome) if outcome.created => call.proposed = true,
            Ok(_) => {
                call.foreign_key = true;
                return Err(ToolOutput::error(
                    ErrorKind::Conflict,
                    format!(
                        "the call `{}` of this message was already made; it is not run twice. Use a new call id.",
                        call.call_id
                    ),
                ));
            }
            Err(error) => {
                // Not on record: it neither waits for a person nor runs.
                tracing::warn!(%error, call_id = call.call_id, "journal propose failed: the call is refused");
                return Err(ToolOutput::error(ErrorKind::Unavailable, crate::durable::refused(&error)));
            }
        }
        Ok(())
    }

    /// The approval step: `Ok((decision, by))` to run, `Err((status, output, decision, by))` not to.
    async fn approve(
        &self,
        session: &Arc<Session>,
        call: &mut Prepared,
        said: &PreHookSay,
        hooks: Option<&dyn CallHooks>,
    ) -> Approved {
        let toolbox = &self.inner.toolbox;
        let entry = toolbox.tool(&call.tool).expect("preflight resolved the tool");
        let compiled = entry.api(&call.api).expect("preflight resolved the API");
        let tier = tier_in(toolbox, session, &compiled.spec, &call.arguments);
        let input = self.decision_input(session, entry, compiled, &call.arguments, tier);
        let call_id = call.call_id.clone();
        let granted =
            |session: &Session, decision: &str, by: &str| granted(session, &call_id, decision, by, None);
        let (reason, always) = match decide(toolbox, &input) {
            // A hook may want a person to look at a call policy would run.
            Verdict::Run(_) if said.ask.is_some() => {
                (format!("a hook asks: {}", said.ask.as_deref().unwrap_or_default()), true)
            }
            Verdict::Run(why) => return granted(session, why, "policy"),
            Verdict::Block(reason) => {
                session.emit(Event::Blocked { call_id: call.call_id.clone(), reason: reason.clone() });
                let output = ToolOutput::error(ErrorKind::Blocked, format!("Blocked: {reason}."))
                    .with_state(json!({"type": "blocked", "reason": reason}));
                // No person was asked: policy decided (the operator's deny list, a read-only
                // session, a boundary no one may cross).
                let decision = if session.config.policy.mode == ApprovalMode::ReadOnly {
                    "read_only_block"
                } else {
                    "policy_block"
                };
                return Err((AttemptStatus::Blocked, output, decision.into(), Some("policy".into())));
            }
            Verdict::Ask { reason, always } => (reason, always),
        };
        // A hook answers for the person only where a grant could: a call that always asks (a
        // dangerous command, a file that steers the agent) waits for a person whatever it says.
        if let Some(by) = said.allow_by.as_ref().filter(|_| !always) {
            return granted(session, "hook_allow", by);
        }
        let paths = call_paths_of(session, &compiled.spec, &call.arguments);
        if !always && said.ask.is_none() {
            let command = compiled.spec.command_in(&call.arguments);
            if session.granted(&call.tool, &call.api, command, paths.as_ref()) {
                return granted(session, "allow_session", "session grant");
            }
            if self.remembered_covers(session, &call.tool, &call.api, command, paths.as_ref()).await {
                return granted(session, "remembered", "remembered decision");
            }
        }
        if session.config.policy.mode == ApprovalMode::Headless || session.config.policy.no_person {
            session.emit(Event::Blocked { call_id: call.call_id.clone(), reason: reason.clone() });
            let output = ToolOutput::error(ErrorKind::Blocked, BLOCKED_CONTENT)
                .with_state(json!({"type": "blocked", "reason": reason}));
            return Err((AttemptStatus::Blocked, output, "headless_block".into(), Some("policy".into())));
        }

        // The approval's id is made now: hooks that answer for the person are told it (a script
        // links to where the person decides it), and the person is asked under it.
        let approval_id = format!("appr-{:x}", unique());
        // Hooks may answer for the person.
        if let Some(hooks) = hooks
            && let Some(answered) =
                self.hooks_answer(session, call, hooks, &reason, &approval_id, always).await
        {
            return answered;
        }

        // A read journalled only when it ends is proposed now: it waits for a person, and what
        // waits is on record (and the approval's row points at it).
        if let Err(output) = self.propose_late(call).await {
            let unavailable = output.error.as_ref().is_some_and(|e| e.kind == ErrorKind::Unavailable);
            let decision = if unavailable { "unavailable" } else { "conflict" };
            return Err((AttemptStatus::Failed, output, decision.into(), None));
        }
        let request = ApprovalRequest {
            id: approval_id,
            tenant: session.config.tenant.clone(),
            session_id: session.config.id.clone(),
            call_id: call.call_id.clone(),
            tool: call.tool.clone(),
            api: call.api.clone(),
            arguments: call.arguments.clone(),
            reason: reason.clone(),
            question: None,
            scope: paths.as_ref().and_then(crate::scope::suggest),
        };
        if let Err(error) = self.journal_pending(&request, &call.key).await {
            let output = ToolOutput::error(ErrorKind::Unavailable, crate::durable::refused(&error));
            return Err((AttemptStatus::Failed, output, "unavailable".into(), None));
        }
        // What the person is shown is what runs: the files the call's paths name now, by device
        // and inode, for the runtime to check when it opens them.
        call.approved_files = approved_files(
            compiled.spec.path_params.iter().flat_map(|param| param.select(&call.arguments)),
            session.config.working_directory.as_deref(),
        );
        tracing::info!(
            event = "approval.asked",
            tenant = %request.tenant,
            session = %request.session_id,
            call = %request.call_id,
            tool = %request.tool,
            api = %request.api,
            approval = %request.id,
            reason = %reason,
            "a call waits for a person"
        );
        session.emit(Event::PermissionRequested {
            call_id: call.call_id.clone(),
            approval_id: request.id.clone(),
            reason,
        });
        // Nobody is asked for longer than the call could still run: the session's budget and a
        // parent's deadline bound the wait too.
        let mut wait = self.inner.config.approval_timeout;
        for limit in
            [session.remaining(), call.parent_deadline.map(|d| d.saturating_duration_since(Instant::now()))]
                .into_iter()
                .flatten()
        {
            wait = wait.min(limit);
        }
        // The call's own token: it fires with the session's, or when this one call is cancelled.
        let token = session.call_token(&call.call_id, call.batch_cancel.as_ref());
        let decided = tokio::time::timeout(wait, self.inner.broker.wait(&request, &token, wait))
            .await
            .unwrap_or_default();
        self.settle_decided(session, call, &request, paths.as_ref(), decided, token.is_cancelled()).await
    }

    /// The operator's `PermissionRequest` hooks on a call that would ask a person: `Some` when one
    /// answered (allowed — with new arguments, checked as the first were —, or denied), `None` to
    /// ask the person. A call that always asks takes no hook's allow.
    async fn hooks_answer(
        &self,
        session: &Arc<Session>,
        call: &mut Prepared,
        hooks: &dyn CallHooks,
        reason: &str,
        approval_id: &str,
        always: bool,
    ) -> Option<Approved> {
        let toolbox = &self.inner.toolbox;
        let entry = toolbox.tool(&call.tool).expect("preflight resolved the tool");
        let compiled = entry.api(&call.api).expect("preflight resolved the API");
        let view = hooked(session, call, &call.arguments);
        if !hooks.matches("PermissionRequest", &view) {
            return None;
        }
        let token = session.call_token(&call.call_id, call.batch_cancel.as_ref());
        let answer = tokio::select! {
            answer = hooks.permission_request(&view, reason, approval_id) => answer,
            () = token.cancelled() => return Some(Err((
                AttemptStatus::Failed,
                ToolOutput::error(ErrorKind::Cancelled, "The call was cancelled while its hooks ran."),
                "cancelled".into(),
                None,
            ))),
        };
        self.absorb(session, call, "PermissionRequest", &answer);
        let by = answer.decided_by.clone().unwrap_or_else(|| "hook".into());
        match answer.decision {
            Some(HookDecision::Allow) if always => {
                session.emit(Event::HookNote {
                    call_id: call.call_id.clone(),
                    hook: by.clone(),
                    message: "its allow was not taken: this call always needs a person's approval".into(),
                });
                None
            }
            Some(HookDecision::Allow) => {
                if let Some(new) = answer.updated_input {
                    let mut new = new;
                    drop_null_fields(&mut new);
                    let violations = compiled.violations(&new);
                    let tier = tier_in(toolbox, session, &compiled.spec, &new);
                    let input = self.decision_input(session, entry, compiled, &new, tier);
                    let refused = if violations.is_empty() {
                        match decide(toolbox, &input) {
                            Verdict::Block(reason) => Some(reason),
                            _ => None,
                        }
                    } else {
                        Some(format!("its new arguments do not match the schema: {}", violations.join("; ")))
                    };
                    if let Some(refused) = refused {
                        let reason = format!("{by} allowed this call with other arguments, but {refused}");
                        session
                            .emit(Event::Blocked { call_id: call.call_id.clone(), reason: reason.clone() });
                        let output = ToolOutput::error(ErrorKind::Blocked, format!("Blocked: {reason}."))
                            .with_state(json!({"type": "blocked", "reason": reason}));
                        return Some(Err((AttemptStatus::Blocked, output, "hook_allow".into(), Some(by))));
                    }
                    call.hook_log
                        .push(json!({"event": "PermissionRequest", "hook": by, "updated_input": new}));
                    call.arguments = new;
                }
                self.journal_allowed(session, call, "hook_allow", &by).await;
                Some(granted(session, &call.call_id, "hook_allow", &by, None))
            }
            Some(HookDecision::Deny) => {
                let message = format!(
                    "A hook of the user's ({by}) denied this call: {}",
                    answer.reason.as_deref().unwrap_or("no reason given")
                );
                session.emit(Event::PermissionDenied {
                    call_id: call.call_id.clone(),
                    message: message.clone(),
                    approval_id: None,
                    outcome: Some("denied".into()),
                });
                Some(Err((
                    AttemptStatus::Denied,
                    ToolOutput::error(ErrorKind::Denied, message),
                    "hook_deny".into(),
                    Some(by),
                )))
            }
            Some(HookDecision::Ask) | None => None,
        }
    }

    /// A call whose approval no one could answer: journalled as `no_answer` (no one named) and
    /// blocked with the text a headless session gets, and why.
    async fn no_answer(
        &self,
        session: &Arc<Session>,
        call: &Prepared,
        request: &ApprovalRequest,
        reason: String,
    ) -> Approved {
        tracing::info!(
            event = "approval.no_answer",
            tenant = %request.tenant,
            session = %request.session_id,
            call = %request.call_id,
            approval = %request.id,
            reason = %reason,
            "an approval could not be put to anyone"
        );
        let detail = json!({"kind": "no_answer", "reason": reason});
        self.journal_decided(request, "no_answer", &detail, None).await;
        session.emit(Event::Blocked { call_id: call.call_id.clone(), reason: reason.clone() });
        let output = ToolOutput::error(ErrorKind::Blocked, BLOCKED_CONTENT)
            .with_state(json!({"type": "blocked", "reason": reason}));
        Err((AttemptStatus::Blocked, output, "no_answer".into(), None))
    }

    /// What a person's decision (or none: expired, cancelled) does to a call that waited for it:
    /// journalled on the approval's row and, when it allows, on the call's before it runs; a
    /// grant for the session or a remembered rule as the decision says (for a command, never
    /// wider than the command or prefix shown); a denial with the message the model reads.
    async fn settle_decided(
        &self,
        session: &Arc<Session>,
        call: &Prepared,
        request: &ApprovalRequest,
        asked_paths: Option<&crate::scope::CallPaths>,
        decided: Option<Decided>,
        cancelled: bool,
    ) -> Approved {
        let entry = self.inner.toolbox.tool(&call.tool).expect("preflight resolved the tool");
        let compiled = entry.api(&call.api).expect("preflight resolved the API");
        // No one answered (a client with nobody to ask cancelled its form, or cannot show one):
        // not a person's denial, and no person is named.
        let decided = match decided {
            Some(d) if d.by.as_deref() == Some(crate::approval::NO_ONE) && !d.decision.allows() => {
                let reason = match d.decision {
                    Decision::DenyWithMessage { message } => message,
                    _ => "no one answered".to_owned(),
                };
                return self.no_answer(session, call, request, reason).await;
            }
            decided => decided,
        };
        let status_text = match &decided {
            Some(d) => d.decision.name(),
            None if cancelled => "cancelled",
            None => "expired",
        };
        match &decided {
            Some(d) => tracing::info!(
                event = "approval.decided",
                tenant = %request.tenant,
                session = %request.session_id,
                call = %request.call_id,
                approval = %request.id,
                decision = d.decision.name(),
                by = d.by.as_deref().unwrap_or("a person"),
                "an approval was decided"
            ),
            None => tracing::info!(
                event = if cancelled { "approval.cancelled" } else { "approval.expired" },
                tenant = %request.tenant,
                session = %request.session_id,
                call = %request.call_id,
                approval = %request.id,
                "an approval ended undecided"
            ),
        }
        let detail = decided
            .as_ref()
            .map_or(Value::Null, |d| serde_json::to_value(&d.decision).unwrap_or(Value::Null));
        self.journal_decided(request, status_text, &detail, decided.as_ref().and_then(|d| d.by.as_deref()))
            .await;
        match decided {
            Some(Decided { decision, by }) if decision.allows() => {
                let by = by.unwrap_or_else(|| "a person".into());
                self.journal_allowed(session, call, decision.name(), &by).await;
                let command = compiled.spec.command_in(&call.arguments);
                let working_directory = session.config.working_directory.as_deref();
                // A call naming files: the grant or rule holds the scope shown (the file, or the
                // folder the person chose), never the API for every path.
                // The files as they resolve now must be the files the person was shown: a link
                // swapped in while the question waited grants nothing.
                let paths = call_paths_of(session, &compiled.spec, &call.arguments).map(|now| {
                    if asked_paths == Some(&now) { now } else { crate::scope::CallPaths::ungrantable() }
                });
                let scopes = |asked: &Option<String>| {
                    paths
                        .as_ref()
                        .map(|paths| crate::scope::chosen(paths, asked.as_deref(), working_directory))
                };
                match &decision {
                    Decision::AllowSession { argument_prefix }
                    | Decision::AllowAlways { argument_prefix }
                        if paths.is_some()
                            && (session.project().is_empty()
                                || matches!(decision, Decision::AllowSession { .. })) =>
                    {
                        let scopes = scopes(argument_prefix).unwrap_or_default();
                        session.grant_scopes(&call.tool, &call.api, &scopes);
                    }
                    Decision::AllowAlways { argument_prefix } if paths.is_some() => {
                        for scope in scopes(argument_prefix).unwrap_or_default() {
                            self.remember(session, &call.tool, &call.api, Some(scope), Some(by.clone()))
                                .await;
                        }
                    }
                    // For a command, a session grant covers a prefix (this command by default), never
                    // every command for the rest of the session.
                    // "This command for the session": that command word for word, not it with
                    // more arguments (`rm -rf target` must not cover `rm -rf target ~`).
                    Decision::AllowSession { argument_prefix: None }
                    | Decision::AllowAlways { argument_prefix: None }
                        if session.project().is_empty()
                            || matches!(decision, Decision::AllowSession { .. }) =>
                    {
                        match command {
                            Some(command) => session.grant_exact(&call.tool, &call.api, command),
                            None => session.grant(&call.tool, &call.api, None),
                        }
                    }
                    Decision::AllowSession { argument_prefix } => {
                        session.grant(&call.tool, &call.api, grant_prefix(argument_prefix, command));
                    }
                    // Without a project there is nothing to remember it for: it holds for the session.
                    Decision::AllowAlways { argument_prefix } if session.project().is_empty() => {
                        session.grant(&call.tool, &call.api, grant_prefix(argument_prefix, command));
                    }
                    Decision::AllowAlways { argument_prefix } => {
                        self.remember(
                            session,
                            &call.tool,
                            &call.api,
                            argument_prefix.clone(),
                            Some(by.clone()),
                        )
                        .await;
                    }
                    _ => {}
                }
                granted(session, &call.call_id, decision.name(), &by, Some(&request.id))
            }
            Some(Decided { decision, by }) => {
                let message = match &decision {
                    Decision::DenyWithMessage { message } => format!("The user denied this call: {message}"),
                    _ => "The user denied this call. Do not retry it; ask the user or take another approach."
                        .to_owned(),
                };
                session.emit(Event::PermissionDenied {
                    call_id: call.call_id.clone(),
                    message: message.clone(),
                    approval_id: Some(request.id.clone()),
                    outcome: Some("denied".into()),
                });
                Err((
                    AttemptStatus::Denied,
                    ToolOutput::error(ErrorKind::Denied, message),
                    decision.name().to_owned(),
                    by,
                ))
            }
            None if cancelled => Err((
                AttemptStatus::Failed,
                ToolOutput::error(ErrorKind::Cancelled, "The call was cancelled while waiting for approval."),
                "cancelled".into(),
                None,
            )),
            None => {
                let message = format!(
                    "No one approved this call within {} s, so it was not run.",
                    self.inner.config.approval_timeout.as_secs()
                );
                session.emit(Event::PermissionDenied {
                    call_id: call.call_id.clone(),
                    message: message.clone(),
                    approval_id: Some(request.id.clone()),
                    outcome: Some("expired".into()),
                });
                Err((
                    AttemptStatus::Denied,
                    ToolOutput::error(ErrorKind::Denied, message),
                    "expired".into(),
                    None,
                ))
            }
        }
    }

    /// What approval decides on: `arguments` of `compiled` in `session`.
    fn decision_input<'a>(
        &'a self,
        session: &'a Session,
        entry: &'a crate::toolbox::ToolEntry,
        compiled: &'a crate::toolbox::CompiledApi,
        arguments: &'a Value,
        tier: Tier,
    ) -> DecisionInput<'a> {
        DecisionInput {
            entry,
            api: compiled,
            arguments,
            tier,
            policy: &session.config.policy,
            working_directory: session.config.working_directory.as_deref(),
            temp_directory: session.config.temp_directory.as_deref(),
            hard_roots: session.config.hard_roots.as_deref(),
            deny: self.inner.deny.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone(),
        }
    }

    /// `PreToolUse`: the session's hooks before approval. `Err` is the call's result when a
    /// hook denied it, rewrote it into an invalid shape, or the call was cancelled meanwhile.
    async fn pre_tool_use(
        &self,
        session: &Arc<Session>,
        hooks: &dyn CallHooks,
        call: &mut Prepared,
        started: Instant,
    ) -> Result<PreHookSay, Box<CallResult>> {
        let view = hooked(session, call, &call.arguments);
        if !hooks.matches("PreToolUse", &view) {
            return Ok(PreHookSay::default());
        }
        let token = session.call_token(&call.call_id, call.batch_cancel.as_ref());
        let answer = tokio::select! {
            answer = hooks.pre_tool_use(&view) => answer,
            () = token.cancelled() => {
                let output = ToolOutput::error(ErrorKind::Cancelled, "The call was cancelled while its hooks ran.");
                return Err(Box::new(self.finish(session, call, AttemptStatus::Failed, output, started, None, None).await));
            }
        };
        self.absorb(session, call, "PreToolUse", &answer);
        let by = answer.decided_by.clone().unwrap_or_else(|| "hook".into());
        if answer.decision == Some(HookDecision::Deny) {
            let reason =
                format!("{by}: {}", answer.reason.as_deref().unwrap_or("denied by a hook of the user's"));
            return Err(Box::new(
                self.blocked_by_hook(session, call, &reason, started, "hook_deny".into(), Some(by)).await,
            ));
        }
        if let Some(mut new) = answer.updated_input {
            let toolbox = &self.inner.toolbox;
            // As the model's arguments are: prepared, then strict-mode nulls dropped.
            if let Some(prepare) = toolbox.prepare(&call.tool, &call.api) {
                new = prepare(new);
            }
            drop_null_fields(&mut new);
            let compiled = toolbox.tool(&call.tool).and_then(|entry| entry.api(&call.api));
            let violations = compiled.map(|compiled| compiled.violations(&new)).unwrap_or_default();
            if !violations.is_empty() {
                let output = ToolOutput::error(
                    ErrorKind::Internal,
                    format!(
                        "a hook of the user's rewrote the arguments into an invalid shape, so the call was not run: {}",
                        violations.join("; ")
                    ),
                );
                return Err(Box::new(
                    self.finish(session, call, AttemptStatus::Failed, output, started, None, Some(by)).await,
                ));
            }
            call.hook_log.push(json!({"event": "PreToolUse", "hook": by, "updated_input": new}));
            // A row not yet written says what tier of call runs.
            if !call.proposed
                && let Some(compiled) = compiled
            {
                call.attempt.tier =
                    Some(format!("{:?}", tier_in(toolbox, session, &compiled.spec, &new)).to_lowercase());
            }
            call.arguments = new;
        }
        Ok(match answer.decision {
            Some(HookDecision::Allow) => PreHookSay { allow_by: Some(by), ask: None },
            Some(HookDecision::Ask) => PreHookSay {
                allow_by: None,
                ask: Some(
                    answer.reason.unwrap_or_else(|| format!("{by} wants a person to confirm this call")),
                ),
            },
            _ => PreHookSay::default(),
        })
    }

    /// Takes in what hooks said at `event`: notes become events, context is kept for the model,
    /// and what they did is kept for the journal.
    fn absorb(&self, session: &Session, call: &mut Prepared, event: &str, answer: &HookAnswer) {
        for note in &answer.notes {
            session.emit(Event::HookNote {
                call_id: call.call_id.clone(),
                hook: note.hook.clone(),
                message: note.message.clone(),
            });
        }
        call.hook_context.extend(answer.context.iter().cloned());
        if answer.decision.is_some() || !answer.context.is_empty() || !answer.notes.is_empty() {
            call.hook_log.push(json!({
                "event": event,
                "decision": answer.decision.map(|d| format!("{d:?}").to_lowercase()),
                "hook": answer.decided_by,
                "reason": answer.reason,
                "context": answer.context,
                "notes": answer.notes.iter().map(|n| json!({"hook": n.hook, "message": n.message})).collect::<Vec<_>>(),
            }));
        }
    }

    async fn remember(
        &self,
        session: &Session,
        tool: &str,
        api: &str,
        prefix: Option<String>,
        by: Option<String>,
    ) {
        let decision = RememberedDecision {
            id: format!("rem-{:x}", unique()),
            tenant: session.config.tenant.clone(),
            project: session.project(),
            tool: tool.to_owned(),
            api: api.to_owned(),
            argument_prefix: prefix,
            created_by: by,
            created_at: now_ms(),
        };
        tracing::info!(
            event = "rule.saved",
            tenant = %decision.tenant,
            project = %decision.project,
            rule = %decision.id,
            tool = %decision.tool,
            api = %decision.api,
            prefix = decision.argument_prefix.as_deref().unwrap_or("*"),
            by = decision.created_by.as_deref().unwrap_or(""),
            "an \"always allow\" rule was saved"
        );
        match &self.inner.journal {
            Some(journal) => {
                if let Err(error) = self.timed(journal.remember(&decision)).await {
                    tracing::warn!(%error, "journal remember failed: the rule holds for this session only");
                    session.grant(tool, api, decision.argument_prefix.clone());
                }
            }
            None => self.inner.remembered.lock().unwrap_or_else(|p| p.into_inner()).push(decision),
        }
    }

    /// Whether a remembered decision covers the call; a store that cannot answer covers nothing.
    async fn remembered_covers(
        &self,
        session: &Session,
        tool: &str,
        api: &str,
        command: Option<&str>,
        paths: Option<&crate::scope::CallPaths>,
    ) -> bool {
        let project = session.project();
        let decisions = match &self.inner.journal {
            Some(journal) => match journal.remembered(&session.config.tenant, Some(&project)).await {
                Ok(decisions) => decisions,
                Err(error) => {
                    tracing::warn!(%error, "journal remembered failed; asking instead");
                    return false;
                }
            },
            None => self.inner.remembered.lock().unwrap_or_else(|p| p.into_inner()).clone(),
        };
        let mut mine = decisions.iter().filter(|d| {
            d.tenant == session.config.tenant
                && d.project == project
                && d.tool == tool
                && (d.api == api || d.api == "*")
        });
        if let Some(paths) = paths {
            return paths.covered_by(mine.map(|d| d.argument_prefix.as_deref()));
        }
        mine.any(|d| match (&d.argument_prefix, command) {
            (None, _) => true,
            (Some(prefix), Some(command)) => prefix_covers(prefix, command),
            (Some(_), None) => false,
        })
    }

    /// Cleans and cuts the output, records it, emits the last event.
    #[allow(clippy::too_many_arguments)]
    async fn finish(
        &self,
        session: &Session,
        call: &Prepared,
        status: AttemptStatus,
        mut output: ToolOutput,
        started: Instant,
        decision: Option<String>,
        decided_by: Option<String>,
    ) -> CallResult {
        // Control characters out first (what is stored and shown has none), so that a value
        // interleaved with them (UTF-16, NULs) is whole when it is looked for.
        if has_controls(&output.content) {
            output.content = strip_controls(&output.content);
        }
        if let Some(error) = &mut output.error
            && has_controls(&error.message)
        {
            error.message = strip_controls(&error.message);
        }
        if let Some(state) = &mut output.state {
            journal::strip_controls_json(state);
        }
        // No credential's value goes further, in any form it travels in.
        let redactor = self.inner.credentials.redactor();
        redactor.redact_output(&mut output);
        // Cut for the model; the journal keeps the whole, which `journal://KEY` reads on.
        let key = (self.inner.journal.is_some() && !call.foreign_key).then_some(call.key.as_str());
        let whole = cut_for_model(&mut output.content, self.inner.config.content_budget, key);
        // What the person's hooks said for the model comes after the cut, never cut away (each
        // hook's text is bounded where it is read).
        for context in &call.hook_context {
            output.content.push_str("\n\n<hook-context>\n");
            output.content.push_str(&strip_controls(&redactor.redact(context)));
            output.content.push_str("\n</hook-context>");
        }
        if !call.hook_log.is_empty() {
            let mut log = Value::Array(call.hook_log.clone());
            redactor.redact_value(&mut log);
            match &mut output.state {
                Some(Value::Object(map)) => {
                    map.insert("hooks".into(), log);
                }
                Some(other) => output.state = Some(json!({"value": other.take(), "hooks": log})),
                None => output.state = Some(json!({"hooks": log})),
            }
        }
        let result = CallResult {
            call_id: call.call_id.clone(),
            name: call.name.clone(),
            tool: Some(call.tool.clone()),
            api: Some(call.api.clone()),
            status,
            output,
            duration_ms: started.elapsed().as_millis() as u64,
        };
        match status {
            AttemptStatus::Executed => {
                session.emit(Event::Finished { call_id: call.call_id.clone(), output: result.output.clone() })
            }
            AttemptStatus::Blocked => {}
            _ => session.emit(Event::Failed { call_id: call.call_id.clone(), output: result.output.clone() }),
        }
        if !call.foreign_key {
            self.record(
                session,
                &call.key,
                &call.attempt,
                call.proposed,
                &result,
                whole,
                decision,
                decided_by,
            )
            .await;
        }
        result
    }

    /// Settles the row this call proposed (or inserts it settled when the propose failed).
    #[allow(clippy::too_many_arguments)]
    async fn record(
        &self,
        session: &Session,
        key: &str,
        attempt: &NewAttempt,
        proposed: bool,
        result: &CallResult,
        whole: Option<String>,
        decision: Option<String>,
        decided_by: Option<String>,
    ) {
        let Some(journal) = &self.inner.journal else { return };
        let content =
            whole.map_or_else(|| result.output.content.clone(), |whole| keep_at_most(whole, MAX_KEPT_BYTES));
        let exit_status = result
            .output
            .state
            .as_ref()
            .and_then(|s| s.get("exit"))
            .and_then(|e| e.get("code"))
            .and_then(Value::as_i64)
            .map(|c| c as i32);
        let settlement = Settlement {
            status: result.status,
            result: Some(json!({"content": content, "state": result.output.state})),
            error_kind: result.output.error.as_ref().map(|e| e.kind.as_str().to_owned()),
            error: result.output.error.as_ref().map(|e| e.message.clone()),
            decision,
            decided_by,
            duration_ms: Some(result.duration_ms as i64),
            exit_status,
        };
        let settle = async {
            if proposed {
                self.timed(journal.settle(&session.config.tenant, key, &settlement)).await
            } else {
                self.timed(journal.upsert_settled(attempt, &settlement)).await
            }
        };
        let outcome = settle.instrument(debug_span!("journal.settle")).await;
        if let Err(error) = outcome {
            // The call has ended: how is kept until the journal takes it (and a retry of its
            // message reads it from there meanwhile).
            tracing::warn!(%error, key, "journal settle failed: kept in the outbox");
            self.keep(if proposed {
                OutboxOp::Settle { tenant: session.config.tenant.clone(), key: key.to_owned(), settlement }
            } else {
                OutboxOp::Upsert { attempt: Box::new(attempt.clone()), settlement }
            });
        }
    }
}

/// A call's span for traces, as the GenAI semantic conventions name it: `execute_tool
/// {function}`. (At debug level: without a subscriber that wants it, such as the server's OTLP
/// exporter, it costs nothing.)
fn call_span(session: &Session, call: &RawCall) -> tracing::Span {
    debug_span!(
        "execute_tool",
        otel.name = %format!("execute_tool {}", call.name),
        gen_ai.operation.name = "execute_tool",
        gen_ai.tool.name = %call.name,
        gen_ai.tool.call.id = %call.id,
        toolhost.session.id = %session.config.id,
        toolhost.tenant = %session.config.tenant,
        toolhost.status = tracing::field::Empty,
        error = tracing::field::Empty,
    )
}

/// Notes how a call ended on its span (an error status for a call that did not execute).
fn failed(span: &tracing::Span, result: &CallResult) {
    span.record("toolhost.status", result.status.as_str());
    if result.status != AttemptStatus::Executed {
        let kind = result.output.error.as_ref().map_or("failed", |e| e.kind.as_str());
        span.record("error", kind);
    }
}

/// The most of one call's output the journal keeps (what `journal://KEY` reads); past it, the
/// end is left out and said so. (A device serving a server cuts at this, not at the model's
/// budget: the server cuts for the model and keeps the whole.)
pub const MAX_KEPT_BYTES: usize = 1024 * 1024;

/// Cuts `content` to `budget` characters for the model, with a note naming the journal's address
/// of the row `key`, where the whole is kept, to read on (or, without one, saying to ask for
/// less). Returns the whole content when it was cut. (The address is made only then: this runs
/// for every call.)
fn cut_for_model(content: &mut String, budget: usize, key: Option<&str>) -> Option<String> {
    let total = content.chars().count();
    if total <= budget {
        return None;
    }
    let address = key.map(|key| format!("journal://{}", tool_core::urls::encode(key)));
    let cut: String = content.chars().take(budget).collect();
    // The line the cut fell in is read again whole (lines as addresses count them: a long one in
    // pieces, so the cut of a one-line output reads on where it stopped).
    let line = tool_core::urls::pieces(&cut).count().max(1);
    let kept =
        if content.len() <= MAX_KEPT_BYTES { "The whole output is kept" } else { "Its first MiB is kept" };
    let note = match address {
        Some(ref address) => format!(
            "[Output truncated: showing the first {budget} of {total} characters. {kept}: read on with \
             readFile \"{address}:{line}-\" (or a range, \"{address}:{line}-{}\").]",
            line + 199
        ),
        None => format!(
            "[Output truncated: showing the first {budget} of {total} characters. Ask for less (a line range, a \
             narrower pattern) to see the rest.]"
        ),
    };
    Some(std::mem::replace(content, format!("{cut}\n\n{note}")))
}

/// `text` cut to at most `max` bytes at a character boundary, marked when cut.
fn keep_at_most(mut text: String, max: usize) -> String {
    if text.len() <= max {
        return text;
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let total = text.len();
    text.truncate(end);
    text.push_str(&format!("\n[… {} more bytes were not kept]", total - end));
    text
}

/// Parses the model's argument string; an empty string is an empty object.
fn parse_arguments(name: &str, raw: &str) -> Result<Value, String> {
    if raw.trim().is_empty() {
        return Ok(json!({}));
    }
    match serde_json::from_str::<Value>(raw) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(other) => {
            Err(format!("The arguments of `{name}` must be a JSON object, not {}.", kind_of(&other)))
        }
        Err(error) if error.is_eof() => Err(format!(
            "The arguments of `{name}` are truncated JSON: they end before the object closes, probably because the response hit its length limit. Call it again with complete arguments; split large content into several smaller calls."
        )),
        Err(error) => {
            Err(format!("The arguments of `{name}` are not valid JSON ({error}). Send a JSON object."))
        }
    }
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The unknown-tool message: the closest names first; from the third unknown name in a session
/// a directive instead of the same error again.
fn unknown_tool_message(session: &Session, name: &str, unknown_so_far: u32) -> String {
    // Hidden functions are never named to the model.
    let shown = |n: &&str| session.exposure_of(n) != tool_core::Exposure::Hidden;
    let names = &session.names;
    let closest: Vec<&str> = names.closest(name, 8).into_iter().filter(shown).take(3).collect();
    if unknown_so_far > 2 {
        let all: Vec<&str> = names.names().filter(shown).collect();
        return format!(
            "`{name}` is not a tool. You have called tools that do not exist {unknown_so_far} times in this session. Stop guessing names: use only these tools: {}. If none fits, answer without a tool.",
            all.join(", ")
        );
    }
    if closest.is_empty() {
        format!("`{name}` is not a tool in this session. Use one of the tools you were given.")
    } else {
        format!(
            "`{name}` is not a tool in this session. Did you mean {}?",
            closest.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
        )
    }
}

/// The stored result of the same call made earlier under the same key (same session, tool, API
/// and arguments), once it has settled; `None` for a call still running or a different one.
async fn replayed(
    journal: &dyn journal::Journal,
    outbox: &Outbox,
    attempt: &journal::NewAttempt,
    call: &RawCall,
    tool: &str,
    api: &str,
) -> Option<CallResult> {
    let mut row = journal.get(&attempt.tenant, &attempt.key()).await.ok().flatten()?;
    let mut arguments = attempt.arguments.clone();
    journal::strip_controls_json(&mut arguments);
    let same = row.session_id == attempt.session_id
        && row.tool == tool
        && row.api == api
        && row.arguments == arguments;
    if !same {
        return None;
    }
    if !row.status.is_settled() {
        // Ended, with its settlement waiting in the outbox: that is its result.
        let waiting = outbox.settlement(&attempt.tenant, &attempt.key())?;
        row.status = waiting.status;
        row.result = waiting.result;
        row.error_kind = waiting.error_kind;
        row.error = waiting.error;
        row.duration_ms = waiting.duration_ms;
    }
    let stored = row.result.unwrap_or(Value::Null);
    let content = stored.get("content").and_then(Value::as_str).unwrap_or_default().to_owned();
    let state = stored.get("state").filter(|s| !s.is_null()).cloned();
    let error = row.error_kind.as_deref().map(|kind| tool_core::ToolError {
        kind: serde_json::from_value(Value::String(kind.to_owned())).unwrap_or(ErrorKind::Internal),
        message: row.error.clone().unwrap_or_default(),
    });
    let success = matches!(row.status, AttemptStatus::Executed | AttemptStatus::Confirmed);
    Some(CallResult {
        call_id: call.id.clone(),
        name: call.name.clone(),
        tool: Some(tool.to_owned()),
        api: Some(api.to_owned()),
        status: row.status,
        output: ToolOutput { content, state, success, error },
        duration_ms: row.duration_ms.and_then(|ms| u64::try_from(ms).ok()).unwrap_or(0),
    })
}

/// What a session grant of a command covers: the prefix a person named, else the command itself
/// (with more plain arguments, never chained with another).
/// The files a call names, resolved for grants ([`crate::scope`]); a session whose files are on
/// another machine (a device) has none this machine can resolve, so its file calls are granted
/// once only.
fn call_paths_of(
    session: &Session,
    spec: &tool_core::ApiSpec,
    arguments: &Value,
) -> Option<crate::scope::CallPaths> {
    let paths = crate::scope::call_paths(spec, arguments, session.config.working_directory.as_deref())?;
    Some(if session.config.policy.paths_elsewhere { crate::scope::CallPaths::ungrantable() } else { paths })
}

fn grant_prefix(named: &Option<String>, command: Option<&str>) -> Option<String> {
    named.clone().or_else(|| command.map(|command| command.trim().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_parsing_diagnoses_truncation() {
        let cases = [
            ("", Ok(json!({}))),
            (r#"{"a": 1}"#, Ok(json!({"a": 1}))),
            (r#"{"path": "src/ma"#, Err("truncated JSON")),
            (r#"{"a": 1,}"#, Err("not valid JSON")),
            ("[1]", Err("must be a JSON object, not an array")),
        ];
        for (raw, expected) in cases {
            match (parse_arguments("f", raw), expected) {
                (Ok(value), Ok(expected)) => assert_eq!(value, expected),
                (Err(message), Err(needle)) => assert!(message.contains(needle), "{raw}: {message}"),
                (got, expected) => panic!("{raw}: got {got:?}, expected {expected:?}"),
            }
        }
    }

    #[test]
    fn unknown_names_suggest_then_direct_and_never_name_hidden_ones() {
        let names =
            tool_core::ToolNames::build([("fs", "readFile"), ("fs", "writeFile"), ("fs", "readSecrets")]);
        let mut exposures = crate::exposure::Exposures::default();
        exposures.by_name.insert("readSecrets".into(), tool_core::Exposure::Hidden);
        let session = Session::new(SessionConfig::default(), names, exposures);
        assert!(unknown_tool_message(&session, "read_file", 1).contains("Did you mean `readFile`"));
        assert!(unknown_tool_message(&session, "read_file", 2).contains("Did you mean"));
        assert!(!unknown_tool_message(&session, "readSecret", 1).contains("readSecrets"));
        let third = unknown_tool_message(&session, "read_file", 3);
        assert!(third.contains("Stop guessing") && third.contains("readFile, writeFile"), "{third}");
        assert!(!third.contains("readSecrets"), "{third}");
    }
}
