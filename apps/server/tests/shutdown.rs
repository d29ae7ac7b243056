//! SIGTERM against the real binary: a call in flight that ends within the grace returns its
//! result and the server exits 0; one that would not is cancelled at the grace, answered as
//! such, and its command is gone.

use std::process::{Command, Stdio};
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
    let child = Command::new(env!("CARGO_BIN_EXE_toolhost-server"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .arg(format!("--listen=127.0.0.1:{port}"))
        .arg(format!("--state-dir={}", state.path().display()))
        .arg(format!("--database-url=sqlite://{}/journal.db", state.path().display()))
        .arg("--shutdown-grace-secs=2")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
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
