//! `askUser` on the server: the question waits on the approvals channel (listed as a question, an
//! event on the stream), a person answers it with an answer that must fit, the model reads the
//! answer, and the journal keeps who gave it; a headless session is told at once that no one can
//! answer.

mod common;

use std::time::Duration;

use common::{TestServer, workspace};
use serde_json::{Value, json};

fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|block| {
            let kind = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((kind.to_owned(), serde_json::from_str(data).unwrap()))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_is_listed_answered_by_a_person_and_journalled_with_who() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let (_, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue?provider=openai")).await;
    assert!(catalogue.to_string().contains("\"askUser\""), "askUser is declared: {catalogue}");

    let question = json!({"question": "Which database should the service use?",
        "options": ["SQLite", "Postgres"], "allowOther": true});
    let streamed = {
        let request = server.client.post(server.url(&format!("/v1/sessions/{sid}/calls"))).json(&json!({
            "stream": true, "message_id": "m1",
            "calls": [{"id": "ask", "name": "askUser", "arguments": question.to_string()}]
        }));
        tokio::spawn(async move { request.send().await.unwrap().text().await.unwrap() })
    };
    let id = server.wait_for_approval("ask").await;
    let (_, listed) = server.get(&format!("/v1/approvals?session_id={sid}")).await;
    let row = listed.as_array().unwrap().iter().find(|r| r["id"] == id.as_str()).unwrap().clone();
    assert_eq!(row["kind"], "question", "{row}");
    assert_eq!(row["question"]["options"], json!(["SQLite", "Postgres"]), "{row}");
    assert_eq!(row["question"]["allowOther"], true);

    // What does not fit the question is refused, and the question still waits.
    let path = format!("/v1/approvals/{id}");
    for (decision, needle) in [
        (json!({"kind": "allow_once"}), "this is a question"),
        (json!({"kind": "answer", "answer": {"choices": ["MySQL"]}}), "not one of the options"),
        (json!({"kind": "answer", "answer": {"choices": ["SQLite", "Postgres"]}}), "only one option"),
        (json!({"kind": "answer", "answer": {}}), "empty"),
    ] {
        let (status, body) = server.post(&path, json!({ "decision": decision })).await;
        assert_eq!(status, 400, "{decision}: {body}");
        assert!(body.to_string().contains(needle), "{decision}: {body}");
    }
    let (status, body) = server
        .post(&path, json!({"decision": {"kind": "answer", "answer": {"choices": ["Postgres"]}}}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["decision"], "answer");

    let text = tokio::time::timeout(Duration::from_secs(20), streamed).await.unwrap().unwrap();
    let events = events(&text);
    let asked = events.iter().find(|(k, _)| k == "question.asked").expect("a question event");
    assert_eq!(asked.1["approval_id"], id.as_str());
    assert_eq!(asked.1["question"]["question"], "Which database should the service use?");
    let settled = events.iter().find(|(k, _)| k == "question.settled").expect("a settled event");
    assert_eq!((settled.1["outcome"].as_str(), settled.1["by"].as_str()), (Some("answered"), Some("local")));
    let (_, results) = events.last().unwrap();
    let result = &results["results"][0];
    assert_eq!(result["status"], "executed", "{result}");
    assert_eq!(result["output"]["content"], "The person answered: chose \"Postgres\" (answered by local).");

    // The journal: the call (proposed before it waited) with the answer and who gave it, and the
    // question's row with the answer as its decision.
    let (_, row) = server.get("/v1/journal/m1:ask").await;
    assert_eq!(row["status"], "executed", "{row}");
    assert_eq!(row["result"]["state"]["asked"]["by"], "local", "{row}");
    assert_eq!(row["result"]["state"]["asked"]["answer"]["choices"], json!(["Postgres"]), "{row}");
    let stored = server.state.journal.get_approval("local", &id).await.unwrap().unwrap();
    assert_eq!(stored.status, "answered");
    assert_eq!(stored.decided_by.as_deref(), Some("local"));
    assert_eq!(stored.decision.unwrap()["answer"]["choices"], json!(["Postgres"]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declined_question_and_a_headless_session_tell_the_model_what_to_do() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let waiting = common::submit(
        &server,
        &sid,
        json!([{"id": "q", "name": "askUser", "arguments": json!({"question": "Ship it today?"}).to_string()}]),
    );
    let id = server.wait_for_approval("q").await;
    // An approval's answer is not a question's.
    let (status, _) = server
        .post(
            &format!("/v1/approvals/{id}"),
            json!({"decision": {"kind": "deny_with_message", "message": "ask Bob"}}),
        )
        .await;
    assert_eq!(status, 200);
    let response = tokio::time::timeout(Duration::from_secs(20), waiting).await.unwrap().unwrap();
    let output = &response["results"][0]["output"];
    assert_eq!(output["error"]["kind"], "denied", "{response}");
    assert!(output["content"].as_str().unwrap().contains("declined to answer, saying: ask Bob"), "{output}");

    let headless = server.session(json!({"working_directory": ws.path(), "approval_mode": "headless"})).await;
    let started = std::time::Instant::now();
    let result = server.call(&headless, "h", "askUser", json!({"question": "Tabs or spaces?"})).await;
    assert!(started.elapsed() < Duration::from_secs(5), "nothing waited");
    assert_eq!(result["output"]["error"]["kind"], "blocked", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.contains("No one can answer") && content.contains("headless"), "{content}");
    let (_, listed) = server.get(&format!("/v1/approvals?session_id={headless}")).await;
    assert_eq!(listed, json!([]), "a headless question is never listed");

    // An answer to an approval that is not a question is refused.
    let outside = common::submit(
        &server,
        &sid,
        json!([{"id": "out", "name": "readFile", "arguments": json!({"path": "/etc/hostname"}).to_string()}]),
    );
    let id = server.wait_for_approval("out").await;
    let (status, body) = server
        .post(
            &format!("/v1/approvals/{id}"),
            json!({"decision": {"kind": "answer", "answer": {"text": "yes"}}}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    server.post(&format!("/v1/approvals/{id}"), json!({"decision": {"kind": "deny"}})).await;
    tokio::time::timeout(Duration::from_secs(20), outside).await.unwrap().unwrap();
    server.stop().await;
}
