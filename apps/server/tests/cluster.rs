//! Several instances: Postgres for the journal, Redis between them, both real servers on
//! loopback. A call submitted to instance A runs on a device connected to instance B; approvals,
//! cancellations and deadlines cross instances too.

mod common;

use std::time::{Duration, Instant};

use client_executor::ServerMessage;
use common::{
    TestServer, next_execute, next_message, raw_device, spawn_device, submit, wait_for_device, workspace,
};
use serde_json::json;
use test_support::{PgServer, RedisServer};

async fn instance(database_url: &str, redis_url: &str) -> TestServer {
    let dir = tempfile::tempdir().unwrap();
    let mut args = common::args(dir.path());
    args.database_url = Some(database_url.to_owned());
    args.redis_url = Some(redis_url.to_owned());
    TestServer::start_with(dir, args).await
}

/// Waits until `server` can route the session's calls to its device through the cluster (the
/// reference device registers in the background).
async fn wait_for_presence(server: &TestServer, session: &str) {
    for _ in 0..200 {
        let (_, body) = server
            .post(&format!("/v1/sessions/{session}/calls"), json!({"calls": [{"id": format!("probe-{}", rand_id()), "name": "todo_write", "arguments": "{\"todos\": []}"}]}))
            .await;
        if body["results"][0]["status"] == "executed" {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the device never became reachable from the other instance");
}

fn rand_id() -> u128 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_approvals_and_cancellations_cross_instances() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    let database = pg.database_url("cluster");
    let a = instance(&database, &redis.url()).await;
    let b = instance(&database, &redis.url()).await;
    assert_eq!(a.get("/readyz").await.0, 200);
    let ws = workspace();

    // The device connects to B only.
    let (stop, device) = spawn_device(&b.base, None, "laptop");
    wait_for_device(&b, "laptop").await;
    assert_eq!(a.get("/v1/devices").await.1, json!([]), "A holds no device itself");

    // A session on A whose calls run on the device: a read runs there, through B.
    let sid = a
        .session(json!({"working_directory": ws.path(), "runs_on": "device", "device_id": "laptop", "approval_mode": "auto_run"}))
        .await;
    wait_for_presence(&a, &sid).await;
    let read = a.call(&sid, "x1", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(read["status"], "executed", "{read}");
    assert_eq!(read["output"]["content"], "hello from inside");

    // B knows the session from the journal, and sees its calls.
    let (status, view) = b.get(&format!("/v1/sessions/{sid}")).await;
    assert_eq!((status, view["runs_on"].as_str()), (200, Some("device")), "{view}");
    let (_, rows) = b.get(&format!("/v1/journal?session_id={sid}&tool=local-system")).await;
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");

    // An approval asked on A is listed and decided on B.
    let manual =
        a.session(json!({"working_directory": ws.path(), "runs_on": "device", "device_id": "laptop"})).await;
    // (A command asks on the server; the device's own audit then lets a plain one run.)
    let pending = submit(
        &a,
        &manual,
        json!([{"id": "x2", "name": "runCommand", "arguments": json!({"command": "echo root: approved"}).to_string()}]),
    );
    let approval = b.wait_for_approval("x2").await;
    let (status, decided) =
        b.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_once"}})).await;
    assert_eq!((status, decided["outcome"].as_str()), (200, Some("forwarded")), "{decided}");
    let response = tokio::time::timeout(Duration::from_secs(15), pending).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["status"], "executed", "{response}");
    assert!(
        response["results"][0]["output"]["content"].as_str().unwrap().contains("root: approved"),
        "{response}"
    );

    // Ending the session on A stops the command running on the device behind B.
    let long = submit(
        &a,
        &sid,
        json!([{"id": "x3", "name": "runCommand", "arguments": "{\"command\": \"sleep 30\"}"}]),
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = Instant::now();
    assert_eq!(a.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    let response = tokio::time::timeout(Duration::from_secs(15), long).await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert_eq!(response["results"][0]["output"]["error"]["kind"], "cancelled", "{response}");

    stop.cancel();
    device.await.unwrap();
    let (_, proposed) = a.get("/v1/journal?status=proposed").await;
    assert_eq!(proposed, json!([]), "nothing left unsettled");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_device_on_another_instance_times_out_once_per_call_in_parallel() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    let database = pg.database_url("silent");
    let a = instance(&database, &redis.url()).await;
    let b = instance(&database, &redis.url()).await;
    let ws = workspace();
    let mut socket = raw_device(&b.base, None, "mute", &["local-system", "todo"]).await;
    let sid = a
        .session(json!({"working_directory": ws.path(), "runs_on": "device", "approval_mode": "auto_run", "time_budget_ms": 1500}))
        .await;
    // `registered` is sent once the device is announced to the cluster: no wait needed.
    let started = Instant::now();
    let calls: Vec<_> = (0..3)
        .map(|i| json!({"id": format!("s{i}"), "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}))
        .collect();
    let batch = submit(&a, &sid, json!(calls));
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(next_execute(&mut socket).await.request_id);
    }
    let response = tokio::time::timeout(Duration::from_secs(15), batch).await.unwrap().unwrap();
    let elapsed = started.elapsed();
    for result in response["results"].as_array().unwrap() {
        assert_eq!(result["output"]["error"]["kind"], "timeout", "{result}");
    }
    assert!(elapsed < Duration::from_secs(5), "the three waits run side by side: {elapsed:?}");
    // The cancellations reach the device through B.
    let mut cancelled = Vec::new();
    while let Ok(Some(message)) =
        tokio::time::timeout(Duration::from_secs(1), next_message(&mut socket)).await
    {
        if let ServerMessage::ToolCancel { request_id } = message {
            cancelled.push(request_id);
        }
    }
    cancelled.sort();
    ids.sort();
    assert_eq!(cancelled, ids);
    // A late answer after the deadline changes nothing and breaks nothing.
    common::send(
        &mut socket,
        &client_executor::DeviceMessage::ToolResult {
            request_id: ids[0].clone(),
            output: tool_core::ToolOutput::ok("late"),
        },
    )
    .await;
    let (_, rows) = a.get(&format!("/v1/journal?session_id={sid}")).await;
    assert!(rows.as_array().unwrap().iter().all(|r| r["status"] == "failed"), "{rows}");
    a.stop().await;
    b.stop().await;
}

/// The device `roamer` connects to A, is sent a call of `session` (submitted to A), and moves to B
/// before answering: its socket at B, the request, and the pending call.
async fn move_with_open_call(
    a: &TestServer,
    b: &TestServer,
    session: &str,
    call_id: &str,
) -> (common::Socket, client_executor::ExecuteRequest, tokio::task::JoinHandle<serde_json::Value>) {
    let mut at_a = raw_device(&a.base, None, "roamer", &["local-system"]).await;
    let pending = submit(
        a,
        session,
        json!([{"id": call_id, "name": "readFile", "arguments": "{\"path\": \"notes.txt\"}"}]),
    );
    let request = next_execute(&mut at_a).await;
    drop(at_a);
    let at_b = raw_device(&b.base, None, "roamer", &["local-system"]).await;
    (at_b, request, pending)
}

async fn answer(socket: &mut common::Socket, request_id: String, content: &str) {
    let output = tool_core::ToolOutput::ok(content);
    common::send(socket, &client_executor::DeviceMessage::ToolResult { request_id, output }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_device_that_moves_to_another_instance_still_answers_its_open_calls() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    let database = pg.database_url("roaming");
    let a = instance(&database, &redis.url()).await;
    let b = instance(&database, &redis.url()).await;
    let ws = workspace();
    let sid = a
        .session(json!({"working_directory": ws.path(), "runs_on": "device", "approval_mode": "auto_run"}))
        .await;

    // The device answers on its new connection, at B, a request A sent before it moved.
    let (mut at_b, request, first) = move_with_open_call(&a, &b, &sid, "m1").await;
    answer(&mut at_b, request.request_id, "answered at B").await;
    let response = tokio::time::timeout(Duration::from_secs(10), first).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["output"]["content"], "answered at B", "{response}");

    // A request the device never answered follows it to B after A's reconnect grace.
    let (mut at_b, request, second) = move_with_open_call(&a, &b, &sid, "m2").await;
    let followed = next_execute(&mut at_b).await;
    assert_eq!(followed.request_id, request.request_id);
    answer(&mut at_b, followed.request_id, "followed to B").await;
    let response = tokio::time::timeout(Duration::from_secs(10), second).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["output"]["content"], "followed to B", "{response}");

    // A cancel at A reaches the device behind B for a request that followed it there.
    let (mut at_b, request, third) = move_with_open_call(&a, &b, &sid, "m3").await;
    assert_eq!(next_execute(&mut at_b).await.request_id, request.request_id);
    assert_eq!(a.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    loop {
        match next_message(&mut at_b).await {
            Some(ServerMessage::ToolCancel { request_id }) => {
                assert_eq!(request_id, request.request_id);
                break;
            }
            Some(_) => {}
            None => panic!("the device was never told to stop"),
        }
    }
    let response = tokio::time::timeout(Duration::from_secs(10), third).await.unwrap().unwrap();
    assert_eq!(response["results"][0]["status"], "failed", "{response}");
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_a_session_on_one_instance_cancels_its_calls_on_another() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    let database = pg.database_url("ending");
    let a = instance(&database, &redis.url()).await;
    let b = instance(&database, &redis.url()).await;
    let ws = workspace();
    let sid = a.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    // The call is submitted to B (which loads the session from the journal) and runs there.
    let long = submit(
        &b,
        &sid,
        json!([{"id": "e1", "name": "runCommand", "arguments": "{\"command\": \"sleep 30\"}"}]),
    );
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = Instant::now();
    assert_eq!(a.delete(&format!("/v1/sessions/{sid}")).await.0, 200);
    let response = tokio::time::timeout(Duration::from_secs(15), long).await.unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(8), "{:?}", started.elapsed());
    assert_eq!(response["results"][0]["output"]["error"]["kind"], "cancelled", "{response}");
    let (status, _) = b
        .post(
            &format!("/v1/sessions/{sid}/calls"),
            json!({"calls": [{"id": "e2", "name": "readFile", "arguments": "{}"}]}),
        )
        .await;
    assert_eq!(status, 409, "B knows the session ended");

    // A time budget runs from the session's creation, not from when an instance loads it.
    let budgeted = a
        .session(json!({"working_directory": ws.path(), "approval_mode": "auto_run", "time_budget_ms": 1000}))
        .await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let late = b.call(&budgeted, "e3", "readFile", json!({"path": "notes.txt"})).await;
    assert_eq!(late["status"], "failed", "{late}");
    assert!(late["output"]["content"].as_str().unwrap().contains("time budget"), "{late}");
    a.stop().await;
    b.stop().await;
}

/// Server-sent events read from a response as they come: `(event, data)`.
struct Events {
    response: reqwest::Response,
    buffer: String,
}

impl Events {
    async fn open(server: &TestServer, path: &str) -> Self {
        let response = server.client.get(server.url(path)).send().await.unwrap();
        assert_eq!(response.status(), 200);
        Self { response, buffer: String::new() }
    }

    /// The next event of kind `kind`, within `limit`.
    async fn next_of(&mut self, kind: &str, limit: Duration) -> serde_json::Value {
        let deadline = Instant::now() + limit;
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let block: String = self.buffer.drain(..end + 2).collect();
                let event = block.lines().find_map(|l| l.strip_prefix("event: ")).unwrap_or_default();
                let data = block.lines().find_map(|l| l.strip_prefix("data: ")).unwrap_or("null");
                if event == kind {
                    return serde_json::from_str(data).unwrap();
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.response.chunk()).await {
                Ok(Ok(Some(chunk))) => self.buffer.push_str(&String::from_utf8_lossy(&chunk)),
                _ => panic!("no `{kind}` event within {limit:?}; read: {}", self.buffer),
            }
        }
    }
}

/// One view across instances: the tenant's stream on B carries the calls proposed on A, in
/// order, once each; a decision made on B lets A's call run, and B's stream sees it end.
async fn events_cross_instances(database: &str, redis: Option<&str>) {
    let instance = |redis: Option<&str>| {
        let dir = tempfile::tempdir().unwrap();
        let mut args = common::args(dir.path());
        args.database_url = Some(database.to_owned());
        args.redis_url = redis.map(str::to_owned);
        TestServer::start_with(dir, args)
    };
    let a = instance(redis).await;
    let b = instance(redis).await;
    let ws = workspace();
    let mut tenant = Events::open(&b, "/v1/events").await;
    let sid = a.session(json!({"working_directory": ws.path()})).await;
    let mut session = Events::open(&b, &format!("/v1/sessions/{sid}/events")).await;
    // The other instance's subscription is made once it serves; give it a moment to be live.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let proposed_at = Instant::now();
    let pending = submit(
        &a,
        &sid,
        json!([{"id": "x1", "name": "runCommand", "arguments": json!({"command": "echo crossed"}).to_string()}]),
    );
    let asked = tenant.next_of("permission.requested", Duration::from_secs(5)).await;
    assert!(proposed_at.elapsed() < Duration::from_secs(1), "seen on B after {:?}", proposed_at.elapsed());
    assert_eq!(asked["session_id"], sid.as_str(), "{asked}");
    assert_eq!(asked["instance"], a.state.instance_id.as_str(), "{asked}");
    let approval = asked["approval_id"].as_str().unwrap().to_owned();
    let same = session.next_of("permission.requested", Duration::from_secs(5)).await;
    assert_eq!(same["approval_id"], approval.as_str());
    // Decided where the console is when Redis carries decisions between instances; without it,
    // where the call waits.
    let decider = if redis.is_some() { &b } else { &a };
    let (status, body) =
        decider.post(&format!("/v1/approvals/{approval}"), json!({"decision": {"kind": "allow_once"}})).await;
    assert_eq!(status, 200, "{body}");
    let finished = tenant.next_of("call.finished", Duration::from_secs(10)).await;
    assert_eq!(finished["call_id"], "x1");
    let answer = tokio::time::timeout(Duration::from_secs(10), pending).await.unwrap().unwrap();
    assert_eq!(answer["results"][0]["status"], "executed", "{answer}");
    // In order, once each: granted before started before finished on the session's stream.
    let granted = session.next_of("permission.granted", Duration::from_secs(5)).await;
    let started = session.next_of("call.started", Duration::from_secs(5)).await;
    let done = session.next_of("call.finished", Duration::from_secs(5)).await;
    let seq = |event: &serde_json::Value| event["seq"].as_u64().unwrap();
    assert!(seq(&same) < seq(&granted) && seq(&granted) < seq(&started) && seq(&started) < seq(&done));
    a.stop().await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_every_instance_reach_a_watcher_through_redis() {
    let pg = PgServer::start();
    let redis = RedisServer::start();
    events_cross_instances(&pg.database_url("events_redis"), Some(&redis.url())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_of_every_instance_reach_a_watcher_through_postgres_notify() {
    let pg = PgServer::start();
    events_cross_instances(&pg.database_url("events_notify"), None).await;
}
