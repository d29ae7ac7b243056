//! What every mode shares: the folder, the data folder, the journal, the pipeline over the builtin
//! tools, the session and the model.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tool_executor::{ApprovalBroker, ApprovalMode, Executor, Session, SessionConfig, SessionPolicy};

/// The tenant every local call is journalled under.
pub const TENANT: &str = "local";

/// Model selection flags, shared by the modes that talk to a model.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ModelArgs {
    /// A profile of config.toml (see `toolhost --help` for where it lives).
    #[arg(long, env = "TOOLHOST_PROFILE")]
    pub profile: Option<String>,
    /// The model, overriding the profile's.
    #[arg(long, short = 'm')]
    pub model: Option<String>,
    /// The wire format: `openai` (any compatible server) or `anthropic`.
    #[arg(long, value_parser = parse_provider)]
    pub provider: Option<agent::ProviderKind>,
    /// The API's base URL, overriding the profile's.
    #[arg(long)]
    pub base_url: Option<String>,
}

/// Parses an approval mode written with dashes or underscores (`auto-run`, `auto_run`).
pub fn parse_mode(text: &str) -> Result<ApprovalMode, String> {
    text.replace('-', "_").parse()
}

fn parse_provider(text: &str) -> Result<agent::ProviderKind, String> {
    match text {
        "openai" => Ok(agent::ProviderKind::Openai),
        "anthropic" => Ok(agent::ProviderKind::Anthropic),
        other => Err(format!("unknown provider `{other}`; use openai or anthropic")),
    }
}

/// How calls are guarded, shared by the modes that run calls.
#[derive(Debug, Clone, clap::Args)]
pub struct GuardArgs {
    /// The folder the agent works in (default: the current folder).
    #[arg(long = "cd", short = 'C', value_name = "DIR")]
    pub folder: Option<PathBuf>,
    /// The sandbox commands run in: `workspace-write` (writes only in the folder), `read-only`
    /// or `off`.
    #[arg(long, env = "TOOLHOST_SANDBOX", default_value = "workspace-write")]
    pub sandbox: tool_core::SandboxMode,
    /// Whether sandboxed commands may use the network.
    #[arg(long, env = "TOOLHOST_NETWORK", default_value = "off")]
    pub network: tool_core::NetworkAccess,
    /// MCP servers to mount as tools (default: `mcp.toml` in the config folder, when it exists).
    #[arg(long, env = "TOOLHOST_MCP_CONFIG", value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// The skills sessions are given (found for the folder by [`crate::skills::for_folder`]).
    #[arg(skip)]
    pub skills: Arc<tool_core::SkillSet>,
    /// The person's hooks sessions run (found for the folder by [`find_hooks`]).
    #[arg(skip)]
    pub hooks: Option<Arc<hooks::Hooks>>,
    /// Where sessions' temp folders are made (the full code interpreter's outputs, commands'
    /// `TMPDIR`): one private folder for the app, removed when it ends.
    #[arg(skip)]
    pub temp_root: Arc<TempRoot>,
    /// The largest file checkpoints keep, in MiB, before calls that change files (`toolhost
    /// rewind` puts them back); 0 keeps none.
    #[arg(long, env = "TOOLHOST_CHECKPOINT_MAX_MIB", default_value_t = 10)]
    pub checkpoint_max_mib: u64,
    /// The most the checkpoints may take, in GiB (compressed); past it calls are not checkpointed
    /// (and cannot be rewound across).
    #[arg(long, env = "TOOLHOST_CHECKPOINT_STORE_MAX_GIB", default_value_t = 5)]
    pub checkpoint_store_max_gib: u64,
    /// Writes and edits show their change first (a diff and a token); the model applies it with
    /// `resolveChange`, approved as the write it is, or discards it.
    #[arg(long, env = "TOOLHOST_PREVIEW_WRITES")]
    pub preview_writes: bool,
    /// Where the checkpoints are kept (default: the data folder's `checkpoints`).
    #[arg(skip)]
    pub checkpoint_dir: Option<PathBuf>,
    /// The model sub-agents use (see [`sub_agents`]); without one there is no `callSubAgent`.
    #[arg(skip)]
    pub sub_agents: Option<Arc<builtin_tool_sub_agent::SubAgentModels>>,
}

impl GuardArgs {
    /// The folder, resolved.
    ///
    /// # Errors
    ///
    /// The folder does not exist.
    pub fn folder(&self) -> anyhow::Result<PathBuf> {
        let folder = match &self.folder {
            Some(folder) => folder.clone(),
            None => std::env::current_dir().context("finding the current folder")?,
        };
        std::fs::canonicalize(&folder).with_context(|| format!("using {} as the folder", folder.display()))
    }

    /// The commands' sandbox in a few words, for a status line. It is the sandbox of commands
    /// only: the web tool reaches the network through its own guarded fetcher either way.
    pub fn label(&self) -> String {
        match self.sandbox {
            tool_core::SandboxMode::Off => "commands unsandboxed".to_owned(),
            mode => {
                let network = if self.network == tool_core::NetworkAccess::On { "on" } else { "off" };
                format!("commands: {}, network {network}", mode.as_str())
            }
        }
    }

    /// The sandbox policy: no command reads the credential store.
    pub fn sandbox(&self) -> tool_core::SandboxPolicy {
        tool_core::SandboxPolicy {
            mode: self.sandbox,
            deny_read: crate::creds::protected(),
            ..tool_core::SandboxPolicy::default()
        }
        .with_network(self.network)
    }
}

/// `toolhost` in the user's data folder (`$XDG_DATA_HOME/toolhost`), or `TOOLHOST_DATA_DIR`.
///
/// # Errors
///
/// No home folder, or the folder cannot be made.
pub fn data_dir() -> anyhow::Result<PathBuf> {
    use etcetera::BaseStrategy as _;
    let dir = match std::env::var_os("TOOLHOST_DATA_DIR").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => {
            etcetera::choose_base_strategy().context("finding the data folder")?.data_dir().join("toolhost")
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// The journal of this machine's local calls (SQLite, in the data folder).
///
/// # Errors
///
/// The database cannot be opened or migrated.
pub async fn journal(data: &Path) -> anyhow::Result<Arc<dyn journal::Journal>> {
    Ok(stores(data).await?.journal)
}

/// [`journal`] and the stores of the tools that keep data (memory, documents, knowledge bases)
/// on the same database.
///
/// # Errors
///
/// As [`journal`].
pub async fn stores(data: &Path) -> anyhow::Result<journal::Stores> {
    let path = data.join("local-journal.db");
    journal::open_stores(&format!("sqlite://{}", path.display()))
        .await
        .with_context(|| format!("opening the journal {}", path.display()))
}

/// The pipeline over the builtin tools and the MCP servers `guard.mcp_config` (or `mcp.toml` in
/// the config folder) mounts, journalled in the data folder's SQLite journal, asking through
/// `broker`. A server that cannot be mounted is reported on stderr with its reason and left out.
///
/// # Errors
///
/// The data folder, the journal, the toolbox, an invalid MCP configuration, or the journal's
/// housekeeping.
pub async fn executor(broker: Arc<dyn ApprovalBroker>, guard: &GuardArgs) -> anyhow::Result<Executor> {
    Ok(executor_and_records(broker, guard).await?.0)
}

/// [`executor`], and the record store its memory tool keeps memories in (for the memory view).
///
/// # Errors
///
/// As [`executor`].
pub async fn executor_and_records(
    broker: Arc<dyn ApprovalBroker>,
    guard: &GuardArgs,
) -> anyhow::Result<(Executor, Arc<dyn tool_core::storage::RecordStore>)> {
    build(broker, guard, tool_executor::ExecutorConfig::default()).await
}

/// [`executor`] for a device serving a server: outputs are cut at what a journal keeps, not at
/// the model's budget (the server cuts them for its model, and keeps the whole for reading on).
///
/// # Errors
///
/// As [`executor`].
pub async fn device_executor(broker: Arc<dyn ApprovalBroker>, guard: &GuardArgs) -> anyhow::Result<Executor> {
    let config = tool_executor::ExecutorConfig {
        content_budget: tool_executor::MAX_KEPT_BYTES,
        ..tool_executor::ExecutorConfig::default()
    };
    Ok(build(broker, guard, config).await?.0)
}

async fn build(
    broker: Arc<dyn ApprovalBroker>,
    guard: &GuardArgs,
    config: tool_executor::ExecutorConfig,
) -> anyhow::Result<(Executor, Arc<dyn tool_core::storage::RecordStore>)> {
    let journal::Stores { journal, records, knowledge } = stores(&data_dir()?).await?;
    // `readFile` reads skills' files and, from the journal, the whole of an output cut for the model.
    let resources = mcp::client::McpResources::default();
    let urls = builtin_tools::url_router()
        .with(Arc::new(tool_executor::JournalUrls::new(journal.clone())))
        .with(Arc::new(resources.clone()));
    // The store's credentials and TOOLHOST_CREDENTIAL_* variables: injected by mounts, listed by
    // the creds tool, redacted from every output.
    let credentials = crate::creds::load()?;
    let mut services = tool_core::Services::new()
        .with(records.clone())
        .with(knowledge)
        .with(Arc::new(urls))
        .with(credentials.clone());
    // TOOLHOST_EMBEDDINGS_URL and …_MODEL: memories and knowledge bases searched by meaning too.
    if let Some(embedder) = agent::OpenAiEmbedder::from_env() {
        services = services.with(Arc::new(embedder) as Arc<dyn tool_core::embed::Embedder>);
    }
    if let Some(models) = &guard.sub_agents {
        services = services.with(models.clone());
    }
    let mut toolbox = client_executor::device::builtin_toolbox_with(services)
        .map_err(anyhow::Error::msg)
        .context("building the tools")?;
    // A note may quote a server's stderr, which may hold a credential it was given.
    let redactor = credentials.redactor();
    for note in mount_mcp(
        &mut toolbox,
        guard.mcp_config.as_deref(),
        false,
        Some(resources),
        Some(credentials.clone()),
    )
    .await?
    {
        eprintln!("{}", redactor.redact(&note));
    }
    let executor = Executor::builder(Arc::new(toolbox))
        .journal(journal)
        .broker(broker)
        .config(config)
        .credentials(credentials)
        .build();
    executor.start(Duration::from_secs(60)).await.context("starting the journal's housekeeping")?;
    Ok((executor, records))
}

/// Mounts the configured MCP servers into `toolbox`; returns what to tell the person. Their tool
/// lists are remembered in the data folder, so a remembered server starts on its first call;
/// `fresh` starts every server now (to check the configuration).
///
/// # Errors
///
/// A configuration file that is given but unreadable, or invalid.
pub async fn mount_mcp(
    toolbox: &mut tool_executor::Toolbox,
    given: Option<&Path>,
    fresh: bool,
    resources: Option<mcp::client::McpResources>,
    credentials: Option<credentials::Credentials>,
) -> anyhow::Result<Vec<String>> {
    let path = match given {
        Some(path) => path.to_owned(),
        None => match agent::config::default_path().map(|p| p.with_file_name("mcp.toml")) {
            Some(path) if path.exists() => path,
            _ => return Ok(Vec::new()),
        },
    };
    let options = mcp::client::MountOptions {
        catalogues: Some(mcp::client::Catalogues::new(data_dir()?.join("mcp-tools"))),
        fresh,
        resources,
        credentials: credentials.clone(),
    };
    let mut notes = mcp::client::mount_file(&path, toolbox, &options).await?.notes;
    notes.extend(mount_apis(toolbox, &path, credentials).await?);
    Ok(notes)
}

/// Mounts the mount file's `[apis.NAME]` tables (OpenAPI services) into `toolbox`; returns what
/// to tell the person (APIs not mounted and why, schemas replaced).
///
/// # Errors
///
/// An unreadable or invalid file, or a tool identifier already in the toolbox.
pub async fn mount_apis(
    toolbox: &mut tool_executor::Toolbox,
    path: &Path,
    credentials: Option<credentials::Credentials>,
) -> anyhow::Result<Vec<String>> {
    let options = builtin_tool_api::mount::MountOptions { credentials, base_dir: None };
    let (mounted, errors) = builtin_tool_api::mount::mount_file(path, &options).await?;
    let mut notes: Vec<String> = errors.iter().map(|e| format!("not mounted: {e}")).collect();
    // What a document's reading simplified: the first few, and how many more.
    for api in &mounted {
        notes.extend(api.notes.iter().take(5).cloned());
        if api.notes.len() > 5 {
            notes.push(format!("{}: {} more notes", api.manifest.identifier, api.notes.len() - 5));
        }
    }
    notes.extend(mcp::client::add_parts(
        toolbox,
        mounted.into_iter().map(|m| (m.manifest, m.runtime)).collect(),
    )?);
    Ok(notes)
}

/// A short, stable key of a folder: sessions and journal rows of one folder share it.
pub fn folder_key(folder: &Path) -> String {
    // FNV-1a: stable across runs and builds (the std hasher is not).
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in folder.as_os_str().as_encoded_bytes() {
        hash ^= u64::from(*byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    let name = folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let name: String =
        name.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_').take(24).collect();
    format!("{name}-{hash:016x}")
}

/// A new session id for `folder`: its key and the time.
pub fn new_session_id(folder: &Path) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis());
    // Two processes (or two sessions of one) in the same millisecond still differ.
    static COUNT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{}-{now:x}-{:x}{n:x}", folder_key(folder), std::process::id())
}

/// Finds the skills for `folder` ([`crate::skills::for_folder`], the project's only when the
/// folder is trusted) and gives them to the sessions `guard` opens; the list takes about 2 % of
/// `context_window` (tokens) in the system prompt.
pub async fn find_skills(
    guard: &mut GuardArgs,
    executor: &Executor,
    folder: &Path,
    context_window: Option<u64>,
) -> crate::skills::Skills {
    let budget =
        context_window.map_or(tool_core::skills::DEFAULT_PROMPT_BUDGET, crate::skills::prompt_budget);
    let skills = crate::skills::for_folder(executor.journal().map(AsRef::as_ref), folder, budget).await;
    guard.skills = skills.set.clone();
    skills
}

/// The person's hooks for `folder`: `hooks.json` in the configuration folder, and the folder's
/// own (`.toolhost/hooks.json`, `.claude/settings.json`, `.claude/settings.local.json`) only when
/// `trusted`. Returns them (none: `None`) and what to tell the person.
pub fn hooks_for(folder: &Path, trusted: bool) -> (Option<Arc<hooks::Hooks>>, Vec<(String, bool)>) {
    let config_dir = agent::config::default_path().and_then(|path| path.parent().map(Path::to_path_buf));
    let set = hooks::for_folder(config_dir.as_deref(), folder, trusted);
    let mut notes: Vec<(String, bool)> = set.warnings.iter().map(|w| (format!("hooks: {w}"), true)).collect();
    if set.is_empty() {
        return (None, notes);
    }
    let mut events: Vec<&str> = set.hooks.iter().map(|h| h.event.as_str()).collect();
    events.dedup();
    notes.insert(0, (format!("{} hook(s) run on {}", set.hooks.len(), events.join(", ")), false));
    (Some(Arc::new(hooks::Hooks::new(set))), notes)
}

/// Finds the person's hooks for `folder` ([`hooks_for`], the folder's own only when it is
/// trusted) and gives them to the sessions `guard` opens; returns what to tell the person.
pub async fn find_hooks(guard: &mut GuardArgs, executor: &Executor, folder: &Path) -> Vec<(String, bool)> {
    let trusted = match executor.journal() {
        Some(journal) => crate::trust::trusted_by(journal.as_ref(), folder).await.ok().flatten().is_some(),
        None => false,
    };
    let (hooks, notes) = hooks_for(folder, trusted);
    guard.hooks = hooks;
    notes
}

/// The app's own temp folder, made on first use (private, in the system's temp folder) and
/// removed when the app ends; each session's temp folder is inside it.
#[derive(Debug, Default)]
pub struct TempRoot(std::sync::OnceLock<Option<tempfile::TempDir>>);

impl TempRoot {
    /// The temp folder of session `id` (made by the session when it opens), or `None` when the
    /// app's folder cannot be made (then the full code interpreter says so).
    pub fn session(&self, id: &str) -> Option<PathBuf> {
        let root = self.0.get_or_init(|| match tempfile::Builder::new().prefix("toolhost-").tempdir() {
            Ok(dir) => Some(dir),
            Err(error) => {
                tracing::warn!(%error, "no temp folder for sessions: the full code interpreter cannot run");
                None
            }
        });
        // Session ids are made here, but never trust a name on a path.
        let name: String =
            id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
        root.as_ref().map(|root| root.path().join(name))
    }
}

/// Opens a session in `folder` with these guards; with `no_person`, whatever would ask is blocked.
pub fn session(
    executor: &Executor,
    id: String,
    folder: &Path,
    mode: ApprovalMode,
    no_person: bool,
    guard: &GuardArgs,
) -> Arc<Session> {
    let session = executor.open_session(SessionConfig {
        temp_directory: guard.temp_root.session(&id),
        id,
        tenant: TENANT.into(),
        working_directory: Some(folder.to_owned()),
        // The system temp folders are outside, as any other folder, unless config.toml says
        // `temp_inside = true`.
        policy: SessionPolicy { mode, no_person, exclude_temp: !temp_inside(), ..SessionPolicy::default() },
        sandbox: guard.sandbox(),
        project: Some(folder.display().to_string()),
        skills: guard.skills.clone(),
        preview_writes: guard.preview_writes,
        // The credential store is no file tool's to read or write.
        protected_paths: crate::creds::protected(),
        ..SessionConfig::default()
    });
    if let Some(hooks) = &guard.hooks {
        session.set_call_hooks(Some(hooks.clone()));
    }
    match checkpoint_store(guard) {
        Ok(Some(store)) => {
            checkpoints::Checkpointer::attach(store, &session);
        }
        Ok(None) => {}
        Err(error) => tracing::warn!(%error, "checkpoints are off: the store cannot be opened"),
    }
    session
}

/// The checkpoint store `guard` names (`None` when checkpoints are off).
///
/// # Errors
///
/// The data folder or the store cannot be made.
pub fn checkpoint_store(guard: &GuardArgs) -> anyhow::Result<Option<Arc<checkpoints::Store>>> {
    if guard.checkpoint_max_mib == 0 {
        return Ok(None);
    }
    let dir = match &guard.checkpoint_dir {
        Some(dir) => dir.clone(),
        None => data_dir()?.join("checkpoints"),
    };
    let store = checkpoints::Store::open(dir, guard.checkpoint_max_mib.saturating_mul(1024 * 1024))?
        .with_budget(guard.checkpoint_store_max_gib.saturating_mul(1024 * 1024 * 1024));
    Ok(Some(Arc::new(store)))
}

/// The model, from config.toml, the environment and the flags.
///
/// # Errors
///
/// No model configured, an unknown profile, or an invalid file.
pub fn model(args: &ModelArgs) -> anyhow::Result<agent::ModelProfile> {
    let path = agent::config::default_path().context("finding the configuration folder")?;
    let file = agent::ConfigFile::load(&path)?;
    let overrides = agent::Overrides {
        profile: args.profile.clone(),
        model: args.model.clone(),
        provider: args.provider,
        base_url: args.base_url.clone(),
    };
    let env = |name: &str| std::env::var(name).ok();
    Ok(agent::config::resolve(&file, &path.display().to_string(), &overrides, &env)?)
}

/// Whether config.toml counts the system temp folders as inside the working folder
/// (`temp_inside = true`); an unreadable file says no. Read once per process: every session
/// opened (the console's runs, `!` commands) asks.
pub fn temp_inside() -> bool {
    static INSIDE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *INSIDE.get_or_init(|| {
        agent::config::default_path()
            .and_then(|path| agent::ConfigFile::load(&path).ok())
            .and_then(|file| file.temp_inside)
            .unwrap_or(false)
    })
}

/// The `theme` config.toml names, if any (an unreadable file names none: the model's setup says
/// what is wrong with it).
pub fn configured_theme() -> Option<String> {
    let path = agent::config::default_path()?;
    agent::ConfigFile::load(&path).ok()?.theme
}

/// The model sub-agents use: the profile `config.toml` names as `sub_agent` (a cheaper one, say),
/// else the conversation's own. A named profile that cannot be used is said, and the
/// conversation's is used instead.
pub fn sub_agents(conversation: &agent::ModelProfile) -> Arc<builtin_tool_sub_agent::SubAgentModels> {
    let named = agent::config::default_path().and_then(|path| {
        let file = agent::ConfigFile::load(&path).ok()?;
        let name = file.sub_agent.clone()?;
        let overrides = agent::Overrides { profile: Some(name.clone()), ..agent::Overrides::default() };
        let env = |name: &str| std::env::var(name).ok();
        match agent::config::resolve(&file, &path.display().to_string(), &overrides, &env) {
            Ok(profile) => Some(profile),
            Err(error) => {
                eprintln!("(sub_agent = \"{name}\" cannot be used: {error}; sub-agents use the conversation's model)");
                None
            }
        }
    });
    let mut models = builtin_tool_sub_agent::SubAgentModels::new();
    for profile in named.iter().chain(std::iter::once(conversation)) {
        match profile.client() {
            Ok(client) => {
                models = models.with_model(builtin_tool_sub_agent::SubAgentModel {
                    name: profile.name.clone(),
                    client,
                    config: profile.agent_config(),
                });
            }
            Err(error) => eprintln!("(the model `{}` cannot be used for sub-agents: {error})", profile.name),
        }
    }
    Arc::new(models)
}

/// `YYYY-MM-DD HH:MM:SS` (UTC) of Unix milliseconds.
pub fn time_of(ms: i64) -> String {
    let seconds = ms.div_euclid(1000);
    let day = seconds.div_euclid(86_400);
    let rest = seconds.rem_euclid(86_400);
    format!(
        "{} {:02}:{:02}:{:02}",
        tool_core::manifest::civil_date(day),
        rest / 3600,
        rest % 3600 / 60,
        rest % 60
    )
}
