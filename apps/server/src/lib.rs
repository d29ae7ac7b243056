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
//! * [`auth`]: bearer keys bound to tenants; [`error`]: the one error body;
//! * [`devices`]: client executors and the runtime that routes a session's calls to them;
//! * [`cluster`]: several instances through Redis; [`metrics`]: Prometheus text;
//! * [`limits`]: per-tenant budgets (sessions, batches, streams, tool runs on this machine);
//! * [`memory`]: at start, freed memory goes back to the system at once (mimalloc's purge delay).

pub mod api;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod devices;
pub mod docs;
pub mod error;
pub mod limits;
pub mod mcp;
pub mod memory;
pub mod metrics;
pub mod settings;
pub mod state;
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

async fn count_requests(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    state.metrics.request();
    next.run(request).await
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
        .layer(axum::middleware::from_fn_with_state(state.clone(), count_requests))
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

/// Serves until `signal` resolves, then shuts down gracefully: stops accepting, closes streams
/// and device sockets, lets calls in flight finish within the grace period, cancels the rest (they
/// settle as cancelled in the journal) and returns.
///
/// # Errors
///
/// The listener fails.
pub async fn serve(
    state: Arc<AppState>,
    listener: tokio::net::TcpListener,
    signal: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if let Ok(address) = listener.local_addr() {
        state.sandboxing.block_port(address.port());
    }
    let app = router(state.clone());
    let shutdown = state.shutdown.clone();
    let server = axum::serve(listener, app).with_graceful_shutdown(async move {
        signal.await;
        shutdown.cancel();
    });
    let server = tokio::spawn(async move { server.await });
    state.shutdown.cancelled().await;
    tracing::info!("shutting down: finishing calls in flight");
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
    // Only now: device calls could still finish during the grace.
    state.closing.cancel();
    match tokio::time::timeout(Duration::from_secs(5), server).await {
        Ok(Ok(result)) => result?,
        Ok(Err(error)) => return Err(error.into()),
        Err(_) => tracing::warn!("connections still open after shutdown; closing them"),
    }
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
