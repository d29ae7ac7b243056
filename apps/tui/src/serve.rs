//! `toolhost mcp`: this machine's tools served to one local MCP client over stdio (Claude
//! Desktop, Codex, goose…), through the same pipeline, sandbox and journal as the app — the `mcp`
//! crate's server, as `toolhost-server mcp-stdio` uses it. No person is at this terminal (stdio
//! is the client's): what would ask is blocked, with the reason, unless the mode lets it run.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use tool_executor::{ApprovalMode, Batch, CallResult, Executor};

use crate::setup::{self, GuardArgs};

/// The arguments of `mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// `headless` (default: only what needs no approval runs), `auto-run` (what policy lets run
    /// without asking, in the sandbox) or `read-only`.
    #[arg(long = "approval-mode", default_value = "headless", value_parser = setup::parse_mode)]
    pub mode: ApprovalMode,
    #[command(flatten)]
    pub guard: GuardArgs,
}

struct Local {
    executor: Executor,
    folder: PathBuf,
    mode: ApprovalMode,
    guard: GuardArgs,
}

impl mcp::Backend for Local {
    fn open(&self, request: mcp::OpenRequest) -> BoxFuture<'static, Result<mcp::Opened, mcp::OpenError>> {
        // The folder given here wins over the client's roots: the person chose it.
        let _ = request;
        let session = setup::session(
            &self.executor,
            setup::new_session_id(&self.folder),
            &self.folder,
            self.mode,
            true,
            &self.guard,
        );
        let opened = mcp::Opened { executor: self.executor.clone(), session };
        Box::pin(async move { Ok(opened) })
    }

    fn admits(
        &self,
        _opened: &mcp::Opened,
        _http: Option<&http::request::Parts>,
    ) -> Result<(), mcp::OpenError> {
        Ok(())
    }

    fn run(
        &self,
        opened: &mcp::Opened,
        batch: Batch,
    ) -> BoxFuture<'static, Result<Vec<CallResult>, mcp::OpenError>> {
        let opened = opened.clone();
        Box::pin(async move { Ok(opened.executor.execute_batch(&opened.session, batch).await) })
    }

    fn close(&self, opened: mcp::Opened) -> BoxFuture<'static, ()> {
        Box::pin(async move { opened.session.cancel() })
    }
}

/// Serves until the client goes.
///
/// # Errors
///
/// A mode that would need a person, setup failures, or the transport failing.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if matches!(args.mode, ApprovalMode::Manual | ApprovalMode::AllowList) {
        anyhow::bail!("no one can be asked over stdio: use --approval-mode headless, auto-run or read-only");
    }
    let folder = args.guard.folder()?;
    let executor = setup::executor(Arc::new(client_executor::device::NoOneToAsk), &args.guard).await?;
    let backend = Local { executor, folder, mode: args.mode, guard: args.guard };
    mcp::serve_stdio(Arc::new(backend), "toolhost").await?;
    Ok(())
}
