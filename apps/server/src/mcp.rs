//! The MCP endpoint: `/mcp` (streamable HTTP, the tenant from the bearer key) and the
//! `mcp-stdio` subcommand (one local client over stdin and stdout). Each MCP connection is a
//! session opened with the same checks as `POST /v1/sessions`; every call goes through the one
//! pipeline.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::future::BoxFuture;
use tool_executor::ApprovalMode;

use crate::api::{CreateSession, admit_batch, open_session, spawn_batch};
use crate::auth::Principal;
use crate::state::AppState;

/// How sessions of one local client over stdio are opened.
#[derive(Debug, Clone)]
pub struct StdioSession {
    /// Who the client is (the open tenant on a server without keys).
    pub principal: Principal,
    /// The folder when the client offers no roots.
    pub working_directory: Option<PathBuf>,
    /// Its approval mode. `manual` (the default) asks the client's person through MCP
    /// elicitation, and is `headless` for a client that cannot be asked: no one answers the
    /// approvals API of a stdio server.
    pub approval_mode: ApprovalMode,
}

/// Opens sessions for MCP connections.
pub struct Backend {
    state: Arc<AppState>,
    stdio: Option<StdioSession>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Backend").field("stdio", &self.stdio).finish_non_exhaustive()
    }
}

impl Backend {
    /// For the HTTP endpoint: the principal comes with each connection.
    pub fn http(state: Arc<AppState>) -> Self {
        Self { state, stdio: None }
    }

    /// For one stdio client.
    pub fn stdio(state: Arc<AppState>, session: StdioSession) -> Self {
        Self { state, stdio: Some(session) }
    }

    /// The folder of a connection: the one `mcp-stdio --working-directory` names (the person's own
    /// choice on the command line), else the client's first root, else the tenant's only workspace
    /// root. Whichever it is, opening the session checks it like any other.
    fn working_directory(&self, tenant: &str, roots: &[PathBuf]) -> Option<PathBuf> {
        if let Some(dir) = self.stdio.as_ref().and_then(|s| s.working_directory.clone()) {
            return Some(dir);
        }
        if let Some(root) = roots.first() {
            return Some(root.clone());
        }
        let mut mine = self.state.args.workspace_roots.iter().filter(|root| root.admits(tenant));
        match (mine.next(), mine.next()) {
            (Some(only), None) => Some(only.path.clone()),
            _ => None,
        }
    }
}

impl mcp::Backend for Backend {
    fn open(&self, request: mcp::OpenRequest) -> BoxFuture<'static, Result<mcp::Opened, mcp::OpenError>> {
        let principal = match &self.stdio {
            Some(stdio) => Some(stdio.principal.clone()),
            None => request.http.as_ref().and_then(|parts| parts.extensions.get::<Principal>().cloned()),
        };
        let approval_mode = match self.stdio.as_ref().map(|s| s.approval_mode) {
            None => ApprovalMode::Manual,
            Some(ApprovalMode::Manual | ApprovalMode::AllowList) if !request.elicits => {
                ApprovalMode::Headless
            }
            Some(mode) => mode,
        };
        let state = self.state.clone();
        let stdio = self.stdio.is_some();
        let dir = principal.as_ref().and_then(|p| self.working_directory(&p.tenant, &request.roots));
        Box::pin(async move {
            let principal =
                principal.ok_or_else(|| mcp::OpenError("the request carried no credentials".into()))?;
            let create = CreateSession {
                working_directory: dir.map(|d| d.display().to_string()),
                approval_mode,
                agent_id: request.client.clone(),
                ..CreateSession::default()
            };
            let entry = open_session(&state, &principal, create)
                .await
                .map_err(|e| mcp::OpenError(format!("no session could be opened: {}", e.message())))?;
            tracing::info!(session = entry.session.id(), tenant = %principal.tenant, client = ?request.client, "MCP connection opened a session");
            if stdio {
                // No approvals API is served to answer for a stdio client: what its client cannot
                // answer is denied at once, with the reason.
                state.elicitation.only_its_client(entry.session.id());
            }
            Ok(mcp::Opened { executor: state.executor.clone(), session: entry.session.clone() })
        })
    }

    fn admits(
        &self,
        opened: &mcp::Opened,
        http: Option<&axum::http::request::Parts>,
    ) -> Result<(), mcp::OpenError> {
        if self.stdio.is_some() {
            return Ok(());
        }
        let principal = http.and_then(|parts| parts.extensions.get::<Principal>());
        match principal {
            Some(principal) if principal.tenant == opened.session.config.tenant => Ok(()),
            _ => Err(mcp::OpenError("this MCP session belongs to another tenant's key".into())),
        }
    }

    fn run(
        &self,
        opened: &mcp::Opened,
        batch: tool_executor::Batch,
    ) -> BoxFuture<'static, Result<Vec<tool_executor::CallResult>, mcp::OpenError>> {
        let state = self.state.clone();
        let session = opened.session.clone();
        Box::pin(async move {
            let tenant = session.config.tenant.clone();
            let slot = admit_batch(&state, &tenant).map_err(|e| mcp::OpenError(e.message().to_owned()))?;
            let response = spawn_batch(&state, session, batch, slot, false)
                .await
                .map_err(|e| mcp::OpenError(format!("the batch's task failed: {e}")))?;
            Ok(response.results)
        })
    }

    fn elicitation(&self) -> Option<Arc<mcp::Elicitation>> {
        Some(self.state.elicitation.clone())
    }

    /// Only credentials that may decide approvals answer forms: an agent key's client may propose
    /// calls, and its questions wait on the approvals API as any other (unless the operator lets
    /// agent keys decide).
    fn elicitor(&self, http: Option<&axum::http::request::Parts>) -> Option<String> {
        let principal = match &self.stdio {
            Some(stdio) => stdio.principal.clone(),
            None => http?.extensions.get::<Principal>()?.clone(),
        };
        (principal.role.decides() || self.state.args.agent_keys_decide).then_some(principal.id)
    }

    fn close(&self, opened: mcp::Opened) -> BoxFuture<'static, ()> {
        let state = self.state.clone();
        Box::pin(async move {
            let tenant = opened.session.config.tenant.clone();
            if let Err(e) = state.end_session(&tenant, opened.session.id()).await {
                tracing::debug!(session = opened.session.id(), error = %e.message(), "ending an MCP session");
            }
        })
    }
}

/// Which key opened each MCP session of this instance (`Mcp-Session-Id` → the key's id): a
/// session belongs to the key that initialised it, and any other key naming its id is answered
/// 404, as for an id that does not exist (so an id that leaks does not tell whose it is).
#[derive(Debug, Default)]
pub struct SessionOwners {
    owners: std::collections::HashMap<String, String>,
    order: std::collections::VecDeque<String>,
}

impl SessionOwners {
    /// Sessions remembered at most; the oldest are forgotten first (rmcp has ended them long
    /// before: its sessions end with their connections or their idle timeout).
    pub const CAP: usize = 100_000;

    fn owner(&self, session: &str) -> Option<&str> {
        self.owners.get(session).map(String::as_str)
    }

    fn bind(&mut self, session: String, key: String) {
        if self.owners.insert(session.clone(), key).is_none() {
            self.order.push_back(session);
            while self.order.len() > Self::CAP {
                if let Some(oldest) = self.order.pop_front() {
                    self.owners.remove(&oldest);
                }
            }
        }
    }

    fn forget(&mut self, session: &str) {
        if self.owners.remove(session).is_some() {
            self.order.retain(|s| s != session);
        }
    }
}

/// What the `/mcp` middleware needs: the app, and who opened which session.
#[derive(Debug, Clone)]
pub struct McpGate {
    state: Arc<AppState>,
    owners: Arc<std::sync::Mutex<SessionOwners>>,
}

/// Authenticates `/mcp` like the rest of the API, keeps each MCP session to the key that opened
/// it, and hands the principal to the backend.
pub async fn authenticate(State(gate): State<McpGate>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let principal = match Principal::from_request_parts(&mut parts, &gate.state).await {
        Ok(principal) => principal,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = principal.must_propose() {
        return e.into_response();
    }
    let session =
        parts.headers.get("mcp-session-id").and_then(|value| value.to_str().ok()).map(str::to_owned);
    if let Some(session) = &session {
        let owners = gate.owners.lock().unwrap_or_else(|p| p.into_inner());
        // Only the key that opened it; a session id this server did not hand out through here
        // (or forgot: the oldest of more than `CAP`) is nobody's, and is not passed on.
        if owners.owner(session) != Some(principal.id.as_str()) {
            return crate::error::ApiError::not_found("MCP session", session).into_response();
        }
    }
    let key = principal.id.clone();
    let ending = parts.method == axum::http::Method::DELETE;
    parts.extensions.insert(principal);
    let response = next.run(Request::from_parts(parts, body)).await;
    let mut owners = gate.owners.lock().unwrap_or_else(|p| p.into_inner());
    match (&session, response.headers().get("mcp-session-id").and_then(|v| v.to_str().ok())) {
        // A new session: it is the opening key's.
        (None, Some(opened)) => owners.bind(opened.to_owned(), key),
        (Some(ended), _) if ending && response.status().is_success() => owners.forget(ended),
        _ => {}
    }
    response
}

/// The `/mcp` routes.
pub fn routes(state: &Arc<AppState>) -> axum::Router<Arc<AppState>> {
    // As for the rest of the API: an open server answers only loopback `Host` and `Origin`
    // values (checked before this, and again by the MCP transport); with keys, any host.
    let (allowed_hosts, allowed_origins) = if state.keys.is_open() {
        (
            vec!["localhost".into(), "127.0.0.1".into(), "::1".into(), "[::1]".into()],
            vec!["http://localhost:*".into(), "http://127.0.0.1:*".into(), "http://[::1]:*".into()],
        )
    } else {
        (Vec::new(), Vec::new())
    };
    let settings = mcp::HttpSettings { allowed_hosts, allowed_origins, shutdown: state.closing.clone() };
    let endpoint = mcp::router(Arc::new(Backend::http(state.clone())), "toolhost", settings);
    axum::Router::new().nest_service("/mcp", endpoint).layer(axum::middleware::from_fn_with_state(
        McpGate { state: state.clone(), owners: Arc::default() },
        authenticate,
    ))
}
