//! `toolhost`: the terminal app.
//!
//! ```text
//! toolhost [--resume] [--approval-mode manual|auto-run|read-only] [-m MODEL] [--profile P] [-C DIR]
//! toolhost exec "task" [--approval-mode headless|auto-run|read-only] [--json]
//! toolhost tools [--format text|openai|anthropic|gemini|mcp]
//! toolhost call NAME ['{"json": "arguments"}'] [--approval-mode …] [--json]   (one call, no model)
//! toolhost journal [--status S] [--tool T] [--limit N] [--call ID] [--json]
//! toolhost connect URL [--device-id ID]          (the key from TOOLHOST_API_KEY)
//! toolhost approvals --server URL                (a server's approver inbox, live)
//! toolhost mcp [-C DIR] [--approval-mode manual|auto-run|headless|read-only]   (an MCP server on stdio)
//! ```
//!
//! Models are configured in `config.toml` in the XDG config folder (profiles), or by
//! `OPENAI_API_KEY` / `OPENAI_BASE_URL` / `ANTHROPIC_API_KEY`. Calls are journalled in SQLite in
//! the data folder (`$XDG_DATA_HOME/toolhost`, or `TOOLHOST_DATA_DIR`).

use toolhost::{ask, call, chat, exec, out, serve, setup};

use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use serde_json::Value;
use tool_core::provider::Provider;

/// A local agent with any model in this folder, its tools' approvals inline, the journal of what
/// ran, and this machine as a server's device.
#[derive(Debug, Parser)]
#[command(version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TOOLHOST_COMMIT"), ")"), about, after_help = concat!(
    "Models: profiles in config.toml in the config folder ($XDG_CONFIG_HOME/toolhost/config.toml), or ",
    "OPENAI_API_KEY (with OPENAI_BASE_URL for a compatible server such as Ollama or vLLM) or ",
    "ANTHROPIC_API_KEY.\nThe journal and saved conversations live in $XDG_DATA_HOME/toolhost ",
    "(TOOLHOST_DATA_DIR overrides)."))]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// Log warnings and errors to standard error (to `toolhost.log` in the data folder on the
    /// full screen); `RUST_LOG` chooses finer.
    #[arg(long, short = 'v', global = true)]
    verbose: bool,
    #[command(flatten)]
    chat: chat::ChatArgs,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one task without a screen; the exit code says how it ended (0 answered, 1 failed, 2
    /// turn limit or budget, 130 cancelled).
    Exec(exec::ExecArgs),
    /// The tool catalogue, as text or in a provider's declaration format.
    Tools {
        /// `text`, `openai`, `anthropic`, `gemini` or `mcp`.
        #[arg(long, default_value = "text")]
        format: String,
        /// MCP servers whose tools to list too (default: `mcp.toml` in the config folder).
        #[arg(long, env = "TOOLHOST_MCP_CONFIG", value_name = "FILE")]
        mcp_config: Option<std::path::PathBuf>,
    },
    /// Run one function through the pipeline without a model (approval, sandbox, journal as for a
    /// model's call); exit 0 executed, 1 failed, 3 denied or blocked, 130 cancelled (2: usage).
    Call(call::CallArgs),
    /// The calls made in this folder, newest first.
    Journal(JournalArgs),
    /// What the agent remembers about you: `list`, `show ID`, `rm ID`.
    Memory(toolhost::memory::MemoryArgs),
    /// Knowledge bases the agent searches: `add NAME PATH…` (again to sync), `list`, `rm NAME`.
    Kb(toolhost::kb::KbArgs),
    /// Run a server's calls on this machine, as this person's device.
    Connect(ConnectArgs),
    /// Serve this machine's tools to one MCP client over stdio (the client starts this command).
    Mcp(serve::ServeArgs),
    /// Credentials the model never sees: `set NAME` (the value from standard input), `list`,
    /// `rm NAME`.
    Creds(toolhost::creds::CredsArgs),
    /// The calls of the folder's last session that changed files; `--to CALL_ID` or `--last` puts
    /// the files back to before it (exit 3: files changed since, not overwritten).
    Rewind(toolhost::rewind::RewindArgs),
    /// A server's approver inbox: what waits for your tenant on every instance, live, answered
    /// with the app's own keys (y once, s session, a always, n deny); the key from
    /// TOOLHOST_API_KEY or `toolhost creds set toolhost-server`. Without a terminal, lists what
    /// waits and ends.
    Approvals(toolhost::inbox::InboxArgs),
    /// Trust a folder (default: this one) from a script, as `/trust` does on the screen: its
    /// AGENTS.md, skills and hooks are used; `--list` lists the trusted folders.
    Trust(toolhost::trust::TrustArgs),
    /// Take a folder's trust back (default: this one).
    Untrust(toolhost::trust::TrustArgs),
}

#[derive(Debug, clap::Args)]
struct JournalArgs {
    /// Only calls that ended so: executed, failed, blocked, denied, proposed, abandoned…
    #[arg(long)]
    status: Option<String>,
    /// Only this tool.
    #[arg(long)]
    tool: Option<String>,
    /// At most this many.
    #[arg(long, default_value_t = 50)]
    limit: u32,
    /// The whole record of one call (by its call id).
    #[arg(long = "call")]
    call: Option<String>,
    /// Every folder's calls, not only this one's.
    #[arg(long)]
    all: bool,
    /// JSON lines.
    #[arg(long)]
    json: bool,
    /// The folder (default: the current one).
    #[arg(long = "cd", short = 'C', value_name = "DIR")]
    folder: Option<std::path::PathBuf>,
}

#[derive(Debug, clap::Args)]
struct ConnectArgs {
    /// The server's base URL (http://…) or device WebSocket URL (ws://…).
    url: String,
    /// The tenant's API key (prefer TOOLHOST_API_KEY: a flag shows in the process list).
    #[arg(long, env = "TOOLHOST_API_KEY", hide_env_values = true)]
    key: Option<String>,
    /// This device's id within the tenant.
    #[arg(long, env = "TOOLHOST_DEVICE_ID", default_value = "terminal")]
    device_id: String,
    /// `auto-run` (default: what the server approved runs unless this machine's own audits flag
    /// it, which is then asked here), `manual` (ask here as policy says), `read-only` or
    /// `headless` (ask nothing: what would ask is blocked).
    #[arg(long = "approval-mode", default_value = "auto-run", value_parser = setup::parse_mode)]
    mode: tool_executor::ApprovalMode,
    #[command(flatten)]
    guard: setup::GuardArgs,
}

/// Logs only when asked (`RUST_LOG`, or `--verbose` for warnings and errors): never on the
/// full screen (there they go to `toolhost.log` in the data folder), and without colour codes
/// unless standard error is a terminal.
fn init_logging(verbose: bool, full_screen: bool) {
    use std::io::IsTerminal as _;
    let filter = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => filter,
        Err(_) if verbose => "warn".into(),
        Err(_) => return,
    };
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    let held = toolhost::creds::held();
    if full_screen {
        let file = setup::data_dir().ok().and_then(|data| {
            std::fs::create_dir_all(&data).ok()?;
            std::fs::OpenOptions::new().create(true).append(true).open(data.join("toolhost.log")).ok()
        });
        if let Some(file) = file {
            // No credential's value reaches the log.
            let file = toolhost::creds::SharedFile(std::sync::Arc::new(file));
            builder
                .with_ansi(false)
                .with_writer(move || credentials::RedactingWriter::new(held.clone(), file.clone()))
                .init();
        }
        return;
    }
    builder
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(move || credentials::RedactingWriter::new(held.clone(), std::io::stderr()))
        .init();
}

fn main() -> ExitCode {
    use std::io::IsTerminal as _;
    let cli = Cli::parse();
    let full_screen = (cli.command.is_none() && !cli.chat.plain
        || matches!(cli.command, Some(Command::Approvals(_))))
        && std::io::stdin().is_terminal()
        && std::io::stdout().is_terminal();
    init_logging(cli.verbose, full_screen);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the runtime: {error}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async move {
        match cli.command {
            None if full_screen => chat::screen(cli.chat).await,
            None => chat::run(cli.chat).await,
            Some(Command::Exec(args)) => exec::run(args).await,
            Some(Command::Tools { format, mcp_config }) => tools(&format, mcp_config).await.map(|()| 0),
            Some(Command::Call(args)) => call::run(args).await,
            Some(Command::Journal(args)) => journal(args).await.map(|()| 0),
            Some(Command::Memory(args)) => toolhost::memory::run(args).await.map(|()| 0),
            Some(Command::Kb(args)) => toolhost::kb::run(args).await.map(|()| 0),
            Some(Command::Connect(args)) => connect(args).await.map(|()| 0),
            Some(Command::Mcp(args)) => serve::run(args).await.map(|()| 0),
            Some(Command::Rewind(args)) => toolhost::rewind::run(args).await,
            Some(Command::Creds(args)) => toolhost::creds::run(args).map(|()| 0),
            Some(Command::Approvals(args)) if full_screen => toolhost::inbox::screen(args).await,
            Some(Command::Approvals(args)) => toolhost::inbox::list(args).await,
            Some(Command::Trust(args)) => toolhost::trust::run(args, true).await.map(|()| 0),
            Some(Command::Untrust(args)) => toolhost::trust::run(args, false).await.map(|()| 0),
        }
    });
    // Commands still running in the background are not waited for.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    match result {
        Ok(code) => ExitCode::from(code),
        // The reader went away (`| head`): what it wanted was printed.
        Err(error) if out::is_closed(&error) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(exec::code::FAILED)
        }
    }
}

/// The tools the agent is given here — the builtin toolbox the app runs, then the tools of the
/// MCP servers `mcp_config` (or `mcp.toml`) mounts — as text or in a provider's declaration form.
async fn tools(format: &str, mcp_config: Option<std::path::PathBuf>) -> anyhow::Result<()> {
    let provider = match format {
        "text" => None,
        _ => Some(Provider::parse(format).with_context(|| {
            format!("unknown format `{format}`; use text, openai, anthropic, gemini or mcp")
        })?),
    };
    // The very toolbox the agent's sessions declare, so this lists what the model sees.
    let credentials = toolhost::creds::load()?;
    let services = tool_core::Services::new().with(credentials.clone());
    let mut toolbox = client_executor::device::builtin_toolbox_with(services)
        .map_err(anyhow::Error::msg)
        .context("building the tools")?;
    // Every server is started, so a broken one is reported now.
    let redactor = credentials.redactor();
    for note in setup::mount_mcp(&mut toolbox, mcp_config.as_deref(), true, None, Some(credentials)).await? {
        eprintln!("{}", redactor.redact(&note));
    }
    let names = toolbox.names(None);
    if let Some(provider) = provider {
        let declarations: Vec<Value> = toolbox
            .tools()
            .iter()
            .flat_map(|entry| {
                let names = &names;
                entry.manifest.apis.iter().map(move |api| {
                    let name = names.name_of(&entry.manifest.identifier, &api.name).unwrap_or(&api.name);
                    provider.declare(name, api)
                })
            })
            .collect();
        out::line(serde_json::to_string_pretty(&declarations)?)?;
        return Ok(());
    }
    for entry in toolbox.tools() {
        let manifest = &entry.manifest;
        out::line(format_args!("{} — {}", manifest.identifier, manifest.meta.description))?;
        for api in &manifest.apis {
            let name = names.name_of(&manifest.identifier, &api.name).unwrap_or(&api.name);
            let summary = api.description.lines().next().unwrap_or_default();
            out::line(format_args!("  {name:<20} {summary}"))?;
        }
    }
    Ok(())
}

async fn journal(args: JournalArgs) -> anyhow::Result<()> {
    let data = setup::data_dir()?;
    let journal = setup::journal(&data).await?;
    let folder = match &args.folder {
        Some(folder) => {
            std::fs::canonicalize(folder).with_context(|| format!("using {}", folder.display()))?
        }
        None => std::env::current_dir()?,
    };
    let key = setup::folder_key(&folder);
    let ours = |session: &str| args.all || session.starts_with(&format!("{key}-"));
    if let Some(call) = &args.call {
        let filter = journal::AttemptFilter { limit: Some(1000), ..Default::default() };
        let rows = journal.query(setup::TENANT, &filter).await?;
        let row = rows
            .into_iter()
            .find(|a| &a.call_id == call && ours(&a.session_id))
            .with_context(|| format!("no call `{call}` in this folder's journal"))?;
        out::line(serde_json::to_string_pretty(&row)?)?;
        return Ok(());
    }
    let status = match &args.status {
        Some(status) => Some(
            serde_json::from_value::<journal::AttemptStatus>(Value::String(status.clone()))
                .map_err(|_| anyhow::anyhow!("unknown status `{status}`"))?,
        ),
        None => None,
    };
    // The store returns the newest rows of the tenant; this folder's are picked from them.
    let filter =
        journal::AttemptFilter { status, tool: args.tool.clone(), limit: Some(1000), ..Default::default() };
    let rows: Vec<_> = journal
        .query(setup::TENANT, &filter)
        .await?
        .into_iter()
        .filter(|a| ours(&a.session_id))
        .take(args.limit as usize)
        .collect();
    for row in &rows {
        if args.json {
            out::line(serde_json::to_string(row)?)?;
            continue;
        }
        let arguments = row.arguments.to_string();
        let arguments: String = arguments.chars().take(80).collect();
        out::line(format_args!(
            "{}  {:<9} {}/{}  {}  {arguments}",
            setup::time_of(row.attempted_at),
            row.status.as_str(),
            row.tool,
            row.api,
            row.call_id
        ))?;
    }
    if rows.is_empty() && !args.json {
        eprintln!("no calls journalled in {} yet", folder.display());
    }
    Ok(())
}

async fn connect(args: ConnectArgs) -> anyhow::Result<()> {
    use client_executor::device::{self, DeviceConfig};
    let folder = args.guard.folder()?;
    // The server's calls run through this machine's own pipeline, journalled here, and what this
    // machine's policy asks about is asked at this terminal.
    let lines = ask::stdin_lines();
    let executor =
        setup::device_executor(std::sync::Arc::new(ask::TerminalBroker::new(lines)), &args.guard).await?;
    let mut config = DeviceConfig::new(args.url, args.device_id);
    config.person_present = true;
    config.api_key = args.key;
    config.approval_mode = args.mode;
    config.working_directory = Some(folder.clone());
    config.sandbox = args.guard.sandbox();
    // The device's sessions keep this machine's checkpoints (`toolhost rewind` here puts its
    // files back) and run this person's hooks.
    let mut guard = args.guard.clone();
    for (text, _) in setup::find_hooks(&mut guard, &executor, &folder).await {
        eprintln!("({text})");
    }
    let store = setup::checkpoint_store(&guard)?;
    let hooks = guard.hooks.clone();
    config.session_setup = Some(device::SessionSetup(std::sync::Arc::new(move |session| {
        if let Some(hooks) = &hooks {
            session.set_call_hooks(Some(hooks.clone()));
        }
        if let Some(store) = &store {
            checkpoints::Checkpointer::attach(store.clone(), session);
        }
    })));
    let shutdown = tokio_util::sync::CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    eprintln!("connected as a device; running calls in {} (Ctrl-C stops)", folder.display());
    device::run(config, executor, shutdown).await?;
    Ok(())
}
