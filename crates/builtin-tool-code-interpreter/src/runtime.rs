//! The runtime: both engines, each session's interpreters, and the results a model reads.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use computer_runtime::ComputerRuntime;
use computer_runtime::format::size as size_text;
use futures::future::BoxFuture;
use serde::Serialize;
use serde_json::Value;
use tool_core::{
    CallContext, ErrorKind, MissingService, Services, ToolError, ToolOutput, ToolRuntime, parse_arguments,
};

use crate::driver::{INTERRUPT_RESERVE, Launch, Process, RunEnd, exit_text};
use crate::in_process::InProcess;
use crate::outputs::{self, OutputFile};
use crate::{CodeApi, Engine, Language, ListOutputsArgs, MAX_CODE_BYTES, ResetArgs, RunCodeArgs, plan};

/// What the operator sets for the interpreters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpreterSettings {
    /// The Python to run (a path, or a name looked up in the command environment's `PATH`).
    pub python: PathBuf,
    /// The Node.js to run.
    pub node: PathBuf,
    /// The address space a full Python interpreter may take (`RLIMIT_AS`), and Node's heap; 0
    /// leaves it to the session's control group.
    pub max_memory_bytes: u64,
    /// How much Toolhost's resident memory may grow past what it was when in-process code first
    /// ran (and the largest single allocation in-process code may make).
    pub in_process_max_allocation: usize,
    /// How many characters of a run's output the model reads (head and tail).
    pub output_budget: usize,
    /// How many full interpreters run at once; past it the least recently used is stopped.
    pub max_processes: usize,
    /// A full interpreter unused this long is stopped (its state is lost).
    pub idle_timeout: Duration,
}

impl Default for InterpreterSettings {
    fn default() -> Self {
        Self {
            python: PathBuf::from("python3"),
            node: PathBuf::from("node"),
            max_memory_bytes: 4 << 30,
            in_process_max_allocation: 1 << 30,
            output_budget: 16_000,
            max_processes: 64,
            idle_timeout: Duration::from_secs(30 * 60),
        }
    }
}

impl InterpreterSettings {
    /// The defaults, with `TOOLHOST_PYTHON`, `TOOLHOST_NODE` and `TOOLHOST_INTERPRETER_MEMORY_MB`
    /// from the environment when set.
    pub fn from_env() -> Self {
        let mut settings = Self::default();
        if let Some(python) = std::env::var_os("TOOLHOST_PYTHON").filter(|v| !v.is_empty()) {
            settings.python = python.into();
        }
        if let Some(node) = std::env::var_os("TOOLHOST_NODE").filter(|v| !v.is_empty()) {
            settings.node = node.into();
        }
        if let Some(mb) =
            std::env::var("TOOLHOST_INTERPRETER_MEMORY_MB").ok().and_then(|v| v.parse::<u64>().ok())
        {
            settings.max_memory_bytes = mb << 20;
        }
        settings
    }
}

/// The head and tail of what a run printed, with a count of what was left out between them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Captured {
    half: usize,
    head: Vec<u8>,
    tail: VecDeque<u8>,
    total: u64,
}

impl Captured {
    pub(crate) fn new(budget: usize) -> Self {
        Self { half: (budget / 2).max(64), ..Self::default() }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.half {
            let take = bytes.len().min(self.half - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        self.tail.extend(bytes);
        while self.tail.len() > self.half {
            self.tail.pop_front();
        }
    }

    /// Bytes left out between the head and the tail.
    pub(crate) fn dropped(&self) -> u64 {
        self.total - (self.head.len() + self.tail.len()) as u64
    }

    /// The head, a marker where the middle was left out, and the tail.
    pub(crate) fn text(&self) -> String {
        let mut text = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped() > 0 {
            text.push_str(&format!("\n[… {} bytes of output left out …]\n", self.dropped()));
        }
        let tail: Vec<u8> = self.tail.iter().copied().collect();
        text.push_str(&String::from_utf8_lossy(&tail));
        text
    }
}

/// A full interpreter slot: one per session and language; `None` until started.
type Slot = Arc<tokio::sync::Mutex<Option<Process>>>;

/// Runs the code interpreter's calls.
#[derive(Debug, Clone)]
pub struct CodeInterpreter {
    computer: Option<Arc<dyn ComputerRuntime>>,
    settings: InterpreterSettings,
    in_process: InProcess,
    full: Arc<Mutex<HashMap<(String, Language), Slot>>>,
}

/// Builds the runtime: the computer runtime from the services starts full interpreters (without
/// one only the in-process engine runs), and [`InterpreterSettings`] from the services or the
/// environment.
///
/// # Errors
///
/// None today; the signature is the one every builtin tool exports.
pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
    let computer = services.get::<Arc<dyn ComputerRuntime>>().cloned();
    let settings =
        services.get::<InterpreterSettings>().cloned().unwrap_or_else(InterpreterSettings::from_env);
    Ok(Arc::new(CodeInterpreter::new(computer, settings)))
}

/// What a run reports, for render hooks and the journal.
#[derive(Debug, Clone, Serialize)]
struct RunState {
    language: Language,
    engine: Engine,
    duration_ms: u64,
    /// The interpreter was started for this run (in this many milliseconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    started_ms: Option<u64>,
    output: String,
    dropped: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    spill: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    interrupted: bool,
    /// The interpreter's state is gone; the next run starts afresh.
    state_lost: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    outputs_dir: Option<String>,
    files: Vec<OutputFile>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

fn invalid(message: impl Into<String>) -> ToolOutput {
    ToolOutput::error(ErrorKind::InvalidArguments, message)
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

impl CodeInterpreter {
    /// A runtime starting full interpreters on `computer`.
    pub fn new(computer: Option<Arc<dyn ComputerRuntime>>, settings: InterpreterSettings) -> Self {
        let in_process = InProcess::new(settings.in_process_max_allocation);
        Self { computer, settings, in_process, full: Arc::default() }
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<(String, Language), Slot>> {
        self.full.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The slot of a session's interpreter, stopping idle ones and the least recently used past
    /// the cap.
    async fn slot(&self, session: &str, language: Language) -> Slot {
        let mut stale = Vec::new();
        let slot = {
            let mut slots = self.slots();
            let slot = slots.entry((session.to_owned(), language)).or_default().clone();
            // Idle ones, and the oldest past the cap (only those not running now).
            let mut idle: Vec<((String, Language), Instant)> = slots
                .iter()
                .filter(|(key, _)| key.0 != session || key.1 != language)
                .filter_map(|(key, slot)| {
                    let guard = slot.try_lock().ok()?;
                    guard.as_ref().map(|process| (key.clone(), process.last_used))
                })
                .collect();
            idle.sort_by_key(|(_, used)| *used);
            let over = slots.len().saturating_sub(self.settings.max_processes);
            for (n, (key, used)) in idle.into_iter().enumerate() {
                if (n < over || used.elapsed() > self.settings.idle_timeout)
                    && let Some(slot) = slots.remove(&key)
                {
                    stale.push(slot);
                }
            }
            slot
        };
        for slot in stale {
            if let Some(process) = slot.lock().await.take() {
                process.stop().await;
            }
        }
        slot
    }

    async fn run_code(&self, args: RunCodeArgs, context: &CallContext) -> Result<ToolOutput, ToolOutput> {
        if args.code.trim().is_empty() {
            return Err(invalid("`code` is empty; send the code to run"));
        }
        if args.code.len() > MAX_CODE_BYTES {
            return Err(invalid(format!(
                "the code is {} bytes, more than {MAX_CODE_BYTES}; write data to a file and read it from the code",
                args.code.len()
            )));
        }
        let engine = match args.engine {
            None | Some(Engine::Auto) => plan(args.language, &args.code),
            Some(engine) => engine,
        };
        let timeout = context
            .remaining()
            .or(args.timeout_secs.map(|s| Duration::from_secs(u64::from(s))))
            .unwrap_or(Duration::from_secs(60))
            .min(Duration::from_secs(600));
        let state = match engine {
            Engine::InProcess => {
                if args.language != Language::Python {
                    return Err(invalid(
                        "the in-process engine runs Python only; use engine \"full\" for JavaScript",
                    ));
                }
                self.run_in_process(&args.code, context, timeout).await
            }
            _ => self.run_full(args.language, &args.code, context, timeout).await?,
        };
        Ok(output(state))
    }

    async fn run_in_process(&self, code: &str, context: &CallContext, timeout: Duration) -> RunState {
        // Cancelling does not reach into the interpreter; a short limit keeps it prompt.
        let limit = timeout.min(Duration::from_secs(30));
        let outcome = tokio::select! {
            outcome = self.in_process.run(&context.session_id, code, limit, self.settings.output_budget) => Some(outcome),
            () = context.cancel.cancelled() => None,
        };
        let Some(outcome) = outcome else {
            // The engine's thread finishes its time slice on its own and its REPL is not kept.
            self.in_process.reset(&context.session_id);
            let timed_out = past_deadline(context);
            return RunState {
                error: Some(if timed_out { "timed out".into() } else { "cancelled".into() }),
                interrupted: true,
                state_lost: true,
                note: Some(
                    "the in-process engine's state for this session is lost; define what you need again"
                        .into(),
                ),
                ..empty_state(Language::Python, Engine::InProcess)
            };
        };
        let interrupted = outcome.error.as_deref().is_some_and(|e| e.contains("time limit exceeded"));
        RunState {
            duration_ms: millis(outcome.duration),
            output: outcome.output.text(),
            dropped: outcome.output.dropped(),
            value: outcome.value,
            error: outcome.error,
            interrupted,
            state_lost: outcome.state_lost,
            note: interrupted.then(|| {
                format!(
                    "stopped after {}s; the in-process engine keeps its state. Make the computation \
                     smaller, or run it with engine \"full\" and a longer timeoutSecs",
                    limit.as_secs_f32()
                )
            }),
            ..empty_state(Language::Python, Engine::InProcess)
        }
    }

    async fn run_full(
        &self,
        language: Language,
        code: &str,
        context: &CallContext,
        timeout: Duration,
    ) -> Result<RunState, ToolOutput> {
        let Some(computer) = self.computer.clone() else {
            return Err(ToolOutput::error(
                ErrorKind::Execution,
                "this front end runs only the in-process engine (no processes here); use engine \"in-process\"",
            ));
        };
        let Some(temp) = context.sandbox.temp_directory.clone() else {
            return Err(ToolOutput::error(
                ErrorKind::Execution,
                "this session has no temp folder for the interpreter's outputs; the full engine cannot run",
            ));
        };
        let outputs_dir = temp.join("outputs");
        let spill_dir = temp.join("interpreter");
        for dir in [&outputs_dir, &spill_dir] {
            create_private_dir(dir).map_err(|error| {
                ToolOutput::error(ErrorKind::Execution, format!("could not make {}: {error}", dir.display()))
            })?;
        }
        let cwd = context.working_directory.clone().unwrap_or_else(|| temp.clone());
        let program = match language {
            Language::Python => self.settings.python.clone(),
            Language::Javascript => self.settings.node.clone(),
        };
        let slot = self.slot(&context.session_id, language).await;
        let mut guard = tokio::select! {
            guard = slot.lock() => guard,
            () = context.cancel.cancelled() => return Err(ToolOutput::error(ErrorKind::Cancelled, "cancelled while another run of this session's interpreter was going")),
        };
        let mut state = empty_state(language, Engine::Full);
        state.outputs_dir = Some(outputs_dir.display().to_string());
        let mut restarted = None;
        if let Some(mut process) = guard.take() {
            match process.unfit(&context.sandbox, &cwd) {
                None => *guard = Some(process),
                Some(why) => {
                    restarted = Some(why);
                    process.stop().await;
                }
            }
        }
        if guard.is_none() {
            let launch = Launch {
                program: program.clone(),
                cwd,
                outputs: outputs_dir.clone(),
                owner: context.session_id.clone(),
                sandbox: (*context.sandbox).clone(),
                max_memory: self.settings.max_memory_bytes,
            };
            let process = Process::start(computer.as_ref(), language, launch).await.map_err(|error| {
                let hint = match language {
                    Language::Python => "the machine's python3 is needed for the full engine",
                    Language::Javascript => "Node.js (`node`) is needed for JavaScript",
                };
                ToolOutput::error(ErrorKind::Execution, format!("{error}\n({hint})"))
            })?;
            state.started_ms = Some(millis(process.started));
            *guard = Some(process);
        }
        let Some(process) = guard.as_mut() else {
            return Err(ToolOutput::error(ErrorKind::Internal, "the interpreter slot was empty"));
        };
        let before = outputs::snapshot(&outputs_dir);
        // Named by interpreter and run, so a path an earlier result named keeps its output.
        let language_name = match language {
            Language::Python => "python",
            Language::Javascript => "javascript",
        };
        let spill = spill_dir.join(format!("{language_name}-{}-{}.txt", process.pid(), process.runs + 1));
        // Interrupted a little before the call's deadline, so its answer comes back within it.
        let run_for = timeout.saturating_sub(INTERRUPT_RESERVE.min(timeout / 4));
        let started = Instant::now();
        let end = process.run(code, self.settings.output_budget, &spill, run_for, &context.cancel).await;
        // A cancel at the call's deadline is the pipeline timing the call out.
        let was_cancelled = |cancelled: bool| cancelled && !past_deadline(context);
        state.duration_ms = millis(started.elapsed());
        let mut lost = false;
        match end {
            RunEnd::Interrupted { reply, cancelled } if was_cancelled(cancelled) => {
                state.output = reply_text(&reply);
                state.dropped = reply.dropped;
                state.spill = reply.spill;
                state.error = Some("cancelled".into());
                state.interrupted = true;
                state.note = Some("the run was cancelled; the interpreter's state is kept".into());
            }
            RunEnd::Answered(reply) | RunEnd::Interrupted { reply, .. } => {
                state.output = reply_text(&reply);
                state.dropped = reply.dropped;
                state.spill = reply.spill;
                state.value = reply.value;
                state.error = reply.error;
                state.interrupted = reply.interrupted;
                if reply.interrupted {
                    state.note = Some(format!(
                        "interrupted after {}s (the interpreter's state is kept); make it faster or ask \
                         for a longer timeoutSecs",
                        run_for.as_secs()
                    ));
                }
            }
            RunEnd::Killed { cancelled, note } => {
                lost = true;
                state.interrupted = true;
                state.error = Some(if was_cancelled(cancelled) {
                    "cancelled".into()
                } else {
                    format!("timed out after {}s", run_for.as_secs())
                });
                state.note = Some(join_notes(
                    "the interpreter did not answer the interrupt and was stopped: its state is lost and \
                     it starts afresh on the next call",
                    note,
                ));
            }
            RunEnd::Died { exit, stderr, note } => {
                lost = true;
                let mut error = format!("the interpreter {}", exit_text(&exit));
                if !stderr.trim().is_empty() {
                    error.push_str(&format!(":\n{}", stderr.trim()));
                }
                state.error = Some(error);
                state.note = Some(join_notes(
                    "its state is lost; it starts afresh on the next call (define what you need again)",
                    note,
                ));
            }
        }
        if lost && let Some(process) = guard.take() {
            process.stop().await;
        }
        state.state_lost = lost;
        if let Some(why) = restarted
            && state.note.is_none()
        {
            state.note = Some(format!("{why}; this run started a new one, so earlier variables are gone"));
        }
        let after = outputs::snapshot(&outputs_dir);
        state.files = after.changed_since(&before, &outputs_dir);
        Ok(state)
    }

    async fn reset(&self, args: ResetArgs, context: &CallContext) -> ToolOutput {
        let languages = match args.language {
            Some(language) => vec![language],
            None => vec![Language::Python, Language::Javascript],
        };
        let mut reset = Vec::new();
        if languages.contains(&Language::Python) && self.in_process.reset(&context.session_id) {
            reset.push("in-process Python");
        }
        for language in languages {
            let slot = self.slots().remove(&(context.session_id.clone(), language));
            if let Some(slot) = slot
                && let Some(process) = slot.lock().await.take()
            {
                process.stop().await;
                reset.push(match language {
                    Language::Python => "Python",
                    Language::Javascript => "JavaScript",
                });
            }
        }
        let content = if reset.is_empty() {
            "Nothing to reset: no interpreter of this session had state.".to_owned()
        } else {
            format!(
                "Reset: {} (variables, imports and functions are gone; files in outputs stay).",
                reset.join(", ")
            )
        };
        ToolOutput::ok(content).with_state(serde_json::json!({ "reset": reset }))
    }

    fn list_outputs(&self, context: &CallContext) -> ToolOutput {
        let Some(temp) = context.sandbox.temp_directory.as_ref() else {
            return ToolOutput::ok("This session has no outputs folder (no temp folder).");
        };
        let dir = temp.join("outputs");
        let snapshot = outputs::snapshot(&dir);
        let files = snapshot.all(&dir);
        let mut content = if files.is_empty() {
            format!("The outputs folder {} is empty.", dir.display())
        } else {
            format!("{} file(s) in {}:", files.len(), dir.display())
        };
        for file in &files {
            content.push_str(&format!("\n- {} ({}, {})", file.name, size_text(file.bytes), file.mime));
        }
        if snapshot.truncated {
            content.push_str("\n[more files than listed]");
        }
        ToolOutput::ok(content)
            .with_state(serde_json::json!({ "outputs_dir": dir.display().to_string(), "files": files }))
    }
}

/// Whether the call's deadline has passed (a cancel then is its timeout).
fn past_deadline(context: &CallContext) -> bool {
    context.deadline.is_some_and(|deadline| deadline <= std::time::Instant::now())
}

fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

fn join_notes(first: &str, more: Option<String>) -> String {
    match more {
        Some(more) => format!("{first}; {more}"),
        None => first.to_owned(),
    }
}

fn reply_text(reply: &crate::driver::Reply) -> String {
    let mut text = reply.head.clone();
    if reply.dropped > 0 {
        text.push_str(&format!("\n[… {} characters of output left out …]\n", reply.dropped));
    }
    text.push_str(&reply.tail);
    text
}

fn empty_state(language: Language, engine: Engine) -> RunState {
    RunState {
        language,
        engine,
        duration_ms: 0,
        started_ms: None,
        output: String::new(),
        dropped: 0,
        spill: None,
        value: None,
        error: None,
        interrupted: false,
        state_lost: false,
        outputs_dir: None,
        files: Vec::new(),
        note: None,
    }
}

/// The text the model reads, and the output's status.
fn output(state: RunState) -> ToolOutput {
    let language = match state.language {
        Language::Python => "python",
        Language::Javascript => "javascript",
    };
    let engine = match state.engine {
        Engine::InProcess => "in-process engine (a Python subset; no files, network or packages)",
        _ => "full interpreter",
    };
    let mut content = format!("[{language} · {engine} · {} ms", state.duration_ms);
    if let Some(started) = state.started_ms {
        content.push_str(&format!(" · started fresh in {started} ms"));
    }
    content.push(']');
    if !state.output.is_empty() {
        content.push_str("\nOutput:\n");
        content.push_str(state.output.trim_end_matches('\n'));
        if let Some(spill) = &state.spill {
            content.push_str(&format!(
                "\n[the whole output is in {spill}; read it with readFile and a line range]"
            ));
        }
    }
    if let Some(value) = &state.value {
        content.push_str(&format!("\nOut: {value}"));
    }
    if let Some(error) = &state.error {
        content.push_str(&format!("\nError:\n{error}"));
    }
    if !state.files.is_empty() {
        content.push_str(&format!(
            "\nFiles written to {}:",
            state.outputs_dir.as_deref().unwrap_or("the outputs folder")
        ));
        for file in &state.files {
            content.push_str(&format!(
                "\n- {} ({}, {}): {}",
                file.name,
                size_text(file.bytes),
                file.mime,
                file.path
            ));
        }
    }
    if let Some(note) = &state.note {
        content.push_str(&format!("\nNote: {note}"));
    }
    if state.output.is_empty() && state.value.is_none() && state.error.is_none() && state.files.is_empty() {
        content.push_str("\n(no output; end with an expression or print() to see a value)");
    }
    let failed = state.error.as_ref().map(|error| {
        let kind = if state.error.as_deref() == Some("cancelled") {
            ErrorKind::Cancelled
        } else if state.interrupted {
            ErrorKind::Timeout
        } else {
            ErrorKind::Execution
        };
        let first = error.lines().last().unwrap_or(error).to_owned();
        ToolError { kind, message: first }
    });
    let state_value = serde_json::to_value(&state).unwrap_or(Value::Null);
    ToolOutput { content, state: Some(state_value), success: failed.is_none(), error: failed }
}

impl ToolRuntime for CodeInterpreter {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Ok(api_name) = api.parse::<CodeApi>() else {
                return ToolOutput::error(
                    ErrorKind::UnknownTool,
                    format!("code-interpreter has no api `{api}`"),
                );
            };
            match api_name {
                CodeApi::RunCode => {
                    let args: RunCodeArgs = match parse_arguments(api, arguments) {
                        Ok(args) => args,
                        Err(output) => return output,
                    };
                    self.run_code(args, context).await.unwrap_or_else(|output| output)
                }
                CodeApi::ResetInterpreter => match parse_arguments::<ResetArgs>(api, arguments) {
                    Ok(args) => self.reset(args, context).await,
                    Err(output) => output,
                },
                CodeApi::ListOutputs => match parse_arguments::<ListOutputsArgs>(api, arguments) {
                    Ok(_) => self.list_outputs(context),
                    Err(output) => output,
                },
            }
        })
    }
}
