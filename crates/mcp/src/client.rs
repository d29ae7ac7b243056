//! MCP servers mounted as Toolhost tools: each configured server becomes one tool whose APIs are
//! its tools, named `server__tool` for the model, so every call passes the one pipeline —
//! approvals, timeouts, the journal — like a builtin tool's.
//!
//! ```toml
//! # mcp.toml in the XDG config folder (or --mcp-config FILE)
//! [servers.files]
//! command = "npx"
//! args = ["-y", "@modelcontextprotocol/server-filesystem", "/home/me/project"]
//! env = { LOG_LEVEL = "warn" }          # literal values
//! env_from = { GITHUB_TOKEN = "GH_PAT" } # values read from this process's variables, never echoed
//! trust = "ask"                          # auto | ask | deny: ask (the default) asks in every mode
//! tools = { read_text_file = "auto" }    # per tool
//! deny = ["write_file"]                  # never mounted
//! startup_timeout_secs = 30
//! call_timeout_secs = 120
//! start = "lazy"                         # lazy (default) | background
//! ```
//!
//! A server over streamable HTTP instead: `url = "https://…/mcp"`, `headers = { … }`,
//! `bearer_from = "VARIABLE"`.
//!
//! Credentials (`toolhost creds set NAME`, or the server operator's) by name, never written in
//! the file: `env_credentials = { GITHUB_TOKEN = "github" }` for a stdio server,
//! `bearer_credential = "NAME"` and `header_credentials = { "X-Api-Key" = "NAME" }` for an HTTP
//! one. Their values are injected when the server starts and redacted from everything the
//! pipeline returns or keeps.
//!
//! The same file's `[apis.NAME]` tables mount OpenAPI services (the `api` tool); this module
//! leaves them alone.
//!
//! A server's tool list is remembered between runs ([`Catalogues`], keyed by what starts it): a
//! remembered server is declared from that list and starts on its first call (`lazy`) or in the
//! background at once (`background`), so a slow or broken server holds up neither the start nor
//! other tools' calls, and its failure is the failed call's reason. A server not remembered yet is
//! started at mount, all of them together. The list is remembered again whenever the server is
//! started and when it says its tools changed (`notifications/tools/list_changed`); a changed list
//! is declared from the next start on.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use rmcp::ServiceExt as _;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncBufReadExt as _;
use tool_core::{
    ApiSpec, CallContext, ErrorKind, Intervention, InterventionPolicy, Tier, ToolManifest, ToolMeta,
    ToolOutput, ToolRuntime,
};

/// How much a mounted tool is trusted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// Runs without asking (the session's deny list and mode still apply).
    Auto,
    /// Asks a person before every call, in every mode (headless sessions block it).
    #[default]
    Ask,
    /// Never mounted.
    Deny,
}

/// When a server is started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// On its first call when its tool list is remembered; at mount when it is not.
    #[default]
    Lazy,
    /// At mount, in the background when its tool list is remembered.
    Background,
}

/// One server: a program spoken to over stdio (`command`), or a URL spoken to over streamable
/// HTTP (`url`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// The program (stdio).
    #[serde(default)]
    pub command: String,
    /// The server's URL (streamable HTTP), instead of a command.
    #[serde(default)]
    pub url: Option<String>,
    /// Headers sent to an HTTP server, literal.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// The variable holding an HTTP server's bearer token (never written in the file).
    #[serde(default)]
    pub bearer_from: Option<String>,
    /// The credential sent as an HTTP server's bearer token.
    #[serde(default)]
    pub bearer_credential: Option<String>,
    /// Headers sent to an HTTP server with a credential's value: header → credential.
    #[serde(default)]
    pub header_credentials: BTreeMap<String, String>,
    /// Variables of a stdio server set to a credential's value: variable → credential.
    #[serde(default)]
    pub env_credentials: BTreeMap<String, String>,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Variables set to these literal values.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Variables set from this process's variables of these names (secrets stay out of the file).
    #[serde(default)]
    pub env_from: BTreeMap<String, String>,
    /// The folder it starts in (default: the folder the app runs in); the one it may write in
    /// under the `workspace-write` sandbox.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The sandbox a stdio server runs in: `workspace-write` (default: writes only in its folder
    /// and a private temp folder), `read-only` or `off`.
    #[serde(default = "workspace_write")]
    pub sandbox: tool_core::SandboxMode,
    /// Whether a sandboxed stdio server may use the network (default `off`).
    #[serde(default)]
    pub network: tool_core::NetworkAccess,
    /// Mounted at all.
    #[serde(default = "yes")]
    pub enabled: bool,
    /// How long it may take to start and list its tools.
    #[serde(default = "thirty")]
    pub startup_timeout_secs: u64,
    /// The default timeout of its calls.
    #[serde(default)]
    pub call_timeout_secs: Option<u64>,
    /// The trust of its tools.
    #[serde(default)]
    pub trust: Trust,
    /// The trust of single tools, overriding the server's.
    #[serde(default)]
    pub tools: BTreeMap<String, Trust>,
    /// Only these tools are mounted (all when empty).
    #[serde(default)]
    pub allow: Vec<String>,
    /// These tools are never mounted.
    #[serde(default)]
    pub deny: Vec<String>,
    /// Its calls may run beside each other.
    #[serde(default = "yes")]
    pub parallel: bool,
    /// When it starts: `lazy` (default: on its first call, once its tool list is remembered) or
    /// `background` (at mount, without waiting for it when its list is remembered).
    #[serde(default)]
    pub start: Start,
    /// Its resources and prompts may be read at `mcp://NAME/…` by any session of this process
    /// (reads are not approved like calls: the operator opens them here, per server).
    #[serde(default)]
    pub resources: bool,
}

fn workspace_write() -> tool_core::SandboxMode {
    tool_core::SandboxMode::WorkspaceWrite
}

fn yes() -> bool {
    true
}

fn thirty() -> u64 {
    30
}

/// The configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpConfig {
    /// Servers by name.
    #[serde(default)]
    pub servers: BTreeMap<String, ServerConfig>,
    /// The `[apis.NAME]` tables: OpenAPI services the `api` tool mounts, not read here.
    #[serde(default)]
    pub apis: BTreeMap<String, Elsewhere>,
}

/// A table another reader of the mount file reads (skipped here).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Elsewhere;

impl<'de> Deserialize<'de> for Elsewhere {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        serde::de::IgnoredAny::deserialize(deserializer).map(|_| Self)
    }
}

/// Why a server could not be mounted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// The configuration is not valid.
    #[error("the MCP configuration is not valid: {0}")]
    Config(String),
    /// The server did not start or answer.
    #[error("MCP server `{server}`: {message}")]
    Server {
        /// The server's name.
        server: String,
        /// What happened (the command missing, its exit and last lines of stderr, a timeout, a
        /// protocol error).
        message: String,
    },
    /// A credential the configuration names is not held.
    #[error(
        "MCP server `{server}`: no credential `{credential}` (add it with `toolhost creds set {credential}`, or the server operator's credentials)"
    )]
    MissingCredential {
        /// The server.
        server: String,
        /// The credential.
        credential: String,
    },
    /// A variable named in `env_from` is not set.
    #[error("MCP server `{server}`: the variable `{variable}` named in env_from is not set")]
    MissingVariable {
        /// The server.
        server: String,
        /// The variable.
        variable: String,
    },
}

impl McpConfig {
    /// Parses the TOML text.
    ///
    /// # Errors
    ///
    /// Invalid TOML or an unknown field.
    pub fn parse(text: &str) -> Result<Self, MountError> {
        let config: Self = toml::from_str(text).map_err(|e| MountError::Config(e.to_string()))?;
        for (name, server) in &config.servers {
            if server.command.is_empty() == server.url.is_none() {
                return Err(MountError::Config(format!(
                    "server `{name}` needs either `command` or `url`, not both"
                )));
            }
        }
        Ok(config)
    }
}

/// The tool lists of servers, remembered between runs in a folder (one JSON file per server and
/// configuration), so a server need not start to be declared.
#[derive(Debug, Clone)]
pub struct Catalogues {
    dir: PathBuf,
}

/// The largest remembered list read back.
const CATALOGUE_BYTES: u64 = 4 * 1024 * 1024;

impl Catalogues {
    /// Lists kept in `dir` (made when the first is written).
    pub fn new(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The file of a server: its name and a fingerprint of what starts it — the command,
    /// arguments and folder it runs in, or its URL and headers, its environment and credentials
    /// as given to it, its sandbox — so another of these is another server. The fingerprint is a
    /// one-way hash: the secrets among these are not in the file or its name.
    fn key(name: &str, config: &ServerConfig, env: &[(String, String)], bearer: Option<&str>) -> String {
        use sha2::Digest as _;
        let folder = match (&config.url, &config.cwd) {
            (Some(_), _) => None,
            (None, Some(cwd)) => Some(std::fs::canonicalize(cwd).unwrap_or_else(|_| cwd.clone())),
            (None, None) => std::env::current_dir().ok(),
        };
        let what = json!({
            "command": config.command, "args": config.args, "url": config.url, "folder": folder,
            "env": env, "headers": config.headers, "bearer": bearer,
            "credentials": [&config.env_credentials, &config.header_credentials, &config.bearer_credential],
            "sandbox": config.sandbox.as_str(), "network": config.network == tool_core::NetworkAccess::On,
        });
        let digest = sha2::Sha256::digest(what.to_string().as_bytes());
        let hash: String = digest.iter().take(16).map(|b| format!("{b:02x}")).collect();
        let name: String = name
            .chars()
            .take(64)
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' })
            .collect();
        format!("{name}-{hash}.json")
    }

    /// The remembered list, when there is one that reads as a list of tools.
    fn load(&self, key: &str) -> Option<Vec<Value>> {
        let path = self.dir.join(key);
        if std::fs::metadata(&path).ok()?.len() > CATALOGUE_BYTES {
            return None;
        }
        let tools: Vec<Value> = serde_json::from_slice(&std::fs::read(path).ok()?).ok()?;
        // An empty list declares nothing: such a server is started to be listed again.
        (!tools.is_empty() && tools.iter().all(|t| t.get("name").is_some_and(Value::is_string)))
            .then_some(tools)
    }

    /// Remembers a list (written whole to a temp file of its own, then renamed into place); a
    /// failure only loses the memory. An empty list is not remembered.
    fn store(&self, key: &str, tools: &[Value]) {
        if tools.is_empty() {
            return;
        }
        let write = || -> std::io::Result<()> {
            use std::io::Write as _;
            std::fs::create_dir_all(&self.dir)?;
            let mut temp = tempfile::NamedTempFile::new_in(&self.dir)?;
            temp.write_all(&serde_json::to_vec(tools).unwrap_or_default())?;
            temp.persist(self.dir.join(key)).map_err(|e| e.error)?;
            Ok(())
        };
        if let Err(error) = write() {
            tracing::warn!(%error, dir = %self.dir.display(), "cannot remember an MCP server's tools");
        }
    }
}

/// How servers are mounted.
#[derive(Debug, Clone, Default)]
pub struct MountOptions {
    /// Where tool lists are remembered between runs (none: every server starts at mount).
    pub catalogues: Option<Catalogues>,
    /// Start every server at mount even when its list is remembered (to check a configuration);
    /// the lists are remembered again.
    pub fresh: bool,
    /// Where the mounted servers are registered for `mcp://SERVER/URI` reads of their resources.
    pub resources: Option<McpResources>,
    /// The credentials servers reference (`env_credentials`, `bearer_credential`,
    /// `header_credentials`); none when absent.
    pub credentials: Option<credentials::Credentials>,
}

/// The mounted servers' resources for `readFile`: `mcp://SERVER/URI` reads one (text by lines, a
/// binary one said as such), `mcp://SERVER/` lists them. A front end puts it in its
/// `UrlRouter` and in the [`MountOptions`] of its mounts.
#[derive(Clone, Default)]
pub struct McpResources {
    servers: Arc<std::sync::RwLock<BTreeMap<String, Arc<Connection>>>>,
}

impl std::fmt::Debug for McpResources {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let servers = self.servers.read().unwrap_or_else(|p| p.into_inner());
        f.debug_struct("McpResources").field("servers", &servers.keys().collect::<Vec<_>>()).finish()
    }
}

/// Resources one listing names at most.
const MAX_LISTED_RESOURCES: usize = 500;

impl McpResources {
    fn add(&self, connection: Arc<Connection>) {
        self.servers.write().unwrap_or_else(|p| p.into_inner()).insert(connection.name.clone(), connection);
    }

    /// The running server's peer, started if it is not.
    async fn peer(connection: &Arc<Connection>) -> Result<rmcp::service::Peer<RoleClient>, String> {
        let running = connection
            .client
            .lock()
            .await
            .as_ref()
            .filter(|c| !c.is_transport_closed())
            .map(|c| c.peer().clone());
        if let Some(peer) = running {
            return Ok(peer);
        }
        let starting = connection.clone();
        tokio::spawn(async move { starting.ensure_started().await }).await.map_err(|e| e.to_string())??;
        connection
            .client
            .lock()
            .await
            .as_ref()
            .filter(|c| !c.is_transport_closed())
            .map(|c| c.peer().clone())
            .ok_or_else(|| format!("the MCP server `{}` stopped", connection.name))
    }

    async fn read(&self, rest: &str, lines: tool_core::urls::Lines) -> Result<ToolOutput, String> {
        let (server, uri) = rest.split_once('/').unwrap_or((rest, ""));
        let connection = self.servers.read().unwrap_or_else(|p| p.into_inner()).get(server).cloned();
        let Some(connection) = connection else {
            let known: Vec<String> =
                self.servers.read().unwrap_or_else(|p| p.into_inner()).keys().cloned().collect();
            return Ok(ToolOutput::error(
                ErrorKind::NotFound,
                if known.is_empty() {
                    "no MCP server is mounted".to_owned()
                } else {
                    format!("no mounted MCP server `{server}`; mounted: {}", known.join(", "))
                },
            ));
        };
        let peer = Self::peer(&connection).await?;
        let timeout = Duration::from_secs(connection.config.startup_timeout_secs.max(30));
        if uri.is_empty() {
            let listed = tokio::time::timeout(timeout, first_resources(&peer))
                .await
                .map_err(|_| "the server did not list its resources in time".to_owned())?
                .map_err(|e| connection.redact(format!("the server did not list its resources: {e}")))?;
            let mut text = String::new();
            for resource in listed.iter().take(MAX_LISTED_RESOURCES) {
                let description =
                    resource.description.as_deref().map(|d| format!(" — {d}")).unwrap_or_default();
                text.push_str(&format!("mcp://{server}/{} ({}){description}\n", resource.uri, resource.name));
            }
            if listed.len() > MAX_LISTED_RESOURCES {
                text.push_str(&format!("[… the server lists more than {MAX_LISTED_RESOURCES}]\n"));
            }
            if listed.is_empty() {
                text.push_str(&format!("the MCP server `{server}` lists no resources\n"));
            }
            // Its prompts too, read at `mcp://SERVER/prompts/NAME` (a server without prompts
            // simply has none).
            if let Ok(Ok(prompts)) = tokio::time::timeout(timeout, first_prompts(&peer)).await {
                for prompt in prompts.iter().take(MAX_LISTED_RESOURCES) {
                    let description =
                        prompt.description.as_deref().map(|d| format!(" — {d}")).unwrap_or_default();
                    text.push_str(&format!("mcp://{server}/prompts/{} (prompt){description}\n", prompt.name));
                }
            }
            return Ok(ToolOutput::ok(text.trim_end().to_owned())
                .with_state(json!({"type": "mcp", "server": server, "resources": listed.len()})));
        }
        if let Some(name) = uri.strip_prefix("prompts/") {
            let got = tokio::time::timeout(
                timeout,
                peer.get_prompt(rmcp::model::GetPromptRequestParams::new(name)),
            )
            .await
            .map_err(|_| "the server did not answer in time".to_owned())?
            .map_err(|e| connection.redact(format!("the server could not give the prompt `{name}`: {e}")))?;
            let mut text = got.description.clone().map(|d| format!("{d}\n\n")).unwrap_or_default();
            for message in &got.messages {
                let block = serde_json::to_value(&message.content).unwrap_or(Value::Null);
                let role = serde_json::to_value(&message.role).unwrap_or(Value::Null);
                text.push_str(&format!(
                    "[{}]\n{}\n\n",
                    role.as_str().unwrap_or("message"),
                    model_text(std::slice::from_ref(&block))
                ));
            }
            let address = format!("mcp://{server}/{uri}");
            return Ok(match tool_core::urls::read_lines(text.trim_end(), lines, &address) {
                Some(shown) => {
                    ToolOutput::ok(shown).with_state(json!({"type": "mcp", "server": server, "prompt": name}))
                }
                None => ToolOutput::error(ErrorKind::InvalidArguments, format!("{address}: no such line")),
            });
        }
        let read = tokio::time::timeout(
            timeout,
            peer.read_resource(rmcp::model::ReadResourceRequestParams::new(uri)),
        )
        .await
        .map_err(|_| "the server did not answer in time".to_owned())?
        .map_err(|e| connection.redact(format!("the server could not read `{uri}`: {e}")))?;
        let mut parts = Vec::new();
        for contents in &read.contents {
            let Value::Object(map) = serde_json::to_value(contents).unwrap_or(Value::Null) else { continue };
            match map.get("text").and_then(Value::as_str) {
                Some(text) => parts.push(text.to_owned()),
                None => {
                    let mime = map.get("mimeType").and_then(Value::as_str).unwrap_or("binary");
                    let bytes = map.get("blob").and_then(Value::as_str).map_or(0, |b| b.len() / 4 * 3);
                    parts.push(format!(
                        "[{mime}, {}: not text]",
                        computer_runtime::format::size(bytes as u64)
                    ));
                }
            }
        }
        let text = parts.join("\n");
        let address = format!("mcp://{server}/{uri}");
        match tool_core::urls::read_lines(&text, lines, &address) {
            Some(shown) => {
                Ok(ToolOutput::ok(shown).with_state(json!({"type": "mcp", "server": server, "uri": uri})))
            }
            None => Ok(ToolOutput::error(
                ErrorKind::InvalidArguments,
                format!("{address} has {} lines; start at one of them", text.lines().count()),
            )),
        }
    }
}

/// Pages a listing asks a server for at most (a server that never stops paging is not followed).
const MAX_LISTING_PAGES: usize = 10;

/// The first items a server lists, page by page (`page` asks for one after a cursor), at most
/// [`MAX_LISTING_PAGES`] pages and [`MAX_LISTED_RESOURCES`] items and one more (to say there are
/// more): a server that never stops paging is not followed.
async fn first_listed<T, F, Fut>(mut page: F) -> Result<Vec<T>, rmcp::ServiceError>
where
    F: FnMut(rmcp::model::PaginatedRequestParams) -> Fut,
    Fut: std::future::Future<Output = Result<(Vec<T>, Option<String>), rmcp::ServiceError>>,
{
    let mut out = Vec::new();
    let mut cursor = None;
    for _ in 0..MAX_LISTING_PAGES {
        let (items, next) = page(rmcp::model::PaginatedRequestParams::default().with_cursor(cursor)).await?;
        out.extend(items);
        cursor = next;
        if cursor.is_none() || out.len() > MAX_LISTED_RESOURCES {
            break;
        }
    }
    out.truncate(MAX_LISTED_RESOURCES + 1);
    Ok(out)
}

/// The first resources a server lists ([`first_listed`]).
async fn first_resources(
    peer: &rmcp::service::Peer<RoleClient>,
) -> Result<Vec<rmcp::model::Resource>, rmcp::ServiceError> {
    first_listed(|params| async move {
        peer.list_resources(Some(params)).await.map(|page| (page.resources, page.next_cursor))
    })
    .await
}

/// The first prompts a server lists ([`first_listed`]).
async fn first_prompts(
    peer: &rmcp::service::Peer<RoleClient>,
) -> Result<Vec<rmcp::model::Prompt>, rmcp::ServiceError> {
    first_listed(|params| async move {
        peer.list_prompts(Some(params)).await.map(|page| (page.prompts, page.next_cursor))
    })
    .await
}

impl tool_core::UrlReader for McpResources {
    fn scheme(&self) -> &'static str {
        "mcp"
    }

    fn describe(&self) -> &'static str {
        "a mounted MCP server's resources and prompts: mcp://SERVER/URI, mcp://SERVER/prompts/NAME (mcp://SERVER/ lists them)"
    }

    fn read<'a>(
        &'a self,
        rest: &'a str,
        lines: tool_core::urls::Lines,
        _context: &'a CallContext,
    ) -> futures::future::BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            self.read(rest, lines)
                .await
                .unwrap_or_else(|message| ToolOutput::error(ErrorKind::Execution, message))
        })
    }
}

/// Remembers a server's tools: where, under which key, and for which server.
#[derive(Debug, Clone)]
struct Memory {
    catalogues: Catalogues,
    key: String,
    server: String,
    /// One refresh at a time, the newest listing written last.
    refreshing: Arc<tokio::sync::Mutex<()>>,
    /// A refresh is asked for and has not begun: more asks add nothing.
    queued: Arc<std::sync::atomic::AtomicBool>,
}

/// The longest a listing for the memory may take.
const REFRESH_TIMEOUT: Duration = Duration::from_secs(30);

impl Memory {
    fn new(catalogues: Catalogues, key: String, server: String) -> Self {
        Self { catalogues, key, server, refreshing: Arc::default(), queued: Arc::default() }
    }

    /// Lists the server's tools and remembers them, in the background; asks made while one is
    /// waiting to begin are one ask.
    fn refresh_later(&self, peer: rmcp::service::Peer<RoleClient>) {
        use std::sync::atomic::Ordering;
        if self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        let memory = self.clone();
        tokio::spawn(async move {
            let _one = memory.refreshing.lock().await;
            memory.queued.store(false, Ordering::Release);
            match tokio::time::timeout(REFRESH_TIMEOUT, peer.list_all_tools()).await {
                Ok(Ok(tools)) => {
                    let tools: Vec<Value> =
                        tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
                    memory.catalogues.store(&memory.key, &tools);
                    tracing::debug!(server = %memory.server, tools = tools.len(), "MCP server's tools remembered");
                }
                Ok(Err(error)) => {
                    tracing::debug!(server = %memory.server, %error, "cannot list an MCP server's tools")
                }
                Err(_) => tracing::debug!(server = %memory.server, "listing an MCP server's tools timed out"),
            }
        });
    }
}

/// A mounted server: its manifest and runtime, ready for a toolbox.
pub struct Mounted {
    /// The tool (`mcp-NAME`), one API per mounted MCP tool, named `NAME__TOOL`.
    pub manifest: ToolManifest,
    /// Calls go to the server.
    pub runtime: Arc<dyn ToolRuntime>,
    /// The connection, for `mcp://` reads when its server opened its resources.
    connection: Arc<Connection>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted").field("identifier", &self.manifest.identifier).finish_non_exhaustive()
    }
}

/// The most lines of a server's stderr kept to explain a failure.
const STDERR_LINES: usize = 20;

type Client = RunningService<RoleClient, Progress>;

/// The client side of a connection: routes the server's progress notifications to the running
/// call whose token they carry, as that call's progress events.
#[derive(Clone, Default)]
struct Progress {
    sinks: Arc<Mutex<std::collections::HashMap<String, tool_core::ProgressSink>>>,
    /// Where the server's tools are remembered, refreshed when it says they changed.
    memory: Option<Memory>,
}

fn token_key(token: &rmcp::model::ProgressToken) -> String {
    serde_json::to_string(token).unwrap_or_default()
}

impl rmcp::ClientHandler for Progress {
    /// The server's tools changed: the new list is remembered (and declared from the next start;
    /// the running catalogue keeps the tools it declared, and a call of one the server no longer
    /// has fails with the server's answer).
    async fn on_tool_list_changed(&self, context: rmcp::service::NotificationContext<RoleClient>) {
        if let Some(memory) = &self.memory {
            tracing::info!(server = %memory.server, "an MCP server's tools changed; remembered for the next start");
            memory.refresh_later(context.peer);
        }
    }

    /// Toolhost by name, proposing the newest protocol version that has the `initialize`
    /// handshake this client performs (rmcp's newest has none, and servers of today answer it
    /// with an older one anyway).
    fn get_info(&self) -> rmcp::model::ClientConfig {
        rmcp::model::ClientConfig::new(
            rmcp::model::ClientCapabilities::default(),
            rmcp::model::Implementation::new("toolhost", env!("CARGO_PKG_VERSION")),
        )
        .with_protocol_version(rmcp::model::ProtocolVersion::LATEST_WITH_INITIALIZE)
    }

    async fn on_progress(
        &self,
        params: rmcp::model::ProgressNotificationParam,
        _context: rmcp::service::NotificationContext<RoleClient>,
    ) {
        let sink = self
            .sinks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&token_key(&params.progress_token))
            .cloned();
        if let Some(sink) = sink {
            let fraction =
                params.total.filter(|t| *t > 0.0).map(|t| (params.progress / t).clamp(0.0, 1.0) as f32);
            sink.send(tool_core::Progress { message: params.message, fraction, output: None });
        }
    }
}

/// A running server and how to start it again.
struct Connection {
    name: String,
    config: ServerConfig,
    env: Vec<(String, String)>,
    bearer: Option<String>,
    progress: Progress,
    /// A sandboxed stdio server's own temp folder (its `TMPDIR`), removed with the connection.
    temp: Option<tempfile::TempDir>,
    client: tokio::sync::Mutex<Option<Client>>,
    stderr: Arc<Mutex<VecDeque<String>>>,
    /// What the running server says of its tools (their tiers), listed once per start when a
    /// remembered declaration needs checking.
    live: tokio::sync::Mutex<Option<BTreeMap<String, Tier>>>,
}

impl Connection {
    /// The tier the running server (`peer`) now gives `tool`; `None` when it no longer has it.
    ///
    /// # Errors
    ///
    /// The server did not list its tools in time.
    async fn live_tier(
        &self,
        peer: &rmcp::service::Peer<RoleClient>,
        tool: &str,
    ) -> Result<Option<Tier>, String> {
        let mut live = self.live.lock().await;
        if live.is_none() {
            let timeout = Duration::from_secs(self.config.startup_timeout_secs);
            let tools = match tokio::time::timeout(timeout, peer.list_all_tools()).await {
                Ok(Ok(tools)) => tools,
                Ok(Err(error)) => return Err(self.redact(format!("cannot list its tools: {error}"))),
                Err(_) => return Err("did not list its tools in time".into()),
            };
            let tiers = tools
                .iter()
                .filter_map(|t| serde_json::to_value(t).ok())
                .filter_map(|t| Some((t.get("name")?.as_str()?.to_owned(), tier_of(&t))))
                .collect();
            *live = Some(tiers);
        }
        Ok(live.as_ref().and_then(|l| l.get(tool).copied()))
    }

    /// Starts the server unless it runs; a server started here has its tool list remembered
    /// anew.
    async fn ensure_started(&self) -> Result<(), String> {
        let mut guard = self.client.lock().await;
        if guard.as_ref().is_some_and(|c| !c.is_transport_closed()) {
            return Ok(());
        }
        let client = self.start().await?;
        self.remember(&client);
        *guard = Some(client);
        // A new process: what it says of its tools is listed again when needed.
        *self.live.lock().await = None;
        Ok(())
    }

    /// Lists a just-started server's tools in the background and remembers them.
    fn remember(&self, client: &Client) {
        if let Some(memory) = &self.progress.memory {
            memory.refresh_later(client.peer().clone());
        }
    }

    /// `text` without the server URL's query (an error of the HTTP client names the whole URL,
    /// and a query may carry a key).
    fn redact(&self, text: String) -> String {
        match &self.config.url {
            Some(full) if full.contains('?') => {
                text.replace(full.as_str(), full.split('?').next().unwrap_or_default())
            }
            _ => text,
        }
    }

    fn stderr_tail(&self) -> String {
        let lines = self.stderr.lock().unwrap_or_else(|p| p.into_inner());
        if lines.is_empty() {
            String::new()
        } else {
            format!("; its last stderr lines: {}", lines.iter().cloned().collect::<Vec<_>>().join(" | "))
        }
    }

    async fn start(&self) -> Result<Client, String> {
        let timeout = Duration::from_secs(self.config.startup_timeout_secs);
        if let Some(full) = &self.config.url {
            // Messages name the URL without its query (which may carry a key).
            let url = full.split('?').next().unwrap_or(full);
            use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
            let mut headers = std::collections::HashMap::new();
            for (name, value) in &self.config.headers {
                let name =
                    http::HeaderName::try_from(name.as_str()).map_err(|e| format!("header `{name}`: {e}"))?;
                let value = http::HeaderValue::try_from(value.as_str())
                    .map_err(|e| format!("header `{name}`: {e}"))?;
                headers.insert(name, value);
            }
            let mut config =
                StreamableHttpClientTransportConfig::with_uri(full.as_str()).custom_headers(headers);
            if let Some(token) = &self.bearer {
                config = config.auth_header(token.clone());
            }
            let transport = rmcp::transport::StreamableHttpClientTransport::from_config(config);
            return match tokio::time::timeout(timeout, self.progress.clone().serve(transport)).await {
                Ok(Ok(client)) => Ok(client),
                Ok(Err(error)) => {
                    Err(self.redact(format!("{url} did not complete the MCP handshake: {error}")))
                }
                Err(_) => Err(format!(
                    "{url} did not answer within {} s (startup_timeout_secs)",
                    self.config.startup_timeout_secs
                )),
            };
        }
        let mut command = tokio::process::Command::new(&self.config.command);
        command.args(&self.config.args).env_clear().kill_on_drop(true);
        // The host's huge-page policy, not the server's own (see `sandbox::huge_pages`).
        sandbox::huge_pages::restore(command.as_std_mut());
        // What a program needs to start, plus what the configuration gives it.
        for name in ["PATH", "HOME", "LANG", "TERM", "TMPDIR", "USER"] {
            if let Some(value) = std::env::var_os(name) {
                command.env(name, value);
            }
        }
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let cwd = match &self.config.cwd {
            Some(cwd) => cwd.clone(),
            None => std::env::current_dir().map_err(|e| format!("cannot find the current folder: {e}"))?,
        };
        let cwd = std::fs::canonicalize(&cwd)
            .map_err(|e| format!("cannot use the folder {}: {e}", cwd.display()))?;
        command.current_dir(&cwd);
        if self.config.sandbox != tool_core::SandboxMode::Off {
            // Third-party code: boxed in like the session's commands (Landlock, seccomp, a
            // read-only view of everything but its folder and temp folder, no network unless
            // configured).
            let temp = self.temp.as_ref().map(|t| t.path().to_owned());
            let policy =
                tool_core::SandboxPolicy { mode: self.config.sandbox, ..tool_core::SandboxPolicy::default() }
                    .with_network(self.config.network);
            let layout = sandbox::Layout {
                working_directory: cwd,
                temp_directory: temp.clone(),
                output_files: Vec::new(),
            };
            let prepared = sandbox::Sandbox::new(sandbox::SandboxSettings::default())
                .prepare(&policy, &layout)
                .map_err(|e| {
                    format!("cannot be sandboxed ({e}); set `sandbox = \"off\"` to run it unboxed")
                })?;
            prepared.install(command.as_std_mut());
            if let Some(temp) = temp {
                command.env("TMPDIR", temp);
            }
        }
        let (transport, stderr) = rmcp::transport::TokioChildProcess::builder(command)
            .stderr(std::process::Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start `{}`: {e}", self.config.command))?;
        let reader = stderr.map(|stderr| {
            let lines = self.stderr.clone();
            tokio::spawn(async move {
                let mut reader = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(mut line)) = reader.next_line().await {
                    if line.len() > 300 {
                        let mut cut = 300;
                        while !line.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        line.truncate(cut);
                        line.push('…');
                    }
                    let mut kept = lines.lock().unwrap_or_else(|p| p.into_inner());
                    if kept.len() == STDERR_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            })
        });
        match tokio::time::timeout(timeout, self.progress.clone().serve(transport)).await {
            Ok(Ok(client)) => Ok(client),
            Ok(Err(error)) => {
                // A server that failed has usually said why on stderr as it exited: that is read
                // to its end (briefly) before the failure is told.
                if let Some(reader) = reader {
                    let _ = tokio::time::timeout(Duration::from_secs(1), reader).await;
                }
                Err(format!("did not complete the MCP handshake: {error}{}", self.stderr_tail()))
            }
            Err(_) => Err(format!(
                "did not answer within {} s (startup_timeout_secs){}",
                self.config.startup_timeout_secs,
                self.stderr_tail()
            )),
        }
    }
}

/// Starts every enabled server of `config` at once and lists its tools; a server that fails is
/// reported with its reason and left out, never holding up the others. (Nothing is remembered:
/// [`mount_with`] remembers tool lists and starts servers lazily.)
pub async fn mount(
    config: &McpConfig,
    env: &dyn Fn(&str) -> Option<String>,
) -> (Vec<Mounted>, Vec<MountError>) {
    mount_with(config, env, &MountOptions::default()).await
}

/// [`mount`], with tool lists remembered in `options.catalogues`: a server whose list is
/// remembered is declared from it without waiting for the server, which starts on its first call
/// (`lazy`) or in the background now (`background`); the others start now, together, and their
/// lists are remembered.
pub async fn mount_with(
    config: &McpConfig,
    env: &dyn Fn(&str) -> Option<String>,
    options: &MountOptions,
) -> (Vec<Mounted>, Vec<MountError>) {
    let mut remembered = Vec::new();
    let mut pending = Vec::new();
    let mut errors = Vec::new();
    // A server none of whose tools may be mounted is not started at all.
    let usable = |s: &ServerConfig| s.trust != Trust::Deny || s.tools.values().any(|t| *t != Trust::Deny);
    for (name, server) in config.servers.iter().filter(|(_, s)| s.enabled && usable(s)) {
        let mut vars: Vec<(String, String)> =
            server.env.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        let mut missing = None;
        for (key, variable) in &server.env_from {
            match env(variable) {
                Some(value) => vars.push((key.clone(), value)),
                None => missing = Some(variable.clone()),
            }
        }
        let bearer = match &server.bearer_from {
            Some(variable) => match env(variable) {
                Some(token) => Some(token),
                None => {
                    missing = Some(variable.clone());
                    None
                }
            },
            None => None,
        };
        if let Some(variable) = missing {
            errors.push(MountError::MissingVariable { server: name.clone(), variable });
            continue;
        }
        // The tool list is remembered under what starts the server, credentials by name: no
        // value, not even hashed, is in a file name others may read.
        let key_vars = vars.clone();
        let key_bearer = bearer.clone();
        let plain = server;
        // Credentials by name, injected here and nowhere else.
        let mut server = server.clone();
        let lookup = |credential: &str| {
            let found = options.credentials.as_ref().and_then(|c| c.get(credential));
            if found.is_some()
                && let Some(credentials) = &options.credentials
            {
                credentials.note_use(credential, &format!("mcp {name}"));
            }
            found.ok_or_else(|| MountError::MissingCredential {
                server: name.clone(),
                credential: credential.to_owned(),
            })
        };
        let injected = (|| -> Result<Option<String>, MountError> {
            for (variable, credential) in &server.env_credentials {
                vars.push((variable.clone(), lookup(credential)?.expose().to_owned()));
            }
            for (header, credential) in &server.header_credentials {
                server.headers.insert(header.clone(), lookup(credential)?.expose().to_owned());
            }
            server.bearer_credential.as_deref().map(|c| lookup(c).map(|s| s.expose().to_owned())).transpose()
        })();
        let bearer = match injected {
            Ok(Some(token)) => Some(token),
            Ok(None) => bearer,
            Err(error) => {
                errors.push(error);
                continue;
            }
        };
        let server = &server;
        let memory = options.catalogues.as_ref().map(|catalogues| {
            Memory::new(
                catalogues.clone(),
                Catalogues::key(name, plain, &key_vars, key_bearer.as_deref()),
                name.clone(),
            )
        });
        let known = memory.as_ref().filter(|_| !options.fresh).and_then(|m| m.catalogues.load(&m.key));
        let connection = Arc::new(Connection {
            name: name.clone(),
            config: server.clone(),
            env: vars,
            bearer,
            progress: Progress { sinks: Arc::default(), memory },
            temp: (server.url.is_none() && server.sandbox != tool_core::SandboxMode::Off)
                .then(|| tempfile::Builder::new().prefix("toolhost-mcp-").tempdir().ok())
                .flatten(),
            client: tokio::sync::Mutex::new(None),
            stderr: Arc::default(),
            live: tokio::sync::Mutex::new(None),
        });
        // A remembered list that declares nothing (its tools all left out now) is no reason not
        // to start the server and list it again.
        if let Some(declared) = known.and_then(|tools| manifest_of(connection.clone(), &tools, true)) {
            if server.start == Start::Background {
                let early = connection.clone();
                tokio::spawn(async move {
                    if let Err(message) = early.ensure_started().await {
                        tracing::warn!(server = %early.name, %message, "MCP server did not start in the background");
                    }
                });
            }
            remembered.push(declared);
            continue;
        }
        pending.push(async move {
            let client = connection
                .start()
                .await
                .map_err(|message| MountError::Server { server: connection.name.clone(), message })?;
            let listing = Duration::from_secs(connection.config.startup_timeout_secs);
            let tools = match tokio::time::timeout(listing, client.list_all_tools()).await {
                Ok(Ok(tools)) => tools,
                Ok(Err(e)) => {
                    return Err(MountError::Server {
                        server: connection.name.clone(),
                        message: format!("cannot list its tools: {e}"),
                    });
                }
                Err(_) => {
                    return Err(MountError::Server {
                        server: connection.name.clone(),
                        message: format!(
                            "did not list its tools within {} s (startup_timeout_secs)",
                            connection.config.startup_timeout_secs
                        ),
                    });
                }
            };
            let tools: Vec<Value> = tools.iter().filter_map(|t| serde_json::to_value(t).ok()).collect();
            if let Some(memory) = &connection.progress.memory {
                memory.catalogues.store(&memory.key, &tools);
            }
            *connection.client.lock().await = Some(client);
            Ok(manifest_of(connection, &tools, false))
        });
    }
    let mut mounted = remembered;
    for result in futures::future::join_all(pending).await {
        match result {
            Ok(Some(one)) => mounted.push(one),
            Ok(None) => {}
            Err(error) => errors.push(error),
        }
    }
    // Only a server that mounted, and whose configuration opens its resources, is readable.
    if let Some(resources) = &options.resources {
        for one in mounted.iter().filter(|m| m.connection.config.resources) {
            resources.add(one.connection.clone());
        }
    }
    (mounted, errors)
}

/// The name the model calls: `server__tool`, in the characters every provider accepts, at most
/// 64 characters (a long one keeps its end unique with a hash).
pub fn function_name(server: &str, tool: &str) -> String {
    tool_core::naming::mounted_name(server, tool)
}

/// A server's input schema made fit for every provider and the validator: local `$ref`s inlined
/// (cycles cut to an object), references elsewhere dropped (nothing is fetched), `const` as a
/// one-value `enum`, missing types inferred (`properties` → object, `items` → array, an `enum` of
/// strings → string), and an object at the root.
pub fn sanitise(schema: &Value) -> Value {
    /// One schema node; only schema positions are entered (never `enum`, `default` or
    /// `examples` values, nor the names in `properties`).
    fn visit(node: &mut Value) {
        let Value::Object(map) = node else { return };
        map.remove("$ref");
        if let Some(value) = map.remove("const") {
            map.entry("enum").or_insert_with(|| Value::Array(vec![value]));
        }
        if !map.contains_key("type") && !map.contains_key("anyOf") && !map.contains_key("oneOf") {
            let inferred = if map.contains_key("properties") {
                Some("object")
            } else if map.contains_key("items") {
                Some("array")
            } else if map
                .get("enum")
                .and_then(Value::as_array)
                .is_some_and(|v| v.iter().all(Value::is_string))
            {
                Some("string")
            } else {
                None
            };
            if let Some(kind) = inferred {
                map.insert("type".into(), kind.into());
            }
        }
        for key in ["properties", "patternProperties", "$defs", "definitions"] {
            if let Some(Value::Object(children)) = map.get_mut(key) {
                children.values_mut().for_each(visit);
            }
        }
        for key in ["items", "additionalProperties", "not", "if", "then", "else", "contains"] {
            match map.get_mut(key) {
                Some(Value::Array(children)) => children.iter_mut().for_each(visit),
                Some(child @ Value::Object(_)) => visit(child),
                _ => {}
            }
        }
        for key in ["anyOf", "oneOf", "allOf", "prefixItems"] {
            if let Some(Value::Array(children)) = map.get_mut(key) {
                children.iter_mut().for_each(visit);
            }
        }
    }
    let any = json!({});
    let mut out = tool_core::provider::inline_refs(if schema.is_object() { schema } else { &any });
    visit(&mut out);
    if out.get("type").is_none() {
        out["type"] = "object".into();
    }
    out
}

/// The manifest of a server's tools (those its configuration lets in); `None` when none is left.
/// `remembered`: the list is the one remembered from an earlier run, which the server may have
/// changed since.
fn manifest_of(connection: Arc<Connection>, tools: &[Value], remembered: bool) -> Option<Mounted> {
    let config = &connection.config;
    let mut manifest = ToolManifest::new(
        format!("mcp-{}", connection.name),
        ToolMeta::new(
            format!("MCP server {}", connection.name),
            format!("Tools of the MCP server `{}`", connection.name),
        ),
    )
    // Declared while a session's tools are few; past its threshold, found through tool search.
    .exposure(tool_core::Exposure::Auto);
    let mut names = BTreeMap::new();
    let mut tiers = BTreeMap::new();
    for tool in tools {
        let Some(name) = tool.get("name").and_then(Value::as_str) else { continue };
        if config.deny.iter().any(|d| d == name)
            || (!config.allow.is_empty() && !config.allow.iter().any(|a| a == name))
        {
            continue;
        }
        let trust = config.tools.get(name).copied().unwrap_or(config.trust);
        let intervention = match trust {
            Trust::Deny => continue,
            Trust::Auto => Intervention::Never,
            Trust::Ask => Intervention::Always,
        };
        let annotations = tool.get("annotations").cloned().unwrap_or(Value::Null);
        let hint = |key: &str| annotations.get(key).and_then(Value::as_bool);
        let tier = tier_of(tool);
        tiers.insert(name.to_owned(), tier);
        let mut api_name = function_name(&connection.name, name);
        let mut n = 2;
        while names.contains_key(&api_name) {
            // Two tools whose names clean to the same one: the later gets a number.
            let suffix = format!("_{n}");
            api_name = format!("{}{suffix}", &api_name[..api_name.len().min(64 - suffix.len())]);
            n += 1;
        }
        names.insert(api_name.clone(), name.to_owned());
        let description = tool.get("description").and_then(Value::as_str).unwrap_or_default();
        let parameters = sanitise(tool.get("inputSchema").unwrap_or(&json!({})));
        let mut spec = ApiSpec {
            name: api_name,
            description: format!("{description} (MCP server `{}`)", connection.name),
            parameters,
            default_timeout_ms: config.call_timeout_secs.map(|s| s * 1000),
            max_timeout_ms: None,
            intervention: Some(InterventionPolicy::Fixed(intervention)),
            tier: tool_core::TierSpec::Fixed(tier),
            execution: if config.parallel {
                tool_core::ExecutionMode::Parallel
            } else {
                tool_core::ExecutionMode::Sequential
            },
            display: tool_core::DisplayControl::default(),
            path_params: Vec::new(),
            command_param: None,
            open_world: hint("openWorldHint").unwrap_or(true),
            output_schema: tool.get("outputSchema").filter(|s| s.is_object()).cloned(),
            annotations: Some(annotations.clone()).filter(Value::is_object),
            previewable: false,
            when_previewing: false,
            asks_person: false,
        };
        if spec.open_world {
            spec = spec.open_world();
        }
        manifest.apis.push(spec);
    }
    if manifest.apis.is_empty() {
        return None;
    }
    Some(Mounted {
        manifest,
        runtime: Arc::new(McpRuntime { connection: connection.clone(), names, tiers, remembered }),
        connection,
    })
}

/// A tool's tier from what the server says of it: read only when it says read-only, write when it
/// says it destroys nothing, exec otherwise (its hints are claims, never trusted upward).
fn tier_of(tool: &Value) -> Tier {
    let hint = |key: &str| tool.get("annotations").and_then(|a| a.get(key)).and_then(Value::as_bool);
    match (hint("readOnlyHint"), hint("destructiveHint")) {
        (Some(true), _) => Tier::Read,
        (_, Some(false)) => Tier::Write,
        _ => Tier::Exec,
    }
}

/// Calls go to the server; a server that died is started again once per call.
struct McpRuntime {
    connection: Arc<Connection>,
    /// API name → the server's own tool name.
    names: BTreeMap<String, String>,
    /// The server's tool name → the tier it was declared with.
    tiers: BTreeMap<String, Tier>,
    /// Declared from a remembered list: before a tool declared below exec runs, the running
    /// server must still say as much of it.
    remembered: bool,
}

impl McpRuntime {
    async fn call(&self, tool: &str, arguments: Value, context: &CallContext) -> ToolOutput {
        let connection = &self.connection;
        let arguments = match arguments {
            Value::Object(map) => map,
            _ => serde_json::Map::new(),
        };
        let cancelled = || {
            ToolOutput::error(
                ErrorKind::Cancelled,
                format!("cancelled while `{tool}` waited for the MCP server `{}`", connection.name),
            )
        };
        let mut restarted = false;
        loop {
            let running = {
                let guard = tokio::select! {
                    guard = connection.client.lock() => guard,
                    () = context.cancel.cancelled() => return cancelled(),
                };
                guard.as_ref().filter(|c| !c.is_transport_closed()).map(|c| c.peer().clone())
            };
            let Some(peer) = running else {
                if restarted {
                    return ToolOutput::error(
                        ErrorKind::Execution,
                        format!(
                            "the MCP server `{}` stopped and did not come back{}",
                            connection.name,
                            connection.stderr_tail()
                        ),
                    );
                }
                restarted = true;
                // Started in a task of its own, bounded by the server's startup timeout rather
                // than this call's: a call that gives up does not abort the start for the next.
                let starting = tokio::spawn({
                    let connection = connection.clone();
                    async move { connection.ensure_started().await }
                });
                let started = tokio::select! {
                    started = starting => started,
                    () = context.cancel.cancelled() => return cancelled(),
                };
                match started {
                    Ok(Ok(())) => continue,
                    Ok(Err(message)) => {
                        return ToolOutput::error(
                            ErrorKind::Execution,
                            format!("the MCP server `{}` is not running: {message}", connection.name),
                        );
                    }
                    Err(error) => {
                        return ToolOutput::error(
                            ErrorKind::Internal,
                            format!("starting the MCP server `{}` failed: {error}", connection.name),
                        );
                    }
                }
            };
            // A tool declared from a remembered list as less than exec runs only if the running
            // server still says so: a server updated since could have made it write or destroy,
            // and read-only sessions (and the journal) trust the declared tier.
            if let Some(declared) = self.tiers.get(tool).filter(|t| self.remembered && **t < Tier::Exec) {
                let refused = match connection.live_tier(&peer, tool).await {
                    Ok(Some(live)) if live <= *declared => None,
                    Ok(Some(_)) => Some(format!(
                        "the MCP server `{}` no longer says `{tool}` is {} only (its tools changed since they were remembered); it was not run, and a restart declares its current tools",
                        connection.name,
                        if *declared == Tier::Read { "read" } else { "non-destructive" }
                    )),
                    Ok(None) => Some(format!(
                        "the MCP server `{}` no longer offers `{tool}`; a restart declares its current tools",
                        connection.name
                    )),
                    Err(message) => Some(format!(
                        "the MCP server `{}` could not confirm what `{tool}` does ({message}); it was not run",
                        connection.name
                    )),
                };
                if let Some(message) = refused {
                    return ToolOutput::error(ErrorKind::Execution, message);
                }
            }
            let params = CallToolRequestParams::new(tool.to_owned()).with_arguments(arguments.clone());
            let request =
                rmcp::model::ClientRequest::CallToolRequest(rmcp::model::CallToolRequest::new(params));
            let handle = match peer
                .send_request_with_option(request, rmcp::service::PeerRequestOptions::no_options())
                .await
            {
                Ok(handle) => handle,
                Err(error) if !restarted && peer.is_transport_closed() => {
                    let error = connection.redact(error.to_string());
                    tracing::warn!(server = %connection.name, %error, "MCP server went away; starting it again");
                    continue;
                }
                Err(error) => {
                    return ToolOutput::error(
                        ErrorKind::Execution,
                        connection.redact(format!(
                            "the MCP server `{}` failed on `{tool}`: {error}{}",
                            connection.name,
                            connection.stderr_tail()
                        )),
                    );
                }
            };
            // The server's progress notifications for this call (rmcp gave it its token) become
            // the call's progress events.
            let key = token_key(&handle.progress_token);
            let request_id = handle.id.clone();
            connection
                .progress
                .sinks
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(key.clone(), context.progress.clone());
            let result = tokio::select! {
                result = handle.await_response() => Some(result),
                () = context.cancel.cancelled() => None,
            };
            connection.progress.sinks.lock().unwrap_or_else(|p| p.into_inner()).remove(&key);
            let Some(result) = result else {
                // Tell the server, so it can stop the work.
                let _ = peer
                    .notify_cancelled(rmcp::model::CancelledNotificationParam::new(
                        Some(request_id),
                        Some("cancelled by the person or the deadline".into()),
                    ))
                    .await;
                return ToolOutput::error(
                    ErrorKind::Cancelled,
                    format!("cancelled while `{tool}` ran on the MCP server `{}`", connection.name),
                );
            };
            let result = result.and_then(|response| match response {
                rmcp::model::ServerResult::CallToolResult(result) => Ok(result),
                _ => Err(rmcp::ServiceError::UnexpectedResponse),
            });
            return match result {
                Ok(result) => {
                    output_of(&connection.name, tool, &serde_json::to_value(&result).unwrap_or(Value::Null))
                }
                // Sent, then the server went away: it may have done the work, so the call is not
                // sent again (the next call starts the server anew).
                Err(error) if peer.is_transport_closed() => ToolOutput::error(
                    ErrorKind::Execution,
                    connection.redact(format!(
                        "the MCP server `{}` stopped during `{tool}` ({error}); whether it did the work is unknown{}",
                        connection.name,
                        connection.stderr_tail()
                    )),
                ),
                Err(error) => ToolOutput::error(
                    ErrorKind::Execution,
                    connection.redact(format!(
                        "the MCP server `{}` failed on `{tool}`: {error}{}",
                        connection.name,
                        connection.stderr_tail()
                    )),
                ),
            };
        }
    }
}

impl ToolRuntime for McpRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match self.names.get(api) {
                Some(tool) => self.call(tool, arguments, context).await,
                None => ToolOutput::error(
                    ErrorKind::InvalidArguments,
                    format!("no tool `{api}` on this MCP server"),
                ),
            }
        })
    }
}

/// The text a model reads of a result's content blocks: text as it is, an embedded text
/// resource's text under its address, and a line that says what any other block is (an image, a
/// sound, a link to a resource); the blocks themselves stay in the state, and Toolhost's MCP face
/// passes them on as they came.
pub fn model_text(blocks: &[Value]) -> String {
    let text = |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
    let size = |block: &Value| {
        let length = block.get("data").and_then(Value::as_str).map_or(0, str::len);
        computer_runtime::format::size((length / 4 * 3) as u64)
    };
    let mut texts = Vec::new();
    for block in blocks {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => texts.push(text(block, "text")),
            Some(kind @ ("image" | "audio")) => {
                texts.push(format!("[{kind} {}, {}]", text(block, "mimeType"), size(block)));
            }
            Some("resource_link") => {
                let name = text(block, "name");
                texts.push(format!(
                    "[resource link: {} {}]",
                    if name.is_empty() { "-" } else { &name },
                    text(block, "uri")
                ));
            }
            Some("resource") => {
                let resource = block.get("resource").cloned().unwrap_or(Value::Null);
                let uri = text(&resource, "uri");
                match resource.get("text").and_then(Value::as_str) {
                    Some(body) => texts.push(format!("[resource {uri}]\n{body}")),
                    None => texts.push(format!("[resource {uri}, {} binary]", text(&resource, "mimeType"))),
                }
            }
            Some(kind) => texts.push(format!("[{kind} content]")),
            None => {}
        }
    }
    texts.join("\n")
}

/// A `tools/call` result as Toolhost output: [`model_text`] as the content the model reads,
/// `isError` as failure, everything in the state.
fn output_of(server: &str, tool: &str, result: &Value) -> ToolOutput {
    let blocks = result.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
    let mut content = model_text(&blocks);
    if content.is_empty()
        && let Some(structured) = result.get("structuredContent").filter(|v| !v.is_null())
    {
        content = structured.to_string();
    }
    let state = json!({
        "type": "mcp",
        "server": server,
        "tool": tool,
        "content": result.get("content").cloned().unwrap_or(Value::Null),
        "structured_content": result.get("structuredContent").cloned().unwrap_or(Value::Null),
    });
    let failed = result.get("isError").and_then(Value::as_bool).unwrap_or(false);
    let output =
        if failed { ToolOutput::error(ErrorKind::Execution, content) } else { ToolOutput::ok(content) };
    output.with_state(state)
}

/// What mounting a configuration file did.
#[derive(Debug, Default)]
pub struct FileMount {
    /// The tools added (`mcp-NAME`).
    pub tools: Vec<String>,
    /// What to tell the operator: servers not mounted and why, schemas replaced.
    pub notes: Vec<String>,
}

/// Reads a configuration file, mounts its servers ([`mount_with`]) with variables from this
/// process's environment, and adds them to `toolbox` ([`add_to`]).
///
/// # Errors
///
/// An unreadable or invalid file, or a tool identifier already in the toolbox.
pub async fn mount_file(
    path: &std::path::Path,
    toolbox: &mut tool_executor::Toolbox,
    options: &MountOptions,
) -> Result<FileMount, MountError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| MountError::Config(format!("cannot read {}: {e}", path.display())))?;
    let config =
        McpConfig::parse(&text).map_err(|e| MountError::Config(format!("{}: {e}", path.display())))?;
    let (mounted, errors) = mount_with(&config, &|name| std::env::var(name).ok(), options).await;
    let mut report = FileMount {
        tools: mounted.iter().map(|m| m.manifest.identifier.clone()).collect(),
        notes: errors.iter().map(|e| format!("not mounted: {e}")).collect(),
    };
    report.notes.extend(add_to(toolbox, mounted).map_err(|e| MountError::Config(e.to_string()))?);
    Ok(report)
}

/// A schema that accepts any object (and says so, so it is never made strict).
fn open_object() -> Value {
    json!({ "type": "object", "additionalProperties": true })
}

/// Adds mounted servers to a toolbox ([`add_parts`]).
///
/// # Errors
///
/// A tool identifier that is already in the toolbox.
pub fn add_to(
    toolbox: &mut tool_executor::Toolbox,
    mounted: Vec<Mounted>,
) -> Result<Vec<String>, tool_executor::ToolboxError> {
    add_parts(toolbox, mounted.into_iter().map(|m| (m.manifest, m.runtime)).collect())
}

/// Adds mounted tools (MCP servers, OpenAPI services) to a toolbox. An API whose input schema
/// the validator refuses is kept with a schema that accepts any object (the far side still
/// checks its own arguments), and said.
///
/// # Errors
///
/// A tool identifier that is already in the toolbox.
pub fn add_parts(
    toolbox: &mut tool_executor::Toolbox,
    parts: Vec<(ToolManifest, Arc<dyn ToolRuntime>)>,
) -> Result<Vec<String>, tool_executor::ToolboxError> {
    let mut notes = Vec::new();
    for (mut manifest, runtime) in parts {
        // Each pass replaces one refused schema; there are no more passes than APIs.
        for _ in 0..=manifest.apis.len() {
            match toolbox.add_tool(manifest.clone(), runtime.clone()) {
                Ok(()) => break,
                Err(tool_executor::ToolboxError::Schema { api, message, .. }) => {
                    let open = open_object();
                    let Some(spec) = manifest.apis.iter_mut().find(|a| a.name == api && a.parameters != open)
                    else {
                        break;
                    };
                    notes.push(format!(
                        "{api}: its input schema is not valid ({message}); any object is accepted"
                    ));
                    spec.parameters = open;
                }
                Err(other) => return Err(other),
            }
        }
    }
    Ok(notes)
}
