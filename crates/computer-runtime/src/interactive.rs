//! Long-lived programs of a session — interpreters — talked to through pipes.
//!
//! A command runs, ends and leaves its output in a spill file; an interpreter keeps its state
//! between calls, so it stays up and is talked to through its standard input and output. It
//! starts exactly as a command does — in the session's sandbox and control group, with the
//! filtered environment, its own process group, the parent-death signal and a ledger entry — and
//! its standard error goes to a spill file (bounded like a command's). It ends when it is
//! [`terminate`](Interactive::terminate)d or dropped, or when its owner's session ends
//! ([`crate::process::ProcessManager::kill_owner`]).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use sandbox::Report;
use tokio::process::{Child, ChildStdin, ChildStdout};
use tool_core::sandbox::CallSandbox;

use crate::limits::Placed;
use crate::process::{
    CommandSpec, ExitInfo, ProcessError, ProcessManager, Spawned, group_exists, kill_placed, signal_group,
    terminate_group,
};

/// The program to start and its arguments (no shell in between).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    /// The executable: a path, or a name looked up in the command environment's `PATH`.
    pub path: PathBuf,
    /// Its arguments.
    pub args: Vec<String>,
}

/// A long-lived program to start for a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InteractiveSpec {
    /// What to run.
    pub program: Program,
    /// The working directory; it must exist.
    pub cwd: PathBuf,
    /// Variables added to (or overriding) the allowed environment.
    pub env: Vec<(String, String)>,
    /// The session it belongs to: it ends with that session's commands.
    pub owner: String,
    /// The sandbox it runs in, from the session.
    pub sandbox: CallSandbox,
}

/// The programs still running, by owner, so that a session's end takes them down too.
#[derive(Debug, Clone, Default)]
pub(crate) struct Registry {
    entries: Arc<Mutex<HashMap<u64, Entry>>>,
    next: Arc<AtomicU64>,
}

#[derive(Debug)]
struct Entry {
    owner: String,
    pgid: i32,
    /// Set once the program was reaped and its group seen empty: its id may be reused.
    gone: Arc<AtomicBool>,
}

impl Registry {
    fn add(&self, owner: &str, pgid: i32) -> (u64, Arc<AtomicBool>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let gone = Arc::new(AtomicBool::new(false));
        let entry = Entry { owner: owner.to_owned(), pgid, gone: Arc::clone(&gone) };
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).insert(id, entry);
        (id, gone)
    }

    fn remove(&self, id: u64) {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner).remove(&id);
    }

    /// Kills every program of `owner` (its session ended). Their handles find them gone.
    pub(crate) fn kill_owner(&self, owner: &str) {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        for entry in entries.values().filter(|entry| entry.owner == owner) {
            if !entry.gone.load(Ordering::Acquire) {
                let _ = signal_group(entry.pgid, libc::SIGKILL);
            }
        }
    }

    /// How many programs are running for `owner`.
    pub(crate) fn count(&self, owner: &str) -> usize {
        let entries = self.entries.lock().unwrap_or_else(PoisonError::into_inner);
        entries.values().filter(|entry| entry.owner == owner).count()
    }
}

/// A running program with pipes on its standard input and output.
#[derive(Debug)]
pub struct Interactive {
    /// Its standard input, until taken.
    pub stdin: Option<ChildStdin>,
    /// Its standard output, until taken.
    pub stdout: Option<ChildStdout>,
    child: Child,
    pid: u32,
    pgid: i32,
    stderr: Arc<File>,
    stderr_path: PathBuf,
    placed: Option<Placed>,
    sandbox: Option<Report>,
    grace: Duration,
    registry: Registry,
    id: u64,
    gone: Arc<AtomicBool>,
    ledger: Option<Arc<crate::ledger::Ledger>>,
    trim: tokio::task::JoinHandle<()>,
    exit: Option<ExitInfo>,
}

impl Interactive {
    /// The program's process id (and process group id).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Where its standard error goes (what the processes it starts print there too).
    pub fn stderr_path(&self) -> &Path {
        &self.stderr_path
    }

    /// The last `max` bytes its standard error holds, as text.
    pub fn stderr_tail(&self, max: usize) -> String {
        use std::os::unix::fs::FileExt;
        let len = self.stderr.metadata().map_or(0, |meta| meta.len());
        let start = len.saturating_sub(max as u64);
        let mut buf = vec![0; usize::try_from(len - start).unwrap_or(max)];
        let read = self.stderr.read_at(&mut buf, start).unwrap_or(0);
        buf.truncate(read);
        String::from_utf8_lossy(&buf).replace('\0', "")
    }

    /// What the sandbox enforced on it.
    pub fn sandbox(&self) -> Option<&Report> {
        self.sandbox.as_ref()
    }

    /// Sends `SIGINT` to its process group, as Ctrl-C in a terminal would.
    ///
    /// # Errors
    ///
    /// When the group is gone.
    pub fn interrupt(&self) -> io::Result<()> {
        if self.exit.is_some() {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        signal_group(self.pgid, libc::SIGINT)
    }

    /// How it ended, if it has.
    pub fn try_exit(&mut self) -> Option<ExitInfo> {
        if self.exit.is_none()
            && let Ok(Some(status)) = self.child.try_wait()
        {
            self.exit = Some(ExitInfo::from(status));
        }
        self.exit.clone()
    }

    /// Waits until it ends.
    pub async fn wait(&mut self) -> ExitInfo {
        if let Some(exit) = &self.exit {
            return exit.clone();
        }
        let exit = self.child.wait().await.map_or_else(|_| ExitInfo::unknown(), ExitInfo::from);
        self.exit = Some(exit.clone());
        exit
    }

    /// What the kernel refused its session while it ran (memory, processes), in words a model
    /// can act on.
    pub fn limit_note(&self) -> Option<String> {
        self.placed.as_ref().and_then(Placed::note)
    }

    /// Ends it and everything it started: `SIGTERM`, a grace period, then `SIGKILL`.
    pub async fn terminate(mut self) -> Option<ExitInfo> {
        let exit = match self.exit.clone() {
            Some(exit) => {
                let _ = signal_group(self.pgid, libc::SIGKILL);
                Some(exit)
            }
            None => {
                let pgid = self.pgid;
                let child = &mut self.child;
                terminate_group(pgid, self.grace, async {
                    Some(child.wait().await.map_or_else(|_| ExitInfo::unknown(), ExitInfo::from))
                })
                .await
            }
        };
        self.exit = Some(exit.clone().unwrap_or_else(ExitInfo::unknown));
        kill_placed(self.placed.as_ref()).await;
        if !group_exists(self.pgid) {
            self.gone.store(true, Ordering::Release);
        }
        exit
    }
}

impl Drop for Interactive {
    fn drop(&mut self) {
        self.trim.abort();
        // A group seen empty after the child was reaped may have its id reused: never signal it.
        let reaped = self.exit.is_some() || matches!(self.child.try_wait(), Ok(Some(_)));
        let empty = reaped && !group_exists(self.pgid);
        if !self.gone.load(Ordering::Acquire) && !empty {
            let _ = signal_group(self.pgid, libc::SIGKILL);
        }
        if let Some(group) = self.placed.take().map(|placed| placed.group) {
            // Off this thread: killing a control group waits for it to empty.
            std::thread::spawn(move || group.kill());
        }
        self.registry.remove(self.id);
        if let Some(ledger) = &self.ledger {
            ledger.forget(self.pgid);
        }
        let _ = std::fs::remove_file(&self.stderr_path);
    }
}

impl ProcessManager {
    /// Starts a long-lived program for `spec.owner`, sandboxed and limited as its commands are.
    ///
    /// # Errors
    ///
    /// As [`ProcessManager::run`] when the program cannot start.
    pub fn start_interactive(&self, spec: InteractiveSpec) -> Result<Interactive, ProcessError> {
        let command = CommandSpec {
            command: spec.program.path.display().to_string(),
            cwd: spec.cwd,
            env: spec.env,
            timeout: Duration::MAX,
            background: false,
            owner: spec.owner,
            sandbox: spec.sandbox,
            live: None,
        };
        let Spawned { mut child, pid, pgid, file, output_path, sandbox, placed } =
            self.spawn(&command, "interpreter", Some(&spec.program))?;
        let (id, gone) = self.interactive.add(&command.owner, pgid);
        let trim = self.trim_for(&file);
        let trim = tokio::spawn(async move { trim.watch().await });
        Ok(Interactive {
            stdin: child.stdin.take(),
            stdout: child.stdout.take(),
            child,
            pid,
            pgid,
            stderr: file,
            stderr_path: output_path,
            placed,
            sandbox,
            grace: self.config.kill_grace,
            registry: self.interactive.clone(),
            id,
            gone,
            ledger: self.ledger_arc(),
            trim,
            exit: None,
        })
    }

    /// How many long-lived programs `owner` has running.
    pub fn interactive_count(&self, owner: &str) -> usize {
        self.interactive.count(owner)
    }
}
