//! `toolhost call NAME [ARGUMENTS]`: one call through the pipeline, without a model — the same
//! approval, sandbox, timeout and journal row as a model's call. Exit 0 executed, 1 failed, 3 not
//! run (denied or blocked), 130 cancelled; 2 is a usage error. For scripts, for trying a tool
//! (a mounted MCP server's included) and for checking an `mcp.toml`.

use std::io::{IsTerminal as _, Read as _};
use std::sync::Arc;

use anyhow::Context as _;
use tool_executor::{ApprovalBroker, ApprovalMode, RawCall};

use crate::setup::{self, GuardArgs};

/// Exit codes of `call`.
pub mod code {
    /// The call ran and did what was asked.
    pub const EXECUTED: u8 = 0;
    /// It ran and failed, or could not run (unknown name, invalid arguments, timeout).
    pub const FAILED: u8 = 1;
    /// A usage error: arguments that are not a JSON object (nothing was called).
    pub const USAGE: u8 = 2;
    /// A person or the policy did not let it run (3, apart from 2, a usage error).
    pub const NOT_RUN: u8 = 3;
    /// Cancelled (Ctrl-C).
    pub const CANCELLED: u8 = 130;
}

/// The arguments of `call`.
#[derive(Debug, Clone, clap::Args)]
pub struct CallArgs {
    /// The function, as a model names it (`readFile`, `runCommand`, `SERVER__TOOL` for a mounted
    /// MCP server's tool); `toolhost tools` lists them.
    pub name: String,
    /// Its arguments as a JSON object (default `{}`); `-` reads them from stdin.
    pub arguments: Option<String>,
    /// `manual` (default: ask at this terminal as policy says; without a terminal, what would ask
    /// is blocked), `auto-run`, `read-only` or `headless`.
    #[arg(long = "approval-mode", default_value = "manual", value_parser = setup::parse_mode)]
    pub mode: ApprovalMode,
    /// Print the whole result (status, content, state) as JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub guard: GuardArgs,
}

/// Runs the call; returns the exit code.
///
/// # Errors
///
/// Setup failures (no journal, an invalid MCP configuration); arguments that are not a JSON
/// object are a usage error (exit 2).
pub async fn run(args: CallArgs) -> anyhow::Result<u8> {
    let arguments = match args.arguments.as_deref() {
        None => "{}".to_owned(),
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading the arguments from stdin")?;
            text
        }
        Some(text) => text.to_owned(),
    };
    let refused = match serde_json::from_str::<serde_json::Value>(&arguments) {
        Ok(serde_json::Value::Object(_)) => None,
        Ok(_) => Some("the arguments must be a JSON object, such as '{\"path\": \"README.md\"}'".to_owned()),
        Err(error) => Some(format!("the arguments are not JSON: {error}")),
    };
    if let Some(refused) = refused {
        eprintln!("error: {refused}");
        return Ok(code::USAGE);
    }
    // Questions are asked here only when someone can see and answer them: stdin and stderr (where
    // questions go) terminals, and stdin not taken by the arguments.
    let person = std::io::stdin().is_terminal()
        && std::io::stderr().is_terminal()
        && args.arguments.as_deref() != Some("-");
    let broker: Arc<dyn ApprovalBroker> = if person {
        Arc::new(crate::ask::TerminalBroker::new(crate::ask::stdin_lines()))
    } else {
        Arc::new(client_executor::device::NoOneToAsk)
    };
    let folder = args.guard.folder()?;
    let executor = setup::executor(broker, &args.guard).await?;
    let mut args = args;
    setup::find_skills(&mut args.guard, &executor, &folder, None).await;
    for (text, _) in setup::find_hooks(&mut args.guard, &executor, &folder).await {
        eprintln!("({text})");
    }
    let session =
        setup::session(&executor, setup::new_session_id(&folder), &folder, args.mode, !person, &args.guard);
    let cancel = tokio_util::sync::CancellationToken::new();
    let interrupt = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            interrupt.cancel();
        }
    });
    // Unique in the folder's journal, where `toolhost journal --call ID` finds it.
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let call = RawCall { id: format!("call-{now:x}"), name: args.name, arguments };
    let batch = tool_executor::Batch { message_id: None, calls: vec![call], stopped_on_length: false };
    let result = executor.execute_batch_until(&session, batch, &cancel).await.pop();
    let result = result.context("the pipeline returned no result")?;
    if args.json {
        crate::out::line(serde_json::to_string_pretty(&result)?)?;
    } else if result.output.success {
        crate::out::text(&result.output.content)?;
        if !result.output.content.ends_with('\n') {
            crate::out::line("")?;
        }
    } else {
        eprintln!("{}: {}", result.status.as_str(), result.output.content);
    }
    use journal::AttemptStatus as S;
    Ok(match result.status {
        S::Executed | S::Confirmed if result.output.success => code::EXECUTED,
        S::Denied | S::Blocked => code::NOT_RUN,
        _ if cancel.is_cancelled() => code::CANCELLED,
        _ => code::FAILED,
    })
}
