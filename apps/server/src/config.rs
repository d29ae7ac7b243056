//! Command line and environment: every flag has a `TOOLHOST_*` variable.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, Parser, Subcommand};

use tool_core::sandbox::{NetworkAccess, SandboxMode};
use tool_executor::ApprovalMode;
use tool_executor::deny::{DenyList, DenyRule};

use crate::auth::Keys;

/// toolhost-server: tool schemas, guarded execution, approvals and a journal for AI agents.
#[derive(Debug, Parser)]
#[command(name = "toolhost-server", version = concat!(env!("CARGO_PKG_VERSION"), " (commit ", env!("TOOLHOST_COMMIT"), ")"), about)]
pub struct Cli {
    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
    /// A TOML file of settings, named as the flags are (`workspace-root = ["acme=/srv/acme"]`).
    /// A flag wins over its environment variable, which wins over the file, which wins over the
    /// default; a secret may be `{ file = "PATH" }`. See docs/server.example.toml.
    #[arg(long, env = "TOOLHOST_CONFIG", global = true)]
    pub config: Option<PathBuf>,
    /// Server settings.
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Subcommands besides serving.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Prints the stored form (`TENANT:SHA256HEX`) of a key read from stdin, for `--api-key`.
    HashKey {
        /// The tenant the key belongs to.
        #[arg(long)]
        tenant: String,
    },
    /// Serves MCP over stdin and stdout to one local client (Claude Desktop, Codex, goose…): the
    /// enabled tools in one session, every call through approvals, sandbox and journal. Takes the
    /// server's settings (journal, tools, sandbox) but listens on no port. Commands run in the
    /// sandbox without network, as `toolhost mcp`'s do: `TOOLHOST_SANDBOX_NETWORK=on` (or
    /// `--sandbox-network on` before `mcp-stdio`) gives them the network.
    McpStdio {
        /// The folder its tools work in. It wins over the client's roots; without it, the
        /// client's first root is the folder, else the only workspace root, else none (relative
        /// paths are then refused and every path is outside).
        #[arg(long)]
        working_directory: Option<PathBuf>,
        /// `manual` (default: what needs a person is asked of the client's person through MCP
        /// elicitation, or blocked with the reason when the client cannot be asked, since nobody
        /// answers the approvals API on stdio), `headless`, `read_only`, `auto_run` or `allow_list`.
        #[arg(long, default_value = "manual")]
        approval_mode: ApprovalMode,
    },
    /// Checks the settings (flags, environment, `--config` file) as the server would at start —
    /// keys, roots, limits, deny rules, the journal's database — and prints the effective
    /// settings with secrets masked; exit 0 when they hold, 1 with the reason when not.
    CheckConfig,
    /// Copies the live SQLite journal to a new file, consistently, while the server runs (writers
    /// go on); restore by stopping the server and putting the copy in the journal's place. For
    /// Postgres use `pg_dump`.
    Backup {
        /// The copy to make (must not exist).
        #[arg(long)]
        to: PathBuf,
    },
    /// Creates a random key: prints the key (give it to the client) and its stored form.
    NewKey {
        /// The tenant the key belongs to.
        #[arg(long)]
        tenant: String,
        /// What it may do: `agent` (propose calls), `approver` (decide them), `person` (both) or
        /// `operator` (read metrics, instances, tenants and keys; no calls).
        #[arg(long, default_value = "agent")]
        role: crate::auth::Role,
        /// A name for it (recorded as who decided): letters, digits, - _ .
        #[arg(long)]
        name: Option<String>,
    },
}

/// A folder sessions may work in, and whose sessions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkspaceRoot {
    /// Whose sessions may work in it.
    pub owner: RootOwner,
    /// The folder.
    pub path: PathBuf,
}

/// Whose sessions may work in a workspace root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RootOwner {
    /// One tenant's (`TENANT=PATH`).
    Tenant(String),
    /// Every tenant's, on purpose (`*=PATH`).
    Shared,
    /// A plain `PATH`: every tenant's, allowed only while the keys name one tenant.
    Unnamed,
}

impl WorkspaceRoot {
    /// A root for one tenant.
    pub fn of(tenant: &str, path: impl Into<PathBuf>) -> Self {
        Self { owner: RootOwner::Tenant(tenant.to_owned()), path: path.into() }
    }

    /// A root shared by every tenant.
    pub fn shared(path: impl Into<PathBuf>) -> Self {
        Self { owner: RootOwner::Shared, path: path.into() }
    }

    /// Whether `tenant`'s sessions may work in it.
    pub fn admits(&self, tenant: &str) -> bool {
        match &self.owner {
            RootOwner::Tenant(owner) => owner == tenant,
            RootOwner::Shared | RootOwner::Unnamed => true,
        }
    }
}

impl std::str::FromStr for WorkspaceRoot {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // A path is absolute, so a leading `NAME=` can only be a tenant.
        match s.split_once('=') {
            Some(("*", path)) => Ok(Self::shared(path)),
            Some((tenant, path)) if !tenant.starts_with('/') => {
                if !crate::auth::is_name(tenant) {
                    return Err(format!("workspace root `{s}`: tenants are letters, digits, - _ ."));
                }
                Ok(Self::of(tenant, path))
            }
            _ => Ok(Self { owner: RootOwner::Unnamed, path: PathBuf::from(s) }),
        }
    }
}

/// A setting that is on or off.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OnOff {
    /// On.
    On,
    /// Off.
    Off,
}

/// A folder granted to one tenant's (or every tenant's) file calls beyond its workspace roots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantPath {
    /// Whose calls may open it.
    pub owner: RootOwner,
    /// The folder, and whether it may be written.
    pub root: tool_core::FileRoot,
}

impl std::str::FromStr for TenantPath {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let usage =
            || format!("tenant path `{s}`: write TENANT=ro:PATH or TENANT=rw:PATH (`*` for every tenant)");
        let (tenant, rest) = s.split_once('=').ok_or_else(usage)?;
        let owner = match tenant {
            "*" => RootOwner::Shared,
            name if crate::auth::is_name(name) => RootOwner::Tenant(name.to_owned()),
            _ => return Err(format!("tenant path `{s}`: tenants are letters, digits, - _ .")),
        };
        let root = match rest.split_once(':') {
            Some(("ro", path)) => tool_core::FileRoot::read_only(path),
            Some(("rw", path)) => tool_core::FileRoot::writable(path),
            _ => return Err(usage()),
        };
        if !root.path.is_absolute() {
            return Err(format!("tenant path `{s}`: the folder must be an absolute path"));
        }
        Ok(Self { owner, root })
    }
}

impl TenantPath {
    /// Whether `tenant`'s calls may open it.
    pub fn admits(&self, tenant: &str) -> bool {
        match &self.owner {
            RootOwner::Tenant(owner) => owner == tenant,
            RootOwner::Shared | RootOwner::Unnamed => true,
        }
    }
}

/// The configuration file's `[notify]`: where people are told that a call waits for them.
///
/// ```toml
/// [[notify.webhook]]
/// tenant = "acme"                  # or "*" for every tenant
/// url = "https://hooks.slack.com/services/…"
/// secret = { file = "/etc/toolhost/webhook-secret" }   # signs the body (HMAC-SHA256)
///
/// [[notify.email]]
/// tenant = "acme"
/// smtp = "smtp://mail.example.com:587"                  # STARTTLS; plain only on loopback
/// from = "toolhost@example.com"
/// to = ["approvers@example.com"]
/// username = "toolhost"
/// password = { file = "/etc/toolhost/smtp-password" }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NotifySettings {
    /// Webhooks.
    #[serde(default)]
    pub webhook: Vec<WebhookSetting>,
    /// E-mail.
    #[serde(default)]
    pub email: Vec<EmailSetting>,
}

/// One webhook of `[notify]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WebhookSetting {
    /// Whose approvals (`*`: every tenant's).
    pub tenant: String,
    /// Where to POST.
    pub url: String,
    /// The key of the body's HMAC-SHA256 signature.
    #[serde(default)]
    pub secret: Option<String>,
}

/// One e-mail channel of `[notify]`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmailSetting {
    /// Whose approvals (`*`: every tenant's).
    pub tenant: String,
    /// `smtp://HOST:PORT` (STARTTLS; plain on loopback) or `smtps://HOST:PORT`.
    pub smtp: String,
    /// The sender.
    pub from: String,
    /// The recipients.
    pub to: Vec<String>,
    /// A login.
    #[serde(default)]
    pub username: Option<String>,
    /// Its password.
    #[serde(default)]
    pub password: Option<String>,
}

impl NotifySettings {
    /// Every channel with the tenant it serves.
    pub fn channels(&self) -> Vec<(String, notify::ChannelConfig)> {
        let webhooks = self.webhook.iter().map(|w| {
            (
                w.tenant.clone(),
                notify::ChannelConfig::Webhook { url: w.url.clone(), secret: w.secret.clone() },
            )
        });
        let emails = self.email.iter().map(|e| {
            (
                e.tenant.clone(),
                notify::ChannelConfig::Email {
                    smtp: e.smtp.clone(),
                    from: e.from.clone(),
                    to: e.to.clone(),
                    username: e.username.clone(),
                    password: e.password.clone(),
                },
            )
        });
        webhooks.chain(emails).collect()
    }

    /// The tenants the channels name (`*` left out).
    pub fn tenants(&self) -> Vec<String> {
        self.channels().into_iter().map(|(tenant, _)| tenant).filter(|t| t != "*").collect()
    }
}

/// How the server runs.
#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    /// Address to listen on. Without API keys only a loopback address is accepted.
    #[arg(long, env = "TOOLHOST_LISTEN", default_value = "127.0.0.1:8080", value_parser = parse_listen)]
    pub listen: SocketAddr,
    /// Journal database: `sqlite://PATH` or `postgres://…` (default: SQLite at
    /// `$XDG_DATA_HOME/toolhost/journal.db`, usually `~/.local/share/toolhost/journal.db`, or in
    /// systemd's `$STATE_DIRECTORY` under the service unit; the start-up log says which).
    #[arg(long, env = "TOOLHOST_DATABASE_URL", hide_env_values = true)]
    pub database_url: Option<String>,
    /// Redis URL; set it when several instances share work (devices, approvals).
    #[arg(long, env = "TOOLHOST_REDIS_URL", hide_env_values = true)]
    pub redis_url: Option<String>,
    /// Key prefix in Redis.
    #[arg(long, env = "TOOLHOST_REDIS_PREFIX", default_value = "toolhost")]
    pub redis_prefix: String,
    /// Enable a tool that is off by default (repeatable, or comma-separated).
    #[arg(long = "enable-tool", env = "TOOLHOST_ENABLE_TOOLS", value_delimiter = ',')]
    pub enable_tools: Vec<String>,
    /// Disable a tool (repeatable, or comma-separated).
    #[arg(long = "disable-tool", env = "TOOLHOST_DISABLE_TOOLS", value_delimiter = ',')]
    pub disable_tools: Vec<String>,
    /// How a tool's functions reach the model (repeatable, or comma-separated): `TOOL=MODE` with
    /// MODE `direct` (declared from the start), `auto` (direct while a session's functions are
    /// few, else deferred), `deferred` (found through `searchTools`) or `hidden` (never declared
    /// nor callable by the model). Mounted MCP servers are `auto`, builtin tools `direct`.
    #[arg(long = "tool-exposure", env = "TOOLHOST_TOOL_EXPOSURE", value_delimiter = ',', value_parser = parse_exposure)]
    pub tool_exposure: Vec<(String, tool_core::Exposure)>,
    /// `auto` tools are deferred behind `searchTools` when a session would declare more functions
    /// than this…
    #[arg(long, env = "TOOLHOST_MAX_DIRECT_FUNCTIONS", default_value_t = tool_executor::exposure::DEFAULT_MAX_DIRECT_FUNCTIONS)]
    pub max_direct_functions: usize,
    /// … or declarations of more tokens than this (about four characters a token).
    #[arg(long, env = "TOOLHOST_MAX_DIRECT_TOKENS", default_value_t = tool_executor::exposure::DEFAULT_MAX_DIRECT_TOKENS)]
    pub max_direct_tokens: usize,
    /// A folder sessions may work in (repeatable, or comma-separated): `TENANT=PATH` for one
    /// tenant's sessions, `*=PATH` shared by every tenant, or a plain `PATH` (only with keys of a
    /// single tenant). With API keys and no roots, sessions that run tools on the server are
    /// refused; without keys any folder is allowed.
    #[arg(long = "workspace-root", env = "TOOLHOST_WORKSPACE_ROOTS", value_delimiter = ',')]
    pub workspace_roots: Vec<WorkspaceRoot>,
    /// A folder beyond its workspace roots that one tenant's file calls may open, as
    /// `TENANT=ro:PATH` (read only) or `TENANT=rw:PATH` (`*=…` for every tenant; repeatable, or
    /// comma-separated). With keys, a tenant's workspace roots, these folders and each session's
    /// temp folder are the hard limit of every file call: a path beyond them is refused, never
    /// asked about, since the person approving is a tenant. Nothing else widens it.
    #[arg(long = "tenant-path", env = "TOOLHOST_TENANT_PATHS", value_delimiter = ',')]
    pub tenant_paths: Vec<TenantPath>,
    /// A folder of Agent Skills (folders with a `SKILL.md`) for sessions (repeatable, or
    /// comma-separated): `TENANT=PATH` for one tenant's, `*=PATH` or a plain `PATH` for every
    /// tenant's. A tenant's sessions get only these: a project's own skills folders are not read
    /// on the server.
    #[arg(long = "skills-dir", env = "TOOLHOST_SKILLS_DIRS", value_delimiter = ',')]
    pub skills_dirs: Vec<WorkspaceRoot>,
    /// The operator's hooks: a JSON file in Claude Code's hooks shape (`{"hooks": {"PreToolUse":
    /// [{"matcher": "Bash", "hooks": [{"type": "command", "command": "…"}]}]}}`), run for every
    /// session's calls (`PreToolUse`, `PermissionRequest`, `PostToolUse`). Hooks of `"type":
    /// "http"` POST the event to an audit system through the SSRF-safe fetcher.
    #[arg(long = "hooks", env = "TOOLHOST_HOOKS", value_name = "FILE")]
    pub hooks: Option<PathBuf>,
    /// Hosts, addresses or networks the operator's webhooks may reach besides public addresses
    /// (repeatable, or comma-separated); the model's own fetches are not widened by it.
    #[arg(long = "hooks-allow", env = "TOOLHOST_HOOKS_ALLOW", value_delimiter = ',')]
    pub hooks_allow: Vec<String>,
    /// The largest file checkpoints keep, in MiB, before calls that change files in sessions that
    /// run on the server (`POST /v1/sessions/{id}/rewind` puts them back); 0 keeps none.
    #[arg(long, env = "TOOLHOST_CHECKPOINT_MAX_MIB", default_value_t = 10)]
    pub checkpoint_max_mib: u64,
    /// The most the checkpoints may take, in GiB (compressed, all tenants together); past it
    /// calls are not checkpointed, and cannot be rewound across.
    #[arg(long, env = "TOOLHOST_CHECKPOINT_STORE_MAX_GIB", default_value_t = 5)]
    pub checkpoint_store_max_gib: u64,
    /// Largest request body, in bytes.
    #[arg(long, env = "TOOLHOST_MAX_BODY_BYTES", default_value_t = 2 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// An accepted API key as `TENANT[/ROLE[/NAME]]:SHA256HEX` (see `new-key` and `hash-key`;
    /// repeatable, or comma-separated). ROLE is `agent` (the default: proposes calls), `approver`
    /// (decides them) or `person` (both); NAME is recorded as who decided.
    #[arg(long = "api-key", env = "TOOLHOST_API_KEYS", value_delimiter = ',', hide_env_values = true)]
    pub api_keys: Vec<String>,
    /// A file of `TENANT[/ROLE[/NAME]]:SHA256HEX` lines (`#` starts a comment).
    #[arg(long, env = "TOOLHOST_API_KEYS_FILE")]
    pub api_keys_file: Option<PathBuf>,
    /// Logs as `text` (colours only on a terminal) or `json` (one object a line, with span
    /// fields, for a log system).
    #[arg(long, env = "TOOLHOST_LOG_FORMAT", default_value = "text", value_parser = ["text", "json"])]
    pub log_format: String,

    /// Seconds calls in flight may take to finish at shutdown before they are cancelled.
    #[arg(long, env = "TOOLHOST_SHUTDOWN_GRACE_SECS", default_value_t = 30)]
    pub shutdown_grace_secs: u64,
    /// Milliseconds a disconnected device has to reconnect before its open calls fail.
    #[arg(long, env = "TOOLHOST_DEVICE_RECONNECT_GRACE_MS", default_value_t = 3000)]
    pub device_reconnect_grace_ms: u64,
    /// Milliseconds a journal write may take. A call is proposed in the journal before it runs;
    /// a proposal not taken within this is refused (nothing runs; HTTP 503 with `Retry-After`),
    /// and a settlement not taken within this waits in the outbox until it lands.
    #[arg(long, env = "TOOLHOST_JOURNAL_DEADLINE_MS", default_value_t = 2000,
          value_parser = clap::value_parser!(u64).range(50..=60_000))]
    pub journal_deadline_ms: u64,
    /// Disk in MiB reserved up front for the outbox (settlements and decisions waiting for the
    /// journal, in the state folder), so that they are kept when the disk is full.
    #[arg(long, env = "TOOLHOST_OUTBOX_RESERVE_MIB", default_value_t = 8)]
    pub outbox_reserve_mib: u64,
    /// Connections served at once (lowered to what the process's descriptor limit allows, less a
    /// reserve for its own files). Past it, the oldest connection with nothing in flight is closed
    /// to make room; when all are busy, new ones wait in the kernel's backlog.
    #[arg(long, env = "TOOLHOST_MAX_CONNECTIONS", default_value_t = 10_000)]
    pub max_connections: usize,
    /// Connections from one address that have not yet sent a whole request (past it, the oldest
    /// of them is closed). Behind a proxy every connection has the proxy's address: raise it.
    #[arg(long, env = "TOOLHOST_MAX_PENDING_CONNECTIONS_PER_ADDRESS", default_value_t = 64)]
    pub max_pending_connections_per_address: usize,
    /// Seconds a request's head may take to arrive (from the accept, or from its first byte).
    #[arg(long, env = "TOOLHOST_HEADER_READ_TIMEOUT_SECS", default_value_t = 10)]
    pub header_read_timeout_secs: u64,
    /// Seconds a connection with nothing in flight may stay silent before it is closed.
    #[arg(long, env = "TOOLHOST_IDLE_TIMEOUT_SECS", default_value_t = 120)]
    pub idle_timeout_secs: u64,
    /// An OpenTelemetry collector's OTLP/HTTP endpoint (`http://collector:4318`): each request and
    /// each call's stages are sent to it as spans, joining the trace of a request's `traceparent`.
    /// Off unless given (or `OTEL_EXPORTER_OTLP_ENDPOINT` is set).
    #[arg(long, env = "TOOLHOST_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// The service name spans carry.
    #[arg(long, env = "OTEL_SERVICE_NAME", default_value = "toolhost-server")]
    pub otel_service_name: String,
    /// The console's address as people reach it (`https://toolhost.example.com`): notifications
    /// and hooks link to approvals there. Default: `http://` and `--listen`.
    #[arg(long, env = "TOOLHOST_CONSOLE_URL")]
    pub console_url: Option<String>,
    /// Where people are told a call waits (the configuration file's `[notify]` table: webhooks,
    /// e-mail); no flag.
    #[arg(skip)]
    pub notify: NotifySettings,
    /// Free disk in MiB the folders the server writes (the SQLite journal's, the state folder)
    /// must keep for `/readyz` to say ready.
    #[arg(long, env = "TOOLHOST_MIN_FREE_DISK_MIB", default_value_t = 256)]
    pub min_free_disk_mib: u64,
    /// Seconds an approval waits for a person.
    #[arg(long, env = "TOOLHOST_APPROVAL_TIMEOUT_SECS", default_value_t = 600)]
    pub approval_timeout_secs: u64,
    /// Sandbox modes sessions may choose (`off`, `read-only`, `workspace-write`; comma-separated).
    /// Default: all three on an open loopback server, `read-only,workspace-write` with keys. The
    /// first allowed of `workspace-write`, `read-only` is the default. With `off` allowed, a call
    /// may also ask a person to run one command outside the sandbox.
    #[arg(long = "sandbox-modes", env = "TOOLHOST_SANDBOX_MODES", value_delimiter = ',')]
    pub sandbox_modes: Vec<SandboxMode>,
    /// Whether sessions may turn the network on for their commands (`on`/`off`). Default: on for an
    /// open loopback server (its sessions start with it on), off with keys (sessions cannot ask).
    #[arg(long, env = "TOOLHOST_SANDBOX_NETWORK")]
    pub sandbox_network: Option<NetworkAccess>,
    /// Run commands with what the kernel can enforce when it cannot enforce a session's sandbox in
    /// full (each result says what was missing). Default: such commands are refused.
    #[arg(long, env = "TOOLHOST_SANDBOX_BEST_EFFORT")]
    pub sandbox_best_effort: bool,
    /// A path sandboxed commands may never read (repeatable, or comma-separated). The journal's
    /// files, the state folder, the keys file and the deny-rules file are always on the list.
    /// Keep these outside workspaces: a denied path inside a writable folder costs the folder its
    /// own grant (see docs/SECURITY.md).
    #[arg(long = "sandbox-deny-read", env = "TOOLHOST_SANDBOX_DENY_READ", value_delimiter = ',')]
    pub sandbox_deny_read: Vec<PathBuf>,
    /// A TCP port commands may never connect to, even with the network on (repeatable, or
    /// comma-separated): other instances' or services' ports on this host. This server's own
    /// ports are always closed to its commands.
    #[arg(long = "sandbox-block-port", env = "TOOLHOST_SANDBOX_BLOCK_PORTS", value_delimiter = ',')]
    pub sandbox_block_ports: Vec<u16>,
    /// A variable of the server's environment that commands inherit, besides PATH, HOME, LANG,
    /// LC_*, TERM, TZ, USER, LOGNAME and SHELL (repeatable; `*` wildcards). Names that look like
    /// secrets (*KEY*, *TOKEN*, *SECRET*, *PASSWORD*, TOOLHOST_*…) and URLs with credentials are
    /// never inherited.
    #[arg(long = "command-env", env = "TOOLHOST_COMMAND_ENV", value_delimiter = ',')]
    pub command_env: Vec<String>,
    /// A variable every command is given, as `NAME=VALUE` (repeatable).
    #[arg(
        long = "command-set-env",
        env = "TOOLHOST_COMMAND_SET_ENV",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub command_set_env: Vec<String>,
    /// Seconds a background command may run before it is killed.
    #[arg(long, env = "TOOLHOST_JOB_LIFETIME_SECS", default_value_t = 3600)]
    pub job_lifetime_secs: u64,
    /// Background commands all sessions of one tenant may hold at once (each session holds at
    /// most 32).
    #[arg(long, env = "TOOLHOST_TENANT_JOBS", default_value_t = 64)]
    pub tenant_jobs: usize,
    /// Whether each session's commands are held to the `--command-max-*` limits in a control group
    /// (`on`/`off`). Default: on with keys; off on an open server, which is one person's machine
    /// (its commands then get only the floor: no core dumps, bounded open files).
    #[arg(long, env = "TOOLHOST_COMMAND_LIMITS")]
    pub command_limits: Option<OnOff>,
    /// Processes (and threads) one session's commands may have at once. Enforced with a control
    /// group per session (cgroup v2 in a delegated subtree, else the v1 `pids` hierarchy); the
    /// start-up log and `/readyz` say which.
    #[arg(long, env = "TOOLHOST_COMMAND_MAX_PROCESSES", default_value_t = 256)]
    pub command_max_processes: u64,
    /// Memory in MiB one session's commands may use together (page cache included); past it the
    /// kernel kills one of them and the result says so. Where no memory group can be made, each
    /// process's address space is held to it instead.
    #[arg(long, env = "TOOLHOST_COMMAND_MAX_MEMORY_MIB", default_value_t = 2048)]
    pub command_max_memory_mib: u64,
    /// CPU weight of each session's commands against the others' (1-10000; 100 is an ordinary
    /// share). Default: the host's.
    #[arg(long, env = "TOOLHOST_COMMAND_CPU_WEIGHT")]
    pub command_cpu_weight: Option<u64>,
    /// Disk in MiB a session's temp folder (its commands' TMPDIR and full outputs) may use: a
    /// command running when it passes this is stopped, and its result says why.
    #[arg(long, env = "TOOLHOST_SESSION_TEMP_MAX_MIB", default_value_t = 1024)]
    pub session_temp_max_mib: u64,
    /// Memories one person may keep (the memory tool refuses more, saying so).
    #[arg(long, env = "TOOLHOST_MAX_MEMORIES_PER_PERSON", default_value_t = 1000)]
    pub max_memories_per_person: u64,
    /// An OpenAI-compatible embeddings endpoint (its base, e.g. `https://api.openai.com/v1`):
    /// memories and knowledge bases are then searched by meaning as well as by words.
    #[arg(long, env = "TOOLHOST_EMBEDDINGS_URL", requires = "embeddings_model")]
    pub embeddings_url: Option<String>,
    /// Model profiles sub-agents may use (`callSubAgent`): a TOML file of `[profiles.NAME]` tables
    /// (`provider`, `model`, `base_url`, `api_key_env`, …) as the terminal app's `config.toml`,
    /// with `sub_agent = "NAME"` (or `profile`) for the default. Keys are read from this server's
    /// environment, never from a session; a session may name a profile (`sub_agent_model`).
    /// Without it the tool is off.
    #[arg(long, env = "TOOLHOST_MODELS", value_name = "FILE")]
    pub models: Option<PathBuf>,
    /// Model replies one sub-agent may take.
    #[arg(long, env = "TOOLHOST_SUB_AGENT_MAX_TURNS", default_value_t = 25)]
    pub sub_agent_max_turns: u32,
    /// Tokens (in and out) one sub-agent may use.
    #[arg(long, env = "TOOLHOST_SUB_AGENT_TOKEN_BUDGET", default_value_t = 400_000)]
    pub sub_agent_token_budget: u64,
    /// The embeddings model to ask for.
    #[arg(long, env = "TOOLHOST_EMBEDDINGS_MODEL", requires = "embeddings_url")]
    pub embeddings_model: Option<String>,
    /// The embeddings endpoint's API key, if it wants one.
    #[arg(long, env = "TOOLHOST_EMBEDDINGS_API_KEY", hide_env_values = true)]
    pub embeddings_api_key: Option<String>,
    /// Files one command's process may hold open.
    #[arg(long, env = "TOOLHOST_COMMAND_MAX_OPEN_FILES", default_value_t = 4096)]
    pub command_max_open_files: u64,
    /// Approval modes sessions may choose (comma-separated). Default: every mode on an open
    /// loopback server; `manual,allow_list,headless,read_only` with keys (no `auto_run`).
    #[arg(long = "approval-modes", env = "TOOLHOST_APPROVAL_MODES", value_delimiter = ',')]
    pub approval_modes: Vec<ApprovalMode>,
    /// What a session's allow-list may name besides read-only APIs, with keys: `tool/api`,
    /// `tool/*` or `tool` (repeatable, or comma-separated). An open server allows anything.
    #[arg(long = "allow-list-permit", env = "TOOLHOST_ALLOW_LIST_PERMITS", value_delimiter = ',')]
    pub allow_list_permits: Vec<String>,
    /// A JSON file with the operator's deny list: `[{"tool", "api", "match", "reason"}]`, in the
    /// rule-list syntax of manifests. A denied call never runs, in any mode.
    #[arg(long, env = "TOOLHOST_DENY_RULES_FILE")]
    pub deny_rules_file: Option<PathBuf>,
    /// MCP servers to mount as tools (TOML: `[servers.NAME]` with command, args, trust…; see the
    /// README). Each becomes the tool `mcp-NAME`, offered to every tenant, its calls through the
    /// same approvals, timeouts and journal; a server that cannot start is logged and left out.
    #[arg(long, env = "TOOLHOST_MCP_CONFIG")]
    pub mcp_config: Option<PathBuf>,
    /// Credentials the server's mounts reference by name (TOML, `name = "value"` lines, readable
    /// by its owner only), beside `TOOLHOST_CREDENTIAL_NAME` variables. Injected where requests
    /// leave; their values are redacted from every result, journal row and log line, and no
    /// tenant reads them.
    #[arg(long, env = "TOOLHOST_CREDENTIALS_FILE")]
    pub credentials_file: Option<PathBuf>,
    /// Let agent keys decide approvals (by default only approver and person keys may).
    #[arg(long, env = "TOOLHOST_AGENT_KEYS_DECIDE")]
    pub agent_keys_decide: bool,
    /// Folder for the server's own state on this host (the ledger of the process groups its
    /// commands run in, swept at start-up after a crash). Default: the data directory.
    #[arg(long, env = "TOOLHOST_STATE_DIR")]
    pub state_dir: Option<PathBuf>,
    /// Also serve `/metrics` without a key on this address (for a scraper on a private network);
    /// with keys, `/metrics` on the main address takes a key.
    #[arg(long, env = "TOOLHOST_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Days the journal keeps settled calls, decided approvals and ended sessions (0: for ever).
    /// Older rows are pruned in small batches every ten minutes; open calls, pending approvals,
    /// active sessions and remembered decisions are kept.
    #[arg(long, env = "TOOLHOST_JOURNAL_RETENTION_DAYS", default_value_t = 30)]
    pub journal_retention_days: u64,
    /// Days the journal keeps a settled call's whole result (0: as long as the row). Past them the
    /// result is cut to its first 200 characters, and the row (the call, its arguments, status and
    /// decision) stays until the retention above.
    #[arg(long, env = "TOOLHOST_JOURNAL_CONTENT_DAYS", default_value_t = 0)]
    pub journal_content_days: u64,
    /// Seconds a session may go unused before it is ended (its jobs killed, its temp folder removed).
    #[arg(long, env = "TOOLHOST_SESSION_IDLE_SECS", default_value_t = 86_400)]
    pub session_idle_secs: u64,
    /// Approvals one tenant may have waiting at once: a batch submitted past it gets 429.
    #[arg(long, env = "TOOLHOST_TENANT_APPROVALS", default_value_t = 256)]
    pub tenant_approvals: usize,
    /// Sessions one tenant may hold at once on an instance (past it: 429).
    #[arg(long, env = "TOOLHOST_TENANT_SESSIONS", default_value_t = 1000)]
    pub tenant_sessions: usize,
    /// Batches one tenant may have in flight (past it: 429).
    #[arg(long, env = "TOOLHOST_TENANT_BATCHES", default_value_t = 64)]
    pub tenant_batches: usize,
    /// Event streams one tenant may hold open (past it: 429).
    #[arg(long, env = "TOOLHOST_TENANT_STREAMS", default_value_t = 32)]
    pub tenant_streams: usize,
    /// Tool runs one tenant may have on the server's machine at once; more wait their turn.
    #[arg(long, env = "TOOLHOST_TENANT_RUNS", default_value_t = 16)]
    pub tenant_runs: usize,
    /// Threads for the file tools' blocking work (reads, writes, listings, searches) of all
    /// tenants together; a call past them waits for one. Under steady load every thread started
    /// stays, and each keeps about 1.1 MiB of memory. Default: twice `--tenant-runs` or 8 a core,
    /// whichever is more, so that one tenant using all its runs leaves half to the others.
    #[arg(long, env = "TOOLHOST_BLOCKING_THREADS", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub blocking_threads: Option<u32>,
}

impl Default for ServeArgs {
    fn default() -> Self {
        Self::parse_from_args(["toolhost-server"])
    }
}

impl ServeArgs {
    fn parse_from_args(args: impl IntoIterator<Item = &'static str>) -> Self {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            serve: ServeArgs,
        }
        Only::parse_from(args).serve
    }

    /// The keys from `--api-key` and `--api-keys-file`.
    ///
    /// # Errors
    ///
    /// An unreadable file or a malformed entry.
    pub fn keys(&self) -> anyhow::Result<Keys> {
        let mut entries: Vec<(String, String)> = self
            .api_keys
            .iter()
            .enumerate()
            .map(|(n, entry)| (format!("api-key #{}", n + 1), entry.clone()))
            .collect();
        if let Some(path) = &self.api_keys_file {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading API keys from {}", path.display()))?;
            entries.extend(
                text.lines()
                    .enumerate()
                    .map(|(n, line)| (format!("{}:{}", path.display(), n + 1), line.to_owned())),
            );
        }
        Keys::parse_from(entries.iter().map(|(origin, entry)| (origin.clone(), entry.as_str())))
            .map_err(anyhow::Error::msg)
    }

    /// The operator's credentials (`--credentials-file` and `TOOLHOST_CREDENTIAL_*` variables),
    /// loaded into [`held_credentials`], which the log's writer redacts from the start.
    ///
    /// # Errors
    ///
    /// An unreadable file, one others can read, or a name or value that makes no credential.
    pub fn credentials(&self) -> anyhow::Result<credentials::Credentials> {
        let held = held_credentials();
        if let Some(path) = &self.credentials_file {
            let loaded = credentials::load_operator_file(path)
                .with_context(|| format!("reading --credentials-file {}", path.display()))?;
            held.extend(&loaded);
        }
        held.add_env(credentials::env_vars()).context("reading TOOLHOST_CREDENTIAL_* variables")?;
        Ok(held.clone())
    }

    /// Checks what can be checked before anything starts.
    ///
    /// # Errors
    ///
    /// No keys on a non-loopback address; a workspace root that is not a folder.
    pub fn validate(&self, keys: &Keys) -> anyhow::Result<()> {
        self.credentials()?;
        if keys.is_open() && !self.listen.ip().is_loopback() {
            bail!(
                "refusing to listen on {} without API keys: give --api-key TENANT:SHA256HEX (see \
                 `toolhost-server new-key`), or listen on a loopback address",
                self.listen
            );
        }
        for root in &self.workspace_roots {
            if !root.path.is_dir() {
                bail!("workspace root {} is not a folder", root.path.display());
            }
        }
        for granted in &self.tenant_paths {
            if !granted.root.path.is_dir() {
                bail!("tenant path {} is not a folder", granted.root.path.display());
            }
        }
        let mut problems = crate::checks::tenancy(self, keys);
        problems.extend(crate::checks::notify(self, keys));
        if !problems.is_empty() {
            bail!("{}", problems.join("\n"));
        }
        if self.command_max_processes < 8 {
            bail!("--command-max-processes must be at least 8 (a shell and a pipeline need a few)");
        }
        if self.command_max_memory_mib < 64 {
            bail!("--command-max-memory-mib must be at least 64");
        }
        if self.command_cpu_weight.is_some_and(|w| !(1..=10_000).contains(&w)) {
            bail!("--command-cpu-weight must be between 1 and 10000");
        }
        if self.max_body_bytes < 1024 {
            bail!("--max-body-bytes must be at least 1024");
        }
        Ok(())
    }

    /// The journal URL: the flag, or SQLite in the user's data directory.
    ///
    /// # Errors
    ///
    /// No home directory to put the database in.
    pub fn database_url(&self) -> anyhow::Result<String> {
        if let Some(url) = &self.database_url {
            return Ok(url.clone());
        }
        // Under systemd's StateDirectory= the journal lives in the service's state folder.
        if self.state_dir.is_none()
            && let Some(dir) = systemd_state_directory()
        {
            return Ok(format!("sqlite://{}", dir.join("journal.db").display()));
        }
        Ok(format!("sqlite://{}", data_dir()?.join("journal.db").display()))
    }

    /// The folder for this host's server state: `--state-dir`, or `toolhost` in the data directory.
    ///
    /// # Errors
    ///
    /// No data directory, or it cannot be created.
    pub fn state_dir(&self) -> anyhow::Result<PathBuf> {
        match self.state_dir.clone().or_else(systemd_state_directory) {
            Some(dir) => {
                std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
                Ok(dir)
            }
            None => data_dir(),
        }
    }

    /// The size of the blocking pool: `--blocking-threads`, or twice `--tenant-runs` or 8 a core,
    /// whichever is more.
    pub fn blocking_threads(&self) -> usize {
        self.blocking_threads.map_or_else(
            || {
                let cores = std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get);
                self.tenant_runs.max(1).saturating_mul(2).max(cores.saturating_mul(8))
            },
            |threads| threads as usize,
        )
    }

    /// Where traces go: `--otlp-endpoint`, else the standard `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub fn otlp_endpoint(&self) -> Option<String> {
        self.otlp_endpoint
            .clone()
            .or_else(|| std::env::var("OTEL_EXPORTER_OTLP_ENDPOINT").ok())
            .filter(|endpoint| !endpoint.trim().is_empty())
    }

    /// How connections are bounded.
    pub fn connection_limits(&self) -> crate::listen::ConnectionLimits {
        crate::listen::ConnectionLimits {
            max_connections: self.max_connections.max(1),
            max_fresh_per_peer: self.max_pending_connections_per_address.max(1),
            header_read_timeout: Duration::from_secs(self.header_read_timeout_secs.max(1)),
            idle_timeout: Duration::from_secs(self.idle_timeout_secs.max(1)),
        }
    }

    /// How long a journal write may take.
    pub fn journal_deadline(&self) -> Duration {
        Duration::from_millis(self.journal_deadline_ms)
    }

    /// The shutdown grace.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }

    /// The sandbox modes sessions may choose, the default first.
    pub fn sandbox_modes(&self, keys: &Keys) -> Vec<SandboxMode> {
        let mut modes = if self.sandbox_modes.is_empty() {
            if keys.is_open() {
                SandboxMode::ALL.to_vec()
            } else {
                vec![SandboxMode::WorkspaceWrite, SandboxMode::ReadOnly]
            }
        } else {
            self.sandbox_modes.clone()
        };
        // The default is the first of these that is allowed: a closed default, never `off` unless
        // it is all the operator allows.
        modes.sort_by_key(|mode| match mode {
            SandboxMode::WorkspaceWrite => 0,
            SandboxMode::ReadOnly => 1,
            SandboxMode::Off => 2,
        });
        modes.dedup();
        modes
    }

    /// Whether commands are held to per-session limits.
    pub fn command_limits(&self, keys: &Keys) -> bool {
        self.command_limits.map_or(!keys.is_open(), |choice| choice == OnOff::On)
    }

    /// Whether sessions may turn the network on, and whether it is on by default.
    pub fn sandbox_network(&self, keys: &Keys) -> NetworkAccess {
        self.sandbox_network.unwrap_or(if keys.is_open() { NetworkAccess::On } else { NetworkAccess::Off })
    }

    /// Each tenant's budgets.
    pub fn limits(&self) -> crate::limits::LimitConfig {
        crate::limits::LimitConfig {
            sessions: self.tenant_sessions.max(1),
            batches: self.tenant_batches.max(1),
            streams: self.tenant_streams.max(1),
            runs: self.tenant_runs.max(1),
        }
    }

    /// The approval modes sessions may choose.
    pub fn approval_modes(&self, keys: &Keys) -> Vec<ApprovalMode> {
        if !self.approval_modes.is_empty() {
            return self.approval_modes.clone();
        }
        if keys.is_open() {
            ApprovalMode::ALL.to_vec()
        } else {
            // A key holder could otherwise run every call without a person: auto-run is the
            // operator's to hand out.
            vec![
                ApprovalMode::Manual,
                ApprovalMode::AllowList,
                ApprovalMode::Headless,
                ApprovalMode::ReadOnly,
            ]
        }
    }

    /// The operator's deny list.
    ///
    /// # Errors
    ///
    /// An unreadable file, JSON that is not a list of rules, an invalid regular expression.
    pub fn deny_list(&self) -> anyhow::Result<DenyList> {
        let Some(path) = &self.deny_rules_file else { return Ok(DenyList::default()) };
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the deny rules {}", path.display()))?;
        let rules: Vec<DenyRule> = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a list of deny rules", path.display()))?;
        DenyList::compile(rules).with_context(|| format!("compiling the deny rules in {}", path.display()))
    }

    /// What commands inherit and are given.
    ///
    /// # Errors
    ///
    /// A `--command-set-env` entry without `=`.
    pub fn command_env(&self) -> anyhow::Result<computer_runtime::env::EnvPolicy> {
        let mut policy = computer_runtime::env::EnvPolicy::default();
        policy.inherit.extend(self.command_env.iter().cloned());
        for entry in &self.command_set_env {
            let Some((name, value)) = entry.split_once('=') else {
                bail!("--command-set-env takes NAME=VALUE, got `{entry}`");
            };
            policy.set.push((name.to_owned(), value.to_owned()));
        }
        Ok(policy)
    }
}

/// The folder systemd made for the service (`StateDirectory=`, passed as `$STATE_DIRECTORY`; the
/// first when it names several): a default, which `--state-dir` and `--database-url` override.
fn systemd_state_directory() -> Option<PathBuf> {
    let value = std::env::var_os("STATE_DIRECTORY")?;
    let first = std::env::split_paths(&value).next()?;
    first.is_absolute().then_some(first)
}

/// `toolhost` in the user's data directory (created when missing): the journal and the server's
/// state live there unless told otherwise.
fn data_dir() -> anyhow::Result<PathBuf> {
    use etcetera::BaseStrategy as _;
    let dir =
        etcetera::choose_base_strategy().context("finding the data directory")?.data_dir().join("toolhost");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    Ok(dir)
}

/// An address to listen on: an IP address and a port, `localhost` taken as `127.0.0.1`.
fn parse_listen(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    if let Ok(address) = text.parse::<SocketAddr>() {
        return Ok(address);
    }
    let usage = "an IP address and a port: `127.0.0.1:8080` (this machine only), `0.0.0.0:8080` (every IPv4 \
                 address, with keys), `[::]:8080`";
    match text.rsplit_once(':') {
        Some((host, port)) if host.eq_ignore_ascii_case("localhost") => port
            .parse::<u16>()
            .map(|port| SocketAddr::from(([127, 0, 0, 1], port)))
            .map_err(|_| format!("`{text}`: `{port}` is not a port; give {usage}")),
        Some((host, port)) if port.parse::<u16>().is_ok() => Err(format!(
            "`{text}`: `{host}` is not an IP address (a host name is not resolved here); give {usage}"
        )),
        _ => Err(format!("`{text}` has no port; give {usage}")),
    }
}

/// `TOOL=MODE` of `--tool-exposure`.
fn parse_exposure(text: &str) -> Result<(String, tool_core::Exposure), String> {
    let (tool, mode) = text.split_once('=').ok_or_else(|| format!("`{text}` is not TOOL=MODE"))?;
    let exposure = match mode.trim() {
        "direct" => tool_core::Exposure::Direct,
        "auto" => tool_core::Exposure::Auto,
        "deferred" => tool_core::Exposure::Deferred,
        "hidden" => tool_core::Exposure::Hidden,
        other => return Err(format!("`{other}` is not an exposure: use direct, auto, deferred or hidden")),
    };
    let tool = tool.trim();
    if tool.is_empty() {
        return Err(format!("`{text}` names no tool"));
    }
    Ok((tool.to_owned(), exposure))
}

/// The credentials this process holds (shared: the log's writer redacts them from the start).
pub fn held_credentials() -> &'static credentials::Credentials {
    static HELD: std::sync::LazyLock<credentials::Credentials> =
        std::sync::LazyLock::new(credentials::Credentials::new);
    &HELD
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_an_address_and_localhost_and_says_what_else_it_wants() {
        assert_eq!(parse_listen("localhost:9000").unwrap().to_string(), "127.0.0.1:9000");
        assert_eq!(parse_listen("[::1]:80").unwrap().to_string(), "[::1]:80");
        assert!(parse_listen("example.org:80").unwrap_err().contains("is not an IP address"));
        assert!(parse_listen("127.0.0.1").unwrap_err().contains("has no port"));
        assert!(parse_listen("localhost:http").unwrap_err().contains("is not a port"));
    }

    #[test]
    fn tool_exposure_takes_tool_equals_mode() {
        assert_eq!(
            parse_exposure("mcp-github=deferred"),
            Ok(("mcp-github".into(), tool_core::Exposure::Deferred))
        );
        assert_eq!(
            parse_exposure(" calculator = hidden"),
            Ok(("calculator".into(), tool_core::Exposure::Hidden))
        );
        assert!(parse_exposure("mcp-github").unwrap_err().contains("TOOL=MODE"));
        assert!(parse_exposure("x=sometimes").unwrap_err().contains("direct, auto, deferred or hidden"));
        assert!(parse_exposure("=direct").unwrap_err().contains("names no tool"));
    }

    #[test]
    fn the_blocking_pool_leaves_room_beside_one_tenant_and_takes_an_explicit_size() {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse =
            |args: &[&str]| Only::try_parse_from([&["toolhost-server"], args].concat()).map(|o| o.serve);
        let cores = std::thread::available_parallelism().unwrap().get();
        let default = parse(&[]).unwrap();
        assert_eq!(default.blocking_threads(), 32.max(8 * cores), "twice the 16 runs of one tenant");
        let many_runs = parse(&["--tenant-runs", "100"]).unwrap();
        assert_eq!(many_runs.blocking_threads(), 200.max(8 * cores));
        assert_eq!(parse(&["--blocking-threads", "3"]).unwrap().blocking_threads(), 3);
        for refused in ["0", "-1", "4097", "many"] {
            assert!(parse(&["--blocking-threads", refused]).is_err(), "{refused}");
        }
    }

    #[test]
    fn open_servers_only_listen_on_loopback() {
        let mut args = ServeArgs::default();
        assert_eq!(args.listen.to_string(), "127.0.0.1:8080");
        args.validate(&Keys::default()).unwrap();
        args.listen = "0.0.0.0:8080".parse().unwrap();
        let error = args.validate(&Keys::default()).unwrap_err().to_string();
        assert!(error.contains("without API keys"), "{error}");
        let keys = Keys::parse([crate::auth::stored_form("acme", "k").as_str()]).unwrap();
        args.validate(&keys).unwrap();
    }

    #[test]
    fn workspace_roots_name_their_tenant_once_keys_name_several() {
        let dir = std::env::temp_dir();
        let shown = dir.display();
        for (given, owner) in [
            (format!("acme={shown}"), RootOwner::Tenant("acme".into())),
            (format!("*={shown}"), RootOwner::Shared),
            (shown.to_string(), RootOwner::Unnamed),
        ] {
            let root: WorkspaceRoot = given.parse().unwrap();
            assert_eq!((root.owner, root.path), (owner, dir.clone()), "{given}");
        }
        assert!("a b=/x".parse::<WorkspaceRoot>().is_err());
        let acme: WorkspaceRoot = format!("acme={shown}").parse().unwrap();
        assert!(acme.admits("acme") && !acme.admits("globex"));

        let one = Keys::parse([crate::auth::stored_form("acme", "k").as_str()]).unwrap();
        let two = Keys::parse([
            crate::auth::stored_form("acme", "k").as_str(),
            crate::auth::stored_form("globex", "g").as_str(),
        ])
        .unwrap();
        let mut args =
            ServeArgs { workspace_roots: vec![shown.to_string().parse().unwrap()], ..ServeArgs::default() };
        args.validate(&one).unwrap();
        let error = args.validate(&two).unwrap_err().to_string();
        assert!(error.contains("names no tenant") && error.contains("acme, globex"), "{error}");
        args.workspace_roots = vec![WorkspaceRoot::shared(&dir), WorkspaceRoot::of("acme", &dir)];
        args.validate(&two).unwrap();
    }
}
