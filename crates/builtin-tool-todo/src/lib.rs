//! The todo tool: the agent's plan, replaced whole on each call.
//!
//! The smallest complete example of a builtin tool's four parts: [`manifest()`], [`SYSTEM_ROLE`],
//! `runtime(&Services)` building a `TodoRuntime` (feature `runtime`) and `RENDER` (feature
//! `render`).
//!
//! ```
//! let manifest = builtin_tool_todo::manifest();
//! assert_eq!(manifest.apis[0].name, "todo_write");
//! ```
#![deny(missing_docs)]

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use tool_core::{ApiSpec, ExecutionMode, Intervention, Tier, ToolManifest, ToolMeta};

/// The tool's identifier.
pub const IDENTIFIER: &str = "todo";

/// The system-role template.
pub const SYSTEM_ROLE: &str = include_str!("system_role.md");

/// The most items a list may hold.
pub const MAX_ITEMS: usize = 50;

tool_core::api_enum! {
    /// The APIs of the todo tool.
    pub enum TodoApi {
        /// Replace the whole list.
        Write = "todo_write",
    }
}

/// The state of one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TodoStatus {
    /// Not started.
    Pending,
    /// Being worked on now.
    InProgress,
    /// Done.
    Completed,
}

/// One item of the list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoItem {
    /// What to do, in a short imperative sentence.
    pub content: String,
    /// Its state.
    pub status: TodoStatus,
}

/// Arguments of `todo_write`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TodoWriteArgs {
    /// The whole list, in order; it replaces the previous one.
    pub todos: Vec<TodoItem>,
}

/// The tool's manifest.
pub fn manifest() -> ToolManifest {
    ToolManifest::new(IDENTIFIER, ToolMeta::new("Todo", "Plan multi-step work as a checklist").icon("✅"))
        .intervention(Intervention::Never.into())
        .system_role(SYSTEM_ROLE)
        .api(
            ApiSpec::new::<TodoWriteArgs>(
                TodoApi::Write.name(),
                "Replace the todo list with this one (at most 50 items). Send every item each time.",
            )
            .tier(Tier::Read)
            .timeout_ms(5_000)
            .execution(ExecutionMode::Sequential),
        )
}

#[cfg(any(feature = "runtime", feature = "render"))]
fn mark(status: TodoStatus) -> &'static str {
    match status {
        TodoStatus::Pending => "[ ]",
        TodoStatus::InProgress => "[>]",
        TodoStatus::Completed => "[x]",
    }
}

#[cfg(feature = "runtime")]
mod runtime {
    use std::collections::HashMap;
    use std::sync::{Arc, Mutex};

    use futures::future::BoxFuture;
    use serde_json::Value;
    use tool_core::{
        CallContext, ErrorKind, MissingService, Services, ToolOutput, ToolRuntime, parse_arguments,
    };

    use super::*;

    /// Keeps each session's list; shared by every runtime a registry builds.
    #[derive(Debug, Clone, Default)]
    pub struct TodoStore(Arc<Mutex<Lists>>);

    /// Each session's list, with when it was last written.
    #[derive(Debug, Default)]
    struct Lists {
        by_session: HashMap<String, (u64, Vec<TodoItem>)>,
        writes: u64,
    }

    /// Sessions whose lists are kept; past it, the least recently written tenth is forgotten, so
    /// a caller opening endless sessions cannot grow the server's memory without bound.
    pub const MAX_SESSIONS: usize = 10_000;

    impl TodoStore {
        /// The current list of a session.
        pub fn list(&self, session_id: &str) -> Vec<TodoItem> {
            let lists = self.0.lock().unwrap_or_else(|p| p.into_inner());
            lists.by_session.get(session_id).map(|(_, todos)| todos.clone()).unwrap_or_default()
        }

        /// How many sessions have a list.
        pub fn sessions(&self) -> usize {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).by_session.len()
        }

        fn replace(&self, session_id: &str, todos: Vec<TodoItem>) {
            let mut lists = self.0.lock().unwrap_or_else(|p| p.into_inner());
            lists.writes += 1;
            let tick = lists.writes;
            lists.by_session.insert(session_id.to_owned(), (tick, todos));
            if lists.by_session.len() > MAX_SESSIONS {
                let mut ticks: Vec<u64> = lists.by_session.values().map(|(tick, _)| *tick).collect();
                ticks.sort_unstable();
                let cutoff = ticks[MAX_SESSIONS / 10];
                lists.by_session.retain(|_, (tick, _)| *tick > cutoff);
            }
        }
    }

    /// Runs `todo_write` against a [`TodoStore`].
    #[derive(Debug, Clone, Default)]
    pub struct TodoRuntime {
        store: TodoStore,
    }

    impl TodoRuntime {
        /// A runtime over `store`.
        pub fn new(store: TodoStore) -> Self {
            Self { store }
        }
    }

    /// Builds the runtime from the front end's services, sharing their [`TodoStore`] when they
    /// have one.
    ///
    /// # Errors
    ///
    /// None today; the signature is the one every builtin tool exports.
    pub fn runtime(services: &Services) -> Result<Arc<dyn ToolRuntime>, MissingService> {
        let store = services.get::<TodoStore>().cloned().unwrap_or_default();
        Ok(Arc::new(TodoRuntime::new(store)))
    }

    impl ToolRuntime for TodoRuntime {
        fn execute<'a>(
            &'a self,
            api: &'a str,
            arguments: Value,
            context: &'a CallContext,
        ) -> BoxFuture<'a, ToolOutput> {
            Box::pin(async move {
                if api.parse::<TodoApi>().is_err() {
                    return ToolOutput::error(ErrorKind::UnknownTool, format!("todo has no api `{api}`"));
                }
                let args: TodoWriteArgs = match parse_arguments(api, arguments) {
                    Ok(args) => args,
                    Err(output) => return output,
                };
                if args.todos.len() > MAX_ITEMS {
                    return ToolOutput::error(
                        ErrorKind::InvalidArguments,
                        format!(
                            "the list has {} items, more than {MAX_ITEMS}; merge or drop some",
                            args.todos.len()
                        ),
                    );
                }
                if let Some(i) = args.todos.iter().position(|t| t.content.trim().is_empty()) {
                    return ToolOutput::error(
                        ErrorKind::InvalidArguments,
                        format!("item {} has no content", i + 1),
                    );
                }
                let count = |s| args.todos.iter().filter(|t| t.status == s).count();
                let (done, active, pending) =
                    (count(TodoStatus::Completed), count(TodoStatus::InProgress), count(TodoStatus::Pending));
                let mut content = format!(
                    "Todo list updated: {} items ({done} completed, {active} in progress, {pending} pending).",
                    args.todos.len()
                );
                if active > 1 {
                    content.push_str(" Note: keep one item in progress at a time.");
                }
                for item in &args.todos {
                    content.push_str(&format!("\n{} {}", mark(item.status), item.content));
                }
                let state = serde_json::json!({ "todos": args.todos });
                self.store.replace(&context.session_id, args.todos);
                ToolOutput::ok(content).with_state(state)
            })
        }
    }
}

#[cfg(feature = "runtime")]
pub use runtime::{MAX_SESSIONS, TodoRuntime, TodoStore, runtime};

#[cfg(feature = "render")]
mod render {
    use serde_json::Value;
    use tool_core::render::status_badge;
    use tool_core::{Block, Card, RenderHooks, ToolOutput};

    use super::*;

    /// Shows the list as a checklist.
    #[derive(Debug, Clone, Copy, Default)]
    pub struct TodoRender;

    fn checklist(todos: &Value) -> Block {
        let items = serde_json::from_value::<Vec<TodoItem>>(todos.clone())
            .unwrap_or_default()
            .iter()
            .map(|item| format!("{} {}", mark(item.status), item.content))
            .collect();
        Block::List { items, ordered: false }
    }

    impl RenderHooks for TodoRender {
        fn inspector(&self, _api: &str, partial: &Value) -> Card {
            Card::new("Todo list").subtitle("updating…").block(checklist(&partial["todos"]))
        }

        fn placeholder(&self, _api: &str, arguments: &Value) -> Card {
            Card::new("Todo list").block(checklist(&arguments["todos"]))
        }

        fn result(&self, _api: &str, arguments: &Value, output: &ToolOutput) -> Card {
            let mut card = Card::new("Todo list").block(checklist(&arguments["todos"]));
            card.badge = Some(status_badge(output));
            if !output.success {
                card = card.block(Block::Markdown { text: output.content.clone() });
            }
            card
        }
    }
}

#[cfg(feature = "render")]
pub use render::TodoRender;

/// The render hooks, as the registry's table holds them.
#[cfg(feature = "render")]
pub static RENDER: TodoRender = TodoRender;

#[cfg(all(test, feature = "runtime", feature = "render"))]
mod tests {
    use super::*;
    use serde_json::json;
    use tool_core::{CallContext, ErrorKind, RenderHooks, ToolRuntime};

    #[tokio::test]
    async fn the_store_forgets_the_least_recently_written_sessions_past_its_cap() {
        let store = TodoStore::default();
        let runtime = TodoRuntime::new(store.clone());
        let list = json!({"todos": [{"content": "a", "status": "pending"}]});
        for i in 0..=MAX_SESSIONS {
            let context = CallContext::new("c", format!("s{i}"));
            assert!(runtime.execute("todo_write", list.clone(), &context).await.success);
        }
        assert!(store.sessions() <= MAX_SESSIONS, "{} sessions kept", store.sessions());
        assert!(store.sessions() >= MAX_SESSIONS * 8 / 10);
        assert!(store.list("s0").is_empty(), "the oldest was forgotten");
        assert_eq!(store.list(&format!("s{MAX_SESSIONS}")).len(), 1, "the newest is kept");
    }

    #[tokio::test]
    async fn replaces_the_whole_list_per_session() {
        let store = TodoStore::default();
        let runtime = TodoRuntime::new(store.clone());
        let context = CallContext::new("c1", "s1");
        let first = json!({"todos": [{"content": "a", "status": "completed"}, {"content": "b", "status": "in_progress"}]});
        let out = runtime.execute("todo_write", first.clone(), &context).await;
        assert_eq!(
            out.content,
            "Todo list updated: 2 items (1 completed, 1 in progress, 0 pending).\n[x] a\n[>] b"
        );
        let out = runtime
            .execute("todo_write", json!({"todos": [{"content": "c", "status": "pending"}]}), &context)
            .await;
        assert!(out.success);
        assert_eq!(store.list("s1"), vec![TodoItem { content: "c".into(), status: TodoStatus::Pending }]);
        assert!(store.list("other").is_empty());
        let card = TodoRender.result(
            "todo_write",
            &first,
            &runtime.execute("todo_write", first.clone(), &context).await,
        );
        assert_eq!(
            card.blocks,
            vec![tool_core::Block::List { items: vec!["[x] a".into(), "[>] b".into()], ordered: false }]
        );
    }

    #[tokio::test]
    async fn refuses_bad_lists_and_keeps_the_old_one() {
        let store = TodoStore::default();
        let runtime = TodoRuntime::new(store.clone());
        let context = CallContext::new("c1", "s1");
        runtime
            .execute("todo_write", json!({"todos": [{"content": "keep", "status": "pending"}]}), &context)
            .await;
        let too_many: Vec<_> =
            (0..51).map(|i| json!({"content": format!("t{i}"), "status": "pending"})).collect();
        let cases = [
            (json!({"todos": too_many}), "more than 50"),
            (json!({"todos": [{"content": " ", "status": "pending"}]}), "item 1 has no content"),
            (json!({"todos": [{"content": "x", "status": "started"}]}), "unknown variant"),
        ];
        for (args, needle) in cases {
            let out = runtime.execute("todo_write", args, &context).await;
            assert_eq!(out.error.as_ref().unwrap().kind, ErrorKind::InvalidArguments);
            assert!(out.content.contains(needle), "{}", out.content);
        }
        assert_eq!(store.list("s1")[0].content, "keep");
    }
}
