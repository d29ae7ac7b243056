//! The full engine: the machine's `python3` or `node`, one persistent process per session and
//! language, started through the computer runtime (sandbox, control group, filtered environment)
//! and talked to with one JSON line each way per run.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use computer_runtime::ComputerRuntime;
use computer_runtime::interactive::{Interactive, InteractiveSpec, Program};
use computer_runtime::process::ExitInfo;
use serde::Deserialize;
use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{ChildStdin, ChildStdout};
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::CallSandbox;

use crate::Language;

/// The Python driver.
const PYTHON: &str = include_str!("drivers/python.py");
/// The Node.js driver.
const NODE: &str = include_str!("drivers/node.js");

/// How long an interpreter may take to start and say it is ready.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// How long an interrupted run has to answer before its interpreter is killed: within the
/// pipeline's grace after a deadline, so a run given up on is answered or killed here first.
const INTERRUPT_GRACE: Duration = Duration::from_millis(2_500);

/// How long before a call's deadline a run is interrupted, so that its answer still comes back
/// within the call.
pub(crate) const INTERRUPT_RESERVE: Duration = Duration::from_secs(2);

/// The longest reply line read (head and tail, value and traceback are each capped far below).
const MAX_REPLY: usize = 4 << 20;

/// Each reply line starts with this, so that a line the code itself writes to the protocol's
/// output (Node's `process.stdout`) is told apart and shown as output.
const MARK: &str = "\u{1e}TH";

/// What a run sends back.
#[derive(Debug, Clone, Default, Deserialize)]
pub(crate) struct Reply {
    #[serde(default)]
    pub(crate) head: String,
    #[serde(default)]
    pub(crate) tail: String,
    #[serde(default)]
    pub(crate) dropped: u64,
    #[serde(default)]
    pub(crate) spill: Option<String>,
    #[serde(default)]
    pub(crate) value: Option<String>,
    #[serde(default)]
    pub(crate) error: Option<String>,
    #[serde(default)]
    pub(crate) interrupted: bool,
}

/// How a run ended.
#[derive(Debug)]
pub(crate) enum RunEnd {
    /// The interpreter answered (the code may have raised).
    Answered(Reply),
    /// Out of time or cancelled, and the interpreter answered the interrupt: state kept.
    Interrupted { reply: Reply, cancelled: bool },
    /// Out of time or cancelled, and the interpreter did not answer: it was killed.
    Killed { cancelled: bool, note: Option<String> },
    /// The interpreter died during the run.
    Died { exit: ExitInfo, stderr: String, note: Option<String> },
}

/// Where and how an interpreter starts.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    pub(crate) program: PathBuf,
    pub(crate) cwd: PathBuf,
    pub(crate) outputs: PathBuf,
    pub(crate) owner: String,
    pub(crate) sandbox: CallSandbox,
    pub(crate) max_memory: u64,
}

/// One running interpreter.
#[derive(Debug)]
pub(crate) struct Process {
    interactive: Interactive,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pub(crate) runs: u64,
    pub(crate) started: Duration,
    pub(crate) last_used: Instant,
    /// A request was written and its reply not read: a run given up on (its call dropped) may
    /// still be going, and its reply would be taken for the next run's.
    busy: bool,
    /// The sandbox and folder it was started in: a session whose sandbox changed gets a new one.
    sandbox: CallSandbox,
    cwd: PathBuf,
}

impl Process {
    /// Starts an interpreter and waits until its driver says it is ready.
    pub(crate) async fn start(
        computer: &dyn ComputerRuntime,
        language: Language,
        launch: Launch,
    ) -> Result<Self, String> {
        let began = Instant::now();
        let args = match language {
            Language::Python => {
                vec!["-u".into(), "-B".into(), "-c".into(), PYTHON.into(), launch.max_memory.to_string()]
            }
            Language::Javascript => vec![
                format!("--max-old-space-size={}", (launch.max_memory >> 20).max(64)),
                "-e".into(),
                NODE.into(),
            ],
        };
        let outputs = launch.outputs.display().to_string();
        let (sandbox, cwd) = (launch.sandbox.clone(), launch.cwd.clone());
        let spec = InteractiveSpec {
            program: Program { path: launch.program.clone(), args },
            cwd: launch.cwd,
            env: vec![
                ("OUTPUTS_DIR".into(), outputs),
                ("MPLBACKEND".into(), "Agg".into()),
                ("PYTHONDONTWRITEBYTECODE".into(), "1".into()),
                ("PYTHONIOENCODING".into(), "utf-8".into()),
                ("MALLOC_ARENA_MAX".into(), "2".into()),
            ],
            owner: launch.owner,
            sandbox: launch.sandbox,
        };
        let mut interactive = computer
            .start_interactive(spec)
            .await
            .map_err(|error| format!("{} could not start: {error}", launch.program.display()))?;
        let (Some(stdin), Some(stdout)) = (interactive.stdin.take(), interactive.stdout.take()) else {
            return Err("the interpreter started without pipes".into());
        };
        let mut process = Self {
            interactive,
            stdin,
            stdout: BufReader::new(stdout),
            runs: 0,
            started: Duration::ZERO,
            last_used: Instant::now(),
            busy: false,
            sandbox,
            cwd,
        };
        match tokio::time::timeout(START_TIMEOUT, process.read_reply()).await {
            Ok(Ok(_ready)) => {
                process.started = began.elapsed();
                Ok(process)
            }
            Ok(Err(())) => {
                let exit = process.interactive.wait().await;
                let stderr = process.interactive.stderr_tail(2000);
                Err(format!(
                    "{} ended as it started: it {}{}",
                    launch.program.display(),
                    exit_text(&exit),
                    if stderr.trim().is_empty() { String::new() } else { format!(":\n{}", stderr.trim()) }
                ))
            }
            Err(_) => {
                let _ = process.interactive.terminate().await;
                Err(format!("{} did not start within {}s", launch.program.display(), START_TIMEOUT.as_secs()))
            }
        }
    }

    /// Reads lines until a reply; a line the code wrote itself is kept as output.
    async fn read_reply(&mut self) -> Result<(Reply, String), ()> {
        let mut stray = String::new();
        loop {
            let mut line = Vec::new();
            let read = (&mut self.stdout)
                .take(MAX_REPLY as u64)
                .read_until(b'\n', &mut line)
                .await
                .map_err(|_| ())?;
            if read == 0 {
                return Err(());
            }
            let text = String::from_utf8_lossy(&line);
            match text.strip_prefix(MARK) {
                Some(reply) => {
                    let reply: Reply = serde_json::from_str(reply.trim_end()).unwrap_or_else(|error| Reply {
                        error: Some(format!("the interpreter's reply could not be read: {error}")),
                        ..Reply::default()
                    });
                    return Ok((reply, stray));
                }
                None if stray.len() < 64 * 1024 => stray.push_str(&text),
                None => {}
            }
        }
    }

    /// Runs `code`, interrupting it past `timeout` or on `cancel`.
    pub(crate) async fn run(
        &mut self,
        code: &str,
        budget: usize,
        spill: &Path,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> RunEnd {
        self.runs += 1;
        self.last_used = Instant::now();
        let request = json!({
            "code": code,
            "budget": budget,
            "spill": spill.display().to_string(),
            "timeout_ms": u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        });
        let mut line = request.to_string();
        line.push('\n');
        self.busy = true;
        if self.stdin.write_all(line.as_bytes()).await.is_err() || self.stdin.flush().await.is_err() {
            return self.died().await;
        }
        let cancelled = tokio::select! {
            reply = self.read_reply() => {
                return match reply {
                    Ok((reply, stray)) => {
                        self.busy = false;
                        RunEnd::Answered(with_stray(reply, stray))
                    }
                    Err(()) => self.died().await,
                };
            }
            () = tokio::time::sleep(timeout) => false,
            () = cancel.cancelled() => true,
        };
        // Ctrl-C: the interpreter raises `KeyboardInterrupt` in the code and answers.
        let _ = self.interactive.interrupt();
        match tokio::time::timeout(INTERRUPT_GRACE, self.read_reply()).await {
            Ok(Ok((mut reply, stray))) => {
                self.busy = false;
                reply.interrupted = true;
                RunEnd::Interrupted { reply: with_stray(reply, stray), cancelled }
            }
            Ok(Err(())) => self.died().await,
            Err(_) => RunEnd::Killed { cancelled, note: self.interactive.limit_note() },
        }
    }

    async fn died(&mut self) -> RunEnd {
        let exit = tokio::time::timeout(Duration::from_secs(2), self.interactive.wait())
            .await
            .unwrap_or(ExitInfo { code: None, signal: None, success: false });
        RunEnd::Died { exit, stderr: self.interactive.stderr_tail(2000), note: self.interactive.limit_note() }
    }

    /// Why this interpreter may not take the next run, if it may not: it has stopped (its
    /// session's end, a kill from outside), a run given up on may still be going, or the session's
    /// sandbox or folder changed since it started.
    pub(crate) fn unfit(&mut self, sandbox: &CallSandbox, cwd: &Path) -> Option<&'static str> {
        if self.interactive.try_exit().is_some() {
            Some("the session's interpreter had stopped since the last call (its processes were ended)")
        } else if self.busy {
            Some("the previous run was given up on before it answered")
        } else if self.sandbox != *sandbox || self.cwd != cwd {
            Some("the session's sandbox or folder changed, and an interpreter keeps the one it started in")
        } else {
            None
        }
    }

    /// Its process id.
    pub(crate) fn pid(&self) -> u32 {
        self.interactive.pid()
    }

    /// Ends the interpreter and what it started.
    pub(crate) async fn stop(self) {
        let _ = self.interactive.terminate().await;
    }
}

fn with_stray(mut reply: Reply, stray: String) -> Reply {
    if !stray.is_empty() {
        reply.head.insert_str(0, &stray);
    }
    reply
}

/// How a process ended, in words.
pub(crate) fn exit_text(exit: &ExitInfo) -> String {
    match (exit.code, exit.signal) {
        (_, Some(9)) => "was killed (signal 9: out of memory, or its session's limits)".into(),
        (_, Some(11)) => "crashed (signal 11, a segmentation fault)".into(),
        (_, Some(signal)) => format!("was ended by signal {signal}"),
        (Some(code), None) => format!("exited with code {code}"),
        (None, None) => "ended".into(),
    }
}
