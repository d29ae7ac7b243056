//! The documents tool on both of the journal's databases (SQLite and Postgres): a session's
//! documents and a project's, read by lines, edited, listed, and kept per tenant and person.

use std::sync::Arc;

use builtin_tool_documents::DocumentsRuntime;
use serde_json::json;
use tool_core::sandbox::CallSandbox;
use tool_core::storage::RecordStore;
use tool_core::{CallContext, ErrorKind, ToolRuntime};

fn session(id: &str, tenant: &str, person: &str, folder: &std::path::Path) -> CallContext {
    let mut context = CallContext::new("call", id).with_working_directory(folder);
    context.user_id = Some(person.into());
    context.sandbox = Arc::new(CallSandbox { tenant: Some(tenant.into()), ..CallSandbox::default() });
    context
}

async fn documents_by_scope_and_person(store: Arc<dyn RecordStore>) {
    let folder = tempfile::tempdir().unwrap();
    let tool = DocumentsRuntime::new(store);
    let first = session("s1", "acme", "ada", folder.path());
    let draft = tool
        .execute("createDocument", json!({"name": "draft.md", "content": "# Draft\nline two\n"}), &first)
        .await;
    assert!(draft.success, "{}", draft.content);
    let plan = tool
        .execute(
            "createDocument",
            json!({"name": "plan.md", "content": "# Plan\nstep one\nstep two\n", "scope": "project"}),
            &first,
        )
        .await;
    assert!(plan.success, "{}", plan.content);

    let read = tool.execute("readDocument", json!({"name": "plan.md", "lines": "2-3"}), &first).await;
    assert!(read.content.contains("step one") && !read.content.contains("# Plan"), "{}", read.content);
    let edited = tool
        .execute(
            "editDocument",
            json!({"name": "plan.md", "edits": [{"old_text": "step two", "new_text": "step 2"}]}),
            &first,
        )
        .await;
    assert!(edited.success, "{}", edited.content);

    // A later session of the same project sees the project's document, not the session's.
    let later = session("s2", "acme", "ada", folder.path());
    let listed = tool.execute("listDocuments", json!({}), &later).await;
    assert!(listed.content.contains("plan.md") && !listed.content.contains("draft.md"), "{}", listed.content);
    let read = tool.execute("readDocument", json!({"name": "plan.md"}), &later).await;
    assert!(read.content.contains("step 2"), "{}", read.content);

    // Another person, or another tenant, sees none of them.
    for other in [session("s3", "acme", "bob", folder.path()), session("s4", "globex", "ada", folder.path())]
    {
        let read = tool.execute("readDocument", json!({"name": "plan.md"}), &other).await;
        assert_eq!(read.error.unwrap().kind, ErrorKind::NotFound, "{}", read.content);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("journal.db").display());
    documents_by_scope_and_person(journal::open_stores(&url).await.unwrap().records).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_postgres() {
    let server = test_support::PgServer::start();
    let url = server.database_url(&format!("documents_tool_{}", std::process::id()));
    documents_by_scope_and_person(journal::open_stores(&url).await.unwrap().records).await;
}
