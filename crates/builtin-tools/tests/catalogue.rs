//! The registry's catalogue in every provider form.

use std::sync::Arc;

use builtin_tools::Registry;
use computer_runtime::{ComputerRuntime, LocalComputer};
use serde_json::json;
use tool_core::provider::{Provider, check_openai_strict};
use tool_core::{CallContext, Services};

#[test]
fn every_builtin_api_is_openai_strict() {
    let catalogue = Registry::builtin().catalogue(Provider::Openai);
    assert!(catalogue.as_array().unwrap().len() >= 11);
    // Every tool's APIs, on by default or not.
    for entry in Registry::builtin().entries() {
        for api in &entry.manifest.apis {
            let function = Provider::Openai.declare(&api.name, api);
            if let Err(problems) = check_openai_strict(&function["function"]["parameters"]) {
                panic!("{} breaks strict mode: {problems:#?}", api.name);
            }
        }
    }
}

#[test]
fn function_names_fit_every_provider_and_resolve_back() {
    let registry = Registry::builtin();
    let names = registry.names();
    for entry in registry.entries() {
        for api in &entry.manifest.apis {
            let name = names.name_of(&entry.manifest.identifier, &api.name).unwrap().to_owned();
            assert!(name.len() <= 64 && name.chars().next().unwrap().is_ascii_alphabetic(), "{name}");
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'), "{name}");
            let (found, spec) = registry.resolve_function(&name).unwrap();
            assert_eq!(
                (found.manifest.identifier.as_str(), spec.name.as_str()),
                (entry.manifest.identifier.as_str(), api.name.as_str())
            );
        }
    }
    assert!(registry.resolve_function("local-system__nope").is_none());
    assert_eq!(registry.resolve_function("local-system__readFile").unwrap().1.name, "readFile");
}

#[test]
fn catalogue_snapshots() {
    let registry = Registry::builtin();
    let names = registry.names();
    for identifier in ["local-system", "todo", "web-browsing"] {
        let entry = registry.get(identifier).unwrap();
        for provider in Provider::ALL {
            let declared: Vec<_> = entry
                .manifest
                .apis
                .iter()
                .map(|api| provider.declare(names.name_of(identifier, &api.name).unwrap(), api))
                .collect();
            insta::assert_json_snapshot!(format!("{identifier}-{}", provider.as_str()), declared);
        }
    }
}

#[test]
fn manifests_round_trip_and_flags_are_listed() {
    let manifests = Registry::builtin().manifests();
    for item in manifests.as_array().unwrap() {
        let manifest: tool_core::ToolManifest = serde_json::from_value(item["manifest"].clone()).unwrap();
        assert_eq!(serde_json::to_value(&manifest).unwrap(), item["manifest"]);
        // Only the `api` entry, whose mounted APIs are tools of their own, is never offered.
        assert_eq!(item["flags"]["hidden"], manifest.identifier == "api");
    }
}

#[tokio::test]
async fn runtimes_build_from_services_and_report_missing_ones() {
    let registry = Registry::builtin();
    let missing = registry.runtime("local-system", &Services::new()).unwrap().err().unwrap();
    assert!(missing.to_string().contains("ComputerRuntime"), "{missing}");
    assert!(registry.runtime("nope", &Services::new()).is_none());

    let computer: Arc<dyn ComputerRuntime> = Arc::new(LocalComputer::default());
    let services = Services::new().with(computer);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), "hello\n").unwrap();
    let runtime = registry.runtime("local-system", &services).unwrap().unwrap();
    let context = CallContext::new("c", "s").with_working_directory(dir.path());
    let out = runtime.execute("readFile", json!({"path": "a.txt"}), &context).await;
    assert_eq!(out.content, "hello");
    let todo = registry.runtime("todo", &services).unwrap().unwrap();
    let out = todo.execute("todo_write", json!({"todos": []}), &context).await;
    assert!(out.success, "{}", out.content);
    let card = registry.render("todo").placeholder("todo_write", &json!({"todos": []}));
    assert_eq!(card.title, "Todo list");
}

/// A mounted API (`api-NAME`) is drawn with the `api` tool's cards; a tool no one registered
/// gets the generic ones.
#[test]
fn mounted_apis_share_the_api_tools_cards() {
    let output = tool_core::ToolOutput::ok("HTTP 200 OK (application/json, 2 bytes)\n{}").with_state(json!({
        "api": "petstore", "method": "GET", "path": "/pets/{petId}", "status": 200, "content_type": "application/json"
    }));
    let registry = Registry::builtin();
    let card = registry.render("api-petstore").result("petstore__showPetById", &json!({}), &output);
    assert_eq!(card.title, "GET /pets/{petId}");
    let generic = registry.render("mcp-files").result("files__read", &json!({}), &output);
    assert_ne!(generic.title, "GET /pets/{petId}");
}
