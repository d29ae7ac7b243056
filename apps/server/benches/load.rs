//! Load benchmark of `toolhost-server` over loopback: N concurrent clients submitting one call per
//! request (`POST /v1/sessions/{id}/calls`), each waiting for its answer before sending the next.
//!
//! Workloads: `noop` is `todo_write` with an empty list (the cheapest builtin tool, so the row is
//! the cost of the HTTP layer, the pipeline and the journal), `read_file` is `readFile` of a
//! 50-line file of source code (`fixtures/read.txt`) in the session's working directory. Targets, each a separate process started and
//! stopped by this program:
//!
//! * `ceiling (axum)`: a plain axum server (this binary re-executed with
//!   `TOOLHOST_LOAD_CEILING_PORT` set) whose calls endpoint parses the JSON body and answers a fixed
//!   small JSON body: what the same client and machine can do with no work behind the route.
//! * `sqlite`: `toolhost-server` with its journal in a SQLite file in a temp folder.
//! * `postgres`: `toolhost-server` with its journal in a throwaway PostgreSQL server on loopback
//!   (`test_support::PgServer`; skipped when `initdb` is missing).
//!
//! Each point (target, workload, clients) runs a warm-up, then a measured window; every client has
//! its own session and all share one keep-alive connection pool. The table reports successful calls
//! per second, p50 and p99 latency per call, errors (non-200 answers, results other than
//! `executed`, transport failures), the server's peak RSS so far (`VmHWM`) and the CPU the server
//! and this client process used during the window (in cores, out of `nproc`).
//!
//! ```sh
//! cargo bench -p toolhost-server --bench load                       # everything (~1.5 minutes)
//! cargo bench -p toolhost-server --bench load -- --journal sqlite   # ceiling and SQLite only
//! cargo bench -p toolhost-server --bench load -- --journal sqlite --workload noop --clients 64 --no-ceiling
//! cargo xtask load -- --clients 1,64 --seconds 10                   # the same through xtask
//! ```
//!
//! Soak (`--soak SECONDS`): only the SQLite server, `read_file` (or the one `--workload` named) at
//! 64 clients for that long, printing every 10 s the calls so far, the rate, the write-ahead log
//! and database sizes, the server's resident memory and its threads, so that a journal (or a
//! process) that grows without bound shows. `TOOLHOST_SOAK_KEEP=FILE` copies the database there
//! at the end. Built with `--features heap-stats` (`cargo bench -p toolhost-server --features
//! heap-stats --bench load -- --soak 800`), the server also reports the bytes it holds allocated,
//! which tells a leak from memory the allocator keeps.
//!
//! `--sessions each,one` measures each point twice: every client in its own session (the default,
//! `each`) and every client in one shared session (`one`), where `todo_write` — a sequential API —
//! runs one call at a time while calls of different sessions never wait for each other.
//!
//! Options (environment in brackets): `--journal sqlite,postgres` [`TOOLHOST_LOAD_JOURNAL`],
//! `--workload noop,read_file` [`TOOLHOST_LOAD_WORKLOAD`], `--clients 1,16,64`
//! [`TOOLHOST_LOAD_CLIENTS`], `--seconds 5` measured per point [`TOOLHOST_LOAD_SECONDS`],
//! `--warmup 1` [`TOOLHOST_LOAD_WARMUP`], `--no-ceiling`. Bare `sqlite`/`postgres` words select
//! journals too, as in the journal benchmark. `TOOLHOST_LOAD_READ_LINES` sets the read file's
//! length (50 lines at most).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use serde::Deserialize;

/// Set in the re-executed child that serves the ceiling.
const CEILING_ENV: &str = "TOOLHOST_LOAD_CEILING_PORT";
/// The body of the no-op call, after the call id.
const NOOP_CALL: &str = r#"","name":"todo_write","arguments":"{\"todos\":[]}"}]}"#;
/// The body of the read call, after the call id.
const READ_CALL: &str = r#"","name":"readFile","arguments":"{\"path\":\"notes.txt\"}"}]}"#;
/// The target at 64 clients with the SQLite journal (from the issue).
const TARGET_CALLS_PER_SECOND: f64 = 5_000.0;
const TARGET_P99: Duration = Duration::from_millis(20);

fn main() -> anyhow::Result<()> {
    if let Ok(port) = std::env::var(CEILING_ENV) {
        return ceiling::serve(port.parse().context("the ceiling port")?);
    }
    let options = Options::parse()?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let work = tempfile::Builder::new().prefix("toolhost-load-").tempdir()?;
    let workspace = work.path().join("workspace");
    std::fs::create_dir(&workspace)?;
    // Text as a model reads it, not a repeated line that compresses unrealistically well: source
    // code and its documentation (`fixtures/read.txt`, 50 lines, 3.4 KB), or its first
    // `TOOLHOST_LOAD_READ_LINES` lines.
    let lines = std::env::var("TOOLHOST_LOAD_READ_LINES").ok().and_then(|n| n.parse().ok()).unwrap_or(50);
    let notes: String = include_str!("fixtures/read.txt").split_inclusive('\n').take(lines).collect();
    std::fs::write(workspace.join("notes.txt"), notes)?;
    let clock_ticks = clock_ticks();
    if let Some(duration) = options.soak {
        // `read_file` unless one workload is named.
        let workload = match options.workloads[..] {
            [one] => one,
            _ => Workload::ReadFile,
        };
        return runtime.block_on(soak(work.path(), &workspace, duration, workload));
    }

    println!(
        "toolhost-server load: {} cores, load average {}, clients {:?}, {} s measured per point after {} s warm-up",
        std::thread::available_parallelism().map_or(0, usize::from),
        load_average(),
        options.clients,
        options.seconds.as_secs_f64(),
        options.warmup.as_secs_f64(),
    );
    print_header();
    let mut rows = Vec::new();
    let mut problems = Vec::new();

    if options.ceiling {
        let exe = std::env::current_exe().context("finding this benchmark's binary")?;
        let port = test_support::free_port();
        let mut command = Command::new(exe);
        command.env(CEILING_ENV, port.to_string());
        let mut server = Server::spawn("ceiling (axum)", command, port, &work.path().join("ceiling.log"))?;
        let result =
            runtime.block_on(run_target(&mut server, &workspace, &[Workload::Noop], &options, clock_ticks));
        problems.extend(server.stop());
        rows.extend(result?);
    }
    for journal in &options.journals {
        let (_postgres, url) = match journal.as_str() {
            "sqlite" => (None, format!("sqlite://{}", work.path().join("journal.db").display())),
            "postgres" => {
                if !test_support::postgres_available() {
                    println!("postgres: skipped, initdb not found (install the postgresql package)");
                    continue;
                }
                let postgres = test_support::PgServer::start();
                let url = postgres.database_url("toolhost_load");
                (Some(postgres), url)
            }
            other => unreachable!("journal `{other}` passed the option check"),
        };
        let port = test_support::free_port();
        let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
        command.args(["--listen", &format!("127.0.0.1:{port}"), "--database-url", &url]);
        let log = work.path().join(format!("server-{journal}.log"));
        let mut server = Server::spawn(journal, command, port, &log)?;
        let result =
            runtime.block_on(run_target(&mut server, &workspace, &options.workloads, &options, clock_ticks));
        problems.extend(server.stop());
        rows.extend(result?);
    }

    println!();
    println!("load average at the end: {}", load_average());
    println!();
    print_header();
    for row in &rows {
        println!("{}", row.markdown());
    }
    for row in rows.iter().filter(|r| r.first_error.is_some()) {
        println!(
            "errors at {} {} {}: {} (first: {})",
            row.target,
            row.workload.name(),
            row.clients,
            row.errors,
            row.first_error.as_deref().unwrap_or_default()
        );
    }
    if let Some(row) =
        rows.iter().find(|r| r.target == "sqlite" && r.workload == Workload::Noop && r.clients == 64)
    {
        let rate_met = row.calls_per_second() >= TARGET_CALLS_PER_SECOND;
        let p99_met = row.p99 < TARGET_P99;
        println!(
            "target (sqlite, noop, 64 clients): {:.0} calls/s ({} 5000), p99 {} ({} 20 ms)",
            row.calls_per_second(),
            if rate_met { "met, >=" } else { "MISSED, <" },
            millis(row.p99),
            if p99_met { "met, <" } else { "MISSED, >=" },
        );
    }
    if problems.is_empty() {
        println!("server logs: no warnings or errors");
    } else {
        println!("server logs ({} warning or error lines; the first ones):", problems.len());
        for line in problems.iter().take(20) {
            println!("  {line}");
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- options

struct Options {
    journals: Vec<String>,
    workloads: Vec<Workload>,
    clients: Vec<usize>,
    seconds: Duration,
    warmup: Duration,
    ceiling: bool,
    soak: Option<Duration>,
    /// Each point with a session per client (`false`) and/or one shared session (`true`).
    shared: Vec<bool>,
}

impl Options {
    fn parse() -> anyhow::Result<Self> {
        let env = |name: &str, default: &str| std::env::var(name).unwrap_or_else(|_| default.to_owned());
        let mut journal = env("TOOLHOST_LOAD_JOURNAL", "sqlite,postgres");
        let mut workload = env("TOOLHOST_LOAD_WORKLOAD", "noop,read_file");
        let mut clients = env("TOOLHOST_LOAD_CLIENTS", "1,16,64");
        let mut seconds = env("TOOLHOST_LOAD_SECONDS", "5");
        let mut warmup = env("TOOLHOST_LOAD_WARMUP", "1");
        let mut ceiling = true;
        let mut soak = None;
        let mut sessions = env("TOOLHOST_LOAD_SESSIONS", "each");
        let mut bare_journals: Vec<String> = Vec::new();
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = || args.next().with_context(|| format!("{arg} needs a value"));
            match arg.as_str() {
                // Cargo passes `--bench` to every benchmark binary.
                "--bench" => {}
                "--journal" => journal = value()?,
                "--workload" => workload = value()?,
                "--clients" => clients = value()?,
                "--seconds" => seconds = value()?,
                "--warmup" => warmup = value()?,
                "--no-ceiling" => ceiling = false,
                "--soak" => soak = Some(value()?),
                "--sessions" => sessions = value()?,
                "sqlite" | "postgres" => bare_journals.push(arg),
                "--help" | "-h" => {
                    println!(
                        "load [--journal sqlite,postgres] [--workload noop,read_file] [--clients 1,16,64] \
                         [--seconds 5] [--warmup 1] [--sessions each,one] [--no-ceiling]"
                    );
                    std::process::exit(0);
                }
                other => bail!("unknown argument `{other}` (see --help)"),
            }
        }
        let list = |text: &str| -> Vec<String> {
            text.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty() && *s != "none")
                .map(str::to_owned)
                .collect()
        };
        let journals = if bare_journals.is_empty() { list(&journal) } else { bare_journals };
        if let Some(other) = journals.iter().find(|j| !matches!(j.as_str(), "sqlite" | "postgres")) {
            bail!("unknown journal `{other}`: use sqlite, postgres or none");
        }
        let workloads = list(&workload)
            .iter()
            .map(|name| match name.as_str() {
                "noop" => Ok(Workload::Noop),
                "read_file" | "read" => Ok(Workload::ReadFile),
                other => bail!("unknown workload `{other}`: use noop or read_file"),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let clients = list(&clients)
            .iter()
            .map(|n| {
                n.parse::<usize>().ok().filter(|n| *n > 0).with_context(|| format!("bad client count `{n}`"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let secs = |text: &str, what: &str| {
            text.parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s >= 0.0)
                .map(Duration::from_secs_f64)
                .with_context(|| format!("bad {what} `{text}`"))
        };
        let seconds = secs(&seconds, "--seconds")?;
        ensure!(!seconds.is_zero(), "--seconds must be above 0");
        ensure!(!clients.is_empty(), "no client counts");
        let soak = soak.map(|s| secs(&s, "--soak")).transpose()?;
        let shared = list(&sessions)
            .iter()
            .map(|mode| match mode.as_str() {
                "each" => Ok(false),
                "one" => Ok(true),
                other => bail!("unknown sessions mode `{other}`: use each or one"),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        ensure!(!shared.is_empty(), "no sessions mode");
        Ok(Self {
            journals,
            workloads,
            clients,
            seconds,
            warmup: secs(&warmup, "--warmup")?,
            ceiling,
            soak,
            shared,
        })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    Noop,
    ReadFile,
}

impl Workload {
    fn name(self) -> &'static str {
        match self {
            Self::Noop => "noop",
            Self::ReadFile => "read_file",
        }
    }

    fn body(self, call: u64) -> String {
        let rest = match self {
            Self::Noop => NOOP_CALL,
            Self::ReadFile => READ_CALL,
        };
        let mut body = String::with_capacity(96);
        let _ = write!(body, r#"{{"calls":[{{"id":"c{call}{rest}"#);
        body
    }
}

// ---------------------------------------------------------------- servers

/// A server process under test.
struct Server {
    name: String,
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Server {
    fn spawn(name: &str, mut command: Command, port: u16, log: &Path) -> anyhow::Result<Self> {
        let stderr = std::fs::File::create(log)?;
        command.env("RUST_LOG", "warn").stdin(Stdio::null()).stdout(Stdio::null()).stderr(stderr);
        let child = command.spawn().with_context(|| format!("starting {command:?}"))?;
        Ok(Self { name: name.to_owned(), child, port, log: log.to_owned() })
    }

    fn base(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `GET /healthz` answers 200 (30 s at most, failing early if the process exits).
    async fn wait_healthy(&mut self, client: &reqwest::Client) -> anyhow::Result<()> {
        let started = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait()? {
                bail!("{} exited with {status} before answering:\n{}", self.name, read_log(&self.log));
            }
            if let Ok(response) = client.get(format!("{}/healthz", self.base())).send().await
                && response.status() == reqwest::StatusCode::OK
            {
                return Ok(());
            }
            ensure!(
                started.elapsed() < Duration::from_secs(30),
                "{} did not answer /healthz within 30 s:\n{}",
                self.name,
                read_log(&self.log)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// SIGTERM, then wait (15 s, then SIGKILL); returns the warning and error lines of its log.
    fn stop(mut self) -> Vec<String> {
        let _ = Command::new("kill").args(["-TERM", &self.pid().to_string()]).status();
        let started = Instant::now();
        let mut lines = Vec::new();
        loop {
            match self.child.try_wait() {
                Ok(Some(status)) => {
                    // The ceiling has no signal handler: SIGTERM is how it ends.
                    if !status.success() && !self.name.starts_with("ceiling") {
                        lines.push(format!("{}: exited with {status}", self.name));
                    }
                    break;
                }
                Ok(None) if started.elapsed() < Duration::from_secs(15) => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                _ => {
                    lines.push(format!("{}: did not stop within 15 s of SIGTERM; killed", self.name));
                    let _ = self.child.kill();
                    let _ = self.child.wait();
                    break;
                }
            }
        }
        let log = read_log(&self.log);
        lines.extend(
            log.lines()
                .filter(|line| line.contains("WARN") || line.contains("ERROR") || line.contains("panicked"))
                .map(|line| format!("{}: {line}", self.name)),
        );
        lines
    }
}

fn read_log(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

// ---------------------------------------------------------------- /proc

/// `VmHWM` (peak resident set) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
            line.split_whitespace().nth(1)?.parse().ok()
        })
        .unwrap_or(0)
}

/// User plus system CPU time of a process, in clock ticks.
fn cpu_ticks(pid: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            // Fields after the command name (which may hold spaces): state is field 3, utime 14, stime 15.
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?)
        })
        .unwrap_or(0)
}

fn clock_ticks() -> f64 {
    Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok()?.trim().parse().ok())
        .unwrap_or(100.0)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn print_header() {
    println!(
        "| target | workload | clients | calls/s | p50 | p99 | errors | server peak RSS | server CPU | client CPU |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
}

fn millis(duration: Duration) -> String {
    format!("{:.2} ms", duration.as_secs_f64() * 1e3)
}

// ---------------------------------------------------------------- client

/// One measured point.
struct Row {
    target: String,
    workload: Workload,
    clients: usize,
    calls: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
    errors: usize,
    first_error: Option<String>,
    peak_rss_kib: u64,
    server_cpu: f64,
    client_cpu: f64,
}

impl Row {
    fn calls_per_second(&self) -> f64 {
        self.calls as f64 / self.elapsed.as_secs_f64()
    }

    /// The row as a line of the markdown table (printed as each point ends, and in the table).
    fn markdown(&self) -> String {
        format!(
            "| {} | {} | {} | {:.0} | {} | {} | {} | {:.1} MiB | {:.2} | {:.2} |",
            self.target,
            self.workload.name(),
            self.clients,
            self.calls_per_second(),
            millis(self.p50),
            millis(self.p99),
            self.errors,
            self.peak_rss_kib as f64 / 1024.0,
            self.server_cpu,
            self.client_cpu,
        )
    }
}

#[derive(Deserialize)]
struct CallsResponse {
    results: Vec<CallOutcome>,
}

#[derive(Deserialize)]
struct CallOutcome {
    status: String,
}

/// Submits one call; the error says what was wrong with the answer.
async fn call(client: &reqwest::Client, url: &str, body: String) -> Result<(), String> {
    let response = client
        .post(url)
        .header(reqwest::header::CONTENT_TYPE, "application/json")
        .body(body)
        .send()
        .await
        .map_err(|e| format!("request failed: {e}"))?;
    let status = response.status();
    let bytes = response.bytes().await.map_err(|e| format!("reading the answer failed: {e}"))?;
    let text = || String::from_utf8_lossy(&bytes[..bytes.len().min(400)]).into_owned();
    if status != reqwest::StatusCode::OK {
        return Err(format!("HTTP {status}: {}", text()));
    }
    let answer: CallsResponse =
        serde_json::from_slice(&bytes).map_err(|e| format!("bad answer ({e}): {}", text()))?;
    match answer.results.as_slice() {
        [outcome] if outcome.status == "executed" => Ok(()),
        _ => Err(format!("not executed: {}", text())),
    }
}

async fn create_session(client: &reqwest::Client, base: &str, workspace: &Path) -> anyhow::Result<String> {
    let request = serde_json::json!({"working_directory": workspace.display().to_string(), "approval_mode": "auto_run"});
    let response = client.post(format!("{base}/v1/sessions")).json(&request).send().await?;
    let status = response.status();
    let text = response.text().await?;
    ensure!(status == reqwest::StatusCode::CREATED, "creating a session: HTTP {status}: {text}");
    let view: serde_json::Value = serde_json::from_str(&text)?;
    view["id"].as_str().map(str::to_owned).with_context(|| format!("no session id in {text}"))
}

/// Every point of one server: checks each workload once, then measures it at each client count.
async fn run_target(
    server: &mut Server,
    workspace: &Path,
    workloads: &[Workload],
    options: &Options,
    clock_ticks: f64,
) -> anyhow::Result<Vec<Row>> {
    let most = options.clients.iter().copied().max().unwrap_or(1);
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(most)
        .timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;
    server.wait_healthy(&client).await?;
    let base = server.base();
    let mut sessions = Vec::with_capacity(most);
    for _ in 0..most {
        sessions.push(create_session(&client, &base, workspace).await?);
    }
    for &workload in workloads {
        let url = format!("{base}/v1/sessions/{}/calls", sessions[0]);
        if let Err(error) = call(&client, &url, workload.body(0)).await {
            bail!(
                "{}: the {} call does not execute, so there is nothing to measure: {error}",
                server.name,
                workload.name()
            );
        }
    }
    let next = Arc::new(AtomicU64::new(1));
    let pid = server.pid().to_string();
    let mut rows = Vec::new();
    for &workload in workloads {
        for (&clients, &shared) in
            options.clients.iter().flat_map(|c| options.shared.iter().map(move |s| (c, s)))
        {
            let warmup_end = Instant::now() + options.warmup;
            let end = warmup_end + options.seconds;
            let tasks: Vec<_> = sessions[..clients]
                .iter()
                .map(|own| if shared { &sessions[0] } else { own })
                .map(|session| {
                    let client = client.clone();
                    let url = format!("{base}/v1/sessions/{session}/calls");
                    let next = Arc::clone(&next);
                    tokio::spawn(async move {
                        let mut latencies = Vec::new();
                        let mut errors = 0usize;
                        let mut first_error = None;
                        loop {
                            let started = Instant::now();
                            if started >= end {
                                break;
                            }
                            let outcome =
                                call(&client, &url, workload.body(next.fetch_add(1, Ordering::Relaxed)))
                                    .await;
                            if started < warmup_end {
                                continue;
                            }
                            match outcome {
                                Ok(()) => latencies.push(started.elapsed()),
                                Err(error) => {
                                    errors += 1;
                                    first_error.get_or_insert(error);
                                }
                            }
                        }
                        (latencies, errors, first_error)
                    })
                })
                .collect();
            tokio::time::sleep_until(warmup_end.into()).await;
            let (measured_from, server_ticks, client_ticks) =
                (Instant::now(), cpu_ticks(&pid), cpu_ticks("self"));
            let mut latencies = Vec::new();
            let mut errors = 0;
            let mut first_error = None;
            for task in tasks {
                let (mut l, e, f) = task.await?;
                latencies.append(&mut l);
                errors += e;
                if first_error.is_none() {
                    first_error = f;
                }
            }
            let elapsed = measured_from.elapsed();
            latencies.sort_unstable();
            let at = |q: f64| {
                if latencies.is_empty() {
                    return Duration::ZERO;
                }
                let rank = (q * latencies.len() as f64).ceil() as usize;
                latencies[rank.clamp(1, latencies.len()) - 1]
            };
            let cores = |ticks: u64| ticks as f64 / clock_ticks / elapsed.as_secs_f64();
            let row = Row {
                target: if shared { format!("{} (one session)", server.name) } else { server.name.clone() },
                workload,
                clients,
                calls: latencies.len(),
                elapsed,
                p50: at(0.50),
                p99: at(0.99),
                errors,
                first_error,
                peak_rss_kib: peak_rss_kib(server.pid()),
                server_cpu: cores(cpu_ticks(&pid).saturating_sub(server_ticks)),
                client_cpu: cores(cpu_ticks("self").saturating_sub(client_ticks)),
            };
            println!("{}", row.markdown());
            rows.push(row);
        }
    }
    Ok(rows)
}

// ---------------------------------------------------------------- ceiling

mod ceiling {
    use axum::Json;
    use axum::http::{StatusCode, header};
    use axum::routing::{get, post};
    use serde_json::Value;

    const RESULTS: &str = r#"{"message_id":"msg_ceiling","results":[{"call_id":"c1","name":"todo_write","tool":"todo","api":"todo_write","status":"executed","output":{"content":"ok"},"duration_ms":0}]}"#;

    /// A plain axum server, in its own process and runtime: parses the JSON body of a call and
    /// answers a fixed small JSON body. Ends on SIGTERM (no handler).
    pub(super) fn serve(port: u16) -> anyhow::Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
        runtime.block_on(async move {
            let app = axum::Router::new()
                .route("/healthz", get(|| async { Json(serde_json::json!({"status": "ok"})) }))
                .route(
                    "/v1/sessions",
                    post(|Json(_): Json<Value>| async {
                        (StatusCode::CREATED, Json(serde_json::json!({"id": "ses_ceiling"})))
                    }),
                )
                .route(
                    "/v1/sessions/{id}/calls",
                    post(|Json(_): Json<Value>| async {
                        ([(header::CONTENT_TYPE, "application/json")], RESULTS)
                    }),
                );
            let listener = tokio::net::TcpListener::bind(("127.0.0.1", port)).await?;
            axum::serve(listener, app).await?;
            Ok(())
        })
    }
}

/// Runs `read_file` at 64 clients against the SQLite server for `duration`, sampling every 10 s.
async fn soak(work: &Path, workspace: &Path, duration: Duration, workload: Workload) -> anyhow::Result<()> {
    const CLIENTS: usize = 64;
    let db = work.join("soak.db");
    let port = test_support::free_port();
    let mut command = Command::new(env!("CARGO_BIN_EXE_toolhost-server"));
    command.args([
        "--listen",
        &format!("127.0.0.1:{port}"),
        "--database-url",
        &format!("sqlite://{}", db.display()),
    ]);
    command.arg("--state-dir").arg(work.join("state"));
    let mut server = Server::spawn("sqlite", command, port, &work.join("soak.log"))?;
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(CLIENTS)
        .timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()?;
    server.wait_healthy(&client).await?;
    let base = server.base();
    let mut sessions = Vec::with_capacity(CLIENTS);
    for _ in 0..CLIENTS {
        sessions.push(create_session(&client, &base, workspace).await?);
    }
    let end = Instant::now() + duration;
    let (done, failed, next) =
        (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(1)));
    let tasks: Vec<_> = sessions
        .iter()
        .map(|session| {
            let (client, done, failed, next) = (client.clone(), done.clone(), failed.clone(), next.clone());
            let url = format!("{base}/v1/sessions/{session}/calls");
            tokio::spawn(async move {
                while Instant::now() < end {
                    match call(&client, &url, workload.body(next.fetch_add(1, Ordering::Relaxed))).await {
                        Ok(()) => done.fetch_add(1, Ordering::Relaxed),
                        Err(_) => failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            })
        })
        .collect();
    let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
    let wal = work.join("soak.db-wal");
    // A field of /proc/PID/status, as a number (kB for sizes).
    let status = |pid: u32, field: &str| -> u64 {
        std::fs::read_to_string(format!("/proc/{pid}/status"))
            .ok()
            .and_then(|s| {
                s.lines().find_map(|l| {
                    l.strip_prefix(field)
                        .and_then(|v| v.strip_prefix(':'))
                        .map(|v| v.trim().trim_end_matches(" kB").trim().to_owned())
                })
            })
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let rss = |pid: u32| status(pid, "VmRSS");
    // What the server holds allocated, from `/metrics`: only a build with `--features heap-stats`
    // counts it (a dash otherwise).
    let live_heap = || async {
        let text = client.get(format!("{base}/metrics")).send().await.ok()?.text().await.ok()?;
        text.lines().find_map(|l| l.strip_prefix("toolhost_heap_live_bytes ")?.trim().parse::<f64>().ok())
    };
    println!(
        "| time s | calls | calls/s | errors | WAL MB | database MB | bytes per call | RSS MiB | live heap MiB | threads |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    let started = Instant::now();
    let (mut last_calls, mut last_at, mut largest_wal, mut first_rss) = (0u64, started, 0u64, None);
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(10).min(end.saturating_duration_since(Instant::now()))).await;
        let (calls, now) = (done.load(Ordering::Relaxed), Instant::now());
        let (wal_bytes, db_bytes, rss_kib) = (size(&wal), size(&db), rss(server.pid()));
        largest_wal = largest_wal.max(wal_bytes);
        first_rss.get_or_insert(rss_kib);
        let live = live_heap().await.map_or_else(|| "-".to_owned(), |b| format!("{:.1}", b / 1_048_576.0));
        println!(
            "| {:.0} | {calls} | {:.0} | {} | {:.1} | {:.1} | {:.0} | {:.0} | {live} | {} |",
            started.elapsed().as_secs_f64(),
            (calls - last_calls) as f64 / now.duration_since(last_at).as_secs_f64(),
            failed.load(Ordering::Relaxed),
            wal_bytes as f64 / 1e6,
            db_bytes as f64 / 1e6,
            db_bytes as f64 / calls.max(1) as f64,
            rss_kib as f64 / 1024.0,
            status(server.pid(), "Threads"),
        );
        (last_calls, last_at) = (calls, now);
    }
    for task in tasks {
        task.await?;
    }
    println!(
        "soak: {} calls in {:.0} s, {} errors, largest write-ahead log {:.1} MB, RSS {:.0} -> {:.0} MiB",
        done.load(Ordering::Relaxed),
        started.elapsed().as_secs_f64(),
        failed.load(Ordering::Relaxed),
        largest_wal as f64 / 1e6,
        first_rss.unwrap_or(0) as f64 / 1024.0,
        rss(server.pid()) as f64 / 1024.0,
    );
    for problem in server.stop() {
        println!("{problem}");
    }
    if let Some(keep) = std::env::var_os("TOOLHOST_SOAK_KEEP") {
        std::fs::copy(&db, &keep).context("keeping the soak's database")?;
        // What was not checkpointed yet is in the log; an older run's log must not be taken for it.
        let mut kept_wal = keep.clone();
        kept_wal.push("-wal");
        if wal.exists() {
            std::fs::copy(&wal, kept_wal).context("keeping the soak's write-ahead log")?;
        } else if Path::new(&kept_wal).exists() {
            std::fs::remove_file(&kept_wal).context("removing an older run's write-ahead log")?;
        }
        println!("soak: database kept at {}", Path::new(&keep).display());
    }
    Ok(())
}
