//! What holding commands to per-session limits adds to a command's latency: a no-op command
//! (`true`) run through `ProcessManager` with limits off (only the resource-limit floor) and on
//! (a control group per session and per command, made, entered and removed each time).
//!
//! A plain program (no harness) that prints a Markdown table:
//!
//! ```text
//! cargo bench -p computer-runtime --bench commands
//! ```
//!
//! Limits on need a control-group hierarchy this process may write (root on cgroup v1, or a
//! delegated v2 subtree); the table says which mechanism was in force.

use std::time::{Duration, Instant};

use computer_runtime::process::{CommandSpec, ProcessConfig, ProcessManager};
use sandbox::groups::Limits;
use tokio_util::sync::CancellationToken;
use tool_core::sandbox::{CallSandbox, SandboxPolicy};

const RUNS: usize = 400;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let dir = tempfile::tempdir().expect("a folder");
    println!("## A no-op command through ProcessManager, limits off and on\n");
    println!("| limits | mechanism | runs | p50 | p90 | p99 |\n|---|---|---:|---:|---:|---:|");
    // Alternating rounds, so drift of the machine falls on both alike.
    let mut times: [Vec<Duration>; 2] = [Vec::new(), Vec::new()];
    let managers = [false, true].map(|enforce| {
        ProcessManager::new(ProcessConfig {
            enforce_limits: enforce,
            limits: Limits::default(),
            ..ProcessConfig::default()
        })
    });
    runtime.block_on(async {
        for round in 0..(RUNS / 50) {
            for (which, manager) in managers.iter().enumerate() {
                for i in 0..50 {
                    let spec = CommandSpec {
                        command: "true".into(),
                        cwd: dir.path().to_path_buf(),
                        env: Vec::new(),
                        timeout: Duration::from_secs(10),
                        background: false,
                        owner: format!("session-{}", i % 4),
                        sandbox: CallSandbox { policy: SandboxPolicy::off(), ..CallSandbox::default() },
                        live: None,
                    };
                    let start = Instant::now();
                    let state = manager.run(spec, &CancellationToken::new()).await.expect("true runs");
                    let took = start.elapsed();
                    assert!(state.exit.is_some_and(|e| e.success), "round {round}");
                    times[which].push(took);
                }
            }
        }
    });
    for (which, manager) in managers.iter().enumerate() {
        let sorted = {
            let mut t = times[which].clone();
            t.sort();
            t
        };
        let at = |q: f64| sorted[((sorted.len() as f64 * q) as usize).min(sorted.len() - 1)];
        println!(
            "| {} | {} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
            if which == 0 { "off" } else { "on" },
            manager.limits().mechanism(),
            sorted.len(),
            ms(at(0.5)),
            ms(at(0.9)),
            ms(at(0.99))
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
