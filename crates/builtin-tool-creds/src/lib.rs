//! The `creds` tool: credentials the model never sees.
//!
//! Credentials live in the `credentials` crate: stored encrypted by a person or given by a
//! server's operator, injected where a request leaves (API mounts, MCP servers' headers and
//! environments), and redacted by the pipeline from everything it returns or keeps. This tool
//! tells the model which exist and what uses them — names only — so it can say what is missing
//! instead of asking for a key in the conversation. It exports the four parts every builtin tool
//! exports: [`manifest()`] and [`SYSTEM_ROLE`] for the model, `runtime(&Services)` for the machine
//! (feature `runtime`, which needs a `credentials::Credentials` service) and `RENDER` for people
//! (feature `render`).
//!
//! ```
//! assert_eq!(builtin_tool_creds::manifest().identifier, "creds");
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "creds";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

tool_core::api_enum! {
    /// The APIs of the `creds` tool.
    pub enum CredsApi {
        /// The credentials' names and users.
        ListCredentials = "listCredentials",
    }
}

/// Arguments of `listCredentials`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListCredentialsArgs {}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(
        IDENTIFIER,
        ToolMeta::new("Credentials", "Names the stored credentials and what uses them; never their values"),
    )
    .intervention(Intervention::Never.into())
    .system_role(SYSTEM_ROLE)
    .api(
        ApiSpec::new::<ListCredentialsArgs>(
            CredsApi::ListCredentials.name(),
            "List the credentials Toolhost holds for this session (names, where each comes from, which \
             mounted APIs and MCP servers use it). Values are never shown: they are injected where \
             requests leave.",
        )
        .tier(Tier::Read)
        .timeout_ms(5_000),
    )
}

#[cfg(feature = "runtime")]
mod runtime {
    use std::sync::Arc;

    use futures::future::BoxFuture;
    use serde_json::{Value, json};
    use tool_core::{
        CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments,
    };

    use super::*;

    /// Runs the `creds` tool's calls over the front end's credentials.
    #[derive(Debug, Clone)]
    pub struct CredsRuntime {
        credentials: credentials::Credentials,
    }

    /// Builds the runtime from the front end's services.
    ///
    /// # Errors
    ///
    /// [`MissingService`] without a `credentials::Credentials` service.
    pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
        let credentials = services.require::<credentials::Credentials>()?.clone();
        Ok(Arc::new(CredsRuntime { credentials }))
    }

    impl CredsRuntime {
        fn list(&self) -> ToolOutput {
            let listed = self.credentials.list();
            if listed.is_empty() {
                return ToolOutput::ok(
                    "No credentials are stored. The person adds one with `toolhost creds set NAME` (the \
                     value is read from standard input); a server's operator gives them in its \
                     credentials file or TOOLHOST_CREDENTIAL_NAME variables.",
                )
                .with_state(json!({"credentials": []}));
            }
            let mut text = format!("{} credential(s); values are never shown:\n", listed.len());
            for one in &listed {
                let source = match one.source {
                    credentials::Source::Store => "stored by the person",
                    credentials::Source::Operator => "given by the operator",
                };
                let used = if one.used_by.is_empty() {
                    "not referenced by a mount".to_owned()
                } else {
                    format!("used by {}", one.used_by.join(", "))
                };
                text.push_str(&format!("- {} ({source}; {used})\n", one.name));
            }
            ToolOutput::ok(text.trim_end().to_owned()).with_state(json!({"credentials": listed}))
        }
    }

    impl ToolRuntime for CredsRuntime {
        fn execute<'a>(
            &'a self,
            api: &'a str,
            arguments: Value,
            _context: &'a CallContext,
        ) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move {
                match api.parse::<CredsApi>() {
                    Ok(CredsApi::ListCredentials) => {
                        match parse_arguments::<ListCredentialsArgs>(api, arguments) {
                            Ok(_) => self.list(),
                            Err(output) => output,
                        }
                    }
                    Err(_) => ToolOutput::error(ErrorKind::UnknownTool, format!("creds has no api `{api}`")),
                }
            })
        }
    }
}

#[cfg(feature = "runtime")]
pub use runtime::{CredsRuntime, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    /// How people see the `creds` tool's calls: a table of names, sources and users.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct CredsRender;

    impl RenderHooks for CredsRender {
        fn result(&self, _api: &str, _arguments: &Value, output: &ToolOutput) -> Card {
            let mut card = Card::new("Credentials");
            card.badge = Some(status_badge(output));
            let listed = output
                .state
                .as_ref()
                .and_then(|s| s.get("credentials"))
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if listed.is_empty() {
                return card.block(Block::Markdown { text: output.content.clone() });
            }
            let text =
                |v: &Value, key: &str| v.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
            let rows = listed
                .iter()
                .map(|one| {
                    let used = one
                        .get("used_by")
                        .and_then(Value::as_array)
                        .map(|u| u.iter().filter_map(Value::as_str).collect::<Vec<_>>().join(", "))
                        .unwrap_or_default();
                    vec![text(one, "name"), text(one, "source"), used]
                })
                .collect();
            card.block(Block::Table { headers: vec!["name".into(), "source".into(), "used by".into()], rows })
        }
    }
}

#[cfg(feature = "render")]
pub use render::CredsRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: CredsRender = CredsRender;

#[cfg(all(test, feature = "runtime", feature = "render"))]
mod tests {
    use super::*;
    use serde_json::json;
    use tool_core::{Block, CallContext, ErrorKind, RenderHooks, Services};

    #[tokio::test]
    async fn names_sources_and_users_never_values() {
        assert!(runtime(&Services::new()).is_err());
        let credentials = credentials::Credentials::new();
        let services = Services::new().with(credentials.clone());
        let runtime = runtime(&services).unwrap();
        let context = CallContext::new("call-1", "session-1");
        let empty = runtime.execute("listCredentials", json!({}), &context).await;
        assert!(empty.success && empty.content.contains("toolhost creds set NAME"), "{}", empty.content);
        credentials
            .insert("petstore", credentials::Secret::new("pk-value-123".into()), credentials::Source::Store)
            .unwrap();
        credentials.note_use("petstore", "api petstore");
        let output = runtime.execute("listCredentials", json!({}), &context).await;
        assert!(output.content.contains("- petstore (stored by the person; used by api petstore)"));
        let everything = format!("{} {}", output.content, output.state.clone().unwrap());
        assert!(!everything.contains("pk-value-123"), "{everything}");
        let bad = runtime.execute("listCredentials", json!({"name": "x"}), &context).await;
        assert_eq!(bad.error.unwrap().kind, ErrorKind::InvalidArguments);
        let card = RENDER.result("listCredentials", &json!({}), &output);
        assert!(matches!(&card.blocks[0], Block::Table { rows, .. } if rows[0][0] == "petstore"));
    }

    #[test]
    fn manifest_round_trips() {
        let manifest = manifest();
        let json = serde_json::to_string(&manifest).unwrap();
        assert_eq!(serde_json::from_str::<ToolManifest>(&json).unwrap(), manifest);
    }
}
