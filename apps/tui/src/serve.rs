//! `toolhost mcp`: this machine's tools served to one local MCP client over stdio (Claude
//! Desktop, Codex, goose…), through the same pipeline, sandbox and journal as the app — the `mcp`
//! crate's server, as `toolhost-server mcp-stdio` uses it. No person is at this terminal (stdio
//! is the client's): what would ask is asked of the client's person through MCP elicitation when
//! the client can elicit, and otherwise blocked with the reason.

use std::path::PathBuf;
use std::sync::Arc;

use futures::future::BoxFuture;
use tool_executor::{ApprovalMode, Batch, CallResult, Executor};

use crate::setup::{self, GuardArgs};

/// The arguments of `mcp`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// `manual` (default: ask as policy says, through the client when it can elicit, else
    /// blocked), `auto-run` (what policy lets run without asking, in the sandbox, and ask the
    /// rest so), `headless` (only what needs no approval runs) or `read-only`.
    #[arg(long = "approval-mode", default_value = "manual", value_parser = setup::parse_mode)]
    pub mode: ApprovalMode,
    #[command(flatten)]
    pub guard: GuardArgs,
}

struct Local {
    executor: Executor,
    elicitation: Arc<mcp::Elicitation>,
    folder: PathBuf,
    mode: ApprovalMode,
    guard: GuardArgs,
}

impl mcp::Backend for Local {
    fn open(&self, request: mcp::OpenRequest) -> BoxFuture<'static, Result<mcp::Opened, mcp::OpenError>> {
        // The folder given here wins over the client's roots: the person chose it. A person is
        // reachable only through a client that can elicit.
        let session = setup::session(
            &self.executor,
            setup::new_session_id(&self.folder),
            &self.folder,
            self.mode,
            !request.elicits,
            &self.guard,
        );
        // Questions its client cannot answer are denied at once, with the reason.
        self.elicitation.only_its_client(session.id());
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

    fn elicitation(&self) -> Option<Arc<mcp::Elicitation>> {
        Some(self.elicitation.clone())
    }
}

/// Serves until the client goes.
///
/// # Errors
///
/// A mode that would need a person, setup failures, or the transport failing.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    if args.mode == ApprovalMode::AllowList {
        anyhow::bail!(
            "toolhost mcp has no allow-list: use --approval-mode manual, auto-run, headless or read-only"
        );
    }
    let folder = args.guard.folder()?;
    let elicitation = mcp::Elicitation::new(Arc::new(client_executor::device::NoOneToAsk));
    let executor = setup::executor(elicitation.clone(), &args.guard).await?;
    let mut guard = args.guard;
    // Standard error is the log of a stdio server; what was found wrong with a skill goes there.
    for (text, _) in setup::find_skills(&mut guard, &executor, &folder, None).await.describe() {
        eprintln!("({text})");
    }
    for (text, _) in setup::find_hooks(&mut guard, &executor, &folder).await {
        eprintln!("({text})");
    }
    let backend = Local { executor, elicitation, folder, mode: args.mode, guard };
    mcp::serve_stdio(Arc::new(backend), "toolhost").await?;
    Ok(())
}
