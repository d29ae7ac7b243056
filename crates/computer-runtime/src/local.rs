//! [`LocalComputer`]: the runtime on this machine.

use std::path::PathBuf;

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use tool_core::sandbox::FileBoundary;

use crate::beneath::Opener;
use crate::edit::apply_edits;
use crate::error::ComputerError;
use crate::files::{
    self, ListRequest, ListState, MoveItem, MoveResult, MoveState, ReadLimits, ReadRequest, ReadState,
    WriteRequest, WriteState,
};
use crate::process::{CommandSpec, KillState, OutputState, ProcessConfig, ProcessManager, RunState};
use crate::search::{self, FoundState, GlobRequest, GrepRequest, GrepState, NameSearchRequest};
use crate::{ComputerRuntime, EditRequest, EditState};

/// Settings of a [`LocalComputer`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LocalConfig {
    /// Limits on reads.
    pub read_limits: ReadLimits,
    /// Largest file that edit loads whole.
    pub edit_max_bytes: u64,
    /// Command settings.
    pub process: ProcessConfig,
}

impl Default for LocalConfig {
    fn default() -> Self {
        Self {
            read_limits: ReadLimits::default(),
            edit_max_bytes: 16 * 1024 * 1024,
            process: ProcessConfig::default(),
        }
    }
}

/// Files, search and processes on this machine.
///
/// Blocking filesystem work runs on tokio's blocking pool so it never stalls other calls.
/// Background commands belong to this value: dropping it kills them.
#[derive(Debug)]
pub struct LocalComputer {
    config: LocalConfig,
    processes: ProcessManager,
}

impl LocalComputer {
    /// A computer with these settings.
    pub fn new(config: LocalConfig) -> Self {
        let processes = ProcessManager::new(config.process.clone());
        Self { config, processes }
    }

    /// The settings.
    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    /// The ledger of live process groups, when one was asked for and could be opened.
    pub fn ledger(&self) -> Option<&crate::ledger::Ledger> {
        self.processes.ledger()
    }

    /// How the sessions' commands are held to their limits (control groups or resource limits).
    pub fn limits(&self) -> &sandbox::groups::Groups {
        self.processes.limits()
    }

    /// How many control groups of crashed processes were swept when this computer started.
    pub fn swept_groups(&self) -> usize {
        self.processes.swept_groups()
    }

    /// The sandbox commands run in: what the kernel offers, what the operator requires.
    pub fn sandbox(&self) -> &sandbox::Sandbox {
        self.processes.sandbox()
    }
}

impl Default for LocalComputer {
    fn default() -> Self {
        Self::new(LocalConfig::default())
    }
}

/// Runs `f` on the blocking pool. The pool is bounded (the server caps it), so `f` may wait in
/// its queue; if whoever asked has gone meanwhile (the call timed out or was cancelled, and its
/// future was dropped), `f` never starts: a write the model was told produced no result must not
/// happen later. Once started, it runs to its end.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ComputerError> + Send + 'static,
) -> Result<T, ComputerError> {
    // Cancelled when the awaiting future is dropped (and, harmlessly, when it ends).
    let gone = CancellationToken::new();
    let _asker = gone.clone().drop_guard();
    tokio::task::spawn_blocking(move || {
        if gone.is_cancelled() {
            return Err(ComputerError::Internal("abandoned before it started: its call had ended".into()));
        }
        f()
    })
    .await
    .map_err(|e| ComputerError::Internal(format!("blocking task failed: {e}")))?
}

#[async_trait]
impl ComputerRuntime for LocalComputer {
    async fn list(&self, files: &FileBoundary, request: ListRequest) -> Result<ListState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || files::list(&opener, &request)).await
    }

    async fn read(&self, files: &FileBoundary, request: ReadRequest) -> Result<ReadState, ComputerError> {
        let limits = self.config.read_limits;
        let opener = Opener::new(files);
        blocking(move || files::read(&opener, &request, limits)).await
    }

    async fn write(&self, files: &FileBoundary, request: WriteRequest) -> Result<WriteState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || files::write(&opener, &request)).await
    }

    async fn edit(&self, files: &FileBoundary, request: EditRequest) -> Result<EditState, ComputerError> {
        let limit = self.config.edit_max_bytes;
        let opener = Opener::new(files);
        blocking(move || {
            // Read once through the session's folders; write back where the file really is (a
            // link's target), again through them.
            let (text, mode, real) = files::read_text_for_edit(&opener, &request.path, limit)?;
            let outcome = apply_edits(&text, &request.path.to_string_lossy(), &request.edits)?;
            files::write_atomic(&opener, &real, outcome.new_content.as_bytes(), Some(mode))?;
            Ok(EditState {
                path: request.path,
                replacements: outcome.replacements,
                fuzzy: outcome.fuzzy,
                diff: outcome.diff,
                first_changed_line: outcome.first_changed_line,
                lines_added: outcome.lines_added,
                lines_removed: outcome.lines_removed,
            })
        })
        .await
    }

    async fn search(
        &self,
        files: &FileBoundary,
        request: NameSearchRequest,
    ) -> Result<FoundState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || search::search_names(&opener, &request)).await
    }

    async fn move_items(
        &self,
        files: &FileBoundary,
        items: Vec<MoveItem>,
    ) -> Result<MoveState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || Ok(files::move_items(&opener, &items))).await
    }

    async fn rename(
        &self,
        files: &FileBoundary,
        path: PathBuf,
        new_name: String,
    ) -> Result<MoveResult, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || files::rename(&opener, &path, &new_name)).await
    }

    async fn glob(&self, files: &FileBoundary, request: GlobRequest) -> Result<FoundState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || search::glob(&opener, &request)).await
    }

    async fn grep(&self, files: &FileBoundary, request: GrepRequest) -> Result<GrepState, ComputerError> {
        let opener = Opener::new(files);
        blocking(move || search::grep(&opener, &request)).await
    }

    async fn run_command(
        &self,
        spec: CommandSpec,
        cancel: &CancellationToken,
    ) -> Result<RunState, ComputerError> {
        Ok(self.processes.run(spec, cancel).await?)
    }

    async fn command_output(&self, owner: &str, command_id: &str) -> Result<OutputState, ComputerError> {
        Ok(self.processes.output(owner, command_id).await?)
    }

    async fn kill_command(&self, owner: &str, command_id: &str) -> Result<KillState, ComputerError> {
        Ok(self.processes.kill(owner, command_id).await?)
    }

    async fn end_owner(&self, owner: &str) -> usize {
        self.processes.kill_owner(owner).await
    }

    async fn start_interactive(
        &self,
        spec: crate::interactive::InteractiveSpec,
    ) -> Result<crate::interactive::Interactive, ComputerError> {
        Ok(self.processes.start_interactive(spec)?)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_write_whose_caller_left_while_it_queued_never_happens() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let (late, waited) = (dir.path().join("late.txt"), dir.path().join("waited.txt"));
        let computer = LocalComputer::default();
        let files = FileBoundary {
            roots: vec![tool_core::FileRoot::writable(dir.path().canonicalize().unwrap())],
            ..FileBoundary::default()
        };
        runtime.block_on(async {
            // The pool's one thread is busy until told.
            let (release, held) = std::sync::mpsc::channel::<()>();
            let busy = tokio::task::spawn_blocking(move || {
                let _ = held.recv();
            });
            // Queued behind it, then given up on, as a call past its deadline is.
            let write = computer.write(&files, WriteRequest { path: late.clone(), content: "late".into() });
            assert!(tokio::time::timeout(Duration::from_millis(50), write).await.is_err());
            release.send(()).unwrap();
            busy.await.unwrap();
            // The queue is first in, first out: once this has run, so has whatever the write left.
            tokio::task::spawn_blocking(|| ()).await.unwrap();
            // A caller that waits still writes.
            computer
                .write(&files, WriteRequest { path: waited.clone(), content: "waited".into() })
                .await
                .unwrap();
        });
        assert!(!late.exists(), "the abandoned write ran after its caller had left");
        assert_eq!(std::fs::read_to_string(&waited).unwrap(), "waited");
    }
}
