//! The HTTP API: in process (`oneshot`) for the error contract, over a real socket for the flows.

mod common;

use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{Request, StatusCode};
use common::{OUTSIDE, TestServer, workspace};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

async fn oneshot(app: &axum::Router, request: Request<Body>) -> (StatusCode, Value) {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
}

fn post(path: &str, body: impl Into<Body>) -> Request<Body> {
    Request::post(path).header("content-type", "application/json").body(body.into()).unwrap()
}

fn get(path: &str) -> Request<Body> {
    Request::get(path).body(Body::empty()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_documented_error_body_and_the_right_status() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.max_body_bytes = 4096;
    let state = toolhost_server::AppState::build(args).await.unwrap();
    let app = toolhost_server::router(state.clone());
    let ws = workspace();
    let (status, session) =
        oneshot(&app, post("/v1/sessions", json!({"working_directory": ws.path()}).to_string())).await;
    assert_eq!(status, StatusCode::CREATED, "{session}");
    let sid = session["id"].as_str().unwrap();
    let calls = format!("/v1/sessions/{sid}/calls");

    let big =
        json!({"calls": [{"id": "c1", "name": "readFile", "arguments": "x".repeat(10_000)}]}).to_string();
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (post("/v1/sessions", "{not json"), StatusCode::BAD_REQUEST, "invalid_json"),
        (
            Request::post("/v1/sessions").body(Body::from("{}")).unwrap(),
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
        ),
        (post("/v1/sessions", r#"{"approval_mode": "yolo"}"#), StatusCode::BAD_REQUEST, "invalid_body"),
        (post("/v1/sessions", r#"{"surprise": 1}"#), StatusCode::BAD_REQUEST, "invalid_body"),
        (
            post("/v1/sessions", r#"{"working_directory": "relative/dir"}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            post("/v1/sessions", r#"{"working_directory": "/no/such/folder"}"#),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (post("/v1/sessions", r#"{"tools": ["no-such-tool"]}"#), StatusCode::BAD_REQUEST, "bad_request"),
        (post("/v1/sessions", r#"{"device_id": "laptop"}"#), StatusCode::BAD_REQUEST, "bad_request"),
        (post(&calls, big), StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large"),
        (post(&calls, r#"{"calls": []}"#), StatusCode::BAD_REQUEST, "bad_request"),
        (post(&calls, r#"{"calls": [{"id": "c1"}]}"#), StatusCode::BAD_REQUEST, "bad_request"),
        (post(&calls, r#"{"calls": [42]}"#), StatusCode::BAD_REQUEST, "bad_request"),
        (
            post(
                &calls,
                json!({"calls": [{"id": "c", "name": "n".repeat(300), "arguments": "{}"}]}).to_string(),
            ),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (
            post(
                "/v1/sessions/ses_nope/calls",
                r#"{"calls": [{"id":"c","name":"readFile","arguments":"{}"}]}"#,
            ),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (get("/v1/sessions/ses_nope"), StatusCode::NOT_FOUND, "not_found"),
        (
            post("/v1/approvals/appr-nope", r#"{"decision": {"kind": "allow_once"}}"#),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            post("/v1/approvals/appr-nope", r#"{"decision": {"kind": "maybe"}}"#),
            StatusCode::BAD_REQUEST,
            "invalid_body",
        ),
        (
            Request::delete("/v1/remembered/rem-nope").body(Body::empty()).unwrap(),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (get("/v1/journal?status=great"), StatusCode::BAD_REQUEST, "bad_request"),
        (get("/v1/journal?limit=many"), StatusCode::BAD_REQUEST, "bad_request"),
        (get("/v1/journal/nope:nothing"), StatusCode::NOT_FOUND, "not_found"),
        (
            get(&format!("/v1/sessions/{sid}/catalogue?provider=cobol")),
            StatusCode::BAD_REQUEST,
            "bad_request",
        ),
        (get("/v1/nothing-here"), StatusCode::NOT_FOUND, "not_found"),
        (get("/v1/sessions/%FF%FE"), StatusCode::BAD_REQUEST, "bad_request"),
        (
            Request::put("/v1/sessions").body(Body::empty()).unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
        ),
    ];
    for (request, status, code) in cases {
        let label = format!("{} {}", request.method(), request.uri());
        let (got, body) = oneshot(&app, request).await;
        assert_eq!(got, status, "{label}: {body}");
        assert_eq!(body["error"]["code"], code, "{label}: {body}");
        assert!(body["error"]["message"].as_str().is_some_and(|m| !m.is_empty()), "{label}: {body}");
    }

    // Unknown tools and malformed arguments are not HTTP errors: they are results the model reads,
    // and nothing is left unsettled in the journal.
    let (status, body) = oneshot(
        &app,
        post(
            &calls,
            json!({"calls": [
                {"id": "u1", "name": "readFiel", "arguments": "{}"},
                {"id": "u2", "name": "readFile", "arguments": "{\"path\": \"notes"},
                {"id": "u3", "name": "readFile", "arguments": "{\"path\": 5}"},
            ]})
            .to_string(),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let results = body["results"].as_array().unwrap();
    assert_eq!(results.len(), 3);
    assert!(results[0]["output"]["content"].as_str().unwrap().contains("readFile"), "closest name: {body}");
    assert_eq!(results[1]["output"]["error"]["kind"], "invalid_arguments");
    assert_eq!(results[2]["output"]["error"]["kind"], "invalid_arguments");
    assert!(results.iter().all(|r| r["output"]["success"] == false));
    let (_, open) = oneshot(&app, get("/v1/journal?status=proposed")).await;
    assert_eq!(open, json!([]), "no row left proposed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_describes_every_route_and_the_viewer_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let state = toolhost_server::AppState::build(common::args(dir.path())).await.unwrap();
    let app = toolhost_server::router(state);
    let (status, doc) = oneshot(&app, get("/openapi.json")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"), "{}", doc["openapi"]);
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/v1/catalogue",
        "/v1/sessions",
        "/v1/sessions/{id}",
        "/v1/sessions/{id}/catalogue",
        "/v1/sessions/{id}/calls",
        "/v1/sessions/{id}/events",
        "/v1/approvals",
        "/v1/approvals/{id}",
        "/v1/remembered",
        "/v1/remembered/{id}",
        "/v1/journal",
        "/v1/journal/{key}",
        "/v1/journal/{key}/confirm",
        "/v1/devices",
        "/healthz",
        "/readyz",
        "/metrics",
    ] {
        assert!(paths.contains_key(path), "{path} missing from the document");
    }
    let schemas = doc["components"]["schemas"].as_object().unwrap();
    for schema in
        ["ErrorBody", "CreateSession", "SessionView", "SubmitCalls", "CallResult", "Attempt", "Decision"]
    {
        assert!(schemas.contains_key(schema), "{schema} missing");
    }
    // The viewer works offline: the page loads its script from this server, nothing from afar.
    let response = app.clone().oneshot(get("/docs")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    let html = response.into_body().collect().await.unwrap().to_bytes();
    let html = String::from_utf8_lossy(&html);
    assert!(html.contains("url: '/openapi.json'") && html.contains("src=\"/docs/scalar.js\""), "{html}");
    assert!(!html.contains("https://"), "nothing is loaded from elsewhere: {html}");
    let response = app.clone().oneshot(get("/docs/scalar.js")).await.unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.headers()["content-encoding"], "gzip");
    let script = response.into_body().collect().await.unwrap().to_bytes();
    let unzipped = gunzip(&script);
    assert!(unzipped.len() > 1_000_000, "the whole viewer is served ({} bytes)", unzipped.len());
}

/// The README's sequence: a read inside the folder runs, a read outside waits for approval, the
/// approval lets it run, and the journal lists both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inside_runs_outside_waits_for_approval_and_the_journal_lists_both() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;

    let (status, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue?provider=openai")).await;
    assert_eq!(status, 200);
    let names: Vec<&str> = catalogue["functions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["function"]["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"readFile") && names.contains(&"runCommand"), "{names:?}");
    assert!(catalogue["functions"][0]["function"]["strict"] == true);
    let role = catalogue["tools"][0]["system_role"].as_str().unwrap();
    assert!(role.contains(ws.path().to_str().unwrap()), "the system role names the working directory");

    let inside = server.call(&sid, "in", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(inside["status"], "executed", "{inside}");
    assert_eq!(inside["output"]["content"], "hello from inside");
    // Without a message id the server makes one, and its answer names the rows' keys: the read,
    // journalled once when it ended, is found under `message_id:call_id`.
    let (status, answer) = server
        .post(
            &format!("/v1/sessions/{sid}/calls"),
            json!({"calls": [{"id": "in2", "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
    let key = format!("{}:in2", answer["message_id"].as_str().unwrap());
    let (status, row) = server.get(&format!("/v1/journal/{key}")).await;
    assert_eq!((status, row["status"].as_str()), (200, Some("executed")), "{key}: {row}");

    let waiting = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{sid}/calls"));
        let body = json!({"message_id": "m-out", "calls": [{"id": "out", "name": "readFile",
            "arguments": json!({"path": OUTSIDE, "limit": 1}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    let approval = server.wait_for_approval("out").await;
    assert!(!waiting.is_finished(), "the outside read waits for a person");
    let (_, listed) = server.get(&format!("/v1/approvals?session_id={sid}")).await;
    assert!(listed[0]["reason"].as_str().unwrap().contains("outside the working directory"), "{listed}");

    let (status, decided) = server
        .post(
            &format!("/v1/approvals/{approval}"),
            json!({"decision": {"kind": "allow_once"}, "by": "alice"}),
        )
        .await;
    assert_eq!(status, 200, "{decided}");
    assert_eq!(decided["outcome"], "delivered");
    let response = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap();
    let outside = &response["results"][0];
    assert_eq!(outside["status"], "executed", "{response}");
    assert!(outside["output"]["content"].as_str().unwrap().starts_with("root:"), "{outside}");
    let (status, again) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 404, "an approval is decided once: {again}");

    let (_, journal) = server.get(&format!("/v1/journal?session_id={sid}")).await;
    let rows = journal.as_array().unwrap();
    assert_eq!(rows.len(), 3, "{journal}");
    let out_row = rows.iter().find(|r| r["call_id"] == "out").unwrap();
    assert_eq!(out_row["status"], "executed");
    assert_eq!(out_row["decision"], "allow_once");
    // Who decided comes from the caller, never from the body (an open server's caller is `local`).
    assert_eq!(out_row["decided_by"], "local");
    let (status, one) = server.get("/v1/journal/m-out:out").await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["arguments"]["path"], OUTSIDE);
    let (status, confirmed) = server.post("/v1/journal/m-out:out/confirm", json!({})).await;
    assert_eq!((status, confirmed["status"].as_str()), (200, Some("confirmed")), "{confirmed}");

    let (_, metrics) = {
        let text = server.client.get(server.url("/metrics")).send().await.unwrap().text().await.unwrap();
        (0, text)
    };
    assert!(
        metrics
            .contains("toolhost_calls_total{tenant=\"local\",tool=\"local-system\",status=\"executed\"} 3"),
        "{metrics}"
    );
    assert!(metrics.contains("toolhost_pending_approvals_total 0"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_batch_sends_events_as_they_happen_and_results_in_the_models_order() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let body = json!({"stream": true, "calls": [
        // OpenAI and Anthropic shapes are taken as they come from the model.
        {"id": "slow", "type": "function", "function": {"name": "runCommand",
            "arguments": json!({"command": "sleep 0.3; echo slow"}).to_string()}},
        {"type": "tool_use", "id": "fast", "name": "readFile", "input": {"path": "notes.txt"}},
    ]});
    let response = server
        .client
        .post(server.url(&format!("/v1/sessions/{sid}/calls")))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert!(response.headers()["content-type"].to_str().unwrap().starts_with("text/event-stream"));
    let text = tokio::time::timeout(Duration::from_secs(20), response.text()).await.unwrap().unwrap();
    let events: Vec<(String, Value)> = text
        .split("\n\n")
        .filter_map(|block| {
            let kind = block.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data = block.lines().find_map(|l| l.strip_prefix("data: "))?;
            Some((kind.to_owned(), serde_json::from_str(data).unwrap()))
        })
        .collect();
    let kinds: Vec<&str> = events.iter().map(|(k, _)| k.as_str()).collect();
    let position = |kind: &str, call: &str| {
        events
            .iter()
            .position(|(k, v)| k == kind && v["call_id"] == call)
            .unwrap_or_else(|| panic!("{kind} {call}: {kinds:?}"))
    };
    assert!(position("call.proposed", "slow") < position("call.finished", "slow"));
    assert!(position("call.started", "slow") < position("call.finished", "slow"));
    assert!(
        position("call.finished", "fast") < events.len() - 1,
        "events come before the results: {kinds:?}"
    );
    let (last, results) = events.last().unwrap();
    assert_eq!(last, "results", "{kinds:?}");
    let ids: Vec<&str> =
        results["results"].as_array().unwrap().iter().map(|r| r["call_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["slow", "fast"], "results in the model's order");
    assert!(results["results"][0]["output"]["content"].as_str().unwrap().contains("slow"));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn denials_headless_blocks_and_ending_a_session_all_settle_the_journal() {
    let server = TestServer::start().await;
    let ws = workspace();

    // Deny with a message: the model reads it.
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let pending = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{sid}/calls"));
        let body = json!({"calls": [{"id": "d1", "name": "readFile", "arguments": json!({"path": OUTSIDE}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    let approval = server.wait_for_approval("d1").await;
    let (status, _) = server
        .post(
            &format!("/v1/approvals/{approval}"),
            json!({"decision": {"kind": "deny_with_message", "message": "not that file"}}),
        )
        .await;
    assert_eq!(status, 200);
    let denied = pending.await.unwrap();
    assert_eq!(denied["results"][0]["status"], "denied");
    assert!(denied["results"][0]["output"]["content"].as_str().unwrap().contains("not that file"));

    // Headless: what would ask is blocked at once.
    let headless = server.session(json!({"working_directory": ws.path(), "approval_mode": "headless"})).await;
    let started = Instant::now();
    let blocked = server.call(&headless, "h1", "readFile", json!({"path": OUTSIDE})).await;
    assert_eq!(blocked["status"], "blocked");
    assert_eq!(blocked["output"]["content"], "Blocked by security/privacy.");
    assert!(started.elapsed() < Duration::from_secs(5));

    // Ending a session cancels a call that waits for approval; the row settles.
    let ending = server.session(json!({"working_directory": ws.path()})).await;
    let waiting = {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{ending}/calls"));
        let body = json!({"calls": [{"id": "e1", "name": "readFile", "arguments": json!({"path": OUTSIDE}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    server.wait_for_approval("e1").await;
    let (status, ended) = server.delete(&format!("/v1/sessions/{ending}")).await;
    assert_eq!((status, ended["status"].as_str()), (200, Some("ended")), "{ended}");
    let cancelled = tokio::time::timeout(Duration::from_secs(10), waiting).await.unwrap().unwrap();
    assert_eq!(cancelled["results"][0]["status"], "failed", "{cancelled}");
    assert_eq!(cancelled["results"][0]["output"]["error"]["kind"], "cancelled");
    let (status, _) = server
        .post(
            &format!("/v1/sessions/{ending}/calls"),
            json!({"calls": [{"id": "late", "name": "readFile", "arguments": "{}"}]}),
        )
        .await;
    assert_eq!(status, 409, "an ended session takes no calls");
    let (_, proposed) = server.get("/v1/journal?status=proposed").await;
    assert_eq!(proposed, json!([]));
    let (_, pending) = server.get("/v1/approvals").await;
    assert_eq!(pending, json!([]));
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_sees_only_its_own_tenant() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    let ws = workspace();
    // Person keys: each tenant proposes and decides its own calls.
    let person = toolhost_server::auth::Role::Person;
    args.api_keys = vec![
        toolhost_server::auth::stored_form_as("acme", person, "ops", "key-acme"),
        toolhost_server::auth::stored_form_as("globex", person, "ops", "key-globex"),
    ];
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::shared(ws.path())];
    // With keys, nothing past a tenant's folders can be approved: the operator grants `/etc` for
    // reading, so a read there (outside the session's folder) asks a person.
    args.tenant_paths = vec!["*=ro:/etc".parse().unwrap()];
    let acme = TestServer::start_with(dir, args).await.with_key("key-acme");
    let base = acme.base.clone();
    let globex = TestServer {
        base: base.clone(),
        state: acme.state.clone(),
        stop: None,
        handle: tokio::spawn(async { Ok(()) }),
        dir: tempfile::tempdir().unwrap(),
        client: acme.client.clone(),
        key: Some("key-globex".into()),
    };

    // No key, a wrong key: 401 with the error body.
    let response = acme.client.get(format!("{base}/v1/journal")).send().await.unwrap();
    assert_eq!(response.status(), 401);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "unauthorized");
    let response =
        acme.client.get(format!("{base}/v1/journal")).bearer_auth("key-nobody").send().await.unwrap();
    assert_eq!(response.status(), 401);
    // Health stays open for probes.
    assert_eq!(acme.client.get(format!("{base}/healthz")).send().await.unwrap().status(), 200);

    // With keys, sessions must stay inside the workspace roots.
    let (status, body) = acme.post("/v1/sessions", json!({"working_directory": "/"})).await;
    assert_eq!(status, 400, "{body}");

    let sid = acme.session(json!({"working_directory": ws.path()})).await;
    acme.call(&sid, "a1", "readFile", json!({"path": "notes.txt"})).await;
    let waiting = {
        let client = acme.client.clone();
        let url = acme.url(&format!("/v1/sessions/{sid}/calls"));
        let body = json!({"calls": [{"id": "a2", "name": "readFile", "arguments": json!({"path": OUTSIDE}).to_string()}]});
        tokio::spawn(async move {
            client
                .post(url)
                .bearer_auth("key-acme")
                .json(&body)
                .send()
                .await
                .unwrap()
                .json::<Value>()
                .await
                .unwrap()
        })
    };
    let approval = acme.wait_for_approval("a2").await;

    // Globex cannot see, call, decide or read any of it.
    assert_eq!(globex.get(&format!("/v1/sessions/{sid}")).await.0, 404);
    assert_eq!(globex.get(&format!("/v1/sessions/{sid}/catalogue")).await.0, 404);
    let (status, _) = globex
        .post(
            &format!("/v1/sessions/{sid}/calls"),
            json!({"calls": [{"id": "g", "name": "readFile", "arguments": "{}"}]}),
        )
        .await;
    assert_eq!(status, 404);
    assert_eq!(globex.get("/v1/approvals").await.1, json!([]));
    let (status, _) =
        globex.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_once"}})).await;
    assert_eq!(status, 404);
    assert_eq!(globex.get("/v1/journal").await.1, json!([]));
    let (_, rows) = acme.get("/v1/journal").await;
    let key = rows[0]["key"].as_str().unwrap().to_owned();
    assert_eq!(globex.get(&format!("/v1/journal/{key}")).await.0, 404);
    assert_eq!(globex.delete(&format!("/v1/sessions/{sid}")).await.0, 404);

    // Acme's own decision goes through.
    let (status, _) =
        acme.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 200);
    assert_eq!(waiting.await.unwrap()["results"][0]["status"], "denied");
    drop(globex);
    acme.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_running_calls_finish_and_settles_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.shutdown_grace_secs = 2;
    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let asking = server.session(json!({"working_directory": ws.path()})).await;
    let submit = |session: String, id: &'static str, arguments: Value, name: &'static str| {
        let client = server.client.clone();
        let url = server.url(&format!("/v1/sessions/{session}/calls"));
        let body = json!({"calls": [{"id": id, "name": name, "arguments": arguments.to_string()}]});
        tokio::spawn(async move { client.post(url).json(&body).send().await.map(|r| r.status().as_u16()) })
    };
    let _short = submit(sid.clone(), "short", json!({"command": "sleep 0.5; echo done"}), "runCommand");
    let _stuck = submit(asking.clone(), "stuck", json!({"path": OUTSIDE}), "readFile");
    server.wait_for_approval("stuck").await;
    let state = server.state.clone();
    let started = Instant::now();
    server.stop().await;
    assert!(started.elapsed() < Duration::from_secs(15));
    let rows = state.journal.query("local", &journal::AttemptFilter::default()).await.unwrap();
    let status = |id: &str| rows.iter().find(|r| r.call_id == id).map(|r| r.status.as_str()).unwrap();
    assert_eq!(status("short"), "executed", "a call in flight finishes within the grace");
    assert_eq!(status("stuck"), "failed", "a call still waiting after the grace is cancelled and settled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_server_answers_only_requests_addressed_to_this_machine() {
    let server = TestServer::start().await;
    let send = |header: &'static str, value: &'static str| {
        server.client.get(server.url("/v1/journal")).header(header, value).send()
    };
    // DNS rebinding: a page on evil.example whose name now resolves to 127.0.0.1.
    let response = send("host", "evil.example:8080").await.unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(response.json::<Value>().await.unwrap()["error"]["code"], "forbidden");
    // A page of another origin (WebSockets get no CORS protection from browsers).
    assert_eq!(send("origin", "https://evil.example").await.unwrap().status(), 403);
    assert_eq!(send("origin", "http://localhost:3000").await.unwrap().status(), 200);
    assert_eq!(send("host", "localhost:8080").await.unwrap().status(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_whose_session_ends_still_ends_with_the_results() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let response = server
        .client
        .post(server.url(&format!("/v1/sessions/{sid}/calls")))
        .json(&json!({"stream": true, "calls": [{"id": "z", "name": "runCommand", "arguments": "{\"command\": \"sleep 20\"}"}]}))
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(server.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    let text = tokio::time::timeout(Duration::from_secs(15), response.text()).await.unwrap().unwrap();
    let last = text.trim_end().rsplit("\n\n").next().unwrap();
    assert!(last.starts_with("event: results"), "{text}");
    assert!(last.contains("\"cancelled\""), "{last}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn always_allow_is_remembered_listed_and_revocable() {
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "project": "demo"})).await;
    let read_outside = |id: &'static str| {
        common::submit(
            &server,
            &sid,
            json!([{"id": id, "name": "readFile", "arguments": json!({"path": OUTSIDE, "limit": 1}).to_string()}]),
        )
    };
    let first = read_outside("r1");
    let approval = server.wait_for_approval("r1").await;
    // The listing offers the file's folder as the scope of "for the session" and "always".
    let outside = std::path::Path::new(OUTSIDE).canonicalize().unwrap();
    let folder = outside.parent().unwrap().display().to_string();
    let (_, waiting) = server.get("/v1/approvals").await;
    let listed = waiting.as_array().unwrap().iter().find(|a| a["id"] == approval.as_str()).unwrap();
    assert_eq!(listed["scope"], folder.as_str(), "{listed}");
    // "Always" without a scope, as an API client may send it: this file alone, not the API.
    let (status, _) = server
        .post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_always"}}))
        .await;
    assert_eq!(status, 200);
    assert_eq!(first.await.unwrap()["results"][0]["status"], "executed");

    // Remembered for the project: the next read of the file runs without asking.
    let (_, remembered) = server.get("/v1/remembered?project=demo").await;
    let rows = remembered.as_array().unwrap();
    assert_eq!(rows.len(), 1, "{remembered}");
    assert_eq!((rows[0]["tool"].as_str(), rows[0]["api"].as_str()), (Some("local-system"), Some("readFile")));
    assert_eq!(rows[0]["argument_prefix"], outside.display().to_string().as_str(), "{remembered}");
    let second = tokio::time::timeout(Duration::from_secs(10), read_outside("r2")).await.unwrap().unwrap();
    assert_eq!(second["results"][0]["status"], "executed", "{second}");
    // A file beside it is asked about: the rule is the file, not every path.
    let beside = common::submit(
        &server,
        &sid,
        json!([{"id": "beside", "name": "readFile", "arguments": json!({"path": format!("{folder}/hostname")}).to_string()}]),
    );
    let approval = server.wait_for_approval("beside").await;
    server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(beside.await.unwrap()["results"][0]["status"], "denied");

    // Revoked: it asks again.
    let id = rows[0]["id"].as_str().unwrap();
    let response = server.client.delete(server.url(&format!("/v1/remembered/{id}"))).send().await.unwrap();
    assert_eq!(response.status(), 204);
    assert_eq!(server.get("/v1/remembered").await.1, json!([]));
    let third = read_outside("r3");
    let approval = server.wait_for_approval("r3").await;
    server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(third.await.unwrap()["results"][0]["status"], "denied");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_the_shared_temp_folders_are_outside_every_session() {
    let elsewhere = tempfile::tempdir().unwrap();
    let other_file = elsewhere.path().join("other-tenant.txt");
    std::fs::write(&other_file, "not yours\n").unwrap();
    let ws = workspace();
    let read = json!({"path": other_file});

    // Open (one person's machine): temp folders are in scope, as for the local tools.
    let open = TestServer::start().await;
    let sid = open.session(json!({"working_directory": ws.path(), "approval_mode": "headless"})).await;
    assert_eq!(open.call(&sid, "t1", "readFile", read.clone()).await["status"], "executed");
    open.stop().await;

    // With keys (tenants share the machine): outside, so a headless session is blocked.
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.api_keys = vec![toolhost_server::auth::stored_form("acme", "key-acme")];
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::shared(ws.path())];
    let server = TestServer::start_with(dir, args).await.with_key("key-acme");
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "headless"})).await;
    assert_eq!(server.call(&sid, "t2", "readFile", read).await["status"], "blocked");
    assert_eq!(server.call(&sid, "t3", "readFile", json!({"path": "notes.txt"})).await["status"], "executed");
    server.stop().await;
}

/// A keyed server with one tenant, `acme`, whose person key is `key-acme`, and its workspace.
async fn acme_with(
    configure: impl FnOnce(&mut toolhost_server::ServeArgs),
) -> (TestServer, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let ws = workspace();
    let mut args = common::args(dir.path());
    let person = toolhost_server::auth::Role::Person;
    let operator = toolhost_server::auth::Role::Operator;
    args.api_keys = vec![
        toolhost_server::auth::stored_form_as("acme", person, "ops", "key-acme"),
        toolhost_server::auth::stored_form_as("ops", operator, "root", "key-operator"),
    ];
    args.workspace_roots = vec![toolhost_server::config::WorkspaceRoot::of("acme", ws.path())];
    // `/etc` granted for reading: a read there is within the tenant's limit, so it asks.
    args.tenant_paths = vec!["acme=ro:/etc".parse().unwrap()];
    configure(&mut args);
    (TestServer::start_with(dir, args).await.with_key("key-acme"), ws)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_past_its_budget_gets_429_and_metrics_take_a_key() {
    let (server, ws) = acme_with(|args| {
        args.tenant_batches = 1;
        args.tenant_sessions = 2;
    })
    .await;
    let sid = server.session(json!({"working_directory": ws.path()})).await;

    // One batch waits for a person, and holds the tenant's only batch.
    let waiting = {
        let (client, url) = (server.client.clone(), server.url(&format!("/v1/sessions/{sid}/calls")));
        let body = json!({"calls": [{"id": "w", "name": "readFile", "arguments": json!({"path": OUTSIDE}).to_string()}]});
        tokio::spawn(async move {
            client.post(url).bearer_auth("key-acme").json(&body).send().await.unwrap().status()
        })
    };
    server.wait_for_approval("w").await;
    let response = server
        .client
        .post(server.url(&format!("/v1/sessions/{sid}/calls")))
        .bearer_auth("key-acme")
        .json(&json!({"calls": [{"id": "x", "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "1");
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too_many_requests", "{body}");

    // Sessions: two held, a third is refused.
    server.session(json!({"working_directory": ws.path()})).await;
    let (status, body) = server.post("/v1/sessions", json!({"working_directory": ws.path()})).await;
    assert_eq!(status, 429, "{body}");

    // Metrics: an operator's key is needed on a server with keys (they span tenants).
    let anonymous = server.client.get(server.url("/metrics")).send().await.unwrap();
    assert_eq!(anonymous.status(), 401);
    let tenant = server.client.get(server.url("/metrics")).bearer_auth("key-acme").send().await.unwrap();
    assert_eq!(tenant.status(), 403);
    let keyed = server.client.get(server.url("/metrics")).bearer_auth("key-operator").send().await.unwrap();
    assert_eq!(keyed.status(), 200);
    let text = keyed.text().await.unwrap();
    assert!(text.contains("toolhost_tenants_starved 0"), "{text}");
    assert!(text.contains("toolhost_pending_approvals{tenant=\"acme\"} 1"), "{text}");
    assert!(text.contains("toolhost_http_responses_total{code=\"429\"} 2"), "{text}");

    let (_, pending) = server.get("/v1/approvals").await;
    let approval = pending[0]["id"].as_str().unwrap().to_owned();
    let (status, body) =
        server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(tokio::time::timeout(Duration::from_secs(20), waiting).await.unwrap().unwrap(), 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_approvals_are_bounded_and_idle_sessions_expire() {
    let (server, ws) = acme_with(|args| {
        args.tenant_approvals = 1;
        args.session_idle_secs = 1;
    })
    .await;
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    // One batch, two calls that would ask: the budget counts calls, so only one waits.
    let read = json!({"path": OUTSIDE}).to_string();
    let waiting = common::submit(
        &server,
        &sid,
        json!([{"id": "w", "name": "readFile", "arguments": read}, {"id": "w2", "name": "readFile", "arguments": read}]),
    );
    let mut asked = Vec::new();
    for _ in 0..200 {
        let (_, list) = server.get("/v1/approvals").await;
        asked = list.as_array().cloned().unwrap_or_default();
        if !asked.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (_, list) = server.get("/v1/approvals").await;
    assert_eq!(list.as_array().map(Vec::len), Some(1), "one call waits, the other is not asked: {list}");
    let approval = asked[0]["id"].as_str().unwrap().to_owned();
    let (status, body) = server
        .post(
            &format!("/v1/sessions/{sid}/calls"),
            json!({"calls": [{"id": "x", "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]}),
        )
        .await;
    assert_eq!(status, 429, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("approvals waiting"), "{body}");
    server.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "deny"}})).await;
    let results =
        tokio::time::timeout(Duration::from_secs(20), waiting).await.unwrap().unwrap()["results"].clone();
    assert_eq!(
        (results[0]["status"].as_str(), results[1]["status"].as_str()),
        (Some("denied"), Some("denied"))
    );
    let not_asked: Vec<&Value> =
        results.as_array().unwrap().iter().filter(|r| r.to_string().contains("not asked")).collect();
    assert_eq!(not_asked.len(), 1, "{results}");

    // A session nobody uses is ended after the idle time (here one second).
    let idle = server.session(json!({"working_directory": ws.path()})).await;
    let mut ended = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let (_, rows) = server.get(&format!("/v1/journal?session_id={idle}")).await;
        assert_eq!(rows, json!([]));
        if !server.state.sessions.read().unwrap().contains_key(&idle) {
            ended = true;
            break;
        }
    }
    assert!(ended, "the idle session was not ended");
    let (status, view) = server.get(&format!("/v1/sessions/{idle}")).await;
    assert_eq!((status, view["status"].as_str()), (200, Some("ended")), "{view}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_cannot_reach_its_own_servers_api() {
    // An open server: its sessions have the network on, and its API trusts whoever calls.
    let server = TestServer::start().await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let (_, view) = server.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!(view["sandbox"]["network"], "on", "{view}");
    let port = server.base.rsplit(':').next().unwrap();
    let elsewhere = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let command = format!(
        "exec 3<>/dev/tcp/127.0.0.1/{port} && echo reached-the-api; exec 4<>/dev/tcp/127.0.0.1/{} && echo reached-elsewhere",
        elsewhere.local_addr().unwrap().port()
    );
    let result = server.call(&sid, "net", "runCommand", json!({"command": command})).await;
    let content = result["output"]["content"].as_str().unwrap();
    assert!(!content.contains("reached-the-api") && content.contains("Permission denied"), "{result}");
    assert!(content.contains("reached-elsewhere"), "the rest of the network is on: {result}");
    server.stop().await;
}

/// Decompresses with the system's gzip (no compression crate is needed for one test).
fn gunzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("gzip")
        .arg("-dc")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = bytes.to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input).unwrap());
    let output = child.wait_with_output().unwrap();
    writer.join().unwrap();
    assert!(output.status.success());
    output.stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_need_no_key_and_an_ended_sessions_events_are_a_conflict() {
    let server = TestServer::start().await;
    let doc = toolhost_server::openapi();
    let doc = serde_json::to_value(&doc).unwrap();
    for probe in ["/healthz", "/readyz"] {
        assert_eq!(
            doc["paths"][probe]["get"]["security"],
            json!([{}]),
            "{probe} is open: {}",
            doc["paths"][probe]
        );
    }
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    assert_eq!(server.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    let (status, body) = server.get(&format!("/v1/sessions/{sid}/events")).await;
    assert_eq!(status, 409, "{body}");
    server.stop().await;
}

#[test]
fn the_document_states_limits_and_the_errors_endpoints_return() {
    let doc = serde_json::to_value(toolhost_server::openapi()).unwrap();
    let calls = &doc["components"]["schemas"]["SubmitCalls"]["properties"]["calls"];
    assert_eq!((calls["minItems"].as_u64(), calls["maxItems"].as_u64()), (Some(1), Some(128)), "{calls}");
    let dir = &doc["components"]["schemas"]["CreateSession"]["properties"]["working_directory"];
    assert_eq!(dir["maxLength"], 4096, "{dir}");
    for (path, method, statuses) in [
        ("/v1/sessions", "post", &["403", "415", "429"][..]),
        ("/v1/sessions/{id}/calls", "post", &["401", "403", "415", "429"][..]),
        ("/v1/approvals/{id}", "post", &["403", "415"][..]),
    ] {
        let responses = &doc["paths"][path][method]["responses"];
        for status in statuses {
            assert!(
                responses.get(*status).is_some(),
                "{method} {path} does not document {status}: {responses}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_beside_the_journal_writes_and_one_over_it_is_refused() {
    // The journal in a folder that also holds a workspace: the workspace stays writable (only the
    // journal's files are denied), and a session on the journal's own folder is refused.
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let work = root.join("work");
    std::fs::create_dir_all(&work).unwrap();
    let args = common::args(&root);
    let server = TestServer::start_with(dir, args).await;
    let sid = server.session(json!({"working_directory": work, "approval_mode": "auto_run"})).await;
    let made =
        server.call(&sid, "w", "runCommand", json!({"command": "echo hi > made.txt && cat made.txt"})).await;
    assert_eq!(made["status"], "executed", "{made}");
    let peek = server
        .call(&sid, "p", "runCommand", json!({"command": format!("cat {}/journal.db", root.display())}))
        .await;
    assert_ne!(peek["status"], "executed", "the journal is not a command's to read: {peek}");
    let (status, body) = server.post("/v1/sessions", json!({"working_directory": root})).await;
    assert_eq!(status, 400, "{body}");
    assert!(body["error"]["message"].as_str().unwrap().contains("this server's own files"), "{body}");
    server.stop().await;
}

/// `--journal-retention-days` and `--journal-content-days` reach the journal: at start the server
/// prunes a settled call older than the retention, cuts the result of one older than the content
/// days, and leaves a recent one whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_prunes_and_cuts_its_journal_by_the_retention_flags() {
    let server = TestServer::start().await;
    let ws = workspace();
    std::fs::write(ws.path().join("long.txt"), "a line of a long file\n".repeat(40)).unwrap();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let mut keys = Vec::new();
    for id in ["old", "middle", "new"] {
        let (status, answer) = server
            .post(
                &format!("/v1/sessions/{sid}/calls"),
                json!({"calls": [{"id": id, "name": "readFile", "arguments": "{\"path\": \"long.txt\"}"}]}),
            )
            .await;
        assert_eq!((status, answer["results"][0]["status"].as_str()), (200, Some("executed")), "{answer}");
        keys.push(format!("{}:{id}", answer["message_id"].as_str().unwrap()));
    }
    let dir = server.stop().await;

    // Age two of the rows as if they had been made 25 and 10 days ago: written into the journal's
    // own table, which the API never back-dates.
    let day = 86_400_000_i64;
    let db = rusqlite::Connection::open(dir.path().join("journal.db")).unwrap();
    for (key, days) in [(&keys[0], 25), (&keys[1], 10)] {
        let changed = db
            .execute(
                "UPDATE tool_call_attempts SET attempted_at = attempted_at - ?2, updated_at = updated_at - ?2 \
                 WHERE key = ?1",
                rusqlite::params![key, days * day],
            )
            .unwrap();
        assert_eq!(changed, 1, "{key}");
    }
    drop(db);

    let mut args = common::args(dir.path());
    // Not the default retention (30 days), which would keep the 25-day-old call.
    args.journal_retention_days = 20;
    args.journal_content_days = 5;
    let server = TestServer::start_with(dir, args).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (old, middle) = loop {
        let (old, _) = server.get(&format!("/v1/journal/{}", keys[0])).await;
        let (_, middle) = server.get(&format!("/v1/journal/{}", keys[1])).await;
        if old == 404 && middle["result"]["expired"] == true {
            break (old, middle);
        }
        assert!(Instant::now() < deadline, "not pruned and cut in time: old {old}, middle {middle}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(old, 404, "the call past the retention is pruned");
    let cut = middle["result"]["content"].as_str().unwrap();
    assert_eq!(cut.chars().count(), 200, "{middle}");
    assert!(cut.starts_with("a line of a long file\na line"), "{middle}");
    assert_eq!(middle["status"], "executed", "the cut call's row stays: {middle}");
    let (status, new) = server.get(&format!("/v1/journal/{}", keys[2])).await;
    assert_eq!(status, 200, "{new}");
    assert!(new["result"].get("expired").is_none(), "a recent result stays whole: {new}");
    let whole = new["result"]["content"].as_str().unwrap();
    assert!(whole.len() > 800 && whole.starts_with("a line of a long file"), "{new}");
    server.stop().await;
}
