//! `toolhost-device`: runs a server's calls on this machine (the reference client executor).
//!
//! ```text
//! toolhost-device --server http://127.0.0.1:8080 --device-id laptop [--working-directory DIR]
//!     [--approval-mode auto_run|read_only|headless] [--sandbox MODE] [--network on|off] [--read-only]
//!
//! The key is read from `TOOLHOST_API_KEY` (or `--api-key`, which leaves it in the process list).
//! ```

use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use client_executor::device::{self, DeviceConfig};
use tokio_util::sync::CancellationToken;

/// Connects to a toolhost-server as this person's device and runs the calls it is sent.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// The server's base URL (http://…) or device WebSocket URL (ws://…).
    #[arg(long, env = "TOOLHOST_SERVER", default_value = "http://127.0.0.1:8080")]
    server: String,
    /// The tenant's API key, when the server requires one.
    #[arg(long, env = "TOOLHOST_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// This device's id within the tenant.
    #[arg(long, env = "TOOLHOST_DEVICE_ID", default_value = "device")]
    device_id: String,
    /// Offer only these tools (repeatable); every builtin tool by default.
    #[arg(long = "tool")]
    tools: Vec<String>,
    /// Run only read-tier calls; block writes and commands.
    #[arg(long)]
    read_only: bool,
    /// The folder calls run in on this machine (default: the current folder); a server's session
    /// cannot move it, and paths outside it are blocked here.
    #[arg(long, env = "TOOLHOST_DEVICE_FOLDER")]
    working_directory: Option<std::path::PathBuf>,
    /// How this device decides: `auto_run` (default: what the server approved runs unless this
    /// device's own audits flag it; flagged calls are blocked, no one being here to ask),
    /// `read_only` or `headless` (only what needs no approval at all).
    #[arg(long, env = "TOOLHOST_DEVICE_APPROVAL_MODE", default_value = "auto_run")]
    approval_mode: tool_executor::ApprovalMode,
    /// The sandbox commands run in here: `workspace-write` (default), `read-only` or `off`.
    #[arg(long, env = "TOOLHOST_DEVICE_SANDBOX", default_value = "workspace-write")]
    sandbox: tool_core::SandboxMode,
    /// Whether sandboxed commands may use the network (`on` by default: this is your machine).
    #[arg(long, env = "TOOLHOST_DEVICE_NETWORK", default_value = "on")]
    network: tool_core::NetworkAccess,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let executor = device::builtin_executor().map_err(anyhow::Error::msg).context("building the tools")?;
    let mut config = DeviceConfig::new(args.server, args.device_id);
    config.api_key = args.api_key;
    config.tools = (!args.tools.is_empty()).then_some(args.tools);
    config.read_only = args.read_only;
    config.approval_mode = args.approval_mode;
    let folder = match args.working_directory {
        Some(folder) => folder,
        None => std::env::current_dir().context("finding the current folder")?,
    };
    config.working_directory =
        Some(std::fs::canonicalize(&folder).with_context(|| format!("using {}", folder.display()))?);
    config.sandbox = tool_core::SandboxPolicy { mode: args.sandbox, ..tool_core::SandboxPolicy::default() }
        .with_network(args.network);
    config.reconnect_delay = Duration::from_secs(1);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    tokio::spawn(async move {
        let _ = tokio::signal::ctrl_c().await;
        stop.cancel();
    });
    device::run(config, executor, shutdown).await.context("device stopped")?;
    Ok(())
}
