//! Toolhost over MCP: every tool of a session served to an MCP client, each call through the one
//! pipeline (approvals, timeouts, journal); and, with feature `client`, MCP servers mounted as
//! Toolhost tools ([`client`]).
//!
//! The only crate that sees `rmcp`'s types; an app gives it a [`Backend`] that opens a Toolhost
//! session for each MCP connection, and serves it over stdio ([`serve_stdio`]) or streamable HTTP
//! ([`router`], nested in the app's axum router).
//!
//! * The tool list is the session's toolbox at run time: function names as the pipeline resolves
//!   them, input schemas in the MCP projection (`tool_core::provider::mcp_tool`), annotations
//!   from the tier (`readOnlyHint`, `destructiveHint`, `idempotentHint`, `openWorldHint`).
//! * A connection is a session, opened on its first request: the backend picks its working
//!   directory from the client's roots or its own configuration and checks it like any session's;
//!   never from tool arguments. Every later request must satisfy `Backend::admits` (over HTTP: the
//!   same tenant), and every call runs through `Backend::run`, within the app's budgets.
//! * A call's `content` comes back as a text block (the result the model reads: no
//!   `structuredContent`, which clients such as Claude Code and Codex would show the model in its
//!   place), its `state` as `_meta["toolhost/state"]`, its status as `isError`; a mounted server's
//!   own structured content passes through; the pipeline's progress events become progress notifications when the client
//!   asked for them with a progress token; a cancellation notification cancels that one call.
//! * When the pipeline must ask about a call, a client that can be asked (MCP elicitation) is
//!   asked, through the [`Elicitation`] broker the app gives its pipeline; other questions go where
//!   the app's broker sends them (the approvals API, a terminal), or are blocked.

#![deny(missing_docs)]

#[cfg(feature = "client")]
pub mod client;
mod elicit;

pub use elicit::Elicitation;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use futures::future::BoxFuture;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams,
    GetPromptResponse, GetPromptResult, Implementation, InputRequiredResult, ListPromptsResult,
    ListResourceTemplatesResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams,
    ProgressNotificationParam, Prompt, PromptArgument, PromptMessage, ReadResourceRequestParams,
    ReadResourceResponse, ReadResourceResult, Resource, ResourceContents, ResourceTemplate, Role,
    ServerCapabilities, ServerConfig, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{Value, json};
use tool_core::{Tier, TierSpec};
use tool_executor::{Batch, CallResult, Event, Executor, RawCall, Session};

/// What a connection asks of the backend when it opens.
#[derive(Debug, Clone, Default)]
pub struct OpenRequest {
    /// The HTTP request that carried the first message (headers, the app's extensions such as
    /// the authenticated tenant); `None` over stdio.
    pub http: Option<http::request::Parts>,
    /// The folders the client offered as roots (`file://` URIs turned into paths).
    pub roots: Vec<PathBuf>,
    /// The client's name and version, as it introduced itself.
    pub client: Option<String>,
    /// Whether the pipeline's questions about this connection's calls go to its client (MCP
    /// elicitation): the backend offers an [`Elicitation`] broker and the client can be asked.
    /// When it cannot, no person is reachable through this connection.
    pub elicits: bool,
}

/// An open Toolhost session for one MCP connection.
#[derive(Clone)]
pub struct Opened {
    /// The pipeline.
    pub executor: Executor,
    /// The session its calls belong to.
    pub session: Arc<Session>,
}

impl std::fmt::Debug for Opened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Opened").field("session", &self.session.id()).finish_non_exhaustive()
    }
}

/// Why a connection could not have a session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct OpenError(pub String);

/// The app's side: opens a session for each connection, and ends it when the connection goes.
pub trait Backend: Send + Sync + 'static {
    /// Opens the session of a new connection.
    fn open(&self, request: OpenRequest) -> BoxFuture<'static, Result<Opened, OpenError>>;

    /// Whether a later request of the connection may use its session: over HTTP, the request's
    /// credentials must belong to the session's tenant (a session id alone proves nothing).
    ///
    /// # Errors
    ///
    /// The reason it may not.
    fn admits(&self, opened: &Opened, http: Option<&http::request::Parts>) -> Result<(), OpenError>;

    /// Runs one batch of the session through the pipeline, within the app's budgets, to its end
    /// even if the client goes away.
    fn run(&self, opened: &Opened, batch: Batch) -> BoxFuture<'static, Result<Vec<CallResult>, OpenError>>;

    /// The connection is gone: end its session (its journal rows stay). A connection of the
    /// stateless protocol revision (2026-07-28) lives for one request.
    fn close(&self, opened: Opened) -> BoxFuture<'static, ()>;

    /// The broker the backend's pipeline asks through, when it is an [`Elicitation`]: the calls of
    /// clients that can be asked are routed through it to their handlers. `None` (the default):
    /// questions go wherever the pipeline's own broker sends them.
    fn elicitation(&self) -> Option<Arc<Elicitation>> {
        None
    }

    /// Whether the credentials of a request may answer approval forms (MCP elicitation), and as
    /// whom: `Some(who)` (recorded as `decided_by`, with the client's name; empty: the client's
    /// name alone), or `None` when they may only propose calls — their questions then go where the
    /// pipeline's broker sends them. By default anyone may (a local client, its own person).
    fn elicitor(&self, http: Option<&http::request::Parts>) -> Option<String> {
        let _ = http;
        Some(String::new())
    }
}

/// One MCP connection: a Toolhost session opened on its first request.
struct Connection {
    backend: Arc<dyn Backend>,
    opened: Arc<tokio::sync::OnceCell<Result<Opened, OpenError>>>,
    messages: AtomicU64,
    name: String,
    /// HTTP connections end their session when rmcp drops them; stdio ends it itself, awaited,
    /// before the process exits.
    close_on_drop: bool,
    /// A call parked for a retry keeps the session past this connection (and ends it itself).
    keep_session: std::sync::atomic::AtomicBool,
}

impl Drop for Connection {
    fn drop(&mut self) {
        if let Some(Ok(opened)) = self.opened.get()
            && let Some(elicitation) = self.backend.elicitation()
            && !self.keep_session.load(Ordering::Relaxed)
        {
            elicitation.forget(opened.session.id());
        }
        if self.close_on_drop
            && !self.keep_session.load(Ordering::Relaxed)
            && let Some(Ok(opened)) = self.opened.get()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(self.backend.close(opened.clone()));
        }
    }
}

impl Connection {
    fn new(backend: Arc<dyn Backend>, name: String, close_on_drop: bool) -> Self {
        Self {
            backend,
            opened: Arc::new(tokio::sync::OnceCell::new()),
            messages: AtomicU64::new(0),
            name,
            close_on_drop,
            keep_session: std::sync::atomic::AtomicBool::new(false),
        }
    }

    async fn opened(&self, context: &RequestContext<RoleServer>) -> Result<&Opened, McpError> {
        let opened = self
            .opened
            .get_or_init(|| async {
                let roots = roots_of(context).await;
                let http = context.extensions.get::<http::request::Parts>().cloned();
                let client = context
                    .peer
                    .peer_info()
                    .map(|info| format!("{} {}", info.client_info.name, info.client_info.version));
                let elicits = self.asking(context).is_some();
                self.backend.open(OpenRequest { http, roots, client, elicits }).await
            })
            .await;
        let opened = opened.as_ref().map_err(|e| McpError::invalid_request(e.0.clone(), None))?;
        self.backend
            .admits(opened, context.extensions.get::<http::request::Parts>())
            .map_err(|e| McpError::invalid_request(e.0, None))?;
        Ok(opened)
    }
}

/// The client's roots, when it declared the capability and answers. (Roots are deprecated by the
/// newest protocol revision; clients of the earlier ones, most of today's, still offer them.)
#[allow(deprecated)]
async fn roots_of(context: &RequestContext<RoleServer>) -> Vec<PathBuf> {
    let offers = context.peer.peer_info().is_some_and(|info| info.capabilities.roots.is_some());
    if !offers {
        return Vec::new();
    }
    let answer = tokio::time::timeout(std::time::Duration::from_secs(5), context.peer.list_roots()).await;
    match answer {
        Ok(Ok(result)) => result
            .roots
            .iter()
            .filter_map(|root| url::Url::parse(&root.uri).ok()?.to_file_path().ok())
            .collect(),
        _ => Vec::new(),
    }
}

/// Resources listed at most (a session's skills' files).
const MAX_LISTED_RESOURCES: usize = 1_000;

/// The MCP form of one API: the shared projection, with the hints MCP clients read.
fn tool_of(name: &str, title: &str, api: &tool_core::ApiSpec) -> Option<Tool> {
    let mut declared = tool_core::provider::mcp_tool(name, api);
    let tier = match &api.tier {
        TierSpec::Fixed(tier) => *tier,
        TierSpec::Computed(_) => Tier::Exec,
    };
    declared["title"] = json!(title);
    // A mounted tool's own annotations (kept by the projection) fill what Toolhost does not say;
    // the hints its approvals rest on are Toolhost's.
    let mut annotations = declared["annotations"].as_object().cloned().unwrap_or_default();
    annotations.entry("title").or_insert(json!(title));
    annotations.entry("idempotentHint").or_insert(json!(tier == Tier::Read));
    annotations.insert("readOnlyHint".into(), json!(tier == Tier::Read));
    annotations.insert("destructiveHint".into(), json!(tier != Tier::Read));
    annotations.insert("openWorldHint".into(), json!(api.open_world || tier == Tier::Exec));
    declared["annotations"] = Value::Object(annotations);
    serde_json::from_value(declared).ok()
}

impl ServerHandler for Connection {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(
            ServerCapabilities::builder()
                .enable_tools()
                .enable_tool_list_changed()
                .enable_prompts()
                .enable_resources()
                .build(),
        )
        .with_server_info(Implementation::new(self.name.clone(), env!("CARGO_PKG_VERSION")))
        .with_instructions(
            "Toolhost's tools. Every call passes Toolhost's approvals, sandbox and journal: a call that \
                 needs a person waits for one, or is blocked with the reason when none can be asked.",
        )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let opened = self.opened(&context).await?;
        let toolbox = opened.executor.toolbox();
        let names = &opened.session.names;
        let mut tools = Vec::new();
        for name in names.names() {
            // Deferred functions wait until `searchTools` finds them; hidden ones never show.
            if !opened.session.declares(name) {
                continue;
            }
            let Some((tool, api)) = names.resolve(name) else { continue };
            let Some(entry) = toolbox.tool(tool) else { continue };
            let Some(spec) = entry.manifest.find_api(api) else { continue };
            let title = format!("{}: {}", entry.manifest.meta.title, spec.name);
            if let Some(declared) = tool_of(name, &title, &opened.session.declared_api(spec)) {
                tools.push(declared);
            }
        }
        Ok(ListToolsResult::with_all_items(tools))
    }

    /// The session's skills' files, as resources at their `skill://` addresses.
    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let opened = self.opened(&context).await?;
        let skills = opened.session.config.skills.clone();
        let resources = tokio::task::spawn_blocking(move || {
            let mut out = Vec::new();
            for skill in skills.all() {
                let (files, _) = builtin_tool_skills::files(skill);
                for (path, size) in files {
                    let mut resource = Resource::new(
                        format!("skill://{}/{path}", skill.name),
                        format!("{}/{path}", skill.name),
                    );
                    resource.size = Some(size);
                    if path == "SKILL.md" {
                        resource.description = Some(skill.description.clone());
                    }
                    out.push(resource);
                    if out.len() >= MAX_LISTED_RESOURCES {
                        return out;
                    }
                }
            }
            out
        })
        .await
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        Ok(ListResourcesResult::with_all_items(resources))
    }

    /// What the session's addresses name: a skill's files, and a call's whole output.
    async fn list_resource_templates(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourceTemplatesResult, McpError> {
        let mut skill = ResourceTemplate::new("skill://{name}/{path}", "skill file");
        skill.description = Some("A file of one of this session's skills".into());
        let mut journal = ResourceTemplate::new("journal://{key}", "call output");
        journal.description =
            Some("The whole output of one of this session's calls (a cut output names its key)".into());
        Ok(ListResourceTemplatesResult::with_all_items(vec![skill, journal]))
    }

    /// Reads an address as `readFile` does (through the pipeline, so it is journalled).
    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let opened = self.opened(&context).await?.clone();
        let uri = request.uri.clone();
        if tool_core::urls::scheme_of(&uri).is_none() {
            return Err(McpError::resource_not_found(
                format!("`{uri}` is not one of this server's addresses (skill://…, journal://…)"),
                None,
            ));
        }
        let Some(read_file) = opened.session.names.name_of("local-system", "readFile").map(str::to_owned)
        else {
            return Err(McpError::resource_not_found(
                "resources are read through readFile, which this session does not have",
                None,
            ));
        };
        let n = self.messages.fetch_add(1, Ordering::Relaxed) + 1;
        // As readFile gives it: a long one ends with where to read on (never cut silently).
        let call = RawCall {
            id: format!("mcp-resource-{n}"),
            name: read_file,
            arguments: json!({"path": uri}).to_string(),
        };
        let batch = Batch { message_id: None, calls: vec![call], stopped_on_length: false };
        // Through the backend, as a call is: the tenant's limits, shutdown and metrics apply.
        let result = self
            .backend
            .run(&opened, batch)
            .await
            .map_err(|e| McpError::invalid_request(e.0, None))?
            .into_iter()
            .next()
            .ok_or_else(|| McpError::internal_error("the pipeline returned no result", None))?;
        if !result.output.success {
            return Err(McpError::resource_not_found(result.output.content, None));
        }
        Ok(ReadResourceResult::new(vec![ResourceContents::text(result.output.content, uri)]).into())
    }

    /// The session's skills a person may start, as prompts (their instructions, with what the
    /// person gives as `arguments`).
    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        let opened = self.opened(&context).await?;
        let prompts = opened
            .session
            .config
            .skills
            .all()
            .iter()
            .filter(|skill| skill.user_invocable)
            .map(|skill| {
                let mut argument = PromptArgument::new("arguments");
                argument.description = Some(skill.argument_hint.clone().map_or_else(
                    || "what the skill is to work on (optional)".to_owned(),
                    |hint| format!("what the skill is to work on: {hint}"),
                ));
                argument.required = Some(false);
                Prompt::new(&skill.name, Some(&skill.description), Some(vec![argument]))
            })
            .collect();
        Ok(ListPromptsResult::with_all_items(prompts))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let opened = self.opened(&context).await?;
        let skills = opened.session.config.skills.clone();
        let Some(skill) = skills.get(&request.name).filter(|skill| skill.user_invocable).cloned() else {
            return Err(McpError::invalid_params(format!("there is no prompt `{}`", request.name), None));
        };
        let arguments = request
            .arguments
            .as_ref()
            .and_then(|a| a.get("arguments"))
            .and_then(Value::as_str)
            .map(str::to_owned);
        let output =
            tokio::task::spawn_blocking(move || builtin_tool_skills::activate(&skill, arguments.as_deref()))
                .await
                .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        if !output.success {
            return Err(McpError::internal_error(output.content, None));
        }
        let description = skills.get(&request.name).map(|s| s.description.clone()).unwrap_or_default();
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(Role::User, output.content)])
            .with_description(description)
            .into())
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let version = |connection: &Self| match connection.opened.get() {
            Some(Ok(opened)) => opened.session.tools_version(),
            _ => 0,
        };
        let before = version(self);
        let peer = context.peer.clone();
        // The client's trace (`_meta.traceparent`), which the server's traces join.
        let span = tracing::info_span!(
            "mcp.call_tool",
            otel.name = %format!("tools/call {}", request.name),
            traceparent = tracing::field::Empty,
        );
        if let Some(traceparent) = context.meta.get_traceparent() {
            span.record("traceparent", traceparent);
        }
        let result = tracing::Instrument::instrument(self.run_tool(request, context), span).await;
        // Tool search declared more functions: the client lists them again.
        if version(self) != before {
            // A client that has left cannot be told; the call's result stands either way.
            let _ = peer.notify_tool_list_changed().await;
        }
        result
    }
}

impl Connection {
    async fn run_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let http = context.extensions.get::<http::request::Parts>();
        // The retry of a call that asked in rounds: the person's answer, then the call's result.
        if let Some(token) = request.request_state.clone() {
            let elicitation = self
                .backend
                .elicitation()
                .ok_or_else(|| McpError::invalid_params("this server keeps no request state", None))?;
            let who = self.backend.elicitor(http).ok_or_else(|| {
                McpError::invalid_request("these credentials may not answer approvals", None)
            })?;
            let taken = elicitation.take_if(&token, |parked| {
                self.backend.admits(&parked.opened, http)?;
                if parked.name != request.name {
                    return Err(OpenError(format!(
                        "this requestState belongs to a call of `{}`, not `{}`",
                        parked.name, request.name
                    )));
                }
                Ok(())
            });
            let mut parked = match taken {
                Ok(parked) => parked,
                Err(elicit::TakeError::Unknown) => {
                    return Err(McpError::invalid_params(
                        "unknown or expired requestState: call the tool again",
                        None,
                    ));
                }
                Err(elicit::TakeError::Refused(refused)) => {
                    return Err(McpError::invalid_request(refused.0, None));
                }
            };
            if let Some(question) = parked.pending.take() {
                let answer = elicit::answer_in(request.input_responses.as_ref());
                let by = decider(&who, &context);
                let _ = question.answer.send(elicit::decided(
                    &question.request,
                    answer,
                    parked.session_lasts,
                    by,
                ));
            }
            let progress = forward_progress(&parked.opened, &parked.call_id, &context);
            let settled = self.settle(&elicitation, elicit::Asking::Rounds, parked, &context, &who).await;
            if let Some(progress) = progress {
                progress.abort();
            }
            return settled;
        }

        let opened = self.opened(&context).await?.clone();
        let n = self.messages.fetch_add(1, Ordering::Relaxed) + 1;
        let call_id = format!("mcp-{n}");
        let arguments = request.arguments.map_or_else(|| json!({}), Value::Object);
        // No message id: an MCP request is never a retry of another (a client's retry is a new
        // request), so the pipeline's own fresh id lets a read be journalled once, when it ends.
        let batch = Batch {
            message_id: None,
            calls: vec![RawCall {
                id: call_id.clone(),
                name: request.name.to_string(),
                arguments: arguments.to_string(),
            }],
            stopped_on_length: false,
        };
        let progress = forward_progress(&opened, &call_id, &context);

        // A client that can be asked: the call runs in a task of its own while its handler asks
        // the client each question the pipeline has.
        if let (Some(elicitation), Some(asking), Some(who)) =
            (self.backend.elicitation(), self.asking(&context), self.backend.elicitor(http))
        {
            let questions = elicitation.route_call(opened.session.id(), &call_id);
            let (done, result) = tokio::sync::oneshot::channel();
            let run = self.backend.run(&opened, batch);
            tokio::spawn(async move {
                let _ = done.send(run.await);
            });
            let parked = elicit::Parked {
                opened,
                call_id,
                name: request.name.to_string(),
                questions,
                result,
                pending: None,
                owns_session: false,
                // A connection of one request (2026-07-28 over HTTP) has a session of one call.
                session_lasts: !(self.close_on_drop && asking == elicit::Asking::Rounds),
            };
            let settled = self.settle(&elicitation, asking, parked, &context, &who).await;
            if let Some(progress) = progress {
                progress.abort();
            }
            return settled;
        }

        // The backend runs the batch to its end within the app's budgets. A
        // `notifications/cancelled` from the client (or its leaving) cancels this one call in the
        // pipeline, which settles it as cancelled; the session goes on.
        let mut run = self.backend.run(&opened, batch);
        let joined = tokio::select! {
            joined = &mut run => joined,
            () = context.ct.cancelled() => {
                opened.session.cancel_call(&call_id);
                run.await
            }
        };
        if let Some(progress) = progress {
            progress.abort();
        }
        answer_of(joined)
    }
}

/// Who answered a form: the credentials' label (when the backend gives one) and the client.
fn decider(who: &str, context: &RequestContext<RoleServer>) -> String {
    let client = context
        .meta
        .client_info()
        .or_else(|| context.peer.peer_info().map(|info| info.client_info.clone()))
        .map_or_else(|| "unnamed".to_owned(), |info| info.name);
    if who.is_empty() { format!("mcp-client:{client}") } else { format!("{who} via mcp-client:{client}") }
}

/// Denies a question without asking anyone.
fn deny(question: elicit::Question, why: &str) {
    let _ = question.answer.send(tool_executor::Decided {
        decision: tool_executor::Decision::DenyWithMessage { message: why.to_owned() },
        by: Some("toolhost".into()),
    });
}

impl Connection {
    /// How the client of this request can be asked, when the backend routes questions to it.
    fn asking(&self, context: &RequestContext<RoleServer>) -> Option<elicit::Asking> {
        self.backend.elicitation()?;
        self.backend.elicitor(context.extensions.get::<http::request::Parts>())?;
        elicit::asking(context)
    }

    /// Waits for a call whose handler asks its client: its result, or its next question, which is
    /// sent to the client (`elicitation/create`) and answered here, or handed back as an
    /// input-required result while the call waits, parked, for the retry.
    async fn settle(
        &self,
        elicitation: &Arc<Elicitation>,
        asking: elicit::Asking,
        mut parked: elicit::Parked,
        context: &RequestContext<RoleServer>,
        who: &str,
    ) -> Result<CallToolResponse, McpError> {
        loop {
            let next = tokio::select! {
                biased;
                joined = &mut parked.result => return self.settled(elicitation, &parked, joined).await,
                () = context.ct.cancelled() => None,
                question = parked.questions.recv() => question,
            };
            let Some(question) = next else {
                // Cancelled by the client (or it left): the call is cancelled, and questions it
                // still has are denied, so nothing waits for an answer that will not come.
                parked.opened.session.cancel_call(&parked.call_id);
                parked.questions.close();
                while let Ok(question) = parked.questions.try_recv() {
                    deny(question, "the client cancelled the call");
                }
                let joined = (&mut parked.result).await;
                return self.settled(elicitation, &parked, joined).await;
            };
            if question.answer.is_closed() {
                // The pipeline stopped waiting for this one.
                continue;
            }
            match asking {
                elicit::Asking::Request => {
                    let Some(params) = elicit::params(&question.request, parked.session_lasts) else {
                        deny(question, "the approval form could not be made");
                        continue;
                    };
                    let timeout = parked.opened.executor.config().approval_timeout;
                    let asked = context.peer.create_elicitation_with_timeout(params, Some(timeout));
                    let answer = tokio::select! {
                        answer = asked => answer.ok(),
                        () = context.ct.cancelled() => {
                            deny(question, "the client cancelled the call");
                            continue;
                        }
                    };
                    let by = decider(who, context);
                    let decided = elicit::decided(&question.request, answer, parked.session_lasts, by);
                    let _ = question.answer.send(decided);
                }
                elicit::Asking::Rounds => {
                    let Some(form) = elicit::input_request(&question.request, parked.session_lasts) else {
                        deny(question, "the approval form could not be made");
                        continue;
                    };
                    parked.pending = Some(question);
                    // A connection of one request would end the session with it: the parked call
                    // keeps it, and ends it when it settles.
                    let kept_here = self.close_on_drop && !parked.owns_session;
                    if kept_here {
                        self.keep_session.store(true, Ordering::Relaxed);
                        parked.owns_session = true;
                    }
                    match elicitation.park(parked, self.backend.clone()) {
                        Ok(token) => {
                            let requests =
                                std::collections::BTreeMap::from([(elicit::APPROVAL.to_owned(), form)]);
                            return Ok(InputRequiredResult::new(Some(requests), Some(token)).into());
                        }
                        Err(back) => {
                            // No unguessable handle: the question is denied rather than parked.
                            parked = back;
                            if kept_here {
                                self.keep_session.store(false, Ordering::Relaxed);
                                parked.owns_session = false;
                            }
                            if let Some(question) = parked.pending.take() {
                                deny(question, "no request state could be made for the approval");
                            }
                        }
                    }
                }
            }
        }
    }

    /// A call whose handler asked its client has settled: its route goes, and its session if it
    /// owns it.
    async fn settled(
        &self,
        elicitation: &Elicitation,
        parked: &elicit::Parked,
        joined: Result<Result<Vec<CallResult>, OpenError>, tokio::sync::oneshot::error::RecvError>,
    ) -> Result<CallToolResponse, McpError> {
        elicitation.unroute_call(parked.opened.session.id(), &parked.call_id);
        if parked.owns_session {
            elicitation.forget(parked.opened.session.id());
            self.backend.close(parked.opened.clone()).await;
        }
        let joined =
            joined.unwrap_or_else(|_| Err(OpenError("the call's task ended without a result".into())));
        answer_of(joined)
    }
}

/// Forwards the call's progress events as progress notifications, when the client asked for them
/// with a progress token.
fn forward_progress(
    opened: &Opened,
    call_id: &str,
    context: &RequestContext<RoleServer>,
) -> Option<tokio::task::JoinHandle<()>> {
    let token = context.meta.get_progress_token()?;
    let mut events = opened.session.subscribe();
    let peer = context.peer.clone();
    let call_id = call_id.to_owned();
    Some(tokio::spawn(async move {
        let mut step = 0.0;
        loop {
            match events.recv().await {
                Ok(Event::Progress { call_id: id, progress, .. }) if id == call_id => {
                    step += 1.0;
                    let message = progress.message.clone().or_else(|| progress.output.clone());
                    let value = progress.fraction.map_or(step, |f| f64::from(f) * 100.0);
                    let mut param = ProgressNotificationParam::new(token.clone(), value);
                    if progress.fraction.is_some() {
                        param = param.with_total(100.0);
                    }
                    if let Some(message) = message {
                        param = param.with_message(message);
                    }
                    if peer.notify_progress(param).await.is_err() {
                        return;
                    }
                }
                Ok(Event::Finished { call_id: id, .. } | Event::Failed { call_id: id, .. })
                    if id == call_id =>
                {
                    return;
                }
                Ok(_) | Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            }
        }
    }))
}

/// The MCP result of a settled call: its content as a text block, its state as
/// `_meta["toolhost/state"]`, its status as `isError`.
fn answer_of(joined: Result<Vec<CallResult>, OpenError>) -> Result<CallToolResponse, McpError> {
    let results = joined.map_err(|e| McpError::invalid_request(e.0, None))?;
    let Some(result) = results.into_iter().next() else {
        return Err(McpError::internal_error("the pipeline returned no result", None));
    };
    // A name the session does not have is the protocol error the specification lists for an
    // unknown tool (-32602), with the pipeline's words (the closest names).
    if result.output.error.as_ref().is_some_and(|e| e.kind == tool_core::ErrorKind::UnknownTool) {
        return Err(McpError::invalid_params(result.output.content, None));
    }
    let mut text = result.output.content.clone();
    // An MCP client shows the text, not `structuredContent`: a blocked call says why there, and
    // what would let it run.
    if result.status.as_str() == "blocked" {
        let reason = result.output.state.as_ref().and_then(|s| s.get("reason")).and_then(Value::as_str);
        if let Some(reason) = reason.filter(|r| !r.trim().is_empty()) {
            text.push_str(&format!(" Why: {}.", reason.trim().trim_end_matches('.')));
        }
        text.push_str(
            " Nobody could be asked to approve it in this session. To let such a call run, use a client \
             that shows approval forms (MCP elicitation) with the approval mode `manual`, or start \
             Toolhost with another `--approval-mode` (`auto_run` runs what the audits do not flag); on a \
             server the operator can also allow the tool for the session.",
        );
    }
    // A mounted server's result is served on as it came: its images, sounds and resources as
    // such, its own structured content (which its output schema describes).
    // (Only a mounted tool's own call, `mcp-NAME`: a read of an `mcp://` address is readFile's.)
    let mounted = result.output.state.as_ref().filter(|state| {
        state.get("type").and_then(Value::as_str) == Some("mcp")
            && result.tool.as_deref().is_some_and(|tool| tool.starts_with("mcp-"))
            && result.status.as_str() != "blocked"
    });
    let (content, whole) = match mounted.and_then(|state| state.get("content")).and_then(Value::as_array) {
        Some(blocks) => passed_on(blocks, &text),
        None => (vec![ContentBlock::text(text)], true),
    };
    let mut answer =
        if result.output.success { CallToolResult::success(content) } else { CallToolResult::error(content) };
    match mounted {
        // Its own structured content when the model was given the whole of it (a cut output's
        // structured content would carry past the cut).
        Some(state) => {
            answer.structured_content =
                state.get("structured_content").filter(|s| s.is_object() && whole).cloned();
        }
        // Toolhost's own tools: the text is the result (written for the model: where to read on,
        // the exit code, what was cut), so there is no `structuredContent` (clients that prefer
        // it would put the state in front of the model instead) and no `outputSchema`; the state
        // a person's screen draws from is `_meta["toolhost/state"]`.
        None => {
            if let Some(state @ Value::Object(_)) = &result.output.state {
                let mut meta = rmcp::model::MetaObject::new();
                meta.0.insert(STATE_META.to_owned(), state.clone());
                answer.meta = Some(meta);
            }
        }
    }
    Ok(answer.into())
}

/// Where a result of Toolhost's own tools carries the call's state (what render hooks draw from).
pub const STATE_META: &str = "toolhost/state";

/// Bytes of images and sounds a cut result still passes on.
const MAX_PASSED_MEDIA: usize = 4 * 1024 * 1024;

/// A mounted server's content blocks as Toolhost serves them on, and whether whole: all of them
/// as they came when the model was given their whole text; else the text it was given (cut, with
/// where to read on) followed by its images, sounds and resource links (up to
/// [`MAX_PASSED_MEDIA`]); embedded resources are in that text already.
fn passed_on(blocks: &[Value], given: &str) -> (Vec<ContentBlock>, bool) {
    let whole = given == client_text(blocks);
    if whole {
        let kept: Vec<ContentBlock> = blocks
            .iter()
            .filter_map(|block| serde_json::from_value::<ContentBlock>(block.clone()).ok())
            .collect();
        if !kept.is_empty() {
            return (kept, true);
        }
    }
    let mut media = 0;
    let kept: Vec<ContentBlock> = blocks
        .iter()
        .filter(|block| {
            if !matches!(block.get("type").and_then(Value::as_str), Some("image" | "audio" | "resource_link"))
            {
                return false;
            }
            media += block.get("data").and_then(Value::as_str).map_or(0, str::len);
            media <= MAX_PASSED_MEDIA
        })
        .filter_map(|block| serde_json::from_value::<ContentBlock>(block.clone()).ok())
        .collect();
    (std::iter::once(ContentBlock::text(given.to_owned())).chain(kept).collect(), whole)
}

#[cfg(feature = "client")]
fn client_text(blocks: &[Value]) -> String {
    client::model_text(blocks)
}

#[cfg(not(feature = "client"))]
fn client_text(_blocks: &[Value]) -> String {
    String::new()
}

/// Serves one connection over this process's stdin and stdout until the client leaves.
///
/// # Errors
///
/// The transport failed to start or ended with an error.
pub async fn serve_stdio(backend: Arc<dyn Backend>, name: &str) -> Result<(), McpServeError> {
    let connection = Connection::new(backend.clone(), name.to_owned(), false);
    let opened = connection.opened.clone();
    let running =
        connection.serve(rmcp::transport::stdio()).await.map_err(|e| McpServeError(e.to_string()))?;
    let waited = running.waiting().await.map_err(|e| McpServeError(e.to_string()));
    // The client has gone: its session ends (calls still running are cancelled and settle)
    // before this returns, so the process does not exit over them.
    if let Some(Ok(opened)) = opened.get() {
        if let Some(elicitation) = backend.elicitation() {
            elicitation.forget(opened.session.id());
        }
        backend.close(opened.clone()).await;
    }
    waited.map(|_| ())
}

/// The MCP transport failed.
#[derive(Debug, thiserror::Error)]
#[error("MCP: {0}")]
pub struct McpServeError(pub String);

/// Settings of the HTTP endpoint.
#[derive(Debug, Clone)]
pub struct HttpSettings {
    /// Host names (or `host:port`) the `Host` header may carry; loopback names by default (DNS
    /// rebinding protection). Empty: any host.
    pub allowed_hosts: Vec<String>,
    /// Browser origins allowed to call; a request with another `Origin` is refused.
    pub allowed_origins: Vec<String>,
    /// Ends every connection when cancelled (the server's shutdown).
    pub shutdown: tokio_util::sync::CancellationToken,
}

impl Default for HttpSettings {
    fn default() -> Self {
        Self {
            allowed_hosts: vec!["localhost".into(), "127.0.0.1".into(), "::1".into()],
            allowed_origins: Vec::new(),
            shutdown: tokio_util::sync::CancellationToken::new(),
        }
    }
}

/// The streamable HTTP endpoint, to nest at `/mcp` in the app's router (after its own
/// authentication, whose extensions reach [`Backend::open`] in [`OpenRequest::http`]).
pub fn router(backend: Arc<dyn Backend>, name: &str, settings: HttpSettings) -> axum::Router {
    use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
    use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};
    let mut config = StreamableHttpServerConfig::default()
        .with_cancellation_token(settings.shutdown.clone())
        .with_allowed_hosts(settings.allowed_hosts.clone());
    if settings.allowed_hosts.is_empty() {
        config = config.disable_allowed_hosts();
    }
    config = config.with_allowed_origins(settings.allowed_origins.clone()).enforce_origin_validation();
    let name = name.to_owned();
    let service = StreamableHttpService::new(
        move || Ok(Connection::new(backend.clone(), name.clone(), true)),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new().route_service("/", service).layer(axum::middleware::from_fn(priming_for_new_clients))
}

/// The first protocol revision whose clients expect an SSE stream to open with a priming event
/// (an event id and an empty `data:`, SEP-1699).
const PRIMING_SINCE: &str = "2025-11-25";

/// The largest body read to find the version an `initialize` asks for (larger ones are passed
/// on unread).
const MAX_PEEKED_BODY: usize = 1024 * 1024;

/// The protocol revision a request speaks: its `MCP-Protocol-Version` header, else (an
/// `initialize`) the `protocolVersion` in its body; `None` when neither says.
fn spoken_version(headers: &http::HeaderMap, body: Option<&[u8]>) -> Option<String> {
    if let Some(version) = headers.get("mcp-protocol-version").and_then(|v| v.to_str().ok()) {
        return Some(version.trim().to_owned());
    }
    let body: Value = serde_json::from_slice(body?).ok()?;
    let first = if body.is_array() { body.get(0)? } else { &body };
    first.pointer("/params/protocolVersion").and_then(Value::as_str).map(str::to_owned)
}

/// Streams opened for clients older than [`PRIMING_SINCE`] start without the priming event the
/// transport puts first: such clients read every event's `data:` as JSON-RPC and drop the
/// connection on an empty one (Gemini CLI did).
async fn priming_for_new_clients(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let (parts, body) = request.into_parts();
    // Only a small body of known length is read (an `initialize` is a few hundred bytes); any
    // other request without the header comes from a client older than the header (2025-03-26).
    let small = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok())
        .is_some_and(|length| length <= MAX_PEEKED_BODY);
    let (version, body) =
        if parts.headers.contains_key("mcp-protocol-version") || parts.method != http::Method::POST || !small
        {
            (spoken_version(&parts.headers, None), body)
        } else {
            match axum::body::to_bytes(body, MAX_PEEKED_BODY).await {
                Ok(bytes) => (spoken_version(&parts.headers, Some(&bytes)), axum::body::Body::from(bytes)),
                Err(error) => {
                    return axum::response::IntoResponse::into_response((
                        http::StatusCode::BAD_REQUEST,
                        format!("the request body could not be read: {error}"),
                    ));
                }
            }
        };
    let response = next.run(axum::extract::Request::from_parts(parts, body)).await;
    // Revisions are dates: they compare as text.
    let older = version.as_deref().is_none_or(|v| v < PRIMING_SINCE);
    let streams = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    if !older || !streams {
        return response;
    }
    let (parts, body) = response.into_parts();
    axum::response::Response::from_parts(
        parts,
        axum::body::Body::from_stream(without_priming(body.into_data_stream())),
    )
}

/// An SSE byte stream without its first event when that event has no data (a priming event).
fn without_priming(
    stream: impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Send + 'static,
) -> impl futures::Stream<Item = Result<axum::body::Bytes, axum::Error>> + Send + 'static {
    use futures::StreamExt as _;
    // Until the first event has ended: the bytes held back.
    let mut held: Option<Vec<u8>> = Some(Vec::new());
    stream.map(move |chunk| {
        let chunk = chunk?;
        let Some(buffer) = held.as_mut() else { return Ok(chunk) };
        buffer.extend_from_slice(&chunk);
        let ends = [&b"\n\n"[..], &b"\r\n\r\n"[..]]
            .iter()
            .filter_map(|end| {
                buffer.windows(end.len()).position(|w| w == *end).map(|at| (at, at + end.len()))
            })
            .min();
        let Some((end, rest)) = ends else {
            // A priming event is a few bytes: a longer first event is a real one.
            if buffer.len() > 4096 {
                return Ok(axum::body::Bytes::from(held.take().unwrap_or_default()));
            }
            return Ok(axum::body::Bytes::new());
        };
        let data_empty = String::from_utf8_lossy(&buffer[..end])
            .lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .all(|data| data.trim().is_empty());
        let all = held.take().unwrap_or_default();
        Ok(axum::body::Bytes::from(if data_empty { all[rest..].to_vec() } else { all }))
    })
}
