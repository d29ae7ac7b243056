//! Memories through the server: written in one session and found in the next, kept per person
//! (the key's name) and per tenant, shown and removable through `/v1/memories`, journalled and
//! approved like any write, and capped per person.

mod common;

use common::{TestServer, workspace};
use serde_json::{Value, json};
use toolhost_server::auth::{Role, stored_form_as};

async fn session(server: &TestServer, ws: &std::path::Path) -> String {
    server.session(json!({"working_directory": ws, "approval_mode": "manual"})).await
}

/// A write: on a server with keys it asks a person, and the key's person (who may decide) allows
/// it once.
async fn write(server: &TestServer, sid: &str, id: &str, name: &str, arguments: Value) -> Value {
    let request = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{sid}/calls"));
        let key = server.key.clone().unwrap();
        let body = json!({"calls": [{"id": id, "name": name, "arguments": arguments.to_string()}]});
        tokio::spawn(async move {
            client.post(url).bearer_auth(key).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    let approval = server.wait_for_approval(id).await;
    let (status, decided) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_once"}})).await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["outcome"], "delivered", "{id}: {decided}");
    let response = request.await.unwrap();
    response["results"][0].clone()
}

fn content(result: &Value) -> &str {
    result["output"]["content"].as_str().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memories_outlive_sessions_and_stay_with_their_person() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace();
    let mut args = common::args(dir.path());
    args.api_keys = vec![
        stored_form_as("acme", Role::Person, "alice", "key-alice"),
        stored_form_as("acme", Role::Person, "bob", "key-bob"),
        stored_form_as("acme", Role::Approver, "lead", "key-lead"),
        stored_form_as("acme", Role::Agent, "bot", "key-bot"),
        stored_form_as("globex", Role::Person, "alice", "key-globex"),
    ];
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::shared(ws.path())];
    args.max_memories_per_person = 3;
    args.approval_timeout_secs = 20;
    let alice = TestServer::start_with(dir, args).await.with_key("key-alice");
    let bob = alice.as_key("key-bob");
    let lead = alice.as_key("key-lead");
    let bot = alice.as_key("key-bot");
    let globex = alice.as_key("key-globex");

    // A session may not claim another person.
    let (status, refused) =
        alice.post("/v1/sessions", json!({"working_directory": ws.path(), "user_id": "bob"})).await;
    assert_eq!(status, 400, "{refused}");

    let first = session(&alice, ws.path()).await;
    let saved = write(
        &alice,
        &first,
        "m1",
        "addMemory",
        json!({"category": "preferences", "title": "Indentation", "content": "Alice prefers tabs, width 4"}),
    )
    .await;
    assert_eq!(saved["status"], "executed", "{saved}");
    let id = saved["output"]["state"]["memory"]["id"].as_str().unwrap().to_owned();
    let (_, row) = alice.get(&format!("/v1/journal?session_id={first}")).await;
    assert_eq!(row[0]["tier"], "write", "a memory write is journalled as a write: {row}");
    assert_eq!(row[0]["decision"], "allow_once", "{row}");
    assert_eq!(row[0]["decided_by"], "acme/person/alice", "{row}");
    let secret = json!({"category": "notes", "title": "Key", "content": "token=abcdef1234567890"});
    let secret = write(&alice, &first, "m2", "addMemory", secret).await;
    assert_eq!(secret["status"], "failed", "{secret}");
    assert!(content(&secret).contains("secret"), "{secret}");
    let (_, _) = alice.delete(&format!("/v1/sessions/{first}")).await;

    // The next session finds it by a stemmed word.
    let second = session(&alice, ws.path()).await;
    let found = alice.call(&second, "s1", "searchMemory", json!({"query": "preferring tabs"})).await;
    assert_eq!(found["status"], "executed", "{found}");
    assert!(content(&found).contains("Alice prefers tabs"), "{found}");

    // Bob's sessions, and the same name in another tenant, see none of it.
    for (n, stranger) in [&bob, &globex].into_iter().enumerate() {
        let theirs = session(stranger, ws.path()).await;
        let found = stranger.call(&theirs, "s1", "searchMemory", json!({"query": "tabs"})).await;
        assert!(content(&found).contains("No memory matches"), "{found}");
        let removed = write(stranger, &theirs, &format!("r{n}"), "removeMemory", json!({"id": id})).await;
        assert_eq!(removed["status"], "failed", "{removed}");
        let change = json!({"id": id, "content": "Alice prefers spaces"});
        let updated = write(stranger, &theirs, &format!("u{n}"), "updateMemory", change).await;
        assert_eq!(updated["status"], "failed", "{updated}");
    }

    // The person sees theirs; an approver may see anyone's; an agent key none; another person not.
    let (status, listed) = alice.get("/v1/memories").await;
    assert_eq!(status, 200, "{listed}");
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["content"], "Alice prefers tabs, width 4");
    assert_eq!(listed[0]["person"], "alice");
    let (status, _) = bob.get("/v1/memories?person=alice").await;
    assert_eq!(status, 403);
    let (status, _) = bot.get("/v1/memories").await;
    assert_eq!(status, 403);
    let (status, by_lead) = lead.get("/v1/memories?person=alice&query=tabs").await;
    assert_eq!((status, by_lead.as_array().map(Vec::len)), (200, Some(1)), "{by_lead}");
    let (status, _) = globex.get(&format!("/v1/memories/{id}")).await;
    assert_eq!(status, 404, "another tenant's person of the same name");
    let (status, one) = alice.get(&format!("/v1/memories/{id}")).await;
    assert_eq!((status, one["title"].as_str()), (200, Some("Indentation")));

    // The cap: three per person, then a clear error the model can act on.
    for n in 0..2 {
        let note = json!({"category": "notes", "title": format!("n{n}"), "content": "x"});
        let added = write(&alice, &second, &format!("a{n}"), "addMemory", note).await;
        assert_eq!(added["status"], "executed", "{added}");
    }
    let note = json!({"category": "notes", "title": "over", "content": "x"});
    let over = write(&alice, &second, "a9", "addMemory", note).await;
    assert_eq!(over["status"], "failed", "{over}");
    assert!(content(&over).contains("3 memories"), "{over}");

    // A session's documents are its person's too: another person's key may not read them.
    let doc = json!({"name": "plan.md", "content": "alice's plan"});
    assert_eq!(alice.call(&second, "d1", "createDocument", doc).await["status"], "executed");
    let (status, _) = alice.get(&format!("/v1/sessions/{second}/documents/plan.md")).await;
    assert_eq!(status, 200);
    let (status, _) = bob.get(&format!("/v1/sessions/{second}/documents")).await;
    assert_eq!(status, 403);
    let (status, _) = bot.get(&format!("/v1/sessions/{second}/documents/plan.md")).await;
    assert_eq!(status, 403);
    let (status, listed) = lead.get(&format!("/v1/sessions/{second}/documents")).await;
    assert_eq!((status, listed.as_array().map(Vec::len)), (200, Some(1)), "{listed}");
    let (status, _) = globex.get(&format!("/v1/sessions/{second}/documents")).await;
    assert_eq!(status, 404, "another tenant does not see the session at all");

    // The person deletes it through the API; the model no longer finds it.
    let (status, _) = alice.delete(&format!("/v1/memories/{id}")).await;
    assert_eq!(status, 204);
    let gone = alice.call(&second, "s2", "searchMemory", json!({"query": "tabs"})).await;
    assert!(content(&gone).contains("No memory matches"), "{gone}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_memory_write_waits_for_approval_in_manual_mode() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "manual"})).await;
    let waiting = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{sid}/calls"));
        let body = json!({"calls": [{"id": "w", "name": "addMemory",
            "arguments": json!({"category": "identity", "title": "Name", "content": "Ada"}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    let approval = server.wait_for_approval("w").await;
    let (status, _) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 200);
    let response = waiting.await.unwrap();
    assert_eq!(response["results"][0]["status"], "denied", "{response}");
    let (_, listed) = server.get("/v1/memories").await;
    assert_eq!(listed.as_array().map(Vec::len), Some(0), "a denied write stores nothing: {listed}");
    // Reads never ask.
    let found = server.call(&sid, "r", "searchMemory", json!({})).await;
    assert_eq!(found["status"], "executed", "{found}");
    assert!(content(&found).contains("Nothing is remembered yet"), "{found}");
}
