//! The server's shared state and how it is built from the settings.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use builtin_tools::Registry;
use journal::Journal;
use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tool_core::sandbox::{NetworkAccess, ReadAccess, SandboxMode, SandboxPolicy};
use tool_executor::{
    ApprovalMode, Executor, ExecutorConfig, LocalBroker, Session, SessionConfig, SessionPolicy, Toolbox,
};
use utoipa::ToSchema;

use crate::auth::Keys;
use crate::cluster::{Cluster, ClusterMessage};
use crate::config::ServeArgs;
use crate::devices::{Devices, Route, Routed};
use crate::error::ApiError;
use crate::metrics::Metrics;

/// Where a session's tools run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RunsOn {
    /// In the server's process, on the server's files.
    #[default]
    Server,
    /// On a client executor (a device) of the session's tenant.
    Device,
}

/// A session as the API shows it (and as it is stored in the journal).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct SessionView {
    /// The session's id.
    pub id: String,
    /// `active` or `ended`.
    pub status: String,
    /// The folder tools work in.
    pub working_directory: Option<String>,
    /// The approval mode.
    pub approval_mode: ApprovalMode,
    /// Pre-authorised calls: `tool/api`, `tool/*` or `tool`.
    pub allow_list: Vec<String>,
    /// The most time all calls of the session may take.
    pub time_budget_ms: Option<u64>,
    /// The user.
    pub user_id: Option<String>,
    /// The agent.
    pub agent_id: Option<String>,
    /// The tools the model is offered.
    pub tools: Vec<String>,
    /// Run every call alone, in the model's order.
    pub sequential: bool,
    /// Where "always allow" decisions are kept (default: the working directory).
    pub project: Option<String>,
    /// Writes and edits show their change first (`resolveChange` applies or discards it).
    #[serde(default)]
    pub preview_writes: bool,
    /// The operator's model profile its sub-agents use (default: the operator's default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sub_agent_model: Option<String>,
    /// Where tools run.
    pub runs_on: RunsOn,
    /// The device, when `runs_on` is `device` and one was named.
    pub device_id: Option<String>,
    /// The sandbox the session's commands run in (on the server; a device applies its own).
    #[serde(default)]
    pub sandbox: SessionSandbox,
    /// When it was created (Unix milliseconds).
    pub created_at: i64,
    /// Deferred functions `searchTools` has declared to the session's model (kept here so that
    /// another instance, or this one after a restart, declares them too).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub activated_tools: Vec<String>,
    /// The key that opened it (`TENANT/ROLE/NAME`): who proposes its calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_by: Option<String>,
}

/// What a session chose of the sandbox, within what the operator allows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SessionSandbox {
    /// `workspace-write` (the default), `read-only` or `off`.
    pub mode: SandboxMode,
    /// `off` or `on`.
    pub network: NetworkAccess,
}

/// A session held in memory.
pub struct SessionEntry {
    /// The tenant.
    pub tenant: String,
    /// The pipeline's session.
    pub session: Arc<Session>,
    /// What the API shows.
    pub view: SessionView,
    /// When it was last asked for (Unix milliseconds): idle sessions expire.
    pub last_used: std::sync::atomic::AtomicI64,
}

impl SessionEntry {
    fn new(tenant: &str, session: Arc<Session>, view: SessionView) -> Self {
        Self {
            tenant: tenant.to_owned(),
            session,
            view,
            last_used: std::sync::atomic::AtomicI64::new(now_ms()),
        }
    }
}

impl std::fmt::Debug for SessionEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SessionEntry").field("id", &self.view.id).finish_non_exhaustive()
    }
}

/// Everything the handlers share.
pub struct AppState {
    /// The settings it was built from.
    pub args: ServeArgs,
    /// This instance's id.
    pub instance_id: String,
    /// The pipeline.
    pub executor: Executor,
    /// The journal.
    pub journal: Arc<dyn Journal>,
    /// The records tools keep (memories), on the journal's database.
    pub records: Arc<dyn tool_core::storage::RecordStore>,
    /// The knowledge bases, on the journal's database.
    pub knowledge: Arc<dyn tool_core::knowledge::KnowledgeStore>,
    /// The embeddings endpoint, when one is configured.
    pub embedder: Option<Arc<dyn tool_core::embed::Embedder>>,
    /// Questions waiting at this instance.
    pub broker: Arc<LocalBroker>,
    /// The pipeline's broker: asks MCP clients that can elicit, and `broker` for the rest.
    pub elicitation: Arc<mcp::Elicitation>,
    /// Accepted keys.
    pub keys: Keys,
    /// Client executors.
    pub devices: Arc<Devices>,
    /// The cluster, when Redis is configured.
    pub cluster: Option<Arc<Cluster>>,
    /// Every instance's events, for this instance's watchers (event streams, the console).
    pub bus: Arc<crate::bus::Bus>,
    /// The folders the server writes to (the SQLite journal's, the state folder): readiness
    /// watches their free space.
    folders: Vec<PathBuf>,
    /// The listener's connections, once it serves.
    connections: std::sync::OnceLock<Arc<crate::listen::Tracker>>,
    /// The address the API listener took (its port when `--listen` named port 0).
    bound: std::sync::OnceLock<std::net::SocketAddr>,
    /// When each key (`TENANT/ROLE/NAME`) was last used at this instance (the operator's page).
    key_uses: std::sync::Mutex<HashMap<String, i64>>,
    /// The last check of whether a journal that failed is back (see [`Self::journal_ready`]).
    journal_probe: tokio::sync::Mutex<Option<(Instant, Result<(), String>)>>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Enabled tools, in registry order.
    pub tools: Vec<String>,
    /// Sessions held here.
    pub sessions: RwLock<HashMap<String, Arc<SessionEntry>>>,
    /// Sessions ended through this instance: a load that raced the end never holds them again.
    ended: std::sync::Mutex<EndedSessions>,
    /// Batches in flight (spawned, so a client that goes away cannot drop a call half-way).
    pub tasks: TaskTracker,
    /// Fires when shutdown starts: no new calls, readiness fails, event streams close.
    pub shutdown: CancellationToken,
    /// Fires once the calls in flight have finished (or been cancelled) at shutdown: device
    /// sockets and the cluster inbox close only then, so device calls can finish in the grace.
    pub closing: CancellationToken,
    /// Files, search and processes on this machine (its commands' sandbox, their jobs).
    pub computer: Arc<computer_runtime::LocalComputer>,
    /// What tenants may choose of the sandbox, and what they may never read.
    pub sandboxing: Sandboxing,
    /// Approval modes sessions may choose.
    pub approval_modes: Vec<ApprovalMode>,
    /// What each tenant may use at once.
    pub limits: Arc<crate::limits::Limits>,
    /// What each of the operator's skills folders holds, read again after a while.
    skills: std::sync::Mutex<HashMap<PathBuf, FoundSkills>>,
    /// The operator's hooks (`--hooks`), run for every session's calls.
    pub hooks: Option<Arc<hooks::Hooks>>,
    /// What files were before the calls that changed them, in the state folder (`None`:
    /// `--checkpoint-max-mib 0`).
    pub checkpoints: Option<Arc<checkpoints::Store>>,
    /// The operator's models for sub-agents (`--models`).
    pub sub_agents: Option<Arc<builtin_tool_sub_agent::SubAgentModels>>,
}

/// The operator's model profiles for sub-agents (`--models`), each with its key from this
/// server's environment.
fn sub_agent_models(args: &ServeArgs) -> anyhow::Result<Option<Arc<builtin_tool_sub_agent::SubAgentModels>>> {
    use builtin_tool_sub_agent::{SubAgentLimits, SubAgentModel, SubAgentModels};
    let Some(path) = &args.models else { return Ok(None) };
    let file = agent::ConfigFile::load(path)?;
    let env = |name: &str| std::env::var(name).ok();
    let limits = SubAgentLimits {
        max_turns: args.sub_agent_max_turns.max(1),
        token_budget: args.sub_agent_token_budget,
    };
    let mut models = SubAgentModels::new().with_limits(limits);
    for name in file.profiles.keys() {
        let overrides = agent::Overrides { profile: Some(name.clone()), ..agent::Overrides::default() };
        let profile = agent::config::resolve(&file, &path.display().to_string(), &overrides, &env)?;
        if profile.api_key.is_none() {
            tracing::warn!(profile = %name, variable = %profile.api_key_env, "--models: no key in the environment; sent without one");
        }
        let client = profile.client().with_context(|| format!("--models: profile `{name}`"))?;
        models =
            models.with_model(SubAgentModel { name: name.clone(), client, config: profile.agent_config() });
    }
    if models.names().is_empty() {
        bail!("--models {}: no [profiles.NAME] table", path.display());
    }
    if let Some(default) = file.sub_agent.as_deref().or(file.profile.as_deref()) {
        models =
            models.with_default(default).map_err(|e| anyhow::anyhow!("--models {}: {e}", path.display()))?;
    }
    tracing::info!(profiles = ?models.names(), "models for sub-agents");
    Ok(Some(Arc::new(models)))
}

/// The operator's hooks (`--hooks`), their webhooks through a fetcher that reaches public
/// addresses and what `--hooks-allow` names. A file that cannot be read is an error at start;
/// hooks the server cannot run are warned about.
fn operator_hooks(args: &ServeArgs) -> anyhow::Result<Option<Arc<hooks::Hooks>>> {
    let console = args
        .console_url
        .clone()
        .unwrap_or_else(|| format!("http://{}", args.listen))
        .trim_end_matches('/')
        .to_owned();
    let Some(path) = &args.hooks else { return Ok(None) };
    // A file named but missing, unreadable or holding no hooks would leave hooks silently off.
    crate::checks::hooks_file(path).map_err(anyhow::Error::msg)?;
    let mut set = hooks::HookSet::default();
    set.read_file(path, hooks::Origin::Operator)?;
    for warning in &set.warnings {
        tracing::warn!(%warning, "hooks");
    }
    let mut allow = safe_fetch::AllowList::default();
    for entry in &args.hooks_allow {
        allow.add(entry).map_err(|error| anyhow::anyhow!("--hooks-allow: {error}"))?;
    }
    let policy = safe_fetch::Policy::new(allow).with_hint("the server's --hooks-allow");
    let limits = safe_fetch::Limits {
        max_body_bytes: hooks::run::MAX_OUTPUT,
        total_time: hooks::config::MAX_TIMEOUT,
        ..safe_fetch::Limits::default()
    };
    let fetcher = safe_fetch::Fetcher::new(policy, limits).context("making the webhooks' fetcher")?;
    let events: Vec<&str> = set.hooks.iter().map(|h| h.event.as_str()).collect();
    tracing::info!(hooks = set.hooks.len(), ?events, file = %path.display(), "the operator's hooks");
    Ok(Some(Arc::new(
        hooks::Hooks::new(set)
            .with_fetcher(Arc::new(fetcher))
            .with_approval_url(format!("{console}/console/approvals/{{id}}")),
    )))
}

/// One skills folder's skills, and when it was read.
type FoundSkills = (Instant, Arc<Vec<tool_core::SkillInfo>>);

/// How long a tenant's skills are kept before their folders are read again (a skill added or
/// edited reaches sessions opened after this).
const SKILLS_FRESH: Duration = Duration::from_secs(10);

/// The operator's sandbox settings, resolved at start-up.
#[derive(Debug)]
pub struct Sandboxing {
    /// Modes sessions may choose; the first is the default.
    pub modes: Vec<SandboxMode>,
    /// Whether sessions may turn the network on (and whether it starts on).
    pub network: NetworkAccess,
    /// Reads confined to the system and the session's folders (a server with keys).
    pub reads: ReadAccess,
    /// Never readable by a command: the operator's list and the server's own files.
    pub deny_read: Vec<PathBuf>,
    /// The server's own files among them (journal, state folder, keys, deny rules).
    pub own: Vec<PathBuf>,
    /// Every session's own temp folder lives in here (0700; removed at exit).
    temp_root: tempfile::TempDir,
    /// TCP ports no command may connect to: this server's own (added when it listens) and the
    /// operator's `--sandbox-block-port`.
    blocked_ports: RwLock<Vec<u16>>,
}

impl Sandboxing {
    /// Why `choice` is not allowed on this server, if it is not.
    pub fn refuse(&self, choice: SessionSandbox) -> Option<String> {
        if !self.modes.contains(&choice.mode) {
            let allowed: Vec<&str> = self.modes.iter().map(|m| m.as_str()).collect();
            return Some(format!(
                "sandbox mode `{}` is not allowed on this server; allowed: {}",
                choice.mode,
                allowed.join(", ")
            ));
        }
        (choice.network == NetworkAccess::On
            && self.network == NetworkAccess::Off
            && choice.mode != SandboxMode::Off)
            .then(|| "this server does not let sessions turn the network on for their commands".to_owned())
    }

    /// The default a session gets when it asks for nothing.
    pub fn default_choice(&self) -> SessionSandbox {
        SessionSandbox { mode: self.modes.first().copied().unwrap_or_default(), network: self.network }
    }

    /// The session's own temp folder (not created here: the first command creates it, 0700).
    pub fn temp_directory(&self, session_id: &str) -> PathBuf {
        // Session ids are made by this server, but never trust a name on a path.
        let name: String =
            session_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '-' }).collect();
        self.temp_root.path().join(name)
    }

    /// The whole policy of a session that chose `choice`.
    pub fn policy(&self, choice: SessionSandbox) -> SandboxPolicy {
        SandboxPolicy {
            mode: choice.mode,
            network: choice.network,
            reads: self.reads,
            deny_read: self.deny_read.clone(),
            allow_escalation: self.modes.contains(&SandboxMode::Off),
            blocked_ports: self.blocked_ports.read().unwrap_or_else(|p| p.into_inner()).clone(),
            ..SandboxPolicy::default()
        }
    }

    /// Closes a port this server listens on to every command started from now on: with the
    /// network on, a command could otherwise call the server's own API (on an open server, as the
    /// person at it) to open an unsandboxed session or approve its own calls.
    pub fn block_port(&self, port: u16) {
        let mut ports = self.blocked_ports.write().unwrap_or_else(|p| p.into_inner());
        if !ports.contains(&port) {
            ports.push(port);
        }
    }
}

impl std::fmt::Debug for AppState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AppState").field("instance_id", &self.instance_id).finish_non_exhaustive()
    }
}

/// Seconds a caller is told to wait (`Retry-After`) while an instance drains.
pub const DRAIN_RETRY_SECS: u64 = 5;

/// Sessions held in memory per instance before idle ones are forgotten (they stay in the journal).
const MAX_HELD_SESSIONS: usize = 10_000;

fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// The enabled tools: on-by-default visible tools, plus `--enable-tool`, minus `--disable-tool`.
///
/// # Errors
///
/// A flag naming a tool the registry does not have.
pub fn enabled_tools(args: &ServeArgs) -> anyhow::Result<Vec<String>> {
    let registry = Registry::builtin();
    for name in args.enable_tools.iter().chain(&args.disable_tools) {
        if registry.get(name).is_none() {
            let known: Vec<&str> = registry.entries().iter().map(|e| e.tool.identifier).collect();
            bail!("unknown tool `{name}`; the builtin tools are: {}", known.join(", "));
        }
    }
    // An exposure (`hidden` above all) for a tool that does not exist would hide nothing:
    // refused here for builtin names, after mounting for `mcp-` ones.
    for (name, _) in &args.tool_exposure {
        if registry.get(name).is_none() && !name.starts_with("mcp-") {
            let known: Vec<&str> = registry.entries().iter().map(|e| e.tool.identifier).collect();
            bail!(
                "--tool-exposure names the unknown tool `{name}`; the builtin tools are: {} (mounted MCP servers are `mcp-NAME`)",
                known.join(", ")
            );
        }
    }
    Ok(registry
        .entries()
        .iter()
        .filter(|e| {
            let id = e.tool.identifier;
            // Sub-agents need a model, which only the operator can give.
            let possible = id != builtin_tool_sub_agent::IDENTIFIER || args.models.is_some();
            let on = (e.tool.flags.default_enabled && !e.tool.flags.hidden && possible)
                || args.enable_tools.iter().any(|t| t == id);
            on && !args.disable_tools.iter().any(|t| t == id)
        })
        .map(|e| e.tool.identifier.to_owned())
        .collect())
}

impl AppState {
    /// Opens the journal (and Redis), builds the toolbox and starts the housekeeping.
    ///
    /// # Errors
    ///
    /// Bad settings, a journal or Redis that cannot be reached.
    pub async fn build(args: ServeArgs) -> anyhow::Result<Arc<Self>> {
        let keys = args.keys()?;
        args.validate(&keys)?;
        let mut tools = enabled_tools(&args)?;
        let database_url = args.database_url()?;
        // Where the journal lives, without the credentials a Postgres URL may carry.
        let journal_at = database_url.split('@').next_back().unwrap_or("").to_owned();
        let journal::Stores { journal, records, knowledge } = journal::open_stores(&database_url)
            .await
            .with_context(|| format!("opening the journal ({journal_at})"))?;
        tracing::info!(journal = %journal_at, retention_days = args.journal_retention_days, "journal open");
        let instance_id = journal::new_instance_id();
        let metrics = Arc::new(Metrics::default());
        let cluster = match &args.redis_url {
            Some(url) => Some(Arc::new(Cluster::connect(url, &args.redis_prefix, &instance_id).await?)),
            None => None,
        };
        let config = ExecutorConfig {
            approval_timeout: Duration::from_secs(args.approval_timeout_secs),
            instance_id: instance_id.clone(),
            deny: args.deny_list()?,
            journal_deadline: args.journal_deadline(),
            version: Some(format!("{} ({})", env!("CARGO_PKG_VERSION"), env!("TOOLHOST_COMMIT"))),
            ..ExecutorConfig::default()
        };
        let devices = Arc::new(Devices::new(
            instance_id.clone(),
            metrics.clone(),
            cluster.clone(),
            Duration::from_millis(args.device_reconnect_grace_ms),
            config.default_timeout,
        ));

        let state_dir = args.state_dir()?;
        let sandboxing = sandboxing(&args, &keys, &database_url, &state_dir)?;
        // Commands a crashed server on this host left running die before its calls are marked
        // abandoned (the executor's reconciler runs at start, below).
        let ledgers = state_dir.join("processes");
        let swept = computer_runtime::ledger::Ledger::sweep(&ledgers, &instance_id);
        if swept.ledgers > 0 {
            tracing::warn!(
                ledgers = swept.ledgers,
                killed = swept.killed.len(),
                "killed the process groups that stopped servers on this host left running"
            );
        }
        let limits = Arc::new(crate::limits::Limits::new(args.limits()));
        let args_modes = args.approval_modes(&keys);
        let computer = Arc::new(computer_runtime::LocalComputer::new(computer_runtime::LocalConfig {
            process: computer_runtime::process::ProcessConfig {
                env: args.command_env()?,
                sandbox: sandbox::SandboxSettings {
                    enforcement: if args.sandbox_best_effort {
                        sandbox::Enforcement::BestEffort
                    } else {
                        sandbox::Enforcement::Required
                    },
                },
                max_job_lifetime: Duration::from_secs(args.job_lifetime_secs),
                max_jobs_per_tenant: args.tenant_jobs.max(1),
                ledger: Some((ledgers, instance_id.clone())),
                limits: sandbox::groups::Limits {
                    max_processes: args.command_max_processes,
                    max_memory_bytes: args.command_max_memory_mib << 20,
                    cpu_weight: args.command_cpu_weight,
                    max_open_files: args.command_max_open_files,
                },
                enforce_limits: args.command_limits(&keys),
                max_temp_bytes: args.session_temp_max_mib.max(1) << 20,
                ..Default::default()
            },
            ..Default::default()
        }));
        announce_sandbox(&computer, &sandboxing);
        announce_limits(&computer);
        if computer.ledger().is_none() {
            tracing::warn!(
                folder = %state_dir.join("processes").display(),
                "the process ledger could not be opened: commands a crash leaves running will not be \
                 killed at the next start (only the shell dies with the server)"
            );
        }
        let embedder: Option<Arc<dyn tool_core::embed::Embedder>> = match (
            &args.embeddings_url,
            &args.embeddings_model,
        ) {
            (Some(url), Some(model)) => {
                // The URL may carry credentials: only the model is logged.
                tracing::info!(model = %model, "memories and knowledge bases are searched by meaning too");
                Some(Arc::new(agent::OpenAiEmbedder::new(url, args.embeddings_api_key.clone(), model)))
            }
            _ => None,
        };
        // The mounted servers' resources, read at `mcp://SERVER/URI` (registered as they mount).
        let mcp_resources = mcp::client::McpResources::default();
        // The operator's credentials: injected by mounts, listed by the creds tool, redacted from
        // every output, journal row and log line.
        let credentials = args.credentials()?;
        let mut services = tool_core::Services::new()
            .with(credentials.clone())
            .with(computer.clone() as Arc<dyn computer_runtime::ComputerRuntime>)
            .with(records.clone())
            .with(knowledge.clone())
            .with(builtin_tool_memory::MemorySettings { max_per_person: args.max_memories_per_person })
            .with(Arc::new(
                builtin_tools::url_router()
                    .with(Arc::new(tool_executor::JournalUrls::new(journal.clone())))
                    .with(Arc::new(mcp_resources.clone())),
            ));
        if let Some(embedder) = &embedder {
            services = services.with(embedder.clone());
        }
        let sub_agents = sub_agent_models(&args)?;
        if let Some(models) = &sub_agents {
            services = services.with(models.clone());
        }
        let mut toolbox = Toolbox::new();
        let (parts, missing) = Registry::builtin().available_runtimes(&services);
        if let Some((tool, tool_core::MissingService(what))) =
            missing.iter().find(|(tool, _)| tools.contains(tool))
        {
            bail!("the tool `{tool}` is enabled but needs {what} (for sub-agents: --models)");
        }
        for (manifest, runtime) in parts {
            if !tools.contains(&manifest.identifier) {
                continue;
            }
            let routed =
                Arc::new(Routed::new(manifest.identifier.clone(), runtime, devices.clone(), limits.clone()));
            toolbox.add_tool(manifest, routed)?;
        }
        for (name, audit) in builtin_tools::audits() {
            toolbox.add_audit(*name, *audit);
        }
        for (name, tier) in builtin_tools::tiers() {
            toolbox.add_tier(*name, *tier);
        }
        for (tool, api, prepare) in builtin_tools::preparations() {
            toolbox.add_prepare(tool, api, *prepare);
        }
        if let Some(path) = &args.mcp_config {
            // A mounted server runs beside this process, never on a device: its runtime is not
            // routed (a device offers only its own tools).
            // Tool lists are remembered in the state folder, so a remembered server starts on
            // its first call instead of holding up the server's start.
            let options = mcp::client::MountOptions {
                catalogues: Some(mcp::client::Catalogues::new(args.state_dir()?.join("mcp-tools"))),
                fresh: false,
                resources: Some(mcp_resources.clone()),
                credentials: Some(credentials.clone()),
            };
            let mounted = mcp::client::mount_file(path, &mut toolbox, &options).await?;
            for note in &mounted.notes {
                tracing::warn!(%note, "MCP configuration");
            }
            // The same file's `[apis.NAME]` tables: OpenAPI services as tools `api-NAME`.
            let api_options = builtin_tool_api::mount::MountOptions {
                credentials: Some(credentials.clone()),
                base_dir: None,
            };
            let (apis, errors) = builtin_tool_api::mount::mount_file(path, &api_options).await?;
            for error in &errors {
                tracing::warn!(%error, "API not mounted");
            }
            for note in apis.iter().flat_map(|m| &m.notes) {
                tracing::info!(%note, "API document");
            }
            let api_tools: Vec<String> = apis.iter().map(|m| m.manifest.identifier.clone()).collect();
            for note in mcp::client::add_parts(
                &mut toolbox,
                apis.into_iter().map(|m| (m.manifest, m.runtime)).collect(),
            )? {
                tracing::warn!(%note, "API mount");
            }
            tracing::info!(tools = ?api_tools, "APIs mounted");
            tools.extend(api_tools);
            tracing::info!(tools = ?mounted.tools, "MCP servers mounted");
            tools.extend(mounted.tools);
        }
        let configured: Vec<String> = match &args.mcp_config {
            Some(path) => std::fs::read_to_string(path)
                .ok()
                .and_then(|text| mcp::client::McpConfig::parse(&text).ok())
                .map(|config| config.servers.into_keys().map(|name| format!("mcp-{name}")).collect())
                .unwrap_or_default(),
            None => Vec::new(),
        };
        for (name, _) in &args.tool_exposure {
            if name.starts_with("mcp-") && !configured.contains(name) {
                anyhow::bail!(
                    "--tool-exposure names `{name}`, which no server of the MCP configuration mounts (servers: {})",
                    if configured.is_empty() { "none".to_owned() } else { configured.join(", ") }
                );
            }
        }
        // The approvals budget counts each call that would wait, not only each batch admitted.
        let broker = Arc::new(LocalBroker::with_budget(args.tenant_approvals));
        // Questions about the calls of MCP clients that can elicit go to those clients; the rest
        // wait in the local broker for the approvals API.
        let elicitation = mcp::Elicitation::new(broker.clone());
        // Journal writes that must land (settlements, decisions) wait here when the journal does
        // not take them, in a file of this process's whose space is reserved up front.
        let outbox = journal::outbox::Outbox::open(
            &state_dir.join("outbox"),
            &instance_id,
            args.outbox_reserve_mib.max(1) << 20,
        )
        .context("opening the journal's outbox")?;
        if outbox.adopted() > 0 {
            tracing::warn!(
                writes = outbox.adopted(),
                "journal writes that stopped servers on this host left waiting; landing them"
            );
        }
        let bus = Arc::new(crate::bus::Bus::new(&instance_id));
        // A deny rule naming a tool or API this server does not have would never match.
        let catalogue = crate::checks::Catalogue::of(args.mcp_config.as_deref());
        crate::checks::deny_rules(&config.deny, &(&toolbox, &catalogue)).map_err(anyhow::Error::msg)?;
        let executor = Executor::builder(Arc::new(toolbox))
            .journal(journal.clone())
            .broker(elicitation.clone())
            .config(config)
            .credentials(credentials.clone())
            .outbox(Arc::new(outbox))
            .tap(bus.clone())
            .build();
        executor.start(Duration::from_secs(60)).await.context("starting the journal's housekeeping")?;

        let hooks = operator_hooks(&args)?;
        let checkpoints = match args.checkpoint_max_mib {
            0 => None,
            mib => Some(Arc::new(
                checkpoints::Store::open(state_dir.join("checkpoints"), mib.saturating_mul(1024 * 1024))
                    .context("opening the checkpoint store")?
                    .with_budget(args.checkpoint_store_max_gib.saturating_mul(1024 * 1024 * 1024)),
            )),
        };
        let state = Arc::new(Self {
            hooks,
            checkpoints,
            sub_agents,
            args,
            instance_id,
            executor,
            journal,
            records,
            knowledge,
            embedder,
            broker,
            elicitation,
            keys,
            devices,
            cluster,
            bus,
            journal_probe: tokio::sync::Mutex::new(None),
            connections: std::sync::OnceLock::new(),
            bound: std::sync::OnceLock::new(),
            key_uses: std::sync::Mutex::default(),
            folders: {
                let mut folders = vec![state_dir.clone()];
                if let Some(path) = journal::sqlite_path(&database_url) {
                    let path = std::path::absolute(&path).unwrap_or(path);
                    folders.extend(path.parent().map(Path::to_path_buf));
                }
                folders.dedup();
                folders
            },
            metrics,
            tools,
            sessions: RwLock::default(),
            ended: std::sync::Mutex::default(),
            tasks: TaskTracker::new(),
            shutdown: CancellationToken::new(),
            closing: CancellationToken::new(),
            computer,
            sandboxing,
            approval_modes: args_modes,
            limits,
            skills: std::sync::Mutex::default(),
        });
        // What is wrong with the operator's skills is said once at start (and again when they
        // are read for a tenant).
        for dir in &state.args.skills_dirs {
            let found =
                builtin_tool_skills::discover::discover(&[builtin_tool_skills::discover::SkillRoot::new(
                    &dir.path,
                    tool_core::SkillSource::Operator,
                )]);
            if !dir.path.is_dir() {
                tracing::warn!(folder = %dir.path.display(), "the skills folder does not exist");
            }
            tracing::info!(folder = %dir.path.display(), skills = found.skills.len(), "skills");
            for problem in &found.problems {
                tracing::warn!(skill = %problem.path.display(), refused = problem.refused, "{}", problem.message);
            }
        }
        // Events of the other instances' sessions: through Redis when there is one, else through
        // a Postgres journal's LISTEN/NOTIFY.
        if let Some(url) = &state.args.redis_url {
            state
                .bus
                .spawn_redis(url, &state.args.redis_prefix, state.closing.clone())
                .context("the event bus")?;
        } else if database_url.starts_with("postgres") {
            state.bus.spawn_postgres(&database_url, state.closing.clone());
        }
        tracing::info!(
            transport = state.bus.transport().as_str(),
            "events of every instance reach this one's watchers"
        );
        state.spawn_reload_watch();
        // People told that a call waits (the configuration file's `[notify]`).
        let notifications = crate::console::notify::Notifications::new(&state.args.notify)
            .context("the configuration file's [notify]")?;
        crate::console::notify::spawn(&state, Arc::new(notifications));
        state.devices.spawn_reaper(state.closing.clone());
        state.spawn_idle_reaper();
        state.spawn_pruner();
        if let Some(cluster) = &state.cluster {
            let weak = Arc::downgrade(&state);
            cluster.spawn(state.closing.clone(), move |message| {
                let weak = weak.clone();
                async move {
                    if let Some(state) = weak.upgrade() {
                        state.on_cluster_message(message).await;
                    }
                }
            });
        }
        Ok(state)
    }

    async fn on_cluster_message(&self, message: ClusterMessage) {
        match message {
            ClusterMessage::Decision { tenant, approval_id, decision, by } => {
                let decided = tool_executor::Decided { decision, by };
                if let Err(error) = self.broker.decide(&tenant, &approval_id, decided) {
                    tracing::debug!(%error, "a forwarded decision found nothing waiting");
                }
            }
            ClusterMessage::EndSession { tenant, session_id } => self.forget(&tenant, &session_id),
            ClusterMessage::Reload { origin } => {
                let _ = self.reload(None, &format!("instance {origin} was told to reload"));
            }
            other => self.devices.on_cluster_message(other).await,
        }
    }

    /// Creates a session from a validated view.
    ///
    /// # Errors
    ///
    /// The journal's error.
    pub async fn create_session(
        &self,
        tenant: &str,
        view: SessionView,
    ) -> Result<Arc<SessionEntry>, ApiError> {
        let record = journal::SessionRecord {
            id: view.id.clone(),
            tenant: tenant.to_owned(),
            user_id: view.user_id.clone(),
            config: serde_json::to_value(&view).map_err(ApiError::internal)?,
            status: "active".into(),
            created_at: view.created_at,
            ended_at: None,
        };
        self.journal.put_session(&record).await?;
        Ok(self.hold(tenant, view))
    }

    /// The skills of `tenant`'s sessions: those in the operator's skills folders for it, in the
    /// order configured. Each folder is read at most once per [`SKILLS_FRESH`] for all tenants,
    /// outside the lock.
    pub fn skills_for(&self, tenant: &str) -> Arc<tool_core::SkillSet> {
        if self.args.skills_dirs.is_empty() {
            return Arc::default();
        }
        let mut all = Vec::new();
        for dir in self.args.skills_dirs.iter().filter(|dir| dir.admits(tenant)) {
            let cached = self
                .skills
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&dir.path)
                .filter(|(at, _)| at.elapsed() < SKILLS_FRESH)
                .map(|(_, found)| found.clone());
            let found = cached.unwrap_or_else(|| {
                let root = builtin_tool_skills::discover::SkillRoot::new(
                    &dir.path,
                    tool_core::SkillSource::Operator,
                );
                let found = Arc::new(builtin_tool_skills::discover::discover(&[root]).skills);
                self.skills
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(dir.path.clone(), (Instant::now(), found.clone()));
                found
            });
            all.extend(found.iter().cloned());
        }
        Arc::new(tool_core::SkillSet::new(all))
    }

    fn hold(&self, tenant: &str, view: SessionView) -> Arc<SessionEntry> {
        let mut sandbox = self.sandboxing.policy(if self.sandboxing.refuse(view.sandbox).is_none() {
            view.sandbox
        } else {
            self.sandboxing.default_choice()
        });
        // The folders the operator granted the tenant reach its commands as they reach its file
        // calls: readable, and writable where granted so.
        for granted in self.args.tenant_paths.iter().filter(|path| path.admits(tenant)) {
            sandbox.readable_roots.push(granted.root.path.clone());
            if granted.root.writable {
                sandbox.writable_roots.push(granted.root.path.clone());
            }
        }
        let config = SessionConfig {
            id: view.id.clone(),
            tenant: tenant.to_owned(),
            user_id: view.user_id.clone(),
            agent_id: view.agent_id.clone(),
            working_directory: view.working_directory.as_ref().map(PathBuf::from),
            // Checked again on every load (above): a mode the operator has since withdrawn (say
            // `off`) falls back to the default, never runs on as it was.
            sandbox,
            temp_directory: Some(self.sandboxing.temp_directory(&view.id)),
            policy: SessionPolicy {
                mode: view.approval_mode,
                allow_list: view.allow_list.clone(),
                // Tenants share the server's temp folders: with keys, they are outside every
                // session; an open (single-user, loopback) server keeps them in, like a laptop.
                exclude_temp: !self.keys.is_open(),
                // A device's files are on the device, which audits its own paths.
                paths_elsewhere: view.runs_on == RunsOn::Device,
                ..SessionPolicy::default()
            },
            sequential: view.sequential,
            // The budget runs from the session's creation, also when another instance (or a
            // restart) loads it later.
            time_budget_ms: view
                .time_budget_ms
                .map(|budget| budget.saturating_sub(now_ms().saturating_sub(view.created_at).max(0) as u64)),
            active_tools: Some(view.tools.clone()),
            exposure: tool_executor::ExposureConfig {
                tools: self.args.tool_exposure.iter().cloned().collect(),
                max_direct_functions: self.args.max_direct_functions,
                max_direct_tokens: self.args.max_direct_tokens,
            },
            project: view.project.clone(),
            hard_roots: self.hard_roots(tenant),
            // The server's own files are no call's, on an open server too.
            protected_paths: self.sandboxing.own.clone(),
            skills: self.skills_for(tenant),
            preview_writes: view.preview_writes,
        };
        let mut sessions = self.sessions.write().unwrap_or_else(|p| p.into_inner());
        if self.ended.lock().unwrap_or_else(|p| p.into_inner()).contains(&view.id) {
            return self.ended_entry(tenant, view);
        }
        // Two requests may load the same stored session at once: the first one held wins, so a
        // session has one live object (the one that ending and shutdown cancel).
        if let Some(held) = sessions.get(&view.id) {
            return held.clone();
        }
        if sessions.len() >= MAX_HELD_SESSIONS {
            self.evict_idle(&mut sessions);
        }
        let session = self.executor.open_session(config);
        if let Some(hooks) = &self.hooks {
            session.set_call_hooks(Some(hooks.clone()));
        }
        // A device keeps its own machine's checkpoints.
        if view.runs_on == RunsOn::Server
            && let Some(store) = &self.checkpoints
        {
            checkpoints::Checkpointer::attach(store.clone(), &session);
        }
        if let Some(models) = &self.sub_agents
            && let Err(error) = models.choose(&view.id, view.sub_agent_model.as_deref())
        {
            // Checked when the session was made; another instance's profiles may differ.
            tracing::warn!(%error, session = %view.id, "the session's sub-agent model is not configured here");
        }
        // What tool search found for it before (on another instance, or before a restart).
        session.activate("restored", &view.activated_tools);
        let route = match view.runs_on {
            RunsOn::Server => Route::Server { tenant: tenant.to_owned() },
            RunsOn::Device => Route::Device { tenant: tenant.to_owned(), device_id: view.device_id.clone() },
        };
        self.devices.set_route(&view.id, route);
        let entry = Arc::new(SessionEntry::new(tenant, session, view));
        sessions.insert(entry.view.id.clone(), entry.clone());
        entry
    }

    /// What the API shows of an ended session; its pipeline session is cancelled and not held.
    fn ended_entry(&self, tenant: &str, mut view: SessionView) -> Arc<SessionEntry> {
        view.status = "ended".into();
        let session = self.executor.open_session(SessionConfig {
            id: view.id.clone(),
            tenant: tenant.to_owned(),
            ..SessionConfig::default()
        });
        session.cancel();
        Arc::new(SessionEntry::new(tenant, session, view))
    }

    /// Ends, every so often, the sessions held here that nobody used for `--session-idle-secs`:
    /// their jobs are killed and their temp folders removed, as when they are ended by hand.
    fn spawn_idle_reaper(self: &Arc<Self>) {
        let idle_ms = i64::try_from(self.args.session_idle_secs.saturating_mul(1000)).unwrap_or(i64::MAX);
        let every = Duration::from_millis(u64::try_from(idle_ms / 4).unwrap_or(60_000).clamp(200, 60_000));
        let weak = Arc::downgrade(self);
        let closing = self.closing.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(every) => {}
                    () = closing.cancelled() => return,
                }
                let Some(state) = weak.upgrade() else { return };
                let cutoff = now_ms().saturating_sub(idle_ms);
                let idle: Vec<(String, String)> = state
                    .sessions
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .values()
                    // Held only by the map: no batch, stream or request is using it.
                    .filter(|e| Arc::strong_count(e) == 1 && Arc::strong_count(&e.session) == 1)
                    .filter(|e| e.last_used.load(std::sync::atomic::Ordering::Relaxed) < cutoff)
                    .map(|e| (e.tenant.clone(), e.view.id.clone()))
                    .collect();
                for (tenant, id) in idle {
                    match state.end_session(&tenant, &id).await {
                        Ok(_) => tracing::info!(session = %id, "ended an idle session"),
                        Err(error) => {
                            tracing::debug!(session = %id, ?error, "an idle session could not be ended")
                        }
                    }
                }
            }
        });
    }

    /// Prunes the journal past `--journal-retention-days`, at start and every ten minutes, in
    /// batches of a thousand rows with a pause between them so writers are never held up.
    fn spawn_pruner(self: &Arc<Self>) {
        let days = self.args.journal_retention_days;
        let content_days = self.args.journal_content_days;
        if days == 0 && content_days == 0 {
            return;
        }
        let ms = |days: u64| i64::try_from(days.saturating_mul(86_400_000)).unwrap_or(i64::MAX);
        let (keep_ms, content_ms) = (ms(days), ms(content_days));
        let (journal, closing) = (self.journal.clone(), self.closing.clone());
        tokio::spawn(async move {
            // Results are cut from where the last pass stopped, so a pass never walks what is cut
            // already (the first walks from the beginning).
            let mut cut_until = 0;
            loop {
                if content_days > 0 && (days == 0 || content_days < days) {
                    let before = now_ms().saturating_sub(content_ms);
                    let pause = Duration::from_millis(50);
                    match journal::expire_all(journal.as_ref(), cut_until, before, 200, 1000, pause).await {
                        Ok(cut) => {
                            cut_until = before;
                            if cut > 0 {
                                tracing::info!(cut, content_days, "cut old results in the journal");
                            }
                        }
                        Err(error) => {
                            tracing::warn!(%error, "cutting old results failed; trying again later")
                        }
                    }
                }
                if days > 0 {
                    let before = now_ms().saturating_sub(keep_ms);
                    match journal::prune_all(journal.as_ref(), before, 1000, Duration::from_millis(50)).await
                    {
                        Ok(0) => {}
                        Ok(pruned) => tracing::info!(pruned, days, "pruned the journal"),
                        Err(error) => {
                            tracing::warn!(%error, "pruning the journal failed; trying again later")
                        }
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(600)) => {}
                    () = closing.cancelled() => return,
                }
            }
        });
    }

    /// Forgets held sessions that nothing uses (no batch, stream or request holds them); they are
    /// loaded again from the journal when asked for. Their grants for the session go with them.
    fn evict_idle(&self, sessions: &mut HashMap<String, Arc<SessionEntry>>) {
        let idle: Vec<String> = sessions
            .iter()
            .filter(|(_, e)| Arc::strong_count(e) == 1 && Arc::strong_count(&e.session) == 1)
            .map(|(id, _)| id.clone())
            .take(MAX_HELD_SESSIONS / 10 + 1)
            .collect();
        for id in idle {
            sessions.remove(&id);
            self.devices.forget_route(&id);
            if let Some(models) = &self.sub_agents {
                models.forget(&id);
            }
        }
    }

    /// The tenant's session: held here, or loaded from the journal (created by another instance).
    ///
    /// # Errors
    ///
    /// 404 when the tenant has no such session; the journal's error.
    pub async fn session(&self, tenant: &str, id: &str) -> Result<Arc<SessionEntry>, ApiError> {
        let held = self.sessions.read().unwrap_or_else(|p| p.into_inner()).get(id).cloned();
        if let Some(entry) = held {
            // Another tenant's session does not exist for this caller.
            if entry.tenant != tenant {
                return Err(ApiError::not_found("session", id));
            }
            entry.last_used.store(now_ms(), std::sync::atomic::Ordering::Relaxed);
            return Ok(entry);
        }
        let record =
            self.journal.get_session(tenant, id).await?.ok_or_else(|| ApiError::not_found("session", id))?;
        let view: SessionView = serde_json::from_value(record.config)
            .map_err(|e| ApiError::internal(format!("stored session {id} does not decode: {e}")))?;
        if record.status != "active" {
            return Ok(self.ended_entry(tenant, view));
        }
        Ok(self.hold(tenant, view))
    }

    /// Ends a session: its calls in flight are cancelled and settle as cancelled.
    ///
    /// # Errors
    ///
    /// 404 when the tenant has no such active session.
    pub async fn end_session(&self, tenant: &str, id: &str) -> Result<SessionView, ApiError> {
        let entry = self.session(tenant, id).await?;
        if entry.view.status != "active" {
            return Err(ApiError::conflict(format!("session `{id}` has already ended")));
        }
        entry.session.cancel();
        self.journal.end_session(tenant, id).await?;
        self.forget(tenant, id);
        // Other instances may hold it too, with calls in flight: they cancel theirs.
        if let Some(cluster) = &self.cluster {
            let message = ClusterMessage::EndSession { tenant: tenant.to_owned(), session_id: id.to_owned() };
            for instance in cluster.instances().await {
                if instance != self.instance_id {
                    cluster.send(&instance, &message).await;
                }
            }
        }
        let mut view = entry.view.clone();
        view.status = "ended".into();
        Ok(view)
    }

    /// Marks a session ended here (a load racing the end will not hold it: [`Self::hold`] checks
    /// under the same lock order), cancels its calls if it is held, and forgets it.
    fn forget(&self, tenant: &str, id: &str) {
        self.ended.lock().unwrap_or_else(|p| p.into_inner()).insert(id);
        let mut sessions = self.sessions.write().unwrap_or_else(|p| p.into_inner());
        if sessions.get(id).is_some_and(|entry| entry.tenant == tenant)
            && let Some(entry) = sessions.remove(id)
        {
            entry.session.cancel();
            self.devices.forget_route(id);
        }
        if let Some(models) = &self.sub_agents {
            models.forget(id);
        }
        // What its checkpoints kept goes too (contents other sessions still name stay).
        if let Some(store) = self.checkpoints.clone() {
            let session = id.to_owned();
            self.tasks.spawn(async move {
                let collected = tokio::task::spawn_blocking(move || {
                    store.forget_session(&session).then(|| store.collect_garbage())
                })
                .await;
                match collected {
                    Ok(Some(Ok(collected))) if collected.objects > 0 => {
                        tracing::info!(
                            objects = collected.objects,
                            bytes = collected.bytes,
                            "checkpoints collected"
                        );
                    }
                    Ok(Some(Err(error))) => tracing::warn!(%error, "checkpoints could not be collected"),
                    _ => {}
                }
            });
        }
        // Its background commands die with it, and its temp folder (their output) goes too.
        let computer = self.computer.clone();
        let temp = self.sandboxing.temp_directory(id);
        let owner = id.to_owned();
        self.tasks.spawn(async move {
            use computer_runtime::ComputerRuntime as _;
            computer.end_owner(&owner).await;
            let _ = tokio::fs::remove_dir_all(temp).await;
        });
    }

    /// Checks what a session asks of the sandbox against what the operator allows and what this
    /// kernel can enforce.
    ///
    /// # Errors
    ///
    /// 400 with what is allowed.
    pub fn choose_sandbox(
        &self,
        mode: Option<SandboxMode>,
        network: Option<NetworkAccess>,
    ) -> Result<SessionSandbox, ApiError> {
        let default = self.sandboxing.default_choice();
        let choice = SessionSandbox {
            mode: mode.unwrap_or(default.mode),
            network: network.unwrap_or(default.network),
        };
        if let Some(reason) = self.sandboxing.refuse(choice) {
            return Err(ApiError::bad_request(reason));
        }
        self.computer
            .sandbox()
            .check(&self.sandboxing.policy(choice))
            .map_err(|error| ApiError::bad_request(error.to_string()))?;
        Ok(choice)
    }

    /// Checks a session's approval mode and allow-list against what the operator allows: keyed
    /// tenants name only read-only APIs in allow-lists, besides the operator's permits.
    ///
    /// # Errors
    ///
    /// 400 saying what is allowed.
    pub fn check_approval(&self, mode: ApprovalMode, allow_list: &[String]) -> Result<(), ApiError> {
        if !self.approval_modes.contains(&mode) {
            let allowed: Vec<&str> = self.approval_modes.iter().map(|m| m.as_str()).collect();
            return Err(ApiError::bad_request(format!(
                "approval mode `{}` is not allowed on this server; allowed: {}",
                mode.as_str(),
                allowed.join(", ")
            )));
        }
        if self.keys.is_open() {
            return Ok(());
        }
        let permits = &self.args.allow_list_permits;
        for entry in allow_list {
            let (tool, api) = entry.split_once('/').unwrap_or((entry, "*"));
            let permitted = permits.iter().any(|permit| match permit.split_once('/') {
                Some((t, "*")) => t == tool,
                Some((t, a)) => t == tool && a == api,
                None => permit == tool,
            });
            if permitted {
                continue;
            }
            let acting: Vec<String> = self
                .executor
                .toolbox()
                .tools()
                .iter()
                .filter(|t| t.manifest.identifier == tool)
                .flat_map(|t| t.manifest.apis.iter())
                .filter(|spec| api == "*" || spec.name == api)
                .filter(|spec| spec.tier != tool_core::TierSpec::Fixed(tool_core::Tier::Read))
                .map(|spec| format!("{tool}/{}", spec.name))
                .collect();
            if !acting.is_empty() {
                return Err(ApiError::bad_request(format!(
                    "allow_list entry `{entry}` would run {} without a person; on this server allow-lists \
                     name only read-only APIs{}",
                    acting.join(", "),
                    if permits.is_empty() { String::new() } else { format!(" and {}", permits.join(", ")) }
                )));
            }
        }
        Ok(())
    }

    /// The hard limit of a tenant's file calls: with keys, its workspace roots and the folders the
    /// operator granted it (`--tenant-path`), which no approval widens; an open server has none
    /// (the person at it may approve a path outside, opened exactly as shown).
    pub fn hard_roots(&self, tenant: &str) -> Option<Vec<tool_core::FileRoot>> {
        if self.keys.is_open() {
            return None;
        }
        let roots = self.args.workspace_roots.iter().filter(|root| root.admits(tenant));
        let granted = self.args.tenant_paths.iter().filter(|path| path.admits(tenant));
        Some(
            roots
                .map(|root| tool_core::FileRoot::writable(&root.path))
                .chain(granted.map(|path| path.root.clone()))
                .collect(),
        )
    }

    /// Checks a requested working directory against the workspace roots.
    ///
    /// # Errors
    ///
    /// 400 with the reason.
    pub fn check_working_directory(
        &self,
        tenant: &str,
        dir: &str,
        runs_on: RunsOn,
    ) -> Result<String, ApiError> {
        let path = Path::new(dir);
        if !path.is_absolute() {
            return Err(ApiError::bad_request(format!("working_directory `{dir}` must be an absolute path")));
        }
        if runs_on == RunsOn::Device {
            // A folder on the device: the server cannot see it.
            return Ok(dir.to_owned());
        }
        let canonical = path
            .canonicalize()
            .map_err(|e| ApiError::bad_request(format!("working_directory `{dir}` cannot be used: {e}")))?;
        if !canonical.is_dir() {
            return Err(ApiError::bad_request(format!("working_directory `{dir}` is not a folder")));
        }
        let roots = &self.args.workspace_roots;
        if roots.is_empty() {
            if !self.keys.is_open() {
                return Err(ApiError::bad_request(
                    "this server has no workspace roots (--workspace-root), so sessions cannot run tools on it; \
                     use runs_on: device",
                ));
            }
        } else if !roots
            .iter()
            .filter(|root| root.admits(tenant))
            .filter_map(|root| root.path.canonicalize().ok())
            .any(|root| canonical.starts_with(root))
        {
            // Another tenant's root is outside this tenant's, and is not named.
            return Err(ApiError::bad_request(format!(
                "working_directory `{dir}` is outside this tenant's workspace roots"
            )));
        }
        // The server's own files (journal, state, keys) are never a session's: a folder holding them
        // could not be granted to its commands whole, and they must not be its files.
        if let Some(own) = self
            .sandboxing
            .own
            .iter()
            .filter_map(|path| path.canonicalize().ok())
            .find(|own| own.starts_with(&canonical) || canonical.starts_with(own))
        {
            return Err(ApiError::bad_request(format!(
                "working_directory `{dir}` holds (or is inside) this server's own files ({}); use a folder \
                 that does not",
                own.display()
            )));
        }
        Ok(canonical.display().to_string())
    }

    /// Whether the journal can record calls now: free while the pipeline's last write landed;
    /// after a failure, one short write (at most one at a time, four a second) tells whether it
    /// is back.
    ///
    /// # Errors
    ///
    /// 503 with `Retry-After` while it is not.
    pub async fn journal_ready(&self) -> Result<(), ApiError> {
        let health = self.executor.journal_health();
        if !health.is_down() {
            return Ok(());
        }
        let mut probe = self.journal_probe.lock().await;
        let fresh = probe.as_ref().is_some_and(|(at, _)| at.elapsed() < Duration::from_millis(250));
        if !fresh {
            let deadline = self.args.journal_deadline().min(Duration::from_secs(1));
            let result = health.timed(deadline, self.journal.heartbeat(&self.instance_id)).await;
            *probe = Some((Instant::now(), result));
        }
        match probe.as_ref().map(|(_, result)| result) {
            Some(Err(error)) => Err(ApiError::unavailable_for(
                format!("the journal cannot record calls right now ({error}), so none is run; retry shortly"),
                crate::api::JOURNAL_RETRY_SECS,
            )),
            _ => Ok(()),
        }
    }

    /// Reads the keys (`--api-key`, `--api-keys-file`) and the deny rules (`--deny-rules-file`)
    /// again and puts them in force, or keeps the ones in force and says why: a file that does not
    /// read, a key under two tenants, a rule naming a tool or API this server does not have, keys
    /// that would open a keyed server or close an open one. `fresh` is the settings parsed anew
    /// (the configuration file may have changed); without it the files of the start are read
    /// again. Every outcome is logged (`reload` events).
    ///
    /// # Errors
    ///
    /// Why nothing changed.
    pub fn reload(&self, fresh: Option<&ServeArgs>, why: &str) -> Result<String, String> {
        let args = fresh.unwrap_or(&self.args);
        let outcome = (|| {
            let keys = args.keys().map_err(|e| format!("{e:#}"))?;
            let problems = crate::checks::tenancy(args, &keys);
            if let Some(problem) = problems.first() {
                return Err(problem.clone());
            }
            let deny = args.deny_list().map_err(|e| format!("{e:#}"))?;
            let catalogue = crate::checks::Catalogue::of(args.mcp_config.as_deref());
            crate::checks::deny_rules(&deny, &(self.executor.toolbox(), &catalogue))?;
            self.keys.replace(&keys)?;
            let rules = deny.len();
            self.executor.set_deny(deny);
            Ok(format!("{} keys of {} tenants, {rules} deny rules", keys.len(), keys.tenants().len()))
        })();
        match &outcome {
            Ok(summary) => tracing::info!(event = "reload", why, %summary, "keys and rules reloaded"),
            Err(error) => {
                tracing::error!(event = "reload", why, %error, "reload refused: the keys and rules in force are kept")
            }
        }
        outcome
    }

    /// Reloads when the keys file or the deny rules file changes (checked every 2 s by size,
    /// time and inode), until shutdown.
    pub fn spawn_reload_watch(self: &Arc<Self>) {
        let files: Vec<PathBuf> =
            self.args.api_keys_file.iter().chain(&self.args.deny_rules_file).cloned().collect();
        if files.is_empty() {
            return;
        }
        let stamp = |files: &[PathBuf]| -> Vec<Option<(u64, i64, i64, u64)>> {
            use std::os::unix::fs::MetadataExt as _;
            files
                .iter()
                .map(|f| std::fs::metadata(f).ok().map(|m| (m.size(), m.mtime(), m.mtime_nsec(), m.ino())))
                .collect()
        };
        let weak = Arc::downgrade(self);
        let closing = self.closing.clone();
        let mut last = stamp(&files);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(2)) => {}
                    () = closing.cancelled() => return,
                }
                let now = stamp(&files);
                if now == last {
                    continue;
                }
                last = now;
                let Some(state) = weak.upgrade() else { return };
                let _ = state.reload(None, "a keys or rules file changed");
            }
        });
    }

    /// Tells the other instances to reload too (after a `SIGHUP` here).
    pub async fn reload_everywhere(&self) {
        if let Some(cluster) = &self.cluster {
            let message = ClusterMessage::Reload { origin: self.instance_id.clone() };
            for instance in cluster.instances().await {
                if instance != self.instance_id {
                    cluster.send(&instance, &message).await;
                }
            }
        }
    }

    /// Notes that a key was used now.
    pub fn key_used(&self, key: &str) {
        let mut uses = self.key_uses.lock().unwrap_or_else(|p| p.into_inner());
        match uses.get_mut(key) {
            Some(at) => *at = now_ms(),
            None => {
                uses.insert(key.to_owned(), now_ms());
            }
        }
    }

    /// When each key was last used at this instance.
    pub fn key_uses(&self) -> HashMap<String, i64> {
        self.key_uses.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The console's address as people reach it (`--console-url`, else `http://` and `--listen`),
    /// without a trailing `/`.
    pub fn console_url(&self) -> String {
        self.args
            .console_url
            .clone()
            .unwrap_or_else(|| format!("http://{}", self.bound.get().copied().unwrap_or(self.args.listen)))
            .trim_end_matches('/')
            .to_owned()
    }

    /// Notes the address the API listener took.
    pub fn set_bound(&self, address: std::net::SocketAddr) {
        let _ = self.bound.set(address);
    }

    /// Keeps the listener's connections, for the metrics.
    pub fn set_connections(&self, tracker: Arc<crate::listen::Tracker>) {
        let _ = self.connections.set(tracker);
    }

    /// The listener's connections, once it serves.
    pub fn connections(&self) -> Option<&Arc<crate::listen::Tracker>> {
        self.connections.get()
    }

    /// The folders the server writes to (the SQLite journal's, the state folder).
    pub fn written_folders(&self) -> Vec<PathBuf> {
        self.folders.clone()
    }

    /// Sessions held in memory here.
    pub fn session_count(&self) -> usize {
        self.sessions.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Sessions of one tenant held here.
    pub fn tenant_session_count(&self, tenant: &str) -> usize {
        self.sessions
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .filter(|e| e.tenant == tenant)
            .count()
    }

    /// A new session's view with its defaults.
    pub fn new_view(&self, id: String) -> SessionView {
        SessionView {
            id,
            status: "active".into(),
            working_directory: None,
            approval_mode: ApprovalMode::Manual,
            allow_list: Vec::new(),
            time_budget_ms: None,
            user_id: None,
            agent_id: None,
            tools: self.tools.clone(),
            sequential: false,
            preview_writes: false,
            sub_agent_model: None,
            project: None,
            runs_on: RunsOn::Server,
            device_id: None,
            sandbox: self.sandboxing.default_choice(),
            created_at: now_ms(),
            activated_tools: Vec::new(),
            created_by: None,
        }
    }

    /// Keeps what tool search declared to `session` in its stored view, so that another
    /// instance, or this one after a restart, declares it too. A failure is logged: the functions
    /// stay callable by name (a call of a deferred function declares it again).
    pub async fn keep_activations(&self, session: &tool_executor::Session) {
        let (tenant, id) = (&session.config.tenant, session.id());
        let stored = match self.journal.get_session(tenant, id).await {
            Ok(Some(record)) => record,
            Ok(None) => return,
            Err(error) => {
                tracing::warn!(%error, session = id, "could not read the session to keep its found tools");
                return;
            }
        };
        // An ended session stays ended (its row is written whole below).
        if stored.status != "active" {
            return;
        }
        let mut record = stored;
        let Ok(mut view) = serde_json::from_value::<SessionView>(record.config.clone()) else { return };
        let before = view.activated_tools.len();
        for name in session.activated() {
            if !view.activated_tools.contains(&name) {
                view.activated_tools.push(name);
            }
        }
        if view.activated_tools.len() == before {
            return;
        }
        let Ok(config) = serde_json::to_value(&view) else { return };
        record.config = config;
        if let Err(error) = self.journal.put_session(&record).await {
            tracing::warn!(%error, session = id, "could not keep the session's found tools");
        }
    }

    /// Declares to a session held here what tool search found for it on another instance.
    pub async fn catch_up_activations(&self, entry: &SessionEntry) {
        if !entry.session.has_deferred() {
            return;
        }
        if let Ok(Some(record)) = self.journal.get_session(&entry.tenant, entry.session.id()).await
            && let Ok(view) = serde_json::from_value::<SessionView>(record.config)
            && !view.activated_tools.is_empty()
        {
            entry.session.activate("restored", &view.activated_tools);
        }
    }
}

/// The operator's sandbox settings: what tenants may choose, and what no command may read.
fn sandboxing(
    args: &ServeArgs,
    keys: &Keys,
    database_url: &str,
    state_dir: &Path,
) -> anyhow::Result<Sandboxing> {
    // The server's own files: never a command's, never inside a session's folder.
    let mut own = vec![state_dir.to_path_buf()];
    // The journal's files and the keys are never a command's. (The files, not their folder: a
    // folder denied whole would take every workspace below it along.)
    if let Some(path) = journal::sqlite_path(database_url) {
        // Relative to the server's folder, resolved as SQLite would open it.
        let path = std::path::absolute(&path).unwrap_or(path);
        for suffix in ["", "-wal", "-shm"] {
            own.push(PathBuf::from(format!("{}{suffix}", path.display())));
        }
    }
    own.extend(args.api_keys_file.iter().chain(&args.deny_rules_file).chain(&args.credentials_file).cloned());
    let mut deny_read = args.sandbox_deny_read.clone();
    deny_read.extend(own.iter().cloned());
    // Tenants' outputs in the session temp folders of instances that crashed go first.
    let removed = remove_dead_session_folders(&std::env::temp_dir());
    if removed > 0 {
        tracing::info!(removed, "removed the session temp folders of instances that are gone");
    }
    let temp_root = tempfile::Builder::new()
        .prefix(SESSION_FOLDERS)
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o700))
        .tempdir()
        .context("creating the folder for the sessions' temp folders")?;
    // Whose it is, so that a later start can tell a crashed instance's folder from a live one's.
    let pid = std::process::id();
    let start = computer_runtime::ledger::start_time(pid).unwrap_or(0);
    std::fs::write(temp_root.path().join(OWNER_FILE), format!("{pid} {start}\n"))
        .context("marking the sessions' temp folder as this process's")?;
    Ok(Sandboxing {
        modes: args.sandbox_modes(keys),
        network: args.sandbox_network(keys),
        // Tenants sharing a machine read only the system and their own folders.
        reads: if keys.is_open() { ReadAccess::Anywhere } else { ReadAccess::Confined },
        deny_read,
        own,
        temp_root,
        blocked_ports: RwLock::new(args.sandbox_block_ports.clone()),
    })
}

/// The prefix of the folder holding an instance's session temp folders.
const SESSION_FOLDERS: &str = "toolhost-sessions-";
/// In that folder: `PID STARTTIME` of the process it belongs to.
const OWNER_FILE: &str = ".owner";

/// Removes the session temp folders (under `temp`) of instances that are gone: a server killed
/// with `SIGKILL` never removed them, and they hold its tenants' outputs. A folder without an
/// owner file, or whose owner runs, is left alone. Returns how many were removed.
pub fn remove_dead_session_folders(temp: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(temp) else { return 0 };
    let mut removed = 0;
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().starts_with(SESSION_FOLDERS)
            || !entry.file_type().is_ok_and(|t| t.is_dir())
        {
            continue;
        }
        let Ok(owner) = std::fs::read_to_string(entry.path().join(OWNER_FILE)) else { continue };
        let mut fields = owner.split_whitespace().map(str::parse::<u64>);
        let (Some(Ok(pid)), Some(Ok(start))) = (fields.next(), fields.next()) else { continue };
        let alive = u32::try_from(pid).ok().and_then(computer_runtime::ledger::start_time) == Some(start);
        if !alive && std::fs::remove_dir_all(entry.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Says at start-up what the kernel can enforce, and warns when the default cannot be.
fn announce_sandbox(computer: &computer_runtime::LocalComputer, sandboxing: &Sandboxing) {
    let sandbox = computer.sandbox();
    let support = sandbox.support();
    let default = sandboxing.policy(sandboxing.default_choice());
    let modes: Vec<&str> = sandboxing.modes.iter().map(|m| m.as_str()).collect();
    let missing = support.missing(&default);
    if missing.is_empty() {
        tracing::info!(%support, default = %default.describe(), allowed = %modes.join(","), "commands run sandboxed");
    } else if sandbox.settings().enforcement == sandbox::Enforcement::BestEffort {
        tracing::warn!(%support, missing = %missing.join("; "), "the sandbox is only partly enforced on this kernel (best effort allowed)");
    } else {
        tracing::warn!(%support, missing = %missing.join("; "), "this kernel cannot enforce the default sandbox: commands will be refused (allow --sandbox-best-effort, or --sandbox-modes off)");
    }
}

/// Says at start-up how the sessions' commands are held to their limits.
fn announce_limits(computer: &computer_runtime::LocalComputer) {
    let limits = computer.limits();
    if limits.mechanism() == "rlimits" {
        tracing::warn!(limits = %limits.describe(), "commands are not held to per-session limits");
    } else {
        tracing::info!(mechanism = limits.mechanism(), limits = %limits.describe(), "commands are held to per-session limits");
    }
    let swept = computer.swept_groups();
    if swept > 0 {
        tracing::info!(swept, "killed what crashed instances left in their control groups");
    }
}

/// Sessions ended through this instance, newest kept: the set only closes the short race between
/// an end and a load of the same session, so the oldest can be forgotten (the journal still says
/// they ended). Bounded, so ending sessions for ever does not grow memory for ever.
#[derive(Debug, Default)]
pub struct EndedSessions {
    ids: std::collections::HashSet<String>,
    order: std::collections::VecDeque<String>,
}

impl EndedSessions {
    /// How many are remembered at most.
    pub const CAP: usize = 100_000;

    fn insert(&mut self, id: &str) {
        if self.ids.insert(id.to_owned()) {
            self.order.push_back(id.to_owned());
            while self.order.len() > Self::CAP {
                if let Some(oldest) = self.order.pop_front() {
                    self.ids.remove(&oldest);
                }
            }
        }
    }

    fn contains(&self, id: &str) -> bool {
        self.ids.contains(id)
    }
}
