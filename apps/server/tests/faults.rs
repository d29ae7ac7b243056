//! The record first, against the real binary and real faults: a full disk under the SQLite
//! journal, Postgres stopped (fast and immediate) and started again with calls in flight, Redis
//! stopped, 600 idle connections under a small descriptor limit. Each checks the invariant the
//! journal exists for: no command ran without a durable row, and every answered call's row ends
//! settled; and that `/readyz` answers within a second, naming what fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

mod common;

use common::free_port;

/// The binary, started with `args`, on a fresh port; stopped (killed) when dropped.
struct Server {
    child: Child,
    base: String,
    client: reqwest::Client,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The binary, run through `prefix` (`prlimit …`) when one is given.
fn binary(prefix: &[&str]) -> Command {
    let Some((first, rest)) = prefix.split_first() else { return common::server_binary() };
    let mut command = Command::new(first);
    command
        .args(rest)
        .arg(env!("CARGO_BIN_EXE_toolhost-server"))
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    command
}

async fn start_with(prefix: &[&str], args: &[String]) -> Server {
    let port = free_port();
    let child = binary(prefix).arg(format!("--listen=127.0.0.1:{port}")).args(args).spawn().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let client = reqwest::Client::builder().no_proxy().timeout(Duration::from_secs(30)).build().unwrap();
    let started = Instant::now();
    while client.get(format!("{base}/healthz")).send().await.is_err() {
        assert!(started.elapsed() < Duration::from_secs(30), "the server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Server { child, base, client }
}

impl Server {
    async fn session(&self, work: &Path) -> String {
        let session: Value = self
            .client
            .post(format!("{}/v1/sessions", self.base))
            .json(&json!({"working_directory": work, "approval_mode": "auto_run"}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        session["id"].as_str().unwrap_or_else(|| panic!("{session}")).to_owned()
    }

    /// One command call under `message`; the HTTP status, `Retry-After` and the body.
    async fn command(&self, session: &str, message: &str, command: &str) -> (u16, Option<String>, Value) {
        let body = json!({"message_id": message,
            "calls": [{"id": "c", "name": "runCommand", "arguments": json!({"command": command}).to_string()}]});
        let response = self
            .client
            .post(format!("{}/v1/sessions/{session}/calls", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry = response.headers().get("retry-after").map(|v| v.to_str().unwrap().to_owned());
        (status, retry, response.json().await.unwrap_or(Value::Null))
    }

    async fn row(&self, key: &str) -> Option<Value> {
        let response = self.client.get(format!("{}/v1/journal/{key}", self.base)).send().await.ok()?;
        (response.status() == 200).then_some(())?;
        response.json().await.ok()
    }

    /// `/readyz`: the status, the body and how long it took.
    async fn ready(&self) -> (u16, Value, Duration) {
        let started = Instant::now();
        let response = self.client.get(format!("{}/readyz", self.base)).send().await.unwrap();
        let status = response.status().as_u16();
        (status, response.json().await.unwrap_or(Value::Null), started.elapsed())
    }

    /// Waits until the row `key` is settled (not `proposed`), `limit` at most.
    async fn settled(&self, key: &str, limit: Duration) -> Value {
        let started = Instant::now();
        loop {
            if let Some(row) = self.row(key).await
                && row["status"] != "proposed"
            {
                return row;
            }
            assert!(started.elapsed() < limit, "{key} never settled: {:?}", self.row(key).await);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn failing_parts(ready: &Value) -> Vec<String> {
    ready["failing"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f["part"].as_str().map(str::to_owned))
        .collect()
}

/// A small tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(mib: u32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={mib}m"), "tmpfs"])
            .arg(dir.path())
            .status()
            .expect("mount runs");
        assert!(status.success(), "mounting a tmpfs needs root (CI runs as root)");
        Self { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills it to the brim with one file; returns its path.
    fn fill(&self) -> PathBuf {
        let filler = self.path().join("filler");
        let _ = Command::new("dd")
            .arg("if=/dev/zero")
            .arg(format!("of={}", filler.display()))
            .args(["bs=64k", "status=none"])
            .status();
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_calls_before_they_run_and_keeps_what_ended() {
    let disk = Tmpfs::mount(24);
    let work = tempfile::tempdir().unwrap();
    let state = disk.path().join("state");
    let server = start_with(
        &[],
        &[
            format!("--database-url=sqlite://{}/journal.db", disk.path().display()),
            format!("--state-dir={}", state.display()),
            "--min-free-disk-mib=1".into(),
            "--outbox-reserve-mib=2".into(),
        ],
    )
    .await;
    let session = server.session(work.path()).await;
    let (status, _, body) = server.command(&session, "before", "echo ok").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(server.ready().await.0, 200);

    // A call in flight when the disk fills: it ran, so what it did is kept (in the outbox's
    // reserved space) and lands once there is room again.
    let in_flight = {
        let (server_base, client, session) = (server.base.clone(), server.client.clone(), session.clone());
        let (started, marker) = (work.path().join("started"), work.path().join("in-flight"));
        let command = format!("touch {}; sleep 1; touch {}", started.display(), marker.display());
        tokio::spawn(async move {
            let body = json!({"message_id": "flight", "calls": [{"id": "c", "name": "runCommand",
                "arguments": json!({"command": command}).to_string()}]});
            client
                .post(format!("{server_base}/v1/sessions/{session}/calls"))
                .json(&body)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    // Running (so proposed) before the disk fills.
    let waited = Instant::now();
    while !work.path().join("started").exists() {
        assert!(waited.elapsed() < Duration::from_secs(20), "the call in flight never started");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let filler = disk.fill();

    // New calls until the journal refuses one: a refused call never ran.
    let mut answered = Vec::new();
    let mut refused = 0;
    for n in 0..60 {
        let marker = work.path().join(format!("ran-{n}"));
        let (status, retry, body) =
            server.command(&session, &format!("full-{n}"), &format!("touch {}", marker.display())).await;
        if status == 503 {
            assert!(retry.is_some(), "503 without Retry-After: {body}");
            assert!(!marker.exists(), "call {n} was refused, yet its command ran");
            // The first refusal is the call's own result; once the journal is known down, the
            // request is refused whole before any call is looked at.
            let kind = if body["error"].is_object() {
                &body["error"]["code"]
            } else {
                &body["results"][0]["output"]["error"]["kind"]
            };
            assert_eq!(kind, "unavailable", "{body}");
            refused += 1;
            if refused >= 3 {
                break;
            }
        } else {
            assert_eq!(status, 200, "{body}");
            answered.push(n);
        }
    }
    assert!(refused >= 3, "the journal never refused a call on a full disk");
    let (status, ready, took) = server.ready().await;
    assert_eq!(status, 503, "{ready}");
    assert!(took < Duration::from_secs(1), "/readyz took {took:?}");
    eprintln!("/readyz with the disk full: {status} in {took:?}: {ready}");
    assert!(failing_parts(&ready).iter().any(|p| p == "disk" || p == "database"), "{ready}");
    assert_eq!(in_flight.await.unwrap(), 200);

    // Room again: what waited lands, every answered call's row is settled, and calls run.
    std::fs::remove_file(filler).unwrap();
    let row = server.settled("flight:c", Duration::from_secs(20)).await;
    assert_eq!(row["status"], "executed", "{row}");
    assert!(work.path().join("in-flight").exists());
    for n in answered {
        let row = server.settled(&format!("full-{n}:c"), Duration::from_secs(20)).await;
        assert_ne!(row["status"], "abandoned", "{row}");
    }
    let started = Instant::now();
    loop {
        let (status, _, _) =
            server.command(&session, &format!("after-{}", started.elapsed().as_millis()), "true").await;
        if status == 200 {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(15), "calls never ran again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(server.ready().await.0, 200);
}

async fn postgres_stops_with_a_call_in_flight(mode: &str) {
    let pg = test_support::PgServer::start();
    let url = pg.database_url(&format!("faults_{mode}"));
    let work = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let server = start_with(
        &[],
        &[format!("--database-url={url}"), format!("--state-dir={}", state.path().display())],
    )
    .await;
    let session = server.session(work.path()).await;
    let count = work.path().join("count");
    let command = format!("sleep 2; echo x >> {}", count.display());
    let in_flight = {
        let (base, client, session, command) =
            (server.base.clone(), server.client.clone(), session.clone(), command.clone());
        tokio::spawn(async move {
            let body = json!({"message_id": "m1", "calls": [{"id": "c", "name": "runCommand",
                "arguments": json!({"command": command}).to_string()}]});
            let response =
                client.post(format!("{base}/v1/sessions/{session}/calls")).json(&body).send().await.unwrap();
            (response.status().as_u16(), response.json::<Value>().await.unwrap())
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    pg.stop(mode);

    // The call ran and is answered as it ended.
    let (status, body) = in_flight.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["results"][0]["status"], "executed", "{body}");

    // Meanwhile: readiness says so within a second, and a new call is refused, not run.
    let (status, ready, took) = server.ready().await;
    assert_eq!(status, 503, "{ready}");
    assert!(took < Duration::from_secs(1), "/readyz took {took:?} with Postgres down");
    eprintln!("/readyz with Postgres down: {status} in {took:?}: {ready}");
    assert!(failing_parts(&ready).contains(&"database".to_owned()), "{ready}");
    let refused = work.path().join("refused");
    let started = Instant::now();
    let (status, retry, body) = server.command(&session, "m2", &format!("touch {}", refused.display())).await;
    assert_eq!(status, 503, "{body}");
    assert!(retry.is_some());
    assert!(started.elapsed() < Duration::from_secs(5), "refused in {:?}", started.elapsed());
    assert!(!refused.exists(), "a call the journal could not record ran");

    // Postgres back: the settlement lands from the outbox, and a retry of the message gets the
    // recorded result without running the command again.
    pg.start_again();
    let row = server.settled("m1:c", Duration::from_secs(30)).await;
    assert_eq!(row["status"], "executed", "{row}");
    let (status, _, again) = server.command(&session, "m1", &command).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["results"][0]["status"], "executed", "{again}");
    assert_eq!(
        std::fs::read_to_string(&count).unwrap().lines().count(),
        1,
        "the retry ran the command again"
    );
    let started = Instant::now();
    while server.ready().await.0 != 200 {
        assert!(started.elapsed() < Duration::from_secs(15), "never ready again");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_fast_mid_call_settles_through_the_outbox() {
    postgres_stops_with_a_call_in_flight("fast").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_stopped_immediately_mid_call_settles_through_the_outbox() {
    postgres_stops_with_a_call_in_flight("immediate").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_stopped_is_named_by_readiness_within_a_second() {
    let pg = test_support::PgServer::start();
    let redis = test_support::RedisServer::start();
    let url = pg.database_url("faults_redis");
    let state = tempfile::tempdir().unwrap();
    let server = start_with(
        &[],
        &[
            format!("--database-url={url}"),
            format!("--redis-url={}", redis.url()),
            format!("--state-dir={}", state.path().display()),
        ],
    )
    .await;
    assert_eq!(server.ready().await.0, 200);
    redis.stop();
    let (status, ready, took) = server.ready().await;
    assert_eq!(status, 503, "{ready}");
    assert!(took < Duration::from_secs(1), "/readyz took {took:?} with Redis down");
    eprintln!("/readyz with Redis down: {status} in {took:?}: {ready}");
    assert_eq!(failing_parts(&ready), ["redis"], "{ready}");
    // Calls do not need Redis: they run and are recorded.
    let work = tempfile::tempdir().unwrap();
    let session = server.session(work.path()).await;
    let (status, _, body) = server.command(&session, "r1", "true").await;
    assert_eq!((status, body["results"][0]["status"].as_str()), (200, Some("executed")), "{body}");
    redis.start_again();
    let started = Instant::now();
    while server.ready().await.0 != 200 {
        assert!(started.elapsed() < Duration::from_secs(15), "never ready again after Redis came back");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn six_hundred_idle_connections_under_512_descriptors_leave_the_server_answering() {
    let state = tempfile::tempdir().unwrap();
    let server = start_with(
        &["prlimit", "--nofile=512:512", "--"],
        &[
            format!("--database-url=sqlite://{}/journal.db", state.path().display()),
            format!("--state-dir={}", state.path().display()),
            "--header-read-timeout-secs=3".into(),
        ],
    )
    .await;
    let address = server.base.trim_start_matches("http://").to_owned();
    let mut idle = Vec::new();
    for _ in 0..600 {
        match tokio::net::TcpStream::connect(&address).await {
            Ok(stream) => idle.push(stream),
            Err(error) => panic!("connect failed: {error}"),
        }
    }
    // Each answer on a connection of its own, while the 600 sit there sending nothing.
    for _ in 0..5 {
        let started = Instant::now();
        let client = reqwest::Client::builder().no_proxy().pool_max_idle_per_host(0).build().unwrap();
        let response = tokio::time::timeout(
            Duration::from_secs(5),
            client.get(format!("{}/healthz", server.base)).send(),
        )
        .await
        .expect("/healthz answered within 5 s")
        .unwrap();
        assert_eq!(response.status(), 200);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
    // Connections that never sent a request head are closed after the header timeout.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let mut closed = 0;
    for stream in &mut idle {
        let mut byte = [0u8; 1];
        if let Ok(Ok(0)) =
            tokio::time::timeout(Duration::from_millis(20), tokio::io::AsyncReadExt::read(stream, &mut byte))
                .await
        {
            closed += 1;
        }
    }
    assert!(closed >= 590, "only {closed} of 600 idle connections were closed");
    assert_eq!(server.client.get(format!("{}/healthz", server.base)).send().await.unwrap().status(), 200);
}
