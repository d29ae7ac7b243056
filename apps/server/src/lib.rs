//! `toolhost-server`: the deployable tool service.
//!
//! Agent builders put it beside their agent loop, in whatever language that loop is written: it
//! serves tool schemas for any provider, runs the model's calls through the one pipeline
//! (`tool-executor`) with approvals, keeps the journal in SQLite or Postgres, streams progress as
//! server-sent events, and sends calls to client executors (a person's own machine) over a
//! WebSocket — across instances through Redis.
//!
//! * [`config`]: flags and environment; [`state`]: what the handlers share, built from them;
//! * [`api`]: the JSON API under `/v1` and its OpenAPI document; [`ws`]: the device socket;
//! * [`approvals`]: how a person's decision reaches a waiting call (the API and the console);
//! * [`auth`]: bearer keys bound to tenants; [`error`]: the one error body;
//! * [`devices`]: client executors and the runtime that routes a session's calls to them;
//! * [`cluster`]: several instances through Redis; [`bus`]: every instance's events for each
//!   tenant's watchers; [`metrics`]: Prometheus text;
//! * [`limits`]: per-tenant budgets (sessions, batches, streams, tool runs on this machine);
//! * [`memory`]: at start, freed memory goes back to the system at once (mimalloc's purge delay).

pub mod api;
pub mod approvals;
pub mod auth;
pub mod bus;
pub mod checks;
pub mod cluster;
pub mod config;
pub mod console;
pub mod devices;
pub mod docs;
pub mod error;
pub mod limits;
pub mod listen;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod ready;
pub mod settings;
pub mod state;
pub mod telemetry;
pub mod ws;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use utoipa::OpenApi;

pub use config::{Cli, Command, ServeArgs};
pub use state::AppState;

/// The OpenAPI document's frame; paths and schemas come from the handlers.
#[derive(OpenApi)]
#[openapi(
    info(
        title = "toolhost-server",
        description = "Tool schemas, guarded execution, approvals and a journal for AI agents. Every /v1 \
                       endpoint takes `Authorization: Bearer <key>` unless the server runs open on loopback. \
                       Errors are `{\"error\": {\"code\", \"message\"}}`. Client executors connect to the \
                       WebSocket /v1/devices/connect (protocol in the client-executor crate)."
    ),
    components(schemas(error::ErrorBody)),
    modifiers(&BearerAuth)
)]
struct ApiDoc;

struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security =
            Some(vec![utoipa::openapi::security::SecurityRequirement::new("bearer", Vec::<String>::new())]);
    }
}

/// The OpenAPI 3.1 document.
pub fn openapi() -> utoipa::openapi::OpenApi {
    let (_, api) = api::routes().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(api);
    document_key_errors(&mut doc);
    doc
}

/// Every operation that takes a key answers 401 without a valid one: said once here rather than
/// on each handler.
fn document_key_errors(doc: &mut utoipa::openapi::OpenApi) {
    use utoipa::openapi::{ContentBuilder, Ref, ResponseBuilder};
    let unauthorized = ResponseBuilder::new()
        .description("missing or unknown bearer key")
        .content(
            "application/json",
            ContentBuilder::new().schema(Some(Ref::from_schema_name("ErrorBody"))).build(),
        )
        .build();
    for item in doc.paths.paths.values_mut() {
        let operations =
            [&mut item.get, &mut item.post, &mut item.put, &mut item.delete, &mut item.patch, &mut item.head];
        for operation in operations.into_iter().flatten() {
            // `security(())` marks the operations that take no key.
            let open = operation.security.as_ref().is_some_and(|requirements| {
                requirements.iter().all(|r| {
                    serde_json::to_value(r).is_ok_and(|v| v.as_object().is_some_and(|o| o.is_empty()))
                })
            });
            if !open {
                operation
                    .responses
                    .responses
                    .entry("401".into())
                    .or_insert_with(|| unauthorized.clone().into());
            }
        }
    }
}

/// Whether a `Host` or `Origin` value names this machine (`localhost`, `127.0.0.1`, `[::1]`…).
fn names_loopback(value: &str) -> bool {
    let authority = value.split_once("://").map_or(value, |(_, rest)| rest);
    let authority = authority.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(host, _)| host),
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// An open server (no keys) answers only requests addressed to this machine: a web page cannot
/// reach it through DNS rebinding (a foreign `Host`) or open a device socket from another origin.
async fn open_means_loopback(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    if state.keys.is_open() {
        for header in [axum::http::header::HOST, axum::http::header::ORIGIN] {
            if let Some(value) = request.headers().get(&header)
                && !value.to_str().is_ok_and(names_loopback)
            {
                return axum::response::IntoResponse::into_response(error::ApiError::new(
                    axum::http::StatusCode::FORBIDDEN,
                    "forbidden",
                    format!("this server runs without keys and answers only loopback {header} values"),
                ));
            }
        }
    }
    next.run(request).await
}

/// A request's id: the caller's `X-Request-Id` when it is a sane one, else one made here; it is
/// on every log line of the request and returned in the response's `X-Request-Id`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestId(pub String);

/// Who a request turned out to be, filled in by the key extractors, for its log line.
#[derive(Debug, Clone, Default)]
pub struct RequestAudit(Arc<std::sync::Mutex<Option<(String, String)>>>);

impl RequestAudit {
    /// Notes the request's tenant and key (`TENANT/ROLE/NAME`).
    pub fn note(&self, tenant: &str, key: &str) {
        *self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner) =
            Some((tenant.to_owned(), key.to_owned()));
    }

    fn who(&self) -> (String, String) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone().unwrap_or_default()
    }
}

fn request_id(given: Option<&axum::http::HeaderValue>) -> String {
    if let Some(given) = given.and_then(|value| value.to_str().ok())
        && !given.is_empty()
        && given.len() <= 128
        && given.chars().all(|c| c.is_ascii_alphanumeric() || "-_.:".contains(c))
    {
        return given.to_owned();
    }
    use std::hash::{BuildHasher as _, Hasher as _};
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
    format!("req-{:016x}", hasher.finish())
}

/// The audit trail of every request: its id (taken from `X-Request-Id` or made, returned in
/// it), then one `request` event with the route, status, latency, tenant, key and instance;
/// every log line the request causes carries its id (the `request` span).
async fn audit(State(state): State<Arc<AppState>>, mut request: Request, next: Next) -> Response {
    use tracing::Instrument as _;
    let started = std::time::Instant::now();
    let id = request_id(request.headers().get("x-request-id"));
    let route = request
        .extensions()
        .get::<axum::extract::MatchedPath>()
        .map_or_else(|| "(no route)".to_owned(), |path| path.as_str().to_owned());
    let method = request.method().clone();
    let peer = request
        .extensions()
        .get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
        .map(|info| info.0.ip().to_string())
        .unwrap_or_default();
    let who = RequestAudit::default();
    request.extensions_mut().insert(who.clone());
    request.extensions_mut().insert(RequestId(id.clone()));
    // The request's span: every log line of the request carries its id; with traces on, it joins
    // the caller's trace (`traceparent`).
    let span = tracing::info_span!(
        "request",
        request_id = %id,
        otel.name = %format!("{method} {route}"),
        http.request.method = %method,
        http.route = %route,
        traceparent = tracing::field::Empty,
    );
    if let Some(traceparent) = request.headers().get("traceparent").and_then(|v| v.to_str().ok()) {
        span.record("traceparent", traceparent);
    }
    let mut response = next.run(request).instrument(span).await;
    if let Ok(value) = axum::http::HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", value);
    }
    let status = response.status().as_u16();
    state.metrics.response(status);
    let (tenant, key) = who.who();
    tracing::info!(
        target: "toolhost::access",
        event = "request",
        request_id = %id,
        method = %method,
        route = %route,
        status,
        latency_ms = started.elapsed().as_secs_f64() * 1000.0,
        tenant = %tenant,
        key = %key,
        peer = %peer,
        instance = %state.instance_id,
        "request"
    );
    response
}

/// The OpenAPI document as this server answers: its enabled tools are the only values `tools`
/// takes, and a server without keys says so (a request without `Authorization` is as good as one
/// with it).
fn served_doc(state: &AppState, doc: &utoipa::openapi::OpenApi) -> serde_json::Value {
    let mut value = serde_json::to_value(doc).unwrap_or_default();
    if let Some(tools) = value.pointer_mut("/components/schemas/CreateSession/properties/tools") {
        let items = serde_json::json!({"type": "string", "enum": state.tools});
        // `Option<Vec<String>>`: the array form is the one that takes items.
        match tools.get_mut("items") {
            Some(slot) => *slot = items,
            None => tools["items"] = items,
        }
    }
    if state.keys.is_open() {
        value["security"] = serde_json::json!([{}, {"bearer": []}]);
        value["info"]["description"] = serde_json::json!(
            "This server runs without keys: it answers loopback requests only, with or without a bearer key."
        );
    }
    value
}

/// The whole application.
pub fn router(state: Arc<AppState>) -> Router {
    let (routes, api) = api::routes().split_for_parts();
    let mut doc = ApiDoc::openapi();
    doc.merge(api);
    document_key_errors(&mut doc);
    let doc_json = Arc::new(served_doc(&state, &doc));
    routes
        .route(client_executor::protocol::DEVICE_PATH, axum::routing::get(ws::connect))
        .route(
            "/openapi.json",
            axum::routing::get(move || async move { axum::Json(doc_json.as_ref().clone()) }),
        )
        .merge(docs::routes())
        .merge(console::routes())
        .merge(mcp::routes(&state))
        .fallback(error::fallback)
        .method_not_allowed_fallback(|| async {
            error::ApiError::new(
                axum::http::StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "this endpoint does not take that method; see /openapi.json",
            )
        })
        .layer(axum::middleware::from_fn_with_state(state.clone(), open_means_loopback))
        .layer(axum::middleware::from_fn_with_state(state.clone(), audit))
        .layer(DefaultBodyLimit::max(state.args.max_body_bytes))
        .with_state(state)
}

/// Only `/metrics`, without a key: for an operator's own scraping address (`--metrics-listen`).
pub fn metrics_router(state: Arc<AppState>) -> Router {
    Router::new()
        .route(
            "/metrics",
            axum::routing::get(|State(state): State<Arc<AppState>>| async move { api::metrics_text(&state) }),
        )
        .fallback(error::fallback)
        .with_state(state)
}

/// Serves until `signal` resolves (or shutdown starts otherwise), then drains: `/readyz` says
/// `draining` and new calls are refused with 503 and `Retry-After` at once, while connections are
/// still accepted; calls in flight finish within the grace period and their results reach their
/// clients (a streaming one after a `shutdown` event); calls still running then are cancelled
/// (they settle as cancelled in the journal); event streams get a `shutdown` event and end; then
/// the listener closes and each connection ends once its response is sent.
///
/// # Errors
///
/// None today; the signature leaves room for a listener that can fail.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if let Ok(address) = listener.local_addr() {
        state.sandboxing.block_port(address.port());
        state.executor.set_address(address.to_string());
        state.set_bound(address);
    }
    let app = router(state.clone());
    let serving = listen::serve(listener, app, state.args.connection_limits());
    state.set_connections(serving.tracker.clone());
    tokio::select! {
        () = signal => {}
        () = state.shutdown.cancelled() => {}
    }
    state.shutdown.cancel();
    tracing::info!(
        grace_s = state.args.shutdown_grace_secs,
        "draining: calls in flight finish; new calls are refused with 503 and Retry-After"
    );
    state.tasks.close();
    let grace = state.args.shutdown_grace();
    if tokio::time::timeout(grace, state.tasks.wait()).await.is_err() {
        let sessions: Vec<_> =
            state.sessions.read().unwrap_or_else(|p| p.into_inner()).values().cloned().collect();
        tracing::warn!(
            grace_s = grace.as_secs(),
            "calls still running after the grace period; cancelling them"
        );
        for entry in sessions {
            entry.session.cancel();
        }
        // Cancelled calls settle within the pipeline's stop grace.
        let _ = tokio::time::timeout(Duration::from_secs(10), state.tasks.wait()).await;
    }
    // What the journal did not take yet is given a last chance (the next start on this host
    // lands the rest from the outbox's file).
    if let Some(journal) = state.executor.journal() {
        let outbox = state.executor.outbox();
        if !outbox.is_empty() {
            let _ = tokio::time::timeout(
                Duration::from_secs(5),
                outbox.flush(journal.as_ref(), state.args.journal_deadline()),
            )
            .await;
            if !outbox.is_empty() {
                tracing::warn!(
                    waiting = outbox.len(),
                    "journal writes still waiting at exit: the next start on this host lands them"
                );
            }
        }
    }
    // Only now: device calls could still finish during the grace.
    state.closing.cancel();
    serving.finish(Duration::from_secs(5)).await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn loopback_names_are_recognised_and_others_are_not() {
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "http://localhost:3000",
            "127.9.9.9",
        ] {
            assert!(super::names_loopback(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "http://evil.example",
            "localhost.evil.example",
            "10.0.0.1",
            "null",
            "",
        ] {
            assert!(!super::names_loopback(bad), "{bad}");
        }
    }
}
