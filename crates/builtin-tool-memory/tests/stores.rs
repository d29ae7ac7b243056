//! The memory tool on both of the journal's databases (SQLite and Postgres): written in one
//! session and found in the next, changed and forgotten, kept per tenant and person, capped.

use std::sync::Arc;

use builtin_tool_memory::{MemoryRuntime, MemorySettings};
use serde_json::json;
use tool_core::sandbox::CallSandbox;
use tool_core::storage::RecordStore;
use tool_core::{CallContext, ErrorKind, ToolRuntime};

fn session(id: &str, tenant: &str, person: &str) -> CallContext {
    let mut context = CallContext::new("call", id);
    context.user_id = Some(person.into());
    context.sandbox = Arc::new(CallSandbox { tenant: Some(tenant.into()), ..CallSandbox::default() });
    context
}

async fn remembered_across_sessions_per_person(store: Arc<dyn RecordStore>) {
    let tool = MemoryRuntime::new(store, MemorySettings { max_per_person: 2 });
    let first = session("s1", "acme", "ada");
    let added = tool
        .execute(
            "addMemory",
            json!({"category": "preferences", "title": "Tabs", "content": "Ada indents with tabs"}),
            &first,
        )
        .await;
    assert!(added.success, "{}", added.content);
    let id = added.state.unwrap()["memory"]["id"].as_str().unwrap().to_owned();

    let next = session("s2", "acme", "ada");
    let found = tool.execute("searchMemory", json!({"query": "indentation tab"}), &next).await;
    assert!(found.content.contains("Ada indents with tabs"), "stemmed words find it: {}", found.content);
    for other in [session("s3", "acme", "bob"), session("s4", "globex", "ada")] {
        let none = tool.execute("searchMemory", json!({"query": "tabs"}), &other).await;
        assert!(none.content.contains("No memory matches"), "{}", none.content);
        let change = tool.execute("updateMemory", json!({"id": id, "content": "hijacked"}), &other).await;
        assert_eq!(change.error.unwrap().kind, ErrorKind::NotFound, "another's memory cannot be changed");
    }

    let updated = tool
        .execute("updateMemory", json!({"id": id, "content": "Ada indents with two spaces"}), &next)
        .await;
    assert!(updated.success, "{}", updated.content);
    let spaces = tool.execute("searchMemory", json!({"query": "spaces"}), &next).await;
    assert!(spaces.content.contains("two spaces"), "{}", spaces.content);

    let second = tool
        .execute(
            "addMemory",
            json!({"category": "identity", "title": "Role", "content": "Ada maintains the parser"}),
            &next,
        )
        .await;
    assert!(second.success);
    let full = tool
        .execute(
            "addMemory",
            json!({"category": "notes", "title": "Third", "content": "One too many"}),
            &next,
        )
        .await;
    assert_eq!(full.error.unwrap().kind, ErrorKind::Conflict, "the cap holds: {}", full.content);

    let forgot = tool.execute("removeMemory", json!({"id": id}), &next).await;
    assert!(forgot.success);
    let again = tool.execute("removeMemory", json!({"id": id}), &next).await;
    assert_eq!(again.error.unwrap().kind, ErrorKind::NotFound);
    let listed = tool.execute("searchMemory", json!({}), &next).await;
    assert!(listed.content.contains("parser") && !listed.content.contains("spaces"), "{}", listed.content);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
    remembered_across_sessions_per_person(journal::open_stores(&url).await.unwrap().records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let server = test_support::PgServer::start();
    let url = server.database_url(&format!("memory_tool_{}", std::process::id()));
    remembered_across_sessions_per_person(journal::open_stores(&url).await.unwrap().records).await;
}
