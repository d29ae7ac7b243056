//! Knowledge bases through the server: added from folders inside the tenant's roots (and refused
//! outside them), searched by the model's calls without asking, kept per person with shared bases
//! per tenant, and removable through `/v1/knowledge-bases`.

mod common;

use common::{TestServer, workspace};
use serde_json::{Value, json};
use toolhost_server::auth::{Role, stored_form_as};
use toolhost_server::config::WorkspaceRoot;

/// One read call in a fresh session of the key's person; its result.
async fn search(server: &TestServer, ws: &std::path::Path, query: &str) -> Value {
    let sid = server.session(json!({"working_directory": ws, "approval_mode": "manual"})).await;
    let arguments = json!({"query": query}).to_string();
    let (status, response) = server
        .post(
            &format!("/v1/sessions/{sid}/calls"),
            json!({"calls": [{"id": "k1", "name": "searchKnowledgeBase", "arguments": arguments}]}),
        )
        .await;
    assert_eq!(status, 200, "{response}");
    response["results"][0].clone()
}

fn first_source(result: &Value) -> String {
    result["output"]["state"]["hits"][0]["source"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bases_come_from_the_tenants_roots_and_stay_with_their_person() {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace();
    let docs = ws.path().join("docs");
    std::fs::create_dir_all(&docs).unwrap();
    std::fs::write(
        docs.join("billing.md"),
        "# Billing\n\n## Refunds\n\nRefunds are issued within fourteen days.\n",
    )
    .unwrap();
    std::fs::write(docs.join("tone.md"), "# Tone\n\nWrite plainly.\n").unwrap();
    let team = ws.path().join("team");
    std::fs::create_dir_all(&team).unwrap();
    std::fs::write(team.join("oncall.md"), "# On call\n\nThe pager rotates every Monday.\n").unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "# Secret\n").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("escape")).unwrap();

    let mut args = common::args(dir.path());
    args.api_keys = vec![
        stored_form_as("acme", Role::Person, "alice", "key-alice"),
        stored_form_as("acme", Role::Person, "bob", "key-bob"),
        stored_form_as("acme", Role::Approver, "lead", "key-lead"),
        stored_form_as("acme", Role::Agent, "bot", "key-bot"),
        stored_form_as("globex", Role::Person, "alice", "key-globex"),
    ];
    args.workspace_roots = vec![WorkspaceRoot::of("acme", ws.path())];
    let alice = TestServer::start_with(dir, args).await.with_key("key-alice");
    let bob = alice.as_key("key-bob");
    let lead = alice.as_key("key-lead");
    let bot = alice.as_key("key-bot");
    let globex = alice.as_key("key-globex");

    let (status, report) = alice.post("/v1/knowledge-bases", json!({"name": "docs", "paths": [docs]})).await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(
        (report["added"].as_u64(), report["base"]["sources"].as_u64()),
        (Some(2), Some(2)),
        "{report}"
    );
    assert_eq!(report["base"]["person"], "alice");

    // Refused: outside the roots (directly, or through a link inside them), relative, a bad
    // name, an agent key, a person sharing with the tenant, another tenant's root.
    for (server, body, want) in [
        (&alice, json!({"name": "x", "paths": [outside.path()]}), 403),
        (&alice, json!({"name": "x", "paths": [ws.path().join("escape")]}), 403),
        (&alice, json!({"name": "x", "paths": ["docs"]}), 400),
        (&alice, json!({"name": "../x", "paths": [docs]}), 400),
        (&alice, json!({"name": "x", "paths": []}), 400),
        (&bot, json!({"name": "x", "paths": [docs]}), 403),
        (&alice, json!({"name": "x", "paths": [docs], "shared": true}), 403),
        (&globex, json!({"name": "x", "paths": [docs]}), 403),
    ] {
        let (status, body) = server.post("/v1/knowledge-bases", body).await;
        assert_eq!(status, want, "{body}");
    }

    // The model searches it in a session, without asking (a read).
    let found = search(&alice, ws.path(), "when are refunds issued").await;
    assert_eq!(found["status"], "executed", "{found}");
    assert!(first_source(&found).ends_with("docs/billing.md"), "{found}");
    assert_eq!(found["output"]["state"]["hits"][0]["heading"], "Billing > Refunds");

    // Bob has no base; a shared one of the tenant (an approver's) is everyone's in it.
    let none = search(&bob, ws.path(), "refunds").await;
    assert_eq!(none["status"], "failed", "{none}");
    let (status, shared) =
        lead.post("/v1/knowledge-bases", json!({"name": "team", "paths": [team], "shared": true})).await;
    assert_eq!(status, 200, "{shared}");
    assert!(shared["base"]["person"].is_null(), "{shared}");
    let pager = search(&bob, ws.path(), "pager rotation").await;
    assert!(first_source(&pager).ends_with("team/oncall.md"), "{pager}");
    let refunds = search(&bob, ws.path(), "refunds").await;
    assert!(!first_source(&refunds).ends_with("billing.md"), "alice's base stays hers: {refunds}");

    let names = |list: &Value| {
        list.as_array().unwrap().iter().map(|b| b["name"].as_str().unwrap().to_owned()).collect::<Vec<_>>()
    };
    assert_eq!(names(&alice.get("/v1/knowledge-bases").await.1), ["docs", "team"]);
    assert_eq!(names(&bob.get("/v1/knowledge-bases").await.1), ["team"]);
    assert_eq!(names(&globex.get("/v1/knowledge-bases").await.1), Vec::<String>::new());

    // Removal: only one's own, or a shared one by an approver.
    assert_eq!(bob.delete("/v1/knowledge-bases/docs").await.0, 404);
    assert_eq!(bob.delete("/v1/knowledge-bases/team?shared=true").await.0, 403);
    assert_eq!(alice.delete("/v1/knowledge-bases/docs").await.0, 204);
    assert_eq!(alice.delete("/v1/knowledge-bases/docs").await.0, 404);
    assert_eq!(lead.delete("/v1/knowledge-bases/team?shared=true").await.0, 204);
    assert_eq!(names(&alice.get("/v1/knowledge-bases").await.1), Vec::<String>::new());
}
