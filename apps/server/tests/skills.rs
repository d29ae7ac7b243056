//! The operator's skills on the server: each tenant's sessions get the skills of the folders set
//! for it (`--skills-dir`), listed in the session catalogue, declared as `activateSkill`'s enum,
//! activated and read; another tenant's stay out of reach.

mod common;

use common::{TestServer, workspace};
use serde_json::{Value, json};

fn skill(root: &std::path::Path, name: &str, description: &str, body: &str) {
    std::fs::create_dir_all(root.join(name)).unwrap();
    std::fs::write(
        root.join(name).join("SKILL.md"),
        format!("---\nname: {name}\ndescription: {description}\n---\n\n{body}\n"),
    )
    .unwrap();
}

fn enum_of(catalogue: &Value) -> Option<Value> {
    catalogue["functions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["function"]["name"] == "activateSkill")
        .map(|f| f["function"]["parameters"]["properties"]["name"]["enum"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_tenant_gets_its_operators_skills_and_no_one_elses() {
    let dir = tempfile::tempdir().unwrap();
    let skills = tempfile::tempdir().unwrap();
    let shared = skills.path().join("shared");
    let acme_only = skills.path().join("acme");
    skill(&shared, "changelog", "Writes a changelog entry.", "Group the commits.");
    skill(&acme_only, "acme-deploy", "Deploys Acme's services.", "Run the acme pipeline for $ARGUMENTS.");
    std::fs::write(acme_only.join("acme-deploy/runbook.md"), "step one\nstep two\nstep three\n").unwrap();
    let mut args = common::args(dir.path());
    let person = toolhost_server::auth::Role::Person;
    args.api_keys = vec![
        toolhost_server::auth::stored_form_as("acme", person, "ops", "key-acme"),
        toolhost_server::auth::stored_form_as("globex", person, "ops", "key-globex"),
    ];
    let ws = workspace();
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::shared(ws.path())];
    args.skills_dirs = vec![
        format!("*={}", shared.display()).parse().unwrap(),
        format!("acme={}", acme_only.display()).parse().unwrap(),
    ];
    let acme = TestServer::start_with(dir, args).await.with_key("key-acme");
    let globex = acme.as_key("key-globex");
    let body = json!({"working_directory": ws.path(), "approval_mode": "manual"});
    let acme_sid = acme.session(body.clone()).await;
    let globex_sid = globex.session(body).await;

    let (status, catalogue) = acme.get(&format!("/v1/sessions/{acme_sid}/catalogue")).await;
    assert_eq!(status, 200, "{catalogue}");
    assert_eq!(enum_of(&catalogue), Some(json!(["acme-deploy", "changelog"])));
    let listed: Vec<&str> =
        catalogue["skills"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(listed, ["changelog", "acme-deploy"], "the shared folder first, as configured");
    let role = catalogue["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["identifier"] == "skills")
        .unwrap()["system_role"]
        .as_str()
        .unwrap();
    assert!(role.contains("- acme-deploy: Deploys Acme's services."), "{role}");

    let (_, theirs) = globex.get(&format!("/v1/sessions/{globex_sid}/catalogue")).await;
    assert_eq!(enum_of(&theirs), Some(json!(["changelog"])));
    assert!(!theirs.to_string().contains("acme-deploy"), "{theirs}");

    let activated = acme
        .call(&acme_sid, "a1", "activateSkill", json!({"name": "acme-deploy", "arguments": "billing"}))
        .await;
    assert_eq!(activated["status"], "executed", "{activated}");
    let text = activated["output"]["content"].as_str().unwrap();
    assert!(text.contains("Run the acme pipeline for billing."), "{text}");
    let read =
        acme.call(&acme_sid, "a2", "readFile", json!({"path": "skill://acme-deploy/runbook.md:2-3"})).await;
    assert_eq!(read["status"], "executed", "{read}");
    assert!(read["output"]["content"].as_str().unwrap().starts_with("step two\nstep three"), "{read}");

    // Another tenant cannot activate or read Acme's skill, and is not told it exists.
    let refused = globex.call(&globex_sid, "g1", "activateSkill", json!({"name": "acme-deploy"})).await;
    assert_ne!(refused["status"], "executed", "{refused}");
    let peek =
        globex.call(&globex_sid, "g2", "readFile", json!({"path": "skill://acme-deploy/runbook.md"})).await;
    assert_ne!(peek["status"], "executed", "{peek}");
    assert!(!peek.to_string().contains("step one"), "{peek}");
    assert!(!peek.to_string().contains(&acme_only.display().to_string()), "no operator path: {peek}");
    acme.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_skills_there_is_no_activate_skill() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let (_, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue")).await;
    assert_eq!(enum_of(&catalogue), None, "{catalogue}");
    assert!(catalogue.get("skills").is_none());
    let call = server.call(&sid, "c1", "activateSkill", json!({"name": "x"})).await;
    assert_eq!(call["output"]["error"]["kind"], "unknown_tool", "{call}");
    server.stop().await;
}
