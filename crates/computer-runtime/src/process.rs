//! Running shell commands for an agent: foreground with a timeout, or in the
//! background with incremental output polling.
//!
//! # Why output goes to a file, not a pipe
//!
//! Every command writes its stdout *and* stderr into one spill file (two
//! duplicates of the same descriptor, so they share one file offset and
//! interleave in the order they were written). We never read from a pipe, so
//! we never wait for EOF: a grandchild that keeps the output descriptor open
//! (`sleep 30 & echo hi`) cannot make us hang. We only wait for the *direct*
//! child to exit and then read whatever the file holds. The file also keeps
//! the full output when we only show the agent a head and a tail of it.
//!
//! # Process groups
//!
//! Each command runs in its own process group, so killing it means signalling
//! the whole group (`SIGTERM`, a grace period, then `SIGKILL`), which also
//! reaches the background jobs and pipelines the shell started.
//!
//! # What a command gets
//!
//! A clean environment ([`EnvPolicy`](crate::env::EnvPolicy): an allow-list, never
//! the parent's secrets), `TMPDIR` set to the session's own temp folder, and the
//! session's sandbox, entered between fork and exec so that everything the shell
//! starts stays inside it. Background jobs belong to the session that started
//! them (its `owner`): their ids are random, and only the owner can see, poll or
//! kill them.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{File, Permissions};
use std::future::Future;
use std::io;
use std::os::unix::fs::{DirBuilderExt, FileExt, PermissionsExt};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use sandbox::{Layout, Report, Sandbox, SandboxError, SandboxSettings};
use serde::{Deserialize, Serialize};
use tokio::process::{Child, Command};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::CallSandbox;

use crate::env::EnvPolicy;
use crate::limits::{Placed, SessionGroups};
use sandbox::groups::Limits;

/// How long to wait for the direct child to be reaped after `SIGKILL`.
/// `SIGKILL` cannot be caught, so this only matters for processes stuck in
/// uninterruptible sleep; we give up rather than hang the caller.
const REAP_AFTER_KILL: Duration = Duration::from_secs(5);

/// How often a finished job's group is checked for emptiness.
const GROUP_WATCH_INTERVAL: Duration = Duration::from_millis(500);

/// How often to check whether the rest of a process group has gone.
const GROUP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// Size of the chunks used to count lines in a large spill file.
const SCAN_CHUNK: usize = 64 * 1024;

/// Settings shared by every command a [`ProcessManager`] runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessConfig {
    /// Directory for the spill files holding each command's full output.
    /// It is created (mode 0700) if missing. `None` means a private
    /// temporary directory, created on first use and removed when the
    /// manager is dropped.
    pub output_dir: Option<PathBuf>,
    /// How many bytes from the start of the output to show.
    pub head_bytes: usize,
    /// How many bytes from the end of the output to show.
    pub tail_bytes: usize,
    /// The most lines (head and tail together) to show; 0 means no limit.
    /// When exceeded, the first fifth and the last four fifths are kept.
    pub max_lines: usize,
    /// How long to wait between `SIGTERM` and `SIGKILL` when killing.
    pub kill_grace: Duration,
    /// The shell commands are run with, as `<shell> -c <command>`.
    pub shell: PathBuf,
    /// Which variables of this process commands inherit.
    pub env: EnvPolicy,
    /// What to do when the kernel cannot enforce a session's sandbox.
    pub sandbox: SandboxSettings,
    /// How long a background job may run before its group is killed.
    pub max_job_lifetime: Duration,
    /// How many background jobs one owner (session) may hold at once, finished ones included
    /// until they are killed.
    pub max_jobs_per_owner: usize,
    /// How many background jobs the sessions of one tenant may hold at once together.
    pub max_jobs_per_tenant: usize,
    /// The most disk a command's spill file may use: past it, the middle of the output is dropped
    /// (punched out of the file), keeping its first MiB and its end, and the result says so.
    pub max_output_bytes: u64,
    /// Where to keep the ledger of live process groups (`root`, this process's instance id), so
    /// that a later start on this host kills what a crash left running (see [`crate::ledger`]).
    pub ledger: Option<(PathBuf, String)>,
    /// What one session's commands may take together.
    pub limits: Limits,
    /// Whether to hold each session's commands to `limits` in a control group (the server);
    /// otherwise they only get the floor of resource limits (no core dumps, bounded open files).
    pub enforce_limits: bool,
    /// The most disk a session's temp folder (its commands' `TMPDIR` and spill files) may use: a
    /// command running when it passes this is stopped, and its result says why.
    pub max_temp_bytes: u64,
}

impl Default for ProcessConfig {
    fn default() -> Self {
        let bash = Path::new("/bin/bash");
        Self {
            output_dir: None,
            head_bytes: 10 * 1024,
            tail_bytes: 40 * 1024,
            max_lines: 2000,
            kill_grace: Duration::from_secs(2),
            shell: if bash.exists() { bash.to_owned() } else { PathBuf::from("/bin/sh") },
            env: EnvPolicy::default(),
            sandbox: SandboxSettings::default(),
            max_job_lifetime: Duration::from_secs(3600),
            max_jobs_per_owner: 32,
            max_jobs_per_tenant: 64,
            ledger: None,
            max_output_bytes: 64 * 1024 * 1024,
            limits: Limits::default(),
            enforce_limits: false,
            max_temp_bytes: 1 << 30,
        }
    }
}

/// One command to run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandSpec {
    /// The shell command line.
    pub command: String,
    /// The working directory; it must exist.
    pub cwd: PathBuf,
    /// Variables added to (or overriding) the environment [`ProcessConfig::env`] allows.
    pub env: Vec<(String, String)>,
    /// How long a foreground command may run before it is killed.
    /// Ignored for background commands.
    pub timeout: Duration,
    /// Run in the background: return at once with a command id to poll.
    pub background: bool,
    /// Who the command belongs to (the session): only the same owner may poll or kill it.
    pub owner: String,
    /// The sandbox it runs in, from the session.
    pub sandbox: CallSandbox,
    /// Where a foreground command's output goes while it runs, whole lines at a time (the
    /// result still carries the head and tail as usual).
    pub live: Option<LiveOutput>,
}

/// A receiver of a command's output as it is written.
#[derive(Clone)]
pub struct LiveOutput(Arc<dyn Fn(String) + Send + Sync>);

impl LiveOutput {
    /// Output goes to `f`.
    pub fn new(f: impl Fn(String) + Send + Sync + 'static) -> Self {
        Self(Arc::new(f))
    }
}

impl std::fmt::Debug for LiveOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LiveOutput")
    }
}

/// Every receiver is alike for comparison: a spec is the command, not who watches it.
impl PartialEq for LiveOutput {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for LiveOutput {}

/// How often a live command's output file is read.
const LIVE_INTERVAL: Duration = Duration::from_millis(100);

/// The most output handed on per read: a command printing faster is shown in part live (the
/// result has it all).
const LIVE_CHUNK: usize = 64 * 1024;

/// Follows `file` from its start, handing whole lines to `live`; never ends. A reader that falls
/// more than a few chunks behind (a command printing faster than a screen can show) skips ahead to
/// the newest output, and the trimmed hole of a huge output (zeros on disk) is never read.
async fn follow(file: Arc<File>, trim: Trim, live: LiveOutput) {
    let mut offset = 0u64;
    loop {
        tokio::time::sleep(LIVE_INTERVAL).await;
        let Ok(len) = file_len(&file) else { continue };
        let behind = len.saturating_sub(offset);
        let mut skipped = false;
        if behind > 4 * LIVE_CHUNK as u64 {
            offset = len - LIVE_CHUNK as u64;
            skipped = true;
        }
        offset = offset.max(trim.hole_end());
        if len <= offset {
            continue;
        }
        let want = usize::try_from(len - offset).unwrap_or(LIVE_CHUNK).min(LIVE_CHUNK);
        let Ok(bytes) = read_at_most(&file, offset, want) else { continue };
        // After a skip, start at the next whole line.
        let start = if skipped { bytes.iter().position(|b| *b == b'\n').map_or(0, |i| i + 1) } else { 0 };
        // Whole lines only, unless a single line fills the chunk.
        let take = match bytes[start..].iter().rposition(|b| *b == b'\n') {
            Some(end) => start + end + 1,
            None if bytes.len() == LIVE_CHUNK => bytes.len(),
            None => {
                offset += start as u64;
                continue;
            }
        };
        offset += take as u64;
        let mut text = String::from_utf8_lossy(&bytes[start..take]).replace('\0', "");
        if skipped {
            text.insert_str(0, "[… output skipped to keep up; the result has it all]\n");
        }
        (live.0)(text);
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExitInfo {
    /// The exit code, if the process exited normally.
    pub code: Option<i32>,
    /// The signal that terminated the process, if any.
    pub signal: Option<i32>,
    /// Whether the process exited with code 0.
    pub success: bool,
}

impl From<ExitStatus> for ExitInfo {
    fn from(status: ExitStatus) -> Self {
        Self { code: status.code(), signal: status.signal(), success: status.success() }
    }
}

impl ExitInfo {
    /// The process is gone but its status could not be collected.
    pub(crate) fn unknown() -> Self {
        Self { code: None, signal: None, success: false }
    }
}

/// A window onto a command's output: all of it when small, otherwise its
/// head and tail with a marker line where the middle was left out.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapturedOutput {
    /// The text shown (lossily decoded as UTF-8).
    pub text: String,
    /// Size of the output this window covers, in bytes.
    pub total_bytes: u64,
    /// Number of lines in the output this window covers.
    pub total_lines: u64,
    /// Whether part of the output was left out of `text`.
    pub truncated: bool,
    /// How many bytes were left out of `text`.
    pub omitted_bytes: u64,
}

/// The result of [`ProcessManager::run`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunState {
    /// The id to poll or kill a background command with; `None` in the foreground.
    pub command_id: Option<String>,
    /// Whether the command was started in the background.
    pub background: bool,
    /// How the command ended; `None` while a background command is running.
    pub exit: Option<ExitInfo>,
    /// Whether a foreground command was killed because it ran out of time.
    pub timed_out: bool,
    /// Whether a foreground command was killed because the call was cancelled.
    pub cancelled: bool,
    /// The output so far.
    pub output: CapturedOutput,
    /// The file holding the full output.
    pub output_path: PathBuf,
    /// How long the command ran (for background commands: until `run` returned).
    pub duration_ms: u64,
    /// The process id of the shell, which is also its process group id.
    pub pid: u32,
    /// The sandbox the command ran in; `None` when it ran unsandboxed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<Report>,
    /// Bytes dropped from the middle of the output to keep the spill file bounded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_bytes: u64,
    /// A limit of the session's the command ran into (memory, processes), in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<String>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The result of [`ProcessManager::output`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutputState {
    /// The background command's id.
    pub command_id: String,
    /// Whether the command is still running.
    pub running: bool,
    /// How the command ended, once it has.
    pub exit: Option<ExitInfo>,
    /// The output written since the previous poll.
    pub new_output: CapturedOutput,
    /// The file holding the full output.
    pub output_path: PathBuf,
    /// Bytes dropped so far from the middle of the output to keep the spill file bounded.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub dropped_bytes: u64,
}

/// The result of [`ProcessManager::kill`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KillState {
    /// The background command's id (no longer valid afterwards).
    pub command_id: String,
    /// Whether the command was still running when it was killed.
    pub was_running: bool,
    /// How the command ended, if known.
    pub exit: Option<ExitInfo>,
    /// Output written since the previous poll that nobody has seen yet.
    pub new_output: CapturedOutput,
    /// The file holding the full output.
    pub output_path: PathBuf,
}

/// Why a process operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ProcessError {
    /// The shell could not be started.
    #[error("failed to start `{command}`: {source}")]
    Spawn {
        /// The command line.
        command: String,
        /// The underlying error.
        source: io::Error,
    },
    /// The working directory does not exist or is not a directory.
    #[error("working directory {} is not usable: {source}", path.display())]
    Cwd {
        /// The directory asked for.
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// There is no background command with this id.
    #[error("{}", no_such_command_message(id, known))]
    NoSuchCommand {
        /// The id asked for.
        id: String,
        /// The ids of the caller's own background commands.
        known: Vec<String>,
    },
    /// The owner holds as many background jobs as it may.
    #[error(
        "this session holds {limit} background commands already, the most it may; kill one it no \
         longer needs (killCommand) and start this one again"
    )]
    TooManyJobs {
        /// The most an owner may hold.
        limit: usize,
    },
    /// The owner's tenant holds as many background jobs as it may, over all its sessions.
    #[error(
        "this tenant's sessions hold {limit} background commands already, the most they may together; \
         kill one that is no longer needed (killCommand) and start this one again"
    )]
    TooManyTenantJobs {
        /// The most a tenant may hold.
        limit: usize,
    },
    /// The session's sandbox cannot be set up, so nothing was started.
    #[error(transparent)]
    Sandbox(#[from] SandboxError),
    /// The cancellation token was already cancelled, so nothing was started.
    #[error("the command was cancelled before it started")]
    Cancelled,
    /// The directory for spill files could not be created.
    #[error("cannot create the output directory {}: {source}", path.display())]
    OutputDir {
        /// The directory (for the default one, its parent).
        path: PathBuf,
        /// The underlying error.
        source: io::Error,
    },
    /// Some other I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What we were doing.
        context: String,
        /// The underlying error.
        source: io::Error,
    },
}

fn no_such_command_message(id: &str, known: &[String]) -> String {
    if known.is_empty() {
        format!("no background command with id `{id}`; this session has no background commands")
    } else {
        format!(
            "no background command with id `{id}`; the ids of this session's background commands are: {}",
            known.join(", ")
        )
    }
}

fn io_error(context: impl Into<String>) -> impl FnOnce(io::Error) -> ProcessError {
    let context = context.into();
    move |source| ProcessError::Io { context, source }
}

/// Runs shell commands and keeps track of background ones.
///
/// All methods take `&self`, so one manager can be shared (e.g. in an `Arc`).
/// Dropping it sends `SIGKILL` to the process group of every background job.
#[derive(Debug)]
pub struct ProcessManager {
    pub(crate) config: ProcessConfig,
    sandbox: Sandbox,
    /// The environment every command starts from, filtered once.
    env: Vec<(OsString, OsString)>,
    jobs: Mutex<HashMap<String, Job>>,
    /// Held from counting a new background command against its budgets until it is in `jobs`,
    /// so that two started at once on two threads cannot both take the last place.
    admission: Mutex<()>,
    ledger: Option<Arc<crate::ledger::Ledger>>,
    /// Long-lived programs (interpreters) still running, killed with their owner's session.
    pub(crate) interactive: crate::interactive::Registry,
    /// The lazily created default output directory (see [`ProcessConfig::output_dir`]).
    default_dir: Mutex<Option<tempfile::TempDir>>,
    /// The sessions' control groups and the resource-limit floor.
    groups: SessionGroups,
}

/// A background command.
#[derive(Debug)]
struct Job {
    owner: String,
    /// The owner's tenant, whose budget the job counts against.
    tenant: Option<String>,
    pgid: i32,
    file: Arc<File>,
    output_path: PathBuf,
    /// How much of the spill file earlier polls have returned.
    read_offset: u64,
    /// Set by the task that waits for the direct child.
    exit: ExitWatch,
    /// The child has exited and its process group was seen empty. A group
    /// cannot be re-populated once empty, so from then on its id may belong
    /// to an unrelated process and must not be signalled. Set by the waiter
    /// task (which watches the group after the child exits) or by a poll.
    group_gone: Arc<AtomicBool>,
    /// What was dropped from the spill file's middle.
    trim: Trim,
    /// Its control group, killed with it.
    placed: Option<Placed>,
}

impl Job {
    /// Whether the direct child is still running, and how it ended if not.
    fn status(&self) -> (bool, Option<ExitInfo>) {
        if let Some(exit) = self.exit.borrow().clone() {
            (false, Some(exit))
        } else if self.exit.has_changed().is_err() {
            // The waiting task is gone (its runtime shut down): the child was
            // killed on drop, but we never learnt how it ended.
            (false, None)
        } else {
            (true, None)
        }
    }
}

/// Why a foreground command stopped being waited for.
enum Outcome {
    Exited(ExitStatus),
    TimedOut,
    Cancelled,
    /// The session's temp folder passed its cap.
    DiskFull(crate::limits::DiskFull),
}

/// Receives a background job's exit status once its waiter task has it.
type ExitWatch = watch::Receiver<Option<ExitInfo>>;

/// A freshly started command.
pub(crate) struct Spawned {
    pub(crate) child: Child,
    pub(crate) pid: u32,
    pub(crate) pgid: i32,
    pub(crate) file: Arc<File>,
    pub(crate) output_path: PathBuf,
    pub(crate) sandbox: Option<Report>,
    pub(crate) placed: Option<Placed>,
}

impl ProcessManager {
    /// Creates a manager; nothing is created on disk until a command runs.
    #[must_use]
    pub fn new(config: ProcessConfig) -> Self {
        Self {
            sandbox: Sandbox::new(config.sandbox),
            env: config.env.from_current_process(),
            // Without a ledger, only the parent-death signal ties commands to this process.
            ledger: config
                .ledger
                .as_ref()
                .and_then(|(root, instance)| crate::ledger::Ledger::open(root, instance).ok())
                .map(Arc::new),
            interactive: crate::interactive::Registry::default(),
            groups: SessionGroups::new(config.limits, config.enforce_limits),
            config,
            jobs: Mutex::new(HashMap::new()),
            admission: Mutex::new(()),
            default_dir: Mutex::new(None),
        }
    }

    /// How the sessions' commands are held to their limits (control groups or only resource
    /// limits), for the start-up log and readiness.
    pub fn limits(&self) -> &sandbox::groups::Groups {
        self.groups.groups()
    }

    /// How many control groups of crashed processes were swept when this manager started.
    pub fn swept_groups(&self) -> usize {
        self.groups.swept()
    }

    /// The ledger of live process groups, when one was asked for and could be opened.
    pub fn ledger(&self) -> Option<&crate::ledger::Ledger> {
        self.ledger.as_deref()
    }

    pub(crate) fn ledger_arc(&self) -> Option<Arc<crate::ledger::Ledger>> {
        self.ledger.clone()
    }

    /// The sandbox commands are run in (what the kernel offers, what the operator requires).
    pub fn sandbox(&self) -> &Sandbox {
        &self.sandbox
    }

    /// Runs a command.
    ///
    /// In the foreground this waits until the command exits, `spec.timeout`
    /// passes or `cancel` fires; in the latter two cases the command's process
    /// group is killed and the output captured so far is returned with
    /// `timed_out` or `cancelled` set. Processes the command left running in
    /// the background after a normal exit are not killed.
    ///
    /// In the background this returns at once with a `command_id` for
    /// [`output`](Self::output) and [`kill`](Self::kill); `cancel` only
    /// prevents the start.
    ///
    /// # Errors
    ///
    /// [`ProcessError::Cancelled`] if `cancel` has already fired,
    /// [`ProcessError::Cwd`] for a missing working directory,
    /// [`ProcessError::Spawn`] if the shell cannot be started, and
    /// [`ProcessError::OutputDir`] / [`ProcessError::Io`] if the spill file
    /// cannot be created or read.
    pub async fn run(&self, spec: CommandSpec, cancel: &CancellationToken) -> Result<RunState, ProcessError> {
        // Starting a command that is immediately killed could still let part
        // of it run, so a call cancelled up front starts nothing.
        if cancel.is_cancelled() {
            return Err(ProcessError::Cancelled);
        }
        if spec.background {
            self.run_background(spec).await
        } else {
            self.run_foreground(spec, cancel).await
        }
    }

    async fn run_foreground(
        &self,
        spec: CommandSpec,
        cancel: &CancellationToken,
    ) -> Result<RunState, ProcessError> {
        let started = Instant::now();
        let Spawned { mut child, pid, pgid, file, output_path, sandbox, placed } =
            self.spawn(&spec, "run", None)?;
        // If this future is dropped mid-wait, take the whole group down with it.
        let mut guard = GroupGuard { pgid, armed: true, group: placed.as_ref().map(|p| p.group.clone()) };

        // Only the direct child is awaited: see the module docs for why this
        // cannot hang on grandchildren that hold the output open.
        let trim = self.trim_for(&file);
        let live = async {
            match spec.live.clone() {
                Some(live) => follow(Arc::clone(&file), trim.clone(), live).await,
                None => std::future::pending().await,
            }
        };
        let outcome = tokio::select! {
            status = child.wait() => Outcome::Exited(status.map_err(io_error("waiting for the command"))?),
            () = tokio::time::sleep(spec.timeout) => Outcome::TimedOut,
            () = cancel.cancelled() => Outcome::Cancelled,
            used = crate::limits::disk_full(spec.sandbox.temp_directory.clone(), self.config.max_temp_bytes) => {
                Outcome::DiskFull(used)
            }
            () = trim.watch() => unreachable!("the trim watch never ends"),
            () = live => unreachable!("following the output never ends"),
        };
        trim.check();
        let (exit, timed_out, cancelled) = match outcome {
            Outcome::Exited(status) => (Some(ExitInfo::from(status)), false, false),
            Outcome::TimedOut | Outcome::Cancelled | Outcome::DiskFull(_) => {
                let exit = terminate_group(pgid, self.config.kill_grace, async {
                    Some(child.wait().await.map_or_else(|_| ExitInfo::unknown(), ExitInfo::from))
                })
                .await;
                // What left the process group (`setsid`) is still in the control group.
                kill_placed(placed.as_ref()).await;
                (exit, matches!(outcome, Outcome::TimedOut), matches!(outcome, Outcome::Cancelled))
            }
        };
        let limit = match outcome {
            Outcome::DiskFull(used) => Some(crate::limits::disk_note(used, self.config.max_temp_bytes)),
            _ => placed.as_ref().and_then(Placed::note),
        };
        guard.armed = false;
        // Processes the command left running keep the group (and its ledger entry) alive.
        if !group_exists(pgid) {
            self.forget_group(pgid);
        }
        let duration_ms = millis(started.elapsed());

        let end = file_len(&file)?;
        let output = self.capture(Arc::clone(&file), output_path.clone(), 0, end).await?;
        Ok(RunState {
            dropped_bytes: trim.dropped(),
            limit,
            command_id: None,
            background: false,
            exit,
            timed_out,
            cancelled,
            output,
            output_path,
            duration_ms,
            pid,
            sandbox,
        })
    }

    async fn run_background(&self, spec: CommandSpec) -> Result<RunState, ProcessError> {
        // No await until the job is inserted below: the lock is a plain one, held over a spawn.
        let admitted = self.admission.lock().unwrap_or_else(PoisonError::into_inner);
        {
            let jobs = self.jobs();
            let limit = self.config.max_jobs_per_owner;
            if jobs.values().filter(|job| job.owner == spec.owner).count() >= limit {
                return Err(ProcessError::TooManyJobs { limit });
            }
            let limit = self.config.max_jobs_per_tenant;
            if let Some(tenant) = &spec.sandbox.tenant
                && jobs.values().filter(|job| job.tenant.as_ref() == Some(tenant)).count() >= limit
            {
                return Err(ProcessError::TooManyTenantJobs { limit });
            }
        }
        let id = job_id()?;
        let started = Instant::now();
        let Spawned { mut child, pid, pgid, file, output_path, sandbox, placed } =
            self.spawn(&spec, &id, None)?;
        let lifetime_group = placed.clone();

        // A task reaps the child as soon as it exits (no zombie lingers until
        // the next poll) and publishes how it ended. A job that outlives its
        // lifetime has its group killed: a forgotten server or watcher cannot
        // hold the machine for ever.
        let (exit_tx, exit_rx) = watch::channel(None);
        let (lifetime, grace) = (self.config.max_job_lifetime, self.config.kill_grace);
        let (temp, temp_cap) = (spec.sandbox.temp_directory.clone(), self.config.max_temp_bytes);
        let trim = self.trim_for(&file);
        let watched = trim.clone();
        let gone = Arc::new(AtomicBool::new(false));
        let watched_gone = gone.clone();
        tokio::spawn(async move {
            let exit = tokio::select! {
                () = watched.watch() => unreachable!("the trim watch never ends"),
                status = child.wait() => status.map_or_else(|_| ExitInfo::unknown(), ExitInfo::from),
                () = async {
                    // Past its lifetime, or once the session's temp folder passes its cap.
                    tokio::select! {
                        () = tokio::time::sleep(lifetime) => {}
                        _ = crate::limits::disk_full(temp, temp_cap) => {}
                    }
                } => {
                    let exit = terminate_group(pgid, grace, async {
                        Some(child.wait().await.map_or_else(|_| ExitInfo::unknown(), ExitInfo::from))
                    })
                    .await
                    .unwrap_or_else(ExitInfo::unknown);
                    kill_placed(lifetime_group.as_ref()).await;
                    exit
                }
            };
            // Nobody listening just means the job was already removed.
            let _ = exit_tx.send(Some(exit));
            // What the command started may live on in its group. Once the group is empty its id
            // can be handed to any new process: from then on it must never be signalled, so the
            // group is watched until it empties (or the job is forgotten).
            while !exit_tx.is_closed() {
                if !group_exists(pgid) {
                    watched_gone.store(true, Ordering::Release);
                    break;
                }
                tokio::time::sleep(GROUP_WATCH_INTERVAL).await;
            }
        });

        // Status first, then length: if the child has exited, everything it
        // wrote is within `end`.
        let exit = exit_rx.borrow().clone();
        let end = file_len(&file)?;
        let job = Job {
            owner: spec.owner.clone(),
            tenant: spec.sandbox.tenant.clone(),
            pgid,
            file: Arc::clone(&file),
            output_path: output_path.clone(),
            read_offset: end,
            exit: exit_rx,
            group_gone: gone,
            trim: trim.clone(),
            placed,
        };
        self.jobs().insert(id.clone(), job);
        drop(admitted);

        let output = self.capture(file, output_path.clone(), 0, end).await?;
        Ok(RunState {
            command_id: Some(id),
            background: true,
            exit,
            timed_out: false,
            cancelled: false,
            output,
            output_path,
            duration_ms: millis(started.elapsed()),
            pid,
            sandbox,
            dropped_bytes: trim.dropped(),
            limit: None,
        })
    }

    /// Returns the output a background command wrote since the previous call
    /// (or since [`run`](Self::run) returned), and whether it is still running.
    ///
    /// A finished command stays available until it is [`kill`](Self::kill)ed.
    /// Only `owner`, who started it, may poll it: for anyone else it does not exist.
    ///
    /// # Errors
    ///
    /// [`ProcessError::NoSuchCommand`] for an unknown (or already killed) id, or
    /// one of another owner; [`ProcessError::Io`] if the spill file cannot be read.
    pub async fn output(&self, owner: &str, command_id: &str) -> Result<OutputState, ProcessError> {
        let (file, output_path, start, end, running, exit, dropped_bytes) = {
            let mut jobs = self.jobs();
            let known = owned_ids(&jobs, owner);
            let job = jobs
                .get_mut(command_id)
                .filter(|job| job.owner == owner)
                .ok_or_else(|| ProcessError::NoSuchCommand { id: command_id.to_owned(), known })?;
            // Status first, then length: once we report "not running", this
            // poll contains everything the child wrote.
            let (running, exit) = job.status();
            if !running && !job.group_gone.load(Ordering::Acquire) && !group_exists(job.pgid) {
                job.group_gone.store(true, Ordering::Release);
                self.forget_group(job.pgid);
            }
            job.trim.check();
            let end = file_len(&job.file)?;
            // Claim the range under the lock so concurrent polls never
            // return the same bytes twice; what was punched out is skipped.
            let start = job.read_offset.max(job.trim.hole_end()).min(end);
            job.read_offset = end;
            (Arc::clone(&job.file), job.output_path.clone(), start, end, running, exit, job.trim.dropped())
        };
        let new_output = self.capture(file, output_path.clone(), start, end).await?;
        Ok(OutputState {
            command_id: command_id.to_owned(),
            running,
            exit,
            new_output,
            output_path,
            dropped_bytes,
        })
    }

    /// Kills a background command's process group (`SIGTERM`, then `SIGKILL`
    /// after the grace period) and forgets the command.
    ///
    /// The group is signalled even if the command itself has already exited,
    /// since processes it started may still be running. The spill file is
    /// deleted: the output not yet seen is in the result.
    ///
    /// # Errors
    ///
    /// [`ProcessError::NoSuchCommand`] for an unknown (or already killed) id, or
    /// one of another owner; [`ProcessError::Io`] if the spill file cannot be read.
    pub async fn kill(&self, owner: &str, command_id: &str) -> Result<KillState, ProcessError> {
        let (pgid, group_gone, exit_rx, running, exit_before, placed) = {
            let jobs = self.jobs();
            let Some(job) = jobs.get(command_id).filter(|job| job.owner == owner) else {
                return Err(ProcessError::NoSuchCommand {
                    id: command_id.to_owned(),
                    known: owned_ids(&jobs, owner),
                });
            };
            let (running, exit) = job.status();
            (
                job.pgid,
                job.group_gone.load(Ordering::Acquire),
                job.exit.clone(),
                running,
                exit,
                job.placed.clone(),
            )
        };
        // The job stays registered while we wait, so if this future is
        // dropped half-way the manager's Drop still kills the group.
        let exit = if group_gone {
            exit_before
        } else {
            terminate_group(pgid, self.config.kill_grace, wait_for_exit(exit_rx)).await
        };
        kill_placed(placed.as_ref()).await;

        let removed = self.jobs().remove(command_id);
        if removed.is_some() {
            self.forget_group(pgid);
        }
        let Some(job) = removed else {
            // A concurrent kill removed it (and returns its output).
            return Err(ProcessError::NoSuchCommand {
                id: command_id.to_owned(),
                known: owned_ids(&self.jobs(), owner),
            });
        };
        let end = file_len(&job.file)?;
        let start = job.read_offset.max(job.trim.hole_end()).min(end);
        let new_output = self.capture(job.file, job.output_path.clone(), start, end).await;
        // Forgotten: its output goes with it (the descriptor we hold keeps
        // the capture above readable).
        let _ = std::fs::remove_file(&job.output_path);
        let new_output = new_output?;
        Ok(KillState {
            command_id: command_id.to_owned(),
            was_running: running,
            exit,
            new_output,
            output_path: job.output_path,
        })
    }

    /// Kills every background command of `owner` (a session that ended) and
    /// forgets them, spill files included. Returns how many there were.
    pub async fn kill_owner(&self, owner: &str) -> usize {
        let ids: Vec<String> =
            self.jobs().iter().filter(|(_, job)| job.owner == owner).map(|(id, _)| id.clone()).collect();
        let results = futures::future::join_all(ids.iter().map(|id| self.kill(owner, id))).await;
        self.interactive.kill_owner(owner);
        // Whatever its commands left running dies with the session, and its groups go.
        self.groups.end(owner).await;
        results.into_iter().filter(Result::is_ok).count()
    }

    /// Kills every background command (as [`kill`](Self::kill) does, all at
    /// once) and forgets them.
    pub async fn shutdown(&self) {
        let targets: Vec<(String, Option<(i32, ExitWatch)>)> = self
            .jobs()
            .iter()
            .map(|(id, job)| {
                (id.clone(), (!job.group_gone.load(Ordering::Acquire)).then(|| (job.pgid, job.exit.clone())))
            })
            .collect();
        let grace = self.config.kill_grace;
        futures::future::join_all(
            targets
                .iter()
                .filter_map(|(_, target)| target.clone())
                .map(|(pgid, exit)| terminate_group(pgid, grace, wait_for_exit(exit))),
        )
        .await;
        // Jobs started while we were waiting survive; nobody asked to kill them.
        let mut jobs = self.jobs();
        for (id, _) in &targets {
            if let Some(job) = jobs.remove(id) {
                let _ = std::fs::remove_file(&job.output_path);
                self.forget_group(job.pgid);
            }
        }
    }

    pub(crate) fn trim_for(&self, file: &Arc<File>) -> Trim {
        Trim {
            file: Arc::clone(file),
            cap: self.config.max_output_bytes.max(2 * KEEP_HEAD),
            hole: Arc::new(AtomicU64::new(0)),
        }
    }

    pub(crate) fn forget_group(&self, pgid: i32) {
        if let Some(ledger) = &self.ledger {
            ledger.forget(pgid);
        }
    }

    fn jobs(&self) -> MutexGuard<'_, HashMap<String, Job>> {
        // The map stays consistent even if a holder panicked: every update is
        // a single insert, remove or field assignment.
        self.jobs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Where a command's spill file goes: the session's own temp folder, else the configured
    /// folder, else a private temp folder of this manager's.
    fn output_dir(&self, session_temp: Option<&Path>) -> Result<PathBuf, ProcessError> {
        if let Some(dir) = session_temp.or(self.config.output_dir.as_deref()) {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|source| ProcessError::OutputDir { path: dir.to_owned(), source })?;
            return Ok(dir.to_owned());
        }
        let mut default_dir = self.default_dir.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(dir) = &*default_dir {
            return Ok(dir.path().to_owned());
        }
        // Private (0700) so other users cannot read what commands printed.
        let dir = tempfile::Builder::new()
            .prefix("toolhost-")
            .permissions(Permissions::from_mode(0o700))
            .tempdir()
            .map_err(|source| ProcessError::OutputDir { path: std::env::temp_dir(), source })?;
        let path = dir.path().to_owned();
        *default_dir = Some(dir);
        Ok(path)
    }

    /// Starts `spec`: its shell command, or `program` with pipes on its standard input and output
    /// (standard error still goes to the spill file).
    pub(crate) fn spawn(
        &self,
        spec: &CommandSpec,
        label: &str,
        program: Option<&crate::interactive::Program>,
    ) -> Result<Spawned, ProcessError> {
        // Checked up front: a missing cwd would otherwise surface as a
        // confusing "No such file or directory" about the shell.
        match std::fs::metadata(&spec.cwd) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(ProcessError::Cwd {
                    path: spec.cwd.clone(),
                    source: io::Error::from(io::ErrorKind::NotADirectory),
                });
            }
            Err(source) => {
                return Err(ProcessError::Cwd { path: spec.cwd.clone(), source });
            }
        }

        // A session's output lives in its own temp folder, which goes away with it.
        let dir = self.output_dir(spec.sandbox.temp_directory.as_deref())?;
        let spill = tempfile::Builder::new()
            .prefix(&format!("{label}-"))
            .suffix(".log")
            .permissions(Permissions::from_mode(0o600))
            .tempfile_in(&dir)
            .map_err(io_error(format!("creating an output file in {}", dir.display())))?;
        // Two duplicates of one descriptor: stdout and stderr share the file
        // offset, so neither overwrites the other (no O_APPEND needed).
        let stdout = spill.as_file().try_clone().map_err(io_error("duplicating the output file"))?;
        let stderr = spill.as_file().try_clone().map_err(io_error("duplicating the output file"))?;

        let layout = Layout {
            working_directory: spec.cwd.clone(),
            temp_directory: spec.sandbox.temp_directory.clone(),
            output_files: vec![std::os::fd::AsRawFd::as_raw_fd(spill.as_file())],
        };
        let prepared = self.sandbox.prepare(&spec.sandbox.policy, &layout)?;

        let mut command = match program {
            Some(program) => {
                let mut command = Command::new(&program.path);
                command.args(&program.args).stdin(Stdio::piped()).stdout(Stdio::piped());
                command
            }
            None => {
                let mut command = Command::new(&self.config.shell);
                command.arg("-c").arg(&spec.command).stdin(Stdio::null()).stdout(stdout);
                command
            }
        };
        command
            .current_dir(&spec.cwd)
            .env_clear()
            .envs(self.env.iter().map(|(key, value)| (key, value)))
            .envs(spec.sandbox.temp_directory.iter().map(|dir| ("TMPDIR", dir)))
            .envs(spec.env.iter().map(|(key, value)| (key, value)))
            .stderr(stderr)
            // Own group, so that killing reaches everything the shell starts.
            .process_group(0)
            // Last resort if the Child is dropped without being reaped.
            .kill_on_drop(true);
        // Into the session's control group first (a foreground command's group needs a name of
        // its own), then the parent-death signal, then the sandbox.
        let name = if spec.background { label.to_owned() } else { job_id()? };
        let placed = self.groups.place(&spec.owner, &name, command.as_std_mut())?;
        die_with_parent(command.as_std_mut());
        prepared.install(command.as_std_mut());
        let child = command
            .spawn()
            .map_err(|source| ProcessError::Spawn { command: spec.command.clone(), source })?;

        // Only now keep the file; on a failed spawn the temp file is deleted.
        let (file, output_path) =
            spill.keep().map_err(|err| io_error("keeping the output file")(err.error))?;
        let pid = child.id().ok_or_else(|| ProcessError::Io {
            context: "reading the pid of the new process".into(),
            source: io::Error::other("the process was already reaped"),
        })?;
        let pgid = i32::try_from(pid).map_err(|_| ProcessError::Io {
            context: "reading the pid of the new process".into(),
            source: io::Error::other(format!("pid {pid} out of range")),
        })?;
        if let Some(ledger) = &self.ledger {
            ledger.record(pgid);
        }
        Ok(Spawned {
            child,
            pid,
            pgid,
            file: Arc::new(file),
            output_path,
            sandbox: prepared.report().cloned(),
            placed,
        })
    }

    async fn capture(
        &self,
        file: Arc<File>,
        output_path: PathBuf,
        start: u64,
        end: u64,
    ) -> Result<CapturedOutput, ProcessError> {
        let limits = CaptureLimits {
            head_bytes: self.config.head_bytes,
            tail_bytes: self.config.tail_bytes,
            max_lines: self.config.max_lines,
        };
        let context = format!("reading the output file {}", output_path.display());
        // Counting lines streams through the whole range, which may be large.
        tokio::task::spawn_blocking(move || capture_range(&file, start, end, limits, &output_path))
            .await
            .unwrap_or_else(|join| Err(io::Error::other(join)))
            .map_err(io_error(context))
    }
}

impl Drop for ProcessManager {
    fn drop(&mut self) {
        // Synchronous best effort: no grace period, there is no runtime to wait on.
        let jobs = self.jobs.get_mut().unwrap_or_else(PoisonError::into_inner);
        for job in jobs.values().filter(|job| !job.group_gone.load(Ordering::Acquire)) {
            let _ = signal_group(job.pgid, libc::SIGKILL);
        }
    }
}

/// The ids of `owner`'s jobs, sorted; never anyone else's.
fn owned_ids(jobs: &HashMap<String, Job>, owner: &str) -> Vec<String> {
    let mut ids: Vec<String> =
        jobs.iter().filter(|(_, job)| job.owner == owner).map(|(id, _)| id.clone()).collect();
    ids.sort();
    ids
}

/// A job id nobody can guess: 96 bits from the system's random source.
pub(crate) fn job_id() -> Result<String, ProcessError> {
    let mut bytes = [0u8; 12];
    getrandom::fill(&mut bytes).map_err(|error| ProcessError::Io {
        context: "drawing a random job id".into(),
        source: io::Error::other(error.to_string()),
    })?;
    let mut id = String::with_capacity(4 + 2 * bytes.len());
    id.push_str("cmd-");
    for byte in bytes {
        let _ = write!(id, "{byte:02x}");
    }
    Ok(id)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

fn file_len(file: &File) -> Result<u64, ProcessError> {
    Ok(file.metadata().map_err(io_error("reading the output file's size"))?.len())
}

/// Resolves once the background job's waiter task has reaped the child.
async fn wait_for_exit(mut exit: ExitWatch) -> Option<ExitInfo> {
    // An error means the waiter task is gone; there is nothing left to wait for.
    exit.wait_for(Option::is_some).await.ok().and_then(|exit| exit.clone())
}

// ---------------------------------------------------------------------------
// Bounded spill files
// ---------------------------------------------------------------------------

/// The start of the output a trimmed spill file keeps whole.
const KEEP_HEAD: u64 = 1024 * 1024;

/// Filesystem block: holes are punched in whole blocks.
const BLOCK: u64 = 4096;

/// How often a running command's spill file is measured.
const TRIM_EVERY: Duration = Duration::from_millis(250);

/// Keeps a spill file's disk use under `cap` while its command writes: once it is larger, the
/// middle is punched out (a sparse hole that reads as zeros and takes no disk), keeping the first
/// [`KEEP_HEAD`] bytes and the last `cap - KEEP_HEAD`. The command writes on undisturbed (the
/// file's length and offset do not change); readers skip the hole.
#[derive(Debug, Clone)]
pub(crate) struct Trim {
    file: Arc<File>,
    cap: u64,
    /// Where the punched-out region ends (0: nothing punched).
    hole: Arc<AtomicU64>,
}

impl Trim {
    pub(crate) async fn watch(&self) {
        loop {
            tokio::time::sleep(TRIM_EVERY).await;
            self.check();
        }
    }

    fn hole_end(&self) -> u64 {
        self.hole.load(Ordering::Acquire)
    }

    fn hole_start() -> u64 {
        KEEP_HEAD.div_ceil(BLOCK) * BLOCK
    }

    /// Bytes punched out so far.
    fn dropped(&self) -> u64 {
        self.hole_end().saturating_sub(Self::hole_start())
    }

    fn check(&self) {
        let Ok(len) = self.file.metadata().map(|m| m.len()) else { return };
        if len <= self.cap {
            return;
        }
        let start = Self::hole_start();
        let end = (len - (self.cap - KEEP_HEAD)) / BLOCK * BLOCK;
        let from = self.hole_end().max(start);
        if end > from && punch_hole(&self.file, from, end - from).is_ok() {
            self.hole.store(end, Ordering::Release);
        }
    }
}

/// Deallocates `len` bytes at `offset` without changing the file's size.
#[allow(unsafe_code)]
fn punch_hole(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len)) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: fallocate takes a descriptor we own for the call's duration and plain integers.
    let rc = unsafe {
        libc::fallocate(file.as_raw_fd(), libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE, offset, len)
    };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

// ---------------------------------------------------------------------------
// Killing process groups
// ---------------------------------------------------------------------------

/// Kills the process group `pgid`: `SIGTERM`, then up to `grace` for the
/// group to go away, then `SIGKILL` regardless, because processes the command
/// started may outlive it (`ESRCH` then is fine).
///
/// `exited` resolves once the direct child has been reaped, with its exit
/// status if known. Returns that status, or `None` if it never came.
pub(crate) async fn terminate_group<F>(pgid: i32, grace: Duration, exited: F) -> Option<ExitInfo>
where
    F: Future<Output = Option<ExitInfo>>,
{
    let deadline = tokio::time::Instant::now() + grace;
    let _ = signal_group(pgid, libc::SIGTERM);
    let mut exited = std::pin::pin!(exited);
    match tokio::time::timeout_at(deadline, &mut exited).await {
        Ok(exit) => {
            // Give the rest of the group the remainder of the grace period.
            while group_exists(pgid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(GROUP_POLL_INTERVAL).await;
            }
            let _ = signal_group(pgid, libc::SIGKILL);
            exit
        }
        Err(_elapsed) => {
            let _ = signal_group(pgid, libc::SIGKILL);
            tokio::time::timeout(REAP_AFTER_KILL, exited).await.ok().flatten()
        }
    }
}

/// Kills a foreground command's group if the `run` future is dropped early.
struct GroupGuard {
    pgid: i32,
    armed: bool,
    group: Option<sandbox::groups::CommandGroup>,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            let _ = signal_group(self.pgid, libc::SIGKILL);
            if let Some(group) = self.group.take() {
                // Off this thread: killing a control group waits for it to empty.
                std::thread::spawn(move || group.kill());
            }
        }
    }
}

/// Kills what is left in a command's control group (processes that left its process group),
/// off the async threads.
pub(crate) async fn kill_placed(placed: Option<&Placed>) {
    if let Some(group) = placed.map(|p| p.group.clone()) {
        let _ = tokio::task::spawn_blocking(move || group.kill()).await;
    }
}

/// Whether any process (zombies included) is still in the group.
pub(crate) fn group_exists(pgid: i32) -> bool {
    match signal_group(pgid, 0) {
        Ok(()) => true,
        // Exists, but we may not signal it.
        Err(err) => err.raw_os_error() == Some(libc::EPERM),
    }
}

/// The shell gets `SIGKILL` when the thread that started it goes away (this process exiting,
/// killed or not): a command does not run on for nobody after a crash. What the shell started
/// outlives it only until the next start sweeps the ledger.
///
/// It also gets the host's policy for transparent huge pages back when this process turned them
/// off for itself (the server does; `sandbox::huge_pages`).
#[allow(unsafe_code)]
fn die_with_parent(command: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: prctl with integer arguments is async-signal-safe and touches no memory of ours.
    unsafe {
        command.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) == 0 {
                Ok(())
            } else {
                Err(io::Error::last_os_error())
            }
        });
    }
    sandbox::huge_pages::restore(command);
}

/// Sends `signal` to every process in the group `pgid`.
///
/// # Errors
///
/// `pgid` is 0 or 1 (our own group, init's), or the system refused (no such group).
#[allow(unsafe_code)]
pub fn signal_group(pgid: i32, signal: libc::c_int) -> io::Result<()> {
    // killpg(0) would hit our own group and killpg(1) init's.
    if pgid <= 1 {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: killpg only takes two integers and touches no memory of ours;
    // it has no preconditions beyond that.
    let rc = unsafe { libc::killpg(pgid, signal) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

// ---------------------------------------------------------------------------
// Head/tail capture
// ---------------------------------------------------------------------------

#[derive(Debug, Clone, Copy)]
struct CaptureLimits {
    head_bytes: usize,
    tail_bytes: usize,
    max_lines: usize,
}

/// Captures the byte range `start..end` of `file` as head + marker + tail,
/// reading only the head, the tail, and (streamed) the whole range to count lines.
fn capture_range(
    file: &File,
    start: u64,
    end: u64,
    limits: CaptureLimits,
    path: &Path,
) -> io::Result<CapturedOutput> {
    let total_bytes = end.saturating_sub(start);
    let window = limits.head_bytes.saturating_add(limits.tail_bytes);
    // `gap`: something between `head` and `tail` is left out.
    let (mut head, mut tail, newlines, ends_with_newline, mut gap);
    let (mut omitted_bytes, mut omitted_newlines);
    if total_bytes <= window as u64 {
        // `total_bytes` is at most `window`, so it fits in usize.
        head = read_at_most(file, start, usize::try_from(total_bytes).unwrap_or(window))?;
        tail = Vec::new();
        newlines = count_newlines(&head);
        ends_with_newline = head.last() == Some(&b'\n');
        (omitted_bytes, omitted_newlines, gap) = (0, 0, false);
    } else {
        head = read_at_most(file, start, limits.head_bytes)?;
        tail = read_at_most(file, end - limits.tail_bytes as u64, limits.tail_bytes)?;
        // Lines are counted by reading the range; a huge (or sparse: a command can seek its
        // output a petabyte ahead) range is only sampled at both ends, so a capture never reads
        // more than a bounded amount, and the line count is then a lower bound.
        (newlines, ends_with_newline) = if total_bytes > MAX_LINE_SCAN {
            let (first, _) = scan_newlines(file, start, start + MAX_LINE_SCAN / 2)?;
            let (last, ends) = scan_newlines(file, end - MAX_LINE_SCAN / 2, end)?;
            (first + last, ends)
        } else {
            scan_newlines(file, start, end)?
        };
        trim_head(&mut head);
        trim_tail(&mut tail);
        omitted_bytes = total_bytes.saturating_sub((head.len() + tail.len()) as u64);
        omitted_newlines = newlines.saturating_sub(count_newlines(&head) + count_newlines(&tail));
        gap = true;
    }
    let total_lines = newlines + u64::from(total_bytes > 0 && !ends_with_newline);

    let max = limits.max_lines;
    if max > 0 && line_count(&head) + line_count(&tail) > max {
        if !gap {
            // One contiguous buffer: split it so the budget below applies
            // to its first and last lines.
            tail = head.split_off(prefix_len_of_lines(&head, max / 5));
            gap = true;
        }
        // A fifth for the head, the rest for the tail (errors tend to be at
        // the end); budget one side doesn't use goes to the other.
        let (head_lines, tail_lines) = (line_count(&head), line_count(&tail));
        let keep_tail = tail_lines.min(max - head_lines.min(max / 5));
        let keep_head = head_lines.min(max - keep_tail);
        let dropped_head = head.split_off(prefix_len_of_lines(&head, keep_head));
        let dropped_tail: Vec<u8> = tail.drain(..start_of_last_lines(&tail, keep_tail)).collect();
        for dropped in [dropped_head, dropped_tail] {
            omitted_bytes += dropped.len() as u64;
            omitted_newlines += count_newlines(&dropped);
        }
    }

    let mut text = String::from_utf8_lossy(&head).into_owned();
    if gap {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let _ = writeln!(
            text,
            "... [{omitted_bytes} bytes / {omitted_newlines} lines omitted; full output in {}] ...",
            path.display()
        );
        text.push_str(&String::from_utf8_lossy(&tail));
    }
    // As a terminal would show it: no colour codes, progress redraws settled.
    let text = match crate::terminal::plain(&text) {
        std::borrow::Cow::Owned(settled) => settled,
        std::borrow::Cow::Borrowed(_) => text,
    };
    Ok(CapturedOutput { text, total_bytes, total_lines, truncated: gap, omitted_bytes })
}

/// The most of an output range a capture reads to count its lines.
const MAX_LINE_SCAN: u64 = 256 * 1024 * 1024;

/// Reads up to `len` bytes at `offset`; fewer if the file ends first.
fn read_at_most(file: &File, offset: u64, len: usize) -> io::Result<Vec<u8>> {
    let mut buf = vec![0; len];
    let mut filled = 0;
    while filled < len {
        match file.read_at(&mut buf[filled..], offset + filled as u64) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Counts newlines in `start..end` in chunks, and tells whether the range
/// ends with one, without holding the range in memory.
fn scan_newlines(file: &File, start: u64, end: u64) -> io::Result<(u64, bool)> {
    let mut buf = vec![0; SCAN_CHUNK];
    let (mut pos, mut newlines, mut last) = (start, 0, None);
    while pos < end {
        let want = usize::try_from(end - pos).map_or(SCAN_CHUNK, |rest| rest.min(SCAN_CHUNK));
        let n = match file.read_at(&mut buf[..want], pos) {
            Ok(0) => break,
            Ok(n) => n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => continue,
            Err(err) => return Err(err),
        };
        newlines += count_newlines(&buf[..n]);
        last = Some(buf[n - 1]);
        pos += n as u64;
    }
    Ok((newlines, last == Some(b'\n')))
}

fn count_newlines(bytes: &[u8]) -> u64 {
    memchr::memchr_iter(b'\n', bytes).count() as u64
}

/// Lines in `bytes`, counting an unterminated last line.
fn line_count(bytes: &[u8]) -> usize {
    memchr::memchr_iter(b'\n', bytes).count() + usize::from(bytes.last().is_some_and(|&b| b != b'\n'))
}

/// Length of the first `n` lines of `bytes` (all of it if it has fewer).
fn prefix_len_of_lines(bytes: &[u8], n: usize) -> usize {
    match n.checked_sub(1) {
        None => 0,
        Some(skip) => memchr::memchr_iter(b'\n', bytes).nth(skip).map_or(bytes.len(), |pos| pos + 1),
    }
}

/// Where the last `n` lines of `bytes` start (0 if it has fewer).
fn start_of_last_lines(bytes: &[u8], n: usize) -> usize {
    if n == 0 {
        return bytes.len();
    }
    // A terminating newline ends the last line; it doesn't start a new one.
    let skip = if bytes.last() == Some(&b'\n') { n } else { n - 1 };
    memchr::memrchr_iter(b'\n', bytes).nth(skip).map_or(0, |pos| pos + 1)
}

/// Cuts the head after its last complete line, unless that would throw away
/// more than half of it (one long line); then just after its last complete
/// UTF-8 character.
fn trim_head(head: &mut Vec<u8>) {
    match memchr::memrchr(b'\n', head) {
        Some(pos) if pos + 1 >= head.len() / 2 => head.truncate(pos + 1),
        _ => head.truncate(complete_utf8_prefix(head)),
    }
}

/// The tail's counterpart of [`trim_head`]: starts it at a line, or at least
/// at a character, boundary.
fn trim_tail(tail: &mut Vec<u8>) {
    let cut = match memchr::memchr(b'\n', tail) {
        Some(pos) if pos < tail.len() / 2 => pos + 1,
        // Skip the continuation bytes of a character cut in half.
        _ => tail.iter().take(3).take_while(|&&b| is_utf8_continuation(b)).count(),
    };
    tail.drain(..cut);
}

fn is_utf8_continuation(byte: u8) -> bool {
    byte & 0xC0 == 0x80
}

/// Length of `bytes` without a trailing, incomplete UTF-8 character.
fn complete_utf8_prefix(bytes: &[u8]) -> usize {
    let len = bytes.len();
    // The last character starts at most 3 bytes before the end.
    for back in 1..=len.min(4) {
        let byte = bytes[len - back];
        if is_utf8_continuation(byte) {
            continue;
        }
        let width = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => 1,
        };
        return if width > back { len - back } else { len };
    }
    // Only continuation bytes: not valid UTF-8 anyway; lossy decoding copes.
    len
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    const GRACE: Duration = Duration::from_millis(300);
    const OWNER: &str = "session-1";

    fn manager(dir: &Path) -> ProcessManager {
        ProcessManager::new(ProcessConfig {
            output_dir: Some(dir.join("out")),
            kill_grace: GRACE,
            ..ProcessConfig::default()
        })
    }

    fn spec(command: &str, cwd: &Path) -> CommandSpec {
        CommandSpec {
            command: command.to_owned(),
            cwd: cwd.to_owned(),
            env: Vec::new(),
            timeout: Duration::from_secs(10),
            background: false,
            owner: OWNER.to_owned(),
            sandbox: CallSandbox::default(),
            live: None,
        }
    }

    #[tokio::test]
    async fn live_output_that_cannot_keep_up_skips_to_the_newest_lines() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let seen = Arc::new(std::sync::Mutex::new(String::new()));
        let sink = seen.clone();
        // 3 MB at once, then a last line a moment later.
        let mut spec =
            spec("seq 1 400000 | sed 's/$/ xxxxx/'; sleep 0.4; echo last-line; sleep 0.3", dir.path());
        spec.live = Some(LiveOutput::new(move |text| sink.lock().unwrap().push_str(&text)));
        m.run(spec, &CancellationToken::new()).await.unwrap();
        let seen = seen.lock().unwrap().clone();
        assert!(seen.contains("output skipped to keep up"), "{}", &seen[..200.min(seen.len())]);
        assert!(seen.len() < 1024 * 1024, "only what a screen can show: {} bytes", seen.len());
        assert!(
            seen.contains("400000 xxxxx\nlast-line\n") || seen.ends_with("last-line\n"),
            "the newest lines arrive"
        );
        assert!(
            seen.lines().filter(|l| !l.starts_with('[')).all(|l| l.ends_with(" xxxxx") || l == "last-line"),
            "whole lines only"
        );
    }

    #[tokio::test]
    async fn a_foreground_command_streams_whole_lines_while_it_runs() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let seen = Arc::new(std::sync::Mutex::new(Vec::<(Instant, String)>::new()));
        let sink = seen.clone();
        let mut spec = spec("echo first; sleep 0.5; printf 'second\\nthi'; sleep 0.5; echo rd", dir.path());
        spec.live = Some(LiveOutput::new(move |text| sink.lock().unwrap().push((Instant::now(), text))));
        let state = m.run(spec, &CancellationToken::new()).await.unwrap();
        let ended = Instant::now();
        let seen = seen.lock().unwrap().clone();
        let texts: Vec<&str> = seen.iter().map(|(_, t)| t.as_str()).collect();
        assert_eq!(texts[..2], ["first\n", "second\n"], "whole lines, as they come: {texts:?}");
        assert!(ended.duration_since(seen[0].0) >= Duration::from_millis(700), "the first line came live");
        assert!(state.output.text.contains("third"), "the result still has everything");
    }

    #[tokio::test]
    async fn a_command_gets_the_hosts_huge_page_policy_back() {
        use sandbox::huge_pages;
        // Turned on again afterwards, since `cargo test` runs other tests in this process.
        struct PutBack;
        impl Drop for PutBack {
            #[allow(unsafe_code)]
            fn drop(&mut self) {
                // SAFETY: prctl with integer arguments only sets a flag of this process.
                unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 0, 0, 0, 0) };
            }
        }
        let host_had_them = huge_pages::disabled() == Some(false);
        // Like the server, which keeps transparent huge pages off for itself.
        let turned_off = huge_pages::turn_off();
        let _put_back = turned_off.then_some(PutBack);
        assert_eq!(turned_off, host_had_them);
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, spec("grep THP_enabled /proc/self/status", dir.path())).await;
        let line = state.output.text.split_whitespace().collect::<Vec<_>>().join(" ");
        // The host's policy: on where the test process had them, off where it inherited the flag.
        let expected = if host_had_them { "THP_enabled: 1" } else { "THP_enabled: 0" };
        assert_eq!(line, expected, "{}", state.output.text);
        assert_eq!(huge_pages::disabled(), Some(true), "the child's flag only");
    }

    fn background(command: &str, cwd: &Path) -> CommandSpec {
        CommandSpec { background: true, ..spec(command, cwd) }
    }

    async fn run(m: &ProcessManager, spec: CommandSpec) -> RunState {
        m.run(spec, &CancellationToken::new()).await.unwrap()
    }

    /// Live (non-zombie) processes whose process group is `pgid`, from /proc.
    fn group_members(pgid: u32) -> Vec<u32> {
        let mut members = Vec::new();
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // The command name (field 2) may contain spaces; fields after
            // its closing parenthesis are: state (3), ppid (4), pgrp (5).
            let Some((_, rest)) = stat.rsplit_once(')') else {
                continue;
            };
            let fields: Vec<&str> = rest.split_whitespace().collect();
            if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
                members.push(pid);
            }
        }
        members
    }

    /// Polls for up to 3 s for the group to be empty.
    async fn group_gone(pgid: u32) -> bool {
        for _ in 0..60 {
            if group_members(pgid).is_empty() {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Polls for up to 3 s for the group to have at least `n` live members.
    async fn wait_for_members(pgid: u32, n: usize) {
        for _ in 0..60 {
            if group_members(pgid).len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("process group {pgid} never reached {n} members");
    }

    #[tokio::test]
    async fn stdout_and_stderr_are_captured_and_success_reported() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, spec("echo to-out; echo to-err >&2", dir.path())).await;
        assert!(state.output.text.contains("to-out\n"), "{state:?}");
        assert!(state.output.text.contains("to-err\n"), "{state:?}");
        assert_eq!(state.exit, Some(ExitInfo { code: Some(0), signal: None, success: true }));
        assert!(!state.timed_out && !state.cancelled && !state.output.truncated);
        assert_eq!(state.command_id, None);
        assert_eq!(state.output.total_lines, 2);
        assert_eq!(std::fs::read_to_string(&state.output_path).unwrap(), state.output.text);
    }

    #[tokio::test]
    async fn nonzero_exit_code_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, spec("echo failing; exit 3", dir.path())).await;
        assert_eq!(state.exit, Some(ExitInfo { code: Some(3), signal: None, success: false }));
        assert_eq!(state.output.text, "failing\n");
    }

    #[tokio::test]
    async fn env_and_cwd_are_honoured() {
        let dir = tempfile::tempdir().unwrap();
        let cwd = dir.path().join("work dir");
        std::fs::create_dir(&cwd).unwrap();
        let m = manager(dir.path());
        let mut spec = spec("pwd -P; echo \"foo=$FOO\"", &cwd);
        spec.env.push(("FOO".into(), "bar baz".into()));
        let state = run(&m, spec).await;
        let expected = format!("{}\nfoo=bar baz\n", cwd.canonicalize().unwrap().display());
        assert_eq!(state.output.text, expected);
    }

    #[tokio::test]
    async fn missing_cwd_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let err = m.run(spec("true", &dir.path().join("nope")), &CancellationToken::new()).await.unwrap_err();
        assert!(matches!(err, ProcessError::Cwd { .. }), "{err:?}");
    }

    #[tokio::test]
    async fn grandchild_holding_the_output_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let started = Instant::now();
        let state = run(&m, spec("sleep 30 & echo started", dir.path())).await;
        assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
        assert!(state.output.text.contains("started"), "{state:?}");
        assert!(!state.timed_out);
        assert_eq!(state.exit.as_ref().map(|e| e.success), Some(true));

        // The grandchild is still there (which is what made pipes hang) ...
        assert!(!group_members(state.pid).is_empty());
        // ... and we clean it up.
        signal_group(i32::try_from(state.pid).unwrap(), libc::SIGKILL).unwrap();
        assert!(group_gone(state.pid).await);
    }

    #[tokio::test]
    async fn timeout_kills_the_group_and_keeps_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let mut spec = spec("echo before; sleep 30", dir.path());
        spec.timeout = Duration::from_millis(500);
        let started = Instant::now();
        let state = run(&m, spec).await;
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        assert!(state.timed_out && !state.cancelled);
        assert!(state.output.text.contains("before"), "{state:?}");
        let exit = state.exit.expect("exit status of the killed shell");
        assert!(!exit.success && exit.signal.is_some(), "{exit:?}");
        assert!(group_gone(state.pid).await, "sleep survived the timeout");
    }

    #[tokio::test]
    async fn cancel_kills_a_foreground_command_and_keeps_the_output() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let cancel = CancellationToken::new();
        let trigger = cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            trigger.cancel();
        });
        let started = Instant::now();
        let state = m.run(spec("echo first; sleep 30", dir.path()), &cancel).await.unwrap();
        assert!(started.elapsed() < Duration::from_secs(3), "took {:?}", started.elapsed());
        assert!(state.cancelled && !state.timed_out);
        assert!(state.output.text.contains("first"), "{state:?}");
        assert!(group_gone(state.pid).await);

        // Already cancelled: nothing starts at all.
        let marker = dir.path().join("marker");
        let command = format!("touch '{}'", marker.display());
        let err = m.run(spec(&command, dir.path()), &cancel).await.unwrap_err();
        assert!(matches!(err, ProcessError::Cancelled), "{err:?}");
        assert!(!marker.exists());
    }

    #[tokio::test]
    async fn kill_leaves_no_process_of_the_group_alive() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, background("sleep 100 & sleep 100 & wait", dir.path())).await;
        let id = state.command_id.clone().unwrap();
        assert!(state.background && state.exit.is_none());
        // The shell and both sleeps.
        wait_for_members(state.pid, 3).await;

        let killed = m.kill(OWNER, &id).await.unwrap();
        assert!(killed.was_running);
        assert_eq!(killed.exit.and_then(|e| e.signal), Some(libc::SIGTERM));
        assert!(group_gone(state.pid).await, "left: {:?}", group_members(state.pid));
        assert!(matches!(m.output(OWNER, &id).await, Err(ProcessError::NoSuchCommand { .. })));
    }

    #[tokio::test]
    async fn kill_escalates_to_sigkill_when_sigterm_is_ignored() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, background("trap '' TERM; sleep 100 & sleep 100", dir.path())).await;
        let id = state.command_id.unwrap();
        wait_for_members(state.pid, 2).await;

        let started = Instant::now();
        let killed = m.kill(OWNER, &id).await.unwrap();
        assert!(started.elapsed() >= GRACE, "SIGKILL came before the grace period");
        assert!(killed.was_running);
        assert_eq!(killed.exit.and_then(|e| e.signal), Some(libc::SIGKILL));
        assert!(group_gone(state.pid).await, "left: {:?}", group_members(state.pid));
    }

    #[tokio::test]
    async fn background_polls_return_only_new_output() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let command = "for i in 1 2 3 4 5 6; do echo line$i; sleep 0.2; done";
        let state = run(&m, background(command, dir.path())).await;
        let id = state.command_id.unwrap();

        let mut seen = state.output.text;
        let mut polls_with_output = 0;
        let mut last = None;
        for _ in 0..100 {
            tokio::time::sleep(Duration::from_millis(150)).await;
            let polled = m.output(OWNER, &id).await.unwrap();
            if !polled.new_output.text.is_empty() {
                polls_with_output += 1;
            }
            seen.push_str(&polled.new_output.text);
            if !polled.running {
                last = Some(polled);
                break;
            }
        }
        let last = last.expect("the loop never finished");
        assert_eq!(seen, "line1\nline2\nline3\nline4\nline5\nline6\n");
        assert!(polls_with_output >= 2, "only {polls_with_output} polls had output");
        assert_eq!(last.exit.as_ref().map(|e| e.success), Some(true));

        // A finished job stays listed, with nothing new to say.
        let again = m.output(OWNER, &id).await.unwrap();
        assert!(!again.running && again.exit.is_some());
        assert_eq!(again.new_output, CapturedOutput::default());

        let killed = m.kill(OWNER, &id).await.unwrap();
        assert!(!killed.was_running);
        assert_eq!(killed.exit.map(|e| e.success), Some(true));
    }

    #[tokio::test]
    async fn big_output_is_truncated_but_spilled_in_full() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, spec("seq 1 200000", dir.path())).await;
        let out = &state.output;
        assert!(out.truncated && out.omitted_bytes > 0);
        assert!(out.text.starts_with("1\n2\n3\n"), "{}", &out.text[..20]);
        assert!(out.text.ends_with("199999\n200000\n"));
        assert!(out.text.contains("lines omitted; full output in"));
        assert_eq!(out.total_lines, 200_000);
        assert!(out.text.lines().count() <= 2000 + 1, "{} lines shown", out.text.lines().count());

        let full = std::fs::read_to_string(&state.output_path).unwrap();
        assert_eq!(full.len() as u64, out.total_bytes);
        assert_eq!(full.lines().count(), 200_000);
        assert!(full.ends_with("\n200000\n"));
        // What is shown plus what is omitted is everything.
        let marker = out.text.lines().find(|line| line.starts_with("... [")).unwrap();
        let shown = out.text.len() - marker.len() - 1;
        assert_eq!(shown as u64 + out.omitted_bytes, out.total_bytes);
    }

    #[tokio::test]
    async fn unknown_command_id_is_a_helpful_error() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let err = m.output(OWNER, "cmd-42").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "no background command with id `cmd-42`; this session has no background commands"
        );

        let state = run(&m, background("sleep 100", dir.path())).await;
        let id = state.command_id.unwrap();
        let err = m.kill(OWNER, "cmd-42").await.unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, ProcessError::NoSuchCommand { .. }));
        assert!(message.contains("cmd-42") && message.contains(&id), "{message}");

        m.shutdown().await;
        assert!(group_gone(state.pid).await);
        assert!(m.output(OWNER, &id).await.is_err());
    }

    #[tokio::test]
    async fn dropping_the_manager_kills_background_groups() {
        let dir = tempfile::tempdir().unwrap();
        let m = manager(dir.path());
        let state = run(&m, background("sleep 100 & sleep 100", dir.path())).await;
        wait_for_members(state.pid, 2).await;
        drop(m);
        assert!(group_gone(state.pid).await);
    }

    #[tokio::test]
    async fn default_output_dir_is_private() {
        let dir = tempfile::tempdir().unwrap();
        let m = ProcessManager::new(ProcessConfig::default());
        let state = run(&m, spec("echo secret", dir.path())).await;
        let mode = |path: &Path| std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode(&state.output_path), 0o600);
        assert_eq!(mode(state.output_path.parent().unwrap()), 0o700);
        drop(m);
        assert!(!state.output_path.exists(), "the default directory is removed on drop");
    }

    fn capture_bytes(bytes: &[u8], limits: CaptureLimits) -> CapturedOutput {
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(bytes).unwrap();
        capture_range(&file, 0, bytes.len() as u64, limits, Path::new("/out.log")).unwrap()
    }

    #[test]
    fn byte_truncation_never_splits_a_character() {
        let text = "é".repeat(1000);
        let limits = CaptureLimits { head_bytes: 5, tail_bytes: 5, max_lines: 2000 };
        let out = capture_bytes(text.as_bytes(), limits);
        assert!(out.truncated);
        assert!(!out.text.contains('\u{FFFD}'), "{:?}", out.text);
        assert_eq!(out.text, "éé\n... [1992 bytes / 0 lines omitted; full output in /out.log] ...\néé");
        assert_eq!((out.total_bytes, out.total_lines, out.omitted_bytes), (2000, 1, 1992));
    }

    #[test]
    fn too_many_lines_keep_a_fifth_at_the_head() {
        let text: String = (1..=100).map(|i| format!("l{i}\n")).collect();
        let limits = CaptureLimits { head_bytes: 1 << 20, tail_bytes: 1 << 20, max_lines: 10 };
        let out = capture_bytes(text.as_bytes(), limits);
        let tail: String = (93..=100).map(|i| format!("l{i}\n")).collect();
        let omitted = text.len() - "l1\nl2\n".len() - tail.len();
        let expected =
            format!("l1\nl2\n... [{omitted} bytes / 90 lines omitted; full output in /out.log] ...\n{tail}");
        assert_eq!(out.text, expected);
        assert_eq!((out.total_lines, out.omitted_bytes), (100, omitted as u64));

        let short = capture_bytes(b"a\nb", limits);
        assert_eq!((short.text.as_str(), short.total_lines, short.truncated), ("a\nb", 2, false));
    }
}
