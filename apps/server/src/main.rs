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
    // `check-config` answers 0 or 1, whatever is wrong (a file that does not parse included).
    let checking = std::env::args().any(|arg| arg == "check-config");
    let (cli, matches) = match toolhost_server::settings::parse(std::env::args_os()) {
        Ok(parsed) => parsed,
        // Help, version and usage errors print themselves, with clap's exit codes.
        Err(error) => match error.downcast::<clap::Error>() {
            Ok(clap_error) if checking && clap_error.use_stderr() => {
                eprintln!("{}", clap_error.render().to_string().trim_end());
                std::process::exit(1);
            }
            Ok(clap_error) => clap_error.exit(),
            Err(error) => {
                eprintln!("error: {error:#}");
                std::process::exit(if checking { 1 } else { 2 });
            }
        },
    };
    if matches!(cli.command, Some(Command::CheckConfig)) {
        let code = check_config(&cli, &matches);
        std::process::exit(code);
    }
    if let Some(Command::Backup { to }) = &cli.command {
        return backup(&cli.serve, to);
    }
    // On `mcp-stdio`, Tokio reads stdin and writes stdout on the blocking pool, and the read holds
    // its thread while it waits: two threads more, so the file tools keep the ones they were given.
    let stdio = if matches!(cli.command, Some(Command::McpStdio { .. })) { 2 } else { 0 };
    // Said at start: a variable that overrides the file is easy to miss (a unit's Environment=).
    let overrides = toolhost_server::settings::Origins::of(&matches, cli.config.as_deref())
        .overridden_by_env(&matches, cli.config.as_deref());
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .max_blocking_threads(cli.serve.blocking_threads() + stdio)
        .build()
        .context("starting the async runtime")?
        .block_on(run(cli, overrides))
}

/// Logs to standard error (the `RUST_LOG` filter; text, or JSON a line) and, when a collector is
/// configured, traces over OTLP (`toolhost_server::telemetry`): each layer with its own filter, so
/// that the pipeline's debug-level stage spans cost nothing unless traces are on.
fn init_logs_and_traces(args: &toolhost_server::ServeArgs) {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    // No credential's value reaches a log line.
    let held = toolhost_server::config::held_credentials();
    let writer = move || credentials::RedactingWriter::new(held.clone(), std::io::stderr());
    let logs = if args.log_format == "json" {
        tracing_subscriber::fmt::layer()
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .with_writer(writer)
            .with_filter(filter)
            .boxed()
    } else {
        tracing_subscriber::fmt::layer()
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_writer(writer)
            .with_filter(filter)
            .boxed()
    };
    let traces = args.otlp_endpoint().map(|endpoint| {
        let spans = tracing_subscriber::filter::Targets::new()
            .with_target("toolhost_server", tracing::Level::INFO)
            .with_target("mcp", tracing::Level::INFO)
            .with_target("tool_executor", tracing::Level::DEBUG);
        toolhost_server::telemetry::OtlpLayer::new(&endpoint, &args.otel_service_name).with_filter(spans)
    });
    tracing_subscriber::registry().with(logs).with(traces).init();
    if let Some(endpoint) = args.otlp_endpoint() {
        tracing::info!(%endpoint, service = %args.otel_service_name, "traces go to an OTLP collector");
    }
}

/// `backup --to FILE`: the SQLite journal copied while it is live, or a Postgres journal through
/// `pg_dump` (when it is installed; else what to run). The copy is readable by its owner only.
fn backup(args: &toolhost_server::ServeArgs, to: &std::path::Path) -> anyhow::Result<()> {
    let url = args.database_url()?;
    if url.starts_with("postgres://") || url.starts_with("postgresql://") {
        return pg_dump(&url, to);
    }
    let bytes =
        journal::backup(&url, to).with_context(|| format!("backing up the journal to {}", to.display()))?;
    println!("backed up the journal to {} ({bytes} bytes, readable by its owner only)", to.display());
    Ok(())
}

/// A Postgres journal through `pg_dump` (custom format, for `pg_restore`).
fn pg_dump(url: &str, to: &std::path::Path) -> anyhow::Result<()> {
    use std::os::unix::fs::OpenOptionsExt as _;
    // The URL without its password, for what is said.
    let shown = match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => format!("{}…{}", &url[..scheme + 3], &url[at..]),
        _ => url.to_owned(),
    };
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|path| std::env::split_paths(&path).collect::<Vec<_>>())
        .chain(
            ["/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin"]
                .map(Into::into),
        )
        .map(|dir| dir.join("pg_dump"))
        .find(|candidate| candidate.is_file());
    let Some(pg_dump) = found else {
        anyhow::bail!(
            "the journal is in Postgres ({shown}) and pg_dump is not installed here: run `pg_dump --format=custom \
             --file={} '<the database URL>'` where it is (restore with pg_restore)",
            to.display()
        );
    };
    std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(to).map_err(|error| {
        if error.kind() == std::io::ErrorKind::AlreadyExists {
            anyhow::anyhow!(
                "{} exists already: a backup never overwrites a file; name a new one",
                to.display()
            )
        } else {
            anyhow::anyhow!("cannot make {}: {error}", to.display())
        }
    })?;
    let output = std::process::Command::new(&pg_dump)
        .arg("--format=custom")
        .arg(format!("--file={}", to.display()))
        .arg(url)
        .output()
        .with_context(|| format!("running {}", pg_dump.display()))?;
    if !output.status.success() {
        let _ = std::fs::remove_file(to);
        anyhow::bail!(
            "pg_dump of {shown} failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let bytes = std::fs::metadata(to).map(|m| m.len()).unwrap_or(0);
    println!(
        "backed up the journal ({shown}) to {} with pg_dump ({bytes} bytes, custom format for pg_restore, readable by its owner only)",
        to.display()
    );
    Ok(())
}

/// `check-config`: what the server checks at start and more, reading and writing nothing it would
/// not (no database made or migrated); then the effective settings. Returns the exit code: 0 when
/// the settings hold, 1 with every problem found, each said with where its setting came from.
/// `[notify]`'s channels as check-config shows them: where each goes, a webhook's path and every
/// secret masked (a webhook's URL may hold its token).
fn notify_lines(args: &toolhost_server::ServeArgs) -> Vec<String> {
    let origin = |url: &str| {
        url.split_once("://")
            .map(|(scheme, rest)| format!("{scheme}://{}/****", rest.split('/').next().unwrap_or_default()))
            .unwrap_or_else(|| "****".into())
    };
    let mut lines = Vec::new();
    for hook in &args.notify.webhook {
        lines.push(format!(
            "notify.webhook = {{ tenant = {:?}, url = {:?}{} }}",
            hook.tenant,
            origin(&hook.url),
            if hook.secret.is_some() { ", secret = \"****\"" } else { "" }
        ));
    }
    for mail in &args.notify.email {
        lines.push(format!(
            "notify.email = {{ tenant = {:?}, smtp = {:?}, from = {:?}, to = {:?}{} }}",
            mail.tenant,
            mail.smtp,
            mail.from,
            mail.to,
            if mail.password.is_some() { ", password = \"****\"" } else { "" }
        ));
    }
    lines
}

fn check_config(cli: &Cli, matches: &clap::ArgMatches) -> i32 {
    use toolhost_server::settings::Origins;
    let args = &cli.serve;
    let origins = Origins::of(matches, cli.config.as_deref());
    let mut problems: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let keys = match args.keys() {
        Ok(keys) => Some(keys),
        Err(error) => {
            problems.push(format!("api-key: {error:#}"));
            None
        }
    };
    if let Some(keys) = &keys
        && let Err(error) = args.validate(keys)
    {
        problems.extend(format!("{error:#}").lines().map(str::to_owned));
    }
    match args.deny_list() {
        Ok(deny) => {
            let catalogue = toolhost_server::checks::Catalogue::of(args.mcp_config.as_deref());
            if let Err(problem) = toolhost_server::checks::deny_rules(&deny, &catalogue) {
                problems.push(problem);
            }
        }
        Err(error) => problems.push(format!("deny-rules-file: {error:#}")),
    }
    if let Some(path) = &args.hooks {
        match toolhost_server::checks::hooks_file(path) {
            Ok(warnings) => notes.extend(warnings.into_iter().map(|w| format!("hooks: {w}"))),
            Err(problem) => problems.push(problem),
        }
    }
    if let Err(error) = args.command_env() {
        problems.push(format!("command-set-env: {error:#}"));
    }
    if let Err(error) = toolhost_server::state::enabled_tools(args) {
        problems.push(format!("enable-tool: {error:#}"));
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let summary = match (args.database_url(), runtime) {
        (Ok(url), Ok(runtime)) => runtime.block_on(async {
            let mut said = Vec::new();
            // Nothing is created or migrated: a check of a new version's file must not upgrade
            // the production database.
            match journal::inspect(&url, std::time::Duration::from_secs(5)).await {
                Ok(seen) => {
                    let folder_missing = journal::sqlite_path(&url)
                        .and_then(|path| path.parent().map(std::path::Path::to_path_buf))
                        .is_some_and(|folder| !folder.as_os_str().is_empty() && !folder.is_dir());
                    if folder_missing {
                        problems
                            .push(format!("database-url: the folder of {} does not exist", seen.describe));
                    } else if seen.missing {
                        notes.push(format!(
                            "database-url: {} does not exist yet: the start makes it",
                            seen.describe
                        ));
                    }
                    if !seen.pending.is_empty() && !seen.missing {
                        notes.push(format!(
                            "database-url: {} migrations are pending; the next start runs them: {}",
                            seen.pending.len(),
                            seen.pending.join(", ")
                        ));
                    }
                    said.push(format!("journal: {}", seen.describe));
                }
                Err(error) => problems.push(format!(
                    "database-url: the journal's database cannot be used: {}",
                    database_error(&error)
                )),
            }
            if let Some(redis) = &args.redis_url {
                match redis_answers(redis).await {
                    Ok(()) => said.push("Redis answers".into()),
                    Err(error) => problems.push(format!("redis-url: {error}")),
                }
            }
            said
        }),
        (Err(error), _) => {
            problems.push(format!("database-url: {error:#}"));
            Vec::new()
        }
        (_, Err(error)) => {
            problems.push(format!("the checks could not run: {error}"));
            Vec::new()
        }
    };
    for (setting, var) in origins.overridden_by_env(matches, cli.config.as_deref()) {
        notes.push(format!(
            "{var} in the environment overrides {setting} of the configuration file (a variable wins over the file)"
        ));
    }
    println!("{}", toolhost_server::settings::effective(matches));
    for line in notify_lines(args) {
        println!("{line}");
    }
    for note in &notes {
        println!("# note: {}", origins.locate(note));
    }
    if problems.is_empty() {
        let tenants = match &keys {
            Some(keys) if !keys.is_open() => {
                format!("{} keys of {} tenants", keys.len(), keys.tenants().len())
            }
            _ => "no keys: an open server (loopback only)".to_owned(),
        };
        // What this kernel enforces for commands (the start-up log says whether the default holds).
        let support = sandbox::Support::probe();
        println!("# ok: {}; {tenants}; the kernel's sandbox: {support}", summary.join("; "));
        0
    } else {
        for problem in &problems {
            eprintln!("error: {}", origins.locate(problem));
        }
        1
    }
}

/// A database error said without the internals a driver appends.
fn database_error(error: &journal::JournalError) -> String {
    let text = error.to_string();
    // sqlx ends some errors with where in its own source they were made.
    match text.find(" at line ") {
        Some(at) if text[at..].chars().skip(9).all(|c| c.is_ascii_digit() || c == ' ') => {
            text[..at].to_owned()
        }
        _ => text,
    }
}

/// Whether Redis at `url` answers a PING within 3 s.
async fn redis_answers(url: &str) -> Result<(), String> {
    let client = redis::Client::open(url).map_err(|e| format!("{e}"))?;
    let address = client.get_connection_info().addr().to_string();
    let ping = async {
        let mut connection = client.get_multiplexed_async_connection().await?;
        redis::cmd("PING").query_async::<String>(&mut connection).await
    };
    match tokio::time::timeout(std::time::Duration::from_secs(3), ping).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(error)) => Err(format!("Redis at {address} does not answer: {error}")),
        Err(_) => Err(format!("Redis at {address} did not answer within 3 s")),
    }
}

async fn run(cli: Cli, overrides: Vec<(String, String)>) -> anyhow::Result<()> {
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
    init_logs_and_traces(&cli.serve);
    for (setting, var) in &overrides {
        tracing::warn!(setting, variable = %var, "{var} in the environment overrides the configuration file's {setting}");
    }
    if let Some(Command::McpStdio { working_directory, approval_mode }) = cli.command {
        return mcp_stdio(cli.serve, working_directory, approval_mode).await;
    }
    let args = cli.serve;
    let listen = args.listen;
    let metrics_listen = args.metrics_listen;
    // Before anything else can take a signal's default action.
    let (stopped, slot) = signals()?;
    if let Some(limit) = toolhost_server::listen::raise_descriptor_limit() {
        tracing::info!(open_files = limit, "the process's limit of open files");
    }
    let state = AppState::build(args).await?;
    let _ = slot.set(state.clone());
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
    toolhost_server::serve(state, listener, stopped).await
}

/// Tells systemd (or any manager that set `NOTIFY_SOCKET`) the server is ready; nothing without
/// one. A path starting with `@` is an abstract socket, as systemd's protocol says.
fn notify_ready() {
    notify(b"READY=1\nSTATUS=serving\n");
}

/// Says `message` to the service manager (`NOTIFY_SOCKET`); nothing without one.
fn notify(message: &[u8]) {
    use std::os::linux::net::SocketAddrExt as _;
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else { return };
    let target = target.to_string_lossy().into_owned();
    let address = match target.strip_prefix('@') {
        Some(name) => std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()),
        None => std::os::unix::net::SocketAddr::from_pathname(&target),
    };
    let sent = address
        .and_then(|address| std::os::unix::net::UnixDatagram::unbound()?.send_to_addr(message, &address));
    if let Err(error) = sent {
        tracing::warn!(%error, socket = %target, "could not tell the service manager how the server is");
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

/// Waits for `SIGTERM` or `SIGINT` (then tells the service manager the server is stopping);
/// meanwhile each `SIGHUP` reads the settings again and reloads keys and rules, here and on the
/// other instances. The handlers are installed before the server starts, so that no signal of
/// these takes the default action (a `SIGHUP` would end the process).
fn signals() -> anyhow::Result<(impl std::future::Future<Output = ()> + Send + 'static, StateSlot)> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    let mut hangup = signal(SignalKind::hangup()).context("handling SIGHUP")?;
    let slot = StateSlot::default();
    let state = slot.clone();
    let stopped = async move {
        loop {
            tokio::select! {
                _ = terminate.recv() => break,
                _ = interrupt.recv() => break,
                _ = hangup.recv() => {
                    let Some(state) = state.get() else { continue };
                    let fresh = match toolhost_server::settings::parse(std::env::args_os()) {
                        Ok((cli, _)) => Some(cli.serve),
                        Err(error) => {
                            tracing::error!(event = "reload", error = %format!("{error:#}"), "SIGHUP: the settings do not read; the keys and rules in force are kept");
                            continue;
                        }
                    };
                    if state.reload(fresh.as_ref(), "SIGHUP").is_ok() {
                        state.reload_everywhere().await;
                    }
                }
            }
        }
        // Draining first, then the service manager is told: whoever hears STOPPING and asks
        // `/readyz` already hears 503 (the serve loop cancels the same token on its turn).
        if let Some(state) = state.get() {
            state.shutdown.cancel();
        }
        notify(b"STOPPING=1\nSTATUS=draining: finishing calls in flight\n");
    };
    Ok((stopped, slot))
}

/// Where the signal handler finds the state to reload, once it is built.
type StateSlot = std::sync::Arc<std::sync::OnceLock<std::sync::Arc<AppState>>>;
