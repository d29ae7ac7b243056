//! The operator's credentials and `[apis.NAME]` tables on the server: an OpenAPI service mounted
//! from the same file as MCP servers, called by a tenant's session with the operator's
//! credential where the document's security scheme says — which no result, journal row or stored
//! byte holds — and a credentials file others can read refused.

mod common;

use std::os::unix::fs::PermissionsExt as _;

use common::{TestServer, workspace};
use serde_json::{Value, json};
use toolhost_server::AppState;

const KEY: &str = "op-key-5f0c2a9e7d41";

fn document(port: u16) -> Value {
    json!({
        "swagger": "2.0",
        "info": {"title": "Inventory", "version": "2"},
        "host": format!("127.0.0.1:{port}"),
        "basePath": "/api",
        "schemes": ["http"],
        "securityDefinitions": {"key": {"type": "apiKey", "in": "query", "name": "access_key"}},
        "security": [{"key": []}],
        "paths": {
            "/stock/{sku}": {"get": {
                "operationId": "getStock",
                "summary": "Stock of one article",
                "parameters": [{"name": "sku", "in": "path", "required": true, "type": "string"}]
            }}
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_credential_reaches_the_service_and_nothing_a_tenant_sees() {
    let service = test_support::http::Service::echo();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("inventory.json"), document(service.port()).to_string()).unwrap();
    let mounts = dir.path().join("mounts.toml");
    std::fs::write(
        &mounts,
        "[apis.inventory]\nopenapi = \"inventory.json\"\ncredential = \"inventory\"\nallow_hosts = [\"127.0.0.1\"]\n",
    )
    .unwrap();
    let credentials = dir.path().join("credentials.toml");
    std::fs::write(&credentials, format!("inventory = \"{KEY}\"\n")).unwrap();

    // A file others can read is refused at start, saying what to do.
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o644)).unwrap();
    let mut args = common::args(dir.path());
    args.mcp_config = Some(mounts.clone());
    args.credentials_file = Some(credentials.clone());
    let Err(refused) = AppState::build(args.clone()).await else { panic!("a readable credentials file") };
    assert!(format!("{refused:#}").contains("credentials"), "{refused}");
    std::fs::set_permissions(&credentials, std::fs::Permissions::from_mode(0o600)).unwrap();

    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let (_, catalogue) = server.get(&format!("/v1/sessions/{sid}/catalogue?provider=openai")).await;
    assert!(catalogue.to_string().contains("\"inventory__getStock\""), "{catalogue}");

    let result = server.call(&sid, "s1", "inventory__getStock", json!({"sku": "A-1"})).await;
    assert_eq!(result["status"], "executed", "{result}");
    let content = result["output"]["content"].as_str().unwrap();
    assert!(content.starts_with("HTTP 200 OK"), "{content}");
    assert!(content.contains("/api/stock/A-1?access_key=[redacted: inventory]"), "{content}");
    let sent = service.received().pop().unwrap();
    assert_eq!(sent.target(), format!("/api/stock/A-1?access_key={KEY}"));

    // The creds tool names it for the model; never its value.
    let listed = server.call(&sid, "s2", "listCredentials", json!({})).await;
    let text = listed["output"]["content"].as_str().unwrap();
    assert!(text.contains("- inventory (given by the operator; used by api inventory)"), "{text}");

    // No tool of a session reads the operator's file: not a command, not a file tool.
    let open = server.session(json!({"working_directory": ws.path(), "approval_mode": "auto_run"})).await;
    let read = server.call(&open, "r1", "readFile", json!({"path": credentials})).await;
    assert_ne!(read["status"], "executed", "{read}");
    assert!(read["output"]["content"].as_str().unwrap().contains("own files"), "{read}");
    let cat = server
        .call(&open, "r2", "runCommand", json!({"command": format!("cat {}", credentials.display())}))
        .await;
    assert!(!cat.to_string().contains(KEY), "{cat}");
    assert!(cat["output"]["content"].as_str().unwrap().contains("Permission denied"), "{cat}");

    let (_, rows) = server.get(&format!("/v1/journal?session_id={sid}")).await;
    assert!(rows.to_string().contains("[redacted: inventory]"), "{rows}");
    assert!(!rows.to_string().contains(KEY), "{rows}");
    let dir = server.stop().await;
    // Every byte the server stored: the journal's database and its WAL, the state folder.
    let mut stack = vec![dir.path().to_owned()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path != credentials {
                let bytes = std::fs::read(&path).unwrap();
                assert!(
                    !bytes.windows(KEY.len()).any(|w| w == KEY.as_bytes()),
                    "{} holds the key",
                    path.display()
                );
            }
        }
    }
}

/// An API of a thousand operations is not declared at once: `searchTools` finds the operation a
/// task needs, declares it, and the call goes out like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_api_waits_behind_search_and_is_found() {
    let service = test_support::http::Service::echo();
    let dir = tempfile::tempdir().unwrap();
    let mut paths = serde_json::Map::new();
    for i in 0..500 {
        paths.insert(
            format!("/widgets{i}/{{id}}"),
            json!({
                "get": {"operationId": format!("getWidget{i}"), "summary": format!("Read widget family {i}"),
                        "parameters": [{"name": "id", "in": "path", "required": true, "schema": {"type": "string"}}]},
                "delete": {"operationId": format!("deleteWidget{i}"), "summary": format!("Delete a widget of family {i}")}
            }),
        );
    }
    paths.insert(
        "/invoices/{number}/pdf".into(),
        json!({"get": {"operationId": "downloadInvoicePdf", "summary": "Download an invoice as a PDF document",
                       "parameters": [{"name": "number", "in": "path", "required": true, "schema": {"type": "string"}}]}}),
    );
    let document = json!({
        "openapi": "3.1.0",
        "info": {"title": "Warehouse", "version": "1"},
        "servers": [{"url": format!("http://127.0.0.1:{}/", service.port())}],
        "paths": paths,
    });
    std::fs::write(dir.path().join("warehouse.json"), document.to_string()).unwrap();
    let mounts = dir.path().join("mounts.toml");
    std::fs::write(
        &mounts,
        "[apis.warehouse]\nopenapi = \"warehouse.json\"\nallow_hosts = [\"127.0.0.1\"]\n",
    )
    .unwrap();
    let mut args = common::args(dir.path());
    args.mcp_config = Some(mounts);
    let server = TestServer::start_with(dir, args).await;
    let ws = workspace();
    let sid = server.session(json!({"working_directory": ws.path()})).await;
    let declared = server.declared(&sid).await;
    assert!(declared.contains(&"searchTools".into()), "{declared:?}");
    assert!(!declared.iter().any(|n| n.starts_with("warehouse__")), "deferred: {} declared", declared.len());

    let found = server.call(&sid, "s1", "searchTools", json!({"query": "download an invoice pdf"})).await;
    assert_eq!(found["status"], "executed", "{found}");
    assert!(
        found["output"]["content"].as_str().unwrap().contains("warehouse__downloadInvoicePdf("),
        "{found}"
    );
    let declared = server.declared(&sid).await;
    assert!(declared.contains(&"warehouse__downloadInvoicePdf".into()), "{declared:?}");

    let result = server.call(&sid, "c1", "warehouse__downloadInvoicePdf", json!({"number": "2026-17"})).await;
    assert_eq!(result["status"], "executed", "{result}");
    assert_eq!(service.received().pop().unwrap().target(), "/invoices/2026-17/pdf");
    server.stop().await;
}
