//! The code interpreter and the calculator end to end through the pipeline (no journal): a small
//! in-process computation, a warm call of the full Python interpreter, the first call of a
//! session (the interpreter starting in its sandbox), and two calculations (a short one, a long sum).
//!
//! `cargo bench -p tool-executor --bench code` (what `cargo xtask bench` runs).

use std::sync::Arc;
use std::time::{Duration, Instant};

use builtin_tools::Registry;
use computer_runtime::{ComputerRuntime, LocalComputer};
use tool_core::Services;
use tool_executor::{ApprovalMode, Executor, RawCall, Session, SessionConfig, SessionPolicy, Toolbox};

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("a temp dir");
        let (executor, computer) = executor();
        println!("## code interpreter and calculator, end to end through the pipeline (no journal)\n");
        println!("| call | calls | p50 | p99 |\n|---|---:|---:|---:|");
        let session = open(&executor, dir.path(), "warm");
        let in_process = r#"{"language": "python", "code": "xs = [i * i for i in range(100)]\nsum(xs) % 7"}"#;
        report(
            "runCode, in-process (sum of 100 squares)",
            &measure(&executor, &session, "runCode", in_process, 2_000).await,
        );
        let warm = r#"{"language": "python", "code": "1 + 1", "engine": "full"}"#;
        measure(&executor, &session, "runCode", warm, 5).await;
        report(
            "runCode, full Python, warm (`1 + 1`)",
            &measure(&executor, &session, "runCode", warm, 300).await,
        );
        let mut first = Vec::new();
        for n in 0..20 {
            let fresh = open(&executor, dir.path(), &format!("fresh-{n}"));
            first.extend(measure(&executor, &fresh, "runCode", warm, 1).await);
            computer.end_owner(fresh.id()).await;
        }
        report("runCode, full Python, first call of a session", &first);
        let calc = r#"{"expression": "2^200 + 1/3"}"#;
        report("calculate (`2^200 + 1/3`)", &measure(&executor, &session, "calculate", calc, 500).await);
        // fend reads a `+` chain in quadratic time; the calculator adds a long plain one up in runs.
        let sum = serde_json::json!({ "expression": format!("1{}", "+1".repeat(999)) }).to_string();
        report(
            "calculate (a sum of 1 000 ones, 1 999 characters)",
            &measure(&executor, &session, "calculate", &sum, 100).await,
        );
    });
}

fn executor() -> (Executor, Arc<dyn ComputerRuntime>) {
    let computer: Arc<dyn ComputerRuntime> = Arc::new(LocalComputer::default());
    let services = Services::new().with(computer.clone());
    let mut toolbox = Toolbox::new();
    for (manifest, runtime) in Registry::builtin().available_runtimes(&services).0 {
        toolbox.add_tool(manifest, runtime).expect("a tool");
    }
    for (name, audit) in builtin_tools::audits() {
        toolbox.add_audit(*name, *audit);
    }
    for (name, tier) in builtin_tools::tiers() {
        toolbox.add_tier(*name, *tier);
    }
    for (tool, api, prepare) in builtin_tools::preparations() {
        toolbox.add_prepare(tool, api, *prepare);
    }
    (Executor::builder(Arc::new(toolbox)).build(), computer)
}

fn open(executor: &Executor, dir: &std::path::Path, id: &str) -> Arc<Session> {
    let temp = dir.join(format!("temp-{id}"));
    std::fs::create_dir_all(&temp).expect("a temp folder");
    executor.open_session(SessionConfig {
        id: id.into(),
        tenant: "t".into(),
        working_directory: Some(dir.to_path_buf()),
        temp_directory: Some(temp),
        policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
        ..SessionConfig::default()
    })
}

async fn measure(
    executor: &Executor,
    session: &Arc<Session>,
    name: &str,
    arguments: &str,
    n: usize,
) -> Vec<Duration> {
    let mut samples = Vec::with_capacity(n);
    for i in 0..n {
        let call = RawCall { id: format!("c{i}"), name: name.into(), arguments: arguments.into() };
        let started = Instant::now();
        let result = executor.execute(session, None, call).await;
        samples.push(started.elapsed());
        assert!(result.output.success, "{}", result.output.content);
    }
    samples
}

fn report(label: &str, samples: &[Duration]) {
    let mut sorted = samples.to_vec();
    sorted.sort();
    let at = |q: usize| sorted[(sorted.len() * q / 100).min(sorted.len() - 1)];
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("| {label} | {} | {:.3} ms | {:.3} ms |", sorted.len(), ms(at(50)), ms(at(99)));
}
