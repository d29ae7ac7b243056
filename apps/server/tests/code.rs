//! The code interpreter and the calculator through the server: its HTTP API (in-process code
//! runs without asking, the full interpreter waits for a person and keeps its state) and MCP
//! over stdio (the real binary).

mod common;

use std::time::Duration;

use common::{TestServer, workspace};
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::transport::TokioChildProcess;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_code_runs_at_once_and_full_code_is_approved_first() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;

    // The engine the pipeline chose is in the journalled arguments, and the card's state.
    let pure = server
        .call(&sid, "c1", "runCode", json!({"language": "python", "code": "n = 2 ** 100\nn % 97"}))
        .await;
    assert_eq!(pure["status"], "executed", "{pure}");
    assert_eq!(pure["output"]["state"]["engine"], "in-process");
    assert_eq!(pure["output"]["state"]["value"], (2u128.pow(100) % 97).to_string());
    let again =
        server.call(&sid, "c2", "runCode", json!({"language": "python", "code": "n // 10 ** 29"})).await;
    assert_eq!(again["output"]["state"]["value"], "12", "state is kept: {again}");

    let calc = server.call(&sid, "k1", "calculate", json!({"expression": "2^200"})).await;
    assert_eq!(calc["status"], "executed", "{calc}");
    assert!(
        calc["output"]["content"]
            .as_str()
            .unwrap()
            .contains("1606938044258990275541962092341162602522202993782792835301376"),
        "{calc}"
    );

    // The full interpreter runs arbitrary code: a person is asked first.
    let waiting = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{sid}/calls"));
        let body = json!({"message_id": "m-full", "calls": [{"id": "full", "name": "runCode",
            "arguments": json!({"language": "python", "code": "import os\nwho = os.getpid()\nprint('pid', who)"}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    let approval = server.wait_for_approval("full").await;
    assert!(!waiting.is_finished());
    let (status, _) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_once"}})).await;
    assert_eq!(status, 200);
    let response = tokio::time::timeout(Duration::from_secs(30), waiting).await.unwrap().unwrap();
    let full = &response["results"][0];
    assert_eq!(full["status"], "executed", "{response}");
    assert_eq!(full["output"]["state"]["engine"], "full");
    assert!(full["output"]["content"].as_str().unwrap().contains("pid "), "{full}");
    let (_, row) = server.get("/v1/journal/m-full:full").await;
    assert_eq!(row["arguments"]["engine"], "full", "{row}");
    assert_eq!(row["tier"], "exec", "{row}");

    // Ending the session stops its interpreter.
    let pid: i32 = full["output"]["content"]
        .as_str()
        .unwrap()
        .split("pid ")
        .nth(1)
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let (status, _) = server.delete(&format!("/v1/sessions/{sid}")).await;
    assert!((200..300).contains(&status), "{status}");
    let mut gone = false;
    for _ in 0..100 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if state.is_empty() || state.rsplit(')').next().and_then(|r| r.split_whitespace().next()) == Some("Z")
        {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(gone, "the interpreter outlived its session");
    server.stop().await;
}

#[tokio::test]
async fn over_mcp_both_tools_answer_and_full_code_follows_the_approval_mode() {
    let dir = tempfile::tempdir().unwrap();
    let (data, work) = (dir.path().join("data"), dir.path().join("work"));
    std::fs::create_dir_all(&data).unwrap();
    std::fs::create_dir_all(&work).unwrap();
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command
        .args(["mcp-stdio", "--approval-mode", "headless", "--working-directory"])
        .arg(&work)
        .env("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display()))
        .env("TOOLHOST_STATE_DIR", &data)
        .env("RUST_LOG", "warn")
        .env_remove("TOOLHOST_API_KEYS");
    let client = ().serve(TokioChildProcess::new(command).unwrap()).await.unwrap();
    let call = |name: &'static str, arguments: Value| {
        let client = &client;
        async move {
            let params =
                CallToolRequestParams::new(name).with_arguments(arguments.as_object().unwrap().clone());
            let result = client.call_tool(params).await.unwrap();
            let text = serde_json::to_value(&result.content).unwrap()[0]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned();
            (result.is_error, text)
        }
    };
    let (error, text) = call("calculate", json!({"expression": "5 feet to cm"})).await;
    assert_eq!(error, Some(false), "{text}");
    assert!(text.contains("152.4"), "{text}");
    let (error, text) =
        call("runCode", json!({"language": "python", "code": "sum(i * i for i in range(10))"})).await;
    assert_eq!(error, Some(false), "{text}");
    assert!(text.contains("Out: 285") && text.contains("in-process"), "{text}");
    // Headless: the full interpreter would need a person, so it is blocked with the reason.
    let (error, text) = call("runCode", json!({"language": "python", "code": "import subprocess"})).await;
    assert_eq!(error, Some(true), "{text}");
    assert!(text.contains("Blocked"), "{text}");
    client.cancel().await.unwrap();
}
