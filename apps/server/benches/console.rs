//! The console's budgets, measured against two real `toolhost-server` processes (release build)
//! sharing a throwaway PostgreSQL and Redis on loopback, as a team would run them:
//!
//! * **first load**: the bytes of the inbox page, its script and its style, signed in (no other
//!   host is named by any of them);
//! * **across instances**: from an agent's proposal on instance A to the approval arriving, as its
//!   rendered item, on the console event stream of instance B (what the page inserts);
//! * **click to running**: from a person's decision posted to B's console to the call on A having
//!   run and answered its caller;
//! * **1 000 waiting**: the inbox page (its first 50, newest first) and the catch-up fragment with
//!   1 000 approvals waiting.
//!
//! ```sh
//! cargo bench -p toolhost-server --bench console            # ~1 minute
//! cargo bench -p toolhost-server --bench console -- 50      # samples per latency (default 40)
//! ```

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use serde_json::{Value, json};

const PERSON: &str = "bench-person-key";
const AGENT: &str = "bench-agent-key";

struct Instance {
    child: Child,
    base: String,
}

impl Drop for Instance {
    fn drop(&mut self) {
        let _ = Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status();
        let _ = self.child.wait();
    }
}

fn stored(role: &str, name: &str, key: &str) -> String {
    use sha2::Digest as _;
    let hex: String = sha2::Sha256::digest(key.as_bytes()).iter().map(|b| format!("{b:02x}")).collect();
    format!("acme/{role}/{name}:{hex}")
}

fn start(work: &std::path::Path, name: &str, database: &str, redis: &str) -> anyhow::Result<Instance> {
    let port = test_support::free_port();
    let log = std::fs::File::create(work.join(format!("{name}.log")))?;
    let child = Command::new(env!("CARGO_BIN_EXE_toolhost-server"))
        .args(["--listen", &format!("127.0.0.1:{port}"), "--database-url", database, "--redis-url", redis])
        .args(["--api-key", &stored("person", "alice", PERSON), "--api-key", &stored("agent", "bot", AGENT)])
        .arg("--workspace-root")
        .arg(format!("acme={}", work.join("acme").display()))
        .arg("--state-dir")
        .arg(work.join(format!("state-{name}")))
        .args(["--tenant-approvals", "1100", "--tenant-batches", "1100", "--tenant-sessions", "1100"])
        .args(["--max-pending-connections-per-address", "2000"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .context("starting toolhost-server")?;
    Ok(Instance { child, base: format!("http://127.0.0.1:{port}") })
}

async fn healthy(client: &reqwest::Client, base: &str) -> anyhow::Result<()> {
    for _ in 0..400 {
        if client
            .get(format!("{base}/readyz"))
            .bearer_auth(PERSON)
            .send()
            .await
            .is_ok_and(|r| r.status() == 200)
        {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    bail!("{base} never became ready")
}

/// Signs in to a console: its cookie and CSRF token.
async fn sign_in(client: &reqwest::Client, base: &str) -> anyhow::Result<(String, String)> {
    let response = client.post(format!("{base}/console/login")).form(&[("key", PERSON)]).send().await?;
    let cookie = response
        .headers()
        .get("set-cookie")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .context("no session cookie")?
        .to_owned();
    let page = client
        .get(format!("{base}/console/approvals"))
        .header("cookie", &cookie)
        .send()
        .await?
        .text()
        .await?;
    let csrf = page
        .split("name=\"csrf-token\" content=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .context("no CSRF token on the page")?
        .to_owned();
    Ok((cookie, csrf))
}

async fn session(client: &reqwest::Client, base: &str, folder: &std::path::Path) -> anyhow::Result<String> {
    let view: Value = client
        .post(format!("{base}/v1/sessions"))
        .bearer_auth(AGENT)
        .json(&json!({"working_directory": folder}))
        .send()
        .await?
        .json()
        .await?;
    view["id"].as_str().map(str::to_owned).with_context(|| format!("no session: {view}"))
}

fn propose(
    client: &reqwest::Client,
    base: &str,
    session: &str,
    call: &str,
) -> tokio::task::JoinHandle<Value> {
    let request = client.post(format!("{base}/v1/sessions/{session}/calls")).bearer_auth(AGENT).json(
        &json!({"calls": [{"id": call, "name": "runCommand", "arguments": json!({"command": format!("echo {call}")}).to_string()}]}),
    );
    tokio::spawn(async move {
        match request.send().await {
            Ok(response) => response.json().await.unwrap_or(Value::Null),
            Err(_) => Value::Null,
        }
    })
}

/// The console event stream's `approval` events: (approval id, call id found in its markup).
struct Stream {
    response: reqwest::Response,
    buffer: String,
}

impl Stream {
    async fn open(client: &reqwest::Client, base: &str, cookie: &str) -> anyhow::Result<Self> {
        let response = client.get(format!("{base}/console/events")).header("cookie", cookie).send().await?;
        if !response.status().is_success() {
            bail!("the console stream: {}", response.status());
        }
        Ok(Self { response, buffer: String::new() })
    }

    /// The next `approval` event's id and markup.
    async fn approval(&mut self) -> anyhow::Result<(String, String)> {
        loop {
            while let Some(end) = self.buffer.find("\n\n") {
                let event: String = self.buffer.drain(..end + 2).collect();
                if event.lines().any(|l| l == "event: approval")
                    && let Some(data) = event.lines().find_map(|l| l.strip_prefix("data: "))
                {
                    let data: Value = serde_json::from_str(data)?;
                    return Ok((
                        data["id"].as_str().unwrap_or_default().to_owned(),
                        data["html"].as_str().unwrap_or_default().to_owned(),
                    ));
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.response.chunk())
                .await
                .context("no approval arrived within 10 s")??
                .context("the stream ended")?;
            self.buffer.push_str(&String::from_utf8_lossy(&chunk));
        }
    }
}

fn percentiles(mut samples: Vec<Duration>) -> String {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    format!(
        "p50 {:.1} ms, p95 {:.1} ms, max {:.1} ms ({} samples)",
        at(0.5).as_secs_f64() * 1e3,
        at(0.95).as_secs_f64() * 1e3,
        at(1.0).as_secs_f64() * 1e3,
        samples.len()
    )
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let samples: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(40);
    let work = tempfile::tempdir()?;
    let folder = work.path().join("acme/project");
    std::fs::create_dir_all(&folder)?;
    let pg = test_support::PgServer::start();
    let redis = test_support::RedisServer::start();
    let database = pg.database_url("console_bench");
    let a = start(work.path(), "a", &database, &redis.url())?;
    let client = reqwest::Client::builder().no_proxy().redirect(reqwest::redirect::Policy::none()).build()?;
    healthy(&client, &a.base).await?;
    // B starts once A has migrated the database.
    let b = start(work.path(), "b", &database, &redis.url())?;
    healthy(&client, &b.base).await?;
    let (cookie, csrf) = sign_in(&client, &b.base).await?;
    println!("console benchmark: two instances, Postgres {} and Redis {}", pg.port(), redis.port());

    // First load.
    let page = client
        .get(format!("{}/console/approvals", b.base))
        .header("cookie", &cookie)
        .send()
        .await?
        .text()
        .await?;
    let asset = |name: &str| {
        page.split(&format!("/console/assets/{name}?v="))
            .nth(1)
            .and_then(|rest| rest.split('"').next())
            .map(|v| format!("/console/assets/{name}?v={v}"))
    };
    let mut total = page.len();
    let mut parts = vec![format!("page {} B", page.len())];
    for name in ["console.js", "console.css"] {
        let path = asset(name).with_context(|| format!("{name} is not linked"))?;
        let bytes = client.get(format!("{}{path}", b.base)).send().await?.bytes().await?.len();
        total += bytes;
        parts.push(format!("{name} {bytes} B"));
    }
    let elsewhere = page.matches("http://").count() + page.matches("https://").count();
    println!(
        "first load of the inbox: {total} B ({}); addresses of other hosts in the page: {elsewhere}",
        parts.join(", ")
    );

    // Across instances, then click to running.
    let mut events = Stream::open(&client, &b.base, &cookie).await?;
    let sid = session(&client, &a.base, &folder).await?;
    let mut across = Vec::new();
    let mut click = Vec::new();
    for i in 0..samples {
        let call = format!("x{i}");
        let proposed = Instant::now();
        let pending = propose(&client, &a.base, &sid, &call);
        let (id, html) = events.approval().await?;
        across.push(proposed.elapsed());
        if !html.contains(&format!("data-call=\"{call}\"")) {
            bail!("the approval that arrived is not {call}'s");
        }
        let clicked = Instant::now();
        let decided = client
            .post(format!("{}/console/approvals/{id}/decide", b.base))
            .header("cookie", &cookie)
            .header("x-csrf-token", &csrf)
            .header("x-requested-with", "fetch")
            .form(&[("action", "allow-once")])
            .send()
            .await?;
        if !decided.status().is_success() {
            bail!("the decision was refused: {}", decided.status());
        }
        let result = pending.await?;
        click.push(clicked.elapsed());
        if result["results"][0]["status"] != "executed" {
            bail!("the call did not run: {result}");
        }
    }
    println!("proposed on A to shown on B's console: {}", percentiles(across));
    println!("decided on B's console to the call run on A and answered: {}", percentiles(click));
    drop(events);

    // 1 000 waiting.
    let mut waiting = Vec::new();
    for i in 0..1000 {
        let sid = session(&client, &a.base, &folder).await?;
        waiting.push(propose(&client, &a.base, &sid, &format!("w{i}")));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let list: Value =
            client.get(format!("{}/v1/approvals", b.base)).bearer_auth(PERSON).send().await?.json().await?;
        let n = list.as_array().map_or(0, Vec::len);
        if n >= 1000 {
            break;
        }
        if Instant::now() > deadline {
            bail!("only {n} of 1 000 approvals waited after 2 minutes");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for (label, path) in
        [("the inbox page", "/console/approvals"), ("the catch-up fragment", "/console/approvals/waiting")]
    {
        let mut times = Vec::new();
        let mut bytes = 0;
        for _ in 0..20 {
            let started = Instant::now();
            let body = client
                .get(format!("{}{path}", b.base))
                .header("cookie", &cookie)
                .send()
                .await?
                .text()
                .await?;
            times.push(started.elapsed());
            bytes = body.len();
        }
        println!("{label} with 1 000 waiting ({bytes} B, 50 shown): {}", percentiles(times));
    }
    drop(waiting);
    Ok(())
}
