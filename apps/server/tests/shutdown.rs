//! SIGTERM against the real binary: a call in flight that ends within the grace returns its
//! result and the server exits 0; one that would not is cancelled at the grace, answered as
//! such, and its command is gone.

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

use common::{free_port, wait_healthy};

struct Running {
    child: std::process::Child,
    base: String,
    client: reqwest::Client,
    work: tempfile::TempDir,
    _state: tempfile::TempDir,
}

async fn start() -> Running {
    let (work, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port = free_port();
    let child = common::server_binary()
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--state-dir={}", state.path().display()))
        .arg(format!("--database-url=sqlite://{}/journal.db", state.path().display()))
        .arg("--shutdown-grace-secs=2")
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_healthy(&base).await, "the server did not start");
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    Running { child, base, client, work, _state: state }
}

impl Running {
    /// Starts a command call in a session that runs commands without asking; returns the task
    /// that waits for its result.
    async fn command(&self, command: &str) -> tokio::task::JoinHandle<Value> {
        let session: Value = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .json(&json!({"working_directory": self.work.path(), "approval_mode": "auto_run"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let url = format!("{}/v1/sessions/{}/calls", self.base, session["id"].as_str().unwrap());
        let body = json!({"calls": [{"id": "c1", "name": "runCommand", "arguments": json!({"command": command}).to_string()}]});
        let client = self.client.clone();
        tokio::spawn(async move {
            let response = client.post(url).json(&body).send().await.unwrap();
            response.json::<Value>().await.unwrap()["results"][0].clone()
        })
    }

    fn terminate(&self) {
        let sent = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().unwrap();
        assert!(sent.success());
    }

    fn exit_within(&mut self, limit: Duration) -> Option<std::process::ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(status) = self.child.try_wait().unwrap() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_ends_within_the_grace_returns_its_result_and_the_server_exits_0() {
    let mut server = start().await;
    let call = server.command("sleep 1; echo finished-in-grace").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.terminate();
    let result = tokio::time::timeout(Duration::from_secs(15), call).await.expect("answered").unwrap();
    assert_eq!(result["status"], "executed", "{result}");
    assert!(result["output"]["content"].as_str().unwrap().contains("finished-in-grace"), "{result}");
    let status = server.exit_within(Duration::from_secs(15)).expect("the server exited");
    assert!(status.success(), "{status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_grace_is_cancelled_and_its_command_is_gone() {
    let mut server = start().await;
    let marker = format!("{}", 600 + std::process::id() % 100);
    let call = server.command(&format!("sleep {marker}")).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    server.terminate();
    let result = tokio::time::timeout(Duration::from_secs(20), call).await.expect("answered").unwrap();
    assert_ne!(result["status"], "executed", "{result}");
    assert!(started.elapsed() < Duration::from_secs(15), "cancelled at the grace, not at the command's end");
    let status = server.exit_within(Duration::from_secs(15)).expect("the server exited");
    assert!(status.success(), "{status:?}");
    // The command's process is gone.
    let left = Command::new("pgrep").args(["-f", &format!("^sleep {marker}$")]).output().unwrap();
    assert!(left.stdout.is_empty(), "still running: {}", String::from_utf8_lossy(&left.stdout));
}

/// Draining as documented: the moment SIGTERM arrives `/readyz` says `draining` (503) and a new
/// call gets 503 with `Retry-After` (the connection is accepted, not refused); a streaming client
/// gets a `shutdown` event and still its results; an event stream gets a `shutdown` event and
/// ends; the service manager is told `STOPPING=1`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn draining_refuses_new_calls_with_503_and_delivers_the_results_of_those_in_flight() {
    let (work, state) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let port = free_port();
    let socket_path = state.path().join("notify.sock");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut child = common::server_binary()
        .env("NOTIFY_SOCKET", &socket_path)
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--state-dir={}", state.path().display()))
        .arg(format!("--database-url=sqlite://{}/journal.db", state.path().display()))
        .arg("--shutdown-grace-secs=10")
        .spawn()
        .unwrap();
    let base = format!("http://127.0.0.1:{port}");
    assert!(wait_healthy(&base).await);
    let mut message = [0u8; 256];
    let size = socket.recv(&mut message).unwrap();
    assert!(String::from_utf8_lossy(&message[..size]).contains("READY=1"));
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    let session: Value = client
        .post(format!("{base}/v1/sessions"))
        .json(&json!({"working_directory": work.path(), "approval_mode": "auto_run"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let sid = session["id"].as_str().unwrap().to_owned();
    let calls = format!("{base}/v1/sessions/{sid}/calls");
    let call = |id: &str, stream: bool| {
        json!({"stream": stream, "calls": [{"id": id, "name": "runCommand",
            "arguments": json!({"command": format!("sleep 2; echo {id}-done")}).to_string()}]})
    };
    // A watcher of the tenant's events, a streaming call and a plain one, all in flight.
    let mut events = client.get(format!("{base}/v1/events")).send().await.unwrap();
    let streaming = {
        let (client, calls, body) = (client.clone(), calls.clone(), call("streamed", true));
        tokio::spawn(
            async move { client.post(calls).json(&body).send().await.unwrap().text().await.unwrap() },
        )
    };
    let plain = {
        let (client, calls, body) = (client.clone(), calls.clone(), call("plain", false));
        tokio::spawn(async move {
            client.post(calls).json(&body).send().await.unwrap().json::<Value>().await.unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    let started = Instant::now();
    assert!(Command::new("kill").args(["-TERM", &child.id().to_string()]).status().unwrap().success());
    let size = socket.recv(&mut message).unwrap();
    assert!(String::from_utf8_lossy(&message[..size]).contains("STOPPING=1"));

    // At once: not ready, and new calls are told to come back.
    let ready = client.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(ready.status(), 503);
    let ready: Value = ready.json().await.unwrap();
    assert_eq!(ready["failing"][0]["part"], "draining", "{ready}");
    let refused = client.post(&calls).json(&call("late", false)).send().await.unwrap();
    assert_eq!(refused.status(), 503);
    assert!(refused.headers().contains_key("retry-after"));
    assert!(started.elapsed() < Duration::from_secs(2), "answered at once, not after the grace");

    // Those in flight finish, and their results reach their clients.
    let plain = tokio::time::timeout(Duration::from_secs(15), plain).await.unwrap().unwrap();
    assert_eq!(plain["results"][0]["status"], "executed", "{plain}");
    let streamed = tokio::time::timeout(Duration::from_secs(15), streaming).await.unwrap().unwrap();
    let shutdown_at = streamed.find("event: shutdown").expect("a shutdown event");
    let results_at = streamed.find("event: results").expect("the results after it");
    assert!(shutdown_at < results_at && streamed.contains("streamed-done"), "{streamed}");
    let mut seen = String::new();
    while let Ok(Ok(Some(chunk))) = tokio::time::timeout(Duration::from_secs(15), events.chunk()).await {
        seen.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(seen.contains("event: call.proposed") && seen.contains("event: shutdown"), "{seen}");
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap()).await.unwrap();
    assert!(status.success(), "{status:?}");
}
