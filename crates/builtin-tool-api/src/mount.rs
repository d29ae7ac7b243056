//! OpenAPI services mounted as tools: each `[apis.NAME]` table of the mount file (the file that
//! mounts MCP servers) becomes the tool `api-NAME`, one function `NAME__operation` per operation
//! of its document, so every call passes the one pipeline — approvals by tier and trust, the
//! journal, redaction — like a builtin tool's.
//!
//! ```toml
//! [apis.petstore]
//! openapi = "petstore.yaml"              # a file (beside the mount file) or an http(s) URL
//! base_url = "https://api.example/v1"    # default: the document's first server
//! credential = "petstore"                # applied where the document's security scheme says
//! # auth = { in = "header", name = "X-API-Key" }  # or query, cookie, bearer, basic: overrides
//! include = ["listPets", "showPetById"]  # only these operations (operationId or name)
//! exclude = ["deletePet"]
//! trust = "ask"                          # auto | ask | deny for every operation; default: by tier
//! operations = { createPets = "auto" }   # per operation
//! allow_hosts = ["127.0.0.1"]            # private addresses it may reach (refused by default)
//! timeout_secs = 30
//! max_response_kib = 1024
//! exposure = "auto"                      # auto | deferred | direct (default: deferred from 200)
//! ```
//!
//! Requests go through `safe-fetch`: a private, loopback or metadata address is refused unless
//! the operator allows its host, each redirect is checked again, and credentials are dropped on a
//! redirect to another origin. A credential is looked up by name when the API is mounted and
//! added only to the request that leaves; the pipeline redacts its value from everything.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use safe_fetch::{AllowList, FetchError, Fetcher, Limits, Policy, Url};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use tool_core::{
    ApiSpec, CallContext, ErrorKind, Exposure, Intervention, InterventionPolicy, Tier, ToolManifest,
    ToolMeta, ToolOutput, ToolRuntime,
};

use crate::document::{
    self, ApiDocument, KeyLocation, Method, Operation, ParamLocation, ParamStyle, SecurityScheme,
};

/// How much an operation is trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trust {
    /// Runs without asking (the session's deny list and read-only mode still apply).
    Auto,
    /// Asks a person before every call, in every mode (headless sessions block it).
    Ask,
    /// Never mounted.
    Deny,
}

/// Where a credential goes, when the table says so instead of the document.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthOverride {
    /// `header`, `query`, `cookie`, `bearer` or `basic` (the credential is `user:password`).
    #[serde(rename = "in")]
    pub location: String,
    /// The header, parameter or cookie name (for `header`, `query` and `cookie`).
    #[serde(default)]
    pub name: Option<String>,
}

impl AuthOverride {
    fn scheme(&self) -> Result<SecurityScheme, String> {
        let named = |location| {
            self.name
                .clone()
                .filter(|n| !n.is_empty())
                .map(|name| SecurityScheme::ApiKey { location, name })
                .ok_or_else(|| format!("auth `in = \"{}\"` needs a `name`", self.location))
        };
        match self.location.as_str() {
            "header" => named(KeyLocation::Header),
            "query" => named(KeyLocation::Query),
            "cookie" => named(KeyLocation::Cookie),
            "bearer" => Ok(SecurityScheme::Bearer),
            "basic" => Ok(SecurityScheme::Basic),
            other => Err(format!("auth `in = \"{other}\"`: use header, query, cookie, bearer or basic")),
        }
    }
}

/// How an API's functions are declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExposureSetting {
    /// Declared while the session's tools are few, found through tool search past its threshold.
    Auto,
    /// Found through tool search only.
    Deferred,
    /// Always declared.
    Direct,
}

/// One `[apis.NAME]` table.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiConfig {
    /// The document: a file (relative to the mount file's folder) or an `http(s)` URL.
    pub openapi: String,
    /// The base URL of requests (default: the document's first server).
    #[serde(default)]
    pub base_url: Option<String>,
    /// The credential applied to requests.
    #[serde(default)]
    pub credential: Option<String>,
    /// Where the credential goes, overriding the document's security schemes.
    #[serde(default)]
    pub auth: Option<AuthOverride>,
    /// Only these operations (by `operationId` or function name); all when empty.
    #[serde(default)]
    pub include: Vec<String>,
    /// Never these operations.
    #[serde(default)]
    pub exclude: Vec<String>,
    /// The trust of every operation (default: by tier — a read runs, any other method asks as the
    /// session's mode says).
    #[serde(default)]
    pub trust: Option<Trust>,
    /// The trust of single operations, overriding `trust`.
    #[serde(default)]
    pub operations: BTreeMap<String, Trust>,
    /// Hosts (names, addresses or networks) it may reach at private addresses.
    #[serde(default)]
    pub allow_hosts: Vec<String>,
    /// The time one call may take.
    #[serde(default = "thirty")]
    pub timeout_secs: u64,
    /// The most of a response read.
    #[serde(default = "one_mib")]
    pub max_response_kib: usize,
    /// How its functions are declared.
    #[serde(default)]
    pub exposure: Option<ExposureSetting>,
    /// Mounted at all.
    #[serde(default = "yes")]
    pub enabled: bool,
}

fn thirty() -> u64 {
    30
}

fn one_mib() -> usize {
    1024
}

fn yes() -> bool {
    true
}

/// From this many operations an API is found through tool search rather than declared.
pub const DEFERRED_FROM: usize = 200;

/// The largest document read.
const MAX_DOCUMENT_BYTES: usize = 20 * 1024 * 1024;

/// Why an API was not mounted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MountError {
    /// The mount file is not valid.
    #[error("the mount file is not valid: {0}")]
    Config(String),
    /// One API could not be mounted.
    #[error("API `{api}`: {message}")]
    Api {
        /// Its name.
        api: String,
        /// Why.
        message: String,
    },
}

/// What a mount needs from the front end.
#[derive(Debug, Clone, Default)]
pub struct MountOptions {
    /// The credentials tables name.
    pub credentials: Option<credentials::Credentials>,
    /// The folder relative document paths are read from (the mount file's).
    pub base_dir: Option<PathBuf>,
}

/// A mounted API: its manifest and runtime, ready for a toolbox.
pub struct Mounted {
    /// The tool (`api-NAME`), one API per operation, named `NAME__operation`.
    pub manifest: ToolManifest,
    /// Calls become requests.
    pub runtime: Arc<dyn ToolRuntime>,
    /// What reading its document simplified or left out (an external `$ref`, a cycle cut, an
    /// operation skipped), to tell the person who mounted it.
    pub notes: Vec<String>,
}

impl std::fmt::Debug for Mounted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mounted").field("identifier", &self.manifest.identifier).finish_non_exhaustive()
    }
}

/// Reads the `[apis]` tables of a mount file's text (its other tables are left alone).
///
/// # Errors
///
/// Invalid TOML, or an `[apis.NAME]` table with an unknown field or a bad name.
pub fn parse_config(text: &str) -> Result<BTreeMap<String, ApiConfig>, MountError> {
    let table: toml::Table = toml::from_str(text).map_err(|e| MountError::Config(e.to_string()))?;
    let Some(apis) = table.get("apis") else { return Ok(BTreeMap::new()) };
    let apis: BTreeMap<String, ApiConfig> =
        apis.clone().try_into().map_err(|e: toml::de::Error| MountError::Config(format!("[apis]: {e}")))?;
    for name in apis.keys() {
        let ok = (1..=32).contains(&name.len())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
        if !ok {
            return Err(MountError::Config(format!(
                "[apis.{name}]: a name is 1 to 32 letters, digits, `_` or `-`"
            )));
        }
    }
    Ok(apis)
}

/// Mounts every enabled API of a mount file; an API that fails is reported and left out.
///
/// # Errors
///
/// An unreadable or invalid file.
pub async fn mount_file(
    path: &Path,
    options: &MountOptions,
) -> Result<(Vec<Mounted>, Vec<MountError>), MountError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| MountError::Config(format!("cannot read {}: {e}", path.display())))?;
    let apis = parse_config(&text).map_err(|e| MountError::Config(format!("{}: {e}", path.display())))?;
    let options = MountOptions {
        base_dir: options.base_dir.clone().or_else(|| path.parent().map(Path::to_owned)),
        ..options.clone()
    };
    Ok(mount(&apis, &options).await)
}

/// Mounts APIs, all at once; an API that fails is reported and left out.
pub async fn mount(
    apis: &BTreeMap<String, ApiConfig>,
    options: &MountOptions,
) -> (Vec<Mounted>, Vec<MountError>) {
    let pending = apis.iter().filter(|(_, c)| c.enabled).map(|(name, config)| async move {
        mount_one(name, config, options)
            .await
            .map_err(|message| MountError::Api { api: name.clone(), message })
    });
    let mut mounted = Vec::new();
    let mut errors = Vec::new();
    for result in futures::future::join_all(pending).await {
        match result {
            Ok(Some(one)) => mounted.push(one),
            Ok(None) => {}
            Err(error) => errors.push(error),
        }
    }
    (mounted, errors)
}

fn fetcher(config: &ApiConfig, max_body_bytes: usize) -> Result<Fetcher, String> {
    let allow = AllowList::parse(&config.allow_hosts).map_err(|e| format!("allow_hosts: {e}"))?;
    let limits = Limits {
        max_body_bytes,
        total_time: Duration::from_secs(config.timeout_secs.max(1)),
        ..Limits::default()
    };
    Fetcher::new(
        Policy::new(allow).with_hint("add the host to the API's `allow_hosts` in the mount file to allow it"),
        limits,
    )
    .map_err(|e| e.to_string())
}

/// Reads the document (a file or a URL); returns its text and the URL it came from, if any.
async fn read_document(config: &ApiConfig, options: &MountOptions) -> Result<(String, Option<Url>), String> {
    if config.openapi.starts_with("http://") || config.openapi.starts_with("https://") {
        let fetcher = fetcher(config, MAX_DOCUMENT_BYTES)?;
        let response = fetcher.get(&config.openapi).await.map_err(|e| e.to_string())?;
        if !response.status.is_success() {
            return Err(format!("{} answered {}", response.url, response.status));
        }
        let text =
            String::from_utf8(response.body.to_vec()).map_err(|_| "the document is not UTF-8".to_owned())?;
        return Ok((text, Some(response.url)));
    }
    let path = Path::new(&config.openapi);
    let path = match &options.base_dir {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_owned(),
    };
    let metadata = std::fs::metadata(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if metadata.len() > MAX_DOCUMENT_BYTES as u64 {
        return Err(format!("{} is larger than 20 MiB", path.display()));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    Ok((text, None))
}

/// The base URL: the table's, else the operation's or document's first server (resolved against
/// the document's URL when relative).
fn base_url(given: Option<&str>, servers: &[String], document_url: Option<&Url>) -> Result<Url, String> {
    // A document without servers is served from `/` of where it came from (OpenAPI 3).
    let text = match (given, servers.first()) {
        (Some(given), _) => given,
        (None, Some(server)) => server.as_str(),
        (None, None) if document_url.is_some() => "/",
        (None, None) => return Err("the document names no server: set `base_url`".into()),
    };
    let url = match Url::parse(text) {
        Ok(url) => url,
        Err(_) => match document_url {
            Some(document) => document.join(text).map_err(|e| format!("base URL `{text}`: {e}"))?,
            None => return Err(format!("the server `{text}` is relative: set `base_url`")),
        },
    };
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("base URL `{url}` is not http(s)"));
    }
    Ok(url)
}

/// Where the credential goes for `operation`: the table's override, else the first alternative of
/// the operation's requirement that one credential satisfies (a document that requires nothing
/// anywhere but has one scheme: that scheme).
fn scheme_for(
    document: &ApiDocument,
    operation: &Operation,
    forced: Option<&SecurityScheme>,
) -> Option<SecurityScheme> {
    if let Some(forced) = forced {
        return Some(forced.clone());
    }
    match &operation.security {
        Some(alternatives) => alternatives
            .iter()
            .filter(|all| all.len() == 1)
            .find_map(|all| document.security_schemes.get(&all[0]).cloned()),
        None if document.security_schemes.len() == 1 => document.security_schemes.values().next().cloned(),
        None => None,
    }
}

async fn mount_one(
    name: &str,
    config: &ApiConfig,
    options: &MountOptions,
) -> Result<Option<Mounted>, String> {
    let secret = match &config.credential {
        Some(credential) => {
            let held = options.credentials.as_ref().and_then(|c| c.get(credential)).ok_or_else(|| {
                format!(
                    "no credential `{credential}` (add it with `toolhost creds set {credential}`, or the server operator's credentials)"
                )
            })?;
            if let Some(credentials) = &options.credentials {
                credentials.note_use(credential, &format!("api {name}"));
            }
            Some(held)
        }
        None => None,
    };
    let forced = config.auth.as_ref().map(AuthOverride::scheme).transpose()?;
    let (text, document_url) = read_document(config, options).await?;
    let document = document::parse(&text).map_err(|e| e.to_string())?;
    // Where the credential may go: the table's base URL, or the first server of a document the
    // operator keeps as a file. A document fetched from a URL could name any server, so with a
    // credential it needs `base_url`.
    let credential_origin = match (&secret, &config.base_url, &document_url) {
        (None, _, _) => None,
        (Some(_), None, Some(_)) => {
            return Err(
                "a document fetched from a URL decides its servers: with a credential, set `base_url`, \
                        the only place the credential is sent"
                    .into(),
            );
        }
        (Some(_), given, _) => {
            let base = base_url(given.as_deref(), &document.servers, document_url.as_ref())?;
            let host = base.host_str().unwrap_or_default();
            let loopback = host == "localhost"
                || host.trim_matches(['[', ']']).parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
            let allowed = AllowList::parse(&config.allow_hosts)
                .map_err(|e| format!("allow_hosts: {e}"))?
                .allows_host(host);
            if base.scheme() == "http" && !loopback && !allowed {
                return Err(format!(
                    "the credential would cross the network in clear text to {}: use https, or name the host in \
                     `allow_hosts` to accept it",
                    base.origin().ascii_serialization()
                ));
            }
            Some(base.origin())
        }
    };
    let fetcher = Arc::new(fetcher(config, config.max_response_kib.max(1) * 1024)?);
    let mut operations = HashMap::new();
    let mut specs = Vec::new();
    let mut notes: Vec<String> = document.notes.iter().map(|note| format!("API `{name}`: {note}")).collect();
    let listed = |list: &[String], op: &Operation| {
        list.iter().any(|x| Some(x.as_str()) == op.operation_id.as_deref() || *x == op.name)
    };
    for operation in &document.operations {
        if listed(&config.exclude, operation)
            || (!config.include.is_empty() && !listed(&config.include, operation))
        {
            continue;
        }
        let trust = config
            .operations
            .iter()
            .find(|(key, _)| {
                Some(key.as_str()) == operation.operation_id.as_deref() || **key == operation.name
            })
            .map(|(_, trust)| *trust)
            .or(config.trust);
        // By tier unless the table says: a read runs, a write asks as the session's mode says.
        let intervention = match trust {
            Some(Trust::Deny) => continue,
            Some(Trust::Auto) => Intervention::Never,
            Some(Trust::Ask) => Intervention::Always,
            None if operation.method.is_read() => Intervention::Never,
            None => Intervention::Required,
        };
        let base = base_url(
            config.base_url.as_deref(),
            if operation.servers.is_empty() { &document.servers } else { &operation.servers },
            document_url.as_ref(),
        )?;
        let function = tool_core::naming::mounted_name(name, &operation.name);
        let mut description =
            format!("{} ({} {}", operation.description, operation.method.as_str(), operation.path);
        if operation.deprecated {
            description.push_str(", deprecated");
        }
        description.push_str(&format!("; API `{name}`)"));
        let spec = ApiSpec {
            name: function.clone(),
            description,
            parameters: operation.input_schema.clone(),
            default_timeout_ms: Some(config.timeout_secs.max(1) * 1000),
            max_timeout_ms: None,
            intervention: Some(InterventionPolicy::Fixed(intervention)),
            tier: tool_core::TierSpec::Fixed(if operation.method.is_read() {
                Tier::Read
            } else {
                Tier::Write
            }),
            execution: tool_core::ExecutionMode::Parallel,
            display: tool_core::DisplayControl::default(),
            path_params: Vec::new(),
            command_param: None,
            open_world: true,
            output_schema: None,
            annotations: None,
            previewable: false,
            when_previewing: false,
            asks_person: false,
        };
        // An operation served elsewhere (its own `servers`) does not get the credential.
        let scheme = match &credential_origin {
            Some(origin) if base.origin() == *origin => scheme_for(&document, operation, forced.as_ref()),
            Some(_) => {
                notes.push(format!(
                    "API `{name}`: {} is served at {}, not where the credential goes: it is sent without it",
                    operation.name,
                    base.origin().ascii_serialization()
                ));
                None
            }
            None => None,
        };
        operations.insert(function, Prepared { operation: operation.clone(), base, scheme });
        specs.push(spec);
    }
    if specs.is_empty() {
        return Ok(None);
    }
    let exposure = match config.exposure {
        Some(ExposureSetting::Direct) => Exposure::Direct,
        Some(ExposureSetting::Deferred) => Exposure::Deferred,
        Some(ExposureSetting::Auto) => Exposure::Auto,
        None if specs.len() >= DEFERRED_FROM => Exposure::Deferred,
        None => Exposure::Auto,
    };
    let description = document.description.as_deref().map_or_else(
        || format!("The API `{name}` ({})", document.title),
        |d| format!("{}: {d}", document.title),
    );
    let mut manifest =
        ToolManifest::new(format!("api-{name}"), ToolMeta::new(document.title.clone(), description))
            .system_role(crate::SYSTEM_ROLE)
            .exposure(exposure);
    for spec in specs {
        manifest = manifest.api(spec);
    }
    let runtime = ApiRuntime { api: name.to_owned(), operations, secret, fetcher };
    Ok(Some(Mounted { manifest, runtime: Arc::new(runtime), notes }))
}

/// One operation ready to call.
#[derive(Debug, Clone)]
struct Prepared {
    operation: Operation,
    base: Url,
    /// Where the credential goes, if it goes anywhere.
    scheme: Option<SecurityScheme>,
}

/// Runs a mounted API's calls as requests.
pub struct ApiRuntime {
    api: String,
    operations: HashMap<String, Prepared>,
    secret: Option<credentials::Secret>,
    fetcher: Arc<Fetcher>,
}

impl std::fmt::Debug for ApiRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiRuntime")
            .field("api", &self.api)
            .field("operations", &self.operations.len())
            .finish()
    }
}

/// A parameter's value as text (`None` for null).
fn scalar(value: &Value) -> Option<String> {
    match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        other => Some(other.to_string()),
    }
}

/// Percent-encodes all but unreserved characters (a path segment, a cookie value).
fn encode(text: &str) -> String {
    tool_core::redact::percent_all(text)
}

/// An array's or object's items as text, in order (an object as key, value, key, value).
fn items(value: &Value) -> Vec<String> {
    match value {
        Value::Array(values) => values.iter().filter_map(scalar).collect(),
        Value::Object(map) => map.iter().flat_map(|(k, v)| [Some(k.clone()), scalar(v)]).flatten().collect(),
        other => scalar(other).into_iter().collect(),
    }
}

/// A request being built.
#[derive(Debug, Default)]
struct Parts {
    path: String,
    query: Vec<(String, String)>,
    headers: Vec<(String, String)>,
    cookies: Vec<(String, String)>,
}

impl Parts {
    /// Puts a parameter's value where it goes.
    ///
    /// # Errors
    ///
    /// A path parameter that would leave its segment: empty, `.` or `..` (URL parsers resolve
    /// those, and `%2e%2e` too, to another path of the service).
    fn parameter(&mut self, parameter: &document::Parameter, value: &Value) -> Result<(), String> {
        let name = parameter.name.as_str();
        if parameter.location == ParamLocation::Path {
            let texts = if value.is_array() || value.is_object() {
                items(value)
            } else {
                scalar(value).into_iter().collect()
            };
            if texts.is_empty() || texts.iter().any(|t| t.is_empty() || t == "." || t == "..") {
                return Err(format!(
                    "`{}` cannot be empty, `.` or `..`: it is one segment of the path",
                    parameter.argument
                ));
            }
        }
        if let Some(media) = &parameter.content_type
            && media.contains("json")
        {
            let text = value.to_string();
            self.put(parameter.location, name, text, true);
            return Ok(());
        }
        let is_compound = value.is_array() || value.is_object();
        match parameter.location {
            ParamLocation::Path => {
                let joined = items(value).iter().map(|i| encode(i)).collect::<Vec<_>>().join(",");
                let text = match parameter.style {
                    ParamStyle::Label => format!(".{joined}"),
                    ParamStyle::Matrix => format!(";{name}={joined}"),
                    _ => joined,
                };
                self.path = self.path.replace(&format!("{{{name}}}"), &text);
            }
            ParamLocation::Query if is_compound => match (parameter.style, value) {
                (ParamStyle::DeepObject, Value::Object(map)) => {
                    for (key, inner) in map {
                        if let Some(text) = scalar(inner) {
                            self.query.push((format!("{name}[{key}]"), text));
                        }
                    }
                }
                (ParamStyle::Form, Value::Object(map)) if parameter.explode => {
                    for (key, inner) in map {
                        if let Some(text) = scalar(inner) {
                            self.query.push((key.clone(), text));
                        }
                    }
                }
                (ParamStyle::Form, Value::Array(_)) if parameter.explode => {
                    for text in items(value) {
                        self.query.push((name.to_owned(), text));
                    }
                }
                (style, _) => {
                    let separator = match style {
                        ParamStyle::SpaceDelimited => " ",
                        ParamStyle::PipeDelimited => "|",
                        ParamStyle::TabDelimited => "\t",
                        _ => ",",
                    };
                    self.query.push((name.to_owned(), items(value).join(separator)));
                }
            },
            location => {
                if let Some(text) = if is_compound { Some(items(value).join(",")) } else { scalar(value) } {
                    self.put(location, name, text, false);
                }
            }
        }
        Ok(())
    }

    fn put(&mut self, location: ParamLocation, name: &str, text: String, whole: bool) {
        match location {
            ParamLocation::Path => {
                let text = if whole { encode(&text) } else { text };
                self.path = self.path.replace(&format!("{{{name}}}"), &text);
            }
            ParamLocation::Query => self.query.push((name.to_owned(), text)),
            ParamLocation::Header => self.headers.push((name.to_owned(), text)),
            ParamLocation::Cookie => self.cookies.push((name.to_owned(), text)),
        }
    }
}

/// A body in its media type.
fn body_bytes(content_type: &str, value: &Value) -> Result<(String, Vec<u8>), String> {
    let media = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if media == "application/x-www-form-urlencoded" {
        let Value::Object(map) = value else { return Err("the body must be an object of fields".into()) };
        let mut form = url::form_urlencoded::Serializer::new(String::new());
        for (key, inner) in map {
            match inner {
                Value::Array(values) => {
                    for one in values.iter().filter_map(scalar) {
                        form.append_pair(key, &one);
                    }
                }
                other => {
                    if let Some(text) = scalar(other) {
                        form.append_pair(key, &text);
                    }
                }
            }
        }
        return Ok((media, form.finish().into_bytes()));
    }
    if media == "multipart/form-data" {
        let Value::Object(map) = value else { return Err("the body must be an object of fields".into()) };
        let boundary = format!("toolhost-{:016x}", rand_u64());
        let mut out = Vec::new();
        for (key, inner) in map {
            let Some(text) = scalar(inner) else { continue };
            let key = key.replace(['"', '\r', '\n'], "_");
            out.extend_from_slice(
                format!("--{boundary}\r\nContent-Disposition: form-data; name=\"{key}\"\r\n\r\n{text}\r\n")
                    .as_bytes(),
            );
        }
        out.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
        return Ok((format!("multipart/form-data; boundary={boundary}"), out));
    }
    if media.contains("json") {
        return Ok((content_type.to_owned(), serde_json::to_vec(value).unwrap_or_default()));
    }
    // Text and anything else: a string as it is, other values as JSON text.
    let text = scalar(value).unwrap_or_default();
    Ok((content_type.to_owned(), text.into_bytes()))
}

fn rand_u64() -> u64 {
    let mut bytes = [0u8; 8];
    if getrandom::fill(&mut bytes).is_err() {
        return std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
    }
    u64::from_le_bytes(bytes)
}

/// The most characters of a response body shown; the pipeline keeps the whole output and says
/// how to read on.
fn render_body(content_type: &str, body: &[u8]) -> String {
    if body.is_empty() {
        return "(no body)".into();
    }
    if content_type.contains("json")
        && let Ok(value) = serde_json::from_slice::<Value>(body)
    {
        return serde_json::to_string_pretty(&value).unwrap_or_default();
    }
    match std::str::from_utf8(body) {
        Ok(text) => text.to_owned(),
        Err(_) => format!(
            "[{} bytes of {}: not text]",
            body.len(),
            if content_type.is_empty() { "binary" } else { content_type }
        ),
    }
}

impl ApiRuntime {
    fn request(
        &self,
        prepared: &Prepared,
        arguments: &Map<String, Value>,
    ) -> Result<safe_fetch::Request, String> {
        let operation = &prepared.operation;
        let mut parts = Parts { path: operation.path.clone(), ..Parts::default() };
        for parameter in &operation.parameters {
            match arguments.get(&parameter.argument) {
                Some(value) if !value.is_null() => parts.parameter(parameter, value)?,
                _ if parameter.required => return Err(format!("`{}` is required", parameter.argument)),
                _ => {}
            }
        }
        if let Some(scheme) = &prepared.scheme
            && let Some(secret) = &self.secret
        {
            let value = secret.expose().to_owned();
            // The credential's place is its own: a parameter the model filled with the same name
            // is dropped, not sent beside it.
            match scheme {
                SecurityScheme::ApiKey { location: KeyLocation::Header, name } => {
                    parts.headers.retain(|(n, _)| !n.eq_ignore_ascii_case(name));
                    parts.headers.push((name.clone(), value));
                }
                SecurityScheme::ApiKey { location: KeyLocation::Query, name } => {
                    parts.query.retain(|(n, _)| n != name);
                    parts.query.push((name.clone(), value));
                }
                SecurityScheme::ApiKey { location: KeyLocation::Cookie, name } => {
                    parts.cookies.retain(|(n, _)| n != name);
                    parts.cookies.push((name.clone(), value));
                }
                SecurityScheme::Bearer => {
                    parts.headers.push(("Authorization".into(), format!("Bearer {value}")))
                }
                SecurityScheme::Basic => parts.headers.push((
                    "Authorization".into(),
                    format!("Basic {}", tool_core::redact::base64_standard(value.as_bytes())),
                )),
            }
        }
        let mut url = prepared.base.clone();
        let joined = format!("{}{}", url.path().trim_end_matches('/'), parts.path);
        url.set_path(&joined);
        if !parts.query.is_empty() {
            let mut pairs = url.query_pairs_mut();
            for (key, value) in &parts.query {
                pairs.append_pair(key, value);
            }
        }
        let mut request = safe_fetch::Request::method(operation.method.as_str(), url.as_str())
            .ok_or_else(|| "the method is not valid".to_owned())?;
        request = request.header(safe_fetch::header::ACCEPT, "application/json, */*;q=0.5");
        if let Some(body) = &operation.body {
            match arguments.get("body") {
                Some(value) if !value.is_null() => {
                    let (content_type, bytes) = body_bytes(&body.content_type, value)?;
                    request = request.body(&content_type, bytes);
                }
                _ if body.required => return Err("`body` is required".into()),
                _ => {}
            }
        }
        for (name, value) in &parts.headers {
            let name = safe_fetch::header::HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| format!("`{name}` is not a header name"))?;
            if matches!(name, safe_fetch::header::HOST | safe_fetch::header::CONTENT_LENGTH) {
                continue;
            }
            // A value a header cannot carry (a line break, a control character) fails the call
            // rather than leaving the header out.
            if safe_fetch::header::HeaderValue::from_str(value).is_err() {
                return Err(format!(
                    "the header `{name}` cannot carry that value (line breaks or control characters)"
                ));
            }
            request = request.header(name, value);
        }
        if !parts.cookies.is_empty() {
            let cookie = parts
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={}", encode(v)))
                .collect::<Vec<_>>()
                .join("; ");
            request = request.header(safe_fetch::header::COOKIE, &cookie);
        }
        Ok(request)
    }

    async fn call(&self, function: &str, arguments: Value) -> ToolOutput {
        let Some(prepared) = self.operations.get(function) else {
            return ToolOutput::error(
                ErrorKind::UnknownTool,
                format!("the API `{}` has no operation `{function}`", self.api),
            );
        };
        let operation = &prepared.operation;
        let empty = Map::new();
        let arguments = match &arguments {
            Value::Object(map) => map,
            Value::Null => &empty,
            _ => return ToolOutput::error(ErrorKind::InvalidArguments, "the arguments must be an object"),
        };
        let state = |status: Option<u16>| {
            json!({
                "type": "api",
                "api": self.api,
                "operation": operation.operation_id.clone().unwrap_or_else(|| operation.name.clone()),
                "method": operation.method.as_str(),
                "path": operation.path,
                "status": status,
            })
        };
        let request = match self.request(prepared, arguments) {
            Ok(request) => request,
            Err(message) => {
                return ToolOutput::error(ErrorKind::InvalidArguments, message).with_state(state(None));
            }
        };
        // A long answer is read up to the cap and said to be cut, not refused.
        let response = match self.fetcher.send(request.truncate_at_cap()).await {
            Ok(response) => response,
            Err(error) => {
                let kind = match &error {
                    FetchError::Blocked { .. } => ErrorKind::Blocked,
                    FetchError::Timeout { .. } => ErrorKind::Timeout,
                    FetchError::InvalidUrl { .. } => ErrorKind::InvalidArguments,
                    _ => ErrorKind::Execution,
                };
                return ToolOutput::error(
                    kind,
                    format!("{} {}: {error}", operation.method.as_str(), operation.path),
                )
                .with_state(state(None));
            }
        };
        let content_type = response.media_type().unwrap_or_default();
        let mut kept: &[u8] = &response.body;
        if response.truncated {
            // The cut could fall inside the credential echoed back, leaving a prefix the redactor
            // cannot know: the last bytes that could hold part of any of its forms go too.
            if let Some(secret) = &self.secret {
                kept = &kept[..kept.len().saturating_sub(3 * secret.expose().len() + 4)];
            }
            // And the cut keeps whole characters.
            if let Err(error) = std::str::from_utf8(kept)
                && kept.len() - error.valid_up_to() < 4
            {
                kept = &kept[..error.valid_up_to()];
            }
        }
        let body =
            if operation.method == Method::Head { String::new() } else { render_body(&content_type, kept) };
        let status = response.status;
        let mut text = format!("HTTP {} {}", status.as_u16(), status.canonical_reason().unwrap_or_default());
        if !content_type.is_empty() {
            text.push_str(&format!(" ({content_type}, {} bytes)", response.body.len()));
        }
        if !body.is_empty() {
            text.push('\n');
            text.push_str(&body);
        }
        if response.truncated {
            text.push_str(&format!(
                "\n[the answer was cut at {} KiB (max_response_kib); ask for less, e.g. a smaller page]",
                response.body.len() / 1024
            ));
        }
        let mut state = state(Some(status.as_u16()));
        state["content_type"] = json!(content_type);
        state["bytes"] = json!(response.body.len());
        state["truncated"] = json!(response.truncated);
        if status.is_success() {
            ToolOutput::ok(text).with_state(state)
        } else {
            let kind = match status.as_u16() {
                404 => ErrorKind::NotFound,
                401 | 403 => ErrorKind::PermissionDenied,
                409 => ErrorKind::Conflict,
                _ => ErrorKind::Execution,
            };
            let mut output = ToolOutput::error(kind, text);
            output.state = Some(state);
            output
        }
    }
}

impl ToolRuntime for ApiRuntime {
    fn execute<'a>(
        &'a self,
        api: &'a str,
        arguments: Value,
        _context: &'a CallContext,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(self.call(api, arguments))
    }
}
