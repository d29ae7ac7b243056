//! Settled calls per second (one propose + one settle per call) at 1, 16 and 64 calls in flight,
//! against the SQLite journal in a temp dir and against a throwaway PostgreSQL server.
//!
//! `cargo bench -p journal --bench journal [-- sqlite|postgres]`; `JOURNAL_BENCH_CALLS` sets the
//! calls per measurement (default 20 000, after a warm-up of a tenth of that) and
//! `JOURNAL_BENCH_IN_FLIGHT` the concurrency levels (default `1,16,64`); `JOURNAL_BENCH_POSTGRES_URL`
//! measures an existing Postgres database instead of starting a throwaway server.

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

fn main() {
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
