//! What a hook costs a call beyond its own run time: a `readFile` call through the pipeline with
//! no hooks, the same call with one `PreToolUse` hook that does nothing (`exit 0`), and that hook's
//! command run alone (`sh -c 'exit 0'` with the event on its input). The hook's overhead is the
//! second minus the first and the third.
//!
//! `cargo bench -p hooks --bench hooks` (what `cargo xtask bench` runs).

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hooks::{HookSet, Hooks, Origin};
use serde_json::json;
use tool_executor::{ApprovalMode, Executor, RawCall, SessionConfig, SessionPolicy};

const ROUNDS: usize = 400;

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a tokio runtime");
    runtime.block_on(run());
}

fn median(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    (samples[samples.len() / 2], samples[samples.len() * 95 / 100])
}

async fn run() {
    let dir = tempfile::tempdir().expect("a temp dir");
    std::fs::write(dir.path().join("a.txt"), "hello\n").expect("a file");
    // The builtin tools as a front end has them (tiers, audits and preparations included).
    let toolbox = client_executor::device::builtin_toolbox().expect("the builtin tools");
    let executor = Executor::builder(Arc::new(toolbox)).build();
    let open = |id: &str| {
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "t".into(),
            working_directory: Some(dir.path().to_path_buf()),
            policy: SessionPolicy { mode: ApprovalMode::AutoRun, ..SessionPolicy::default() },
            ..SessionConfig::default()
        })
    };
    let bare = open("bare");
    let hooked = open("hooked");
    let mut set = HookSet::default();
    let config =
        json!({"PreToolUse": [{"matcher": "Read", "hooks": [{"type": "command", "command": "exit 0"}]}]});
    set.add_value(&config, Path::new("hooks.json"), Origin::Person).expect("hooks");
    hooked.set_call_hooks(Some(Arc::new(Hooks::new(set))));
    let call = |i: usize| RawCall {
        id: format!("c{i}"),
        name: "readFile".into(),
        arguments: r#"{"path": "a.txt"}"#.into(),
    };

    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut alone = Vec::new();
    let env = computer_runtime::env::EnvPolicy::default().filter(std::env::vars());
    let input = serde_json::to_vec(
        &json!({"hook_event_name": "PreToolUse", "tool_name": "Read", "tool_input": {"file_path": "a.txt"}}),
    )
    .expect("json");
    for i in 0..ROUNDS + 20 {
        let started = Instant::now();
        executor.execute(&bare, None, call(i)).await;
        let a = started.elapsed();
        let started = Instant::now();
        executor.execute(&hooked, None, call(i)).await;
        let b = started.elapsed();
        let started = Instant::now();
        hooks::run::command("exit 0", &input, Some(dir.path()), &env, Duration::from_secs(10)).await;
        let c = started.elapsed();
        if i >= 20 {
            without.push(a);
            with.push(b);
            alone.push(c);
        }
    }
    let (without, without_p95) = median(without);
    let (with, with_p95) = median(with);
    let (alone, alone_p95) = median(alone);
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    println!("## hooks: what a hook adds to a call\n");
    println!("| readFile call | median | p95 |\n|---|---:|---:|");
    println!("| without hooks | {:.3} ms | {:.3} ms |", ms(without), ms(without_p95));
    println!("| with one no-op `PreToolUse` hook | {:.3} ms | {:.3} ms |", ms(with), ms(with_p95));
    println!(
        "| the hook's command alone (`sh -c 'exit 0'`) | {:.3} ms | {:.3} ms |",
        ms(alone),
        ms(alone_p95)
    );
    println!(
        "\nOverhead beyond the hook's own run: {:.3} ms (median; target under 2 ms).\n",
        ms(with.saturating_sub(without).saturating_sub(alone))
    );
}
