//! Pipeline benchmarks: per-call overhead of a no-op tool without a journal, and settled calls per
//! second through the whole pipeline with the SQLite journal at 1, 16 and 64 calls in flight.
//!
//! `cargo bench -p tool-executor --bench pipeline` (what `cargo xtask bench` runs).

#[path = "../tests/common/mod.rs"]
mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::Probe;
use tool_executor::{RawCall, SessionConfig};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(async {
        overhead().await;
        throughput().await;
    });
}

async fn overhead() {
    let executor = common::executor(Arc::new(Probe::default()), None);
    let session = executor.open_session(SessionConfig {
        id: "bench".into(),
        tenant: "t".into(),
        ..SessionConfig::default()
    });
    let call = |i: usize| RawCall { id: format!("c{i}"), name: "noop".into(), arguments: "{}".into() };
    for i in 0..20_000 {
        executor.execute(&session, None, call(i)).await;
    }
    // Median of per-call times, measured in groups of 100 to keep timer overhead out.
    let mut samples = Vec::new();
    let mut i = 100_000;
    for _ in 0..500 {
        let started = Instant::now();
        for _ in 0..100 {
            i += 1;
            executor.execute(&session, None, call(i)).await;
        }
        samples.push(started.elapsed() / 100);
    }
    samples.sort();
    let median = samples[samples.len() / 2];
    let p99 = samples[samples.len() * 99 / 100];
    println!("## tool-executor: per-call overhead (no-op tool, no journal)\n");
    println!("| calls | median per call | p99 of 100-call groups |\n|---:|---:|---:|");
    println!("| {} | {:.1} µs | {:.1} µs |\n", samples.len() * 100, micros(median), micros(p99));
}

async fn throughput() {
    println!("## tool-executor: settled calls per second through the pipeline (SQLite journal)\n");
    println!("| in flight | calls | seconds | calls/s |\n|---:|---:|---:|---:|");
    for in_flight in [1usize, 16, 64] {
        let dir = tempfile::tempdir().expect("a temp dir");
        let url = format!("sqlite://{}?mode=rwc", dir.path().join("bench.db").display());
        let journal = journal::open(&url).await.expect("the journal opens");
        let executor = common::executor(Arc::new(Probe::default()), Some(journal));
        let session = executor.open_session(SessionConfig {
            id: "bench".into(),
            tenant: "t".into(),
            ..SessionConfig::default()
        });
        let total = if in_flight == 1 { 5_000 } else { 20_000 };
        let next = Arc::new(AtomicUsize::new(0));
        let run = |total: usize, offset: usize| {
            let next = next.clone();
            let workers: Vec<_> = (0..in_flight)
                .map(|_| {
                    let (executor, session, next) = (executor.clone(), session.clone(), next.clone());
                    tokio::spawn(async move {
                        loop {
                            let i = next.fetch_add(1, Ordering::Relaxed);
                            if i >= total + offset {
                                break;
                            }
                            let call =
                                RawCall { id: format!("c{i}"), name: "noop".into(), arguments: "{}".into() };
                            let result = executor.execute(&session, None, call).await;
                            assert_eq!(
                                result.status,
                                journal::AttemptStatus::Executed,
                                "{}",
                                result.output.content
                            );
                        }
                    })
                })
                .collect();
            async move {
                for worker in workers {
                    worker.await.expect("a worker");
                }
            }
        };
        next.store(0, Ordering::Relaxed);
        run(1_000, 0).await; // warm-up
        next.store(1_000, Ordering::Relaxed);
        let started = Instant::now();
        run(total, 1_000).await;
        let elapsed = started.elapsed();
        println!(
            "| {in_flight} | {total} | {:.2} | {:.0} |",
            elapsed.as_secs_f64(),
            total as f64 / elapsed.as_secs_f64()
        );
    }
    println!();
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
