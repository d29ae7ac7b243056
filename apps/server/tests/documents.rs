//! The model's documents through the server: created, read by lines, edited with the file
//! engine, listed; served at `/v1/sessions/{id}/documents`; a project's documents seen by its
//! later sessions, a session's only by itself.

mod common;

use common::{TestServer, workspace};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn documents_are_written_read_edited_and_served() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "manual"})).await;
    let text = (1..=120).map(|n| format!("line {n}")).collect::<Vec<_>>().join("\n");
    let created =
        server.call(&sid, "c1", "createDocument", json!({"name": "report.md", "content": text})).await;
    assert_eq!(created["status"], "executed", "documents never ask: {created}");
    let again = server.call(&sid, "c2", "createDocument", json!({"name": "report.md", "content": "x"})).await;
    assert_eq!(again["status"], "failed", "{again}");
    assert!(again["output"]["content"].as_str().unwrap().contains("exists already"), "{again}");

    let read = server.call(&sid, "r1", "readDocument", json!({"name": "report.md", "lines": "10-12"})).await;
    let content = read["output"]["content"].as_str().unwrap();
    assert!(content.contains("lines 10-12 of 120") && content.contains("line 11\n"), "{content}");
    assert!(!content.contains("line 13"), "{content}");
    let bad = server.call(&sid, "r2", "readDocument", json!({"name": "report.md", "lines": "500-"})).await;
    assert_eq!(bad["status"], "failed", "{bad}");
    let missing = server.call(&sid, "r3", "readDocument", json!({"name": "nope.md"})).await;
    assert!(
        missing["output"]["content"].as_str().unwrap().contains("report.md"),
        "names what exists: {missing}"
    );

    let edit = json!({"name": "report.md", "edits": [{"old_text": "line 50\n", "new_text": "line fifty\n"}]});
    let edited = server.call(&sid, "e1", "editDocument", edit).await;
    assert_eq!(edited["status"], "executed", "{edited}");
    assert!(edited["output"]["state"]["diff"].as_str().unwrap().contains("+line fifty"), "{edited}");
    let ambiguous = json!({"name": "report.md", "edits": [{"old_text": "line 1", "new_text": "x"}]});
    let refused = server.call(&sid, "e2", "editDocument", ambiguous).await;
    assert_eq!(refused["status"], "failed", "a non-unique passage is refused: {refused}");

    let shared = json!({"name": "conventions.md", "content": "Use tabs.", "scope": "project"});
    assert_eq!(server.call(&sid, "c3", "createDocument", shared).await["status"], "executed");

    let (status, listed) = server.get(&format!("/v1/sessions/{sid}/documents")).await;
    assert_eq!(status, 200, "{listed}");
    let names: Vec<&str> = listed.as_array().unwrap().iter().map(|d| d["name"].as_str().unwrap()).collect();
    assert_eq!(names.len(), 2, "{listed}");
    assert!(listed[0].get("content").is_none(), "a listing carries no text");
    let (status, one) = server.get(&format!("/v1/sessions/{sid}/documents/report.md")).await;
    assert_eq!(status, 200);
    assert!(one["content"].as_str().unwrap().contains("line fifty"));

    // A later session in the same folder sees the project's document, not the session's.
    let later = server.session(json!({"working_directory": ws.path()})).await;
    let list = server.call(&later, "l1", "listDocuments", json!({})).await;
    let content = list["output"]["content"].as_str().unwrap();
    assert!(content.contains("conventions.md") && !content.contains("report.md"), "{content}");
    let (status, _) = server.get(&format!("/v1/sessions/{later}/documents/report.md")).await;
    assert_eq!(status, 404);
    server.stop().await;
}
