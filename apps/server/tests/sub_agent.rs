//! `callSubAgent` on the server: the operator's model profiles (`--models`, keys from the
//! server's environment), a session naming one, the sub-agent's calls through the server's
//! pipeline and journal (linked to its call), and no tool without a model.

mod common;

use common::{TestServer, workspace};
use serde_json::json;
use test_support::model::{ScriptedModel, openai_reply};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_names_an_operator_model_and_its_sub_agent_works_through_the_pipeline() {
    let small = ScriptedModel::start(vec![
        openai_reply("", "", &[("r1", "readFile", &json!({"path": "notes.txt"}).to_string())], "tool_calls"),
        openai_reply("", "The notes say: hello from inside.", &[], "stop"),
    ])
    .await;
    let big = ScriptedModel::start(Vec::new()).await;
    let dir = tempfile::tempdir().unwrap();
    let models = dir.path().join("models.toml");
    std::fs::write(
        &models,
        format!(
            "sub_agent = \"big\"\n\
             [profiles.big]\nprovider = \"openai\"\nmodel = \"big-model\"\nbase_url = \"{}\"\napi_key_env = \"TOOLHOST_TEST_NO_SUCH_KEY\"\n\
             [profiles.small]\nprovider = \"openai\"\nmodel = \"small-model\"\nbase_url = \"{}\"\napi_key_env = \"TOOLHOST_TEST_NO_SUCH_KEY\"\n",
            big.base_url(),
            small.base_url()
        ),
    )
    .unwrap();
    let mut args = common::args(dir.path());
    args.models = Some(models);
    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();

    let (status, body) =
        server.post("/v1/sessions", json!({"working_directory": ws.path(), "sub_agent_model": "huge"})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.to_string().contains("the configured ones are: big, small"), "{body}");

    let sid = server.session(json!({"working_directory": ws.path(), "sub_agent_model": "small"})).await;
    let (_, view) = server.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(view["sub_agent_model"], "small", "{view}");
    let (_, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue?provider=openai")).await;
    assert!(catalogue.to_string().contains("\"callSubAgent\""), "{catalogue}");

    let result = server
        .call(
            &sid,
            "sa",
            "callSubAgent",
            json!({"task": "Read notes.txt and tell me what it says.", "tools": ["readFile"]}),
        )
        .await;
    assert_eq!(result["status"], "executed", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.starts_with("The notes say: hello from inside."), "{content}");
    assert!(content.contains("[sub-agent (small): 1 calls — readFile;"), "{content}");
    assert_eq!(big.received().len(), 0, "the session's profile was used, not the default");
    let sent = &small.received()[0].body;
    assert_eq!(sent["model"], "small-model");
    let names: Vec<&str> =
        sent["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["readFile"], "only the tools it was given");
    assert!(small.received()[0].header("authorization").is_none(), "no key in the environment, none sent");

    // The sub-agent's call is in the session's journal, under its parent.
    let (_, rows) = server.get(&format!("/v1/journal?session_id={sid}")).await;
    let nested =
        rows.as_array().unwrap().iter().find(|r| r["call_id"] == "sa/1").expect("the nested call").clone();
    assert_eq!(
        (nested["parent_call_id"].as_str(), nested["api"].as_str()),
        (Some("sa"), Some("readFile")),
        "{nested}"
    );
    assert_eq!(nested["status"], "executed");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_models_there_is_no_sub_agent_tool() {
    let server = TestServer::start().await;
    let ws = workspace();
    let (status, body) =
        server.post("/v1/sessions", json!({"working_directory": ws.path(), "sub_agent_model": "any"})).await;
    assert_eq!(status, 400, "{body}");
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let (_, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue?provider=openai")).await;
    assert!(!catalogue.to_string().contains("callSubAgent"), "{catalogue}");
    server.stop().await;
}
