//! `toolhost-server`: see the library's documentation and `--help`.

use std::io::Read as _;

use anyhow::Context as _;
use toolhost_server::{AppState, Cli, Command, auth};

// Many small allocations per call (JSON, rows, futures): mimalloc spends less on them than the
// system allocator (see the server load numbers in docs/benchmarks.md).
#[cfg(not(feature = "heap-stats"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

// The diagnostic build: the same mimalloc, counting live bytes for `/metrics`.
#[cfg(feature = "heap-stats")]
#[global_allocator]
static ALLOCATOR: toolhost_server::memory::Counted = toolhost_server::memory::Counted;

fn main() -> anyhow::Result<()> {
    // Before the runtime's threads start: mimalloc's options are not synchronised.
    toolhost_server::memory::return_freed_memory_promptly();
    toolhost_server::memory::keep_huge_pages_off();
    let (cli, matches) = match toolhost_server::settings::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        // Help, version and usage errors print themselves, with clap's exit codes.
        Err(error) => match error.downcast::<clap::Error>() {
            Ok(clap_error) => clap_error.exit(),
            Err(error) => {
                eprintln!("error: {error:#}");
                std::process::exit(2);
            }
        },
    };
    if matches!(cli.command, Some(Command::CheckConfig)) {
        return check_config(&cli, &matches);
    }
    if let Some(Command::Backup { to }) = &cli.command {
        let url = cli.serve.database_url()?;
        let bytes = journal::backup(&url, to)
            .with_context(|| format!("backing up the journal to {}", to.display()))?;
        println!("backed up the journal to {} ({bytes} bytes)", to.display());
        return Ok(());
    }
    // On `mcp-stdio`, Tokio reads stdin and writes stdout on the blocking pool, and the read holds
    // its thread while it waits: two threads more, so the file tools keep the ones they were given.
    let stdio = if matches!(cli.command, Some(Command::McpStdio { .. })) { 2 } else { 0 };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(cli.serve.blocking_threads() + stdio)
        .build()
        .context("starting the async runtime")?
        .block_on(run(cli))
}

/// `check-config`: what the server checks at start, then the effective settings.
fn check_config(cli: &Cli, matches: &clap::ArgMatches) -> anyhow::Result<()> {
    let args = &cli.serve;
    let checked = (|| -> anyhow::Result<String> {
        let keys = args.keys()?;
        args.validate(&keys)?;
        args.deny_list()?;
        args.command_env()?;
        let url = args.database_url()?;
        // SQLite: the folder it lives in must be there to make it (nothing is created here);
        // Postgres: the server must answer.
        let database = if url.starts_with("sqlite:") && journal::sqlite_path(&url).is_none() {
            "SQLite in memory (nothing is kept)".to_owned()
        } else if let Some(path) = journal::sqlite_path(&url) {
            let folder = match path.parent() {
                Some(folder) if !folder.as_os_str().is_empty() => folder.to_path_buf(),
                _ => std::path::PathBuf::from("."),
            };
            anyhow::ensure!(folder.is_dir(), "the journal's folder {} does not exist", folder.display());
            format!("SQLite at {}", path.display())
        } else {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(10), journal::open(&url))
                    .await
                    .map_err(|_| anyhow::anyhow!("the journal's database did not answer within 10 s"))?
                    .map_err(|e| anyhow::anyhow!("the journal's database cannot be used: {e}"))
            })?;
            "a database that answers".to_owned()
        };
        let tenants = if keys.is_open() {
            "no keys: an open server (loopback only)".to_owned()
        } else {
            "keys given".to_owned()
        };
        // What this kernel enforces for commands (the start-up log says whether the default holds).
        let support = sandbox::Support::probe();
        Ok(format!("journal: {database}; {tenants}; the kernel's sandbox: {support}"))
    })();
    println!("{}", toolhost_server::settings::effective(matches));
    match checked {
        Ok(summary) => {
            println!("# ok: {summary}");
            Ok(())
        }
        Err(error) => {
            eprintln!("error: {error:#}");
            std::process::exit(1);
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Some(Command::HashKey { tenant }) => {
            let mut key = String::new();
            std::io::stdin().read_to_string(&mut key).context("reading the key from stdin")?;
            let key = key.trim();
            anyhow::ensure!(!key.is_empty(), "no key on stdin");
            println!("{}", auth::stored_form(&tenant, key));
            return Ok(());
        }
        Some(Command::NewKey { tenant, role, name }) => {
            let key = auth::generate_key().context("reading the OS random source")?;
            let stored = match (role, name) {
                (auth::Role::Agent, None) => auth::stored_form(&tenant, &key),
                (role, name) => {
                    let name = name.unwrap_or_else(|| auth::digest_prefix(&key));
                    auth::stored_form_as(&tenant, role, &name, &key)
                }
            };
            // The stored form must read back as what was asked for.
            auth::Keys::parse([stored.as_str()]).map_err(anyhow::Error::msg)?;
            println!("key:    {key}");
            println!("stored: {stored}");
            return Ok(());
        }
        Some(Command::McpStdio { .. }) | None => {}
        // Done in `main` before the runtime starts.
        Some(Command::CheckConfig | Command::Backup { .. }) => return Ok(()),
    }
    // Logs go to stderr: on `mcp-stdio`, stdout carries the protocol. Colours only on a terminal,
    // never into a log system's files.
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // No credential's value reaches a log line.
    let held = toolhost_server::config::held_credentials();
    if cli.serve.log_format == "json" {
        tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_env_filter(filter)
            .with_writer(|| credentials::RedactingWriter::new(held.clone(), std::io::stderr()))
            .init();
    } else {
        tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(|| credentials::RedactingWriter::new(held.clone(), std::io::stderr()))
            .init();
    }
    if let Some(Command::McpStdio { working_directory, approval_mode }) = cli.command {
        return mcp_stdio(cli.serve, working_directory, approval_mode).await;
    }
    let args = cli.serve;
    let listen = args.listen;
    let metrics_listen = args.metrics_listen;
    let state = AppState::build(args).await?;
    if let Some(address) = metrics_listen {
        let listener = tokio::net::TcpListener::bind(address)
            .await
            .with_context(|| format!("listening for metrics on {address}"))?;
        tracing::info!(address = %listener.local_addr()?, "metrics without a key");
        state.sandboxing.block_port(listener.local_addr()?.port());
        let app = toolhost_server::metrics_router(state.clone());
        let closing = state.closing.clone();
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move { closing.cancelled().await })
                .await;
        });
    }
    let listener =
        tokio::net::TcpListener::bind(listen).await.with_context(|| format!("listening on {listen}"))?;
    tracing::info!(address = %listener.local_addr()?, open = state.keys.is_open(), "toolhost-server listening");
    // The journal is open, the sandbox probed, the port bound: what `/readyz` checks holds, so a
    // service manager waiting for readiness (systemd `Type=notify`) may send traffic now.
    notify_ready();
    toolhost_server::serve(state, listener, shutdown_signal()).await
}

/// Tells systemd (or any manager that set `NOTIFY_SOCKET`) the server is ready; nothing without
/// one. A path starting with `@` is an abstract socket, as systemd's protocol says.
fn notify_ready() {
    use std::os::linux::net::SocketAddrExt as _;
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy().into_owned();
    let address = match target.strip_prefix('@') {
        Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()),
        None => std::os::unix::net::SocketAddr::from_pathname(&target),
    };
    let sent = address.and_then(|address| {
        std::os::unix::net::UnixDatagram::unbound()?.send_to_addr(b"READY=1\nSTATUS=serving\n", &address)
    });
    if let Err(error) = sent {
        tracing::warn!(%error, socket = %target, "could not tell the service manager the server is ready");
    }
}

/// One local MCP client over stdin and stdout.
async fn mcp_stdio(
    args: toolhost_server::ServeArgs,
    working_directory: Option<std::path::PathBuf>,
    approval_mode: tool_executor::ApprovalMode,
) -> anyhow::Result<()> {
    anyhow::ensure!(
        args.keys()?.is_open(),
        "mcp-stdio serves the person who started it, on their own machine: run it without API keys"
    );
    // One default with `toolhost mcp`: commands have no network unless the person says so.
    let mut args = args;
    args.sandbox_network.get_or_insert(tool_core::NetworkAccess::Off);
    let state = AppState::build(args).await?;
    let principal = state.keys.principal(None).map_err(|e| anyhow::anyhow!(e.message().to_owned()))?;
    let session = toolhost_server::mcp::StdioSession { principal, working_directory, approval_mode };
    let backend = std::sync::Arc::new(toolhost_server::mcp::Backend::stdio(state.clone(), session));
    let served = mcp::serve_stdio(backend, "toolhost").await;
    // The session has ended (its calls cancelled); let what they started settle, as serve does.
    state.closing.cancel();
    state.shutdown.cancel();
    state.tasks.close();
    if tokio::time::timeout(state.args.shutdown_grace(), state.tasks.wait()).await.is_err() {
        tracing::warn!("calls still settling at exit");
    }
    served.map_err(Into::into)
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(signal) => signal,
            Err(_) => return interrupt.await.unwrap_or(()),
        };
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
