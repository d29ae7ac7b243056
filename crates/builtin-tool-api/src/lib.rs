//! The `api` tool: any OpenAPI service as a tool.
//!
//! An OpenAPI 3.0/3.1 or Swagger 2.0 document ([`document`]) becomes a tool whose functions are
//! its operations, mounted from `[apis.NAME]` tables of the mount file ([`mount`], feature
//! `runtime`): each API is its own tool `api-NAME` with functions `NAME__operation`, its requests
//! sent through `safe-fetch` with the credential the table names. The registered `api` entry
//! declares no function of its own: it carries the four parts the mounted APIs share —
//! [`manifest()`] and [`SYSTEM_ROLE`] (every mounted API's system role) for the model,
//! `runtime(&Services)` for the machine and `RENDER` (every mounted API's cards) for people.
//!
//! ```
//! assert_eq!(builtin_tool_api::manifest().identifier, "api");
//! assert!(builtin_tool_api::manifest().apis.is_empty());
//! ```
#![deny(missing_docs)]

pub mod document;
#[cfg(feature = "runtime")]
pub mod mount;

use tool_core::{ToolManifest, ToolMeta};

/// The tool's identifier; a mounted API's is `api-NAME`.
pub const IDENTIFIER: &str = "api";

/// The prefix of mounted APIs' identifiers.
pub const MOUNTED_PREFIX: &str = "api-";

/// The system-role template of every mounted API.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The registered entry's manifest: no functions (each mounted API is a tool of its own).
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("APIs", "OpenAPI services mounted as tools: `[apis.NAME]` in the mount file"),
    )
    .system_role(SYSTEM_ROLE)
}

#[cfg(feature = "runtime")]
mod runtime {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use serde_json::Value;
    use tool_core::{CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime};

    /// The registered entry's runtime: it has no functions (mounted APIs have their own).
    #[derive(Debug, Clone, Default)]
    pub struct ApiEntryRuntime;

    /// Builds the registered entry's runtime (it needs no service).
    ///
    /// # Errors
    ///
    /// None: the signature is the registry's.
    pub fn runtime(_services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
        Ok(Arc::new(ApiEntryRuntime))
    }

    impl ToolRuntime for ApiEntryRuntime {
        fn execute<'a>(
            &'a self,
            api: &'a str,
            _arguments: Value,
            _context: &'a CallContext,
        ) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move {
                ToolOutput::error(
                    ErrorKind::UnknownTool,
                    format!("`{api}` is not an operation: mounted APIs are called as NAME__operation"),
                )
            })
        }
    }
}

#[cfg(feature = "runtime")]
pub use runtime::{ApiEntryRuntime, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::{json_block, status_badge};
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    /// How people see a mounted API's calls: the request (method, path, arguments), then the
    /// status and the body.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct ApiRender;

    fn request(api: &str, arguments: &Value) -> Card {
        let card = Card::new(api.to_owned());
        match arguments.as_object().filter(|m| !m.is_empty()) {
            Some(_) => card.block(json_block(arguments)),
            None => card,
        }
    }

    impl RenderHooks for ApiRender {
        fn placeholder(&self, api: &str, arguments: &Value) -> Card {
            request(api, arguments)
        }

        fn intervention(&self, api: &str, arguments: &Value) -> Card {
            request(api, arguments).subtitle("sends a request that may change the service")
        }

        fn result(&self, api: &str, _arguments: &Value, output: &ToolOutput) -> Card {
            let state = output.state.as_ref();
            let text = |key: &str| state.and_then(|s| s.get(key)).and_then(Value::as_str).unwrap_or_default();
            let title = match (text("method"), text("path")) {
                ("", _) => api.to_owned(),
                (method, path) => format!("{method} {path}"),
            };
            let mut card = Card::new(title).subtitle(format!("API {}", text("api")));
            card.badge = Some(status_badge(output));
            if let Some(status) = state.and_then(|s| s.get("status")).and_then(Value::as_u64) {
                card =
                    card.fields([("status", status.to_string()), ("type", text("content_type").to_owned())]);
            }
            // The status line is in the fields; the body is what follows it.
            let body = output.content.split_once('\n').map_or(output.content.as_str(), |(_, rest)| rest);
            let language = text("content_type").contains("json").then(|| "json".to_owned());
            card.block(Block::Code { language, text: body.to_owned() })
        }
    }
}

#[cfg(feature = "render")]
pub use render::ApiRender;

/// The render hooks, as the registry's table holds them (every mounted API's too).
#[cfg(feature = "render")]
pub static RENDER: ApiRender = ApiRender;

#[cfg(all(test, feature = "runtime", feature = "render"))]
mod tests {
    use super::*;
    use serde_json::json;
    use tool_core::{Block, CallContext, ErrorKind, RenderHooks, Services, ToolOutput};

    #[tokio::test]
    async fn the_entry_has_no_functions_and_cards_show_request_and_response() {
        let runtime = runtime(&Services::new()).unwrap();
        let context = CallContext::new("call-1", "session-1");
        let output = runtime.execute("listPets", json!({}), &context).await;
        assert_eq!(output.error.unwrap().kind, ErrorKind::UnknownTool);
        let done = ToolOutput::ok("HTTP 200 OK (application/json, 2 bytes)\n[]").with_state(json!({
            "api": "petstore", "method": "GET", "path": "/pets", "status": 200, "content_type": "application/json"
        }));
        let card = RENDER.result("petstore__listPets", &json!({}), &done);
        assert_eq!(card.title, "GET /pets");
        assert!(matches!(card.blocks.last(), Some(Block::Code { text, .. }) if text == "[]"), "{card:?}");
    }

    #[test]
    fn manifest_round_trips() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
    }
}
