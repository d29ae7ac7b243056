//! Settled calls per second (one propose + one settle per call) at 1, 16 and 64 calls in flight,
//! against the SQLite journal in a temp dir and against a throwaway PostgreSQL server.
//!
//! `cargo bench -p journal --bench journal [-- sqlite|postgres]`; `JOURNAL_BENCH_CALLS` sets the
//! calls per measurement (default 20 000, after a warm-up of a tenth of that) and
//! `JOURNAL_BENCH_IN_FLIGHT` the concurrency levels (default `1,16,64`); `JOURNAL_BENCH_POSTGRES_URL`
//! measures an existing Postgres database instead of starting a throwaway server.
//!
//! `-- pages [sqlite|postgres]`: a listing page (50 rows, newest first, as the console's journal
//! page and `GET /v1/journal` read it) of a journal of `JOURNAL_BENCH_ROWS` settled calls (default
//! 1 000 000; one in ten a `web` call, one in a hundred denied, 32 sessions): the first page, a page
//! half-way down by its keyset cursor, and the first page filtered by tool, by decision and by
//! session; the median of 20 reads each.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use journal::{AttemptStatus, Journal, NewAttempt, Settlement};
use serde_json::json;

const IN_FLIGHT: [usize; 3] = [1, 16, 64];

struct Measure {
    backend: &'static str,
    in_flight: usize,
    calls: usize,
    elapsed: Duration,
    p50: Duration,
    p99: Duration,
}

fn attempt(run: &str, n: usize) -> NewAttempt {
    NewAttempt {
        tenant: "bench".into(),
        call_id: format!("call_{n}"),
        message_id: Some(format!("msg_{run}")),
        session_id: format!("session-{}", n % 32),
        parent_call_id: None,
        user_id: Some("user-1".into()),
        agent_id: Some("agent-1".into()),
        tool: "local-system".into(),
        api: "readFile".into(),
        function_name: "local-system__readFile".into(),
        arguments: json!({"path": format!("src/file_{n}.rs"), "startLine": 1, "endLine": 200}),
        tier: Some("read".into()),
        instance_id: "bench-instance".into(),
    }
}

fn settlement(n: usize) -> Settlement {
    Settlement {
        status: AttemptStatus::Executed,
        result: Some(
            json!({"content": format!("200 lines of file {n}"), "state": {"lines": 200, "truncated": false}}),
        ),
        error_kind: None,
        error: None,
        decision: Some("policy".into()),
        decided_by: Some("policy".into()),
        duration_ms: Some(3),
        exit_status: None,
    }
}

/// Runs `calls` settled calls with `in_flight` workers; returns the wall time and latencies.
async fn run(
    journal: &Arc<dyn Journal>,
    run: &str,
    calls: usize,
    in_flight: usize,
) -> (Duration, Vec<Duration>) {
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let workers: Vec<_> = (0..in_flight)
        .map(|_| {
            let journal = Arc::clone(journal);
            let next = Arc::clone(&next);
            let run = run.to_owned();
            tokio::spawn(async move {
                let mut latencies = Vec::new();
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= calls {
                        return latencies;
                    }
                    let call = Instant::now();
                    let proposed = journal.propose(&attempt(&run, n)).await.expect("propose");
                    assert!(proposed.created);
                    assert!(journal.settle("bench", &proposed.key, &settlement(n)).await.expect("settle"));
                    latencies.push(call.elapsed());
                }
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(calls);
    for worker in workers {
        latencies.extend(worker.await.expect("worker"));
    }
    (started.elapsed(), latencies)
}

async fn measure(
    backend: &'static str,
    journal: Arc<dyn Journal>,
    calls: usize,
    in_flights: &[usize],
) -> Vec<Measure> {
    let mut results = Vec::new();
    for &in_flight in in_flights {
        run(&journal, &format!("warm-{in_flight}"), (calls / 10).max(100), in_flight).await;
        let (elapsed, mut latencies) = run(&journal, &format!("run-{in_flight}"), calls, in_flight).await;
        latencies.sort();
        let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
        let measure = Measure { backend, in_flight, calls, elapsed, p50: at(0.50), p99: at(0.99) };
        eprintln!(
            "{backend} in flight {in_flight}: {:.0} settled calls/s",
            measure.calls as f64 / measure.elapsed.as_secs_f64()
        );
        results.push(measure);
    }
    results
}

/// Fills the journal with `rows` settled calls, 64 at a time.
async fn fill(journal: &Arc<dyn Journal>, rows: usize) {
    let next = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..64)
        .map(|_| {
            let journal = Arc::clone(journal);
            let next = Arc::clone(&next);
            tokio::spawn(async move {
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= rows {
                        return;
                    }
                    let mut new = attempt("pages", n);
                    if n.is_multiple_of(10) {
                        new.tool = "web".into();
                        new.api = "search".into();
                    }
                    let proposed = journal.propose(&new).await.expect("propose");
                    let mut settled = settlement(n);
                    if n.is_multiple_of(100) {
                        settled.status = AttemptStatus::Denied;
                        settled.decision = Some("deny".into());
                    }
                    journal.settle("bench", &proposed.key, &settled).await.expect("settle");
                }
            })
        })
        .collect();
    for worker in workers {
        worker.await.expect("worker");
    }
}

/// Reads pages of a journal of `rows` calls; prints a row per kind of page.
async fn pages(backend: &str, journal: Arc<dyn Journal>, rows: usize) {
    let started = Instant::now();
    fill(&journal, rows).await;
    eprintln!("{backend}: {rows} calls journalled in {:.0} s", started.elapsed().as_secs_f64());
    let page = |filter: journal::AttemptFilter| journal::AttemptFilter { limit: Some(50), ..filter };
    // The cursor half-way down: the last row of page 10 000 read through the index.
    let mut cursor = None;
    let mut seen = 0;
    while seen < rows / 2 {
        let filter =
            journal::AttemptFilter { after: cursor.clone(), limit: Some(1000), ..Default::default() };
        let got = journal.query("bench", &filter).await.expect("query");
        let Some(last) = got.last() else { break };
        seen += got.len();
        cursor = Some((last.attempted_at, last.key.clone()));
    }
    let cases = [
        ("first page", page(journal::AttemptFilter::default())),
        (
            "a page half-way down (keyset)",
            page(journal::AttemptFilter { after: cursor, ..Default::default() }),
        ),
        (
            "first page of one tool (1 in 10)",
            page(journal::AttemptFilter { tool: Some("web".into()), ..Default::default() }),
        ),
        (
            "first page of one decision (1 in 100)",
            page(journal::AttemptFilter { decision: Some("deny".into()), ..Default::default() }),
        ),
        (
            "first page of one session (1 in 32)",
            page(journal::AttemptFilter { session_id: Some("session-7".into()), ..Default::default() }),
        ),
    ];
    println!("| {backend}, {rows} calls | rows | p50 | max |");
    println!("|---|---:|---:|---:|");
    for (label, filter) in cases {
        let mut times = Vec::new();
        let mut found = 0;
        for _ in 0..20 {
            let at = Instant::now();
            found = journal.query("bench", &filter).await.expect("query").len();
            times.push(at.elapsed());
        }
        times.sort();
        println!(
            "| {label} | {found} | {:.2} ms | {:.2} ms |",
            times[times.len() / 2].as_secs_f64() * 1e3,
            times[times.len() - 1].as_secs_f64() * 1e3
        );
    }
}

fn main() {
    if std::env::args().nth(1).as_deref() == Some("pages") {
        let rows: usize =
            std::env::var("JOURNAL_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(1_000_000);
        let backend = std::env::args().nth(2).unwrap_or_else(|| "sqlite".into());
        let runtime =
            tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a Tokio runtime");
        runtime.block_on(async {
            if backend == "postgres" {
                let server = test_support::PgServer::start();
                let journal =
                    journal::open(&server.database_url("journal_pages")).await.expect("open Postgres");
                pages("Postgres 15", journal, rows).await;
            } else {
                let dir = tempfile::tempdir().expect("a temp dir");
                let url = format!("sqlite://{}?mode=rwc", dir.path().join("pages.db").display());
                pages("SQLite", journal::open(&url).await.expect("open SQLite"), rows).await;
            }
        });
        return;
    }
    let only: Vec<String> = std::env::args().skip(1).filter(|arg| !arg.starts_with("--")).collect();
    let wanted = |name: &str| only.is_empty() || only.iter().any(|arg| arg == name);
    let calls: usize =
        std::env::var("JOURNAL_BENCH_CALLS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let in_flights: Vec<usize> = std::env::var("JOURNAL_BENCH_IN_FLIGHT")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| IN_FLIGHT.to_vec());
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a Tokio runtime");
    let mut results = Vec::new();

    if wanted("sqlite") {
        let dir = tempfile::tempdir().expect("a temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("bench.db").display());
        results.extend(runtime.block_on(async {
            let journal = journal::open(&url).await.expect("open SQLite");
            measure("SQLite (file, WAL)", journal, calls, &in_flights).await
        }));
    }
    if wanted("postgres") {
        if let Ok(url) = std::env::var("JOURNAL_BENCH_POSTGRES_URL") {
            results.extend(runtime.block_on(async {
                let journal = journal::open(&url).await.expect("open Postgres");
                measure("Postgres (given server)", journal, calls, &in_flights).await
            }));
        } else if test_support::postgres_available() {
            let server = test_support::PgServer::start();
            let url = server.database_url("journal_bench");
            results.extend(runtime.block_on(async {
                let journal = journal::open(&url).await.expect("open Postgres");
                measure("Postgres 15 (loopback)", journal, calls, &in_flights).await
            }));
        } else {
            println!("postgres: skipped, initdb not found (install the postgresql package)");
        }
    }

    println!();
    println!(
        "| backend | calls in flight | calls | seconds | settled calls/s | p50 per call | p99 per call |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for m in &results {
        println!(
            "| {} | {} | {} | {:.2} | {:.0} | {:.3} ms | {:.3} ms |",
            m.backend,
            m.in_flight,
            m.calls,
            m.elapsed.as_secs_f64(),
            m.calls as f64 / m.elapsed.as_secs_f64(),
            m.p50.as_secs_f64() * 1e3,
            m.p99.as_secs_f64() * 1e3
        );
    }
}
