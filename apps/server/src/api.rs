//! The HTTP API under `/v1`, with its OpenAPI description generated from these handlers.

use std::collections::{BTreeMap, HashMap};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::Stream;
use journal::{Attempt, AttemptFilter, AttemptStatus, PendingApproval, RememberedDecision};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tool_core::provider::Provider;
use tool_core::sandbox::{NetworkAccess, SandboxMode};
use tool_executor::{ApprovalMode, Batch, CallResult, Decision, Event, RawCall};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::auth::{Principal, Tenant};
use crate::devices::DeviceInfo;
use crate::error::{ApiError, ErrorBody, Json, Path, Query};
use crate::limits::Resource;
use crate::state::{AppState, RunsOn, SessionView};

type AppRouter = OpenApiRouter<Arc<AppState>>;

/// The routes that the OpenAPI document describes.
pub fn routes() -> AppRouter {
    OpenApiRouter::new()
        .routes(routes!(catalogue))
        .routes(routes!(create_session))
        .routes(routes!(get_session, end_session))
        .routes(routes!(session_catalogue))
        .routes(routes!(submit_calls))
        .routes(routes!(session_events))
        .routes(routes!(tenant_events))
        .routes(routes!(list_approvals))
        .routes(routes!(decide_approval))
        .routes(routes!(list_remembered))
        .routes(routes!(list_memories))
        .routes(routes!(get_memory, remove_memory))
        .routes(routes!(list_knowledge_bases, add_knowledge_base))
        .routes(routes!(remove_knowledge_base))
        .routes(routes!(list_documents))
        .routes(routes!(get_document))
        .routes(routes!(rewind_session))
        .routes(routes!(revoke_remembered))
        .routes(routes!(list_journal))
        .routes(routes!(get_attempt))
        .routes(routes!(confirm_attempt))
        .routes(routes!(list_devices))
        .routes(routes!(health))
        .routes(routes!(ready))
        .routes(routes!(metrics))
}

// ---------------------------------------------------------------- catalogue

/// Which provider's function schemas to return.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ProviderQuery {
    /// `openai` (default), `anthropic`, `gemini` or `mcp`.
    #[serde(default)]
    #[param(value_type = Option<ProviderName>, inline)]
    pub provider: Option<String>,
}

/// The providers whose form the catalogue comes in.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)] // documents `provider`
pub enum ProviderName {
    /// OpenAI (strict function tools).
    Openai,
    /// Anthropic.
    Anthropic,
    /// Gemini.
    Gemini,
    /// MCP.
    Mcp,
}

/// A tool as the model is told about it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogueTool {
    /// The tool's identifier.
    pub identifier: String,
    /// Its manifest (pure data).
    #[schema(value_type = Object)]
    pub manifest: Value,
    /// Its system-role prompt, rendered for the session.
    pub system_role: String,
}

/// Function schemas, manifests and system roles.
#[derive(Debug, Serialize, ToSchema)]
pub struct Catalogue {
    /// The provider the `functions` are shaped for.
    pub provider: String,
    /// The declarations to pass to the model, in that provider's form.
    #[schema(value_type = Vec<Object>)]
    pub functions: Vec<Value>,
    /// The tools, with manifests and system roles.
    pub tools: Vec<CatalogueTool>,
    /// The session's skills (the operator's skill folders for its tenant): the model activates
    /// them with `activateSkill`; a front end may offer them to its person by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skills: Vec<CatalogueSkill>,
}

/// A skill as a front end may list it.
#[derive(Debug, Serialize, ToSchema)]
pub struct CatalogueSkill {
    /// Its name.
    pub name: String,
    /// What it does and when to use it.
    pub description: String,
    /// The model may activate it (else only a person, by name).
    pub model_invocable: bool,
    /// What a person may give it (`argument-hint`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub argument_hint: Option<String>,
}

fn provider(query: &ProviderQuery) -> Result<Provider, ApiError> {
    match query.provider.as_deref() {
        None => Ok(Provider::Openai),
        Some(name) => Provider::parse(name).ok_or_else(|| {
            ApiError::bad_request(format!("unknown provider `{name}`; use openai, anthropic, gemini or mcp"))
        }),
    }
}

/// The catalogue of `tools`; with a session, only what its model is given now (its direct
/// functions and those tool search found), named as it names them.
fn build_catalogue(
    state: &AppState,
    provider: Provider,
    tools: &[String],
    session: Option<&tool_executor::Session>,
    values: &BTreeMap<&str, String>,
) -> Catalogue {
    let all = state.executor.toolbox().names(None);
    let names = session.map_or(&all, |session| &session.names);
    let mut functions = Vec::new();
    let mut listed = Vec::new();
    for entry in state.executor.toolbox().tools() {
        let manifest = &entry.manifest;
        if !tools.contains(&manifest.identifier) {
            continue;
        }
        let mut declared = false;
        for api in &manifest.apis {
            let name = names.name_of(&manifest.identifier, &api.name).unwrap_or(&api.name);
            let shown = match session {
                Some(session) => session.declares(name),
                // Without a session nothing is deferred (tool search has nothing to find); the
                // operator's hidden tools stay hidden.
                None => {
                    let exposure = state
                        .args
                        .tool_exposure
                        .iter()
                        .find(|(tool, _)| *tool == manifest.identifier)
                        .map_or(manifest.exposure, |(_, exposure)| *exposure);
                    !matches!(
                        exposure,
                        tool_core::Exposure::WhenDeferred
                            | tool_core::Exposure::WhenSkills
                            | tool_core::Exposure::Hidden
                    )
                }
            };
            if shown {
                let api = session.map_or(std::borrow::Cow::Borrowed(api), |s| s.declared_api(api));
                functions.push(provider.declare(name, &api));
                declared = true;
            }
        }
        if !declared {
            continue;
        }
        listed.push(CatalogueTool {
            identifier: manifest.identifier.clone(),
            manifest: serde_json::to_value(manifest).unwrap_or(Value::Null),
            system_role: manifest.render_system_role(values),
        });
    }
    let skills = session
        .map(|session| {
            session
                .config
                .skills
                .all()
                .iter()
                .map(|skill| CatalogueSkill {
                    name: skill.name.clone(),
                    description: skill.description.clone(),
                    model_invocable: skill.model_invocable,
                    argument_hint: skill.argument_hint.clone(),
                })
                .collect()
        })
        .unwrap_or_default();
    Catalogue { provider: provider.as_str().to_owned(), functions, tools: listed, skills }
}

/// Every enabled tool, for a model that has no session yet.
#[utoipa::path(get, path = "/v1/catalogue", tag = "catalogue", params(ProviderQuery),
    responses((status = 200, body = Catalogue), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
async fn catalogue(
    State(state): State<Arc<AppState>>,
    _tenant: Tenant,
    Query(query): Query<ProviderQuery>,
) -> Result<Json<Catalogue>, ApiError> {
    let provider = provider(&query)?;
    let values = BTreeMap::from([("date", tool_core::manifest::today())]);
    Ok(Json(build_catalogue(&state, provider, &state.tools, None, &values)))
}

/// The session's tools as its model is given them now, named as it must call them: its direct
/// functions and those `searchTools` found (a front end asks again after a `tools.activated`
/// event).
#[utoipa::path(get, path = "/v1/sessions/{id}/catalogue", tag = "catalogue", params(("id" = String, Path), ProviderQuery),
    responses((status = 200, body = Catalogue), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn session_catalogue(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
    Query(query): Query<ProviderQuery>,
) -> Result<Json<Catalogue>, ApiError> {
    let provider = provider(&query)?;
    let entry = state.session(&tenant, &id).await?;
    state.catch_up_activations(&entry).await;
    let mut values = BTreeMap::from([("date", tool_core::manifest::today())]);
    if let Some(dir) = &entry.view.working_directory {
        values.insert("working_directory", dir.clone());
    }
    values
        .insert("deferred_tools", tool_executor::deferred_summary(state.executor.toolbox(), &entry.session));
    values.insert("skills", entry.session.config.skills.summary());
    Ok(Json(build_catalogue(&state, provider, &entry.view.tools, Some(&entry.session), &values)))
}

// ---------------------------------------------------------------- sessions

/// An allow-list entry: `tool/api`, `tool/*` or `tool`.
#[derive(Debug, ToSchema)]
#[schema(value_type = String, min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
#[allow(dead_code)] // documents the entries of `allow_list`
pub struct AllowEntry(String);

/// A session to open.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"working_directory": "/srv/work/acme/project", "approval_mode": "manual",
    "allow_list": ["local-system/readFile"], "sandbox": {"mode": "workspace-write", "network": "off"}}))]
pub struct CreateSession {
    /// The folder tools work in (absolute). Paths outside it ask for approval.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 4096, pattern = r"^/[^\u0000-\u001F\u007F-\u009F]*$")]
    pub working_directory: Option<String>,
    /// `manual` (default), `allow_list`, `auto_run`, `headless` or `read_only`.
    #[serde(default)]
    pub approval_mode: ApprovalMode,
    /// Pre-authorised calls: `tool/api`, `tool/*` or `tool`.
    #[serde(default)]
    #[schema(value_type = Vec<AllowEntry>)]
    pub allow_list: Vec<String>,
    /// The most time all calls of the session may take, in milliseconds (at most 7 days).
    #[serde(default)]
    #[schema(minimum = 1, maximum = 604_800_000)]
    pub time_budget_ms: Option<u64>,
    /// The user on whose behalf calls run.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub user_id: Option<String>,
    /// The agent.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub agent_id: Option<String>,
    /// The tools offered (default: every enabled tool).
    #[serde(default)]
    pub tools: Option<Vec<String>>,
    /// Run every call alone, in the model's order.
    #[serde(default)]
    pub sequential: bool,
    /// Writes and edits show their change first (a diff and a token); `resolveChange` applies
    /// it — approved as the write it is — or discards it.
    #[serde(default)]
    pub preview_writes: bool,
    /// The operator's model profile this session's sub-agents use (`--models`; default: the
    /// operator's default).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub sub_agent_model: Option<String>,
    /// Where "always allow" decisions are kept (default: the working directory).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub project: Option<String>,
    /// `server` (default) or `device`.
    #[serde(default)]
    pub runs_on: RunsOn,
    /// With `runs_on: device`: the device (default: any of the tenant's devices that runs the tool).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub device_id: Option<String>,
    /// The sandbox its commands run in, within what the server allows (default: `workspace-write`;
    /// network as the server says). A device applies its own.
    #[serde(default)]
    #[serde(deserialize_with = "crate::error::object_field")]
    pub sandbox: Option<SandboxRequest>,
}

/// What a session asks of the sandbox; each field left out takes the server's default.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SandboxRequest {
    /// `workspace-write`, `read-only` or `off`.
    #[serde(default)]
    pub mode: Option<SandboxMode>,
    /// `off` or `on`.
    #[serde(default)]
    pub network: Option<NetworkAccess>,
}

/// A fresh id: `{prefix}_` then the time and a counter, in hex.
fn fresh_id(prefix: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos =
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    format!("{prefix}_{:x}{:04x}", nanos, NEXT.fetch_add(1, Ordering::Relaxed) & 0xffff)
}

fn check_text(field: &str, value: &str, max: usize) -> Result<(), ApiError> {
    if value.is_empty() || value.len() > max || value.chars().any(char::is_control) {
        return Err(ApiError::bad_request(format!(
            "`{field}` must be 1 to {max} bytes without control characters"
        )));
    }
    Ok(())
}

/// Opens a session.
#[utoipa::path(post, path = "/v1/sessions", tag = "sessions", request_body = CreateSession,
    responses((status = 201, body = SessionView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "the key's role may not open sessions"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 429, body = ErrorBody)))]
async fn create_session(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Json(request): Json<CreateSession>,
) -> Result<(StatusCode, Json<SessionView>), ApiError> {
    let entry = open_session(&state, &principal, request).await?;
    Ok((StatusCode::CREATED, Json(entry.view.clone())))
}

/// Opens a session for a principal: every check of `POST /v1/sessions` (also used by the MCP
/// endpoint, whose connections are sessions).
///
/// # Errors
///
/// What `POST /v1/sessions` answers with.
pub async fn open_session(
    state: &Arc<AppState>,
    principal: &Principal,
    request: CreateSession,
) -> Result<Arc<crate::state::SessionEntry>, ApiError> {
    principal.must_propose()?;
    let tenant = principal.tenant.clone();
    state.limits.check_sessions(state.tenant_session_count(&tenant))?;
    state.check_approval(request.approval_mode, &request.allow_list)?;
    let mut view = state.new_view(fresh_id("ses"));
    view.created_by = Some(principal.id.clone());
    if let Some(dir) = &request.working_directory {
        check_text("working_directory", dir, 4096)?;
        view.working_directory = Some(state.check_working_directory(&tenant, dir, request.runs_on)?);
    } else if request.runs_on == RunsOn::Server
        && !state.keys.is_open()
        && !state.args.workspace_roots.is_empty()
    {
        return Err(ApiError::bad_request("working_directory is required on a server with workspace roots"));
    }
    if let Some(tools) = request.tools {
        if let Some(unknown) = tools.iter().find(|t| !state.tools.contains(t)) {
            return Err(ApiError::bad_request(format!(
                "unknown or disabled tool `{unknown}`; enabled: {}",
                state.tools.join(", ")
            )));
        }
        view.tools = tools;
    }
    for entry in &request.allow_list {
        check_text("allow_list", entry, 200)?;
    }
    for (field, value) in [
        ("user_id", &request.user_id),
        ("agent_id", &request.agent_id),
        ("project", &request.project),
        ("device_id", &request.device_id),
    ] {
        if let Some(value) = value {
            check_text(field, value, 200)?;
        }
    }
    if request.device_id.is_some() && request.runs_on != RunsOn::Device {
        return Err(ApiError::bad_request("device_id needs runs_on: device"));
    }
    view.approval_mode = request.approval_mode;
    view.allow_list = request.allow_list;
    if let Some(budget) = request.time_budget_ms
        && !(1..=MAX_TIME_BUDGET_MS).contains(&budget)
    {
        return Err(ApiError::bad_request(format!(
            "time_budget_ms must be 1 to {MAX_TIME_BUDGET_MS} (7 days)"
        )));
    }
    view.time_budget_ms = request.time_budget_ms;
    // With keys the person is the key's name: their memories are theirs, whatever a body says.
    view.user_id = match (principal.person(), request.user_id) {
        (Some(person), Some(asked)) if asked != person => {
            return Err(ApiError::bad_request(format!(
                "user_id `{asked}` is not this key's person (`{person}`); leave it out, or use that person's key"
            )));
        }
        (Some(person), _) => Some(person.to_owned()),
        (None, asked) => asked,
    };
    view.agent_id = request.agent_id;
    view.sequential = request.sequential;
    view.preview_writes = request.preview_writes;
    if let Some(name) = &request.sub_agent_model {
        check_text("sub_agent_model", name, 200)?;
        match &state.sub_agents {
            Some(models) => models.check(name).map_err(|e| ApiError::bad_request(e.to_string()))?,
            None => {
                return Err(ApiError::bad_request(
                    "sub_agent_model: this server has no models for sub-agents (the operator's --models)",
                ));
            }
        }
    }
    view.sub_agent_model = request.sub_agent_model;
    view.project = request.project;
    view.runs_on = request.runs_on;
    view.device_id = request.device_id;
    if let Some(sandbox) = request.sandbox {
        view.sandbox = state.choose_sandbox(sandbox.mode, sandbox.network)?;
    }
    state.create_session(&tenant, view).await
}

/// Reads a session.
#[utoipa::path(get, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody)))]
async fn get_session(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    let entry = state.session(&tenant, &id).await?;
    state.catch_up_activations(&entry).await;
    let mut view = entry.view.clone();
    // What tool search has declared since the session was opened (an ended session keeps what
    // was stored).
    if view.status == "active" {
        view.activated_tools = entry.session.activated();
    }
    Ok(Json(view))
}

/// Ends a session; its calls in flight are cancelled and settle as cancelled.
#[utoipa::path(delete, path = "/v1/sessions/{id}", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn end_session(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Json<SessionView>, ApiError> {
    Ok(Json(state.end_session(&tenant, &id).await?))
}

// ---------------------------------------------------------------- calls

/// One call as a model produced it, in any of three shapes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the documented shapes; requests are read by `read_call` for precise errors
pub enum ModelCall {
    /// `{id, name, arguments}` with `arguments` the raw string (or an object).
    Plain {
        /// The call id.
        #[schema(min_length = 1, max_length = 256)]
        id: String,
        /// The function name.
        #[schema(max_length = 256)]
        name: String,
        /// The raw argument string, or the arguments as an object.
        #[schema(schema_with = string_or_object)]
        arguments: Value,
    },
    /// OpenAI: `{id, type: "function", function: {name, arguments}}`.
    OpenAi {
        /// The call id.
        #[schema(min_length = 1, max_length = 256)]
        id: String,
        /// The function.
        #[schema(value_type = Object)]
        function: Value,
    },
    /// Anthropic: `{type: "tool_use", id, name, input}`.
    Anthropic {
        /// The call id.
        #[schema(min_length = 1, max_length = 256)]
        id: String,
        /// The tool name.
        #[schema(max_length = 256)]
        name: String,
        /// The input object.
        #[schema(value_type = Object)]
        input: Value,
    },
}

/// A string or an object: how call arguments may come.
fn string_or_object() -> utoipa::openapi::schema::Schema {
    use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, Type};
    Schema::OneOf(
        OneOfBuilder::new()
            .item(ObjectBuilder::new().schema_type(Type::String))
            .item(ObjectBuilder::new().schema_type(Type::Object))
            .build(),
    )
}

/// One server-sent event of a call or session stream: `event` names its kind, `data` is its JSON.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // documents the streams
pub struct StreamEvent {
    /// The kind.
    pub event: StreamEventKind,
    /// The event as JSON: the pipeline's event (tagged by `type`, the same name as `event`); for
    /// `results` the batch's `CallsResponse`; for `lagged` `{"missed": N}` (events the reader fell
    /// behind by); for `error` `{"message"}`; for `shutdown` `{}`.
    pub data: String,
}

/// The kinds of streamed events.
#[derive(Debug, Serialize, ToSchema)]
#[allow(dead_code)] // documents the streams
pub enum StreamEventKind {
    /// A call was journalled before running.
    #[serde(rename = "call.proposed")]
    CallProposed,
    /// A call waits for a person.
    #[serde(rename = "permission.requested")]
    PermissionRequested,
    /// A person (or a rule) allowed it.
    #[serde(rename = "permission.granted")]
    PermissionGranted,
    /// It was refused.
    #[serde(rename = "permission.denied")]
    PermissionDenied,
    /// It started.
    #[serde(rename = "call.started")]
    CallStarted,
    /// It reported progress.
    #[serde(rename = "call.progress")]
    CallProgress,
    /// It finished.
    #[serde(rename = "call.finished")]
    CallFinished,
    /// It failed.
    #[serde(rename = "call.failed")]
    CallFailed,
    /// It was blocked.
    #[serde(rename = "call.blocked")]
    CallBlocked,
    /// The batch's results (the last event of a call stream).
    #[serde(rename = "results")]
    Results,
    /// The reader fell behind; some events were dropped.
    #[serde(rename = "lagged")]
    Lagged,
    /// The batch could not finish.
    #[serde(rename = "error")]
    Error,
    /// The server is shutting down.
    #[serde(rename = "shutdown")]
    Shutdown,
}

/// The calls of one model message.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"message_id": "msg_01", "calls": [
    {"id": "call_1", "name": "readFile", "arguments": "{\"path\": \"README.md\", \"limit\": 40}"},
    {"id": "call_2", "type": "function", "function": {"name": "grepContent", "arguments": "{\"pattern\": \"TODO\"}"}}]}))]
pub struct SubmitCalls {
    /// The model message that carried them (replays of a message id are not run twice).
    #[serde(default)]
    #[schema(min_length = 1, max_length = 256, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub message_id: Option<String>,
    /// The message stopped on the output length limit, so its arguments may be cut.
    #[serde(default)]
    pub stopped_on_length: bool,
    /// The calls, in the model's order (1 to 128).
    #[schema(value_type = Vec<ModelCall>, min_items = 1, max_items = 128)]
    pub calls: Vec<Value>,
    /// Answer as a server-sent event stream of the pipeline's events, ending with `results`.
    #[serde(default)]
    pub stream: bool,
}

/// The results of a batch, in the model's order.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct CallsResponse {
    /// The message id the batch ran under (given, or made up); journal keys are
    /// `message_id:call_id`.
    pub message_id: Option<String>,
    /// One result per call, in the model's order.
    pub results: Vec<CallResult>,
}

const MAX_CALLS: usize = 128;

/// The longest a session's time budget may be: 7 days.
const MAX_TIME_BUDGET_MS: u64 = 604_800_000;

fn argument_text(value: Option<&Value>) -> String {
    match value {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
    }
}

fn read_call(index: usize, value: &Value) -> Result<RawCall, ApiError> {
    let shape = || {
        ApiError::bad_request(format!(
            "calls[{index}]: expected {{id, name, arguments}}, OpenAI {{id, function: {{name, arguments}}}} or \
             Anthropic {{id, name, input}}"
        ))
    };
    let object = value.as_object().ok_or_else(shape)?;
    let id = object.get("id").and_then(Value::as_str).ok_or_else(shape)?;
    // Arguments are a string (as models write them) or an object (already parsed); an Anthropic
    // `input` is an object.
    let (name, arguments) = if let Some(function) = object.get("function") {
        let function = function.as_object().ok_or_else(shape)?;
        let name = function.get("name").and_then(Value::as_str).ok_or_else(shape)?;
        match function.get("arguments") {
            None | Some(Value::Null | Value::String(_) | Value::Object(_)) => {
                (name, argument_text(function.get("arguments")))
            }
            Some(_) => return Err(shape()),
        }
    } else {
        let name = object.get("name").and_then(Value::as_str).ok_or_else(shape)?;
        match (object.get("arguments"), object.get("input")) {
            (Some(arguments @ (Value::String(_) | Value::Object(_))), _) => {
                (name, argument_text(Some(arguments)))
            }
            (None, Some(input @ Value::Object(_))) => (name, argument_text(Some(input))),
            _ => return Err(shape()),
        }
    };
    if id.is_empty() || id.len() > 256 {
        return Err(ApiError::bad_request(format!("calls[{index}]: id must be 1 to 256 bytes")));
    }
    // Unknown names are answered with the closest known ones; a name no model would produce is
    // refused before that comparison.
    if name.len() > 256 {
        return Err(ApiError::bad_request(format!("calls[{index}]: name must be at most 256 bytes")));
    }
    Ok(RawCall { id: id.to_owned(), name: name.to_owned(), arguments })
}

/// Runs the calls of one model message through the pipeline: answers with every result in the
/// model's order, or (`stream: true`) as server-sent events — each pipeline event as it happens
/// (`call.proposed`, `permission.requested`, `call.progress`, `call.finished`…), then `results`.
///
/// The batch runs to the end even if the client goes away; the journal keeps its outcome.
#[utoipa::path(post, path = "/v1/sessions/{id}/calls", tag = "calls", params(("id" = String, Path)),
    request_body = SubmitCalls,
    responses((status = 200, description = "the results, or with `stream: true` an event stream ending with `results`",
            content((CallsResponse = "application/json"), (StreamEvent = "text/event-stream"))),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "the key's role may not propose calls"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody), (status = 413, body = ErrorBody),
        (status = 415, body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn submit_calls(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<SubmitCalls>,
) -> Result<Response, ApiError> {
    principal.must_propose()?;
    let tenant = principal.tenant;
    let entry = state.session(&tenant, &id).await?;
    if entry.view.status != "active" {
        return Err(ApiError::conflict(format!("session `{id}` has ended")));
    }
    if request.calls.is_empty() || request.calls.len() > MAX_CALLS {
        return Err(ApiError::bad_request(format!("calls must hold 1 to {MAX_CALLS} calls")));
    }
    if let Some(message_id) = &request.message_id {
        check_text("message_id", message_id, 256)?;
    }
    let calls =
        request.calls.iter().enumerate().map(|(i, v)| read_call(i, v)).collect::<Result<Vec<_>, _>>()?;
    let call_ids: Vec<String> = calls.iter().map(|c| c.id.clone()).collect();
    // A message id of our own when the caller gives none, so the answer names the journal keys
    // (`message_id:call_id`) of its calls.
    let made_here = request.message_id.is_none();
    let message_id = request.message_id.clone().unwrap_or_else(|| fresh_id("msg"));
    let batch =
        Batch { message_id: Some(message_id.clone()), calls, stopped_on_length: request.stopped_on_length };
    state.journal_ready().await?;
    let admitted = admit_batch(&state, &tenant)?;
    let stream_slot =
        if request.stream { Some(state.limits.take(&tenant, Resource::Streams)?) } else { None };
    // Subscribe before the batch starts, so no event is missed.
    let events = request.stream.then(|| entry.session.subscribe());
    let handle = spawn_batch(&state, entry.session.clone(), batch, admitted, made_here);
    match events {
        None => {
            let response = handle.await.map_err(ApiError::internal)?;
            // Every call refused for the journal's sake: nothing ran, and the caller is told to
            // come back (the results say the same, call by call).
            if response
                .results
                .iter()
                .all(|r| r.output.error.as_ref().is_some_and(|e| e.kind == tool_core::ErrorKind::Unavailable))
            {
                let mut body = serde_json::to_value(&response).unwrap_or_else(|_| json!({}));
                body["error"] = json!({
                    "code": "unavailable",
                    "message": "the journal could not record these calls, so none was run; retry the same message",
                });
                let mut answer = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
                answer.headers_mut().insert(axum::http::header::RETRY_AFTER, JOURNAL_RETRY_SECS.into());
                return Ok(answer);
            }
            Ok(Json(response).into_response())
        }
        Some(events) => {
            Ok(stream_batch(state.clone(), events, call_ids, handle, stream_slot).into_response())
        }
    }
}

/// Seconds a caller is told to wait (`Retry-After`) when the journal cannot record calls.
pub const JOURNAL_RETRY_SECS: u64 = 2;

/// The tenant's budgets for a new batch: refused while the server shuts down, past the approvals
/// waiting for a person, or past the batches in flight. The same for every way calls arrive (the
/// calls endpoint, MCP).
///
/// # Errors
///
/// 503 while shutting down; 429 past a budget.
pub fn admit_batch(state: &AppState, tenant: &str) -> Result<crate::limits::Slot, ApiError> {
    if state.shutdown.is_cancelled() {
        return Err(ApiError::unavailable_for(
            "this instance is shutting down and takes no new calls; retry (another instance, or this one once it is back)",
            crate::state::DRAIN_RETRY_SECS,
        ));
    }
    // Questions no one answers pile up: past the tenant's budget, no new batch may add to them.
    let waiting = state.broker.pending(tenant, None).len();
    if waiting >= state.args.tenant_approvals.max(1) {
        return Err(ApiError::too_many(
            format!(
                "this tenant has {waiting} approvals waiting for a person, the most it may; decide or let them expire"
            ),
            5,
        ));
    }
    state.limits.take(tenant, Resource::Batches)
}

/// Runs an admitted batch to its end on the server's task tracker (a client that goes away cannot
/// drop it half-way; shutdown waits for it), counting its calls in the metrics.
/// `new_message`: the batch's message id was made here, just now (see
/// `Executor::execute_new_batch`).
pub fn spawn_batch(
    state: &Arc<AppState>,
    session: Arc<tool_executor::Session>,
    batch: Batch,
    slot: crate::limits::Slot,
    new_message: bool,
) -> tokio::task::JoinHandle<CallsResponse> {
    let run_state = state.clone();
    // The calls' spans are children of the request's (traces), though they run in a task.
    let span = tracing::Span::current();
    state.tasks.spawn(tracing::Instrument::instrument(
        async move {
            let _batch_slot = slot;
            let message_id = batch.message_id.clone();
            let started = Instant::now();
            let tools_version = session.tools_version();
            // Boxed: the pipeline's future is large, and moving it into the task copied it.
            let results = if new_message {
                Box::pin(run_state.executor.execute_new_batch(&session, batch)).await
            } else {
                Box::pin(run_state.executor.execute_batch(&session, batch)).await
            };
            let seconds = started.elapsed().as_secs_f64();
            let tenant = &session.config.tenant;
            for result in &results {
                run_state.metrics.call(
                    tenant,
                    result.tool.as_deref().unwrap_or("unknown"),
                    result.status.as_str(),
                    seconds,
                );
            }
            if session.tools_version() != tools_version {
                run_state.keep_activations(&session).await;
            }
            CallsResponse { message_id, results }
        },
        span,
    ))
}

fn sse_json(kind: &str, value: &impl Serialize) -> SseEvent {
    SseEvent::default().event(kind).data(serde_json::to_string(value).unwrap_or_else(|_| "{}".into()))
}

fn belongs(call_id: &str, ids: &[String]) -> bool {
    ids.iter().any(|id| {
        call_id == id || call_id.strip_prefix(id.as_str()).is_some_and(|rest| rest.starts_with('/'))
    })
}

fn stream_batch(
    state: Arc<AppState>,
    mut events: tokio::sync::broadcast::Receiver<Event>,
    call_ids: Vec<String>,
    handle: tokio::task::JoinHandle<CallsResponse>,
    slot: Option<crate::limits::Slot>,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>>> {
    let stream = async_stream(move |tx| async move {
        // The tenant's stream budget is given back when the stream ends.
        let _slot = slot;
        tokio::pin!(handle);
        let mut open = true;
        let mut draining = false;
        loop {
            tokio::select! {
                biased;
                event = events.recv(), if open => match event {
                    Ok(event) if belongs(event.call_id(), &call_ids) => {
                        if tx.send(sse_json(event.kind(), &event)).await.is_err() { return; }
                    }
                    Ok(_) => {}
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx.send(sse_json("lagged", &json!({"missed": n}))).await;
                    }
                    // The session is gone (ended): only the results are left to wait for.
                    Err(tokio::sync::broadcast::error::RecvError::Closed) => open = false,
                },
                done = &mut handle => {
                    // Events already sent before the results: drain what is queued.
                    while let Ok(event) = events.try_recv() {
                        if belongs(event.call_id(), &call_ids) {
                            let _ = tx.send(sse_json(event.kind(), &event)).await;
                        }
                    }
                    match done {
                        Ok(response) => { let _ = tx.send(sse_json("results", &response)).await; }
                        Err(error) => {
                            let _ = tx.send(sse_json("error", &json!({"message": error.to_string()}))).await;
                        }
                    }
                    return;
                }
                () = state.shutdown.cancelled(), if !draining => {
                    // Said once; the batch still finishes within the grace (or is cancelled at its
                    // end), and its results are this stream's last event either way.
                    draining = true;
                    let _ = tx.send(sse_json("shutdown", &json!({"reason": "this instance is stopping; the calls in flight finish first"}))).await;
                }
                // The client went away: the batch goes on, the stream stops.
                () = tx.closed() => return,
            }
        }
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// A stream fed by a task through a small channel (no extra crate for `async-stream`).
fn async_stream<F, Fut>(body: F) -> impl Stream<Item = Result<SseEvent, Infallible>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<SseEvent>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(64);
    tokio::spawn(body(tx));
    futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|event| (Ok(event), rx)) })
}

/// Which events a tenant's stream carries.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Only this session's.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// Every event of a session as it happens, on whichever instance its calls run (for a person's
/// console: approvals, progress). Each event's data carries `session_id`, the `instance` that
/// emitted it and its number there (`seq`); `shutdown` says this instance is stopping.
#[utoipa::path(get, path = "/v1/sessions/{id}/events", tag = "calls", params(("id" = String, Path)),
    responses((status = 200, description = "server-sent events", content((StreamEvent = "text/event-stream"))),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "the session has ended"),
        (status = 429, body = ErrorBody)))]
async fn session_events(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let entry = state.session(&tenant, &id).await?;
    // An ended session has nothing more to say: no stream that would stay open and empty.
    if entry.view.status != "active" {
        return Err(ApiError::conflict(format!("session `{id}` has ended")));
    }
    drop(entry);
    watch(&state, &tenant, Some(id))
}

/// Every event of every session of the caller's tenant as it happens, on every instance: calls
/// proposed, approvals asked and decided, progress, results. Each event's data carries
/// `session_id`, the `instance` that emitted it and its number there (`seq`); `shutdown` says
/// this instance is stopping.
#[utoipa::path(get, path = "/v1/events", tag = "calls", params(EventsQuery),
    responses((status = 200, description = "server-sent events", content((StreamEvent = "text/event-stream"))),
        (status = 429, body = ErrorBody)))]
async fn tenant_events(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Query(query): Query<EventsQuery>,
) -> Result<Response, ApiError> {
    watch(&state, &tenant, query.session_id)
}

/// A server-sent event of the bus: the pipeline's event with where it comes from.
pub fn bus_sse(event: &crate::bus::BusEvent) -> SseEvent {
    let mut data = serde_json::to_value(&event.event).unwrap_or_else(|_| json!({}));
    if let Value::Object(map) = &mut data {
        map.insert("session_id".into(), json!(event.session_id));
        map.insert("instance".into(), json!(event.instance));
        map.insert("seq".into(), json!(event.seq));
        map.insert("at".into(), json!(event.at));
    }
    SseEvent::default()
        .event(event.event.kind())
        .id(format!("{}:{}", event.instance, event.seq))
        .data(data.to_string())
}

/// A stream of the tenant's events from the bus (one session's, when given), with a `shutdown`
/// event when this instance stops.
fn watch(state: &Arc<AppState>, tenant: &str, session: Option<String>) -> Result<Response, ApiError> {
    let slot = state.limits.take(tenant, Resource::Streams)?;
    let mut events = state.bus.subscribe(tenant);
    let shutdown = state.shutdown.clone();
    let stream = async_stream(move |tx| async move {
        let _slot = slot;
        loop {
            tokio::select! {
                event = events.recv() => match event {
                    Ok(event) => {
                        if session.as_deref().is_some_and(|id| id != event.session_id) {
                            continue;
                        }
                        if tx.send(bus_sse(&event)).await.is_err() { return }
                    }
                    Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                        let _ = tx.send(sse_json("lagged", &json!({"missed": n}))).await;
                    }
                    Err(_) => return,
                },
                () = shutdown.cancelled() => {
                    let _ = tx.send(sse_json("shutdown", &json!({"reason": "this instance is stopping; reconnect (another instance, or this one once it is back)"}))).await;
                    return;
                }
                () = tx.closed() => return,
            }
        }
    });
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

// ---------------------------------------------------------------- approvals

/// Which approvals to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ApprovalQuery {
    /// Only this session's.
    #[serde(default)]
    pub session_id: Option<String>,
}

/// A call waiting for a person's approval, or a question the agent asks (`askUser`).
#[derive(Debug, Serialize, ToSchema)]
pub struct ApprovalView {
    /// The journal's row: for a question, `reason` is `question` and `arguments` the question.
    #[serde(flatten)]
    pub row: PendingApproval,
    /// `approval` (decide it with allow or deny) or `question` (answer it with
    /// `{"kind": "answer", "answer": {"choices": [...], "text": "..."}}`, or decline it with a
    /// denial).
    pub kind: &'static str,
    /// The question, for a question.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<tool_core::Question>,
    /// For a call naming files: the file or folder `allow_session` and `allow_always` grant when
    /// sent as their `argument_prefix` (the files' folder, never `/` or the home folder). Without
    /// an `argument_prefix`, they grant the call's own files only; a scope that does not hold the
    /// call's files is not taken.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

use crate::approvals::{DecisionOutcome, question_of};

/// Calls and questions waiting for a person, oldest first.
#[utoipa::path(get, path = "/v1/approvals", tag = "approvals", params(ApprovalQuery),
    responses((status = 200, body = Vec<ApprovalView>), (status = 401, body = ErrorBody)))]
async fn list_approvals(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Query(query): Query<ApprovalQuery>,
) -> Result<Json<Vec<ApprovalView>>, ApiError> {
    let rows = crate::approvals::pending(&state, &tenant, query.session_id.as_deref()).await?;
    let mut views = Vec::with_capacity(rows.len());
    let mut sessions: HashMap<String, Option<crate::state::SessionView>> = HashMap::new();
    for row in rows {
        let question = question_of(&row);
        let scope = if question.is_some() {
            None
        } else {
            if !sessions.contains_key(&row.session_id) {
                let view = crate::approvals::session_view(&state, &tenant, &row.session_id).await;
                sessions.insert(row.session_id.clone(), view);
            }
            let session = sessions.get(&row.session_id).and_then(Option::as_ref);
            crate::approvals::scope_offer(&state, &row, session).flatten()
        };
        views.push(ApprovalView {
            kind: if question.is_some() { "question" } else { "approval" },
            question,
            scope,
            row,
        });
    }
    Ok(Json(views))
}

/// A person's decision.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
#[schema(example = json!({"decision": {"kind": "allow_always", "argument_prefix": "cargo test"}}))]
pub struct DecideApproval {
    /// `{"kind": "allow_once" | "allow_session" | "deny"}`, `{"kind": "allow_always",
    /// "argument_prefix": "cargo test"}` or `{"kind": "deny_with_message", "message": "…"}`; for
    /// a question, `{"kind": "answer", "answer": {"choices": ["…"], "text": "…"}}` (a denial
    /// declines it).
    #[serde(deserialize_with = "crate::error::object_required")]
    pub decision: Decision,
    /// Ignored: who decided is the deciding key (`TENANT/ROLE/NAME`), recorded in the journal as
    /// `decided_by`; a request cannot claim to be someone else.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub by: Option<String>,
    /// Where the person decided, for the record: `decided_by` becomes `KEY via VIA` (the terminal
    /// app's inbox sends `terminal`). A lower-case word.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 32, pattern = r"^[a-z][a-z0-9-]*$")]
    pub via: Option<String>,
}

/// Decides a pending approval: the waiting call runs or is denied at once.
#[utoipa::path(post, path = "/v1/approvals/{id}", tag = "approvals", params(("id" = String, Path)),
    request_body = DecideApproval,
    responses((status = 200, body = DecisionOutcome), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "agent keys may not decide"), (status = 404, body = ErrorBody),
        (status = 415, body = ErrorBody)))]
async fn decide_approval(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<DecideApproval>,
) -> Result<Json<DecisionOutcome>, ApiError> {
    if let Some(by) = &request.by {
        check_text("by", by, 200)?;
    }
    let via = match request.via {
        Some(via) => crate::approvals::Via::client(via)?,
        None => crate::approvals::Via::Api,
    };
    let outcome = crate::approvals::decide(&state, &principal, &id, request.decision, via).await?;
    Ok(Json(outcome))
}

/// Which remembered decisions to list.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RememberedQuery {
    /// Only this project's.
    #[serde(default)]
    pub project: Option<String>,
}

/// "Always allow" decisions of the tenant.
#[utoipa::path(get, path = "/v1/remembered", tag = "approvals", params(RememberedQuery),
    responses((status = 200, body = Vec<RememberedDecision>)))]
async fn list_remembered(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Query(query): Query<RememberedQuery>,
) -> Result<Json<Vec<RememberedDecision>>, ApiError> {
    Ok(Json(state.journal.remembered(&tenant, query.project.as_deref()).await?))
}

/// Revokes an "always allow" decision.
#[utoipa::path(delete, path = "/v1/remembered/{id}", tag = "approvals", params(("id" = String, Path)),
    responses((status = 204), (status = 403, body = ErrorBody, description = "the key's role may not decide approvals"),
        (status = 404, body = ErrorBody)))]
async fn revoke_remembered(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    principal.must_decide(state.args.agent_keys_decide)?;
    let tenant = principal.tenant;
    if state.journal.revoke(&tenant, &id).await? {
        tracing::info!(event = "rule.revoked", tenant = %tenant, rule = %id, by = %principal.id, "an \"always allow\" rule was revoked");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("remembered decision", &id))
    }
}

// ---------------------------------------------------------------- memories

/// Whose memories, and which.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MemoryQuery {
    /// The person (default: the key's own; another person's needs an approver key; on an open
    /// server, `local` by default).
    #[serde(default)]
    #[param(min_length = 1, max_length = 200, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub person: Option<String>,
    /// Words to look for (best first); without, the newest first.
    #[serde(default)]
    #[param(max_length = 500, pattern = r"^[^\u0000-\u001F\u007F-\u009F]*$")]
    pub query: Option<String>,
    /// Only this category (`identity`, `preferences`, `experiences`, `notes`).
    #[serde(default)]
    pub category: Option<String>,
    /// How many (default 100; 0 counts as 1).
    #[serde(default)]
    #[param(minimum = 0, maximum = 1000)]
    pub limit: Option<u32>,
}

/// A memory, as people see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct MemoryView {
    /// Its id.
    pub id: String,
    /// Whose it is.
    pub person: String,
    /// Its category.
    pub category: String,
    /// Its title.
    pub title: String,
    /// What is remembered.
    pub content: String,
    /// The project it is tied to, if any.
    pub project: Option<String>,
    /// When it was made (Unix milliseconds).
    pub created_at: i64,
    /// When it last changed.
    pub updated_at: i64,
}

impl From<tool_core::storage::Record> for MemoryView {
    fn from(record: tool_core::storage::Record) -> Self {
        Self {
            id: record.id,
            person: record.owner.person,
            category: record.tag,
            title: record.title,
            content: record.body,
            project: record.project,
            created_at: record.created_at,
            updated_at: record.updated_at,
        }
    }
}

/// Whose memories a request may see: a key's own person; another's only with a key that decides
/// approvals; agent keys none (they act for whoever their sessions name, not a person).
fn memory_owner(principal: &Principal, asked: Option<&str>) -> Result<tool_core::storage::Owner, ApiError> {
    let forbidden = |message: String| ApiError::new(StatusCode::FORBIDDEN, "forbidden", message);
    let person = match (principal.person(), asked) {
        (None, asked) => asked.unwrap_or("local").to_owned(),
        (Some(own), None) => own.to_owned(),
        (Some(own), Some(asked)) if asked == own => own.to_owned(),
        (Some(_), Some(asked)) if principal.role == crate::auth::Role::Approver => asked.to_owned(),
        (Some(own), Some(asked)) => {
            return Err(forbidden(format!(
                "`{own}` may see only their own memories, not `{asked}`'s; an approver key may see anyone's"
            )));
        }
    };
    if principal.role == crate::auth::Role::Agent && principal.person().is_some() {
        return Err(forbidden(
            "an agent key may not read or change memories; use a person or approver key".into(),
        ));
    }
    check_text("person", &person, 200)?;
    Ok(tool_core::storage::Owner { tenant: principal.tenant.clone(), person })
}

fn storage_error(error: tool_core::storage::StorageError) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage", error.to_string())
}

/// A person's memories (what the memory tool keeps about them), newest first or by a search.
#[utoipa::path(get, path = "/v1/memories", tag = "memories", params(MemoryQuery),
    responses((status = 200, body = Vec<MemoryView>), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody)))]
async fn list_memories(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Query(query): Query<MemoryQuery>,
) -> Result<Json<Vec<MemoryView>>, ApiError> {
    let owner = memory_owner(&principal, query.person.as_deref())?;
    if query.limit.is_some_and(|limit| limit > 1000) {
        return Err(ApiError::bad_request("limit must be at most 1000"));
    }
    let text = query.query.filter(|q| !q.trim().is_empty());
    if let Some(text) = &text {
        check_text("query", text, 500)?;
    }
    let found = state
        .records
        .find_records(tool_core::storage::RecordQuery {
            collection: builtin_tool_memory::COLLECTION.into(),
            owner,
            project: tool_core::storage::ProjectScope::Any,
            tag: query.category,
            text,
            limit: query.limit.unwrap_or(100).max(1),
        })
        .await
        .map_err(storage_error)?;
    Ok(Json(found.into_iter().map(|hit| MemoryView::from(hit.record)).collect()))
}

/// One memory.
#[utoipa::path(get, path = "/v1/memories/{id}", tag = "memories", params(("id" = String, Path), MemoryQuery),
    responses((status = 200, body = MemoryView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn get_memory(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<MemoryQuery>,
) -> Result<Json<MemoryView>, ApiError> {
    let owner = memory_owner(&principal, query.person.as_deref())?;
    match state
        .records
        .get_record(&owner, builtin_tool_memory::COLLECTION, &id)
        .await
        .map_err(storage_error)?
    {
        Some(record) => Ok(Json(MemoryView::from(record))),
        None => Err(ApiError::not_found("memory", &id)),
    }
}

/// Forgets a memory.
#[utoipa::path(delete, path = "/v1/memories/{id}", tag = "memories", params(("id" = String, Path), MemoryQuery),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn remove_memory(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
    Query(query): Query<MemoryQuery>,
) -> Result<StatusCode, ApiError> {
    let owner = memory_owner(&principal, query.person.as_deref())?;
    if state
        .records
        .remove_record(&owner, builtin_tool_memory::COLLECTION, &id)
        .await
        .map_err(storage_error)?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::not_found("memory", &id))
    }
}

// ---------------------------------------------------------------- knowledge bases

/// A knowledge base to add (or to sync, when the person already has one by that name).
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AddKnowledgeBase {
    /// Its name: 1 to 64 letters, digits, `-`, `_` or `.`.
    #[schema(min_length = 1, max_length = 64, pattern = r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,63}$")]
    pub name: String,
    /// Absolute paths of folders and files inside the tenant's workspace roots or granted paths.
    #[schema(min_items = 1, max_items = 64)]
    pub paths: Vec<String>,
    /// Share it with the whole tenant (approver keys only).
    #[serde(default)]
    pub shared: bool,
}

/// A knowledge base, as people see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct KnowledgeBaseView {
    /// Its name.
    pub name: String,
    /// Whose it is; none when shared with the tenant.
    pub person: Option<String>,
    /// Where it was added from.
    pub roots: Vec<String>,
    /// How many sources.
    pub sources: u64,
    /// How many passages.
    pub chunks: u64,
    /// The size of its text in bytes.
    pub bytes: u64,
    /// When it was last synchronised (Unix milliseconds).
    pub updated_at: i64,
}

impl From<tool_core::knowledge::KnowledgeBase> for KnowledgeBaseView {
    fn from(base: tool_core::knowledge::KnowledgeBase) -> Self {
        Self {
            name: base.name,
            person: base.person,
            roots: base.roots,
            sources: base.sources,
            chunks: base.chunks,
            bytes: base.bytes,
            updated_at: base.updated_at,
        }
    }
}

/// A file an add left out, and why.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedView {
    /// Its path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What an add did.
#[derive(Debug, Serialize, ToSchema)]
pub struct AddReportView {
    /// The base as it now stands.
    pub base: KnowledgeBaseView,
    /// Sources new to it.
    pub added: usize,
    /// Sources whose content changed.
    pub changed: usize,
    /// Sources unchanged (by content hash).
    pub unchanged: usize,
    /// Sources no longer found, removed.
    pub removed: usize,
    /// Files left out (binary, oversized, unreadable, links).
    pub skipped: Vec<SkippedView>,
}

/// Which base a removal names.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct KnowledgeBaseQuery {
    /// The tenant's shared base of that name (approver keys only), not the person's own.
    #[serde(default)]
    pub shared: Option<bool>,
}

/// Whose bases a request acts on: a person key's person (`local` without keys); agent keys none.
fn knowledge_person(principal: &Principal) -> Result<String, ApiError> {
    if principal.role == crate::auth::Role::Agent && principal.person().is_some() {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "an agent key may not add or remove knowledge bases; use a person or approver key",
        ));
    }
    Ok(principal.person().unwrap_or("local").to_owned())
}

/// The tenant's workspace roots and granted paths: where its knowledge bases may come from.
fn tenant_folders(state: &AppState, tenant: &str) -> Vec<std::path::PathBuf> {
    let roots =
        state.args.workspace_roots.iter().filter(|root| root.admits(tenant)).map(|root| root.path.clone());
    let granted = state
        .args
        .tenant_paths
        .iter()
        .filter(|granted| granted.admits(tenant))
        .map(|granted| granted.root.path.clone());
    roots.chain(granted).collect()
}

/// The knowledge bases the key's person searches (their own and the tenant's shared ones; an
/// approver key sees all of the tenant's).
#[utoipa::path(get, path = "/v1/knowledge-bases", tag = "knowledge-bases",
    responses((status = 200, body = Vec<KnowledgeBaseView>), (status = 403, body = ErrorBody)))]
async fn list_knowledge_bases(
    State(state): State<Arc<AppState>>,
    principal: Principal,
) -> Result<Json<Vec<KnowledgeBaseView>>, ApiError> {
    let person = knowledge_person(&principal)?;
    let everyone = principal.role == crate::auth::Role::Approver && principal.person().is_some();
    let bases = state
        .knowledge
        .list_bases(&principal.tenant, if everyone { None } else { Some(&person) })
        .await
        .map_err(storage_error)?;
    Ok(Json(bases.into_iter().map(KnowledgeBaseView::from).collect()))
}

/// Adds a knowledge base from folders and files inside the tenant's roots, or syncs it (only
/// changed files are read again).
#[utoipa::path(post, path = "/v1/knowledge-bases", tag = "knowledge-bases", request_body = AddKnowledgeBase,
    responses((status = 200, body = AddReportView), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody), (status = 503, body = ErrorBody)))]
async fn add_knowledge_base(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Json(request): Json<AddKnowledgeBase>,
) -> Result<Json<AddReportView>, ApiError> {
    let person = knowledge_person(&principal)?;
    let forbidden = |message: String| ApiError::new(StatusCode::FORBIDDEN, "forbidden", message);
    if request.shared && principal.role != crate::auth::Role::Approver {
        return Err(forbidden("only an approver key may share a knowledge base with the tenant".into()));
    }
    if !builtin_tool_knowledge_base::ingest::valid_name(&request.name) {
        return Err(ApiError::bad_request(format!(
            "`{}` cannot name a knowledge base: use 1 to 64 letters, digits, `-`, `_` or `.`",
            request.name
        )));
    }
    if request.paths.is_empty() || request.paths.len() > 64 {
        return Err(ApiError::bad_request("give 1 to 64 paths"));
    }
    for path in &request.paths {
        check_text("paths", path, 4096)?;
        if !std::path::Path::new(path).is_absolute() {
            return Err(ApiError::bad_request(format!("`{path}` is not an absolute path")));
        }
    }
    // `add_base` resolves each path, refuses one outside these folders (a link inside them
    // included), and opens every file beneath a handle on its folder.
    let within = tenant_folders(&state, &principal.tenant);
    if within.is_empty() {
        // With no folder of its own, a tenant adds from nowhere (an empty list would let each
        // path be its own boundary).
        return Err(forbidden(
            "your tenant has no workspace roots or granted paths to add knowledge bases from".into(),
        ));
    }
    let roots = request.paths.clone();
    let base = tool_core::knowledge::NewBase {
        tenant: principal.tenant.clone(),
        person: (!request.shared).then_some(person),
        name: request.name,
        roots,
        embedding_model: None,
    };
    let limits = builtin_tool_knowledge_base::ingest::AddLimits::default();
    let embedder = state.embedder.as_deref();
    let report = builtin_tool_knowledge_base::ingest::add_base(
        state.knowledge.as_ref(),
        base,
        // The server's own files and the operator's denied paths are never read, even inside a
        // tenant's folder.
        Some(builtin_tool_knowledge_base::ingest::Within {
            folders: &within,
            protected: &state.sandboxing.deny_read,
        }),
        limits,
        embedder,
    )
    .await
    .map_err(|error| match error {
        builtin_tool_knowledge_base::ingest::AddError::Storage(error) => storage_error(error),
        builtin_tool_knowledge_base::ingest::AddError::Outside(path) => ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!(
                "`{path}` is outside your tenant's workspace roots and granted paths: knowledge bases are \
                     added from inside them"
            ),
        ),
        builtin_tool_knowledge_base::ingest::AddError::Embedding(error) => {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "embeddings", error.to_string())
        }
        other => ApiError::bad_request(other.to_string()),
    })?;
    Ok(Json(AddReportView {
        base: report.base.into(),
        added: report.added,
        changed: report.changed,
        unchanged: report.unchanged,
        removed: report.removed,
        skipped: report.skipped.into_iter().map(|s| SkippedView { path: s.path, reason: s.reason }).collect(),
    }))
}

/// Removes a knowledge base (the files stay): the key's person's own, or with `shared=true` the
/// tenant's shared one (approver keys only).
#[utoipa::path(delete, path = "/v1/knowledge-bases/{name}", tag = "knowledge-bases",
    params(("name" = String, Path), KnowledgeBaseQuery),
    responses((status = 204), (status = 400, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)))]
async fn remove_knowledge_base(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(name): Path<String>,
    Query(query): Query<KnowledgeBaseQuery>,
) -> Result<StatusCode, ApiError> {
    let person = knowledge_person(&principal)?;
    let shared = query.shared.unwrap_or(false);
    if shared && principal.role != crate::auth::Role::Approver {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "only an approver key may remove a shared knowledge base",
        ));
    }
    let bases = state.knowledge.list_bases(&principal.tenant, Some(&person)).await.map_err(storage_error)?;
    let found = bases.into_iter().find(|base| base.name == name && base.person.is_none() == shared);
    match found {
        Some(base)
            if state.knowledge.remove_base(&principal.tenant, &base.id).await.map_err(storage_error)? =>
        {
            Ok(StatusCode::NO_CONTENT)
        }
        _ => Err(ApiError::not_found("knowledge base", &name)),
    }
}

// ---------------------------------------------------------------- documents

/// A document the model wrote, as people see it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DocumentView {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// `session` or `project`.
    pub scope: String,
    /// Its size in bytes.
    pub bytes: usize,
    /// When it last changed (Unix milliseconds).
    pub updated_at: i64,
    /// Its text (only when one document is asked for).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A session's documents (its own and its project's, newest first), for a caller who may see
/// them: the session's person, or a key that decides approvals for the tenant (as for memories).
async fn session_documents(
    state: &AppState,
    principal: &Principal,
    id: &str,
) -> Result<Vec<tool_core::storage::Record>, ApiError> {
    let entry = state.session(&principal.tenant, id).await?;
    let person = entry.view.user_id.clone().unwrap_or_else(|| "local".into());
    let allowed = match principal.person() {
        None => true,
        Some(own) => own == person || principal.role == crate::auth::Role::Approver,
    };
    if !allowed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("this session's documents are `{person}`'s; their key or an approver key may read them"),
        ));
    }
    let owner = tool_core::storage::Owner { tenant: principal.tenant.clone(), person };
    let project = entry
        .view
        .working_directory
        .as_deref()
        .map(|dir| computer_runtime::scope::project_of(std::path::Path::new(dir)));
    builtin_tool_documents::visible_documents(state.records.as_ref(), &owner, id, project.as_deref())
        .await
        .map_err(storage_error)
}

fn document_view(record: tool_core::storage::Record, with_content: bool) -> DocumentView {
    DocumentView {
        id: record.id,
        name: record.title,
        scope: record.tag,
        bytes: record.body.len(),
        updated_at: record.updated_at,
        content: with_content.then_some(record.body),
    }
}

/// A rewind: the call to put the session's files back to before.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RewindRequest {
    /// The call (its id): files go back to what they were before it, and every later call that
    /// changed files is undone too. Without it, the session's last call that changed files.
    #[serde(default)]
    #[schema(min_length = 1, max_length = 256)]
    pub to_call: Option<String>,
    /// Overwrite files changed since the last call (otherwise such a rewind answers 409).
    #[serde(default)]
    pub force: bool,
}

/// One file a rewind left as it was.
#[derive(Debug, Serialize, ToSchema)]
pub struct SkippedFile {
    /// The path (relative to the session's folder).
    pub path: String,
    /// Why.
    pub reason: String,
}

/// What a rewind did.
#[derive(Debug, Serialize, ToSchema)]
pub struct RewindView {
    /// The call rewound to (its files are as before it).
    pub to_call: String,
    /// The calls undone (their journal rows are `compensated`), oldest first.
    pub undone: Vec<String>,
    /// Files written back.
    pub restored: Vec<String>,
    /// Files removed (the undone calls made them).
    pub removed: Vec<String>,
    /// Files left as they are.
    pub skipped: Vec<SkippedFile>,
    /// Files that could not be put back (then the calls are not marked undone: send it again).
    pub failed: Vec<SkippedFile>,
}

fn checkpoint_error(error: checkpoints::CheckpointError) -> ApiError {
    match error {
        checkpoints::CheckpointError::NotFound(message) => {
            ApiError::new(StatusCode::NOT_FOUND, "not_found", message)
        }
        checkpoints::CheckpointError::Files(message) => {
            ApiError::new(StatusCode::CONFLICT, "conflict", message)
        }
        other => {
            tracing::error!(error = %other, "a rewind failed");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the rewind failed; see the server's log",
            )
        }
    }
}

/// Puts a session's files back to before one of its calls (files created since removed, deleted
/// ones restored, changed ones put back) and marks the undone calls `compensated`. A file changed
/// since the last call is not overwritten unless `force`. For sessions that run on the server,
/// by the session's person or an approver key; a device rewinds its own machine.
#[utoipa::path(post, path = "/v1/sessions/{id}/rewind", tag = "sessions", params(("id" = String, Path)),
    request_body = RewindRequest,
    responses((status = 200, body = RewindView), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody, description = "only the session's person or an approver may rewind"),
        (status = 404, body = ErrorBody), (status = 409, body = ErrorBody, description = "files changed since (send force), or the session runs on a device"),
        (status = 413, body = ErrorBody), (status = 415, body = ErrorBody)))]
async fn rewind_session(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
    Json(request): Json<RewindRequest>,
) -> Result<Json<RewindView>, ApiError> {
    let entry = state.session(&principal.tenant, &id).await?;
    let person = entry.view.user_id.clone().unwrap_or_else(|| "local".into());
    let allowed = match principal.person() {
        None => true,
        Some(own) => {
            principal.role == crate::auth::Role::Approver
                || (own == person && principal.role != crate::auth::Role::Agent)
        }
    };
    if !allowed {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            format!("only `{person}`'s person key or an approver key may rewind this session"),
        ));
    }
    if entry.view.runs_on != RunsOn::Server {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            "this session runs on a device, which keeps its own checkpoints: rewind it there (`toolhost rewind`)",
        ));
    }
    let (Some(store), Some(folder)) =
        (state.checkpoints.clone(), entry.session.config.working_directory.clone())
    else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server keeps no checkpoints for the session",
        ));
    };
    let opener = computer_runtime::beneath::Opener::new(entry.session.file_boundary());
    let session_id = id.clone();
    let to_call = request.to_call.clone();
    let force = request.force;
    let (plan, applied) = tokio::task::spawn_blocking(move || {
        let plan = checkpoints::plan(&store, &opener, &folder, &session_id, to_call.as_deref())?;
        let conflicts: Vec<String> = plan.conflicts().map(|r| r.path.clone()).collect();
        if !conflicts.is_empty() && !force {
            return Ok(Err(conflicts));
        }
        let applied = checkpoints::apply(&store, &opener, &folder, &plan, force)?;
        Ok(Ok((plan, applied)))
    })
    .await
    .map_err(|_| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", "the rewind failed"))?
    .map_err(checkpoint_error)?
    .map_err(|conflicts| {
        ApiError::new(
            StatusCode::CONFLICT,
            "conflict",
            format!(
                "{} changed since the last call; send \"force\": true to overwrite",
                conflicts.join(", ")
            ),
        )
    })?;
    checkpoints::journal_rewind(state.journal.as_ref(), &principal.tenant, &plan, &applied, &principal.id)
        .await
        .map_err(|error| {
            tracing::error!(%error, "the rewind was not journalled");
            ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal",
                "the files were put back, but the journal could not record it",
            )
        })?;
    Ok(Json(RewindView {
        to_call: plan.to_call,
        undone: plan.calls,
        restored: applied.restored,
        removed: applied.removed,
        skipped: applied.skipped.into_iter().map(|(path, reason)| SkippedFile { path, reason }).collect(),
        failed: applied.failed.into_iter().map(|(path, reason)| SkippedFile { path, reason }).collect(),
    }))
}

/// The documents the model wrote in a session (and its project's).
#[utoipa::path(get, path = "/v1/sessions/{id}/documents", tag = "sessions", params(("id" = String, Path)),
    responses((status = 200, body = Vec<DocumentView>), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn list_documents(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path(id): Path<String>,
) -> Result<Json<Vec<DocumentView>>, ApiError> {
    let records = session_documents(&state, &principal, &id).await?;
    Ok(Json(records.into_iter().map(|r| document_view(r, false)).collect()))
}

/// One document with its text.
#[utoipa::path(get, path = "/v1/sessions/{id}/documents/{document}", tag = "sessions",
    params(("id" = String, Path), ("document" = String, Path, description = "its id or name")),
    responses((status = 200, body = DocumentView), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)))]
async fn get_document(
    State(state): State<Arc<AppState>>,
    principal: Principal,
    Path((id, document)): Path<(String, String)>,
) -> Result<Json<DocumentView>, ApiError> {
    let records = session_documents(&state, &principal, &id).await?;
    records
        .into_iter()
        .find(|r| r.id == document || r.title == document)
        .map(|r| Json(document_view(r, true)))
        .ok_or_else(|| ApiError::not_found("document", &document))
}

// ---------------------------------------------------------------- journal

/// Which calls to list (newest first).
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct JournalQuery {
    /// Only this session.
    #[serde(default)]
    pub session_id: Option<String>,
    /// Only this status.
    #[serde(default)]
    #[param(value_type = Option<AttemptStatus>)]
    pub status: Option<String>,
    /// Only this tool.
    #[serde(default)]
    pub tool: Option<String>,
    /// Proposed at or after (Unix milliseconds).
    #[serde(default)]
    pub since: Option<i64>,
    /// Proposed before (Unix milliseconds).
    #[serde(default)]
    pub until: Option<i64>,
    /// Only calls decided this way (`policy`, `allow_once`, `deny`, `headless_block`…).
    #[serde(default)]
    pub decision: Option<String>,
    /// Only this agent's calls (the session's `agent_id`).
    #[serde(default)]
    pub agent_id: Option<String>,
    /// The page after this row: its `attempted_at` (with `after_key`), from the last row of the
    /// page before; alone, the calls older than this time.
    #[serde(default)]
    pub after_at: Option<i64>,
    /// The page after this row: its `key` (alone, the row is looked up; none after a row that is
    /// not there).
    #[serde(default)]
    pub after_key: Option<String>,
    /// At most this many (default 100, at most 1000).
    #[serde(default)]
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// Journalled calls of the tenant, newest first (by time, then key); page with `after_at` and
/// `after_key` from the last row of a page.
#[utoipa::path(get, path = "/v1/journal", tag = "journal", params(JournalQuery),
    responses((status = 200, body = Vec<Attempt>), (status = 400, body = ErrorBody)))]
async fn list_journal(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Query(query): Query<JournalQuery>,
) -> Result<Json<Vec<Attempt>>, ApiError> {
    let status = match query.status.as_deref() {
        None => None,
        Some(text) => Some(AttemptStatus::parse(text).ok_or_else(|| {
            ApiError::bad_request(format!(
                "unknown status `{text}`; use proposed, executed, confirmed, compensated, failed, blocked, denied \
                 or abandoned"
            ))
        })?),
    };
    let limit = query.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request(format!("limit must be 1 to 1000 (got {limit})")));
    }
    let after = match (query.after_at, query.after_key) {
        (Some(at), Some(key)) => Some((at, key)),
        // Only a time: the calls older than it.
        (Some(at), None) => Some((at, String::new())),
        // Only a row: the calls after it (none after a row that is not there).
        (None, Some(key)) => match state.journal.get(&tenant, &key).await? {
            Some(row) => Some((row.attempted_at, row.key)),
            None => return Ok(Json(Vec::new())),
        },
        (None, None) => None,
    };
    let filter = AttemptFilter {
        session_id: query.session_id,
        status,
        tool: query.tool,
        since: query.since,
        until: query.until,
        decision: query.decision,
        agent_id: query.agent_id,
        after,
        limit: Some(limit),
    };
    Ok(Json(state.journal.query(&tenant, &filter).await?))
}

/// One call's whole record, by its key (`message_id:call_id`, or the call id alone).
#[utoipa::path(get, path = "/v1/journal/{key}", tag = "journal", params(("key" = String, Path)),
    responses((status = 200, body = Attempt), (status = 404, body = ErrorBody)))]
async fn get_attempt(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(key): Path<String>,
) -> Result<Json<Attempt>, ApiError> {
    load_attempt(&state, &tenant, &key).await.map(Json)
}

async fn load_attempt(state: &AppState, tenant: &str, key: &str) -> Result<Attempt, ApiError> {
    state.journal.get(tenant, key).await?.ok_or_else(|| ApiError::not_found("journalled call", key))
}

/// Marks an executed call confirmed: the model has seen its result.
#[utoipa::path(post, path = "/v1/journal/{key}/confirm", tag = "journal", params(("key" = String, Path)),
    responses((status = 200, body = Attempt), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
async fn confirm_attempt(
    State(state): State<Arc<AppState>>,
    Tenant(tenant): Tenant,
    Path(key): Path<String>,
) -> Result<Json<Attempt>, ApiError> {
    let attempt = load_attempt(&state, &tenant, &key).await?;
    if attempt.status != AttemptStatus::Executed && attempt.status != AttemptStatus::Confirmed {
        return Err(ApiError::conflict(format!(
            "call `{key}` is {}; only executed calls can be confirmed",
            attempt.status.as_str()
        )));
    }
    state.journal.confirm(&tenant, &key).await?;
    load_attempt(&state, &tenant, &key).await.map(Json)
}

// ---------------------------------------------------------------- devices, health, metrics

/// The tenant's client executors connected to this instance.
#[utoipa::path(get, path = "/v1/devices", tag = "devices",
    responses((status = 200, body = Vec<DeviceInfo>)))]
async fn list_devices(State(state): State<Arc<AppState>>, Tenant(tenant): Tenant) -> Json<Vec<DeviceInfo>> {
    Json(state.devices.list(&tenant))
}

/// Liveness.
#[utoipa::path(get, path = "/healthz", tag = "health", security(()), responses((status = 200, description = "alive")))]
async fn health() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Readiness, within a second: 200 when every part a request needs answers, else 503 naming the
/// parts that fail (`draining`, `database`, `redis`, `disk`) and why.
#[utoipa::path(get, path = "/readyz", tag = "health", security(()),
    responses((status = 200, description = "ready"), (status = 503, description = "not ready: `failing` names the parts")))]
async fn ready(State(state): State<Arc<AppState>>) -> Response {
    let checks = crate::ready::check(&state).await;
    let failing: Vec<&crate::ready::Check> = checks.iter().filter(|check| !check.ok).collect();
    // A tenant whose pool is full waits behind itself; say so, without naming tenants to a probe.
    let starved = state.limits.starved().len();
    // What holds commands in, as the start-up log says it.
    let groups = state.computer.limits();
    let body = json!({
        "status": if failing.is_empty() { "ready" } else { "not_ready" },
        "failing": failing.iter().map(|check| json!({"part": check.part, "detail": check.detail})).collect::<Vec<_>>(),
        "checks": checks,
        "instance_id": state.instance_id,
        "events": state.bus.transport().as_str(),
        "starved_tenant_pools": starved,
        "sandbox": state.computer.sandbox().support().to_string(),
        "command_limits": {"mechanism": groups.mechanism(), "detail": groups.describe()},
    });
    if failing.is_empty() {
        axum::Json(body).into_response()
    } else {
        let mut answer = (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
        answer.headers_mut().insert(axum::http::header::RETRY_AFTER, 5u64.into());
        answer
    }
}

/// Prometheus metrics.
///
/// With keys it takes an operator key (the numbers span tenants: their names, their calls). An
/// operator who scrapes without a key serves them on an address of their own (`--metrics-listen`).
#[utoipa::path(get, path = "/metrics", tag = "health",
    responses((status = 200, description = "Prometheus text format", content_type = "text/plain"),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody, description = "not an operator key")))]
async fn metrics(State(state): State<Arc<AppState>>, caller: Principal) -> Result<Response, ApiError> {
    caller.must_operate()?;
    Ok(metrics_text(&state).into_response())
}

/// The metrics as Prometheus text, for either address.
pub fn metrics_text(state: &AppState) -> impl IntoResponse + use<> {
    let gauges = crate::metrics::Gauges {
        pending_approvals: state.broker.pending_by_tenant(),
        sessions: state.session_count(),
        connections: state.connections().map(|tracker| {
            (
                tracker.open(),
                tracker.evicted.load(std::sync::atomic::Ordering::Relaxed),
                tracker.timed_out.load(std::sync::atomic::Ordering::Relaxed),
            )
        }),
        outbox: state.executor.outbox().len(),
        journal_down: state.executor.journal_health().is_down(),
        events_dropped: state.bus.dropped.load(std::sync::atomic::Ordering::Relaxed),
    };
    let mut text = state.metrics.render(&gauges);
    let starved = state.limits.starved().len();
    text.push_str(
        "# HELP toolhost_tenants_starved Tenants whose pool of tool runs on this machine is fully in use.\n",
    );
    text.push_str("# TYPE toolhost_tenants_starved gauge\n");
    text.push_str(&format!("toolhost_tenants_starved {starved}\n"));
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
